"""The granular Gaussian mechanism (mechanisms/granular_gaussian.py): float coordinates released as
g·(rint(v/g) + N_Z(0, (σ/g)²)) on a public power-of-two grid, ρ-CGP w.r.t. dist + √m·g (review 12).

Known answers from the module's formulas written out by hand; the noise law by KS/mean/variance against N(0, σ²)
(with power against σ/2 and 2σ); every output on the grid; and the guarantee checked on the indices the code
actually computes: the index-distance lemma, the exact Rényi divergence of the discrete Gaussian on an integer
shift (by direct summation at small scales), the tight case d → 0 that makes the additive distance necessary, and a
Monte-Carlo D_2 of the privacy-loss random variable of real outputs.
"""

from __future__ import annotations

import math
import types

import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

import streamdp.mechanisms.granular_gaussian as gg
from streamdp.mechanisms.granular_gaussian import (GRID_BITS, granular_gaussian, granularity, grid_distance,
                                                   grid_index)
from streamdp.noise import discrete
from streamdp.noise.generator import unsafe_seeded_generator

P_MIN = 1e-6


# ------------------------------------------------------------------------------------------------ known answers
def test_grid_and_scale_known_answers():
    assert GRID_BITS == 30
    assert granularity(1.0) == 2.0**-30
    assert granularity(1000.0) == 2.0**-21  # 1000 ∈ [2⁹, 2¹⁰): 2^(9 − 30)
    assert granularity(1 / math.sqrt(2 * 5e-8)) == 2.0**-19  # Liang–Yi (CGP)'s smallest ρ per m²: σ = 3162 m ∈ [2¹¹, 2¹²)
    assert granularity(0.75) == 2.0**-31  # 0.75 ∈ [2⁻¹, 1)
    for sigma in (1e-6, 0.3, 1.0, 1000.0, 3.3e7, 2.0**40, 1e200, 2.0**-960, 2.0**960):
        g = granularity(sigma)
        s = sigma / g
        assert 2.0**30 <= s < 2.0**31  # σ_Z = σ/g, exact, far inside the sampler's range
        assert s <= discrete.MAX_SCALE / 2.0**9
        assert g == 2.0 ** (math.floor(math.log2(sigma)) - 30)
    # the additive distance a/K = √m·g/K
    assert grid_distance(1000.0) == math.sqrt(2) * 2.0**-21  # ≈ 0.67 µm for σ = 1 km
    assert grid_distance(1000.0) == pytest.approx(6.7435e-7, rel=1e-4)
    assert grid_distance(1000.0, 3, lipschitz=math.sqrt(2) / 5) == math.sqrt(3) * 2.0**-21 / (math.sqrt(2) / 5)
    assert grid_distance(1 / math.sqrt(2 * 5e-8)) == pytest.approx(2.697e-6, rel=1e-3)  # ≈ 2.7 µm
    for sigma in (1e-3, 1.0, 1e3, 1e6):  # a ≤ √m·2⁻³⁰·σ
        assert grid_distance(sigma, 2) <= math.sqrt(2) * 2.0**-30 * sigma


def test_known_answer_with_stubbed_noise(monkeypatch):
    """σ = 1: g = 2⁻³⁰, rint(0.3·2³⁰) = rint(322122547.2) = 322122547; with Z = (5, −7) the release is
    (322122547 + 5)·2⁻³⁰ and (rint(−2.5·2³⁰) − 7)·2⁻³⁰ — one sampler call for all coordinates, at s = σ/g = 2³⁰."""
    calls = []

    def stub(rng, sigma, size=None):
        calls.append((sigma, size))
        return np.array([5, -7], dtype=np.int64).reshape(size)

    monkeypatch.setattr(gg, "samplers", types.SimpleNamespace(discrete_gaussian=stub))
    out = granular_gaussian(None, np.array([0.3, -2.5]), 1.0)
    assert calls == [(2.0**30, (2,))]
    assert out[0] == (322122547 + 5) * 2.0**-30
    assert out[1] == (-2684354560 - 7) * 2.0**-30  # −2.5·2³⁰ is an integer already
    assert grid_index([0.3, -2.5], 2.0**-30).tolist() == [322122547.0, -2684354560.0]


def test_shapes_and_bad_input():
    rng = unsafe_seeded_generator(1)
    assert granular_gaussian(rng, np.zeros((7, 3)), 2.0).shape == (7, 3)
    assert np.shape(granular_gaussian(rng, 1.5, 2.0)) == ()
    for bad in (0.0, -1.0, math.inf, math.nan, True, "1", 2.0**-1000, 2.0**1000, np.ones(2)):
        with pytest.raises(ValueError, match="sigma"):
            granular_gaussian(rng, 0.0, bad)
    with pytest.raises(ValueError, match="finite"):
        granular_gaussian(rng, [0.0, math.nan], 1.0)
    with pytest.raises(ValueError, match="too large"):
        granular_gaussian(rng, 1e300, 1e-6)  # v/g overflows
    with pytest.raises(ValueError, match="coords"):
        grid_distance(1.0, 0)
    with pytest.raises(ValueError, match="lipschitz"):
        grid_distance(1.0, 2, lipschitz=0.0)


