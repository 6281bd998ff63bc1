"""δ-approximate ρ-zCDP accounting: composition and (ε, δ) conversions (Rogers (unknown-domain) Thm 3, 6; CKS 2020; Balle–Wang 2018).

Expected values are recomputed here from the formulas, with independent numerics (dense grids, scipy.stats).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from streamdp.accounting import Cost
from streamdp.accounting.zcdp import (
    bun_steinke_epsilon,
    cks_delta,
    cks_epsilon,
    cks_epsilon_at,
    compose,
    gaussian_exact_delta,
    gaussian_exact_epsilon,
    pure_dp_to_zcdp,
    zcdp_to_dp,
)

RHOS = np.logspace(-4, 1, 26)
DELTAS = np.logspace(-12, -3, 10)


def _cks_eps_bruteforce(rho: float, delta: float) -> float:
    """min over a dense grid of α of αρ + (log(1/δ) − log α)/(α−1) + log(1 − 1/α) (CKS 2020 Cor. 13 solved for ε)."""
    best = math.inf
    lo, hi = -12.0, 14.0  # log(α − 1)
    for _ in range(6):  # grid, then zoom around the best point
        t = np.linspace(lo, hi, 20001)
        a = 1.0 + np.exp(t)
        e = a * rho + (math.log(1 / delta) - np.log(a)) / (a - 1.0) + np.log1p(-1.0 / a)
        i = int(np.argmin(e))
        best = min(best, float(e[i]))
        step = (hi - lo) / 20000
        lo, hi = t[i] - 2 * step, t[i] + 2 * step
    return max(best, 0.0)


def _cks_delta_bruteforce(rho: float, eps: float) -> float:
    t = np.linspace(-14.0, 14.0, 400001)
    a = 1.0 + np.exp(t)
    log_d = (a - 1) * (a * rho - eps) - np.log(a - 1) + a * np.log1p(-1.0 / a)
    return float(np.exp(log_d.min()))


def _gaussian_delta_scipy(rho: float, eps: float) -> float:
    """Balle–Wang 2018 Thm 8 with Δ/σ = √(2ρ), evaluated with scipy.stats.norm."""
    a = math.sqrt(2 * rho)
    return float(stats.norm.cdf(a / 2 - eps / a) - math.exp(eps) * stats.norm.cdf(-a / 2 - eps / a))


# ------------------------------------------------------------------------------------------------ composition
def test_compose_adds_rho_and_delta():
    total = compose([Cost.zcdp(0.1, 1e-9), Cost.zcdp(0.25, 2e-9), Cost.cgp(0.5)])
    assert total.zcdp_rho == pytest.approx(0.35)
    assert total.zcdp_delta == pytest.approx(3e-9)
    assert total.cgp_rho == pytest.approx(0.5)
    assert compose([]).is_zero()
    with pytest.raises(ValueError, match="Cost"):
        compose([0.1])


def test_pure_dp_to_zcdp():
    assert pure_dp_to_zcdp(0.5) == pytest.approx(0.125)  # Rogers (unknown-domain) Thm 3: ε²/2
    with pytest.raises(ValueError, match="epsilon"):
        pure_dp_to_zcdp(-1)


# ------------------------------------------------------------------------------------------------- Bun–Steinke
def test_bun_steinke_formula():
    for rho in (1e-4, 0.03125, 1.0, 10.0):
        for delta in (1e-12, 1e-6, 1e-3):
            assert bun_steinke_epsilon(rho, delta) == pytest.approx(rho + 2 * math.sqrt(rho * math.log(1 / delta)),
                                                                     rel=1e-15)


# --------------------------------------------------------------------------------------------------------- CKS
def test_cks_spot_values():
    # OpenDP's test of its CKS conversion: Gaussian of scale 4, sensitivity 1 → ρ = 1/32.
    assert cks_epsilon(1 / 32, 1e-3) == pytest.approx(0.6880024554878086, rel=1e-12)
    assert cks_delta(1 / 32, 0.0) == pytest.approx(0.1508457845622862, rel=1e-12)
    assert cks_delta(1 / 32, 0.6880024554878086) == pytest.approx(1e-3, rel=1e-9)


def test_ordering_exact_le_cks_le_bun_steinke_on_grid():
    R, D = np.meshgrid(RHOS, DELTAS, indexing="ij")
    g = gaussian_exact_epsilon(R, D)
    c = cks_epsilon(R, D)
    b = bun_steinke_epsilon(R, D)
    assert g.shape == c.shape == b.shape == R.shape
    assert np.all(g <= c * (1 + 1e-12))
    assert np.all(c <= b)
    assert np.all(c < b)  # strictly tighter on this grid
    # Not vacuous: on this range CKS is within 40% of the exact Gaussian curve and BS up to 2.6× looser.
    assert np.all(c / g < 1.4)
    assert (b / c).max() > 2.0


@pytest.mark.parametrize("rho,delta", [(1e-4, 1e-12), (1e-3, 1e-6), (0.03125, 1e-3), (0.5, 1e-9), (3.0, 1e-5),
                                       (10.0, 1e-12), (10.0, 1e-3)])
def test_cks_matches_bruteforce_minimisation(rho, delta):
    eps = cks_epsilon(rho, delta)
    brute = _cks_eps_bruteforce(rho, delta)
    assert eps <= brute * (1 + 1e-12)
    assert eps == pytest.approx(brute, rel=1e-9)
    # the δ of the corollary at this ε is (numerically) δ: valid, and tight
    assert _cks_delta_bruteforce(rho, eps) == pytest.approx(delta, rel=1e-6)
    assert _cks_delta_bruteforce(rho, eps * (1 - 1e-4)) > delta


def test_cks_epsilon_at_any_alpha_is_no_better_than_optimum():
    for alpha in (1.01, 2.0, 13.0, 1000.0):
        assert cks_epsilon_at(alpha, 1 / 32, 1e-3) >= cks_epsilon(1 / 32, 1e-3)
    with pytest.raises(ValueError, match="alpha"):
        cks_epsilon_at(1.0, 0.1, 1e-3)


def test_cks_delta_inverts_cks_epsilon():
    R, D = np.meshgrid(RHOS[::5], DELTAS[::3], indexing="ij")
    assert np.allclose(cks_delta(R, cks_epsilon(R, D)), D, rtol=1e-8)


def test_cks_edge_cases():
    assert cks_epsilon(0.0, 1e-6) == 0.0
    assert cks_delta(0.0, 0.0) == 0.0
    # δ so large that ε = 0 suffices: certified by δ(0) ≤ δ
    assert cks_delta(1e-12, 0.0) < 1e-5 and cks_epsilon(1e-12, 1e-5) == 0.0
    assert cks_epsilon(1.0, 0.5) > 0.0 and cks_delta(1.0, 0.0) > 0.5
    # extreme but finite inputs stay finite and ordered
    assert cks_epsilon(1e6, 1e-12) <= bun_steinke_epsilon(1e6, 1e-12)
    assert 0 < cks_epsilon(1e-12, 1e-300) <= bun_steinke_epsilon(1e-12, 1e-300)


def test_scalar_in_scalar_out_and_broadcasting():
    assert isinstance(cks_epsilon(0.1, 1e-6), float)
    assert isinstance(gaussian_exact_epsilon(0.1, 1e-6), float)
    out = cks_epsilon([0.1, 0.2, 0.3], 1e-6)
    assert out.shape == (3,)
    assert np.all(np.diff(out) > 0)  # increasing in ρ
    assert np.all(np.diff(cks_epsilon(0.1, [1e-9, 1e-6, 1e-3])) < 0)  # decreasing in δ


@pytest.mark.parametrize("fn", [bun_steinke_epsilon, cks_epsilon, gaussian_exact_epsilon])
def test_bad_parameters(fn):
    with pytest.raises(ValueError, match="rho"):
        fn(-0.1, 1e-6)
    with pytest.raises(ValueError, match="rho"):
        fn(float("nan"), 1e-6)
    with pytest.raises(ValueError, match="delta"):
        fn(0.1, 0.0)
    with pytest.raises(ValueError, match="delta"):
        fn(0.1, 1.0)


# ------------------------------------------------------------------------------------------ analytic Gaussian
def test_gaussian_exact_inverts_balle_wang_curve():
    for rho in (1e-4, 0.01, 0.5, 10.0):
        for delta in (1e-12, 1e-6, 1e-3):
            eps = gaussian_exact_epsilon(rho, delta)
            assert _gaussian_delta_scipy(rho, eps) == pytest.approx(delta, rel=1e-6)
            assert gaussian_exact_delta(rho, eps) <= delta * (1 + 1e-12)  # rounded up: never under-reports


def test_gaussian_exact_literature_value():
    # Balle–Wang 2018: the analytic Gaussian mechanism for (ε, δ) = (1, 1e-5), Δ = 1, needs σ ≈ 3.73.
    sigma = 3.7306
    assert gaussian_exact_epsilon(1 / (2 * sigma**2), 1e-5) == pytest.approx(1.0, abs=2e-4)
    # Classical calibration σ = √(2 log(1.25/δ))/ε = 4.84 is far more than needed: exact ε ≈ 0.75
    classic = math.sqrt(2 * math.log(1.25 / 1e-5))
    assert gaussian_exact_epsilon(1 / (2 * classic**2), 1e-5) < 0.8


def test_gaussian_exact_zero_when_delta_large():
    # δ(0) = Φ(a/2) − Φ(−a/2) for a = √(2ρ); any δ above it needs no ε.
    rho = 1e-6
    a = math.sqrt(2 * rho)
    d0 = stats.norm.cdf(a / 2) - stats.norm.cdf(-a / 2)
    assert gaussian_exact_epsilon(rho, d0 * 1.01) == 0.0
    assert gaussian_exact_epsilon(rho, d0 * 0.5) > 0.0


# ------------------------------------------------------------------------------------------ approximate → DP
def test_zcdp_to_dp():
    rho, da, dt = 0.2, 1e-7, 1e-6
    # against the independent brute-force minimisation of CKS Cor. 13 (not against cks_epsilon, which is code
    # under test too — test audit of 2026-11-23): the approximate δ is subtracted from the target first
    assert zcdp_to_dp(rho, da, dt) == pytest.approx(_cks_eps_bruteforce(rho, dt - da), rel=1e-6)
    assert zcdp_to_dp(rho, 0.0, dt) == pytest.approx(_cks_eps_bruteforce(rho, dt), rel=1e-6)
    assert zcdp_to_dp(rho, da, dt) == pytest.approx(cks_epsilon(rho, dt - da), rel=1e-15)
    assert zcdp_to_dp(rho, da, dt) > cks_epsilon(rho, dt)  # part of δ_target is already spent
    with pytest.raises(ValueError, match="delta_target"):
        zcdp_to_dp(rho, 1e-6, 1e-6)
    with pytest.raises(ValueError, match="delta_target"):
        zcdp_to_dp(rho, 1e-5, 1e-6)
    with pytest.raises(ValueError, match="delta_approx"):
        zcdp_to_dp(rho, -1e-9, 1e-6)
