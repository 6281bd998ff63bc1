"""Liang–Yi (CGP) Lemma 2.6 / Thm 4.6 / Lemma 3.6: planar Laplace under GP, GP identity query, GP → CGP cost."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from streamdp.accounting.cost import Cost
from streamdp.mechanisms.geo import IdentityQueryGP, PlanarLaplaceGP, gp_cost
from streamdp.noise.generator import unsafe_seeded_generator

P_MIN = 1e-6


def test_known_answers():
    iq = IdentityQueryGP(0.5)
    assert iq.per_point_epsilon(100) == pytest.approx(0.005)
    # radius ~ Gamma(2, n/ε): mean 2n/ε (Liang–Yi (CGP) Cor. A.1), from the density ε²r e^{−εr} integrated here
    e = 0.005
    mean, _ = integrate.quad(lambda r: r * e * e * r * math.exp(-e * r), 0, np.inf)
    assert iq.expected_point_error(100) == pytest.approx(mean, rel=1e-9)
    # Lemma 3.6: ε-GP ⇒ ε²/2-CGP
    assert iq.cost().cgp_rho == pytest.approx(0.125, rel=1e-12)
    assert gp_cost(0.2).cgp_rho == pytest.approx(0.02, rel=1e-12)
    assert gp_cost(0.2).as_dict().keys() == Cost.cgp(0.02).as_dict().keys()
    assert gp_cost(0.2).zcdp_rho == 0 and gp_cost(0.2).emd_alpha == 0
    assert PlanarLaplaceGP(0.3, lipschitz=2).rate == pytest.approx(0.15)


def test_bad_input():
    with pytest.raises(ValueError, match="epsilon"):
        PlanarLaplaceGP(-1)
    with pytest.raises(ValueError, match="points"):
        IdentityQueryGP(1.0).release(unsafe_seeded_generator(0), np.zeros((3, 3)))


@pytest.mark.statistical
def test_identity_gp_noise_law():
    rng = unsafe_seeded_generator(311)
    eps, n = 2.0, 50
    iq = IdentityQueryGP(eps)
    x = rng.uniform(0, 100, (n, 2))
    z = np.concatenate([iq.release(rng, x) - x for _ in range(2000)])
    r = np.sqrt((z**2).sum(1))
    theta = np.arctan2(z[:, 1], z[:, 0])
    assert stats.kstest(r, stats.gamma(2, scale=n / eps).cdf).pvalue > P_MIN
    assert stats.kstest(theta, stats.uniform(-math.pi, 2 * math.pi).cdf).pvalue > P_MIN
    assert abs(r.mean() - 2 * n / eps) < 5 * math.sqrt(2) * (n / eps) / math.sqrt(r.size)  # sd = √2·scale


@pytest.mark.statistical
def test_monte_carlo_geo_privacy_ratio():
    """Pr[M(x) ∈ S] ≤ e^{ε·d}·Pr[M(x') ∈ S] on histogram bins of the 2-D output (x, x' at distance d), with a
    negative control (rate 2ε/K) that the same check flags."""
    rng = unsafe_seeded_generator(312)
    eps, d, N = 1.0, 1.0, 500_000
    m = PlanarLaplaceGP(eps)
    a = m.release(rng, np.zeros((N, 2)))
    b = m.release(rng, np.tile([d, 0.0], (N, 1)))
    edges = np.linspace(-4, 5, 19)

    def excess(u, v):
        """max over bins of |log ratio| − ε·d in units of its standard error, and the max |log ratio|."""
        hu = np.histogram2d(u[:, 0], u[:, 1], [edges, edges])[0]
        hv = np.histogram2d(v[:, 0], v[:, 1], [edges, edges])[0]
        keep = (hu >= 500) & (hv >= 500)
        lr = np.abs(np.log(hu[keep] / hv[keep]))
        se = np.sqrt(1 / hu[keep] + 1 / hv[keep])
        return np.max((lr - eps * d) / se), lr.max()

    z, lr = excess(a, b)
    assert z < 5.0
    assert lr >= 0.7 * eps * d  # the planar Laplace is nearly tight along the shift: the check has power
    bad = PlanarLaplaceGP(2 * eps)
    z_bad, _ = excess(bad.release(rng, np.zeros((N, 2))), bad.release(rng, np.tile([d, 0.0], (N, 1))))
    assert z_bad > 10.0
