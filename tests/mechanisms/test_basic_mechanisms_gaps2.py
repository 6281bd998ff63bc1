"""Gaussian and Laplace mechanisms with sensitivities ≠ 1: the noise added must be exactly the scale the cost is
computed from (Lap(b) for :class:`LaplaceMechanism`, N(0, σ²) for :class:`GaussianMechanism`), whatever Δ∞, Δ0
or Δ2 are. The existing law tests use sensitivity 1, where "b" and "b/Δ∞" (or "σ/Δ2") coincide, so a mechanism
that divided its scale by the sensitivity — adding less noise than its cost() claims — passed them.

Known answers by hand (Rogers (unknown-domain) Thm 4 and the Thm 7 proof): Lap(b = 1.5), Δ∞ = 3, Δ0 = 4 → ρ = 4·(3/1.5)²/2 = 8;
N(0, σ² = 1.5²), Δ2 = 3 → ρ = 3²/(2·1.5²) = 2. KS at p = 1e-6, fixed seeds; the same sample must reject the
scales b/Δ∞, b/Δ0 (resp. σ/Δ2), so the test can fail.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from streamdp.mechanisms.gaussian import GaussianMechanism
from streamdp.mechanisms.laplace import LaplaceMechanism
from streamdp.noise.generator import unsafe_seeded_generator

pytestmark = pytest.mark.statistical

P = 1e-6
N = 200_000


def test_laplace_mechanism_adds_lap_b_whatever_the_sensitivities():
    b, linf, l0 = 1.5, 3.0, 4
    m = LaplaceMechanism(b, linf, l0)
    assert m.cost().zcdp_rho == pytest.approx(8.0, rel=1e-12)
    x = np.linspace(-100.0, 100.0, N)
    z = m.release(x, unsafe_seeded_generator(2201), unsafe_rng=True) - x
    assert stats.kstest(z, stats.laplace(scale=1.5).cdf).pvalue > P
    assert stats.kstest(z, stats.laplace(scale=1.5 / 3.0).cdf).pvalue < P  # b/Δ∞
    assert stats.kstest(z, stats.laplace(scale=1.5 / 4.0).cdf).pvalue < P  # b/Δ0
    assert stats.kstest(z, stats.laplace(scale=1.5 * 1.05).cdf).pvalue < P  # power: 5 % off


def test_gaussian_mechanism_adds_n_0_sigma2_whatever_the_sensitivity():
    sigma, l2 = 1.5, 3.0
    m = GaussianMechanism(sigma, l2)
    assert m.cost().zcdp_rho == pytest.approx(2.0, rel=1e-12)
    x = np.linspace(-100.0, 100.0, N)
    z = m.release(x, unsafe_seeded_generator(2202), unsafe_rng=True) - x
    assert stats.kstest(z, stats.norm(scale=1.5).cdf).pvalue > P
    assert stats.kstest(z, stats.norm(scale=1.5 / 3.0).cdf).pvalue < P  # σ/Δ2
    assert stats.kstest(z, stats.norm(scale=1.5 * 1.05).cdf).pvalue < P  # power: 5 % off
