"""What a per-user spend or budget means as (ε, δ)-DP and as geo-privacy — the conversions docs/contract.md §3 asks
reports to show ("optimal zCDP→DP conversion; Liang–Yi (CGP) Lemma 3.7 for CGP").

* ``zcdp`` — δ-approximate ρ-zCDP ⇒ (ε, δ + δ′)-DP with ε = :func:`~streamdp.accounting.zcdp.cks_epsilon` (ρ, δ′)
  (Rogers (unknown-domain) Thm 3 form; Canonne–Kamath–Steinke 2020 Cor. 13, minimised over the Rényi order).
* ``cgp`` — ρ-CGP per m² ⇒ (ε, δ + δ′, Δ)-GP, ε per km for every two locations at most Δ km apart
  (Liang–Yi (CGP) Lemma 3.7 / App. C family, minimised over s: :func:`~streamdp.accounting.cgp.cgp_to_gp_epsilon`), after
  converting ρ to per km² (×10⁶). The approximate part δ of the CGP notion adds to δ′ as in zCDP.
* ``emd`` is already (α, δ)-d_EM-DP: nothing to convert.

δ′ is the operator's choice of conversion slack (default 10⁻⁶): a smaller δ′ gives a larger ε. An amount that is
unlimited (None) or whose δ + δ′ reaches 1 converts to None (no finite guarantee to show).
"""

from __future__ import annotations

import math

from streamdp.accounting.cgp import cgp_to_gp_epsilon, convert_cgp_rho
from streamdp.accounting.zcdp import cks_epsilon

__all__ = ["DEFAULT_DELTA_PRIME", "DEFAULT_GP_WITHIN_KM", "as_dp", "as_gp"]

DEFAULT_DELTA_PRIME = 1e-6
DEFAULT_GP_WITHIN_KM = 1.0


def _check(delta_prime: float) -> float:
    d = float(delta_prime)
    if not (0.0 < d < 1.0):
        raise ValueError(f"the conversion δ′ must lie in (0, 1), got {delta_prime!r}")
    return d


def as_dp(rho: float | None, delta: float | None, delta_prime: float = DEFAULT_DELTA_PRIME) -> dict | None:
    """δ-approximate ρ-zCDP as (ε, δ + δ′)-DP: ``{"epsilon", "delta"}``, or None when unlimited / δ + δ′ ≥ 1."""
    dp = _check(delta_prime)
    if rho is None or delta is None or not math.isfinite(rho) or delta + dp >= 1.0:
        return None
    return {"epsilon": float(cks_epsilon(float(rho), dp)), "delta": float(delta) + dp}


def as_gp(rho_per_m2: float | None, delta: float | None, delta_prime: float = DEFAULT_DELTA_PRIME,
          within_km: float = DEFAULT_GP_WITHIN_KM) -> dict | None:
    """δ-approximate ρ-CGP (ρ per m²) as (ε per km, δ + δ′)-GP for locations at most ``within_km`` apart:
    ``{"epsilon_per_km", "delta", "within_km"}``, or None when unlimited / δ + δ′ ≥ 1."""
    dp = _check(delta_prime)
    w = float(within_km)
    if not (math.isfinite(w) and w > 0):
        raise ValueError(f"the GP distance must be finite and > 0 (km), got {within_km!r}")
    if rho_per_m2 is None or delta is None or not math.isfinite(rho_per_m2) or delta + dp >= 1.0:
        return None
    rho_km = float(convert_cgp_rho(float(rho_per_m2), "m", "km"))
    return {"epsilon_per_km": float(cgp_to_gp_epsilon(rho_km, dp, w)), "delta": float(delta) + dp, "within_km": w}
