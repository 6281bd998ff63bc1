"""User-level mean of a value per (cell, window) — Rameshwar–Tandon (IoT means) (per-grid means) as a query kind of the service.

A *grid* of Rameshwar–Tandon (IoT means) is a (cell, window) pair here (implementation notes on Rameshwar–Tandon (IoT means)). Cells come either from a square grid over the event's
``loc`` (``cells = "grid"``: cell (ix, iy) with ix = ⌊(loc[0] − origin[0]) / cell_size⌋, iy likewise on loc[1];
key ``"ix,iy"``) or from the event's FIRST item (``cells = "item"``: key = the item's name; further items of the
event are ignored by this query). The value is the event's ``value``, clipped to [0, U]. Events without a value —
or without a usable cell (no ``loc`` in grid mode, no item in item mode, or a grid index beyond ±2⁵²) — are
ignored by this query and make nobody pay for it.

For every cell with at least ``min_users`` admitted users, one of the five pure ε-DP estimators of Rameshwar–Tandon (IoT means)
(:mod:`streamdp.mechanisms.grid_means`) releases the cell's mean at ε per (cell, window).

Cost (Rameshwar–Tandon (IoT means) Thm II.3 — per-grid accounting): the release of one grid at ε charges only the users present in it,
the estimator's zCDP cost per cell ρ_cell (``GridMeanEstimator.cost``: ε²/2 for baseline and array averaging, one
Laplace release, Rogers (unknown-domain) Thm 3; 5ε²/32 for Levy and 9ε²/64 for the quantile estimators, whose interval step is an
exponential mechanism, Rogers (unknown-domain) Thm 5, composed with the Laplace mean in zCDP), and zCDP composes additively, so a
user with values in k released cells of a window pays k·ρ_cell (each cell's ρ_cell rounded up to the fixed-point
grid separately). Users without values pay
nothing. A user reserves ρ_cell for every cell they have values in — a function of their own data only, so a
user the filter refuses cannot change another user's admission (review of 2026-11-23: reserving only over cells
with ≥ ``min_users`` users before admission let a refused user's data raise another user's reservation and halt
them). With the default ``min_users = 1`` the reservation equals the actual cost. With ``min_users > 1`` the cells
with fewer than ``min_users`` ADMITTED users are not released and their users are settled down to what they
actually paid (the actual cost also depends on how many admitted users share the cell — public under the model
below).

Privacy model — INHERITED FROM Rameshwar–Tandon (IoT means) AND WEAKER THAN docs/contract.md §3: Rameshwar–Tandon (IoT means)'s guarantee is for *bounded* neighbours
(the same users with the same numbers of samples; only values change). Per-cell user and sample counts are
therefore treated as public: which cells are released, ``min_users`` suppression, the estimators' m_UB, K̄ and
noise scales, and (with ``publish_counts``) the published counts all depend on them without any charge. A user's
*presence* in a cell (and how many values they have there) is NOT protected by this query kind — weaker than
contract §3's user-level guarantee for presence. Only the values are protected at ε per (cell, window).

Determinism: a cell's samples are ordered by (user, event time, value), and samples tied in event time are then
put in a uniformly random order (the engine's generator), before estimation — the clipping estimators keep a
user's first min(m_ℓ, m_UB) values, i.e. the earliest ones, a random subset of a tied burst — and the cells are processed in the
order of their keys ((ix, iy) numerically; item names lexicographically), so the noise drawn for a cell does not
depend on the interning of item names. Users are ordered by their interned id (first-seen order), which breaks the
ties of the BestFit/WrapAround sort (Rameshwar–Tandon (IoT means) §III-A).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from streamdp.accounting.cost import Cost
from streamdp.engine.query import Names, QueryRelease, Reservation, WindowData, WindowQuery
from streamdp.mechanisms.grid_means import (
    ArrayAveraging,
    Baseline,
    FixedQuantile,
    GridMeanEstimator,
    GridValues,
    Levy,
    OptimizedQuantile,
)
from streamdp.mechanisms.grid_means.clipping import check_m_ub
from streamdp.mechanisms.grid_means.data import check_epsilon, check_upper

__all__ = ["GridMeans", "ESTIMATOR_NAMES", "grid_means_cost", "make_estimator", "MAX_GRID_INDEX"]

#: configuration name → estimator class (Rameshwar–Tandon (IoT means) §III-B … §III-E)
ESTIMATOR_NAMES: dict[str, type[GridMeanEstimator]] = {
    "baseline": Baseline,
    "array_averaging": ArrayAveraging,
    "levy": Levy,
    "fixed_quantile": FixedQuantile,
    "optimized_quantile": OptimizedQuantile,
}

#: grid indices beyond ±2⁵² are not exactly representable after the float floor: such events are ignored
MAX_GRID_INDEX = float(2**52)


def grid_means_cost(epsilon: float, n_cells: int = 1, estimator: str = "baseline") -> Cost:
    """A user's cost for a window in which they have values in ``n_cells`` released cells.

    Rameshwar–Tandon (IoT means) Thm II.3 (per-grid accounting): each (cell, window) release charges only the users in that cell, the
    estimator's per-cell zCDP cost (``GridMeanEstimator.cost``: ε²/2 for one Laplace release, Rogers (unknown-domain) Thm 3; less for
    Levy / Quantile, module doc); composition adds (Rogers (unknown-domain) Thm 6) ⇒ n_cells·ρ_cell, δ = 0."""
    if isinstance(n_cells, bool) or int(n_cells) != n_cells or n_cells < 0:
        raise ValueError(f"n_cells must be an integer ≥ 0, got {n_cells!r}")
    if estimator not in ESTIMATOR_NAMES:
        raise ValueError(f"estimator must be one of {sorted(ESTIMATOR_NAMES)}, got {estimator!r}")
    return ESTIMATOR_NAMES[estimator].cost_at(check_epsilon(epsilon)) * int(n_cells)


def make_estimator(estimator: str, epsilon: float, upper: float, grouping: str | None = None,
                   m_ub: str | int | None = None) -> GridMeanEstimator:
    """The configured estimator. ``grouping``/``m_ub`` = None → the estimator's default (BestFit; m_UB = median
    for array averaging, eq. (10) for Levy and the quantile estimators). Baseline takes neither."""
    if estimator not in ESTIMATOR_NAMES:
        raise ValueError(f"estimator must be one of {sorted(ESTIMATOR_NAMES)}, got {estimator!r}")
    cls = ESTIMATOR_NAMES[estimator]
    if cls is Baseline:
        if grouping is not None:
            raise ValueError("grouping is not used by estimator 'baseline' (leave it unset)")
        if m_ub is not None:
            raise ValueError("m_ub is not used by estimator 'baseline' (leave it unset)")
        return Baseline(epsilon, upper)
    if grouping is not None and grouping not in ("bestfit", "wraparound"):
        raise ValueError(f"grouping must be 'bestfit' or 'wraparound', got {grouping!r}")
    rule = None if m_ub is None else check_m_ub(m_ub)
    return cls(epsilon, upper, grouping=grouping or "bestfit", m_ub=rule)


@dataclass
class _Prepared:
    """The query's usable rows of one window (before admission)."""

    user: np.ndarray  # int64 interned user id per usable event
    cell: np.ndarray  # int64 index into ``table`` per usable event
    value: np.ndarray  # float64 (unclipped; GridValues clips)
    ts: np.ndarray  # float64
    table: np.ndarray  # grid: int64 (n_cells, 2) sorted rows (ix, iy); item: int64 item ids (sorted)