# ------------------------------------------------------------------------------------------------ noise law
@pytest.mark.statistical
@pytest.mark.parametrize("x,sigma,seed", [(0.0, 1.0, 11), (46.675, 25.0, 12), (1234567.891, 3162.2776601683795, 13),
                                          (-3.3e-3, 1e-3, 14)])
def test_noise_is_gaussian_sigma(x, sigma, seed):
    rng = unsafe_seeded_generator(seed)
    n = 200_000
    out = granular_gaussian(rng, np.full((n // 2, 2), x), sigma)
    z = ((out - x) / sigma).ravel()
    assert stats.kstest(z, "norm").pvalue > P_MIN
    assert abs(z.mean()) < 5 / math.sqrt(n)
    assert abs(z.var(ddof=1) - 1) < 5 * math.sqrt(2 / n)
    # power: half and double σ are refused
    assert stats.kstest(z * 2, "norm").pvalue < P_MIN
    assert stats.kstest(z / 2, "norm").pvalue < P_MIN


@pytest.mark.parametrize("sigma", [1e-3, 1.0, 1000.0, 3.0e5])
def test_every_output_is_on_the_grid(sigma):
    rng = unsafe_seeded_generator(21)
    x = rng.uniform(-2e7, 2e7, (5000, 2))
    x[:10] = rng.uniform(-1, 1, (10, 2)) * sigma  # small coordinates too
    g = granularity(sigma)
    out = granular_gaussian(rng, x, sigma)
    idx = out / g
    assert np.all(idx == np.rint(idx))
    assert np.all(np.abs(out - x) < 8 * sigma + g)


# ------------------------------------------------------------------------------------------------ the guarantee
def _grid_pairs(rng, sigma, m):
    """Neighbouring inputs (v, v'): generic pairs at distances from 10⁻¹² σ to 3σ, and pairs straddling a rounding
    boundary in every coordinate at a distance of ~10⁻⁶ g (the tight case)."""
    g = granularity(sigma)
    pairs = []
    for scale in (1e-12, 1e-6, 1e-3, 0.1, 1.0, 3.0):
        for _ in range(50):
            v = rng.uniform(-1e4, 1e4, m) * sigma
            pairs.append((v, v + rng.normal(0, scale * sigma, m)))
    base = np.floor(rng.uniform(-1e6, 1e6, m)) * g
    eps = 2.0**-20
    pairs.append((base + (0.5 - eps) * g, base + (0.5 + eps) * g))
    v = rng.uniform(-1e4, 1e4, m) * sigma
    v2 = v.copy()
    v2[0] = v[0] + 0.3 * sigma  # one coordinate moves: m≠ = 1
    pairs.append((v, v2))
    return pairs


@pytest.mark.parametrize("sigma,m", [(1.0, 2), (1000.0, 2), (0.37, 3), (5e4, 1)])
def test_index_distance_and_renyi_bound_on_the_computed_indices(sigma, m):
    """Step 1 (‖k − k'‖ ≤ ‖v − v'‖/g + √m≠) and 3 (D_α = α‖k − k'‖²/(2s²) ≤ α·ρ·(d + √m≠·g)², ρ = 1/(2σ²)) on the
    indices grid_index really computes; D_α/α = ‖Δ‖²/(2s²) is exact for integer α (step 2, checked below)."""
    rng = unsafe_seeded_generator(31)
    g = granularity(sigma)
    s = sigma / g
    rho = 1 / (2 * sigma**2)
    for v, v2 in _grid_pairs(rng, sigma, m):
        k, k2 = grid_index(v, g), grid_index(v2, g)
        delta = k - k2
        assert np.all(delta == np.rint(delta))
        d = float(np.linalg.norm(v - v2))
        m_ne = int(np.count_nonzero(v != v2))
        assert np.linalg.norm(delta) <= d / g + math.sqrt(m_ne) + 1e-9
        renyi_over_alpha = float(delta @ delta) / (2 * s * s)  # exact: ‖Δ‖² is an integer
        assert renyi_over_alpha <= rho * (d + math.sqrt(m_ne) * g) ** 2 * (1 + 1e-12)
        assert renyi_over_alpha <= rho * (d + grid_distance(sigma, m)) ** 2 * (1 + 1e-12)


def test_the_additive_distance_is_needed_and_tight():
    """Two locations 2⁻¹⁹·g apart per coordinate, straddling a rounding boundary, get indices 1 apart in each
    coordinate: D_α/α = m/(2s²) = ρ·(√m·g)² exactly, while ρ·d² is 2³⁸ times smaller — no multiplicative ρ covers
    d → 0, so the guarantee is stated with the distance d + √m·g."""
    sigma, m = 1000.0, 2
    g = granularity(sigma)
    s = sigma / g
    rho = 1 / (2 * sigma**2)
    v = np.array([(0.5 - 2.0**-20) * g, (7.5 - 2.0**-20) * g])
    v2 = v + 2.0**-19 * g
    delta = grid_index(v, g) - grid_index(v2, g)
    assert delta.tolist() == [-1.0, -1.0]
    d = float(np.linalg.norm(v - v2))
    a = grid_distance(sigma, m)
    renyi_over_alpha = float(delta @ delta) / (2 * s * s)
    assert renyi_over_alpha == pytest.approx(rho * a * a, rel=1e-15)
    assert renyi_over_alpha <= rho * (d + a) ** 2
    assert renyi_over_alpha > 2.0**37 * rho * d * d


def _dg_logpmf(y, mu, s):
    """log N_Z(μ, s²) at integers y (normalised by direct summation)."""
    lo, hi = int(mu - 60 * s - 10), int(mu + 60 * s + 10)
    ys = np.arange(lo, hi + 1)
    lognorm = logsumexp(-((ys - mu) ** 2) / (2 * s * s))
    return -((y - mu) ** 2) / (2 * s * s) - lognorm


@pytest.mark.parametrize("s", [0.4, 0.7, 2.5, 6.0])
@pytest.mark.parametrize("shift", [(1,), (3,), (1, 2), (1, 1, 1)])
def test_renyi_divergence_of_integer_shifts_by_direct_summation(s, shift):
    """Step 2 of the proof: for μ − ν ∈ ℤ^m, D_α(N_Z(μ, s²I) ‖ N_Z(ν, s²I)) = α‖μ − ν‖²/(2s²) for integer α and ≤
    for every α > 1 (Poisson summation: a shifted theta sum is at most the centred one). Coordinates independent."""
    shift = np.array(shift)
    for alpha in (1.5, 2.0, 2.7, 3.0, 5.0):
        total = 0.0
        for dj in shift:
            ys = np.arange(int(-60 * s - abs(dj) - 10), int(60 * s + abs(dj) + 11))
            lp, lq = _dg_logpmf(ys, 0, s), _dg_logpmf(ys, int(dj), s)
            total += logsumexp(alpha * lp + (1 - alpha) * lq) / (alpha - 1)
        bound = alpha * float(shift @ shift) / (2 * s * s)
        if alpha == int(alpha):
            assert total == pytest.approx(bound, rel=1e-9, abs=1e-12)
        else:
            assert total <= bound * (1 + 1e-9) + 1e-12
            assert total >= 0.0


@pytest.mark.statistical
def test_privacy_loss_of_real_outputs_d2_monte_carlo():
    """Outputs y of granular_gaussian at v; their privacy loss against v' from the discrete Gaussian pmf on the grid
    indices: L(y) = log P_v(y) − log P_v'(y) = (‖j − k'‖² − ‖j − k‖²)/(2s²) (same normaliser), j = y/g. Its mean is
    the KL = ‖Δ‖²/(2s²) and log E[e^L] = D_2 = 2‖Δ‖²/(2s²) ≤ 2ρ(d + √2·g)² — estimated on 200 000 real outputs."""
    rng = unsafe_seeded_generator(41)
    sigma = 1000.0
    g = granularity(sigma)
    s = sigma / g
    rho = 1 / (2 * sigma**2)
    v = np.array([123456.789, -98765.4321])
    v2 = v + np.array([0.3, 0.4]) * sigma  # d = σ/2
    k, k2 = grid_index(v, g), grid_index(v2, g)
    delta = k - k2
    n = 200_000
    y = granular_gaussian(rng, np.tile(v, (n, 1)), sigma)
    j = y / g
    assert np.all(j == np.rint(j))  # every output is on the grid, so P_v'(y) > 0: no output is impossible for v'
    zz = j - k  # exact integers (|j| < 2⁵³)
    loss = (float(delta @ delta) + 2 * (zz @ delta)) / (2 * s * s)  # ‖j − k'‖² − ‖j − k‖² = ‖Δ‖² + 2(j − k)·Δ
    kl = float(delta @ delta) / (2 * s * s)
    d = float(np.linalg.norm(v - v2))
    bound = rho * (d + grid_distance(sigma, 2)) ** 2
    assert kl <= bound * (1 + 1e-12)
    assert abs(loss.mean() - kl) < 5 * loss.std() / math.sqrt(n)
    e = np.exp(loss)
    d2 = math.log(e.mean())
    se = e.std() / math.sqrt(n) / e.mean()
    assert abs(d2 - 2 * kl) < 5 * se
    assert d2 <= 2 * bound + 5 * se
