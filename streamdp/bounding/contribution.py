"""User-level contribution bounding for continual counts (docs/contract.md §3, "Continual counts, user level").

* Per window a user adds at most Δ0 **distinct** items; a user with more keeps a uniform random subset of size Δ0,
  drawn from the secure generator (the choice depends only on that user's own data).
* Over the horizon (one epoch of the tree) a user adds to any one item at most C times (default C = 1: counts of
  distinct users per item). A (user, item) pair already at C contributes nothing (and costs nothing).
* A user's **first** admitted contribution to an item in the epoch is the one that costs (ρ_item, δ_item); later
  ones (up to C) are free — the node sums a user touches have squared ℓ2 norm ≤ C² per level.

State: the per-(user, item) counters of the current epoch as a sorted int64 key array (user_id·2³² + item_id) with a
parallel uint16 count array — vectorised lookups with ``np.searchsorted``, merged once per window. ``commit`` must
be called with the *admitted* pairs only, after the filter has answered (``commit_bounded`` reuses ``bound``'s
search). The snapshot is the epoch's commit log instead — the keys of every commit, in order (a key's count is how
often it occurs) — an :class:`~streamdp.engine.append_log.AppendLog`: a checkpoint appends one window's keys
rather than rewriting every counter.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streamdp.arrays import unique_sorted
from streamdp.engine.append_log import AppendLog

_SHIFT = np.int64(32)


def pair_keys(user_ids: np.ndarray, item_ids: np.ndarray) -> np.ndarray:
    return (np.asarray(user_ids, dtype=np.int64) << _SHIFT) | np.asarray(item_ids, dtype=np.int64)


def delta0_subset(users: np.ndarray, delta0: int, rng, items: np.ndarray | None = None) -> np.ndarray | None:
    """At most Δ0 distinct items per user (docs/contract.md §3): ``users`` holds the user of each distinct (user, item)
    pair, sorted by user; a user with more than Δ0 pairs keeps a uniform random subset of Δ0 (random priority, the
    Δ0 smallest kept). Returns the keep mask, or None when no user is over Δ0 (then nothing is drawn).

    ``rng``: a numpy generator (one draw per pair, in key order), or the engine's bounding priorities
    (:class:`streamdp.engine.stage_a.BoundingDraws`, which has ``pair_priorities``): then only the pairs of users over
    Δ0 are ranked, by keyed hashes of (query, window, user name, item name), so that a user's subset depends on their
    own pairs alone; ``items`` (the pairs' item ids) is required with it."""
    if users.size == 0:
        return None
    starts = np.flatnonzero(np.concatenate(([True], users[1:] != users[:-1])))
    counts = np.diff(np.append(starts, users.size))
    over = counts > delta0
    if not over.any():
        return None
    # ranks matter only within users over Δ0 (the others keep everything): sort just their pairs, by user then
    # priority (lexsort is stable: the same ranks as sorting all pairs)
    sub = np.flatnonzero(np.repeat(over, counts))
    sub_counts = counts[over]
    sub_starts = np.concatenate(([0], np.cumsum(sub_counts)[:-1]))
    pair_priorities = getattr(rng, "pair_priorities", None)
    if pair_priorities is not None:
        if items is None:
            raise ValueError("delta0_subset: keyed bounding priorities need the pairs' items")
        prio_sub = pair_priorities(users[sub], np.asarray(items, dtype=np.int64)[sub])
    else:
        prio_sub = rng.random(users.size)[sub]  # one draw per pair, in key order
    order = np.lexsort((prio_sub, users[sub]))
    rank = np.empty(sub.size, dtype=np.int64)
    rank[order] = np.arange(sub.size) - np.repeat(sub_starts, sub_counts)
    keep = np.ones(users.size, dtype=bool)
    keep[sub] = rank < delta0
    return keep


@dataclass
class BoundedWindow:
    """The bounded (user, item) pairs of one window, before admission."""

    user_ids: np.ndarray  # int64, one row per kept (user, item) pair
    item_ids: np.ndarray  # int64
    first: np.ndarray  # bool: the user's first contribution to this item in the epoch (the costly one)
    dropped_pairs: int  # pairs removed by the Δ0 subset or the C cap
    # where the kept pairs sit in the epoch counters as bound() found them (commit_bounded reuses the search)
    keys: np.ndarray | None = None  # int64 sorted pair keys of the kept pairs
    pos: np.ndarray | None = None  # int64 insertion positions in the counters (None: counters were empty)
    hit: np.ndarray | None = None  # bool: the pair is in the counters
    version: object = None  # the counters' version at bound() time


class ContributionBounder:
    def __init__(self, max_items_per_window: int, max_per_item: int = 1) -> None:
        if max_items_per_window < 1:
            raise ValueError("max_items_per_window (Δ0) must be ≥ 1")
        if not (1 <= max_per_item <= 65535):
            raise ValueError("max_per_item (C) must be in 1..65535")
        self.delta0 = int(max_items_per_window)
        self.cap = int(max_per_item)
        self._log: list[np.ndarray] = []  # the keys of each commit (sorted, distinct), in commit order
        self._set(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint16), ones=True)

    def _set(self, keys: np.ndarray, counts: np.ndarray, ones: bool | None = None) -> None:
        self._keys, self._counts = keys, counts
        # every count is 1 (always so with C = 1): a merge then needs no gather of the old counts
        self._ones = bool((counts == 1).all()) if ones is None else ones
        self._version = object()  # a new token at every change of the counters (BoundedWindow.version)

    def reset(self) -> None:
        """A new epoch: counters restart with the tree."""
        self._log = []
        self._set(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint16), ones=True)

    def _find(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(insertion position, present) of the sorted ``keys`` in the counters (non-empty)."""
        pos = np.searchsorted(self._keys, keys)
        hit = self._keys[np.minimum(pos, self._keys.size - 1)] == keys
        return pos, hit

    def bound(self, user_ids: np.ndarray, item_ids: np.ndarray, rng: np.random.Generator) -> BoundedWindow:
        """Bound one window's raw (user, item) occurrences (duplicates allowed)."""
        keys = unique_sorted(pair_keys(user_ids, item_ids))  # distinct pairs, sorted by user then item
        n_raw = keys.size
        if self._keys.size:
            pos, hit = self._find(keys)
            if self._ones:  # every stored count is 1: the prior count is the hit itself
                if self.cap == 1:  # ... and every hit is at C: the live pairs are the misses
                    live = ~hit
                    keys, pos = keys[live], pos[live]
                    prior, hit = np.zeros(keys.size, dtype=np.int64), np.zeros(keys.size, dtype=bool)
                else:
                    prior = hit.astype(np.int64)  # 1 < C: every pair is live
            else:
                prior = np.zeros(keys.size, dtype=np.int64)
                prior[hit] = self._counts[pos[hit]]
                live = prior < self.cap
                if not live.all():
                    keys, prior, pos, hit = keys[live], prior[live], pos[live], hit[live]
        else:  # empty counters (the first window of an epoch): nothing to look up
            pos = hit = None
            prior = np.zeros(keys.size, dtype=np.int64)
        users = keys >> _SHIFT
        keep = delta0_subset(users, self.delta0, rng, keys & np.int64(0xFFFFFFFF))
        if keep is not None:
            keys, prior, users = keys[keep], prior[keep], users[keep]
            if pos is not None:
                pos, hit = pos[keep], hit[keep]
        items = keys & np.int64(0xFFFFFFFF)
        return BoundedWindow(user_ids=users, item_ids=items, first=prior == 0, dropped_pairs=int(n_raw - keys.size),
                             keys=keys, pos=pos, hit=hit, version=self._version)

    def commit(self, user_ids: np.ndarray, item_ids: np.ndarray) -> None:
        """Record admitted contributions (distinct pairs) in the epoch counters."""
        keys = unique_sorted(pair_keys(user_ids, item_ids))
        if keys.size == 0:
            return
        self._log.append(keys)
        if self._keys.size == 0:
            self._set(keys, np.ones(keys.size, dtype=np.uint16), ones=True)
            return
        pos, hit = self._find(keys)
        self._merge(keys, pos, hit)

    def commit_bounded(self, b: BoundedWindow, keep: np.ndarray) -> None:
        """``commit(b.user_ids[keep], b.item_ids[keep])`` for a bool mask ``keep`` (the admitted pairs of a
        window bounded by this bounder), reusing bound()'s search when the counters have not changed since."""
        keep = np.asarray(keep)
        if keep.dtype != bool or keep.shape != b.user_ids.shape:
            raise ValueError("keep must be a bool mask over the bounded pairs")
        if b.keys is None or b.version is not self._version:
            self.commit(b.user_ids[keep], b.item_ids[keep])
            return
        everyone = bool(keep.all())
        keys = b.keys if everyone else b.keys[keep]
        if keys.size == 0:
            return
        self._log.append(keys)
        if b.pos is None:  # the counters were (and still are) empty
            self._set(keys, np.ones(keys.size, dtype=np.uint16), ones=True)
            return
        self._merge(keys, b.pos if everyone else b.pos[keep], b.hit if everyone else b.hit[keep])

    def _merge(self, keys: np.ndarray, pos: np.ndarray, hit: np.ndarray) -> None:
        """Count the sorted distinct ``keys`` once more: ``hit`` marks those in the counters (at ``pos``); the
        others are new (``pos``: their insertion points)."""
        counts, ones = self._counts, self._ones
        if hit.any():
            counts[pos[hit]] += 1
            ones = False
        new = keys[~hit]  # sorted and disjoint from the stored keys
        if not new.size:
            self._set(self._keys, counts, ones)
            return
        # merge in O(P) instead of re-sorting: new key j goes to its insertion point + j, old keys fill the rest
        n = self._keys.size + new.size
        dst = pos[~hit] + np.arange(new.size)
        old_at = np.ones(n, dtype=bool)
        old_at[dst] = False
        merged = np.empty(n, dtype=np.int64)
        merged[dst] = new
        merged[old_at] = self._keys
        if ones:
            mc = np.ones(n, dtype=np.uint16)
        else:
            mc = np.empty(n, dtype=np.uint16)
            mc[dst] = 1
            mc[old_at] = counts
        self._set(merged, mc, ones)

    def counters(self) -> dict:
        """The epoch counters: sorted pair keys and their counts (copies)."""
        return {"keys": self._keys.copy(), "counts": self._counts.copy()}

    @property
    def n_pairs(self) -> int:
        return int(self._keys.size)

    def state(self) -> dict:
        if len(self._log) > 1:  # one array from here on: the next snapshot joins only what is new
            self._log = [np.concatenate(self._log)]
        log = self._log[0] if self._log else np.zeros(0, dtype=np.int64)
        return {"delta0": self.delta0, "cap": self.cap, "log": AppendLog(log.astype("<i8", copy=False).tobytes())}

    @classmethod
    def from_state(cls, d: dict) -> "ContributionBounder":
        b = cls(int(d["delta0"]), int(d["cap"]))
        if "log" in d:
            log = np.frombuffer(bytes(d["log"]), dtype="<i8").astype(np.int64)
            keys, counts = np.unique(log, return_counts=True)
        else:  # a snapshot of version 1: the counters themselves (a log with the same counts stands in)
            keys = np.asarray(d["keys"], dtype=np.int64)
            counts = np.asarray(d["counts"], dtype=np.int64)
            log = np.repeat(keys, counts)
        if counts.size and int(counts.max()) > b.cap:
            raise ValueError(f"bounder state counts a pair {int(counts.max())} times, above C = {b.cap}")
        b._log = [log] if log.size else []
        b._set(keys, counts.astype(np.uint16))
        return b