class GridMeans(WindowQuery):
    """Per-(cell, window) user-level means (Rameshwar–Tandon (IoT means)). See the module docstring for cells, cost and privacy model."""

    kind = "grid_means"
    notion = "zcdp"

    def __init__(self, query_id: str, *, epsilon: float, upper: float, estimator: str = "baseline",
                 cells: str = "grid", cell_size: float | None = None, origin: Sequence[float] | None = None,
                 grouping: str | None = None, m_ub: str | int | None = None, min_users: int = 1,
                 publish_counts: bool = True) -> None:
        super().__init__(query_id)
        self.epsilon = check_epsilon(epsilon)
        self.upper = check_upper(upper)
        if cells not in ("grid", "item"):
            raise ValueError(f"cells must be 'grid' or 'item', got {cells!r}")
        self.cells = cells
        if cells == "grid":
            if cell_size is None:
                raise ValueError("cell_size is required when cells = 'grid'")
            cs = float(cell_size)
            if not math.isfinite(cs) or cs <= 0:
                raise ValueError(f"cell_size must be a finite number > 0, got {cell_size!r}")
            o = (0.0, 0.0) if origin is None else tuple(origin)
            if len(o) != 2 or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                      and math.isfinite(x) for x in o):
                raise ValueError(f"origin must be two finite numbers [loc0, loc1], got {origin!r}")
            self.cell_size: float | None = cs
            self.origin: tuple[float, float] | None = (float(o[0]), float(o[1]))
        else:
            if cell_size is not None:
                raise ValueError("cell_size is only used when cells = 'grid'")
            if origin is not None:
                raise ValueError("origin is only used when cells = 'grid'")
            self.cell_size = None
            self.origin = None
        if isinstance(min_users, bool) or int(min_users) != min_users or min_users < 1:
            raise ValueError(f"min_users must be an integer ≥ 1, got {min_users!r}")
        self.min_users = int(min_users)
        self.publish_counts = bool(publish_counts)
        self.estimator_name = estimator
        self.estimator = make_estimator(estimator, self.epsilon, self.upper, grouping, m_ub)
        self.grouping = grouping
        self.m_ub = m_ub
        self.cell_cost = self.estimator.cost()  # per (cell, window) — Rameshwar–Tandon (IoT means) Thm II.3; Rogers (unknown-domain) Thm 3 / Thm 5 (module doc)
        self.cell_cost_fixed = self.cell_cost.to_fixed()

    # ------------------------------------------------------------------------------------------ cells
    def _usable(self, w: WindowData) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Rows of usable events, their cell index and the cell table (canonically ordered)."""
        ok = ~np.isnan(w.value)
        if self.cells == "grid":
            with np.errstate(invalid="ignore", over="ignore"):
                q = np.floor((w.loc - np.asarray(self.origin)) / self.cell_size)
                ok &= np.isfinite(q).all(axis=1) & (np.abs(q) < MAX_GRID_INDEX).all(axis=1)
            rows = np.flatnonzero(ok)
            if rows.size == 0:
                return None
            table, inv = np.unique(q[rows].astype(np.int64), axis=0, return_inverse=True)  # rows sorted (ix, iy)
        else:
            n_items = np.diff(w.item_offsets)
            ok &= n_items > 0
            rows = np.flatnonzero(ok)
            if rows.size == 0:
                return None
            first = w.item_ids[w.item_offsets[rows]]  # the event's first item is its category
            table, inv = np.unique(first, return_inverse=True)
        return rows, inv.reshape(-1).astype(np.int64), table

    def _cell_keys(self, table: np.ndarray, items: Names) -> list[str]:
        if self.cells == "grid":
            return [f"{ix},{iy}" for ix, iy in table.tolist()]
        return items.names(table)

    @staticmethod
    def _pairs(cell: np.ndarray, user: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The distinct (cell, user) pairs, sorted by cell then user."""
        order = np.lexsort((user, cell))
        cs, us = cell[order], user[order]
        new = np.ones(cs.size, dtype=bool)
        new[1:] = (cs[1:] != cs[:-1]) | (us[1:] != us[:-1])
        return cs[new], us[new]

    # ------------------------------------------------------------------------------------------ engine steps
    def prepare(self, w: WindowData, rng: np.random.Generator) -> Reservation:
        usable = self._usable(w)
        if usable is None:
            return Reservation.empty()
        rows, cell, table = usable
        user = w.user_ids[rows]
        pair_cell, pair_user = self._pairs(cell, user)
        # every cell the user has values in, whatever its count: which cells reach min_users is decided after
        # admission, from admitted users only (a refused user's data must not raise anyone's reservation)
        users, n_cells = np.unique(pair_user, return_counts=True)
        # Rameshwar–Tandon (IoT means) Thm II.3: ε²/2 per cell the user has values in (k cells → k·ε²/2), fixed point, rounded up per cell
        costs = n_cells.astype(np.int64)[:, None] * self.cell_cost_fixed[None, :]
        prepared = _Prepared(user=user, cell=cell, value=w.value[rows], ts=w.ts[rows], table=table)
        return Reservation(users=users, costs=costs, private=prepared)

    def release(self, w: WindowData, res: Reservation, admitted: np.ndarray, rng: np.random.Generator,
                items: Names) -> QueryRelease:
        p: _Prepared | None = res.private
        empty = QueryRelease(values={"cells": {}}, users=np.zeros(0, dtype=np.int64),
                             actual=np.zeros((0, self.cell_cost_fixed.size), dtype=np.int64),
                             meta={"selected": 0, "suppressed": 0})
        if p is None:
            return empty
        adm = admitted[p.user]  # halted users' data never reaches an estimator
        n_cells_with_data = int(np.unique(p.cell[adm]).size)  # cells holding admitted users' values
        keep = adm
        charged_users = res.users[admitted[res.users]]
        if not keep.any():
            empty.users = charged_users
            empty.actual = np.zeros((charged_users.size, self.cell_cost_fixed.size), dtype=np.int64)
            empty.meta["suppressed"] = n_cells_with_data
            return empty
        user, cell, value, ts = p.user[keep], p.cell[keep], p.value[keep], p.ts[keep]
        keys = self._cell_keys(p.table, items)
        if self.cells == "grid":
            rank = np.arange(len(keys), dtype=np.int64)  # np.unique already sorted the (ix, iy) rows
        else:
            rank = np.empty(len(keys), dtype=np.int64)
            rank[np.argsort(np.array(keys, dtype=object), kind="stable")] = np.arange(len(keys))
        # canonical sample order: cell key, user, event time, then value — and samples tied in (cell, user, event
        # time) (a burst uploaded with one timestamp) in a uniformly random order drawn from the canonical one:
        # clipping keeps a user's first min(m_ℓ, m_UB) samples, and ordering ties by value kept each user's
        # smallest values, biasing every clipping estimator down (review of 2026-11-23)
        order = np.lexsort((value, ts, user, rank[cell]))
        u, c, t = user[order], rank[cell][order], ts[order]
        if u.size > 1 and bool(((u[1:] == u[:-1]) & (c[1:] == c[:-1]) & (t[1:] == t[:-1])).any()):
            order = order[np.lexsort((rng.random(u.size), t, u, c))]
        user, cell, value = user[order], cell[order], value[order]
        new = np.ones(user.size, dtype=bool)
        new[1:] = (cell[1:] != cell[:-1]) | (user[1:] != user[:-1])
        pair_start = np.flatnonzero(new)
        pair_count = np.diff(np.append(pair_start, user.size))
        pair_cell, pair_user = cell[pair_start], user[pair_start]
        users_per_cell = np.bincount(pair_cell, minlength=len(keys))
        released = users_per_cell >= self.min_users  # admitted users only
        # cells appear in rank order in the sorted arrays: walk their runs in pair space
        cell_new = np.ones(pair_cell.size, dtype=bool)
        cell_new[1:] = pair_cell[1:] != pair_cell[:-1]
        cell_pair_start = np.append(np.flatnonzero(cell_new), pair_cell.size)
        sample_start = np.append(pair_start, user.size)
        out: dict[str, dict[str, Any]] = {}
        for j in range(cell_pair_start.size - 1):
            a, b = int(cell_pair_start[j]), int(cell_pair_start[j + 1])
            c = int(pair_cell[a])
            if not released[c]:
                continue
            s0, s1 = int(sample_start[a]), int(sample_start[b])
            gv = GridValues.from_concatenated(value[s0:s1], pair_count[a:b], self.upper,
                                              user_ids=pair_user[a:b].tolist())
            r = self.estimator.release(gv, rng)  # ε-DP; cost: self.cell_cost per user in gv
            out[keys[c]] = self._cell_value(r, gv)
        # actual cost: ε²/2 per released cell per admitted user (Rameshwar–Tandon (IoT means) Thm II.3); ≤ the reservation
        rel_pair_user = pair_user[released[pair_cell]]
        k = np.zeros(charged_users.size, dtype=np.int64)
        if rel_pair_user.size:
            uu, cnt = np.unique(rel_pair_user, return_counts=True)
            k[np.searchsorted(charged_users, uu)] = cnt
        actual = k[:, None] * self.cell_cost_fixed[None, :]
        n_rel = len(out)
        return QueryRelease(values={"cells": out}, users=charged_users, actual=actual,
                            meta={"selected": n_rel, "suppressed": n_cells_with_data - n_rel})

    def _cell_value(self, r, gv: GridValues) -> dict[str, Any]:
        d: dict[str, Any] = {"mean": float(r.value), "estimator": r.estimator}
        if self.publish_counts:
            # public by the inherited Rameshwar–Tandon (IoT means) assumption (bounded DP: counts are public) — see the module docstring
            d["users"] = gv.n_users
            d["samples"] = gv.n_values
            d["noise_scale"] = float(r.noise_scale)
            if r.m_ub is not None:
                d["m_ub"] = int(r.m_ub)
                d["arrays"] = int(r.n_arrays)
            if r.interval is not None:
                d["interval"] = [float(r.interval[0]), float(r.interval[1])]
        return d

    # ------------------------------------------------------------------------------------------ state
    public_cost_basis = "per user, per (cell, window) released in which the user has values (Rameshwar–Tandon (IoT means) Thm II.3)"

    def public_cost(self, rel):
        return self.cell_cost

    def state(self) -> dict:
        return {}  # stateless across windows: every (cell, window) is released once, from its own data

    def load_state(self, d: dict) -> None:
        return None

    def describe(self) -> dict:
        d = {**super().describe(), "epsilon": self.epsilon, "upper": self.upper, "estimator": self.estimator_name,
             "cells": self.cells, "min_users": self.min_users, "publish_counts": self.publish_counts,
             "rho_per_cell": self.cell_cost.zcdp_rho}
        if self.cells == "grid":
            d["cell_size"] = self.cell_size
            d["origin"] = list(self.origin)
        if self.estimator_name != "baseline":
            d["grouping"] = self.estimator.grouping
            d["m_ub"] = self.estimator.m_ub_rule if self.m_ub is not None else "auto"
        return d
