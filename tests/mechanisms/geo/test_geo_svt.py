"""Liang–Yi (CGP) Alg. 1 / Thm D.1: the sparse vector technique under GP."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, stats

from streamdp.accounting.cost import Cost
from streamdp.mechanisms.geo import SparseVectorGP
from streamdp.noise.generator import unsafe_seeded_generator

P_MIN = 1e-6


def _lap_cdf(z, b):
    return np.where(z < 0, 0.5 * np.exp(np.minimum(z, 0) / b), 1 - 0.5 * np.exp(-np.maximum(z, 0) / b))


def exact_index_distribution(g, threshold, eps, K, n_grid=20_001):
    """Pr[index = j] for j < len(g) and Pr[all ⊥] (last entry), from Alg. 1 with the paper's scales
    W ~ Lap(K/(ε/2)), V ~ Lap(2K/(ε/2)) — integrated over W on a fine grid (Simpson), independently of the code
    under test."""
    g = np.asarray(g, float)
    bw, bv = K / (eps / 2), 2 * K / (eps / 2)
    w = np.linspace(-60 * bw, 60 * bw, n_grid)
    fw = np.exp(-np.abs(w) / bw) / (2 * bw)
    halt = _lap_cdf(threshold + w[None, :] - g[:, None], bv)  # (J, grid): Pr[⊤ at query j | W = w]
    surv = np.vstack([np.ones_like(w), np.cumprod(1 - halt, axis=0)])  # Pr[⊥ on the first j | w]
    dens = np.vstack([surv[:-1] * halt, surv[-1:]]) * fw
    return integrate.simpson(dens, x=w, axis=1)


def test_known_answer_scales_and_cost():
    s = SparseVectorGP(0.5, lipschitz=2.0)
    assert s.threshold_noise_scale == pytest.approx(2.0 / 0.25)  # K/ε1, ε1 = ε/2
    assert s.query_noise_scale == pytest.approx(2 * 2.0 / 0.25)  # 2K/ε2, ε2 = ε/2
    assert s.cost().cgp_rho == pytest.approx(0.5**2 / 2)  # Lemma 3.6
    assert s.cost() == Cost.cgp(s.cost().cgp_rho)


def test_bad_input():
    s = SparseVectorGP(1.0)
    rng = unsafe_seeded_generator(0)
    with pytest.raises(ValueError, match="epsilon"):
        SparseVectorGP(0.0)
    with pytest.raises(ValueError, match="values"):
        s.run(rng, [], 0.0)
    with pytest.raises(ValueError, match="max_steps"):
        s.run(rng, [1.0], 0.0, cycle=True)
    with pytest.raises(ValueError, match="threshold"):
        s.run(rng, [1.0], float("nan"))


def test_reference_model_exact_privacy_ratio_worst_case_patterns():
    """The REFERENCE MODEL the χ² tests below compare the code with (it does not call the code; test audit of
    2026-11-23): For neighbours with |g_i(x) − g_i(x')| ≤ K·τ, every output's probability ratio is ≤ e^{ετ} (Thm D.1);
    the classic worst case (x' lower on the ⊥ queries, higher on the ⊤ query) gets within 1e-3 of it."""
    eps, K, tau = 1.0, 1.0, 1.0
    worst = 0.0
    for J in (1, 5, 25):
        base = np.zeros(J + 1)
        for T in (-10.0, -3.0, 0.0, 4.0):
            gx = base.copy()
            gx[:J] += tau
            gx[J] -= tau
            px = exact_index_distribution(gx, T, eps, K)
            py = exact_index_distribution(base, T, eps, K)
            for a, b in ((px, py), (py, px)):
                keep = b > 1e-12
                r = np.max(np.log(a[keep] / b[keep]))
                assert r <= eps * tau + 1e-6
                worst = max(worst, r)
    assert worst > eps * tau - 1e-3


@pytest.mark.statistical
def test_halting_distribution_chi2_and_empirical_ratio():
    rng = unsafe_seeded_generator(321)
    eps, K, tau, J, T = 1.0, 1.0, 1.0, 6, -2.0
    gy = np.zeros(J)
    gx = gy + tau
    gx[-1] -= 2 * tau  # |gx − gy| ≤ τ
    s = SparseVectorGP(eps, K)
    N = 15_000
    counts = {}
    for name, g in (("x", gx), ("y", gy)):
        idx = np.array([(-1 if (r := s.run(rng, g, T)).index is None else r.index) for _ in range(N)])
        c = np.array([np.sum(idx == j) for j in range(J)] + [np.sum(idx == -1)])
        exp = exact_index_distribution(g, T, eps, K) * N
        assert stats.chisquare(c, exp).pvalue > P_MIN
        counts[name] = c
    # empirical likelihood ratios on outputs with enough mass
    cx, cy = counts["x"], counts["y"]
    keep = (cx > 200) & (cy > 200)
    lr = np.abs(np.log(cx[keep] / cy[keep]))
    se = np.sqrt(1 / cx[keep] + 1 / cy[keep])
    assert np.all(lr - eps * tau < 5 * se)


@pytest.mark.statistical
def test_cyclic_run_and_cap():
    rng = unsafe_seeded_generator(322)
    s = SparseVectorGP(1.0)
    # never halts: threshold far below every answer; ⊥^cap
    r = s.run(rng, [1e6, 1e6], 0.0, cycle=True, max_steps=10_001)
    assert r.index is None and r.steps == 10_001
    # cyclic index beyond one cycle: answers [big, small]: the first ⊤ lands on an odd position
    hits = [s.run(rng, [1e6, -1e6], 0.0, cycle=True, max_steps=100).index for _ in range(200)]
    assert all(h == 1 for h in hits)
