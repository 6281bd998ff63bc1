"""contract §3: reports show a spend or budget as (ε, δ)-DP (zCDP, CKS conversion) and as geo-privacy (CGP, Liang–Yi (CGP)
Lemma 3.7). Known answers from the formulas written out here, minimised independently (scipy / a dense grid)."""

import math

import numpy as np
import pytest
from scipy import optimize

from streamdp.accounting.report import as_dp, as_gp


def cks_by_scipy(rho: float, delta: float) -> float:
    """CKS 2020 Cor. 13: ε = min over α > 1 of αρ + (log(1/δ) − log α)/(α − 1) + log(1 − 1/α)."""
    def eps(log_am1):
        a = 1.0 + math.exp(log_am1)
        return a * rho + (math.log(1 / delta) - math.log(a)) / (a - 1) + math.log(1 - 1 / a)

    r = optimize.minimize_scalar(eps, bounds=(-20, 20), method="bounded", options={"xatol": 1e-12})
    return max(r.fun, 0.0)


def gp_by_grid(rho: float, delta: float, Delta: float) -> float:
    """Liang–Yi (CGP) Lemma 3.7 (App. C): ρ-CGP ⇒ (ε(s), δ, Δ)-GP, ε(s) = max{(s/(s−1))·2√(log(2/((s+1)δ)))·√ρ, sρΔ}."""
    s = 1.0 + np.logspace(-6, math.log10(2 / delta - 2), 400_001)
    g = s / (s - 1) * 2 * np.sqrt(np.maximum(np.log(2 / ((s + 1) * delta)), 0.0))
    return float(np.min(np.maximum(g * math.sqrt(rho), s * rho * Delta)))


@pytest.mark.parametrize("rho,delta,dp", [(0.0125, 0.0, 1e-6), (1.0, 1e-6, 1e-6), (10.0, 1e-4, 1e-9)])
def test_zcdp_as_dp_is_the_cks_conversion(rho, delta, dp):
    got = as_dp(rho, delta, dp)
    assert got["delta"] == pytest.approx(delta + dp, rel=1e-12)
    assert got["epsilon"] == pytest.approx(cks_by_scipy(rho, dp), rel=1e-7)
    assert got["epsilon"] < rho + 2 * math.sqrt(rho * math.log(1 / dp))  # tighter than Bun–Steinke (Rogers (unknown-domain) Thm 3)


@pytest.mark.parametrize("rho_m2,within_km,dp", [(1.688e-8, 1.0, 1e-6), (6e-8, 10.0, 1e-6), (3e-9, 2.0, 1e-9)])
def test_cgp_as_gp_is_lemma_3_7_per_km(rho_m2, within_km, dp):
    got = as_gp(rho_m2, 0.0, dp, within_km)
    rho_km = rho_m2 * 1e6  # ρ per m² → per km²: distances in km are 1000× smaller
    want = gp_by_grid(rho_km, dp, within_km)
    assert got["epsilon_per_km"] == pytest.approx(want, rel=1e-5)
    assert got["epsilon_per_km"] <= rho_km * within_km + 2 * math.sqrt(rho_km * math.log(1 / dp))  # closed form
    assert got["delta"] == dp and got["within_km"] == within_km


def test_nothing_spent_is_epsilon_zero_and_unlimited_is_none():
    assert as_dp(0.0, 0.0)["epsilon"] == 0.0 and as_gp(0.0, 0.0)["epsilon_per_km"] == 0.0
    assert as_dp(None, 1e-6) is None and as_gp(None, 0.0) is None
    assert as_dp(1.0, 1 - 1e-7, 1e-6) is None  # δ + δ′ ≥ 1: no guarantee to show
    with pytest.raises(ValueError, match="δ′"):
        as_dp(1.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="GP distance"):
        as_gp(1e-8, 0.0, 1e-6, 0.0)
