"""PNN's internal budget split (Liang–Yi (CGP) Alg. 2) and geo_knn's per-point selection budget (Liang–Yi (CGP) Alg. 3, Thm 3.2).

These close two gaps of the mutation audit: the threshold noise Z ~ Lap(3/ε) of PNN line 1 and the SVT budget
2ε/3 of PNN line 2 (``streamdp/mechanisms/geo/pnn.py``), and ρ_sel = select_share·ρ/m per query point in
``GeoKNN`` (``streamdp/engine/queries/geo.py``). Every expected value is worked out here from Liang–Yi (CGP):

* Alg. 2: T = h(x_I; p) + Z + γ0, Z ~ Lap(3/ε) (ε/3-GP, h is 1-Lipschitz by Lemma 4.9); then
  SVT(2ε/3, T, K = 1) cycling through I.
* Alg. 1 at budget ε' = 2ε/3: ε1 = ε2 = ε'/2 = ε/3, W ~ Lap(K/ε1) = Lap(3/ε) once, V_j ~ Lap(2K/ε2) = Lap(6/ε);
  halt at the first j with g_j + V_j ≤ T + W.
* Alg. 3: k calls of PNN at ε_j = √(2ρ/k) each (ρ/k-CGP each, Lemma 3.6), ρ-CGP in all (Thm 3.2).

Statistical checks: fixed seeds (the explicit test-mode generator), acceptance at p > 1e-6, and a power check that
rejects the nearby wrong law at p < 1e-6 on the same sample.
"""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest
from scipy import integrate, stats

from streamdp.engine.queries.geo import GeoKNN
from streamdp.mechanisms.geo import pnn
from streamdp.noise.generator import unsafe_seeded_generator

pnn_module = importlib.import_module("streamdp.mechanisms.geo.pnn")  # the module (the package re-exports the function)
geo_module = importlib.import_module("streamdp.engine.queries.geo")

P_MIN = 1e-6
US = [24.0, 50.0, -125.0, -66.0]


def _lap_cdf(z, b):
    z = np.asarray(z, dtype=float)
    return np.where(z < 0, 0.5 * np.exp(np.minimum(z, 0) / b), 1 - 0.5 * np.exp(-np.maximum(z, 0) / b))


def _y_density(y, b_z, b_w):
    """Density of Y = Z + W, Z ~ Lap(b_z), W ~ Lap(b_w) independent (convolution of two Laplace densities)."""
    a = np.abs(y)
    if b_z == b_w:
        b = b_z
        return (b + a) * np.exp(-a / b) / (4 * b * b)
    return (b_z * np.exp(-a / b_z) - b_w * np.exp(-a / b_w)) / (2 * (b_z**2 - b_w**2))


def _pnn_choice_law(dist, b_z, b_w, b_v, gamma0=0.0, n_grid=40_001):
    """Pr[PNN returns candidate i] from Alg. 2 + Alg. 1 with the given scales of Z, W and V (no step cap).

    Only Y = Z + W matters. Given Y = y, each visit to candidate i halts w.p. p_i = F_V(h + γ0 + y − d_i); the
    cyclic SVT returns i w.p. Π_{l<i}(1 − p_l)·p_i / (1 − Π_l(1 − p_l))."""
    d = np.asarray(dist, dtype=float)
    b = max(b_z, b_w)
    y = np.linspace(-80 * b, 80 * b, n_grid)
    fy = _y_density(y, b_z, b_w)
    p = _lap_cdf(d.min() + gamma0 + y[None, :] - d[:, None], b_v)
    surv_before = np.vstack([np.ones_like(y), np.cumprod(1 - p, axis=0)[:-1]])
    with np.errstate(divide="ignore"):  # log1p(−1) = −inf is right: the cycle surely halts
        cycle_halt = -np.expm1(np.sum(np.log1p(-p), axis=0))
    return integrate.simpson(surv_before * p / cycle_halt * fy, x=y, axis=1)


