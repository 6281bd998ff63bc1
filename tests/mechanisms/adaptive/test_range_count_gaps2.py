"""Second-round mutation gap: the BM0 (point privatisation) range-count baseline must add N(0, 1/(2ρ_i)·I₂) to
each location (Liang–Yi (adaptive budgeting) §6.2.1, Lemma 3.4). The existing tests checked the BM1 law only, so BM0 with 2ρ_i (noise too
small, a privacy loss) went unnoticed."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from streamdp.mechanisms.adaptive.range_count import Rectangle, range_count_baseline
from streamdp.noise.generator import unsafe_seeded_generator

P_MIN = 1e-6


def _phi(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))


def _p_inside(half_side: float, rho: float) -> float:
    """Pr[x + N(0, σ²I₂) lies in the open square of half side a centred at x], σ = 1/√(2ρ): (2Φ(a/σ) − 1)²."""
    sigma = 1.0 / math.sqrt(2.0 * rho)
    return (2.0 * _phi(half_side / sigma) - 1.0) ** 2


@pytest.mark.statistical
def test_bm0_count_is_binomial_with_the_gaussian_of_rho():
    """All n users at the centre of a 2 × 2 square, ρ = 0.5 (σ = 1): the BM0 count is Binomial(n, p) with
    p = (2Φ(1) − 1)² ≈ 0.46607 (hand value); the law at 2ρ (p = (2Φ(√2) − 1)² ≈ 0.71014) is rejected."""
    assert _p_inside(1.0, 0.5) == pytest.approx(0.466065, abs=1e-6)
    assert _p_inside(1.0, 1.0) == pytest.approx(0.710145, abs=1e-6)
    rng = unsafe_seeded_generator(9201)
    n = 20_000
    x = np.zeros((n, 2))
    rect = Rectangle.square((0.0, 0.0), 2.0)
    res = range_count_baseline(rng, x, rect, 0.5, privatization="point")
    assert res.method == "BM0"
    np.testing.assert_array_equal(res.executed_rho, np.full(n, 0.5))
    assert stats.binomtest(res.estimate, n, 0.466065).pvalue > P_MIN
    assert stats.binomtest(res.estimate, n, 0.710145).pvalue < P_MIN  # wrong law (ρ doubled)


@pytest.mark.statistical
def test_bm0_uses_each_users_own_rho():
    """Per-user ρ: n1 users with ρ = 0.5 (p1 = (2Φ(1) − 1)²) and n2 with ρ = 2 (σ = 1/2, p2 = (2Φ(2) − 1)²), all at
    the centre of the 2 × 2 square; the count is a sum of two binomials (mean, variance by hand), |z| < 5. The
    same check with every ρ doubled is rejected (|z| > 5)."""
    rng = unsafe_seeded_generator(9202)
    n1, n2 = 10_000, 10_000
    rho = np.concatenate([np.full(n1, 0.5), np.full(n2, 2.0)])
    x = np.zeros((n1 + n2, 2))
    # a rotated square does not change the law for a user at its centre (the noise is isotropic)
    rect = Rectangle(0.0, 0.0, 2.0, 2.0, angle=0.3)
    res = range_count_baseline(rng, x, rect, rho, privatization="point")
    p1, p2 = _p_inside(1.0, 0.5), _p_inside(1.0, 2.0)
    assert p2 == pytest.approx((2 * 0.9772498680518208 - 1) ** 2, rel=1e-9)
    mean, var = n1 * p1 + n2 * p2, n1 * p1 * (1 - p1) + n2 * p2 * (1 - p2)
    assert abs(res.estimate - mean) / math.sqrt(var) < 5.0
    q1, q2 = _p_inside(1.0, 1.0), _p_inside(1.0, 4.0)
    mean_w, var_w = n1 * q1 + n2 * q2, n1 * q1 * (1 - q1) + n2 * q2 * (1 - q2)
    assert abs(res.estimate - mean_w) / math.sqrt(var_w) > 5.0
