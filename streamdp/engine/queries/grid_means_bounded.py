"""``grid_means`` with ``neighbours = "bounded_unsafe_presence"``: the bounded estimators of the IoT-means paper
(Mean Estimation with User-Level Privacy on Multi-Dimensional IoT Datasets: Baseline, array averaging with
WrapAround/BestFit, Levy, Fixed/Optimized Quantile), which DO NOT PROTECT PRESENCE.

Their guarantee is for *bounded* neighbours — the same users with the same numbers of values in every cell, only
the values change — so per-cell user and sample counts are public to them: which cells are released,
``min_users`` suppression, the estimators' m_UB, K̄ and noise scales and (with ``publish_counts``) the published
counts all depend on them. Adding one user changes the output deterministically (review of 2026-12-06: cell
``0,0`` went from 8 users to 9 and its noise scale from 25 to 40, and a new cell appeared); the privacy loss for a
user's presence is unbounded. Only the values are protected, at ε per (cell, window).

**Accounting: a separate notion, never ``zcdp``.** The cost is recorded in the notion
``bounded_unsafe_presence`` — ρ-zCDP with respect to bounded neighbours — and never charged to the ``zcdp``
budget nor converted to (ε, δ) as if it were standard DP. Each (cell, window) release costs its users the
estimator's ρ_cell (the paper's per-grid accounting, Thm II.3: only users present in the cell pay): ε²/2 for
baseline and array averaging (one Laplace release: pure ε ⇒ ε²/2, Bun–Steinke), 5ε²/32 for Levy and 9ε²/64 for the
quantile estimators (an exponential-mechanism interval, ε′²/8 by Cesar–Rogers, composed in zCDP with a Laplace
mean at ε/2). A user in k released cells of a window pays k·ρ_cell. The notion's per-user budget is the query's
``bounded_budget_rho`` (required; per query: two bounded queries each have their own), held in this query's state
(checkpointed with the engine): a user whose reservation does not fit is halted for this query for good and their
data is dropped from it; the ``zcdp`` store is not involved (such a query reserves nothing there, and users
halted there are dropped here too). The store keeps 6 components (a new notion there would change the Redis
layout). Records show the cost under ``cost.bounded_unsafe_presence``.

Reservation and settle: a user reserves ρ_cell for every cell they have values in — a function of their own data
only. With ``min_users > 1`` cells with fewer than ``min_users`` locally admitted users are not released and their
users pay only for the released cells (public under the bounded model).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from streamdp.accounting.cost import LOSS_SCALE, N_COMPONENTS, Cost, budget_to_fixed, cost_to_fixed
from streamdp.engine.queries.grid_means import CellQuery, Prepared
from streamdp.engine.query import Names, QueryRelease, Reservation, WindowData
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

__all__ = ["BoundedGridMeans", "BOUNDED_NOTION", "ESTIMATOR_NAMES", "grid_means_cost", "make_estimator"]

#: the accounting notion of the bounded estimators (never converted to (ε, δ))
BOUNDED_NOTION = "bounded_unsafe_presence"

#: configuration name → estimator class (Rameshwar–Tandon (IoT means) §III-B … §III-E)
ESTIMATOR_NAMES: dict[str, type[GridMeanEstimator]] = {
    "baseline": Baseline,
    "array_averaging": ArrayAveraging,
    "levy": Levy,
    "fixed_quantile": FixedQuantile,
    "optimized_quantile": OptimizedQuantile,
}


def grid_means_cost(epsilon: float, n_cells: int = 1, estimator: str = "baseline") -> Cost:
    """A user's cost for a window in which they have values in ``n_cells`` released cells.

    The paper's per-grid accounting (Thm II.3): each (cell, window) release charges only the users in that cell,
    the estimator's per-cell cost in the bounded notion (``GridMeanEstimator.cost``: ε²/2 for one Laplace release;
    less for Levy / Quantile, module doc); composition adds ⇒ n_cells·ρ_cell, δ = 0 (as a ``Cost`` whose
    ``zcdp_rho`` field carries the bounded notion's ρ)."""
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


class BoundedGridMeans(CellQuery):
    """Per-(cell, window) means of the IoT-means paper under bounded neighbours — presence NOT protected (module
    docstring). Costs in the separate notion ``bounded_unsafe_presence`` with a per-query per-user budget."""

    notion = BOUNDED_NOTION
    neighbours = "bounded_unsafe_presence"

    def __init__(self, query_id: str, *, epsilon: float, upper: float, bounded_budget_rho: float,
                 estimator: str = "baseline", cells: str = "grid", cell_size: float | None = None,
                 origin: Sequence[float] | None = None, grouping: str | None = None, m_ub: str | int | None = None,
                 min_users: int = 1, publish_counts: bool = True) -> None:
        super().__init__(query_id)
        self.epsilon = check_epsilon(epsilon)
        self.upper = check_upper(upper)
        self._init_cells(cells, cell_size, origin)
        if isinstance(min_users, bool) or int(min_users) != min_users or min_users < 1:
            raise ValueError(f"min_users must be an integer ≥ 1, got {min_users!r}")
        self.min_users = int(min_users)
        self.publish_counts = bool(publish_counts)
        self.estimator_name = estimator
        if estimator not in ESTIMATOR_NAMES:
            raise ValueError(f"estimator must be one of {sorted(ESTIMATOR_NAMES)}, got {estimator!r}")
        self.estimator = make_estimator(estimator, self.epsilon, self.upper, grouping, m_ub)
        self.grouping = grouping
        self.m_ub = m_ub
        self.cell_cost = self.estimator.cost()  # ρ_cell per (cell, window), in the bounded notion (module doc)
        self.cell_rho_fixed = cost_to_fixed(self.cell_cost.zcdp_rho, LOSS_SCALE)
        b = float(bounded_budget_rho)
        if not b >= 0 or b == float("inf"):
            raise ValueError(f"bounded_budget_rho must be a finite number ≥ 0, got {bounded_budget_rho!r}")
        self.bounded_budget_rho = b
        self.budget_fixed = budget_to_fixed(b, LOSS_SCALE)
        self._spent = np.zeros(0, dtype=np.int64)  # per interned user id, fixed point (this query's notion)
        self._halted = np.zeros(0, dtype=bool)

    # ------------------------------------------------------------------------------------------ local filter
    def _grow(self, n: int) -> None:
        if n > self._spent.size:
            extra = max(n, 2 * self._spent.size) - self._spent.size
            self._spent = np.concatenate([self._spent, np.zeros(extra, dtype=np.int64)])
            self._halted = np.concatenate([self._halted, np.zeros(extra, dtype=bool)])

    def spent(self, user_id: int) -> float:
        """A user's spend in the bounded notion (ρ), by interned id (0 for an unseen id)."""
        return float(self._spent[user_id]) / LOSS_SCALE if 0 <= user_id < self._spent.size else 0.0

    def halted(self, user_id: int) -> bool:
        return bool(self._halted[user_id]) if 0 <= user_id < self._halted.size else False

    # ------------------------------------------------------------------------------------------ engine steps
    def prepare(self, w: WindowData, rng) -> Reservation:
        """``rng``: the close's BoundingDraws for this query (order keys, :meth:`CellQuery._prepared`)."""
        p = self._prepared(w, rng)
        if p is None:
            return Reservation.empty()
        _, pair_user, _ = self._pairs(p.cell, p.user)
        # every cell the user has values in, whatever its count: which cells reach min_users is decided after
        # admission, from admitted users only (a refused user's data must not raise anyone's reservation)
        users, n_cells = np.unique(pair_user, return_counts=True)
        local = n_cells.astype(np.int64) * self.cell_rho_fixed  # this notion's reservation: k·ρ_cell
        # nothing is reserved in the store (zcdp): the cost is in this query's own notion
        return Reservation(users=users, costs=np.zeros((users.size, N_COMPONENTS), dtype=np.int64), private=(p, local))

    def local_filter(self, res: Reservation, admitted: np.ndarray) -> tuple[np.ndarray | None, int]:
        """The local filter (per-user filter of the bounded notion) over the window's users with values: admitted
        by the store, not halted here, and spent + reservation ≤ budget; a user who does not fit is halted for this
        query, for good. (mask over the prepared rows of the users that pass — None without rows —, the number of
        users halted now). A function of each user's own spend and data: stage A applies it to its partition."""
        if res.private is None:
            return None, 0
        p, local = res.private
        self._grow(int(res.users.max()) + 1)
        u = res.users
        ok = admitted[u] & ~self._halted[u]
        fits = self._spent[u] + local <= self.budget_fixed
        newly = ok & ~fits
        self._halted[u[newly]] = True
        local_ok = np.zeros(max(admitted.size, int(u.max()) + 1), dtype=bool)
        local_ok[u[ok & fits]] = True
        return local_ok[p.user], int(newly.sum())

    def charge_released(self, users: np.ndarray, cells: np.ndarray, released: np.ndarray) -> None:
        """The actual cost in the bounded notion: ρ_cell per released cell per user (≤ the reservation).
        ``users``, ``cells`` (any integer cell code) and ``released``: per kept row."""
        if not released.any():
            return
        u, c = users[released], cells[released]
        pairs = np.unique(np.column_stack([u, c]), axis=0)
        uu, cnt = np.unique(pairs[:, 0], return_counts=True)
        self._grow(int(uu.max()) + 1)
        self._spent[uu] += cnt.astype(np.int64) * self.cell_rho_fixed

    def release(self, w: WindowData, res: Reservation, admitted: np.ndarray, rng: np.random.Generator,
                items: Names) -> QueryRelease:
        keep, halted = self.local_filter(res, admitted)
        p = res.private[0] if res.private is not None else None
        rel, released = self.release_rows(*self.admitted_rows(p, keep), rng, items, halted)
        if p is not None and keep.any():
            self.charge_released(p.user[keep], p.cell[keep], released)
        return rel

    def release_rows(self, okey: np.ndarray, cells: np.ndarray, value: np.ndarray, ts: np.ndarray,
                     rng: np.random.Generator, items: Names, halted: int = 0) -> tuple[QueryRelease, np.ndarray]:
        """The coordinator's share: the release from the rows that passed the local filter
        (:meth:`CellQuery.admitted_rows`) of every partition, in any order, and ``halted`` the users the filter
        halted in this window (a count, for the meta). (release, per row: is its cell released — each of the
        row's user's released cells costs them ρ_cell, :meth:`charge_released`)."""
        meta = {"selected": 0, "suppressed": 0, "halted_bounded": int(halted)}
        released_rows = np.zeros(okey.size, dtype=bool)
        o = self._ordered(okey, cells, value, ts, rng, items)
        if o is None:
            return QueryRelease(values={"cells": {}}, meta=meta), released_rows
        pair_rank, pair_key = o.rank[o.pair_start], o.okey[o.pair_start]
        users_per_cell = np.bincount(pair_rank, minlength=len(o.keys))
        released = users_per_cell >= self.min_users  # locally admitted users only
        cell_new = np.ones(pair_rank.size, dtype=bool)
        cell_new[1:] = pair_rank[1:] != pair_rank[:-1]
        cell_pair_start = np.append(np.flatnonzero(cell_new), pair_rank.size)
        sample_start = np.append(o.pair_start, o.okey.size)
        out: dict[str, dict[str, Any]] = {}
        for j in range(cell_pair_start.size - 1):
            a, b = int(cell_pair_start[j]), int(cell_pair_start[j + 1])
            c = int(pair_rank[a])
            if not released[c]:
                continue
            s0, s1 = int(sample_start[a]), int(sample_start[b])
            gv = GridValues.from_concatenated(o.value[s0:s1], o.pair_count[a:b], self.upper,
                                              user_ids=pair_key[a:b].tolist())
            r = self.estimator.release(gv, rng)  # ε-DP under bounded neighbours; ρ_cell per user in gv
            out[o.keys[c]] = self._cell_value(r, gv)
        released_rows[o.sel] = released[o.rank]
        meta["selected"] = len(out)
        meta["suppressed"] = int(np.count_nonzero(users_per_cell)) - len(out)
        return QueryRelease(values={"cells": out}, meta=meta), released_rows

    def _cell_value(self, r, gv: GridValues) -> dict[str, Any]:
        d: dict[str, Any] = {"mean": float(r.value), "estimator": r.estimator}
        if self.publish_counts:
            # public by the bounded model (counts are public) — see the module docstring
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
    public_cost_basis = ("per user, per (cell, window) released in which the user has values, in the notion "
                         "bounded_unsafe_presence (bounded neighbours: presence is NOT protected)")

    def public_cost(self, rel):
        return None  # nothing in zcdp / cgp / emd

    def public_cost_extra(self, rel) -> dict:
        """The published cost in this query's own notion (``outputs.records``)."""
        return {BOUNDED_NOTION: {"rho": self.cell_cost.zcdp_rho, "delta": 0.0}}

    def state(self) -> dict:
        n = self._spent.size
        return {"spent": self._spent[:n].copy(), "halted": self._halted[:n].copy()}

    def load_state(self, d: dict) -> None:
        self._spent = np.asarray(d.get("spent", np.zeros(0)), dtype=np.int64).copy()
        self._halted = np.asarray(d.get("halted", np.zeros(0)), dtype=bool).copy()

    def describe(self) -> dict:
        d = {**super().describe(), "neighbours": self.neighbours, "epsilon": self.epsilon,
             "upper": self.upper, "estimator": self.estimator_name, "min_users": self.min_users,
             "publish_counts": self.publish_counts, "rho_per_cell": self.cell_cost.zcdp_rho,
             "bounded_budget_rho": self.bounded_budget_rho, **self._describe_cells()}
        if self.estimator_name != "baseline":
            d["grouping"] = self.estimator.grouping
            d["m_ub"] = self.estimator.m_ub_rule if self.m_ub is not None else "auto"
        return d

