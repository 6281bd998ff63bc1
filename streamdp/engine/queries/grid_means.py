"""User-level mean of a value per (cell, window) — the ``grid_means`` query kind, presence protected by default.

Cells come either from a square grid over the event's ``loc`` (``cells = "grid"``: cell (ix, iy) with
ix = ⌊(loc[0] − origin[0]) / cell_size⌋, iy likewise on loc[1]; key ``"ix,iy"``) or from the event's FIRST item
(``cells = "item"``: key = the item's name; further items of the event are ignored by this query). The value is
the event's ``value``, clipped to [0, U]. Events without a value — or without a usable cell (no ``loc`` in grid
mode, no item in item mode, a grid index beyond ±2⁵², or, with a public cell list, a cell not on it) — are ignored
by this query and make nobody pay for it.

Neighbours (``neighbours``):

* ``"add_remove"`` (the default, :class:`GridMeans`): two streams differ by all the events of one user, as for every
  other kind. Per cell a noisy clipped sum and a noisy clipped count (:class:`~streamdp.mechanisms.grid_means.
  sum_count.ClippedSumCount`: m_UB values per user per cell, discrete Gaussian noise on integers), the mean
  released as their ratio, and the cells either selected privately (``cell_selection = "threshold"``: a cell is
  released iff its noisy count exceeds T = m_UB + σ_N·√(2 ln(1/δ_cell)), Rogers' unknown-domain histogram) or
  taken from a configured public list (``"listed"``). Cost in ``zcdp``, per user, per (cell, window) where they
  have values: ρ·(a/m_UB)² for a kept values (a ≤ m_UB), plus δ_cell with private selection — a function of the
  configuration and of the user's own numbers of values only. The reservation is the actual cost.
* ``"bounded_unsafe_presence"`` (:class:`~streamdp.engine.queries.grid_means_bounded.BoundedGridMeans`): the
  bounded estimators of the IoT-means paper, which protect values only and publish presence; charged in a
  separate notion, never in ``zcdp`` (see that module).

Determinism: a cell's samples are ordered by (user order key, event time, value), and samples tied in event time
are then put in a uniformly random order (the engine's generator), before clipping keeps a user's first
min(m_ℓ, m_UB) values — the earliest ones, a random subset of a tied burst; the cells are processed in the order of
their keys ((ix, iy) numerically; item names lexicographically), so the noise drawn for a cell does not depend on the
interning of item names. A user's order key is the keyed hash of (query, window, user name) under the bounding key
Kb (:func:`streamdp.engine.stage_a.user_order_key`), not their interned id: ids follow other users' data and differ
between the single engine and a stage A's partition-local tables, and the users' order decides which random number
breaks which tie (and, for the bounded estimators, the users' order within a cell: array averaging groups users in
order; the float mean sums in order). Rows of users with equal keys (probability ~ n²/2⁶⁵) are one user's rows
to the release (clipping then keeps at most m_UB values of the two together: never more per user than alone).

Split (docs/DECISIONS.md, "Scale-out: stage A admits"): :meth:`CellQuery.admitted_rows` is stage A's share — the
admitted users' usable rows (order key, cell, value, time), no id — and ``release_rows`` the coordinator's, from
the rows of every partition in any order; :meth:`release` is the two in one process.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from streamdp.accounting.cost import Cost
from streamdp.engine.query import Names, QueryRelease, Reservation, WindowData, WindowQuery
from streamdp.mechanisms.grid_means.data import check_upper
from streamdp.mechanisms.grid_means.sum_count import ClippedSumCount

__all__ = ["GridMeans", "CellQuery", "MAX_GRID_INDEX", "CELL_SELECTIONS"]

#: grid indices beyond ±2⁵² are not exactly representable after the float floor: such events are ignored
MAX_GRID_INDEX = float(2**52)

CELL_SELECTIONS = ("threshold", "listed")


@dataclass
class Prepared:
    """A grid-means query's usable rows of one window (before admission)."""

    user: np.ndarray  # int64 interned user id per usable event
    cell: np.ndarray  # int64 index into ``table`` per usable event
    value: np.ndarray  # float64 (unclipped)
    ts: np.ndarray  # float64
    table: np.ndarray  # grid: int64 (n_cells, 2) sorted rows (ix, iy); item: int64 item ids (sorted)
    okey: np.ndarray  # uint64 per usable event: its user's order key (module docstring)


