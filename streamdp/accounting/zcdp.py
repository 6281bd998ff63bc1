"""δ-approximate ρ-zCDP: composition and conversion to (ε, δ)-DP.

Accounting notion ``zcdp`` of docs/contract.md §3 (Rogers (unknown-domain) Def. 2.2, Bun–Steinke 2016 / Papernot–Steinke 2022). Costs
compose by adding both parameters (Rogers (unknown-domain) Thm 6 gives δ1 + δ2 − δ1δ2; we charge δ1 + δ2, which is never smaller).

Conversions to (ε, δ)-DP, used only for display (the budget itself is kept in ρ and δ):

* :func:`bun_steinke_epsilon` — ε = ρ + 2√(ρ log(1/δ')) (Rogers (unknown-domain) Thm 3; Bun–Steinke 2016 Prop. 1.3).
* :func:`cks_epsilon` — the tighter conversion of Canonne–Kamath–Steinke 2020 ("The Discrete Gaussian for
  Differential Privacy", Prop. 12 / Cor. 13): ρ-zCDP ⇒ (ε, δ')-DP with

      δ' = inf_{α>1} exp((α−1)(αρ−ε)) / (α−1) · (1 − 1/α)^α.

  Solving for ε at a fixed α gives ε(α) = αρ + (log(1/δ') − log α)/(α−1) + log(1 − 1/α); every α > 1 yields a
  valid ε, and ε'(α) = ρ − (log(1/δ') − log α)/(α−1)², so ε(α) is unimodal with its minimum at the unique root of
  (α−1)²ρ + log α = log(1/δ'). We find that root by vectorised bisection in log(α−1) and evaluate ε(α) there:
  whatever the bisection's precision, the reported ε is the value at a concrete α, hence always sound.
* :func:`gaussian_exact_epsilon` — the exact (ε, δ) curve of one Gaussian mechanism with ρ = Δ²/(2σ²)
  (Balle–Wang 2018, "analytic Gaussian mechanism", Thm 8):
  δ(ε) = Φ(Δ/(2σ) − εσ/Δ) − e^ε Φ(−Δ/(2σ) − εσ/Δ), inverted for ε by root finding in log space.
  It is a lower bound for any conversion that only knows ρ (used in tests: exact ≤ CKS ≤ Bun–Steinke).

For δ-approximate ρ-zCDP, :func:`zcdp_to_dp` gives ε for a total δ_target = δ_approx + δ'.

All conversion functions accept scalars or numpy arrays (broadcast together) and return a float for scalar
input, an array otherwise.
"""

from __future__ import annotations

import math
from typing import Iterable

import numpy as np
from scipy import optimize, special

from streamdp.accounting.cost import Cost

__all__ = [
    "compose",
    "pure_dp_to_zcdp",
    "bun_steinke_epsilon",
    "cks_epsilon",
    "cks_epsilon_at",
    "cks_delta",
    "gaussian_exact_epsilon",
    "gaussian_exact_delta",
    "zcdp_to_dp",
]

_BISECT_STEPS = 200  # log(α−1) bracket ≤ ~1500 wide → 1500/2^200: far below float resolution
_TOL = 1e-13  # relative width of the final bisection bracket (in log(α−1)); ε is flat at its minimum


# ---------------------------------------------------------------------------------------------------- helpers
def _as_array(x, name: str) -> np.ndarray:
    try:
        a = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number (or array of reals), got {x!r}") from None
    if np.any(np.isnan(a)):
        raise ValueError(f"{name} must not be NaN, got {x!r}")
    return a


def _rho(x) -> np.ndarray:
    a = _as_array(x, "rho")
    if not np.all(np.isfinite(a)) or np.any(a < 0):
        raise ValueError(f"rho must be finite and ≥ 0, got {x!r}")
    return a


def _delta(x, name: str = "delta") -> np.ndarray:
    a = _as_array(x, name)
    if np.any(a <= 0) or np.any(a >= 1):
        raise ValueError(f"{name} must lie in the open interval (0, 1), got {x!r}")
    return a


def _out(a: np.ndarray):
    a = np.asarray(a, dtype=np.float64)
    return float(a) if a.ndim == 0 else a


