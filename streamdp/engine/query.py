"""The interface between the release engine and one query kind.

At every window close the engine hands each query the window's (interned, validated) events. A query then

1. :meth:`WindowQuery.prepare` — bounds the data and states, for every user with data in the window, the
   (worst-case) cost it would charge them. The cost depends only on public configuration, earlier releases and
   the user's own bounded data — never on this release's noise (DESIGN.md §3).
2. The engine sums the costs over all queries per user and admits users through the filter in ONE atomic batch;
   users that do not fit are halted and disappear from every query's input.
3. :meth:`WindowQuery.release` — computes the release from admitted users' data only, and returns the *actual*
   cost per admitted user (≤ the reservation; the engine settles the difference: reserve/settle).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from streamdp.accounting.cost import N_COMPONENTS


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

    def new_epoch(self) -> None:
        """Called before the first window of every epoch after the first."""

    @abc.abstractmethod
    def state(self) -> dict: ...

    @abc.abstractmethod
    def load_state(self, d: dict) -> None: ...

    def describe(self) -> dict:
        return {"id": self.id, "kind": self.kind, "notion": self.notion}


class Names:
    """Interned names (users and items) → ids and back, shared by the engine and its queries."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self._list: list[str] = []

    def ids(self, names: list[str]) -> np.ndarray:
        idx = self.index
        out = np.fromiter((idx.setdefault(s, len(idx)) for s in names), dtype=np.int64, count=len(names))
        return out

    def names(self, ids) -> list[str]:
        if len(self._list) != len(self.index):
            self._list = list(self.index)
        lst = self._list
        return [lst[i] for i in np.asarray(ids, dtype=np.int64).tolist()]

    def __len__(self) -> int:
        return len(self.index)

    def state(self) -> list[str]:
        return list(self.index)

    @classmethod
    def from_state(cls, names: list[str]) -> "Names":
        n = cls()
        n.index = {s: i for i, s in enumerate(names)}
        return n
