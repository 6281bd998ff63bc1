"""Stage A's share of a window close: bounding priorities and admission per input partition (docs/DECISIONS.md,
"Scale-out: stage A admits").

A user's events are all on one input partition (record keys are the user). What a window close decides per user —
the bounded contributions, the reservation, admission through the filter — is therefore decided per (window,
partition): nothing of another partition enters it. This module holds the two pieces that make that true:

* :class:`BoundingDraws` — what a query's ``prepare`` gets instead of the engine's noise generator. Random bounding
  (``delta0_subset``) asks it for the order of the (user, item) pairs of users over Δ0: each pair's priority is a
  keyed hash of (query id, window, user NAME, item NAME) under the bounding root key Kb
  (:func:`streamdp.noise.generator.bounding_key`, one-way from the engine generator's key; :func:`pair_priority`).
  So a user's kept subset, and their reservation, are a function of (Kb, query, window, the user's own events):
  independent of the partition, of other users, of interned ids and of which worker bounds them. BoundingDraws
  holds Kb, never the noise generator.
* :func:`admit_partition` — one partition's users of one window admitted in their own batch, under the partition's
  scope (:func:`partition_scope`) and replay digest, giving an :class:`AdmittedPart`: the message a stage-A worker
  sends the coordinator (here: the admission outcome; the per-kind contributions of the DECISIONS table are the next
  step). The coordinator's half is :mod:`streamdp.engine.coordinator`.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass

import numpy as np
import orjson

from streamdp.accounting.cost import N_COMPONENTS
from streamdp.arrays import unique_sorted
from streamdp.engine.query import Names
from streamdp.filter.store import BudgetStore


def partition_scope(scope: str, partition: int) -> str:
    """The budget-store scope of one input partition's admissions: the engine's scope and ``/p<partition>``.

    One scope per partition because the store trusts, per (scope, seq), only the first replay digest it saw
    (streamdp/filter/store.py, "Replay digests"): partitions admitting window ``seq`` in one scope would carry
    different digests, and a replay of every partition but the first would lose the stale-replay answer (its users,
    admitted at a later window since, charged again)."""
    return f"{scope}/p{int(partition)}"


PRIORITY_PERSON = b"streamdp-prio"
ORDER_PERSON = b"streamdp-order"


def _lp(b: bytes) -> bytes:
    """``b`` preceded by its length (4 bytes little-endian): no two messages differ only in where a part ends."""
    return len(b).to_bytes(4, "little") + b


def _priority_prefix(key: bytes, query_id: str, seq: int):
    h = hashlib.blake2b(key=key, digest_size=8, person=PRIORITY_PERSON)
    h.update(_lp(query_id.encode("utf-8")) + _lp(int(seq).to_bytes(8, "little", signed=True)))
    return h


def _to_unit(digest: bytes) -> float:
    return (int.from_bytes(digest, "big") >> 11) / 2.0 ** 53


def pair_priority(key: bytes, query_id: str, seq: int, user: str, item: str) -> float:
    """The bounding priority of one (user, item) pair in [0, 1): keyed BLAKE2b (key = Kb, 8-byte digest,
    personalisation ``b"streamdp-prio"``) over the length-prefixed parts query id (UTF-8), window seq (8 bytes
    little-endian, signed), user name (UTF-8), item name (UTF-8) — each as 4-byte little-endian length then bytes —
    and the digest's top 53 bits (big-endian) / 2⁵³. Under a secret Kb (a PRF) the priorities of distinct pairs are
    i.i.d. uniform, so keeping a user's Δ0 smallest keeps a uniform random Δ0-subset of their items."""
    h = _priority_prefix(key, query_id, seq)
    h.update(_lp(user.encode("utf-8")) + _lp(item.encode("utf-8")))
    return _to_unit(h.digest())


