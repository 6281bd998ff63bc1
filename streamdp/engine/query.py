"""The interface between the release engine and one query kind.

At every window close the engine hands each query the window's (interned, validated) events. A query then

1. :meth:`WindowQuery.prepare` — bounds the data and states, for every user with data in the window, the
   (worst-case) cost it would charge them. The cost depends only on public configuration, earlier releases and
   the user's own bounded data — never on this release's noise (docs/contract.md §3).
2. The engine sums the costs over all queries per user and admits users through the filter in one atomic batch per
   input partition (a user's events are all on one partition; ``prepare`` gets keyed per-pair bounding priorities,
   :class:`streamdp.engine.stage_a.BoundingDraws`, so a user's reservation depends on their own data alone);
   users that do not fit are halted and disappear from every query's input.
3. :meth:`WindowQuery.release` — computes the release from admitted users' data only, and returns the *actual*
   cost per admitted user (≤ the reservation; the engine settles the difference: reserve/settle).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import numpy as np

from streamdp.accounting.cost import N_COMPONENTS, Cost


@dataclass
class WindowData:
    seq: int  # global window number (1, 2, …) — the filter's batch sequence
    epoch: int  # 0-based epoch (continual counts restart every `horizon` windows)
    t: int  # window number within the epoch, 1..horizon
    start: float
    end: float
    user_ids: np.ndarray  # int64 per event (interned)
    ts: np.ndarray  # float64 per event
    item_offsets: np.ndarray  # int64, CSR offsets into item_ids (len = n_events + 1)
    item_ids: np.ndarray  # int64 (interned)
    value: np.ndarray  # float64 per event (NaN = absent)
    loc: np.ndarray  # float64 (n_events, 2) (NaN = absent)
    closed_by: str = "watermark"  # how the window closed: "watermark" or "end_of_input" (published with it)

    @property
    def n_events(self) -> int:
        return int(self.user_ids.size)

    def item_pairs(self) -> tuple[np.ndarray, np.ndarray]:
        """(user id, item id) for every item occurrence."""
        per_event = np.diff(self.item_offsets)
        return np.repeat(self.user_ids, per_event), self.item_ids


@dataclass
class Reservation:
    users: np.ndarray  # int64 unique user ids with data for this query in this window
    costs: np.ndarray  # int64 (n, N_COMPONENTS) fixed-point worst-case costs
    private: Any = None  # the query's prepared data, handed back to release()

    @staticmethod
    def empty() -> "Reservation":
        return Reservation(np.zeros(0, dtype=np.int64), np.zeros((0, N_COMPONENTS), dtype=np.int64))


@dataclass
class QueryRelease:
    values: dict  # JSON-able released values (post-processed noise only)
    users: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # admitted users charged
    actual: np.ndarray | None = None  # int64 (n, N_COMPONENTS) actual costs; None = equal to the reservation
    meta: dict = field(default_factory=dict)  # ledger extras (e.g. PWYG counter)


class WindowQuery(abc.ABC):
    """One configured query. Subclasses set ``kind`` and ``notion`` and implement the three steps."""

    kind: str = ""
    notion: str = "zcdp"

    def __init__(self, query_id: str) -> None:
        self.id = query_id

    @abc.abstractmethod
    def prepare(self, w: WindowData, rng: np.random.Generator) -> Reservation: ...

    @abc.abstractmethod
    def release(self, w: WindowData, res: Reservation, admitted: np.ndarray, rng: np.random.Generator,
                items: "Names") -> QueryRelease:
        """``admitted`` is a bool array indexed by user id (True = admitted in this window)."""

    #: what :meth:`public_cost` bounds (shown in the published record)
    public_cost_basis: str = "per user, this release"

    def public_cost(self, rel: "QueryRelease") -> "Cost | None":
        """The most any single user can be charged for this release, computed from PUBLIC information only
        (configuration and released outputs) — this is what the published record shows. The realised costs
        (max individual cost, number of users charged) depend on private data and stay in the ledger."""
        return None

    def new_epoch(self) -> None:
        """Called before the first window of every epoch after the first."""

    @abc.abstractmethod
    def state(self) -> dict: ...

    @abc.abstractmethod
    def load_state(self, d: dict) -> None: ...

    def describe(self) -> dict:
        return {"id": self.id, "kind": self.kind, "notion": self.notion}

    #: the validated ``[[query]]`` table (kind and every parameter, defaults filled in), set by the config loader
    config_params: dict | None = None

    def parameters(self) -> dict:
        """The parameters this query's costs and state are built under (``release_parameters.py``): the validated
        configuration table, else (a query built in code) :meth:`describe`."""
        return dict(self.config_params) if self.config_params is not None else self.describe()


_VECTOR_MIN = 256  # lookups of fewer names go through the dict one by one
# ... and so do lookups into fewer interned names than this: the dict's lookups stay in cache there and beat the
# accelerator (measured 2026-12-02, 10³–10⁵ fresh names per lookup: 20k interned, dict 125 ns/name vs accelerator
# 195–230; 100k, even, 240–260 both; 10⁶, dict 760–810 vs accelerator 320–590)
_ACCEL_MIN_INTERNED = 1 << 17
_name_hash = hash  # the accelerator's hash (tests substitute a colliding one: collisions only cost speed)


class Names:
    """Interned names (users and items) → ids and back, shared by the engine and its queries.

    Ids are dense (0, 1, …) and assigned in order of first appearance; ``index`` maps name → id and ``_list`` id →
    name. ``index`` is the truth. Large lookups go through a vectorised accelerator first — the sorted 64-bit
    hashes of the interned names with their ids, and the names in an object array — and every hit is verified by
    comparing the names themselves, so a hash collision can only send a name to the dict, never to a wrong id.
    (A Python dict lookup costs several dependent cache misses per name once the names outgrow the caches; the
    accelerator's binary searches, gathers and comparisons run over numpy arrays, measured 2–2.5× faster at 10⁶
    interned names. Below ``_ACCEL_MIN_INTERNED`` interned names the dict is faster and answers alone.)"""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self._list: list[str] = []
        self._reset_accelerator()

    def _reset_accelerator(self) -> None:
        z = np.zeros(0, dtype=np.int64)
        self._acc_n = 0  # ids [0, _acc_n) are in the accelerator
        self._main_keys, self._main_ids, self._recent_keys, self._recent_ids = z, z, z, z
        self._arr = np.empty(0, dtype=object)  # id → name

    def _sync(self) -> None:
        """Bring ``_list`` and the accelerator up to ``index``."""
        if len(self._list) != len(self.index):
            self._list = list(self.index)
            self._reset_accelerator()
        n = len(self._list)
        if self._acc_n == n:
            return
        new = self._list[self._acc_n:n]
        if self._arr.size < n:
            arr = np.empty(max(n, 2 * self._arr.size, 1024), dtype=object)
            arr[:self._acc_n] = self._arr[:self._acc_n]
            self._arr = arr
        self._arr[self._acc_n:n] = new
        h = np.fromiter(map(_name_hash, new), dtype=np.int64, count=len(new))
        order = np.argsort(h, kind="stable")
        h, ids = h[order], order.astype(np.int64) + self._acc_n
        at = np.searchsorted(self._recent_keys, h)
        self._recent_keys = np.insert(self._recent_keys, at, h)
        self._recent_ids = np.insert(self._recent_ids, at, ids)
        if self._recent_keys.size > max(1 << 14, self._main_keys.size // 4):  # merge: amortised O(1) per name
            at = np.searchsorted(self._main_keys, self._recent_keys)
            self._main_keys = np.insert(self._main_keys, at, self._recent_keys)
            self._main_ids = np.insert(self._main_ids, at, self._recent_ids)
            self._recent_keys = self._recent_ids = np.zeros(0, dtype=np.int64)
        self._acc_n = n

    def _lookup(self, names: list) -> np.ndarray:
        """Ids of ``names`` (int64), −1 where not interned. No side effect on the ids."""
        m = len(names)
        if m < _VECTOR_MIN or len(self.index) < _ACCEL_MIN_INTERNED:
            got = list(map(self.index.get, names))
            if None in got:
                got = [-1 if g is None else g for g in got]
            return np.array(got, dtype=np.int64) if m else np.zeros(0, dtype=np.int64)
        self._sync()
        qh = np.fromiter(map(_name_hash, names), dtype=np.int64, count=m)
        order = np.argsort(qh)  # sorted queries: the binary searches walk the table in order
        qs = qh[order]
        q = np.empty(m, dtype=object)
        q[:] = names
        q = q[order]
        out = np.full(m, -1, dtype=np.int64)
        for keys, ids in ((self._main_keys, self._main_ids), (self._recent_keys, self._recent_ids)):
            if keys.size == 0:
                continue
            pos = np.searchsorted(keys, qs)
            np.minimum(pos, keys.size - 1, out=pos)
            hit = np.flatnonzero(keys[pos] == qs)
            cand = ids[pos[hit]]
            same = (self._arr[cand] == q[hit]).astype(bool)  # verify: the name itself, not only its hash
            out[order[hit[same]]] = cand[same]
        miss = np.flatnonzero(out < 0)
        if miss.size:  # new names, or a hash shared by two names: the dict decides
            get = self.index.get
            for k in miss.tolist():
                i = get(names[k])
                if i is not None:
                    out[k] = i
        return out

    def _intern(self, names, out: np.ndarray, positions: list) -> None:
        """Give the names at ``positions`` (in that order) their ids in ``out``, creating ids for new names."""
        idx, lst = self.index, self._list
        synced = len(lst) == len(idx)
        for k in positions:
            s = names[k]
            i = idx.get(s)
            if i is None:
                i = idx[s] = len(idx)
                if synced:
                    lst.append(s)
            out[k] = i

    def ids(self, names: list[str]) -> np.ndarray:
        """Ids of ``names``; unknown names get new ids in order of appearance."""
        out = self._lookup(names)
        miss = np.flatnonzero(out < 0)
        if miss.size:
            self._intern(names, out, miss.tolist())
        return out

    def ids_coded(self, dictionary: list[str], codes: np.ndarray) -> np.ndarray:
        """Ids of ``dictionary[codes]`` with one lookup per dictionary entry (per DISTINCT name when the entries
        are distinct; repeated entries are allowed). Same result and same new ids as
        ``ids([dictionary[c] for c in codes])``; dictionary entries that ``codes`` does not use are not interned."""
        codes = np.asarray(codes, dtype=np.int64)
        table = self._lookup(dictionary)
        unknown = table < 0
        if unknown.any():
            occ = np.flatnonzero(unknown[codes])  # occurrences of names not yet interned
            if occ.size:
                uc, first = np.unique(codes[occ], return_index=True)
                self._intern(dictionary, table, uc[np.argsort(first, kind="stable")].tolist())
        return table[codes]

    def names(self, ids) -> list[str]:
        if len(self._list) != len(self.index):
            self._list = list(self.index)
            self._reset_accelerator()
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size == 0:
            return []
        lst = self._list
        if ids.size == 1:
            return [lst[int(ids[0])]]
        return list(itemgetter(*ids.tolist())(lst))

    def name_array(self, ids) -> np.ndarray:
        """The names of ``ids`` as an object array: what a mechanism that breaks ties by item gets as its item ids.
        An interned id is the order in which names first appeared in the stream — before admission, so it depends
        on other users' data, refused users' included; a tie broken by id would publish that (review of
        2026-11-23). Names are data-independent keys (every worker orders them alike)."""
        out = np.empty(len(ids), dtype=object)
        out[:] = self.names(ids)
        return out

    def since(self, n: int) -> list[str]:
        """The names of ids ``n, n + 1, …`` (interned after the first ``n``)."""
        if len(self._list) != len(self.index):
            self._list = list(self.index)
            self._reset_accelerator()
        return self._list[n:]

    def __len__(self) -> int:
        return len(self.index)

    def state(self) -> list[str]:
        return list(self.index)

    @classmethod
    def from_state(cls, names: list[str]) -> "Names":
        n = cls()
        n.index = {s: i for i, s in enumerate(names)}
        n._list = list(names)
        return n
