"""Concentrated geo-privacy (CGP) accounting: units, GP ↔ CGP conversions and the approximate-GP filter.

Accounting notion ``cgp`` of docs/contract.md §3. A mechanism is ρ-CGP if D_α(M(x)‖M(x')) ≤ α·ρ·dist(x, x')² for all
α > 1 (Liang–Yi (CGP) Def. 3; Liang–Yi (adaptive budgeting) Def. 4 with Λ = ∞): ρ is a loss **per unit distance squared**, so a ρ is meaningless
without its unit, and ρ's of different units must be converted before they are added (composition is additive,
Liang–Yi (CGP) Thm 3.2). An ε-GP parameter is a loss per unit distance (Liang–Yi (adaptive budgeting) Def. 2).

* :func:`convert_cgp_rho`, :func:`convert_gp_epsilon`, :func:`convert_distance` — change of distance unit.
  With d_new = d_old·(old unit / new unit): ρ_new = ρ_old·(new unit/old unit)², e.g. metres → km: ×10⁶.
* :func:`gp_to_cgp` — ε-GP ⇒ ε²/2-CGP (Liang–Yi (CGP) Lemma 3.6; Liang–Yi (adaptive budgeting) Lemma 3.1).
* :func:`cgp_to_gp_epsilon_at` — the family of Liang–Yi (CGP) Lemma 3.7 (App. C) / Liang–Yi (adaptive budgeting) Lemma 3.2 eq. (3): ρ-CGP ⇒
  (ε(s), δ, Δ)-GP for every s ∈ (1, 2/δ − 1) with ε(s) = max{g_δ(s)·√ρ, s·ρ·Δ},
  g_δ(s) = (s/(s−1))·2√(log(2/((s+1)δ))).
* :func:`cgp_to_gp_epsilon` — that family minimised over s. g_δ decreases and sρΔ increases in s, so the
  minimum of the max is at their crossing, i.e. at the root of 2√(log(2/((s+1)δ))) = (s−1)·Δ·√ρ (divide the
  crossing equation by s/(s−1)); found by vectorised bisection in log(s−1). The value reported is the family
  member at a concrete s, so it is always a valid GP parameter.
* :func:`cgp_to_gp_epsilon_simple` — the closed form ρΔ + 2√(ρ log(1/δ)) (Liang–Yi (CGP) Lemma 3.7), never smaller.
* :func:`approx_gp_filter_value` / :func:`approx_gp_filter_continue` — the approximate-GP privacy filter of
  Liang–Yi (adaptive budgeting) eq. (10): CONT iff min_{s>1} max(g_δ(s)·√(Σr), sΛ·Σr) ≤ B (the same minimisation with ρ = Σr, Δ = Λ).
* :func:`approx_gp_budget` — that filter as a budget of the ``cgp`` notion. Its left side f(R) is a continuous,
  non-decreasing function of R = Σr alone (for each s both terms of the max increase with R; a minimum of
  non-decreasing functions is non-decreasing), and f(R) → 0 as R → 0, so CONT ⟺ f(Σr) ≤ B ⟺ Σr ≤ R*(B, δ, Λ)
  with R* = max{R : f(R) ≤ B}: eq. (10) *is* the additive filter eq. (7) with the budget R*. The service's per-user
  filter (spent + cost ≤ budget, componentwise) therefore implements eq. (10) exactly when the ``cgp_rho`` budget is
  R* — the configuration's ``[budget] gp_epsilon_per_km`` / ``gp_delta`` / ``gp_within_km`` set it so.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "DISTANCE_UNITS",
    "metres_per_unit",
    "convert_cgp_rho",
    "convert_gp_epsilon",
    "convert_distance",
    "gp_to_cgp",
    "g_delta",
    "cgp_to_gp_epsilon_at",
    "cgp_to_gp_epsilon",
    "cgp_to_gp_epsilon_simple",
    "approx_gp_filter_value",
    "approx_gp_filter_continue",
    "approx_gp_budget",
]

#: Length of each named distance unit in metres.
DISTANCE_UNITS: dict[str, float] = {
    "mm": 1e-3,
    "cm": 1e-2,
    "m": 1.0,
    "km": 1e3,
    "ft": 0.3048,
    "yd": 0.9144,
    "mi": 1609.344,
    "nmi": 1852.0,
}

_BISECT_STEPS = 200
_TOL = 1e-13  # relative width of the final bisection bracket, in log(s − 1)


def _as_array(x, name: str) -> np.ndarray:
    try:
        a = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number (or array of reals), got {x!r}") from None
    if np.any(np.isnan(a)):
        raise ValueError(f"{name} must not be NaN, got {x!r}")
    return a


def _nonneg(x, name: str) -> np.ndarray:
    a = _as_array(x, name)
    if not np.all(np.isfinite(a)) or np.any(a < 0):
        raise ValueError(f"{name} must be finite and ≥ 0, got {x!r}")
    return a


def _positive(x, name: str) -> np.ndarray:
    a = _as_array(x, name)
    if not np.all(np.isfinite(a)) or np.any(a <= 0):
        raise ValueError(f"{name} must be finite and > 0, got {x!r}")
    return a


def _delta(x) -> np.ndarray:
    a = _as_array(x, "delta")
    if np.any(a <= 0) or np.any(a >= 1):
        raise ValueError(f"delta must lie in the open interval (0, 1), got {x!r}")
    return a


def _out(a):
    a = np.asarray(a)
    return a.item() if a.ndim == 0 else a


# --------------------------------------------------------------------------------------------------- units
def metres_per_unit(unit: str | float) -> float:
    """Metres in one ``unit``: a name from :data:`DISTANCE_UNITS` or a positive number of metres."""
    if isinstance(unit, str):
        try:
            return DISTANCE_UNITS[unit]
        except KeyError:
            raise ValueError(f"unknown distance unit {unit!r}; known: {sorted(DISTANCE_UNITS)}") from None
    v = float(unit)
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"distance unit must be a known name or a positive length in metres, got {unit!r}")
    return v


def convert_cgp_rho(rho, from_unit: str | float, to_unit: str | float):
    """ρ per from_unit² → ρ per to_unit² (ρ·d² is invariant): ρ_to = ρ_from·(to/from)². m → km: ×10⁶."""
    r = _nonneg(rho, "rho")
    k = metres_per_unit(to_unit) / metres_per_unit(from_unit)
    return _out(r * (k * k))


def convert_gp_epsilon(epsilon, from_unit: str | float, to_unit: str | float):
    """ε per from_unit → ε per to_unit (ε·d is invariant): ε_to = ε_from·(to/from). m → km: ×10³."""
    e = _nonneg(epsilon, "epsilon")
    return _out(e * (metres_per_unit(to_unit) / metres_per_unit(from_unit)))


def convert_distance(distance, from_unit: str | float, to_unit: str | float):
    """A distance (e.g. Λ or Δ) from one unit to another: d_to = d_from·(from/to). 1500 m → 1.5 km."""
    d = _as_array(distance, "distance")
    if np.any(d < 0):
        raise ValueError(f"distance must be ≥ 0, got {distance!r}")
    return _out(d * (metres_per_unit(from_unit) / metres_per_unit(to_unit)))


# ---------------------------------------------------------------------------------------------- GP → CGP
def gp_to_cgp(epsilon):
    """ε-GP ⇒ ε²/2-CGP, in the same distance unit (Liang–Yi (CGP) Lemma 3.6; Liang–Yi (adaptive budgeting) Lemma 3.1)."""
    e = _nonneg(epsilon, "epsilon")
    return _out(e * e / 2.0)


# ---------------------------------------------------------------------------------------------- CGP → GP
def g_delta(s, delta):
    """g_δ(s) = (s/(s−1))·2√(log(2/((s+1)δ))) on s ∈ (1, 2/δ − 1] (Liang–Yi (adaptive budgeting) eq. (10); Liang–Yi (CGP) App. C)."""
    s_, d = np.broadcast_arrays(_as_array(s, "s"), _delta(delta))
    if np.any(s_ <= 1):
        raise ValueError(f"s must be > 1, got {s!r}")
    log_arg = -np.log(d) - np.log1p(s_) + math.log(2.0)  # log(2/((s+1)δ))
    if np.any(log_arg < -1e-12):
        raise ValueError("s must not exceed 2/delta − 1 (the logarithm in g_delta turns negative)")
    return _out(s_ / (s_ - 1.0) * 2.0 * np.sqrt(np.maximum(log_arg, 0.0)))


def cgp_to_gp_epsilon_at(s, rho, delta, Delta):
    """ε(s) = max{g_δ(s)·√ρ, sρΔ}: ρ-CGP ⇒ (ε(s), δ, Δ)-GP for any s ∈ (1, 2/δ − 1] (Liang–Yi (CGP) App. C)."""
    g = np.asarray(g_delta(s, delta))
    s_, r, D = np.broadcast_arrays(_as_array(s, "s"), _nonneg(rho, "rho"), _positive(Delta, "Delta"))
    return _out(np.maximum(g * np.sqrt(r), s_ * r * D))


def _min_family_scalar(R: float, delta: float, Lam: float) -> float:
    """Scalar path of :func:`_min_family` (pure Python floats)."""
    if R == 0.0:
        return 0.0
    sq = math.sqrt(R)
    log_inv_d = -math.log(delta)
    u_max = 2.0 / delta - 2.0

    def h(t: float) -> float:
        u = math.exp(t)
        return 2.0 * math.sqrt(max(log_inv_d - math.log1p(u / 2.0), 0.0)) - u * Lam * sq

    def value(t: float) -> float:
        u = math.exp(t)
        la = max(log_inv_d - math.log1p(u / 2.0), 0.0)
        return max((1.0 + u) / u * 2.0 * math.sqrt(la) * sq, (1.0 + u) * Lam * R)

    lo = math.log(min(math.sqrt(log_inv_d) / (2.0 * Lam * sq), 1e-3 * u_max))
    hi = math.log(u_max)
    for _ in range(64):
        if h(lo) > 0:
            break
        lo -= 8.0
    for _ in range(_BISECT_STEPS):
        if hi - lo <= _TOL * max(1.0, abs(lo) + abs(hi)):
            break
        mid = 0.5 * (lo + hi)
        if h(mid) <= 0:
            hi = mid
        else:
            lo = mid
    return min(value(lo), value(hi))


def _min_family(R: np.ndarray, delta: np.ndarray, Lam: np.ndarray) -> np.ndarray:
    """min_{s ∈ (1, 2/δ−1]} max(g_δ(s)·√R, sΛR), vectorised; 0 where R = 0.

    Bisection on u = s − 1 (in log u) for the root of h(u) = 2√(log(2/((2+u)δ))) − uΛ√R, decreasing in u:
    h(0⁺) = 2√(log(1/δ)) > 0 and h(2/δ − 2) = −(2/δ − 2)Λ√R < 0. The max is evaluated at both ends of the final
    bracket and the smaller one is returned (each is a family member, hence valid).
    """
    R, delta, Lam = np.broadcast_arrays(R, delta, Lam)
    if R.ndim == 0:
        return np.asarray(_min_family_scalar(float(R), float(delta), float(Lam)))
    pos = R > 0
    RR = np.where(pos, R, 1.0)
    sq = np.sqrt(RR)
    log_inv_d = -np.log(delta)
    u_max = 2.0 / delta - 2.0  # s = 2/δ − 1: the logarithm reaches 0
    # At u_lo: uΛ√R ≤ √(log(1/δ))/2, and log1p(u/2) ≤ log(1 + 10⁻³/δ) < (15/16)·log(1/δ), so that
    # 2√(log(2/((2+u)δ))) > √(log(1/δ))/2 ≥ uΛ√R, i.e. h(u_lo) > 0 (re-checked numerically below).
    lo = np.log(np.minimum(np.sqrt(log_inv_d) / (2.0 * Lam * sq), 1e-3 * u_max))
    hi = np.log(u_max)

    def h(t):
        u = np.exp(t)
        la = np.maximum(log_inv_d - np.log1p(u / 2.0), 0.0)  # log(2/((2+u)δ))
        return 2.0 * np.sqrt(la) - u * Lam * sq

    # Make sure h(lo) > 0 (move lo down if not; never needed for δ < 1/2 but kept for certainty).
    for _ in range(64):
        bad = h(lo) <= 0
        if not np.any(bad):
            break
        lo = np.where(bad, lo - 8.0, lo)
    for _ in range(_BISECT_STEPS):
        if np.all(hi - lo <= _TOL * np.maximum(1.0, np.abs(lo) + np.abs(hi))):
            break
        mid = 0.5 * (lo + hi)
        neg = h(mid) <= 0
        hi = np.where(neg, mid, hi)
        lo = np.where(neg, lo, mid)

    def value(t):
        u = np.exp(t)
        s = 1.0 + u
        la = np.maximum(log_inv_d - np.log1p(u / 2.0), 0.0)
        return np.maximum((s / u) * 2.0 * np.sqrt(la) * sq, s * Lam * RR)

    v = np.minimum(value(lo), value(hi))
    return np.where(pos, v, 0.0)


def cgp_to_gp_epsilon(rho, delta, Delta):
    """Smallest ε of the Liang–Yi (CGP) Lemma 3.7 family: ρ-CGP ⇒ (ε, δ, Δ)-GP (ρ per unit², Δ in the same unit)."""
    r, d, D = np.broadcast_arrays(_nonneg(rho, "rho"), _delta(delta), _positive(Delta, "Delta"))
    return _out(_min_family(r, d, D))


def cgp_to_gp_epsilon_simple(rho, delta, Delta):
    """ε = ρΔ + 2√(ρ log(1/δ)) (Liang–Yi (CGP) Lemma 3.7 closed form; Liang–Yi (adaptive budgeting) Lemma 3.2 with s = 1 + 2√(ρ log(1/δ))/(ρΔ))."""
    r, d, D = np.broadcast_arrays(_nonneg(rho, "rho"), _delta(delta), _positive(Delta, "Delta"))
    return _out(r * D + 2.0 * np.sqrt(r * -np.log(d)))


# ---------------------------------------------------------------------------------- approximate-GP filter (10)
def approx_gp_filter_value(sum_r, delta, Lambda):
    """min_{s>1} max(g_δ(s)·√(Σr), sΛ·Σr) of Liang–Yi (adaptive budgeting) eq. (10) (Σr are CGP costs, per unit²; Λ in that unit)."""
    R, d, L = np.broadcast_arrays(_nonneg(sum_r, "sum_r"), _delta(delta), _positive(Lambda, "Lambda"))
    return _out(_min_family(R, d, L))


def approx_gp_filter_continue(sum_r, budget_eps, delta, Lambda):
    """Liang–Yi (adaptive budgeting) eq. (10): CONT (True) iff min_{s>1} max(g_δ(s)·√(Σr), sΛ·Σr) ≤ B; HALT (False) otherwise.

    Λ must be finite and > 0 (with Λ = ∞ the left side is ∞ for any Σr > 0). Vectorised over its arguments.
    """
    B = _nonneg(budget_eps, "budget_eps")
    v = np.asarray(approx_gp_filter_value(sum_r, delta, Lambda))
    return _out(v <= B)


def approx_gp_budget(epsilon, delta, Lambda) -> float:
    """R* = max{R : min_{s>1} max(g_δ(s)·√R, sΛR) ≤ ε}: the CGP budget (per unit²) whose additive filter Σr ≤ R*
    decides exactly as the approximate-GP filter of Liang & Yi (Adaptive Privacy Budgeting, eq. (10)) with target
    ε (per unit), δ and Λ (module docstring). Found by bisection in log R on [0, ε/Λ] (f(R) ≥ ΛR); the value returned is the lower end of the
    final bracket, where the computed f — evaluated at a concrete s, hence ≥ the true minimum — is ≤ ε: so
    f(R*) ≤ ε holds for the returned R* and the filter it gives is never more permissive than eq. (10)."""
    B = float(_nonneg(epsilon, "epsilon"))
    d = float(_delta(delta))
    L = float(_positive(Lambda, "Lambda"))
    if B == 0.0:
        return 0.0
    f = lambda r: _min_family_scalar(r, d, L)  # noqa: E731
    hi = B / L
    lo = hi
    while f(lo) > B:  # shrink geometrically to a feasible point (f(R) ~ g·√R for small R)
        lo *= 1e-3
        if lo < 1e-300:
            return 0.0
    if lo == hi:
        return hi
    a, b = math.log(lo), math.log(hi)
    for _ in range(_BISECT_STEPS):
        if b - a <= 1e-15 * max(1.0, abs(a)):
            break
        m = 0.5 * (a + b)
        if f(math.exp(m)) <= B:
            a = m
        else:
            b = m
    r = math.exp(a)
    while f(r) > B:  # exp/log rounding: step down until the computed value certifies r
        r = math.nextafter(r, 0.0)
    return r