class UserPartitions:
    """Which input partition owns each user of one window: ``owners[ids]`` → partition (−1: no events in the
    window). Built from the window's rows, one partition after the other; costs O(window's users), not O(every
    interned user)."""

    def __init__(self, user_ids: np.ndarray, rows: list[tuple[int, int]], present: np.ndarray | None = None) -> None:
        """``present``: ``unique_sorted(user_ids)`` when the caller has it (one partition: nothing else to sort)."""
        user_ids = np.asarray(user_ids, dtype=np.int64)
        if len(rows) <= 1:
            self.users = unique_sorted(user_ids) if present is None else present
            self.parts = np.full(self.users.size, rows[0][0] if rows else -1, dtype=np.int64)
            return
        # rows come one partition after the other, so a user's first row is in their lowest partition. A user with
        # events on two partitions in one window: not from a user-keyed topic whose partition count stayed put
        # (key_mismatch), but possible after the input topic was given more partitions, and in the embedded
        # pipeline's tests. The lowest partition owns them (their whole bounding and admission); a worker holding
        # only one of the partitions cannot decide for them (DECISIONS)
        self.users, first = np.unique(user_ids, return_index=True)
        ends = np.cumsum([n for _, n in rows])
        self.parts = np.asarray([p for p, _ in rows], dtype=np.int64)[np.searchsorted(ends, first, side="right")]

    def __getitem__(self, ids) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)
        if self.users.size == 0:
            return np.full(ids.shape, -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self.users, ids), self.users.size - 1)
        return np.where(self.users[pos] == ids, self.parts[pos], -1)


class BoundingDraws:
    """Bounding randomness for one window close (see the module doc): Kb (bytes), the window seq and the name
    tables, nothing else — not the noise generator, not the partitions. :meth:`for_query` gives the view a query's
    ``prepare`` gets; it has no other sampler, so a query that draws anything else in ``prepare`` fails loudly
    instead of making its bounding depend on something other than the user's own events."""

    def __init__(self, key: bytes, seq: int, users: Names, items: Names, query_id: str = "") -> None:
        if not isinstance(key, bytes) or len(key) != 32:
            raise TypeError("BoundingDraws needs the 32-byte bounding key (streamdp.noise.generator.bounding_key)")
        self.key, self.seq, self._users, self._items = key, int(seq), users, items
        self.query_id = query_id

    def for_query(self, query_id: str) -> "BoundingDraws":
        return BoundingDraws(self.key, self.seq, self._users, self._items, query_id)

    def pair_priorities(self, users: np.ndarray, items: np.ndarray) -> np.ndarray:
        """Order keys of (user, item) pairs (distinct pairs, sorted by user): within each user, ascending keys follow
        ascending (:func:`pair_priority`, item name) — the name breaks ties, which have probability ~ n²/2⁵⁴. Hashes
        one pair at a time, so it is meant for the pairs of users over Δ0 only (``delta0_subset`` passes just those)."""
        users = np.asarray(users, dtype=np.int64)
        out = np.empty(users.size, dtype=np.float64)
        if users.size == 0:
            return out
        items = np.asarray(items, dtype=np.int64)
        item_names = self._items.name_array(items)
        base = _priority_prefix(self.key, self.query_id, self.seq)
        prio = np.empty(users.size, dtype=np.float64)
        if (np.diff(users) < 0).any():
            raise ValueError("pair_priorities: pairs must be sorted by user")
        distinct, first = np.unique(users, return_index=True)
        ends = np.append(first[1:], users.size)
        for name, lo, hi in zip(self._users.names(distinct), first.tolist(), ends.tolist()):
            hu = base.copy()
            hu.update(_lp(name.encode("utf-8")))
            for j in range(lo, hi):
                h = hu.copy()
                h.update(_lp(item_names[j].encode("utf-8")))
                prio[j] = _to_unit(h.digest())
        name_rank = np.empty(users.size, dtype=np.int64)
        name_rank[np.argsort(item_names, kind="stable")] = np.arange(users.size)
        out[np.lexsort((name_rank, prio, users))] = np.arange(users.size, dtype=np.float64)
        return out

    def user_order_keys(self, users: np.ndarray) -> np.ndarray:
        """:func:`user_order_key` of each user id (uint64): the canonical order in which a query hands its users'
        values to a mechanism that consumes them in order (the geo kinds) — a function of (Kb, query, window, the
        user's name), not of interned ids (which follow other users' data) nor of partitions. One hash per user."""
        users = np.asarray(users, dtype=np.int64)
        if users.size == 0:
            return np.zeros(0, dtype=np.uint64)
        q, seq, key = self.query_id, self.seq, self.key
        return np.fromiter((user_order_key(key, q, seq, name) for name in self._users.names(users)),
                           dtype=np.uint64, count=users.size)