# ---------------------------------------------------------------------------------------------- composition
def compose(costs: Iterable[Cost]) -> Cost:
    """Sequential (adaptive) composition: every component adds (Rogers (unknown-domain) Thm 6, conservatively δ1 + δ2)."""
    total = Cost()
    for c in costs:
        if not isinstance(c, Cost):
            raise ValueError(f"costs must be Cost instances, got {type(c).__name__}")
        total = total + c
    return total


def pure_dp_to_zcdp(epsilon: float) -> float:
    """ε-DP ⇒ ε²/2-zCDP (Rogers (unknown-domain) Thm 3)."""
    e = float(epsilon)
    if not math.isfinite(e) or e < 0:
        raise ValueError(f"epsilon must be finite and ≥ 0, got {epsilon!r}")
    return e * e / 2.0


# ------------------------------------------------------------------------------------------ Bun–Steinke (Thm 3)
def bun_steinke_epsilon(rho, delta):
    """ε = ρ + 2√(ρ log(1/δ)) — Rogers (unknown-domain) Thm 3: ρ-zCDP ⇒ (ε, δ)-DP for every δ ∈ (0, 1)."""
    r, d = np.broadcast_arrays(_rho(rho), _delta(delta))
    return _out(r + 2.0 * np.sqrt(r * -np.log(d)))


# ------------------------------------------------------------------------------------ Canonne–Kamath–Steinke
def _cks_eps_of_t(t: np.ndarray, rho: np.ndarray, log_inv_delta: np.ndarray) -> np.ndarray:
    """ε(α) with α = 1 + e^t, in a form that stays accurate for α near 1 and for huge α.

    ε(α) = αρ + (log(1/δ) − log α)/(α−1) + log(1 − 1/α), log α = softplus(t), log(1 − 1/α) = t − softplus(t).
    """
    sp = np.logaddexp(0.0, t)  # log α
    return (1.0 + np.exp(t)) * rho + (log_inv_delta - sp) * np.exp(-t) + (t - sp)


def cks_epsilon_at(alpha, rho, delta):
    """ε(α) of CKS 2020 Cor. 13 at a given Rényi order α > 1 (valid for every α; :func:`cks_epsilon` minimises)."""
    a = _as_array(alpha, "alpha")
    if np.any(a <= 1) or not np.all(np.isfinite(a)):
        raise ValueError(f"alpha must be finite and > 1, got {alpha!r}")
    a, r, d = np.broadcast_arrays(a, _rho(rho), _delta(delta))
    eps = _cks_eps_of_t(np.log(a - 1.0), r, -np.log(d))
    return _out(np.maximum(eps, 0.0))


def _cks_epsilon_scalar(rho: float, delta: float) -> float:
    """Scalar path of :func:`cks_epsilon` (pure Python floats: ~50× faster than numpy on 0-d arrays)."""
    if rho == 0.0:
        return 0.0
    L = -math.log(delta)
    lo = math.log(min(math.sqrt(L / (4.0 * rho)), L / 4.0))
    hi = math.log(min(math.sqrt(L / rho), math.expm1(min(L, 700.0))))
    for _ in range(_BISECT_STEPS):
        if hi - lo <= _TOL * max(1.0, abs(lo) + abs(hi)):
            break
        mid = 0.5 * (lo + hi)
        u = math.exp(mid)
        if u * u * rho + math.log1p(u) - L >= 0.0:
            hi = mid
        else:
            lo = mid

    def eps_at(t: float) -> float:
        sp = t + math.log1p(math.exp(-t)) if t > 0 else math.log1p(math.exp(t))  # log α = softplus(t)
        return (1.0 + math.exp(t)) * rho + (L - sp) * math.exp(-t) + (t - sp)

    eps = min(eps_at(lo), eps_at(hi), eps_at(0.5 * math.log(L / rho)))
    return max(eps, 0.0)


