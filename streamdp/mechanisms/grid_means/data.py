"""One grid's input: the values of every user present in a (cell, window) pair, validated and concatenated.

Rameshwar–Tandon (IoT means) §II-C: user ℓ contributes ^g m_ℓ samples S_ℓ^(j) ∈ [0, U] to grid g; the grid's users are
^gℒ = {ℓ : ^g m_ℓ > 0}. streamdp's grid is a (cell, window) pair (implementation notes on Rameshwar–Tandon (IoT means)).

Validation (the contract every grid-means estimator relies on):

* a value outside [0, U] is **clipped** to the nearest end (post-processing of the user's own data, so the
  sensitivity bounds that assume values in [0, U] hold); U comes from the query's configuration;
* NaN or ±inf → ``ValueError`` (docs/contract.md §6 sends non-finite values to the dead-letter topic long before a
  mechanism sees them; reaching one here is a bug in the caller);
* a user with no values is not in the grid (Rameshwar–Tandon (IoT means)'s ^gℒ): dropped, and not charged;
* a grid with no values at all → ``ValueError``.

Counts are public (implementation notes on Rameshwar–Tandon (IoT means): bounded DP — neighbouring datasets have the same users with the same numbers of
samples; only values change). Everything the estimators derive from :attr:`GridValues.counts` (m_UB, the arrays
of WrapAround/BestFit, K, K̄, τ) is therefore data-independent for the privacy analysis.

Layout: ``values`` is the float64 concatenation of the users' values in input order, user ``k`` owning
``values[offsets[k]:offsets[k + 1]]`` (``offsets`` has ``n_users + 1`` entries, ``counts = diff(offsets)``).
Within a user, the input order is kept: the clipping strategies keep a user's *first* min(m_ℓ, m_UB) values
(Rameshwar–Tandon (IoT means) Alg. 1/2), so a caller that prefers a uniformly random subset shuffles each user's values first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Hashable, Mapping, Sequence

import numpy as np

__all__ = ["GridValues", "as_grid_values", "check_upper", "check_epsilon"]


def check_upper(upper: float) -> float:
    """U, the public upper bound of the values (Rameshwar–Tandon (IoT means) §II-C: S ∈ [0, U]); finite and > 0."""
    try:
        u = float(upper)
    except (TypeError, ValueError):
        raise ValueError(f"upper must be a finite number > 0, got {upper!r}") from None
    if not math.isfinite(u) or u <= 0:
        raise ValueError(f"upper must be a finite number > 0, got {upper!r}")
    return u


def check_epsilon(epsilon: float, name: str = "epsilon") -> float:
    try:
        e = float(epsilon)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a finite number > 0, got {epsilon!r}") from None
    if not math.isfinite(e) or e <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {epsilon!r}")
    return e


@dataclass(frozen=True, eq=False)
class GridValues:
    """Validated values of one grid (see the module docstring). Build with :meth:`from_users` or
    :meth:`from_concatenated`; the arrays are read-only."""

    values: np.ndarray  # float64, clipped to [0, upper]
    offsets: np.ndarray  # int64, n_users + 1 entries, offsets[0] = 0
    user_ids: tuple[Hashable, ...]
    upper: float

    @property
    def counts(self) -> np.ndarray:
        """^g m_ℓ of every present user (int64, all ≥ 1)."""
        return np.diff(self.offsets)

    @property
    def n_users(self) -> int:
        return len(self.user_ids)

    @property
    def n_values(self) -> int:
        return int(self.values.size)

    def true_mean(self) -> float:
        """The non-private sample mean ^gμ of eq. (3) (of the clipped values) — for tests and benchmarks only."""
        return float(self.values.mean())

    # ------------------------------------------------------------------------------------------ constructors
    @classmethod
    def from_users(cls, values_by_user: Mapping[Hashable, Any] | Sequence[Any], upper: float) -> "GridValues":
        """From a mapping user id → values (or a sequence of per-user values; the ids are then 0, 1, …)."""
        upper = check_upper(upper)
        if isinstance(values_by_user, Mapping):
            items = list(values_by_user.items())
        elif isinstance(values_by_user, (str, bytes)) or not isinstance(values_by_user, Sequence):
            raise ValueError(
                "values_by_user must be a mapping user → values or a sequence of per-user values, "
                f"got {type(values_by_user).__name__}"
            )
        else:
            items = list(enumerate(values_by_user))
        ids: list[Hashable] = []
        arrays: list[np.ndarray] = []
        for uid, vals in items:
            try:
                a = np.asarray(vals, dtype=np.float64).ravel()
            except (TypeError, ValueError):
                raise ValueError(f"values_by_user[{uid!r}] must be an array of real numbers") from None
            if a.size == 0:
                continue  # not in the grid: ^gℒ = {ℓ : ^g m_ℓ > 0}
            ids.append(uid)
            arrays.append(a)
        if not arrays:
            raise ValueError("values_by_user must hold at least one value (the grid is empty)")
        counts = np.fromiter((a.size for a in arrays), dtype=np.int64, count=len(arrays))
        return cls._build(np.concatenate(arrays), counts, tuple(ids), upper)

    @classmethod
    def from_concatenated(cls, values, counts, upper: float, user_ids: Sequence[Hashable] | None = None,
                          ) -> "GridValues":
        """Vectorised constructor: ``values`` is the concatenation of the users' values, ``counts[k]`` how many
        belong to user ``k``. Users with a zero count are dropped (not in the grid)."""
        upper = check_upper(upper)
        try:
            v = np.asarray(values, dtype=np.float64).ravel()
        except (TypeError, ValueError):
            raise ValueError("values must be an array of real numbers") from None
        c = np.asarray(counts)
        if c.ndim != 1 or (c.size and not np.issubdtype(c.dtype, np.integer)):
            raise ValueError("counts must be a 1-d array of integers")
        c = c.astype(np.int64)
        if np.any(c < 0):
            raise ValueError("counts must be ≥ 0")
        if int(c.sum()) != v.size:
            raise ValueError(f"counts must sum to len(values) = {v.size}, got {int(c.sum())}")
        ids = tuple(range(c.size)) if user_ids is None else tuple(user_ids)
        if len(ids) != c.size:
            raise ValueError(f"user_ids must have one id per count ({c.size}), got {len(ids)}")
        keep = c > 0
        if not keep.any():
            raise ValueError("the grid is empty: counts must contain at least one positive entry")
        if not keep.all():
            ids = tuple(i for i, k in zip(ids, keep) if k)
            c = c[keep]
        return cls._build(v, c, ids, upper)

    @classmethod
    def _build(cls, v: np.ndarray, counts: np.ndarray, ids: tuple, upper: float) -> "GridValues":
        if not np.all(np.isfinite(v)):
            raise ValueError("values must be finite (NaN or ±inf found)")
        v = np.clip(v, 0.0, upper)  # a fresh array: the caller's data is never modified
        offsets = np.zeros(counts.size + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        v.setflags(write=False)
        offsets.setflags(write=False)
        return cls(values=v, offsets=offsets, user_ids=ids, upper=upper)


def as_grid_values(values_by_user, upper: float) -> GridValues:
    """Accept a :class:`GridValues` (its ``upper`` must equal U) or anything :meth:`GridValues.from_users` takes."""
    if isinstance(values_by_user, GridValues):
        if values_by_user.upper != check_upper(upper):
            raise ValueError(
                f"values_by_user was validated for upper={values_by_user.upper}, the estimator uses upper={upper}"
            )
        return values_by_user
    return GridValues.from_users(values_by_user, upper)