@dataclass
class Ordered:
    """Admitted samples in canonical order: by cell rank, user order key, event time (ties random), value."""

    okey: np.ndarray  # the row's user's order key (a user's rows are the rows of one key)
    sel: np.ndarray  # each ordered sample's index in the rows given
    rank: np.ndarray  # the cell's rank in key order
    value: np.ndarray
    pair_start: np.ndarray  # index of each (cell, user) run's first sample
    pair_count: np.ndarray  # its length m_ℓ
    keys: list[str]  # cell key by rank


class CellQuery(WindowQuery):
    """The cell mapping shared by both grid-means variants (module docstring)."""

    kind = "grid_means"

    def _init_cells(self, cells: str, cell_size: float | None, origin: Sequence[float] | None) -> None:
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
    def _pairs(cell: np.ndarray, user: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The distinct (cell, user) pairs, sorted by cell then user, and each pair's number of rows."""
        order = np.lexsort((user, cell))
        cs, us = cell[order], user[order]
        new = np.ones(cs.size, dtype=bool)
        new[1:] = (cs[1:] != cs[:-1]) | (us[1:] != us[:-1])
        starts = np.flatnonzero(new)
        return cs[starts], us[starts], np.diff(np.append(starts, cs.size))

    def _prepared(self, w: WindowData, draws) -> Prepared | None:
        """The usable rows; ``draws`` (the close's :class:`~streamdp.engine.stage_a.BoundingDraws` for this query)
        gives each of their users an order key."""
        order_keys = getattr(draws, "user_order_keys", None)
        if order_keys is None:
            raise TypeError(f"{self.kind} {self.id}: prepare needs the close's BoundingDraws (its user order keys), "
                            f"got {type(draws).__name__}")
        usable = self._usable(w)
        if usable is None:
            return None
        rows, cell, table = usable
        user = w.user_ids[rows]
        uu, inv = np.unique(user, return_inverse=True)
        okey = order_keys(uu)[inv.reshape(-1)]
        return Prepared(user=user, cell=cell, value=w.value[rows], ts=w.ts[rows], table=table, okey=okey)

    def admitted_rows(self, p: Prepared | None, keep: np.ndarray | None = None
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Stage A's share: the kept rows of ``p`` (``keep``: a mask over them; None: all) as (order keys uint64,
        cells — grid: int64 (n, 2) indices (ix, iy); item: int64 item ids —, values, event times), no user id."""
        if p is None:
            return (np.zeros(0, dtype=np.uint64), np.zeros((0, 2) if self.cells == "grid" else 0, dtype=np.int64),
                    np.zeros(0), np.zeros(0))
        if keep is None:
            keep = np.ones(p.user.size, dtype=bool)
        return p.okey[keep], p.table[p.cell[keep]], p.value[keep], p.ts[keep]

    def _ordered(self, okey: np.ndarray, cells: np.ndarray, value: np.ndarray, ts: np.ndarray,
                 rng: np.random.Generator, items: Names) -> Ordered | None:
        """Rows (as :meth:`admitted_rows` gives them, from any number of partitions, in any order) in canonical
        order (module docstring), with their (cell, user) runs; None without rows."""
        if okey.size == 0:
            return None
        if self.cells == "grid":
            table, cell = np.unique(np.asarray(cells, dtype=np.int64).reshape(-1, 2), axis=0, return_inverse=True)
        else:
            table, cell = np.unique(np.asarray(cells, dtype=np.int64), return_inverse=True)
        cell = cell.reshape(-1).astype(np.int64)
        user = np.asarray(okey, dtype=np.uint64)
        keys = self._cell_keys(table, items)
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
        user, crank, value = user[order], rank[cell][order], value[order]
        new = np.ones(user.size, dtype=bool)
        new[1:] = (crank[1:] != crank[:-1]) | (user[1:] != user[:-1])
        pair_start = np.flatnonzero(new)
        pair_count = np.diff(np.append(pair_start, user.size))
        by_rank = [""] * len(keys)
        for k, r in zip(keys, rank.tolist()):
            by_rank[r] = k
        return Ordered(okey=user, sel=order, rank=crank, value=value, pair_start=pair_start,
                       pair_count=pair_count, keys=by_rank)

    def _describe_cells(self) -> dict:
        d: dict = {"cells": self.cells}
        if self.cells == "grid":
            d["cell_size"] = self.cell_size
            d["origin"] = list(self.origin)
        return d

    def state(self) -> dict:
        return {}  # stateless across windows: every (cell, window) is released once, from its own data

    def load_state(self, d: dict) -> None:
        return None


def _grid_key(key: str) -> tuple[int, int]:
    try:
        a, b = key.split(",")
        ix, iy = int(a), int(b)
    except (ValueError, AttributeError):
        raise ValueError(f"cell_list: a grid cell is 'ix,iy' (two integers), got {key!r}") from None
    if abs(ix) >= MAX_GRID_INDEX or abs(iy) >= MAX_GRID_INDEX:
        raise ValueError(f"cell_list: grid indices must be below 2**52 in absolute value, got {key!r}")
    return ix, iy


class GridMeans(CellQuery):
    """Per-(cell, window) user-level means under add/remove neighbours (module docstring)."""

    notion = "zcdp"
    neighbours = "add_remove"

    def __init__(self, query_id: str, *, upper: float, rho: float, m_ub: int = 1, sum_share: float = 0.5,
                 cell_selection: str = "threshold", delta_cell: float | None = 1e-6,
                 cell_list: Sequence[str] | None = None, cells: str = "grid", cell_size: float | None = None,
                 origin: Sequence[float] | None = None) -> None:
        super().__init__(query_id)
        self.upper = check_upper(upper)
        self._init_cells(cells, cell_size, origin)
        self.mechanism = ClippedSumCount(self.upper, m_ub, rho, sum_share)
        self.m_ub, self.rho, self.sum_share = self.mechanism.m_ub, self.mechanism.rho, self.mechanism.sum_share
        if cell_selection not in CELL_SELECTIONS:
            raise ValueError(f"cell_selection must be one of {CELL_SELECTIONS}, got {cell_selection!r}")
        self.cell_selection = cell_selection
        if cell_selection == "threshold":
            if cell_list is not None:
                raise ValueError("cell_list is only used when cell_selection = 'listed'")
            if delta_cell is None:
                raise ValueError("delta_cell is required when cell_selection = 'threshold'")
            self.delta_cell: float | None = float(delta_cell)
            self.threshold: float | None = self.mechanism.threshold(self.delta_cell)
            self.cell_list: tuple[str, ...] | None = None
        else:
            if not cell_list or isinstance(cell_list, str):
                raise ValueError("cell_list: a non-empty list of cell keys is required when cell_selection = "
                                 "'listed'")
            keys = [str(k) for k in cell_list]
            if any(not k for k in keys):
                raise ValueError("cell_list: cell keys must be non-empty strings")
            if len(set(keys)) != len(keys):
                raise ValueError("cell_list: cell keys must be distinct")
            if cells == "grid":
                pairs = sorted(_grid_key(k) for k in keys)
                self._listed_grid = np.array(pairs, dtype=np.int64).reshape(-1, 2)
                keys = [f"{ix},{iy}" for ix, iy in pairs]  # canonical text and order
            else:
                keys = sorted(keys)
            self.cell_list = tuple(keys)
            self.delta_cell = None
            self.threshold = None
        self._items: Names | None = None
        self._cost_table = self.mechanism.cost_table(self.delta_cell or 0.0)

    # ------------------------------------------------------------------------------------------ cells
    def bind_names(self, items: Names) -> None:
        """The engine's item names (to match item cells against the public list before admission)."""
        self._items = items

    def _listed_mask(self, p: Prepared) -> np.ndarray:
        """Which cells of ``p.table`` are on the public list."""
        if self.cells == "grid":
            t = p.table
            a = np.ascontiguousarray(t).view([("x", np.int64), ("y", np.int64)]).ravel()
            b = np.ascontiguousarray(self._listed_grid).view([("x", np.int64), ("y", np.int64)]).ravel()
            return np.isin(a, b)
        if self._items is None:
            raise RuntimeError("grid_means with cells = 'item' and a cell list needs the engine's item names "
                               "(bind_names) before prepare")
        listed = set(self.cell_list)
        return np.array([n in listed for n in self._items.names(p.table)], dtype=bool)

    # ------------------------------------------------------------------------------------------ engine steps
    def prepare(self, w: WindowData, rng) -> Reservation:
        """``rng``: the close's BoundingDraws for this query (order keys, :meth:`CellQuery._prepared`)."""
        p = self._prepared(w, rng)
        if p is None:
            return Reservation.empty()
        if self.cell_selection == "listed":
            on = self._listed_mask(p)[p.cell]
            if not on.any():
                return Reservation.empty()
            if not on.all():
                p = Prepared(user=p.user[on], cell=p.cell[on], value=p.value[on], ts=p.ts[on], table=p.table,
                             okey=p.okey[on])
        # per (cell, user): a = min(m, m_UB) kept values; cost row a of the table (ρ·a²/m_UB², δ_cell)
        _, pair_user, pair_m = self._pairs(p.cell, p.user)
        rows = self._cost_table[np.minimum(pair_m, self.m_ub)]
        order = np.argsort(pair_user, kind="stable")
        pu = pair_user[order]
        starts = np.flatnonzero(np.concatenate(([True], pu[1:] != pu[:-1])))
        costs = np.add.reduceat(rows[order], starts, axis=0)
        return Reservation(users=pu[starts], costs=costs, private=p)

    def release(self, w: WindowData, res: Reservation, admitted: np.ndarray, rng: np.random.Generator,
                items: Names) -> QueryRelease:
        p: Prepared | None = res.private
        keep = admitted[p.user] if p is not None else None  # halted users' data never reaches the mechanism
        return self.release_rows(*self.admitted_rows(p, keep), rng, items)

    def release_rows(self, okey: np.ndarray, cells: np.ndarray, value: np.ndarray, ts: np.ndarray,
                     rng: np.random.Generator, items: Names) -> QueryRelease:
        """The coordinator's share: the release from the admitted rows (:meth:`CellQuery.admitted_rows`) of every
        partition, in any order. Every admitted user's cost is their reservation (nothing to settle)."""
        mech = self.mechanism
        o = self._ordered(okey, cells, value, ts, rng, items)
        if o is not None:
            # clipping: the first min(m_ℓ, m_UB) values of each (cell, user) run
            pos = np.arange(o.okey.size) - np.repeat(o.pair_start, o.pair_count)
            kept = pos < self.m_ub
            c = mech.quantize(o.value[kept])
            r = o.rank[kept]
            n_cells = len(o.keys)
            sums = np.zeros(n_cells, dtype=np.int64)
            counts = np.bincount(r, minlength=n_cells).astype(np.int64)
            if r.size:
                starts = np.flatnonzero(np.concatenate(([True], r[1:] != r[:-1])))
                sums[r[starts]] = np.add.reduceat(c, starts)
            present = counts > 0
            keys = [k for k, on in zip(o.keys, present.tolist()) if on]
            sums, counts = sums[present], counts[present]
        else:
            keys, sums, counts = [], np.zeros(0, np.int64), np.zeros(0, np.int64)
        if self.cell_selection == "listed":
            # every listed cell, in key order; zeros where nobody admitted has values (noise is still added)
            at = {k: i for i, k in enumerate(keys)}
            idx = [at.get(k, -1) for k in self.cell_list]
            s_all = np.array([sums[i] if i >= 0 else 0 for i in idx], dtype=np.int64)
            n_all = np.array([counts[i] if i >= 0 else 0 for i in idx], dtype=np.int64)
            keys, sums, counts = list(self.cell_list), s_all, n_all
        noisy_s, noisy_n = mech.noise(rng, sums, counts)  # ρ·(a/m_UB)² per user per cell: the reservation
        if self.cell_selection == "threshold":
            sel = noisy_n > self.threshold  # post-processing of the noisy counts (Rogers Alg. 1)
            keys = [k for k, s in zip(keys, sel.tolist()) if s]
            noisy_s, noisy_n = noisy_s[sel], noisy_n[sel]
        cells = dict(zip(keys, mech.publish(noisy_s, noisy_n)))
        values = {"cells": cells, "threshold": self.threshold, "sum_sd": mech.sum_sd,
                  "count_sd": mech.sigma_count}
        return QueryRelease(values=values, meta={"selected": len(cells)})

    # ------------------------------------------------------------------------------------------ describe
    public_cost_basis = ("per user, per (cell, window) in which the user has values: rho*(a/m_ub)^2 <= rho for a "
                         "kept values, and delta_cell with private cell selection")

    def public_cost(self, rel):
        return Cost.zcdp(self.rho, self.delta_cell or 0.0)

    def describe(self) -> dict:
        d = {**super().describe(), "neighbours": self.neighbours, "upper": self.upper, "rho": self.rho,
             "m_ub": self.m_ub, "sum_share": self.sum_share, "cell_selection": self.cell_selection,
             "sum_sd": self.mechanism.sum_sd, "count_sd": self.mechanism.sigma_count, **self._describe_cells()}
        if self.cell_selection == "threshold":
            d["delta_cell"] = self.delta_cell
            d["threshold"] = self.threshold
        else:
            d["cell_list"] = list(self.cell_list)
        return d
