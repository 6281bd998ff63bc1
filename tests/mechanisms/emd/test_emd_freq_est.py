"""Imola et al. (EMD) §6.2, Alg. 4, App. D.3: clustered k-RR, its closed-form inverse, FreqEstLocal, Laplace baseline."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from streamdp.accounting.cost import Cost
from streamdp.mechanisms.emd import (
    ClusteredKRR,
    FreqEstLocal,
    LaplaceHistogram,
    PrivEMDItemWise,
    apply_clustered_inverse,
    clustered_krr_inverse,
    clustered_krr_matrix,
    clustered_metric,
    emd_histograms,
    histogram,
)
from streamdp.noise.generator import unsafe_seeded_generator

P_MIN = 1e-6
PARAMS = list(itertools.product((1, 2, 5), (1, 3, 4), (0.1, 0.5, 1.0), (0.05, 1.0, 4.0)))


@pytest.mark.parametrize("c,g,gamma,a0", PARAMS)
def test_matrix_definition_and_closed_form_inverse(c, g, gamma, a0):
    k = c * g
    T = clustered_krr_matrix(c, g, gamma, a0)
    # T[y, x] = e^{−α0 d(x,y)}/Z from the metric itself
    w = np.exp(-a0 * clustered_metric(c, g, gamma))
    assert np.allclose(T, w / w.sum(axis=0, keepdims=True), rtol=1e-12, atol=1e-15)
    assert np.allclose(T.sum(axis=0), 1.0)
    # T·T⁻¹ = I with the closed form; O(k) application agrees with the dense inverse
    Ti = clustered_krr_inverse(c, g, gamma, a0)
    cond = np.linalg.cond(T)
    assert np.allclose(T @ Ti, np.eye(k), atol=1e-11 * cond)
    assert np.allclose(Ti @ T, np.eye(k), atol=1e-11 * cond)
    v = np.linspace(0.1, 1.0, k)
    assert np.allclose(apply_clustered_inverse(v, c, g, gamma, a0), Ti @ v, rtol=1e-9, atol=1e-9 * cond)


@pytest.mark.parametrize("c,g,gamma,a0", [(3, 4, 0.2, 1.5), (2, 2, 1.0, 0.7), (4, 3, 0.6, 3.0)])
def test_krr_is_exactly_alpha0_metric_dp(c, g, gamma, a0):
    """max over x ≠ x', y of log(T[y,x]/T[y,x'])/d(x,x') equals α0 (tight on the clustered metric)."""
    T = clustered_krr_matrix(c, g, gamma, a0)
    d = clustered_metric(c, g, gamma)
    k = c * g
    worst = max(
        np.max(np.log(T[:, x] / T[:, x2])) / d[x, x2] for x in range(k) for x2 in range(k) if x != x2
    )
    assert worst == pytest.approx(a0, rel=1e-9)


def test_bad_input():
    with pytest.raises(ValueError, match="gamma"):
        ClusteredKRR(2, 2, 0.0, 1.0)
    with pytest.raises(ValueError, match="alpha0"):
        ClusteredKRR(2, 2, 0.5, -1.0)
    with pytest.raises(ValueError, match="items"):
        ClusteredKRR(2, 2, 0.5, 1.0).randomize(unsafe_seeded_generator(0), np.array([5]))
    with pytest.raises(ValueError, match="ClusteredKRR"):
        FreqEstLocal(PrivEMDItemWise(type("R", (), {"alpha0": 1.0})(), m=2))


def test_laplace_baseline_known_answer():
    lb = LaplaceHistogram(epsilon=0.5, n_users=1000, k=10)
    assert lb.scale == pytest.approx(2 / (1000 * 0.5))
    assert lb.cost() == Cost.pure_dp(0.5)


@pytest.mark.statistical
def test_randomizer_law_chi2():
    rng = unsafe_seeded_generator(430)
    c, g, gamma, a0 = 3, 4, 0.3, 1.2
    krr = ClusteredKRR(c, g, gamma, a0)
    # the law written here from Imola et al. (EMD) §6.2, not taken from the code (test audit of 2026-11-23): d(x, y) = 0 on the
    # diagonal, γ inside a cluster, 1 across; P(y | x) = e^{−α0·d(x, y)} / Σ_y' e^{−α0·d(x, y')}
    k = c * g
    d = np.array([[0.0 if x == y else (gamma if x // g == y // g else 1.0) for x in range(k)] for y in range(k)])
    T = np.exp(-a0 * d)
    T /= T.sum(axis=0, keepdims=True)
    np.testing.assert_allclose(krr.matrix(), T, rtol=1e-12)
    for x in (0, 5, 11):
        out = krr.randomize(rng, np.full(200_000, x))
        counts = np.bincount(out, minlength=k)
        assert stats.chisquare(counts, T[:, x] * out.size).pvalue > P_MIN
        # power: the law of α0·1.1 is refused by the same counts
        Tw = np.exp(-1.1 * a0 * d)
        Tw /= Tw.sum(axis=0, keepdims=True)
        assert stats.chisquare(counts, Tw[:, x] * out.size).pvalue < P_MIN


@pytest.mark.statistical
def test_estimator_unbiased_monte_carlo():
    rng = unsafe_seeded_generator(431)
    c, g, gamma, a0 = 3, 3, 0.4, 1.0
    h = np.array([0.3, 0.0, 0.1, 0.05, 0.05, 0.0, 0.2, 0.2, 0.1])
    items = np.repeat(np.arange(9), (h * 200).astype(int))  # 200 items with histogram h
    fe = FreqEstLocal(PrivEMDItemWise(ClusteredKRR(c, g, gamma, a0), m=items.size))
    reps = 2000
    est = np.array([fe.estimate(fe.release(rng, items)) for _ in range(reps)])
    mean, se = est.mean(0), est.std(0, ddof=1) / math.sqrt(reps)
    assert np.all(np.abs(mean - h) < 5 * se)
    assert est.sum(1) == pytest.approx(np.ones(reps))  # T⁻¹ preserves total mass
    # the projected estimate is a distribution, and its d_EM to h is finite and small for this many items
    d = clustered_metric(c, g, gamma)
    hp = fe.estimate_distribution(fe.release(rng, items))
    assert hp.min() >= 0 and hp.sum() == pytest.approx(1.0)
    assert emd_histograms(hp, histogram(items, 9), d) < 0.5


@pytest.mark.statistical
def test_calibrated_central_freq_est_and_baseline_run():
    rng = unsafe_seeded_generator(432)
    c, g, gamma, n, m = 4, 5, 0.2, 500, 10
    fe = FreqEstLocal.calibrated(c, g, gamma, alpha=1.0, m=m, delta=1e-6, model="central", n_users=n)
    assert fe.cost().emd_alpha <= 1.0 + 1e-9 and fe.cost().emd_delta <= 1e-6
    data = rng.integers(0, c * g, (n, m))
    hp = fe.estimate_distribution(fe.release(rng, data))
    assert hp.sum() == pytest.approx(1.0)
    lb = LaplaceHistogram(1.0, n, c * g)
    out = lb.release(rng, histogram(data.ravel(), c * g))
    assert out.min() >= 0 and out.sum() == pytest.approx(1.0)
