"""Every query kind cut in two: what stage A keeps and computes per input partition, and what the coordinator keeps
(docs/DECISIONS.md, "Scale-out: stage A admits").

A query of a count kind (window_histogram — both algorithms —, top_k, continual_counts), continual_sums, a geo kind
(geo_locations, geo_knn, geo_convex_hull), an adaptive kind (range_counts, kde_point, knn_point, threshold_count),
grid_means (both notions) or an EMD kind (emd_linear, emd_frequency) is one object in the single engine. Split, it
becomes:

* a **stage-A half** per (query, input partition) — this module's :class:`StageAHalf` subclasses: the bounding, the
  per-user state (continual_counts' epoch counters of (user, item) pairs, :class:`ContributionBounder`;
  continual_sums' per-user record history, :class:`RecordBounder`), the reservation (``prepare``) and, once the
  filter answered, the per-item counts of the ADMITTED users' contributions (``contribution``; continual_sums also
  their per-key sum increments in grid units; the geo kinds each admitted located user's bounded planar point and
  its order key, no user id; grid_means the admitted users' rows with their order keys; emd_linear each admitted
  featured user's q_f(D_i); emd_frequency their featured items with a local user index), which are all the
  coordinator needs of the data. Each half reads
  the query object for its configuration only (costs, Δ0, C, k, the public Gram column), never for its mechanism
  state;
* the **coordinator half** — the query object itself, whose mechanism state (the binary-mechanism tree of Dwork et
  al., "Differential privacy under continual observation", in the unknown-domain form of Rogers et al.,
  "Unknown-domain algorithms"; the pay-what-you-get counter of Rogers et al.'s Alg. 4; continual_sums' tree or
  BLT running totals and sticky selection) advances only through :func:`release_merged` over the merged per-item
  arrays.

What flows back: top_k's stage A prepares window t against the PWYG counter after window t − 1's release (k(i) =
min(k, k* − used) and the stop), which it receives with t − 1's outcome (:func:`outcome_info`,
:meth:`TopKStageA.apply_outcome`), and it settles its own users to the actual cost row the outcome carries
(Rogers et al. Thm 10: (n·ε²/8, δ) per admitted user, n the items returned). continual_sums' stage A charges δ_key
for a key a user touches first while it is unselected, so it needs the keys selected so far in the epoch: the
outcome carries the keys selected at t by name (the release's public ``new_keys``). The adaptive kinds' stage A
keeps each user's remaining budget B_i and sequence charge C_i (Liang–Yi (adaptive budgeting) Alg. 3) and gets back,
per partition and local index, each admitted user's executed cost, to settle and update them
(:class:`AdaptiveStageA`); threshold_count's gets the one settled row, as top_k's. grid_means in the bounded notion
keeps its own per-user spend and halts in stage A and gets back the released cells, which it charges there
(:class:`GridStageA`). The other kinds settle nothing and need nothing back.

Every kind has halves (:data:`SUPPORTED_KINDS`); :func:`check_staged` refuses only a kind unknown to it and the
idle timeout.
"""

from __future__ import annotations

import copy

import numpy as np

from streamdp.accounting.cost import COMPONENTS, N_COMPONENTS
from streamdp.arrays import unique_sorted
from streamdp.bounding.contribution import ContributionBounder
from streamdp.bounding.record_bounds import RecordBounder
from streamdp.engine.queries.emd import _UNKNOWN, ItemDomain
from streamdp.engine.query import Names, QueryRelease, Reservation, WindowData, WindowQuery
from streamdp.mechanisms.pay_what_you_get import PayWhatYouGet

SUPPORTED_KINDS = ("window_histogram", "top_k", "continual_counts", "continual_sums", "geo_locations", "geo_knn",
                   "geo_convex_hull", "range_counts", "kde_point", "knn_point", "threshold_count", "grid_means",
                   "emd_linear", "emd_frequency")


class UnsupportedKind(ValueError):
    """A query kind without stage-A/coordinator halves was given to a staged object."""


