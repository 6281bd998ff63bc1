"""Privacy costs as fixed-point integer vectors.

A user's privacy loss is tracked in three accounting notions (docs/contract.md §3):

* ``zcdp`` — δ-approximate ρ-zCDP (Bun–Steinke; Rogers (unknown-domain) Def. 2.2): components ``zcdp_rho`` and ``zcdp_delta``;
* ``cgp``  — ρ-CGP per configured distance unit² (Liang–Yi (CGP) Def. 3.1; Liang–Yi (adaptive budgeting) §3): ``cgp_rho`` and ``cgp_delta``;
* ``emd``  — (α, δ)-d_EM-DP (Imola et al. (EMD)): ``emd_alpha`` and ``emd_delta``.

Every component is stored as a non-negative integer in fixed point so that sums never drift past a budget:
a *cost* is rounded **up** to the grid (:func:`cost_to_fixed`) and a *budget* is rounded **down**
(:func:`budget_to_fixed`), both in exact integer arithmetic from the number's shortest decimal (``repr``: what the
operator wrote, within half an ulp of the float). Hence ``Σ fixed(cost_i) ≤ fixed(budget)`` implies
``Σ cost_i ≤ budget`` exactly for those decimals — ten charges of 0.1 fit a budget of 1.0, as written.

Scales: ρ and α at 10⁻¹² (a budget of 10⁶ still fits in int64 with room for 10⁶ additions), δ at 10⁻¹⁸
(the smallest δ an operator can configure is 10⁻¹⁸; budgets up to 9.2 fit int64).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Iterable, Mapping

import numpy as np

NOTIONS: tuple[str, ...] = ("zcdp", "cgp", "emd")

#: Order of the components of a cost vector (the same order is used by every budget store).
COMPONENTS: tuple[str, ...] = ("zcdp_rho", "zcdp_delta", "cgp_rho", "cgp_delta", "emd_alpha", "emd_delta")
N_COMPONENTS = len(COMPONENTS)

LOSS_SCALE = 10**12  # ρ (zCDP, CGP) and α (EMD)
DELTA_SCALE = 10**18  # δ of every notion
SCALES: tuple[int, ...] = (LOSS_SCALE, DELTA_SCALE, LOSS_SCALE, DELTA_SCALE, LOSS_SCALE, DELTA_SCALE)
INT64_MAX = 2**63 - 1


def _check_real(x: float, name: str) -> float:
    x = float(x)
    if not math.isfinite(x) or x < 0:
        raise ValueError(f"{name} must be a finite number ≥ 0, got {x!r}")
    return x


def _decimal(x: float) -> Fraction:
    """The shortest decimal that names the float ``x`` (``repr``), as an exact rational: what an operator wrote
    (``0.1`` stays one tenth, not 0.1000000000000000055…). It lies within half an ulp of ``x``."""
    return Fraction(repr(x))


def cost_to_fixed(x: float, scale: int) -> int:
    """Round a cost *up* to the fixed-point grid (never under-charge): ⌈d·scale⌉ in exact integer arithmetic, d the
    cost's decimal (:func:`_decimal`). (A float product ``x*scale`` past 2⁵³ is off by up to half an ulp, which a
    float check cannot see: it under-charged 0.14568674262649717·10¹⁸ by 17 units before.)"""
    x = _check_real(x, "cost")
    v = math.ceil(_decimal(x) * scale)
    if v > INT64_MAX:
        raise OverflowError(f"cost {x} does not fit the fixed-point range")
    return v


def budget_to_fixed(x: float, scale: int) -> int:
    """Round a budget *down* to the fixed-point grid (never over-grant): ⌊d·scale⌋ in exact integer arithmetic, d the
    budget's decimal (:func:`_decimal`). ``inf`` (and anything past the range) maps to INT64_MAX."""
    x = float(x)
    if math.isinf(x) and x > 0:
        return INT64_MAX
    x = _check_real(x, "budget")
    return min(math.floor(_decimal(x) * scale), INT64_MAX)


def max_budget_text(scale: int) -> str:
    """The exclusive upper bound of a *finite* budget at ``scale``, as an exact decimal: INT64_MAX/scale
    (``9223372.036854775807`` for ρ and α, ``9.223372036854775807`` for δ). At or past it :func:`budget_to_fixed`
    returns INT64_MAX, the fixed-point value of an *unlimited* budget."""
    whole, frac = divmod(INT64_MAX, scale)
    digits = len(str(scale)) - 1
    return f"{whole}.{frac:0{digits}d}".rstrip("0").rstrip(".") if digits else str(whole)


def check_budget_range(x: float, scale: int, name: str = "budget") -> float:
    """``x`` if it is ``inf`` (unlimited) or a finite budget ≥ 0 that the fixed-point grid holds; a ValueError that
    gives the maximum otherwise. (:func:`budget_to_fixed` maps every finite budget past the range to the INT64_MAX
    sentinel, i.e. *unlimited*: an operator's finite 1e7 must be refused, not silently become "no limit".)"""
    x = float(x)
    if math.isinf(x) and x > 0:
        return x
    x = _check_real(x, name)
    if _decimal(x) * scale >= INT64_MAX:
        raise ValueError(f"a finite {name} must be < {max_budget_text(scale)} (the fixed-point range of budgets), "
                         f"got {x!r}")
    return x


