"""Choosing m_UB, the number of samples a user keeps in a grid (Rameshwar–Tandon (IoT means) §III, "clipping the number of samples").

Each user keeps min(m_ℓ, m_UB) of their m_ℓ samples, with m_* ≤ m_UB ≤ m* (Rameshwar–Tandon (IoT means) §III). Two public rules, both
functions of the counts only (counts are public: implementation notes on Rameshwar–Tandon (IoT means)), so the choice costs no privacy:

* ``"median"`` — m_UB = med(m_1, …, m_L) (Rameshwar–Tandon (IoT means) Lemma III.2: the gain Δ_f / Δ̃_{f_arr} is ≥ OPT/2). For an even
  number of users the *lower* median (the ⌈L/2⌉-th smallest count) is used, so that m_UB is one of the counts
  and an integer; at least ⌈L/2⌉ users have m_ℓ ≥ m_UB, which is what the proof of Lemma III.2 needs.
* ``"eq10"`` — m_UB = argmax_{m_* ≤ m ≤ m*} Σ_ℓ min(m_ℓ, m) / √m (Rameshwar–Tandon (IoT means) eq. (10), the heuristic for Levy and
  Quantile: it maximises K̄·√m in the sensitivity (9)). Solved exactly over the integers (all m in [m_*, m*],
  O(m* + L log L)); ties go to the smallest m.
* an integer — a fixed m_UB from the configuration, capped at m* (a larger value keeps the same samples).
"""

from __future__ import annotations

import operator
from typing import Literal, Union

import numpy as np

__all__ = ["MUBRule", "check_m_ub", "median_m_ub", "eq10_m_ub", "eq10_objective", "resolve_m_ub", "clipped_counts"]

MUBRule = Union[Literal["median", "eq10"], int]


def _counts(counts) -> np.ndarray:
    c = np.asarray(counts)
    if c.ndim != 1 or c.size == 0 or not np.issubdtype(c.dtype, np.integer) or np.any(c < 1):
        raise ValueError("counts must be a non-empty 1-d array of integers ≥ 1")
    return c.astype(np.int64)


def median_m_ub(counts) -> int:
    """Lower median of the counts: the ⌈L/2⌉-th smallest (Rameshwar–Tandon (IoT means) Lemma III.2)."""
    c = np.sort(_counts(counts))
    return int(c[(c.size - 1) // 2])


def eq10_objective(counts, m) -> np.ndarray:
    """Σ_ℓ min(m_ℓ, m) / √m for every m in the array ``m`` (Rameshwar–Tandon (IoT means) eq. (10))."""
    c = np.sort(_counts(counts))
    m = np.asarray(m, dtype=np.int64)
    prefix = np.concatenate([[0], np.cumsum(c)])
    below = np.searchsorted(c, m, side="left")  # number of users with m_ℓ < m
    clipped_total = prefix[below] + m * (c.size - below)
    return clipped_total / np.sqrt(m)


def eq10_m_ub(counts) -> int:
    """argmax over the integers m_* ≤ m ≤ m* of Σ_ℓ min(m_ℓ, m)/√m (Rameshwar–Tandon (IoT means) eq. (10)); smallest m on ties."""
    c = _counts(counts)
    m = np.arange(int(c.min()), int(c.max()) + 1, dtype=np.int64)
    return int(m[int(np.argmax(eq10_objective(c, m)))])


def resolve_m_ub(counts, rule: MUBRule) -> int:
    """m_UB for these counts under ``rule`` ("median", "eq10" or a fixed integer ≥ 1, capped at m*)."""
    c = _counts(counts)
    if isinstance(rule, str):
        if rule == "median":
            return median_m_ub(c)
        if rule == "eq10":
            return eq10_m_ub(c)
        raise ValueError(f"m_ub must be 'median', 'eq10' or an integer ≥ 1, got {rule!r}")
    return min(check_m_ub(rule), int(c.max()))


def check_m_ub(rule) -> MUBRule:
    """Validate an m_UB rule at construction time."""
    if isinstance(rule, str):
        if rule not in ("median", "eq10"):
            raise ValueError(f"m_ub must be 'median', 'eq10' or an integer ≥ 1, got {rule!r}")
        return rule
    if isinstance(rule, bool):
        raise ValueError(f"m_ub must be 'median', 'eq10' or an integer ≥ 1, got {rule!r}")
    try:
        v = operator.index(rule)
    except TypeError:
        raise ValueError(f"m_ub must be 'median', 'eq10' or an integer ≥ 1, got {rule!r}") from None
    if v < 1:
        raise ValueError(f"m_ub must be 'median', 'eq10' or an integer ≥ 1, got {rule!r}")
    return int(v)


def clipped_counts(counts, m_ub: int) -> np.ndarray:
    """min(m_ℓ, m_UB) for every user."""
    return np.minimum(_counts(counts), int(m_ub))