# ------------------------------------------------------------------------------------------------ PNN (Alg. 2)
@pytest.mark.statistical
def test_pnn_threshold_noise_is_laplace_3_over_eps_and_the_svt_runs_at_two_thirds_eps(monkeypatch):
    """Liang–Yi (CGP) Alg. 2 at ε = 0.5, γ0 = −1: the SVT is built with budget 2ε/3 = 1/3, and the threshold it receives is
    T = h + Z + γ0 with h = min_i ‖x_i − p‖ = 2 here, so Z = T − 2 + 1 must be Lap(3/ε) = Lap(6) (KS), and is
    NOT Lap(1/ε) = Lap(2) (the audit's mutant; KS rejects it on the same sample).
    The SVT's own noise at budget 1/3 (Alg. 1): W ~ Lap(1/(1/6)) = Lap(6), V ~ Lap(2/(1/6)) = Lap(12)."""
    seen = []
    real_svt = pnn_module.SparseVectorGP

    class SpySVT(real_svt):
        def run(self, rng, values, threshold, **kw):
            seen.append((self.epsilon, self.threshold_noise_scale, self.query_noise_scale, float(threshold),
                         float(np.min(values))))
            return super().run(rng, values, threshold, **kw)

    monkeypatch.setattr(pnn_module, "SparseVectorGP", SpySVT)
    rng = unsafe_seeded_generator(4101)
    x = np.array([[6.0, 0.0], [2.0, 0.0], [10.0, 0.0], [4.0, 0.0]])  # distances 6, 2, 10, 4 from p = 0
    eps, g0, n = 0.5, -1.0, 4000
    for _ in range(n):
        pnn(rng, x, [0.0, 0.0], eps, gamma0=g0)
    assert len(seen) == n
    svt_eps = np.array([s[0] for s in seen])
    assert np.all(svt_eps == pytest.approx(1.0 / 3.0, rel=1e-12))  # 2ε/3
    assert all(s[1] == pytest.approx(6.0, rel=1e-12) and s[2] == pytest.approx(12.0, rel=1e-12) for s in seen)
    assert all(s[4] == 2.0 for s in seen)  # the SVT sees the candidates' distances; h = 2
    z = np.array([s[3] for s in seen]) - 2.0 - g0  # Z = T − h − γ0
    assert stats.kstest(z, stats.laplace(scale=6.0).cdf).pvalue > P_MIN  # 3/ε
    assert stats.kstest(z, stats.laplace(scale=2.0).cdf).pvalue < P_MIN  # power: 1/ε


@pytest.mark.statistical
def test_pnn_step_count_law_with_one_candidate():
    """Black-box check of the whole noise budget of PNN through its public step count.

    One candidate at distance d (m = 1): every visit halts iff d + V_j ≤ d + Z + γ0 + W, i.e. V_j ≤ Y + γ0 with
    Y = Z + W. With Z ~ Lap(3/ε) (Alg. 2 line 1), W ~ Lap(3/ε) and V_j ~ Lap(6/ε) (Alg. 1 at 2ε/3), the number of
    SVT steps S is, given Y = y, geometric with success p(y) = F_V(y + γ0), so
        P(S ≥ s) = ∫ (1 − F_V(y + γ0))^{s−1} f_Y(y) dy,  f_Y(y) = (b + |y|) e^{−|y|/b} / (4b²),  b = 3/ε.
    ε = 0.5, γ0 = −6; χ² on the cells {1}, {2}, {3}, {4}, 5–6, 7–10, 11–20, 21–50, 51–200, ≥ 201 (the step cap
    1000 lies in the last cell). Power: Z ~ Lap(1/ε) (the audit's mutant) and an SVT at ε instead of 2ε/3
    (W ~ Lap(2/ε), V ~ Lap(4/ε)) are both rejected on the same sample."""
    eps, g0, n = 0.5, -6.0, 10_000
    rng = unsafe_seeded_generator(4102)
    steps = np.array([pnn(rng, np.array([[3.0, 4.0]]), [0.0, 0.0], eps, gamma0=g0).steps for _ in range(n)])
    edges = [1, 2, 3, 4, 5, 7, 11, 21, 51, 201]
    observed = np.array([np.sum((steps >= lo) & (steps < hi)) for lo, hi in zip(edges, edges[1:] + [10**9])])

    def law(b_z, b_w, b_v):
        b = max(b_z, b_w, b_v)
        y = np.linspace(-120 * b, 120 * b, 400_001)
        fy = _y_density(y, b_z, b_w)
        q = 1.0 - _lap_cdf(y + g0, b_v)
        surv = [integrate.simpson(q ** (s - 1) * fy, x=y) for s in edges] + [0.0]  # P(S ≥ s)
        return np.diff(-np.array(surv))

    right = law(3 / eps, 3 / eps, 6 / eps)
    assert right.sum() == pytest.approx(1.0, abs=1e-6)
    assert stats.chisquare(observed, right / right.sum() * n).pvalue > P_MIN
    for wrong in (law(1 / eps, 3 / eps, 6 / eps), law(3 / eps, 2 / eps, 4 / eps)):
        assert stats.chisquare(observed, wrong / wrong.sum() * n).pvalue < P_MIN


