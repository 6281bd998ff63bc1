"""Smith's private quantile (Rameshwar–Tandon (IoT means) §III-E; Smith 2011 Alg. 2): the law over gaps, uniformity, privacy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from streamdp.mechanisms.grid_means import private_interquantile_interval, smith_quantile
from streamdp.mechanisms.grid_means.interquantile import smith_quantile_probabilities
from streamdp.noise.generator import unsafe_seeded_generator

P_MIN = 1e-6


def gap_probabilities_by_formula(values, q, eps, lo, hi, du=1):
    """P(i) ∝ c_i·exp(−ε|i − qn|/(2Δu)) (implementation notes on Rameshwar–Tandon (IoT means), on the public grid of the module docstring): c_i = the
    number of grid points lo + j·h, h = 2^(⌊log2(hi − lo)⌋ − 20), with exactly i values strictly below them,
    counted here over every grid point; c_i → (x_(i+1) − x_(i))/h, the paper's gap width."""
    h = 2.0 ** (math.floor(math.log2(hi - lo)) - 20)
    grid = lo + np.arange(int((hi - lo) // h) + 1) * h
    rank = np.searchsorted(np.sort(np.clip(values, lo, hi)), grid, side="left")
    c = np.bincount(rank, minlength=len(values) + 1)
    n = len(values)
    w = [c[i] * math.exp(-eps * abs(i - q * n) / (2 * du)) for i in range(n + 1)]
    s = sum(w)
    return [v / s for v in w]


def test_gap_probabilities_hand_example():
    # values 2, 3, 7 in [0, 10], q = 1/2 → qn = 1.5; h = 2⁻¹⁷: grid points of rank 0, 1, 2, 3 are [0, 2] (2·2¹⁷ + 1),
    # (2, 3] (2¹⁷), (3, 7] (4·2¹⁷), (7, 10] (3·2¹⁷) — the widths 2, 1, 4, 3 up to one point; |i − qn| = 1.5, .5, .5, 1.5
    expected = gap_probabilities_by_formula([7, 2, 3], 0.5, 1.0, 0.0, 10.0)
    u = 2**17
    w = np.array([(2 * u + 1) * math.exp(-0.75), u * math.exp(-0.25), 4 * u * math.exp(-0.25), 3 * u * math.exp(-0.75)])
    np.testing.assert_allclose(expected, w / w.sum(), rtol=1e-14)
    edges, p = smith_quantile_probabilities([7, 2, 3], 0.5, 1.0, 0.0, 10.0)
    np.testing.assert_array_equal(edges, [0, 2 + 1 / u, 3 + 1 / u, 7 + 1 / u, 10 + 1 / u])
    np.testing.assert_allclose(p, expected, rtol=1e-12)
    _, p2 = smith_quantile_probabilities([7, 2, 3], 0.1, 1.0, 0.0, 10.0, utility_sensitivity=2)
    np.testing.assert_allclose(p2, gap_probabilities_by_formula([7, 2, 3], 0.1, 1.0, 0, 10, du=2), rtol=1e-12)


def test_ties_and_values_outside_the_range():
    # duplicate values make zero-width gaps (never drawn); values outside [lo, hi] are clipped first
    _, p = smith_quantile_probabilities([5, 5, 12, -1], 0.5, 1.0, 0.0, 10.0)
    expected = gap_probabilities_by_formula([5, 5, 10, 0], 0.5, 1.0, 0.0, 10.0)
    np.testing.assert_allclose(p, expected, rtol=1e-12)
    assert p[2] == 0 and p[4] == 0  # between the two 5s, and above the clipped 12 = hi: no grid point
    assert p[0] > 0  # the single grid point lo = 0 has rank 0 (the clipped −1 is not below it)
    rng = unsafe_seeded_generator(3)
    draws = [smith_quantile([5, 5, 12, -1], 0.5, 1.0, 0.0, 10.0, rng) for _ in range(2000)]
    assert all(0.0 <= d <= 10.0 for d in draws)


@pytest.mark.statistical
def test_gap_law_chi2_and_uniform_within_gap():
    values, q, eps, lo, hi = [2.0, 3.0, 7.0, 7.5, 9.0], 0.3, 1.5, 0.0, 10.0
    p = np.array(gap_probabilities_by_formula(values, q, eps, lo, hi))
    rng = unsafe_seeded_generator(77)
    n = 40_000
    draws = np.array([smith_quantile(values, q, eps, lo, hi, rng) for _ in range(n)])
    gap = np.searchsorted(np.sort(values), draws, side="left")  # # values below the draw
    assert stats.chisquare(np.bincount(gap, minlength=len(values) + 1), n * p).pvalue > P_MIN
    inside = draws[gap == 2]  # gap (3, 7)
    assert stats.kstest(inside, stats.uniform(loc=3.0, scale=4.0).cdf).pvalue > P_MIN


def _density(values, q, eps, lo, hi, x, du):
    """The probability of the grid point just below each x (the output law is over grid points)."""
    edges, p = smith_quantile_probabilities(values, q, eps, lo, hi, du)
    h = 2.0 ** (math.floor(math.log2(hi - lo)) - 20)
    j = np.floor((x - lo) / h)
    i = np.searchsorted(np.rint((edges - lo) / h), j, side="right") - 1
    return p[i] / np.diff(np.rint((edges - lo) / h))[i]


def test_exact_privacy_density_ratio():
    """Output densities of neighbouring inputs differ by at most e^ε everywhere (BestFit: one value moves,
    Δu = 1; WrapAround: two values move, Δu = 2)."""
    lo, hi, eps = 0.0, 10.0, 0.8
    gen = unsafe_seeded_generator(9)
    xs = np.linspace(0.013, 9.987, 700)
    spots = np.linspace(0.05, 9.95, 12)
    for q in (0.1, 0.5, 0.9):
        base = np.sort(gen.uniform(lo, hi, size=7))
        d0 = {du: _density(base, q, eps, lo, hi, xs, du) for du in (1, 2)}
        worst1 = worst2 = 0.0
        for s in spots:
            other = base.copy()
            other[3] = s
            worst1 = max(worst1, np.max(np.abs(np.log(d0[1] / _density(other, q, eps, lo, hi, xs, 1)))))
            for s2 in spots:
                other2 = other.copy()
                other2[5] = s2
                worst2 = max(worst2, np.max(np.abs(np.log(d0[2] / _density(other2, q, eps, lo, hi, xs, 2)))))
        assert worst1 <= eps + 1e-9
        assert worst2 <= eps + 1e-9


def test_interval_is_ordered_and_concentrates_for_large_epsilon():
    rng = unsafe_seeded_generator(4)
    vals = np.linspace(40, 60, 101)
    for _ in range(200):
        a, b = private_interquantile_interval(vals, 0.1, 0.9, 0.05, 0.0, 100.0, rng)
        assert 0.0 <= a <= b <= 100.0
    a, b = private_interquantile_interval(vals, 0.1, 0.9, 200.0, 0.0, 100.0, rng)
    assert a == pytest.approx(42.0, abs=0.5) and b == pytest.approx(58.0, abs=0.5)
    with pytest.raises(ValueError, match="q"):
        smith_quantile(vals, 1.5, 1.0, 0.0, 100.0, rng)
    with pytest.raises(ValueError, match="epsilon"):
        smith_quantile(vals, 0.5, 0.0, 0.0, 100.0, rng)


def test_quantile_costs_are_exponential_mechanism_costs():
    from streamdp.accounting.cost import Cost
    from streamdp.mechanisms.grid_means.interquantile import (
        private_interquantile_interval_cost,
        smith_quantile_cost,
    )

    # Smith's mechanism is an exponential mechanism (utility −|rank − qn|, weights exp(−ε|…|/2)): ε²/8 (Rogers (unknown-domain) Thm 5)
    assert smith_quantile_cost(0.25) == Cost(zcdp_rho=0.25**2 / 8)
    # two ends at ε_each compose in zCDP (Rogers (unknown-domain) Thm 6): 2·ε_each²/8
    assert private_interquantile_interval_cost(0.25) == Cost(zcdp_rho=2 * 0.25**2 / 8)


def test_draws_are_points_of_the_public_grid():
    """A point drawn uniformly inside a gap in floating point could reach floats that depend on the data values
    at the gap's ends (Mironov 2012; twelfth-session noise review): every draw is lo + j·h for an integer j."""
    rng = unsafe_seeded_generator(21)
    for lo, hi in ((0.0, 10.0), (0.0, 100.0), (-3.0, 7.25)):
        h = 2.0 ** (math.floor(math.log2(hi - lo)) - 20)
        vals = rng.uniform(lo, hi, size=9) + 1e-9  # data values off the grid
        for _ in range(300):
            x = smith_quantile(vals, 0.3, 1.0, lo, hi, rng)
            j = (x - lo) / h
            assert j == int(j) and lo <= x <= hi