def cks_epsilon(rho, delta):
    """Smallest ε such that ρ-zCDP ⇒ (ε, δ)-DP by CKS 2020 Cor. 13 (optimal α; ε ≥ 0).

    ρ = 0 gives ε = 0. Never larger than :func:`bun_steinke_epsilon` (its optimal α is evaluated too).
    """
    r, d = np.broadcast_arrays(_rho(rho), _delta(delta))
    if r.ndim == 0:
        return _cks_epsilon_scalar(float(r), float(d))
    r = r.astype(np.float64, copy=True)
    L = -np.log(d)  # log(1/δ) > 0
    pos = r > 0
    rr = np.where(pos, r, 1.0)  # placeholder ρ where ρ = 0 (handled below)
    # Root of h(u) = u²ρ + log1p(u) − L, u = α − 1, increasing in u: bracket [u_lo, u_hi] (see module doc).
    u_hi = np.minimum(np.sqrt(L / rr), np.expm1(np.minimum(L, 700.0)))
    u_lo = np.minimum(np.sqrt(L / (4.0 * rr)), L / 4.0)
    lo, hi = np.log(u_lo), np.log(u_hi)
    for _ in range(_BISECT_STEPS):
        if np.all(hi - lo <= _TOL * np.maximum(1.0, np.abs(lo) + np.abs(hi))):
            break
        mid = 0.5 * (lo + hi)
        u = np.exp(mid)
        above = u * u * rr + np.log1p(u) - L >= 0.0
        hi = np.where(above, mid, hi)
        lo = np.where(above, lo, mid)
    eps = np.minimum(_cks_eps_of_t(lo, rr, L), _cks_eps_of_t(hi, rr, L))
    # Bun–Steinke's optimal α = 1 + √(log(1/δ)/ρ): CKS at that α is ≤ ρ + 2√(ρ log(1/δ)) (the factor
    # (1−1/α)^α/(α−1) ≤ 1); taking the minimum makes "CKS ≤ Bun–Steinke" hold to the last bit.
    eps = np.minimum(eps, _cks_eps_of_t(0.5 * np.log(L / rr), rr, L))
    eps = np.where(pos, np.maximum(eps, 0.0), 0.0)
    return _out(eps)


def cks_delta(rho, epsilon):
    """δ(ε) = inf_{α>1} exp((α−1)(αρ−ε))/(α−1)·(1−1/α)^α (CKS 2020 Cor. 13), capped at 1.

    With u = α−1 the log of the objective is u(αρ−ε) + u·log u − α·log α, whose derivative
    (2α−1)ρ − ε + log(1−1/α) increases in α: the infimum sits at its unique root, found by bisection in log u.
    ρ = 0 gives δ = 0 (the privacy loss is identically zero).
    """
    r, e = np.broadcast_arrays(_rho(rho), _as_array(epsilon, "epsilon"))
    if np.any(e < 0) or not np.all(np.isfinite(e)):
        raise ValueError(f"epsilon must be finite and ≥ 0, got {epsilon!r}")
    pos = r > 0
    rr = np.where(pos, r, 1.0)
    # Bracket in t = log u: the derivative is < 0 at t_lo and > 0 at t_hi.
    lo = np.minimum(0.0, e - 3.0 * rr - 1.0)  # u ≤ 1: (2u+1)ρ ≤ 3ρ, log(u/(1+u)) ≤ log u ⇒ derivative ≤ −1
    hi = np.log((e + 1.0) / rr + 1.0)  # 2uρ ≥ 2(ε+1), log(u/(1+u)) ≥ −1/u ≥ −1 ⇒ derivative ≥ ε + 1
    for _ in range(_BISECT_STEPS):
        if np.all(hi - lo <= _TOL * np.maximum(1.0, np.abs(lo) + np.abs(hi))):
            break
        mid = 0.5 * (lo + hi)
        u = np.exp(mid)
        rising = (2.0 * u + 1.0) * rr - e + (mid - np.logaddexp(0.0, mid)) >= 0.0
        hi = np.where(rising, mid, hi)
        lo = np.where(rising, lo, mid)

    def log_obj(t):
        u = np.exp(t)
        sp = np.logaddexp(0.0, t)  # log α
        return u * ((1.0 + u) * rr - e) + u * t - (1.0 + u) * sp

    log_d = np.minimum(log_obj(lo), log_obj(hi))
    return _out(np.where(pos, np.minimum(np.exp(log_d), 1.0), 0.0))