def user_order_key(key: bytes, query_id: str, seq: int, user: str) -> int:
    """The order key of one user's value in window ``seq`` of query ``query_id``: keyed BLAKE2b (key = Kb, 8-byte
    digest, personalisation ``b"streamdp-order"``) over the length-prefixed parts query id (UTF-8), window seq (8
    bytes little-endian, signed) and user name (UTF-8), read as a big-endian unsigned 64-bit integer. Under a
    secret Kb the keys of distinct users are i.i.d. uniform, so sorting by them is a uniformly random permutation,
    independent of the values sorted and of which worker computes it (docs/DECISIONS.md, geo kinds)."""
    h = hashlib.blake2b(key=key, digest_size=8, person=ORDER_PERSON)
    h.update(_lp(query_id.encode("utf-8")) + _lp(int(seq).to_bytes(8, "little", signed=True))
             + _lp(user.encode("utf-8")))
    return int.from_bytes(h.digest(), "big")


@dataclass
class AdmittedPart:
    """One partition's admission of one window: what stage A tells the coordinator about its users.

    ``users``: the partition's users with data or a reservation in the window (engine ids, sorted); ``costs``: their
    reservations summed over the queries (fixed point, ``(n, N_COMPONENTS)``); ``admitted``: the store's answer. The
    byte form (:meth:`to_bytes`) carries user NAMES (ids are local to a process)."""

    VERSION = 1

    seq: int
    partition: int
    scope: str
    digest: str
    users: np.ndarray
    costs: np.ndarray
    admitted: np.ndarray

    def to_bytes(self, table: Names) -> bytes:
        """``b"SDPA"``, version, then a JSON header (seq, partition, scope, digest, user names, the cost components
        used) and the used cost columns (int64 little-endian) and the admitted bits (packed)."""
        used = np.flatnonzero(self.costs.any(axis=0)) if self.costs.size else np.zeros(0, dtype=np.int64)
        head = orjson.dumps({"seq": self.seq, "partition": self.partition, "scope": self.scope,
                             "digest": self.digest, "users": table.names(self.users), "used": used.tolist()})
        cols = np.ascontiguousarray(self.costs[:, used].T, dtype="<i8").tobytes()
        bits = np.packbits(self.admitted.astype(np.uint8)).tobytes()
        return b"SDPA" + struct.pack("<HI", self.VERSION, len(head)) + head + cols + bits

    @classmethod
    def from_bytes(cls, data: bytes, table: Names) -> "AdmittedPart":
        if data[:4] != b"SDPA":
            raise ValueError("not an admitted-part message")
        version, n_head = struct.unpack_from("<HI", data, 4)
        if version != cls.VERSION:
            raise ValueError(f"admitted-part message version {version}, this build reads {cls.VERSION}")
        at = 10 + n_head
        head = orjson.loads(data[10:at])
        n, used = len(head["users"]), head["used"]
        costs = np.zeros((n, N_COMPONENTS), dtype=np.int64)
        if used:
            cols = np.frombuffer(data, dtype="<i8", count=n * len(used), offset=at).reshape(len(used), n)
            costs[:, used] = cols.T
        at += 8 * n * len(used)
        admitted = np.unpackbits(np.frombuffer(data, dtype=np.uint8, offset=at), count=n).astype(bool)
        return cls(seq=head["seq"], partition=head["partition"], scope=head["scope"], digest=head["digest"],
                   users=table.ids(head["users"]), costs=costs, admitted=admitted)


def admit_partition(store: BudgetStore, scope: str, seq: int, partition: int, users: np.ndarray,
                    costs: np.ndarray, table: Names, digest: str) -> AdmittedPart:
    """Admit one partition's users of window ``seq`` in one atomic batch ``(partition_scope(scope, partition),
    seq)`` with the partition's replay digest (per-user exactly once: a repeat of this call, or of any cut of it,
    charges nothing — streamdp/filter/store.py)."""
    sc = partition_scope(scope, partition)
    admit_ids = getattr(store, "admit_ids", None)
    if admit_ids is not None:  # the store sees the engine's ids and name table (BudgetStore.admit_ids)
        mask = admit_ids(sc, seq, users, costs, table, digest=digest)
    else:
        mask = store.admit(sc, seq, table.names(users), costs, digest=digest)
    return AdmittedPart(seq=int(seq), partition=int(partition), scope=sc, digest=digest, users=users, costs=costs,
                        admitted=np.asarray(mask, dtype=bool))
