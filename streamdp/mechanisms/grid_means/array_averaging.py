"""Grouping samples into arrays of length m_UB (Rameshwar–Tandon (IoT means) §III-A, Alg. 1 WrapAround and Alg. 2 BestFit) and the
array-averaging statistic f_arr = (1/K)·Σ_i Ā_i (Rameshwar–Tandon (IoT means) §III-C).

Both strategies sort the users by non-increasing count (ties: input order), keep each user's first
r_ℓ = min(m_ℓ, m_UB) samples, and fill arrays of capacity m_UB:

* **WrapAround** (Alg. 1) fills the arrays contiguously; a user may straddle two consecutive arrays. Only the
  K = ⌊Σ_ℓ min(m_ℓ, m_UB) / m_UB⌋ full arrays are kept (eq. (5)); the samples of a final partial array are
  dropped. Sensitivity of f_arr,wrap: Δ = 2U/K (Rameshwar–Tandon (IoT means) §III-C, "one user influencing two arrays").
* **BestFit** (Alg. 2) places each user's r_ℓ samples whole into the fullest array that still has room
  (least index on ties), opening a new array when none fits. K̄ ≥ K non-empty arrays (Rameshwar–Tandon (IoT means) §III-A2); each user is
  in exactly one array, so the sensitivity of f_arr,best is Δ = U/K̄ (Rameshwar–Tandon (IoT means) eq. (6)).

Everything here is a function of the counts only (public, implementation notes on Rameshwar–Tandon (IoT means)) except :func:`array_means`.

Erratum (noted, not applied): every WrapAround array is full (w = m_UB) and a user's r₁ + r₂ ≤ m_UB samples
move the two array means by at most U·r₁/m_UB and U·r₂/m_UB, so f_arr,wrap actually has sensitivity U/K; the
paper's 2U/K is a valid but loose bound. We keep the paper's 2U/K (``WRAPAROUND_ARRAYS_PER_USER = 2``) because
the same factor 2 is *needed* for the projected variants (Levy, Quantile), where each of the two projected
means can move by the full interval width.

Complexity: WrapAround is fully vectorised, O(n + L log L) for n samples and L users. BestFit gives every user
with r_ℓ = m_UB a fresh array in one vectorised step and loops (in Python, one numpy pass per user) over the
users with r_ℓ < m_UB only: O(L·K̄) elementary operations, fine for the thousands of users a grid holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from streamdp.mechanisms.grid_means.clipping import clipped_counts

__all__ = [
    "Grouping",
    "GroupingPlan",
    "WRAPAROUND_ARRAYS_PER_USER",
    "BESTFIT_ARRAYS_PER_USER",
    "wraparound_num_arrays",
    "best_fit_assignment",
    "wraparound_plan",
    "best_fit_plan",
    "make_plan",
    "array_means",
    "array_averaging_sensitivity",
]

Grouping = Literal["bestfit", "wraparound"]

WRAPAROUND_ARRAYS_PER_USER = 2  # Rameshwar–Tandon (IoT means) §III-C: a user may influence two arrays
BESTFIT_ARRAYS_PER_USER = 1  # Rameshwar–Tandon (IoT means) §III-A2: a user is in exactly one array


@dataclass(frozen=True, eq=False)
class GroupingPlan:
    """Where the kept samples go: ``sample_index[j]`` (an index into the grid's concatenated values) belongs to
    array ``sample_array[j]``. ``n_arrays`` is K (WrapAround) or K̄ (BestFit); ``arrays_per_user`` is the most
    arrays one user can touch (the factor in the sensitivities)."""

    grouping: str
    m_ub: int
    n_arrays: int
    arrays_per_user: int
    sample_index: np.ndarray
    sample_array: np.ndarray

    def fill(self) -> np.ndarray:
        """w(A_i) of every kept array."""
        return np.bincount(self.sample_array, minlength=self.n_arrays)


def _segments(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of arange(s, s + n) over (s, n) pairs, vectorised."""
    total = int(lengths.sum())
    seg_start = np.cumsum(lengths) - lengths
    return np.repeat(starts - seg_start, lengths) + np.arange(total, dtype=np.int64)


def _offsets(counts: np.ndarray) -> np.ndarray:
    off = np.zeros(counts.size, dtype=np.int64)
    np.cumsum(counts[:-1], out=off[1:])
    return off


def _sorted_users(counts: np.ndarray) -> np.ndarray:
    """Users by non-increasing count, ties in input order (Rameshwar–Tandon (IoT means) §III-A: m_1 ≥ m_2 ≥ … ≥ m_L)."""
    return np.argsort(-counts, kind="stable")


def wraparound_num_arrays(counts, m_ub: int) -> int:
    """K = ⌊Σ_ℓ min(m_ℓ, m_UB) / m_UB⌋ (Rameshwar–Tandon (IoT means) eq. (5))."""
    return int(clipped_counts(counts, m_ub).sum() // int(m_ub))


def wraparound_plan(counts, m_ub: int) -> GroupingPlan:
    """Rameshwar–Tandon (IoT means) Alg. 1 (WrapAround)."""
    counts = np.asarray(counts, dtype=np.int64)
    r = clipped_counts(counts, m_ub)
    order = _sorted_users(counts)
    idx = _segments(_offsets(counts)[order], r[order])  # kept samples, users in sorted order
    k = int(r.sum() // m_ub)  # eq. (5)
    keep = k * int(m_ub)  # the first K·m_UB positions fill A_1..A_K; the partial rest is deleted
    arr = np.arange(keep, dtype=np.int64) // int(m_ub)
    return GroupingPlan("wraparound", int(m_ub), k, WRAPAROUND_ARRAYS_PER_USER, idx[:keep], arr)


def best_fit_assignment(counts, m_ub: int) -> tuple[np.ndarray, int]:
    """Rameshwar–Tandon (IoT means) Alg. 2 (BestFit): the array index (0-based, in opening order) of every user, and K̄.

    Users are taken by non-increasing count; user ℓ's r = min(m_ℓ, m_UB) samples go to the array A with
    m_UB − w(A) ≥ r and w(A) maximal, least index on ties (Alg. 2 lines 4–5); an empty array is opened when no
    non-empty one fits (all L arrays exist initially; an unopened one is the least-indexed empty array).
    """
    counts = np.asarray(counts, dtype=np.int64)
    m_ub = int(m_ub)
    r = clipped_counts(counts, m_ub)
    order = _sorted_users(counts)
    r_sorted = r[order]
    assign_sorted = np.empty(counts.size, dtype=np.int64)
    n_full = int(np.count_nonzero(r_sorted == m_ub))  # sorted first; each fills a fresh array on its own
    assign_sorted[:n_full] = np.arange(n_full)
    # Non-full arrays only (full ones can never take r ≥ 1 more); fills[j] belongs to array ids[j].
    fills = np.empty(counts.size, dtype=np.int64)
    n_open = 0
    n_arrays = n_full
    for k in range(n_full, counts.size):
        rk = int(r_sorted[k])
        f = fills[:n_open]
        cand = np.where(f <= m_ub - rk, f, -1)
        j = int(np.argmax(cand)) if n_open else -1
        if j >= 0 and cand[j] >= 0:
            fills[j] += rk
            assign_sorted[k] = n_full + j
        else:
            fills[n_open] = rk
            assign_sorted[k] = n_arrays
            n_open += 1
            n_arrays += 1
    assign = np.empty_like(assign_sorted)
    assign[order] = assign_sorted
    return assign, n_arrays


def best_fit_plan(counts, m_ub: int) -> GroupingPlan:
    """Rameshwar–Tandon (IoT means) Alg. 2 (BestFit) as a plan over the concatenated values (each user's first r_ℓ samples)."""
    counts = np.asarray(counts, dtype=np.int64)
    r = clipped_counts(counts, m_ub)
    assign, k_bar = best_fit_assignment(counts, m_ub)
    idx = _segments(_offsets(counts), r)
    arr = np.repeat(assign, r)
    return GroupingPlan("bestfit", int(m_ub), k_bar, BESTFIT_ARRAYS_PER_USER, idx, arr)


def make_plan(counts, m_ub: int, grouping: Grouping) -> GroupingPlan:
    if grouping == "bestfit":
        return best_fit_plan(counts, m_ub)
    if grouping == "wraparound":
        return wraparound_plan(counts, m_ub)
    raise ValueError(f"grouping must be 'bestfit' or 'wraparound', got {grouping!r}")


def array_means(values: np.ndarray, plan: GroupingPlan) -> np.ndarray:
    """Ā_i = (1/w(A_i))·Σ_j A_i(j) for every array of the plan (Rameshwar–Tandon (IoT means) §III-C)."""
    v = np.asarray(values, dtype=np.float64)[plan.sample_index]
    sums = np.bincount(plan.sample_array, weights=v, minlength=plan.n_arrays)
    return sums / plan.fill()


def array_averaging_sensitivity(upper: float, plan: GroupingPlan) -> float:
    """Δ f_arr: 2U/K for WrapAround, U/K̄ for BestFit (Rameshwar–Tandon (IoT means) §III-C, eq. (6))."""
    return plan.arrays_per_user * float(upper) / plan.n_arrays
