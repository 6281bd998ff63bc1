"""Budgeting m sequential queries so that later queries reuse earlier savings (Liang–Yi (adaptive budgeting) §5.1, Alg. 3).

Each user starts with budget B (CGP ρ per unit²). Before query l = 1..m the user's remaining budget is B_i and
the query gets

    γ_l = ((l − 1)/(m − 1))·(1 − 3/4) + 3/4,        r_i = γ_l·(B_i − ((m − l + 1)/m)·B) + B/m      (Alg. 3 l. 3–4)

(for m = 1, where γ_l is undefined, r_i = B_i; implementation notes on Liang–Yi (adaptive budgeting)). A privacy-saving algorithm PSA_l (PIE, Liang–Yi (adaptive budgeting)
Alg. 4–9) then charges an executed cost e_i ≤ r_i, and B_i ← B_i − e_i.

Invariant: B_i ≥ ((m − l + 1)/m)·B before query l. It holds at l = 1 (B_i = B) and is preserved because
B_i − r_i = (1 − γ_l)(B_i − ((m−l+1)/m)B) + ((m−l)/m)B ≥ ((m−l)/m)B. Hence r_i ≥ B/m > 0, r_i ≤ B_i, the
per-user filter (Liang–Yi (adaptive budgeting) eq. (7)) never halts a user under Alg. 3, and at l = m, γ_m = 1 and r_i = B_i.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from streamdp.accounting.cost import LOSS_SCALE

__all__ = [
    "reservation_to_rho",
    "gamma_l",
    "invariant_floor",
    "invariant_holds",
    "savings_allocation",
    "savings_allocation_fixed",
    "uniform_allocation",
    "SequentialBudgeting",
    "SequentialResult",
    "run_sequential",
]

#: Relative slack of the float invariant check (the float recursion B_i ← B_i − e_i drifts by a few ulps).
INVARIANT_RTOL = 1e-9


def _check_lm(l, m) -> tuple[int, int]:
    for name, v in (("l", l), ("m", m)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise ValueError(f"{name} must be an integer, got {v!r}")
    l, m = int(l), int(m)
    if m < 1:
        raise ValueError(f"m (number of queries) must be ≥ 1, got {m}")
    if not (1 <= l <= m):
        raise ValueError(f"l (query index) must be in [1, m={m}], got {l}")
    return l, m


def _check_budget(budget) -> float:
    try:
        b = float(budget)
    except (TypeError, ValueError):
        raise ValueError(f"budget must be a number > 0, got {budget!r}") from None
    if not (np.isfinite(b) and b > 0):
        raise ValueError(f"budget must be finite and > 0, got {budget!r}")
    return b


def _check_remaining(remaining) -> np.ndarray:
    try:
        a = np.asarray(remaining, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError("remaining must be an array of budgets") from None
    if a.ndim != 1:
        raise ValueError(f"remaining must be a 1-d array, got shape {a.shape}")
    if not np.all(np.isfinite(a)) or np.any(a < 0):
        raise ValueError("remaining must be finite and ≥ 0")
    return a


def gamma_l(l: int, m: int) -> float:
    """γ_l = ((l − 1)/(m − 1))·(1 − 3/4) + 3/4 (Liang–Yi (adaptive budgeting) Alg. 3 line 3); 1 for m = 1."""
    l, m = _check_lm(l, m)
    if m == 1:
        return 1.0
    return (l - 1) / (m - 1) * (1.0 - 0.75) + 0.75


def invariant_floor(budget: float, l: int, m: int) -> float:
    """((m − l + 1)/m)·B: the least remaining budget a user can have before query l under Alg. 3."""
    l, m = _check_lm(l, m)
    return (m - l + 1) / m * _check_budget(budget)


def invariant_holds(remaining, budget: float, l: int, m: int, *, rtol: float = INVARIANT_RTOL) -> np.ndarray:
    """Per user: B_i ≥ ((m − l + 1)/m)·B (up to ``rtol``·B of float drift)."""
    b = _check_remaining(remaining)
    return b >= invariant_floor(budget, l, m) - rtol * _check_budget(budget)


def savings_allocation(remaining, budget: float, l: int, m: int, *, strict: bool = True) -> np.ndarray:
    """r_i for query l (Liang–Yi (adaptive budgeting) Alg. 3 line 4), clipped to [0, B_i] so that r_i never exceeds what is left.

    ``strict``: raise ValueError if some user violates the invariant (their budget was spent outside this
    sequence); otherwise such users get the clipped formula (possibly 0 — leave them out of the query).
    """
    l, m = _check_lm(l, m)
    budget = _check_budget(budget)
    b = _check_remaining(remaining)
    if strict and not np.all(invariant_holds(b, budget, l, m)):
        bad = int(np.count_nonzero(~invariant_holds(b, budget, l, m)))
        raise ValueError(
            f"remaining: {bad} user(s) have less than ((m−l+1)/m)·B = {invariant_floor(budget, l, m)!r} "
            f"before query l={l} (Liang–Yi (adaptive budgeting) Alg. 3 invariant)"
        )
    if l == m:  # γ_m = 1 (or m = 1): r_i = B_i exactly, without float round-off
        return b.copy()
    r = gamma_l(l, m) * (b - (m - l + 1) / m * budget) + budget / m
    return np.clip(r, 0.0, b)


def savings_allocation_fixed(remaining, budget: int, l: int, m: int, *, strict: bool = True) -> np.ndarray:
    """Liang–Yi (adaptive budgeting) Alg. 3 line 4 in exact integer (fixed-point) arithmetic, rounded down.

    With γ_l = (3(m−1) + (l−1)) / (4(m−1)):
    r_i = ⌊((3(m−1) + (l−1))·(m·B_i − (m−l+1)·B) + 4(m−1)·B) / (4(m−1)·m)⌋, and r_i = B_i for m = 1.
    Rounding down keeps the invariant exact: B_i − r_i ≥ ((m−l)/m)·B, and r_i = B_i at l = m.
    """
    l, m = _check_lm(l, m)
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget <= 0:
        raise ValueError(f"budget must be a positive integer (fixed point), got {budget!r}")
    budget = int(budget)
    b = np.asarray(remaining)
    if b.ndim != 1 or not np.issubdtype(b.dtype, np.integer):
        raise ValueError("remaining must be a 1-d integer array (fixed point)")
    if np.any(b < 0):
        raise ValueError("remaining must be ≥ 0")
    bi = [int(v) for v in b]
    ok = [m * v >= (m - l + 1) * budget for v in bi]
    if strict and not all(ok):
        raise ValueError(f"remaining: {ok.count(False)} user(s) violate the Liang–Yi (adaptive budgeting) Alg. 3 invariant before query l={l}")
    if m == 1:
        return b.astype(np.int64).copy()
    num = 3 * (m - 1) + (l - 1)
    den = 4 * (m - 1) * m
    out = [max(0, min(v, (num * (m * v - (m - l + 1) * budget) + 4 * (m - 1) * budget) // den)) for v in bi]
    return np.asarray(out, dtype=np.int64)


def reservation_to_rho(r_fixed, scale: int = LOSS_SCALE) -> np.ndarray:
    """Per-user budgets as floats that never exceed the fixed-point reservation: one ulp below R/scale.

    R/scale in float64 is within half an ulp of the true quotient, so the next float down is strictly below it.
    A PIE run given these budgets executes at most r ≤ R/scale, and rounding its executed cost up to the grid
    (:func:`streamdp.accounting.cost.cost_to_fixed`) gives at most R: settling never exceeds the reservation.
    """
    r = np.asarray(r_fixed)
    if r.ndim != 1 or not np.issubdtype(r.dtype, np.integer) or np.any(r <= 0):
        raise ValueError("r_fixed must be a 1-d array of positive integers (fixed point)")
    return np.nextafter(r.astype(np.float64) / float(scale), 0.0)


def uniform_allocation(budget: float, m: int, n: int) -> np.ndarray:
    """The non-adaptive baseline r_i = B/m for every query (Liang–Yi (adaptive budgeting) §5.1)."""
    _, m = _check_lm(1, m)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n must be an integer ≥ 0, got {n!r}")
    return np.full(int(n), _check_budget(budget) / m)


class SequentialBudgeting:
    """Liang–Yi (adaptive budgeting) Alg. 3 state for n users and m queries: :meth:`allocate` the next r, then :meth:`record` the
    executed costs. ``reuse_savings=False`` gives the uniform B/m baseline (savings are wasted)."""

    def __init__(self, budget: float, m: int, n: int, *, reuse_savings: bool = True) -> None:
        self.budget = _check_budget(budget)
        _, self.m = _check_lm(1, m)
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise ValueError(f"n must be an integer ≥ 0, got {n!r}")
        self.n = int(n)
        self.reuse_savings = bool(reuse_savings)
        self.remaining = np.full(self.n, self.budget)
        self.l = 1  # index of the next query
        self._pending: np.ndarray | None = None

    @property
    def done(self) -> bool:
        return self.l > self.m

    def allocate(self) -> np.ndarray:
        """r_i for query l (reserve it); call :meth:`record` with the executed costs before the next query."""
        if self.done:
            raise ValueError(f"all m={self.m} queries have been answered")
        if self._pending is not None:
            raise ValueError("record() the executed costs of the previous allocation first")
        if self.reuse_savings:
            r = savings_allocation(self.remaining, self.budget, self.l, self.m)
        else:
            r = np.minimum(uniform_allocation(self.budget, self.m, self.n), self.remaining)
        self._pending = r
        return r.copy()

    def record(self, executed) -> None:
        """Settle query l: B_i ← B_i − e_i with 0 ≤ e_i ≤ r_i."""
        if self._pending is None:
            raise ValueError("allocate() before record()")
        e = np.asarray(executed, dtype=np.float64)
        if e.shape != (self.n,):
            raise ValueError(f"executed must have shape ({self.n},), got {e.shape}")
        if not np.all(np.isfinite(e)) or np.any(e < 0) or np.any(e > self._pending):
            raise ValueError("executed must satisfy 0 ≤ executed_i ≤ r_i")
        self.remaining = np.maximum(self.remaining - e, 0.0)
        self._pending = None
        self.l += 1


@dataclass
class SequentialResult:
    answers: list[Any]
    allocations: np.ndarray  # (m, n) r_i per query
    executed: np.ndarray  # (m, n) executed cost per query
    remaining: np.ndarray  # (n,) final B_i
    extra: dict = field(default_factory=dict)


def run_sequential(
    rng: np.random.Generator,
    queries: Sequence[Callable[[np.random.Generator, np.ndarray], tuple[Any, np.ndarray]]],
    budget: float,
    n: int,
    *,
    reuse_savings: bool = True,
) -> SequentialResult:
    """Liang–Yi (adaptive budgeting) Alg. 3: answer ``queries[l−1](rng, r) -> (answer, executed)`` for l = 1..m in order."""
    m = len(queries)
    state = SequentialBudgeting(budget, m, n, reuse_savings=reuse_savings)
    answers: list[Any] = []
    alloc = np.zeros((m, state.n))
    execd = np.zeros((m, state.n))
    for l, q in enumerate(queries):
        r = state.allocate()
        answer, e = q(rng, r)
        state.record(e)
        answers.append(answer)
        alloc[l] = r
        execd[l] = e
    return SequentialResult(answers, alloc, execd, state.remaining)