def check_staged(queries: list[WindowQuery], config=None) -> None:
    """Refuse what the staged objects cannot run: the idle timeout (a wall-clock close decision the coordinator
    does not take yet) — every query kind has halves (:data:`SUPPORTED_KINDS`); a kind unknown to this module (a
    kind added without halves) is refused by name, naming the supported ones."""
    bad = [f"{q.id!r} ({q.kind})" for q in queries if q.kind not in SUPPORTED_KINDS]
    if bad:
        raise UnsupportedKind(f"the staged stage A / coordinator split supports the kinds "
                              f"{', '.join(SUPPORTED_KINDS)} only; not: {', '.join(bad)} (run them in one "
                              "ReleaseEngine)")
    ids = [q.id for q in queries]
    if len(set(ids)) != len(ids):
        raise ValueError(f"query ids must be unique, got {ids}")
    if config is not None and getattr(config, "idle_timeout", None) is not None:
        raise ValueError("idle_timeout is not supported by the staged stage A / coordinator split yet: the "
                         "coordinator would have to decide a wall-clock close from the partitions' idle markers")


class StageAHalf:
    """The stage-A half of one query for one input partition (see the module doc)."""

    #: the query settles after its release (reserve and settle): stage A keeps its admitted users' reservations
    #: of the window until the window's outcome
    settles = False
    #: the column of ``point_ints`` that holds item ids (stage A sends them as codes into the part's dictionary,
    #: the coordinator maps them to its own ids), or None
    point_code_column: int | None = None

    def __init__(self, query: WindowQuery) -> None:
        self.q = query
        self.items: Names | None = None

    def bind(self, items: Names) -> None:
        """The partition's item name table (the halves that map public item names to local ids need it)."""
        self.items = items

    def prepare(self, w: WindowData, draws) -> Reservation:
        return self.q.prepare(w, draws)

    def contribution(self, res: Reservation, admitted: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict]:
        """Per item (sorted partition-local item ids) the count of admitted contributions, and the kind's other
        per-item arrays (``{"sums": int64}`` for continual_sums); advances the per-user state with the admitted
        users' contributions."""
        ids, counts = self.q.admitted_counts(res, admitted)
        return ids, counts, {}

    def new_epoch(self) -> None:
        pass

    def apply_outcome(self, info: dict | None, seq: int) -> None:
        """Window ``seq``'s outcome for this query (``info``: :func:`outcome_info`, None when it sent nothing)."""

    def settle_rows(self, info: dict | None, partition: int, users: np.ndarray, reserved: np.ndarray
                    ) -> np.ndarray | None:
        """For a query that settles: the actual cost rows of the partition's admitted users of the window
        (``users``: partition-local ids, in the order of ``reserved``, their reservation rows), from the window's
        outcome; None: equal to the reservation. Called once per window, before :meth:`apply_outcome`."""
        return None

    def state(self) -> dict:
        return {}

    def load_state(self, d: dict) -> None:
        pass


class HistogramStageA(StageAHalf):
    """window_histogram (Rogers et al., "Unknown-domain algorithms", Alg. 1 and 2): stateless; the reservation is
    m_u·(ε²/2, δ/Δ0) (threshold) or Thm 8's (Δ0·ε²/2, δ) per present user, from the user's own bounded items."""


class TopKStageA(StageAHalf):
    """top_k (pay-what-you-get, Rogers et al. Alg. 3/4): a copy of the PWYG counter as of the last outcome
    applied; reserves k(i)·ε²/8 and δ per present user (Thm 10) and settles to the outcome's actual row."""

    settles = True

    def __init__(self, query: WindowQuery) -> None:
        super().__init__(query)
        p = query.pwyg
        self.pwyg = PayWhatYouGet(p.epsilon, p.delta, p.k_star, count_bottom=False)

    def prepare(self, w: WindowData, draws) -> Reservation:
        return self.q.prepare_under(w, self.pwyg)

    def settle_rows(self, info, partition, users, reserved):
        if info is None or info.get("actual") is None:
            return None
        return np.broadcast_to(np.asarray(info["actual"], dtype=np.int64), reserved.shape)

    def apply_outcome(self, info: dict | None, seq: int = 0) -> None:
        if info is not None:
            self.pwyg = PayWhatYouGet.from_state(self.pwyg.epsilon, self.pwyg.delta, info["pwyg"],
                                                 count_bottom=False)

    def state(self) -> dict:
        return {"pwyg": self.pwyg.state()}

    def load_state(self, d: dict) -> None:
        self.apply_outcome(d)


