"""Rogers (unknown-domain) Alg. 1 (Thm 7, Laplace and Gaussian noise) and Alg. 2 (Thm 8): thresholds and costs recomputed from the
theorems, noise laws, top-k̄ selection, and Monte Carlo checks that a count held by a single user crosses the
threshold with probability ≤ δ (binomial tests at p = 1e-6, sized so that a 2× violation is caught)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from streamdp.accounting.cost import Cost
from streamdp.mechanisms.unknown_domain_histogram import (
    TopKbarGaussianHistogram,
    UnknownDomainHistogram,
    gaussian_histogram_threshold,
    laplace_histogram_threshold,
    top_kbar,
    topkbar_gaussian_threshold,
    unknown_domain_histogram_cost,
)
from streamdp.noise.generator import unsafe_seeded_generator

P = 1e-6
N_TRIALS = 10_000


def assert_release_rate(hits: int, n: int, delta: float, exact: float | None = None) -> None:
    """hits ~ Bin(n, p): p must not exceed δ (one-sided) and, when known, must equal ``exact`` (two-sided)."""
    # the design catches a 2× violation: the largest count accepted at p = 1e-6 under δ is below what 2δ gives
    assert stats.binom.isf(P, n, delta) < stats.binom.ppf(P, n, 2 * delta)
    assert stats.binomtest(hits, n, delta, alternative="greater").pvalue > P, (hits, n, delta)
    if exact is not None:
        assert exact <= delta * (1 + 1e-12)
        assert stats.binomtest(hits, n, exact).pvalue > P, (hits, n, exact)


# -------------------------------------------------------------------------------------------- thresholds/costs
@pytest.mark.parametrize("eps,delta,l0,linf", [(1.0, 1e-6, 1, 1.0), (0.5, 1e-9, 5, 3.0), (2.0, 0.05, 2, 1.0)])
def test_thresholds_and_cost_thm7_thm8(eps, delta, l0, linf):
    assert laplace_histogram_threshold(eps, delta, l0, linf) == pytest.approx(
        linf + linf / eps * math.log(l0 / (2 * delta)))
    assert gaussian_histogram_threshold(eps, delta, l0, linf) == pytest.approx(
        linf + linf / eps * stats.norm.isf(delta / l0), rel=1e-12)
    assert topkbar_gaussian_threshold(eps, delta, l0, linf) == pytest.approx(
        linf + math.sqrt(2) * linf / eps * stats.norm.isf(delta / l0), rel=1e-12)
    expected = pytest.approx(Cost.zcdp(rho=l0 * eps**2 / 2, delta=delta).as_tuple(), rel=1e-12)
    assert unknown_domain_histogram_cost(eps, delta, l0).as_tuple() == expected
    for noise in ("laplace", "gaussian"):
        m = UnknownDomainHistogram(eps, delta, l0, linf, noise=noise)
        assert m.cost().as_tuple() == expected
        assert m.scale == pytest.approx(linf / eps)
        # the ρ of the noise itself (per differing count for Laplace, ℓ2 = Δ∞√Δ0 for Gaussian) is Δ0ε²/2
        assert m.noise_cost().zcdp_rho == pytest.approx(l0 * eps**2 / 2, rel=1e-12)
    a2 = TopKbarGaussianHistogram(eps, delta, 10, l0, linf)
    assert a2.cost().as_tuple() == expected and a2.sigma == pytest.approx(linf / eps)


def test_bad_parameters():
    with pytest.raises(ValueError, match="epsilon"):
        UnknownDomainHistogram(0.0, 1e-6)
    with pytest.raises(ValueError, match="delta"):
        UnknownDomainHistogram(1.0, 0.0)
    with pytest.raises(ValueError, match="l0_sensitivity"):
        UnknownDomainHistogram(1.0, 1e-6, l0_sensitivity=0)
    with pytest.raises(ValueError, match="linf_sensitivity"):
        UnknownDomainHistogram(1.0, 1e-6, linf_sensitivity=-1)
    with pytest.raises(ValueError, match="noise"):
        UnknownDomainHistogram(1.0, 1e-6, noise="cauchy")
    with pytest.raises(ValueError, match="delta"):  # Laplace tail bound needs T ≥ Δ∞, i.e. δ ≤ Δ0/2
        UnknownDomainHistogram(1.0, 0.6, noise="laplace")
    with pytest.raises(ValueError, match="kbar"):
        TopKbarGaussianHistogram(1.0, 1e-6, 0)
    m = UnknownDomainHistogram(1.0, 1e-6)
    rng = unsafe_seeded_generator(0)
    with pytest.raises(ValueError, match="same length"):
        m.release(rng, ["a", "b"], [1])
    with pytest.raises(ValueError, match="≥ 0"):
        m.release(rng, ["a"], [-1])
    with pytest.raises(ValueError, match="finite"):
        m.release(rng, ["a"], [np.nan])


# ----------------------------------------------------------------------------------------------------- Alg. 1
@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_alg1_release_semantics(noise):
    rng = unsafe_seeded_generator(1)
    # tiny ε: huge noise, so a zero-count item would often cross T if it were (wrongly) considered
    m = UnknownDomainHistogram(0.05, 0.3 if noise == "laplace" else 0.3, 1, 1.0, noise=noise)
    ids = np.array(["zero", "big", "mid"])
    counts = np.array([0, 10_000, 100])
    seen = set()
    for _ in range(300):
        out_ids, out_counts = m.release(rng, ids, counts)
        assert "zero" not in set(out_ids.tolist())
        assert out_counts.dtype == np.int64
        assert np.all(np.diff(out_counts) <= 0)  # listed by decreasing noisy count
        assert np.all(out_counts > m.threshold - 0.5)
        seen.update(out_ids.tolist())
    assert "big" in seen and "mid" in seen
    empty_ids, empty_counts = m.release(rng, [], [])
    assert empty_ids.size == 0 and empty_counts.size == 0


@pytest.mark.statistical
@pytest.mark.parametrize("noise,law", [("laplace", stats.laplace), ("gaussian", stats.norm)])
def test_alg1_noise_law(noise, law):
    rng = unsafe_seeded_generator(2)
    eps, linf = 0.7, 2.0
    m = UnknownDomainHistogram(eps, 1e-6, 3, linf, noise=noise, integer_output=False)
    n = 50_000
    ids = np.arange(n)
    counts = np.full(n, 1e6)  # far above T: every item is released
    out_ids, noisy = m.release(rng, ids, counts)
    assert out_ids.size == n
    z = noisy - 1e6
    assert stats.kstest(z, law(scale=linf / eps).cdf).pvalue > P
    var = 2 * (linf / eps) ** 2 if noise == "laplace" else (linf / eps) ** 2
    assert abs(z.mean()) < 5.5 * math.sqrt(var / n)
    assert z.var() == pytest.approx(var, rel=0.05)


@pytest.mark.statistical
@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
@pytest.mark.parametrize("l0", [1, 2])
def test_alg1_single_user_items_cross_threshold_with_prob_le_delta(noise, l0):
    """h = h' + one user's Δ0 new items of count Δ∞: Pr[any of them released] = 1 − (1 − δ/Δ0)^Δ0 ≤ δ."""
    rng = unsafe_seeded_generator(3 + l0)
    eps, delta, linf = 1.0, 0.1, 3.0
    m = UnknownDomainHistogram(eps, delta, l0, linf, noise=noise)
    user_items = [f"u{j}" for j in range(l0)]
    ids = np.array(["common1", "common2"] + user_items)
    counts = np.array([500.0, 7.0] + [linf] * l0)
    hits = 0
    for _ in range(N_TRIALS):
        out, _ = m.release(rng, ids, counts)
        hits += bool(set(out.tolist()) & set(user_items))
    # per item: Pr[Δ∞ + Z > T] — Laplace ½·exp(−(T−Δ∞)/b), Gaussian 1 − Φ((T−Δ∞)/σ); both = δ/Δ0 by Thm 7
    b = linf / eps
    if noise == "laplace":
        p_item = 0.5 * math.exp(-(m.threshold - linf) / b)
    else:
        p_item = stats.norm.sf((m.threshold - linf) / b)
    assert p_item == pytest.approx(delta / l0, rel=1e-12)
    assert_release_rate(hits, N_TRIALS, delta, exact=1 - (1 - p_item) ** l0)


# ----------------------------------------------------------------------------------------------------- Alg. 2
def test_top_kbar_selection_and_ties():
    ids = np.array(["c", "a", "d", "b", "e"])
    counts = np.array([5.0, 5.0, 9.0, 5.0, 1.0])
    idx, c_next = top_kbar(ids, counts, 3)
    assert ids[idx].tolist() == ["d", "a", "b"]  # ties at the boundary broken by ascending id
    assert c_next == 5.0  # the (k̄+1)-th count is "c" with 5
    idx, c_next = top_kbar(ids, counts, 5)
    assert ids[idx].tolist() == ["d", "a", "b", "c", "e"] and c_next == 0.0  # fewer than k̄+1 items: c = 0
    idx, c_next = top_kbar(ids, counts, 1)
    assert ids[idx].tolist() == ["d"] and c_next == 5.0
    with pytest.raises(ValueError, match="comparable"):
        top_kbar(np.array(["a", 1, 2.5], dtype=object), np.array([1.0, 1.0, 1.0]), 1)


def test_alg2_only_top_kbar_released():
    rng = unsafe_seeded_generator(6)
    m = TopKbarGaussianHistogram(1.0, 1e-6, kbar=3)
    ids = np.arange(10)
    counts = np.array([1000, 900, 800, 700, 600, 500, 400, 300, 200, 100])
    for _ in range(50):
        out, noisy = m.release(rng, ids, counts)
        assert set(out.tolist()) <= {0, 1, 2}
    # far above T̃ = T + c_(4) + noise: the top 3 are always released, in noisy order
    assert out.tolist() == [0, 1, 2]
    assert noisy.dtype == np.int64


@pytest.mark.statistical
def test_alg2_single_user_item_crosses_noisy_threshold_with_prob_delta():
    """h' = {a: 50, b: 40}, h adds one user's new item of count Δ∞; k̄ = 3 so c_(k̄+1) = 0 in both:
    Pr[released] = Pr[N(0, 2σ²) > T − Δ∞] = δ/Δ0 (Rogers (unknown-domain) Thm 8 proof)."""
    rng = unsafe_seeded_generator(7)
    eps, delta, linf = 1.0, 0.1, 2.0
    m = TopKbarGaussianHistogram(eps, delta, kbar=3, l0_sensitivity=1, linf_sensitivity=linf)
    ids = np.array(["a", "b", "x"])
    counts = np.array([50.0, 40.0, linf])
    hits = sum("x" in m.release(rng, ids, counts)[0].tolist() for _ in range(N_TRIALS))
    exact = stats.norm.sf((m.threshold - linf) / (math.sqrt(2) * m.sigma))
    assert exact == pytest.approx(delta, rel=1e-12)
    assert_release_rate(hits, N_TRIALS, delta, exact=exact)


@pytest.mark.statistical
def test_alg2_two_user_items_union_bound():
    """Δ0 = 2 new items sharing the noisy threshold: Pr[any released] = 1 − E[Φ(t + Z0)²] ≤ δ."""
    rng = unsafe_seeded_generator(8)
    eps, delta, linf = 1.0, 0.1, 1.0
    m = TopKbarGaussianHistogram(eps, delta, kbar=4, l0_sensitivity=2, linf_sensitivity=linf)
    ids = np.array(["a", "b", "x", "y"])
    counts = np.array([50.0, 40.0, linf, linf])
    hits = 0
    for _ in range(N_TRIALS):
        out = set(m.release(rng, ids, counts)[0].tolist())
        hits += bool(out & {"x", "y"})
    t = (m.threshold - linf) / m.sigma
    none, _ = integrate.quad(lambda z: stats.norm.pdf(z) * stats.norm.cdf(t + z) ** 2, -np.inf, np.inf)
    assert_release_rate(hits, N_TRIALS, delta, exact=1 - none)


@pytest.mark.statistical
def test_alg2_noise_law():
    rng = unsafe_seeded_generator(9)
    eps, linf, n = 0.8, 1.5, 20_000
    m = TopKbarGaussianHistogram(eps, 1e-6, kbar=n, l0_sensitivity=2, linf_sensitivity=linf, integer_output=False)
    ids = np.arange(n)
    counts = np.full(n, 1e6)
    out, noisy = m.release(rng, ids, counts)
    assert out.size == n  # all far above T̃
    z = noisy - 1e6
    sigma = linf / eps
    assert stats.kstest(z, stats.norm(scale=sigma).cdf).pvalue > P
    assert abs(z.mean()) < 5.5 * sigma / math.sqrt(n)
    assert z.var() == pytest.approx(sigma**2, rel=0.06)
    # integer output (default) is the rounded noisy value
    out_i, noisy_i = TopKbarGaussianHistogram(eps, 1e-6, kbar=5).release(rng, ids[:5], counts[:5])
    assert noisy_i.dtype == np.int64 and np.all(np.abs(noisy_i - 1e6) < 10 * 1 / eps)