# ----------------------------------------------------------------------------------- geo_knn (Alg. 3 per point)
def test_geo_knn_spends_share_rho_over_m_per_point_and_sqrt_2rho_sel_over_k_per_pnn_call(monkeypatch):
    """ρ = 100 per unit², m = 2 query points, select_share = 0.4, k = 2, 4 located users:
    ρ_sel = 0.4·100/2 = 20 per point (k-PNN is ρ_sel-CGP, Liang–Yi (CGP) Alg. 3), so each of the m·k = 4 PNN calls runs at
    ε_j = √(2·20/2) = √20; ρ_rel = 0.6·100/2 = 30 per point. Composition over the 2m steps (Liang–Yi (CGP) Thm 3.2):
    2·(2·(√20)²/2 + 30) = 100 = ρ."""
    k_pnn_rhos, pnn_eps = [], []
    real_k_pnn, real_inner = geo_module.k_pnn, pnn_module._pnn_on_distances

    def spy_k_pnn(*a, **kw):
        k_pnn_rhos.append(kw["rho"])
        return real_k_pnn(*a, **kw)

    def spy_inner(rng, dist, epsilon, gamma0, max_cycles):
        pnn_eps.append(epsilon)
        return real_inner(rng, dist, epsilon, gamma0, max_cycles)

    monkeypatch.setattr(geo_module, "k_pnn", spy_k_pnn)
    monkeypatch.setattr(pnn_module, "_pnn_on_distances", spy_inner)
    q = GeoKNN("knn", k=2, rho=100.0, points=[[40.7, -74.0], [34.05, -118.25]], region=US, select_share=0.4)
    xy = q.frame.locate(np.array([[40.71, -74.01], [40.69, -73.99], [34.06, -118.24], [34.04, -118.26]]))
    v = q._release(unsafe_seeded_generator(4103), xy)
    assert v["k"] == 2 and len(v["neighbours"]) == 2
    assert k_pnn_rhos == [pytest.approx(20.0, rel=1e-12)] * 2
    assert pnn_eps == [pytest.approx(math.sqrt(20.0), rel=1e-12)] * 4
    assert 2 * (2 * math.sqrt(20.0) ** 2 / 2 + 30.0) == pytest.approx(100.0)


@pytest.mark.statistical
def test_geo_knn_selection_law_matches_pnn_at_share_rho_over_m():
    """Black-box: which user k-PNN selects, read off the released mean distance, follows PNN at ε_j = √(2ρ_sel)
    with ρ_sel = select_share·ρ/m (k = 1).

    ρ = 1 per m², m = 2 points (NYC, LA), select_share = 0.1: ρ_sel = 0.05, ε_j = √0.1; ρ_rel = 0.45 and the
    released f_j has σ = (√2/k)/√(2ρ_rel) = 1.4907 m (Liang–Yi (CGP) Thm 3.1, user neighbourhood). Around each point two
    users at 100 m and 120 m (the other point's users are ~3900 km away and never chosen): a released mean
    distance < 110 m means the 100 m user was selected (misread w.p. Φ(−10/1.49) ≈ 1e-11). Pr[100 m user] from
    Alg. 2 with Z, W ~ Lap(3/ε_j), V ~ Lap(6/ε_j), candidates in row order (the far users first for LA: they never
    halt, so the law is the same). Power: ρ_sel = select_share·ρ (no /m, the audit's mutant) is rejected."""
    rho, m, share, n_rel = 1.0, 2, 0.1, 3000
    q = GeoKNN("knn", k=1, rho=rho, points=[[40.7, -74.0], [34.05, -118.25]], region=US, select_share=share)
    p = q.frame.to_planar(np.array([[40.7, -74.0], [34.05, -118.25]]))
    xy = np.vstack([p[0] + [100.0, 0.0], p[0] + [0.0, 120.0], p[1] + [100.0, 0.0], p[1] + [0.0, 120.0]])
    rng = unsafe_seeded_generator(4104)
    near = 0
    for _ in range(n_rel):
        v = q._release(rng, xy)
        assert v["noise"]["sigma"] == pytest.approx(math.sqrt(2.0) / math.sqrt(2 * (1 - share) * rho / m), rel=1e-12)
        near += sum(nb["mean_distance"] < 110.0 for nb in v["neighbours"])
    n = m * n_rel

    def p_near(eps):
        laws = [_pnn_choice_law(np.hypot(*(xy - p[j]).T), 3 / eps, 3 / eps, 6 / eps) for j in range(m)]
        assert laws[0][0] == pytest.approx(laws[1][2], abs=1e-9)  # the far users change nothing
        return laws[0][0]

    right, wrong = p_near(math.sqrt(2 * share * rho / m)), p_near(math.sqrt(2 * share * rho))
    assert abs(right - wrong) > 0.04
    assert stats.binomtest(near, n, right).pvalue > P_MIN
    assert stats.binomtest(near, n, wrong).pvalue < P_MIN