# ------------------------------------------------------------------------------------- analytic Gaussian (exact)
def _gauss_log_delta(eps: float, a: float) -> float:
    """log δ(ε) for the Gaussian mechanism with Δ/σ = a (Balle–Wang 2018 Thm 8), accurate for tiny δ.

    δ(ε) = Φ(a/2 − ε/a) − e^ε Φ(−a/2 − ε/a) = Φ(x1)·(1 − exp(ε + log Φ(x2) − log Φ(x1))).
    """
    x1 = a / 2.0 - eps / a
    x2 = -a / 2.0 - eps / a
    l1 = special.log_ndtr(x1)
    l2 = special.log_ndtr(x2)
    z = eps + l2 - l1  # < 0 always (the curve is positive)
    if z >= 0.0:
        return -math.inf
    return l1 + math.log(-math.expm1(z))


def gaussian_exact_delta(rho, epsilon):
    """Exact δ(ε) of a Gaussian mechanism whose zCDP parameter is ρ = Δ²/(2σ²) (Balle–Wang 2018 Thm 8)."""
    r, e = np.broadcast_arrays(_rho(rho), _as_array(epsilon, "epsilon"))
    if np.any(e < 0) or not np.all(np.isfinite(e)):
        raise ValueError(f"epsilon must be finite and ≥ 0, got {epsilon!r}")
    out = np.empty(r.shape, dtype=np.float64)
    for idx in np.ndindex(r.shape):
        rv = float(r[idx])
        out[idx] = 0.0 if rv == 0 else math.exp(_gauss_log_delta(float(e[idx]), math.sqrt(2.0 * rv)))
    return _out(out)


def _gaussian_exact_scalar(rho: float, delta: float) -> float:
    if rho == 0.0:
        return 0.0
    a = math.sqrt(2.0 * rho)
    target = math.log(delta)
    f = lambda e: _gauss_log_delta(e, a) - target  # noqa: E731 — decreasing in ε
    if f(0.0) <= 0.0:
        return 0.0
    hi = float(bun_steinke_epsilon(rho, delta))  # an upper bound on the exact ε
    while f(hi) > 0.0:  # numerically never taken; kept so the bracket is certain
        hi *= 2.0
    eps = optimize.brentq(f, 0.0, hi, xtol=1e-14, rtol=4 * np.finfo(float).eps, maxiter=500)
    # Round up until the curve certifies δ: never report an ε smaller than the true one.
    step = max(abs(eps) * 1e-15, 1e-300)
    while f(eps) > 0.0:
        eps += step
        step *= 2.0
    return eps


def gaussian_exact_epsilon(rho, delta):
    """Exact ε at δ of one Gaussian mechanism with ρ = Δ²/(2σ²) (Balle–Wang 2018, inverted by root finding)."""
    r, d = np.broadcast_arrays(_rho(rho), _delta(delta))
    out = np.empty(r.shape, dtype=np.float64)
    for idx in np.ndindex(r.shape):
        out[idx] = _gaussian_exact_scalar(float(r[idx]), float(d[idx]))
    return _out(out)


# ------------------------------------------------------------------------------------ approximate zCDP → DP
def zcdp_to_dp(rho, delta_approx, delta_target):
    """ε such that δ_approx-approximate ρ-zCDP ⇒ (ε, δ_target)-DP, δ_target = δ_approx + δ' (Rogers (unknown-domain) Thm 3 form,
    with the CKS conversion for the ρ part). Requires δ_target > δ_approx."""
    da = _as_array(delta_approx, "delta_approx")
    if np.any(da < 0) or np.any(da >= 1):
        raise ValueError(f"delta_approx must lie in [0, 1), got {delta_approx!r}")
    dt = _delta(delta_target, "delta_target")
    if np.any(dt <= da):
        raise ValueError(
            f"delta_target must exceed delta_approx (got delta_target={delta_target!r}, delta_approx={delta_approx!r})"
        )
    return cks_epsilon(rho, dt - da)
