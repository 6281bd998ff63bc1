"""Imola et al. (EMD) Alg. 3, Lemma 5.2, Thm 5.3: BoundedEMDReduction."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from streamdp.mechanisms.emd import BoundedEMDReduction, bernstein_b, clustered_metric, emd_items
from streamdp.noise.generator import unsafe_seeded_generator

P_MIN = 1e-6


def test_known_answers():
    assert bernstein_b(0.1, 200, 1e-6) == pytest.approx(0.2 + 7 / 6 * math.log(1e6) / 200)
    r = BoundedEMDReduction(m0=100, delta_s=1e-5, inner_alpha=2.0, inner_delta=1e-7)
    eps, delta = r.discrete_guarantee(0.05)
    assert eps == pytest.approx(2.0 * (0.1 + 7 / 6 * math.log(1e5) / 100))
    assert delta == pytest.approx(1e-7 + 1e-5)
    # no per-unit emd Cost: ε = α·b(d) does not vanish as d → 0, so α·b(τ)/τ per unit would under-state ε below τ
    assert r.discrete_guarantee(0.001)[0] > r.discrete_guarantee(0.05)[0] / 0.05 * 0.001 * 10
    assert not hasattr(r, "cost")
    with pytest.raises(ValueError, match="delta_s"):
        BoundedEMDReduction(10, 1.0, 1.0)
    with pytest.raises(ValueError, match="non-empty"):
        r.project(unsafe_seeded_generator(0), np.array([]))


def test_bernstein_step_against_exact_binomial_tails():
    """Lemma 5.2's tail step for the extreme [0, 1] law (Bernoulli(τ), variance τ(1−τ) ≤ τ):
    Pr[mean of m0 draws > b(τ)] ≤ δ_s — exact binomial tails over a grid of τ, m0, δ_s."""
    worst = 0.0
    for m0 in (10, 50, 200, 1000, 5000):
        for ds in (1e-2, 1e-4, 1e-8):
            for tau in np.concatenate([np.geomspace(1e-4, 0.5, 25), [0.7, 0.9]]):
                b = bernstein_b(tau, m0, ds)
                tail = stats.binom.sf(math.floor(m0 * b + 1e-12), m0, tau)  # Pr[Σ > m0·b]
                assert tail <= ds
                worst = max(worst, tail / ds)
    assert worst > 1e-3  # not vacuous everywhere


@pytest.mark.statistical
def test_coupled_resamples_distance_bound_monte_carlo():
    """Lemma 5.2 through the code: resamples drawn by ``BoundedEMDReduction.project`` (one draw of indices, applied to
    D and D' — the proof's coupling) exceed d_EM = b(τ) with probability ≤ δ_s. D' moves one of 10 items to another
    cluster (d_X = 1, τ = 0.1); with m0 = 20, δ_s = 0.2, b = 0.2939, so the resamples exceed b iff the moved item is
    drawn ≥ 6 times: exactly P(Bin(20, 0.1) ≥ 6) = 0.0113 ≤ δ_s. (The earlier version could not fail: its event had
    probability 5.9e-21, and it drew its own indices instead of calling project; test audit of 2026-11-23.)"""
    rng = unsafe_seeded_generator(440)
    d = clustered_metric(4, 3, 0.3)
    D1 = np.arange(10)
    D2 = D1.copy()
    D2[0] = 11  # cluster 0 → cluster 3
    tau = emd_items(D1, D2, d)
    assert tau == pytest.approx(0.1)
    m0, ds = 20, 0.2
    b = bernstein_b(tau, m0, ds)
    assert math.floor(m0 * b) == 5  # exceed ⇔ ≥ 6 of the 20 draws are the moved item
    exact = stats.binom.sf(5, m0, 0.1)
    assert exact == pytest.approx(0.011253, rel=1e-4) and exact <= ds
    r = BoundedEMDReduction(m0=m0, delta_s=ds, inner_alpha=1.0)
    reps = 20_000
    exceed = 0
    for _ in range(reps):
        j = r.project(rng, np.arange(10))  # the code's resample, as indices into the user's multiset
        exceed += emd_items(D1[j], D2[j], d) > b
    assert stats.binomtest(exceed, reps, ds, alternative="greater").pvalue > P_MIN  # the lemma's bound
    assert stats.binomtest(exceed, reps, exact).pvalue > P_MIN  # and the exact law: a doubled rate is 15 SE away


@pytest.mark.statistical
def test_projection_is_uniform_with_replacement():
    rng = unsafe_seeded_generator(441)
    r = BoundedEMDReduction(m0=50_000, delta_s=1e-6, inner_alpha=1.0)
    items = np.array([3, 3, 7, 9, 11])
    s = r.project(rng, items)
    assert s.shape == (50_000,)
    counts = np.array([np.sum(s == v) for v in (3, 7, 9, 11)])
    assert stats.chisquare(counts, np.array([2, 1, 1, 1]) / 5 * s.size).pvalue > P_MIN