def costs_to_fixed(x, scale: int) -> np.ndarray:
    """Vectorised :func:`cost_to_fixed` (the same integers): each cost rounded UP to the grid.

    With p = fl(x·scale): the decimal d, x and p satisfy |d·scale − p| ≤ 2⁻⁵²·p, so where p < 2⁴⁸ lies farther
    than 2⁻⁵⁰·p (< 1/4) from every integer, ⌈d·scale⌉ = ⌈p⌉. Near an integer N, compare x with f = fl(N/scale),
    the float that N/scale rounds to: d lies in x's rounding interval and N/scale in f's, so x < f gives
    d < N/scale (⌈·⌉ = N) and x > f gives d > N/scale (N + 1). The rest (x = f, or p past 2⁴⁸: costs of 281 per
    unit² and more at 10⁻¹²) takes the exact scalar path, about 4 µs per distinct value."""
    a = np.asarray(x, dtype=np.float64)
    if a.size == 0:
        return np.zeros(a.shape, dtype=np.int64)
    if not np.all(np.isfinite(a)) or np.any(a < 0):
        raise ValueError("cost must be finite and ≥ 0")
    s = float(scale)
    p = a * s
    small = (p < 2.0**48) & (s == scale)  # the margin p·2⁻⁵⁰ < 1/4: at most one integer N is near p
    c = np.ceil(p)
    n = np.rint(p)
    near = np.abs(p - n) <= p * 2.0**-50
    out = np.where(near, 0.0, c)  # far from every integer: ⌈p⌉
    f = n / s
    out = np.where(near & (a < f), n, out)
    out = np.where(near & (a > f), n + 1.0, out)
    out = np.where(a == 0, 0.0, out)
    exact = small & ((a == 0) | ~near | (a != f))
    res = np.zeros(a.shape, dtype=np.int64)
    res[exact] = out[exact].astype(np.int64)
    rest = np.flatnonzero(~exact.ravel())
    if rest.size:  # the exact scalar path, once per distinct value (users often share a cost)
        flat = res.reshape(-1)
        values, inverse = np.unique(a.reshape(-1)[rest], return_inverse=True)
        flat[rest] = np.array([cost_to_fixed(v, scale) for v in values.tolist()], dtype=np.int64)[inverse]
    return res


def from_fixed(v: int, scale: int) -> float:
    return int(v) / scale


@dataclass(frozen=True)
class Cost:
    """A privacy cost in real numbers, per notion. Costs add (zCDP Thm 6 in Rogers (unknown-domain); CGP Thm 3.2 in Liang–Yi (CGP))."""

    zcdp_rho: float = 0.0
    zcdp_delta: float = 0.0
    cgp_rho: float = 0.0
    cgp_delta: float = 0.0
    emd_alpha: float = 0.0
    emd_delta: float = 0.0

    def __post_init__(self) -> None:
        for name in COMPONENTS:
            _check_real(getattr(self, name), name)

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(*(a + b for a, b in zip(self.as_tuple(), other.as_tuple())))

    def __mul__(self, k: float) -> "Cost":
        k = _check_real(k, "multiplier")
        return Cost(*(a * k for a in self.as_tuple()))

    __rmul__ = __mul__

    def as_tuple(self) -> tuple[float, ...]:
        return tuple(getattr(self, n) for n in COMPONENTS)

    def as_dict(self) -> dict[str, float]:
        return {n: getattr(self, n) for n in COMPONENTS}

    def is_zero(self) -> bool:
        return all(v == 0 for v in self.as_tuple())

    def to_fixed(self) -> np.ndarray:
        """Fixed-point vector (int64), each component rounded up."""
        return np.array([cost_to_fixed(v, s) for v, s in zip(self.as_tuple(), SCALES)], dtype=np.int64)

    @classmethod
    def zcdp(cls, rho: float, delta: float = 0.0) -> "Cost":
        return cls(zcdp_rho=rho, zcdp_delta=delta)

    @classmethod
    def cgp(cls, rho: float, delta: float = 0.0) -> "Cost":
        return cls(cgp_rho=rho, cgp_delta=delta)

    @classmethod
    def emd(cls, alpha: float, delta: float = 0.0) -> "Cost":
        return cls(emd_alpha=alpha, emd_delta=delta)

    @classmethod
    def pure_dp(cls, epsilon: float) -> "Cost":
        """A pure ε-DP mechanism is ε²/2-zCDP (Rogers (unknown-domain) Thm 3)."""
        return cls(zcdp_rho=_check_real(epsilon, "epsilon") ** 2 / 2)

    @classmethod
    def from_mapping(cls, m: Mapping[str, float]) -> "Cost":
        unknown = set(m) - set(COMPONENTS)
        if unknown:
            raise ValueError(f"unknown cost component(s): {sorted(unknown)}")
        return cls(**{k: float(v) for k, v in m.items()})


def budget_vector(budget: Cost) -> np.ndarray:
    """Fixed-point budget vector (int64), each component rounded down."""
    return np.array([budget_to_fixed(v, s) for v, s in zip(budget.as_tuple(), SCALES)], dtype=np.int64)


def fixed_to_cost(v: Iterable[int]) -> Cost:
    return Cost(*(from_fixed(int(x), s) for x, s in zip(v, SCALES)))


def budget_text(v: Iterable[int]) -> str:
    """A fixed-point budget vector for a message: its non-zero components (``zcdp_rho=2, zcdp_delta=0.0001``)."""
    return ", ".join(f"{k}={x:g}" for k, x in zip(COMPONENTS, fixed_to_cost(v).as_tuple()) if x) or "0"


def notions_in_use(v: Iterable[float]) -> list[str]:
    vals = list(v)
    return [n for i, n in enumerate(NOTIONS) if vals[2 * i] or vals[2 * i + 1]]
