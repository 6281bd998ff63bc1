"""Gaussian, Laplace and exponential mechanisms: costs recomputed from Rogers (unknown-domain) Thm 1, 3, 4, 5 and the Thm 7 proof,
noise laws checked by KS / χ² at p = 1e-6 with fixed seeds."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from streamdp.mechanisms.exponential import ExponentialMechanism, exponential_mechanism_cost, pure_dp_cost
from streamdp.mechanisms.gaussian import GaussianMechanism, gaussian_cost, gaussian_sigma
from streamdp.mechanisms.laplace import LaplaceMechanism, laplace_cost, laplace_pure_epsilon
from streamdp.noise.generator import unsafe_seeded_generator

P = 1e-6


# ------------------------------------------------------------------------------------------------------- costs
def test_gaussian_cost_thm4():
    c = gaussian_cost(sigma=2.0, l2_sensitivity=3.0)
    assert c.zcdp_rho == pytest.approx(3.0**2 / (2 * 2.0**2))
    assert c.zcdp_delta == 0.0
    assert gaussian_sigma(c.zcdp_rho, 3.0) == pytest.approx(2.0)
    assert GaussianMechanism(2.0, 3.0).cost() == c
    with pytest.raises(ValueError, match="sigma"):
        gaussian_cost(0.0, 1.0)
    with pytest.raises(ValueError, match="l2_sensitivity"):
        gaussian_cost(1.0, float("inf"))


def test_laplace_cost_per_differing_count_not_l1():
    b, linf, l0 = 2.0, 3.0, 4
    c = laplace_cost(b, linf, l0)
    assert c.zcdp_rho == pytest.approx(l0 * (linf / b) ** 2 / 2)  # Rogers (unknown-domain) Thm 7 proof: 4.5
    l1_route = (l0 * linf / b) ** 2 / 2  # Δ1 = Δ0Δ∞ then Thm 3: 18
    assert c.zcdp_rho < l1_route and l1_route / c.zcdp_rho == pytest.approx(l0)
    assert laplace_pure_epsilon(b, l0 * linf) == pytest.approx(6.0)
    assert LaplaceMechanism(b, linf, l0).cost() == c
    with pytest.raises(ValueError, match="l0_sensitivity"):
        laplace_cost(1.0, 1.0, 0)
    with pytest.raises(ValueError, match="l0_sensitivity"):
        laplace_cost(1.0, 1.0, 1.5)


def test_exponential_and_pure_costs():
    assert exponential_mechanism_cost(0.8).zcdp_rho == pytest.approx(0.8**2 / 8)  # Rogers (unknown-domain) Thm 5
    assert exponential_mechanism_cost(0.8, 5).zcdp_rho == pytest.approx(5 * 0.8**2 / 8)
    assert exponential_mechanism_cost(0.8, 0).is_zero()
    assert pure_dp_cost(0.8).zcdp_rho == pytest.approx(0.8**2 / 2)  # Rogers (unknown-domain) Thm 3
    assert ExponentialMechanism(0.8).cost(3).zcdp_rho == pytest.approx(3 * 0.08)
    with pytest.raises(ValueError, match="selections"):
        exponential_mechanism_cost(1.0, -1)
    with pytest.raises(ValueError, match="epsilon"):
        ExponentialMechanism(0.0)


# ------------------------------------------------------------------------------------------------------ noise
@pytest.mark.statistical
def test_gaussian_mechanism_noise_law():
    rng = unsafe_seeded_generator(11)
    sigma, n = 2.5, 200_000
    x = np.linspace(-5, 5, n)
    z = GaussianMechanism(sigma, 1.0).release(x, rng, unsafe_rng=True) - x
    assert stats.kstest(z, stats.norm(scale=sigma).cdf).pvalue > P
    assert abs(z.mean()) < 5.5 * sigma / math.sqrt(n)
    assert z.var() == pytest.approx(sigma**2, rel=5.5 * math.sqrt(2 / n))
    # a wrong scale is rejected by the same test (the test can fail)
    assert stats.kstest(z, stats.norm(scale=sigma * 1.03).cdf).pvalue < P


@pytest.mark.statistical
def test_laplace_mechanism_noise_law():
    rng = unsafe_seeded_generator(12)
    b, n = 1.7, 200_000
    z = LaplaceMechanism(b, 1.0, 1).release(np.zeros(n), rng, unsafe_rng=True)
    assert stats.kstest(z, stats.laplace(scale=b).cdf).pvalue > P
    assert abs(z.mean()) < 5.5 * math.sqrt(2) * b / math.sqrt(n)
    assert z.var() == pytest.approx(2 * b * b, rel=0.03)
    assert stats.kstest(z, stats.laplace(scale=b * 1.04).cdf).pvalue < P


@pytest.mark.statistical
def test_exponential_mechanism_selection_law():
    rng = unsafe_seeded_generator(13)
    eps, rs = 1.2, 2.0
    scores = np.array([0.0, 1.0, 2.5, 3.0, 4.0])
    w = np.exp(eps * scores / rs)  # Rogers (unknown-domain) Thm 2/5: Pr ∝ exp(ε q/Δ(q))
    m = ExponentialMechanism(eps, rs)
    n = 20_000
    picks = np.array([m.select(rng, scores) for _ in range(n)])
    obs = np.bincount(picks, minlength=scores.size)
    assert stats.chisquare(obs, n * w / w.sum()).pvalue > P


@pytest.mark.statistical
def test_select_ranked_is_peeling():
    rng = unsafe_seeded_generator(14)
    scores = np.array([3.0, 0.0, 1.0, 2.0])
    m = ExponentialMechanism(0.7)
    w = np.exp(0.7 * scores)
    pairs = list(itertools.permutations(range(4), 2))
    expected = np.array([w[i] / w.sum() * w[j] / (w.sum() - w[i]) for i, j in pairs])
    n = 20_000
    counts = dict.fromkeys(pairs, 0)
    for _ in range(n):
        i, j = m.select_ranked(rng, scores, 2)
        counts[(int(i), int(j))] += 1
    assert stats.chisquare([counts[p] for p in pairs], n * expected).pvalue > P
    with pytest.raises(ValueError, match="k must be"):
        m.select_ranked(rng, scores, 5)


# ------------------------------------------------------------------------------------- the public surface
def test_mechanisms_refuse_a_generator_that_is_not_the_secure_one():
    """Review of 2026-12-06: GaussianMechanism(sigma=2).release(numpy.random.default_rng(1), [10.0]) returned
    10.69116838 — float noise on a float from a seeded generator, silently. Now the values come first, the noise is
    from the secure generator unless the caller says unsafe_rng=True, and floats are released on the grid."""
    from streamdp.mechanisms.granular_gaussian import granularity
    from streamdp.noise.generator import secure_generator

    m = GaussianMechanism(2.0)
    with pytest.raises(TypeError, match="values come first"):
        m.release(np.random.default_rng(1), [10.0])
    with pytest.raises(ValueError, match="unsafe_rng=True"):
        m.release([10.0], np.random.default_rng(1))
    with pytest.raises(ValueError, match="unsafe_rng=True"):
        LaplaceMechanism(2.0).release([10.0], unsafe_seeded_generator(1))
    out = m.release(np.array([10.0, 11.0, 12.5]))  # rng=None: a fresh secure generator
    s = float(m.release([10.0], secure_generator())[0])
    g = granularity(2.0)  # 2^(1 - 30): every float release is a multiple of the public grid step
    assert all(float(v) / g == int(float(v) / g) for v in out) and s / g == int(s / g)
    assert m.release(np.array([3, 4])).dtype == np.int64  # counts stay integers (discrete Gaussian)
    lap = LaplaceMechanism(2.0, 1.0, 1).release(np.array([1.5]))
    from streamdp.mechanisms.granular_laplace import laplace_granularity

    gl = laplace_granularity(1.0, 0.5)
    assert float(lap[0]) / gl == int(float(lap[0]) / gl)


def test_the_grid_release_keeps_the_cost_exact():
    """σ′ = σ·(Δ2 + √m·g)/Δ2 with g the grid of σ′: then (Δ2 + √m·g)²/(2σ′²) ≤ Δ2²/(2σ²), the stated cost."""
    from fractions import Fraction

    from streamdp.mechanisms.gaussian import grid_sigma
    from streamdp.mechanisms.granular_gaussian import granularity

    for sigma, d2, m in [(2.0, 1.0, 1), (0.7, 3.0, 1000), (1e-3, 1e-4, 7), (1.999999, 0.5, 4)]:
        s = grid_sigma(sigma, d2, m)
        g = granularity(s)
        lhs = (Fraction(d2) + Fraction(math.sqrt(m)) * Fraction(g)) ** 2 / (2 * Fraction(s) ** 2)
        assert lhs <= Fraction(d2) ** 2 / (2 * Fraction(sigma) ** 2) * (1 + Fraction(1, 10**15))
        assert s == pytest.approx(sigma, rel=1e-6)