class ContinualCountsStageA(StageAHalf):
    """continual_counts: the partition's epoch counters of (user, item) pairs (≤ C contributions per pair per
    epoch, the first one costly); committed with the admitted pairs right after the admit."""

    def __init__(self, query: WindowQuery) -> None:
        super().__init__(query)
        self.bounder = ContributionBounder(query.bounder.delta0, query.bounder.cap)

    def prepare(self, w: WindowData, draws) -> Reservation:
        return self.q.prepare_with(w, draws, self.bounder)

    def contribution(self, res: Reservation, admitted: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict]:
        ids, counts = self.q.admitted_counts(res, admitted, self.bounder)
        return ids, counts, {}

    def new_epoch(self) -> None:
        self.bounder.reset()

    def state(self) -> dict:
        return {"bounder": self.bounder.state()}

    def load_state(self, d: dict) -> None:
        self.bounder = ContributionBounder.from_state(d["bounder"])


class ContinualSumsStageA(StageAHalf):
    """continual_sums: the partition's per-user record history of the epoch (:class:`RecordBounder`: ≤ m records
    per (user, key), ≤ C per user, ≤ Δ0 keys per window, each user's earlier records and values for the exact
    charge), committed with the admitted users' kept records right after the admit; and the keys selected so far in
    the epoch — public, from the releases — by NAME, as the outcomes bring them (a key first touched while
    unselected costs δ_key). Sends per key the admitted clamped count and sum increments (integers: sums in grid
    units), whose sum over partitions is exact in any order."""

    def __init__(self, query: WindowQuery) -> None:
        super().__init__(query)
        b = query.bounder
        self.bounder = RecordBounder(b.C, b.delta0, b.m, with_values=b.with_values, horizon=b.horizon)
        self.sel_epoch = 0
        self.selected: set[str] = set()
        self._mask = np.zeros(0, dtype=bool)  # local item id → selected (ids < _mask_n are up to date)
        self._mask_n = 0

    def _epoch(self, epoch: int) -> None:
        if epoch != self.sel_epoch:
            self.sel_epoch, self.selected = epoch, set()
            self._mask[:] = False

    def selected_mask(self, keys: np.ndarray) -> np.ndarray:
        n = len(self.items)
        if self._mask_n < n:
            if self._mask.size < n:
                grown = np.zeros(max(n, 2 * self._mask.size, 1024), dtype=bool)
                grown[:self._mask_n] = self._mask[:self._mask_n]
                self._mask = grown
            if self.selected:
                sel = self.selected
                self._mask[self._mask_n:n] = [name in sel for name in self.items.since(self._mask_n)]
            self._mask_n = n
        return self._mask[np.asarray(keys, dtype=np.int64)]

    def prepare(self, w: WindowData, draws) -> Reservation:
        self._epoch(w.epoch)
        return self.q.prepare_with(w, self.bounder, self.selected_mask)

    def contribution(self, res: Reservation, admitted: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict]:
        ids, inc_c, inc_s = self.q.admitted_increments(res, admitted, self.bounder)
        return ids, inc_c, ({} if inc_s is None else {"sums": inc_s})

    def new_epoch(self) -> None:
        self.bounder.reset()

    def apply_outcome(self, info: dict | None, seq: int) -> None:
        self._epoch((int(seq) - 1) // self.q.horizon)
        if info:
            new = [k for k in info["new"] if k not in self.selected]
            self.selected.update(new)
            index = self.items.index
            ids = [i for i in map(index.get, new) if i is not None and i < self._mask_n]
            if ids:
                self._mask[ids] = True

    def state(self) -> dict:
        return {"bounder": self.bounder.state(), "sel_epoch": self.sel_epoch, "selected": sorted(self.selected)}

    def load_state(self, d: dict) -> None:
        self.bounder = RecordBounder.from_state(d["bounder"])
        self.sel_epoch, self.selected = int(d["sel_epoch"]), set(d["selected"])
        self._mask, self._mask_n = np.zeros(0, dtype=bool), 0


class GeoStageA(StageAHalf):
    """geo_locations, geo_knn, geo_convex_hull (Liang–Yi (CGP)): stateless; each located user reserves the query's
    fixed cost and, once admitted, contributes their bounded planar window location (folded into the region,
    summarised by the location rule — a function of their own events) and its order key, no user id. Nothing to
    settle, nothing back."""

    def contribution(self, res: Reservation, admitted: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict]:
        xy, order = self.q.admitted_points(res, admitted)
        z = np.zeros(0, dtype=np.int64)
        return z, z, {"points": xy, "order": order}


class AdaptiveStageA(StageAHalf):
    """range_counts, kde_point, knn_point (Liang–Yi (adaptive budgeting) Alg. 3 + PIE): the partition's per-user
    remaining budgets B_i and ledger charges C_i of the sequence (partition-local ids) — a copy of the query object
    that shares its configuration and holds its own arrays. At a registered window each located user reserves
    min(⌈r_i/c²⌉, P − C_i); the admitted users send their planar point, r_i, the cap P − C_i and an order key,
    with no id: the i-th point of the part is the partition's i-th admitted located user (its local index). The
    outcome brings back, per partition, each point's executed cost e_i (fixed point per unit², ≤ r_i): stage A
    settles min(⌈e_i/c²⌉, P − C_i) and updates B_i ← B_i − e_i, C_i ← C_i + that (Thm 4.4, reserve and settle)."""

    settles = True

    def __init__(self, query: WindowQuery) -> None:
        super().__init__(query)
        self.qa = copy.copy(query)  # the configuration, shared; the per-user arrays, this partition's own
        self.qa.remaining = np.zeros(0, dtype=np.int64)
        self.qa.charged = np.zeros(0, dtype=np.int64)

    def prepare(self, w: WindowData, draws) -> Reservation:
        return self.qa.prepare(w, draws)

    def contribution(self, res: Reservation, admitted: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict]:
        _, xy, r, cap, order = self.qa.admitted_inputs(res, admitted)
        z = np.zeros(0, dtype=np.int64)
        if not res.users.size:
            return z, z, {}
        return z, z, {"points": xy, "order": order, "point_ints": np.column_stack([r, cap]).astype(np.int64)}

    def settle_rows(self, info, partition, users, reserved):
        if info is None or str(partition) not in info.get("executed", {}):
            raise ValueError(f"{self.q.id}: the window's outcome has no executed costs for partition {partition}")
        e = np.asarray(info["executed"][str(partition)], dtype=np.int64)
        if e.size != users.size:
            raise ValueError(f"{self.q.id}: {e.size} executed costs for {users.size} admitted users of partition "
                             f"{partition}")
        charged = self.qa.ledger_cost(users, e)  # min(⌈e_i/c²⌉, P − C_i): what the coordinator computed
        self.qa._charge(users, e, charged)
        rows = np.zeros(reserved.shape, dtype=np.int64)
        rows[:, _CGP] = charged
        return rows

    def state(self) -> dict:
        return {"sequence": self.qa.state()}

    def load_state(self, d: dict) -> None:
        self.qa.load_state(d["sequence"])


class ThresholdStageA(StageAHalf):
    """threshold_count (Liang–Yi (adaptive budgeting) App. C, Alg. 9): stateless; at a registered window every
    user present reserves ρ, and the part carries the number of the partition's ADMITTED users with the item I_l
    in the window (|H| is a sum over partitions). Back: the cost row every admitted user settles to (the executed
    rounds, the same for all: Thm 4.4), as top_k's."""

    settles = True

    def prepare(self, w: WindowData, draws) -> Reservation:
        res = self.q.prepare(w, draws)
        item = self.q.item_of(w.seq)
        iid = None if item is None else self.items.index.get(item)
        if res.users.size and iid is not None:
            u, ids = w.item_pairs()
            res.private = (iid, unique_sorted(u[ids == iid]))  # the partition's users with the item
        return res

    def contribution(self, res: Reservation, admitted: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict]:
        z = np.zeros(0, dtype=np.int64)
        if res.private is None:
            return z, z, {}
        iid, holders = res.private
        n = int(np.count_nonzero(admitted[holders]))
        return (np.array([iid], dtype=np.int64), np.array([n], dtype=np.int64), {}) if n else (z, z, {})

    settle_rows = TopKStageA.settle_rows


class GridStageA(StageAHalf):
    """grid_means, both notions (per-cell means of users' values; the add/remove clipped sum and count, or the
    IoT-means paper's bounded estimators): the admitted users' usable rows cross — per row its user's order key,
    value, event time (float columns) and cell ((ix, iy), or the item's code in the part's dictionary) — with no
    user id: clipping, the tie-break and the estimators need each user's rows, grouped and ordered by key
    (``CellQuery._ordered``). add/remove: stateless, the reservation is the actual cost. Bounded: the partition's
    per-user spend and halts in the query's own notion (a copy of the query object with its own arrays): the local
    filter runs here after the admit (the users it halts now cross as a count, ``info``), and the outcome brings
    back the released cells (public: the release's cell keys), from which each user's ρ_cell per released cell is
    charged here — before the next admit, as the engine charges it within the close."""

    def __init__(self, query: WindowQuery) -> None:
        super().__init__(query)
        self.qa = copy.copy(query)  # the configuration, shared; the item table and per-user arrays, its own
        self.bounded = query.neighbours != "add_remove"
        if self.bounded:
            self.qa._spent = np.zeros(0, dtype=np.int64)
            self.qa._halted = np.zeros(0, dtype=bool)
        self.point_code_column = 0 if query.cells == "item" else None
        self.pending: dict[int, dict] = {}  # bounded: window → the kept (user, cell key) pairs awaiting the outcome
        self._seq = 0

    def bind(self, items: Names) -> None:
        super().bind(items)
        bind = getattr(self.qa, "bind_names", None)
        if bind is not None:
            bind(items)

    def prepare(self, w: WindowData, draws) -> Reservation:
        self._seq = w.seq
        return self.qa.prepare(w, draws)

    def contribution(self, res: Reservation, admitted: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict]:
        z = np.zeros(0, dtype=np.int64)
        if res.private is None:
            return z, z, {}
        info = None
        if self.bounded:
            p = res.private[0]
            keep, halted = self.qa.local_filter(res, admitted)
            info = {"halted": halted} if halted else None
            if keep.any():
                pairs = np.unique(np.column_stack([p.user[keep], p.cell[keep]]), axis=0)
                keys = self.qa._cell_keys(p.table, self.items)
                self.pending[self._seq] = {"users": pairs[:, 0].copy(), "cells": [keys[c] for c in pairs[:, 1]]}
        else:
            p = res.private
            keep = admitted[p.user]
        okey, cells, value, ts = self.qa.admitted_rows(p, keep)
        ints = np.asarray(cells, dtype=np.int64).reshape(okey.size, 2 if self.q.cells == "grid" else 1)
        out = {"points": np.column_stack([value, ts]), "order": okey, "point_ints": ints}
        if info:
            out["info"] = info
        return z, z, out

    def apply_outcome(self, info: dict | None, seq: int) -> None:
        pend = self.pending.pop(int(seq), None)
        if pend is None or not info:
            return
        released = set(info.get("released", ()))
        mask = np.fromiter((c in released for c in pend["cells"]), dtype=bool, count=len(pend["cells"]))
        users = np.asarray(pend["users"], dtype=np.int64)
        self.qa.charge_released(users, np.arange(users.size, dtype=np.int64), mask)

    def state(self) -> dict:
        if not self.bounded:
            return {}
        return {"bounded": self.qa.state(),
                "pending": {str(t): {"users": np.asarray(d["users"], dtype=np.int64), "cells": list(d["cells"])}
                            for t, d in self.pending.items()}}

    def load_state(self, d: dict) -> None:
        if self.bounded:
            self.qa.load_state(d["bounded"])
            self.pending = {int(t): {"users": np.asarray(v["users"], dtype=np.int64), "cells": list(v["cells"])}
                            for t, v in d["pending"].items()}


class EMDStageA(StageAHalf):
    """emd_linear and emd_frequency (Imola et al. (EMD)): stateless; a copy of the query whose item domain is bound
    to the partition's item table. The reservation is the exact cost: the names are bound before ``prepare`` (as
    in the engine), so every item resolves and a user's cost — Cost.emd(α) (Lemma 4.2), or the item-wise guarantee
    at their own m_i (Thm 4.4) for emd_frequency — is known at the admit; nothing settles, nothing comes back.
    emd_linear sends per admitted featured user q_f(D_i) (d float columns: Alg. 1 needs only these and n);
    emd_frequency the kept users' featured items in window order (domain row, the user's index among the part's
    kept users: Alg. 4 draws one report per item in turn and weights it 1/(n·m_i))."""

    def __init__(self, query: WindowQuery) -> None:
        super().__init__(query)
        self.qa = copy.copy(query)  # the configuration, shared; the item domain's binding, this partition's own
        self.qa.items = ItemDomain(query.items.names)

    def bind(self, items: Names) -> None:
        super().bind(items)
        self.qa.bind_names(items)

    def prepare(self, w: WindowData, draws) -> Reservation:
        res = self.qa.prepare(w, draws)
        if res.private is not None and (res.private[2] == _UNKNOWN).any():
            raise RuntimeError(f"{self.q.id}: an item id did not resolve at prepare (the names are bound first)")
        return res

    def contribution(self, res: Reservation, admitted: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict]:
        z = np.zeros(0, dtype=np.int64)
        if res.private is None:
            return z, z, {}
        if self.q.kind == "emd_linear":
            means, _ = self.qa.admitted_means(res, admitted)
            return z, z, {"points": means, "order": np.zeros(means.shape[0], dtype=np.uint64)}
        r, index, users, exact = self.qa.admitted_rows(res, admitted)
        keep = admitted[res.users]
        if not (np.array_equal(users, res.users[keep]) and np.array_equal(exact, res.costs[keep])):
            raise RuntimeError(f"{self.q.id}: the exact costs differ from the reservations (nothing settles here)")
        return z, z, {"points": np.zeros((r.size, 0)), "order": np.zeros(r.size, dtype=np.uint64),
                      "point_ints": np.column_stack([r, index]).astype(np.int64)}


_CGP = COMPONENTS.index("cgp_rho")
_GEO_KINDS = ("geo_locations", "geo_knn", "geo_convex_hull")
_ADAPTIVE_KINDS = ("range_counts", "kde_point", "knn_point")
_HALVES = {"window_histogram": HistogramStageA, "top_k": TopKStageA, "continual_counts": ContinualCountsStageA,
           "continual_sums": ContinualSumsStageA, **{k: GeoStageA for k in _GEO_KINDS},
           **{k: AdaptiveStageA for k in _ADAPTIVE_KINDS}, "threshold_count": ThresholdStageA,
           "grid_means": GridStageA, "emd_linear": EMDStageA, "emd_frequency": EMDStageA}


def stage_a_half(query: WindowQuery) -> StageAHalf:
    """A fresh stage-A half of ``query`` (one per input partition)."""
    check_staged([query])
    return _HALVES[query.kind](query)


def release_merged(query: WindowQuery, ids: np.ndarray, counts: np.ndarray, extra: dict, rng,
                   items: Names) -> tuple[QueryRelease, np.ndarray | None]:
    """The coordinator half's release of one window from the merged per-item arrays (sorted item ids of
    ``items``): (release, the actual cost row every admitted user settles to, or None: no settle)."""
    if query.kind == "continual_sums":
        return query.release_increments(ids, counts, extra.get("sums") if query.requires_value else None, rng,
                                        items)
    if query.kind in _GEO_KINDS:
        return query.release_points(extra.get("points", np.zeros((0, 2))),
                                    extra.get("order", np.zeros(0, dtype=np.uint64)), rng), None
    if query.kind == "threshold_count":
        return query.release_count(extra["seq"], int(np.asarray(counts).sum()), rng)
    if query.kind == "emd_linear":
        return query.release_means(extra.get("points", np.zeros((0, query.dim))), rng), None
    if query.kind == "emd_frequency":
        ints = extra.get("point_ints", np.zeros((0, 2), dtype=np.int64))
        index, n, at = np.empty(ints.shape[0], dtype=np.int64), 0, 0
        for _, k in extra.get("point_parts", []):  # each part numbers its users 0 … n_p − 1: offset them
            local = ints[at:at + k, 1]
            index[at:at + k] = local + n
            n += int(local.max()) + 1 if k else 0
            at += k
        return query.release_rows(ints[:, 0], index, n, rng), None
    if query.kind == "grid_means":
        pts = extra.get("points", np.zeros((0, 2)))
        ints = extra.get("point_ints", np.zeros((0, 2 if query.cells == "grid" else 1), dtype=np.int64))
        cells = ints if query.cells == "grid" else ints[:, 0]
        rows = (extra.get("order", np.zeros(0, dtype=np.uint64)), cells, pts[:, 0], pts[:, 1])
        if query.neighbours == "add_remove":
            return query.release_rows(*rows, rng, items), None
        return query.release_rows(*rows, rng, items, extra.get("info", {}).get("halted", 0))[0], None
    if query.kind in _ADAPTIVE_KINDS:
        ints = extra.get("point_ints", np.zeros((0, 2), dtype=np.int64))
        r, cap = ints[:, 0], ints[:, 1]
        rel, e_fixed, charged = query.release_window(extra["seq"], extra.get("points", np.zeros((0, 2))), r, cap,
                                                     extra.get("order", np.zeros(0, dtype=np.uint64)), rng)
        if query.query_index(extra["seq"]) is None:
            return rel, None
        n = r.size
        actual = np.zeros((n, N_COMPONENTS), dtype=np.int64)
        reserved = np.zeros((n, N_COMPONENTS), dtype=np.int64)
        actual[:, _CGP] = charged
        reserved[:, _CGP] = np.minimum(query.coords.canonical_fixed(r), cap) if n else 0
        executed, at = {}, 0
        for p, k in extra.get("point_parts", []):
            executed[str(p)] = [int(x) for x in e_fixed[at:at + k]]
            at += k
        return rel, {"actual": actual, "reserved": reserved, "executed": executed}
    return query.release_counts(ids, counts, rng, items)


def outcome_info(query: WindowQuery, rel: QueryRelease, row: np.ndarray | None) -> dict | None:
    """What stage A needs of this query's release of window t (in the window's outcome): top_k the PWYG counter
    after the release, the items returned n and the actual cost row of each admitted user (None: nothing to
    settle, the counter was exhausted before the call); continual_sums the keys selected at t (``new_keys`` of the
    published release: stage A charges δ_key for a key first touched while unselected); None for the kinds that
    need nothing back, and when nothing was selected."""
    if query.kind == "continual_sums":
        new = rel.values.get("new_keys") or []
        return {"new": list(new)} if new else None
    if query.kind == "grid_means":  # bounded: the released cells, each costing its users ρ_cell in the query's notion
        cells = list(rel.values.get("cells", {})) if query.neighbours != "add_remove" else []
        return {"released": cells} if cells else None
    if query.kind in _ADAPTIVE_KINDS:
        return {"executed": row["executed"]} if isinstance(row, dict) else None
    if query.kind == "threshold_count":
        return None if row is None else {"actual": [int(x) for x in row]}
    if query.kind != "top_k":
        return None
    return {"pwyg": query.pwyg.state(), "n": int(rel.meta.get("items_returned", 0)),
            "actual": None if row is None else [int(x) for x in row]}


def point_code_column(query: WindowQuery) -> int | None:
    """The column of the query's per-point integers that holds item codes (:attr:`StageAHalf.point_code_column`)."""
    if query.kind == "grid_means" and query.cells == "item":
        return 0
    return None
