"""Second-round mutation gaps in the geo mechanisms (Liang–Yi (CGP) Lemma 2.6, Alg. 1 / Thm D.1).

* PlanarLaplaceGP must scale its noise with the Lipschitz constant K of g: density ∝ exp(−(ε/K)‖z‖), so the
  radius is Gamma(2, scale K/ε) (Liang–Yi (CGP) Lemma 2.6). The existing tests used K = 1 only for the release.
* SparseVectorGP draws the threshold noise W ONCE for the whole run (Liang–Yi (CGP) Alg. 1 line 2); the implementation draws
  the query noise in blocks (first 64 queries, then 128, 256, …), and redrawing W per block would break Thm D.1.
  The existing halting-law tests used runs shorter than one block.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, stats

from streamdp.mechanisms.geo import PlanarLaplaceGP, SparseVectorGP
from streamdp.noise.generator import unsafe_seeded_generator

P_MIN = 1e-6


@pytest.mark.statistical
def test_planar_laplace_radius_is_gamma_2_with_scale_lipschitz_over_eps():
    """ε = 0.5, K = 4: radius ~ Gamma(shape 2, scale K/ε = 8) (hand value); the law without K (scale 1/ε = 2)
    is rejected on the same sample, and the angle is uniform."""
    rng = unsafe_seeded_generator(9101)
    eps, k_lip, n = 0.5, 4.0, 20_000
    x = np.tile([3.0, -7.0], (n, 1))
    z = PlanarLaplaceGP(eps, lipschitz=k_lip).release(rng, x) - x
    r = np.hypot(z[:, 0], z[:, 1])
    assert stats.kstest(r, stats.gamma(2, scale=8.0).cdf).pvalue > P_MIN
    assert stats.kstest(r, stats.gamma(2, scale=2.0).cdf).pvalue < P_MIN  # wrong law (K dropped)
    theta = np.arctan2(z[:, 1], z[:, 0])
    assert stats.kstest(theta, stats.uniform(-np.pi, 2 * np.pi).cdf).pvalue > P_MIN
    # positive control: K = 1 on the same ε gives scale 2 and is then NOT Gamma(2, 8)
    z1 = PlanarLaplaceGP(eps).release(rng, x) - x
    r1 = np.hypot(z1[:, 0], z1[:, 1])
    assert stats.kstest(r1, stats.gamma(2, scale=2.0).cdf).pvalue > P_MIN
    assert stats.kstest(r1, stats.gamma(2, scale=8.0).cdf).pvalue < P_MIN


def _lap_cdf(z, b):
    return np.where(z < 0, 0.5 * np.exp(np.minimum(z, 0) / b), 1 - 0.5 * np.exp(-np.maximum(z, 0) / b))


@pytest.mark.statistical
def test_svt_threshold_noise_is_drawn_once_for_runs_longer_than_a_block():
    """Constant answers g_j = 15, T = 0, ε = 1, K = 1, 448 queries: W ~ Lap(2) once, V_j ~ Lap(4) (Liang–Yi (CGP) Alg. 1).
    Given W = w each query halts independently w.p. p(w) = F_Lap(4)(w − 15), so
        Pr[index ∈ [a, b)] = E_W[(1 − p)^a − (1 − p)^b],   Pr[⊥] = E_W[(1 − p)^448]
    (integrated over W here, independently of the code). Chi-squared over the bins [0,64), [64,192), [192,448),
    ⊥ at p = 1e-6; the law with a fresh W at 64 and 192 (block starts) is rejected on the same sample."""
    eps, g, n_q, runs = 1.0, 15.0, 448, 8000
    bw, bv = 1.0 / (eps / 2), 2.0 / (eps / 2)
    w = np.linspace(-60 * bw, 60 * bw, 40_001)
    fw = np.exp(-np.abs(w) / bw) / (2 * bw)
    q = 1.0 - _lap_cdf(w - g, bv)  # per-query survival given W = w
    edges = [0, 64, 192, n_q]
    once = [integrate.simpson((q**a - q**b) * fw, x=w) for a, b in zip(edges[:-1], edges[1:])]
    once.append(integrate.simpson(q**n_q * fw, x=w))
    once = np.array(once)
    redraw, surv = [], 1.0
    for a, b in zip(edges[:-1], edges[1:]):
        s = integrate.simpson(q ** (b - a) * fw, x=w)
        redraw.append(surv * (1 - s))
        surv *= s
    redraw = np.array(redraw + [surv])
    assert once.sum() == pytest.approx(1.0, abs=1e-6) and redraw.sum() == pytest.approx(1.0, abs=1e-6)
    assert once[-1] > 2.5 * redraw[-1]  # the two laws differ where it matters (a real control)

    rng = unsafe_seeded_generator(9102)
    svt = SparseVectorGP(eps, 1.0)
    values = np.full(n_q, g)
    counts = np.zeros(4)
    for _ in range(runs):
        res = svt.run(rng, values, 0.0)
        counts[3 if res.index is None else int(np.searchsorted(edges, res.index, side="right")) - 1] += 1
    assert counts.sum() == runs
    assert stats.chisquare(counts, runs * once).pvalue > P_MIN
    assert stats.chisquare(counts, runs * redraw).pvalue < P_MIN


def test_planar_laplace_cost_is_eps_squared_over_2_whatever_the_lipschitz_constant():
    """ε-GP is per distance unit of the INPUT (Liang–Yi (CGP) Def. 2); K only widens the noise (rate ε/K). The CGP charge is
    ε²/2 (Liang–Yi (CGP) Lemma 3.6): ε = 0.3 ⇒ 0.045 for K = 1, 2 and 5 alike (not (ε/K)²/2 = 0.01125 for K = 2)."""
    for k_lip in (1.0, 2.0, 5.0):
        m = PlanarLaplaceGP(0.3, lipschitz=k_lip)
        assert m.cost().cgp_rho == pytest.approx(0.045, rel=1e-12)
        assert m.cost().zcdp_rho == 0 and m.cost().emd_alpha == 0
