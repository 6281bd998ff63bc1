"""User-level contribution bounding for continual counts (DESIGN.md §3, "Continual counts, user level").

* Per window a user adds at most Δ0 **distinct** items; a user with more keeps a uniform random subset of size Δ0,
  drawn from the secure generator (the choice depends only on that user's own data).
* Over the horizon (one epoch of the tree) a user adds to any one item at most C times (default C = 1: counts of
  distinct users per item). A (user, item) pair already at C contributes nothing (and costs nothing).
* A user's **first** admitted contribution to an item in the epoch is the one that costs (ρ_item, δ_item); later
  ones (up to C) are free — the node sums a user touches have squared ℓ2 norm ≤ C² per level.

State: the per-(user, item) counters of the current epoch as a sorted int64 key array (user_id·2³² + item_id) with a
parallel uint16 count array — vectorised lookups with ``np.searchsorted``, merged once per window. ``commit`` must
be called with the *admitted* pairs only, after the filter has answered.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streamdp.arrays import unique_sorted

_SHIFT = np.int64(32)


def pair_keys(user_ids: np.ndarray, item_ids: np.ndarray) -> np.ndarray:
    return (np.asarray(user_ids, dtype=np.int64) << _SHIFT) | np.asarray(item_ids, dtype=np.int64)


@dataclass
class BoundedWindow:
    """The bounded (user, item) pairs of one window, before admission."""

    user_ids: np.ndarray  # int64, one row per kept (user, item) pair
    item_ids: np.ndarray  # int64
    first: np.ndarray  # bool: the user's first contribution to this item in the epoch (the costly one)
    dropped_pairs: int  # pairs removed by the Δ0 subset or the C cap


class ContributionBounder:
    def __init__(self, max_items_per_window: int, max_per_item: int = 1) -> None:
        if max_items_per_window < 1:
            raise ValueError("max_items_per_window (Δ0) must be ≥ 1")
        if not (1 <= max_per_item <= 65535):
            raise ValueError("max_per_item (C) must be in 1..65535")
        self.delta0 = int(max_items_per_window)
        self.cap = int(max_per_item)
        self._keys = np.zeros(0, dtype=np.int64)
        self._counts = np.zeros(0, dtype=np.uint16)

    def reset(self) -> None:
        """A new epoch: counters restart with the tree."""
        self._keys = np.zeros(0, dtype=np.int64)
        self._counts = np.zeros(0, dtype=np.uint16)

    def _count_of(self, keys: np.ndarray) -> np.ndarray:
        if self._keys.size == 0:
            return np.zeros(keys.shape, dtype=np.int64)
        pos = np.searchsorted(self._keys, keys)
        pos_c = np.minimum(pos, self._keys.size - 1)
        hit = self._keys[pos_c] == keys
        return np.where(hit, self._counts[pos_c].astype(np.int64), 0)

    def bound(self, user_ids: np.ndarray, item_ids: np.ndarray, rng: np.random.Generator) -> BoundedWindow:
        """Bound one window's raw (user, item) occurrences (duplicates allowed)."""
        keys = unique_sorted(pair_keys(user_ids, item_ids))  # distinct pairs, sorted by user then item
        n_raw = keys.size
        prior = self._count_of(keys)
        keys = keys[prior < self.cap]
        prior = prior[prior < self.cap]
        users = keys >> _SHIFT
        # Δ0 distinct items per user: uniform random subset (random priority, keep the Δ0 smallest per user)
        if keys.size:
            _, starts, counts = np.unique(users, return_index=True, return_counts=True)
            if counts.max() > self.delta0:
                prio = rng.random(keys.size)
                order = np.lexsort((prio, users))  # users sorted, random order within each user
                rank = np.empty(keys.size, dtype=np.int64)
                rank[order] = np.arange(keys.size) - np.repeat(starts, counts)
                keep = rank < self.delta0
                keys, prior, users = keys[keep], prior[keep], users[keep]
        items = keys & np.int64(0xFFFFFFFF)
        return BoundedWindow(user_ids=users, item_ids=items, first=prior == 0, dropped_pairs=int(n_raw - keys.size))

    def commit(self, user_ids: np.ndarray, item_ids: np.ndarray) -> None:
        """Record admitted contributions (distinct pairs) in the epoch counters."""
        keys = unique_sorted(pair_keys(user_ids, item_ids))
        if keys.size == 0:
            return
        if self._keys.size == 0:
            self._keys, self._counts = keys, np.ones(keys.size, dtype=np.uint16)
            return
        pos = np.searchsorted(self._keys, keys)
        pos_c = np.minimum(pos, self._keys.size - 1)
        hit = self._keys[pos_c] == keys
        self._counts[pos_c[hit]] += 1
        new = keys[~hit]  # sorted and disjoint from the stored keys: merge in O(P) instead of re-sorting
        if new.size:
            at = pos[~hit]
            self._keys = np.insert(self._keys, at, new)
            self._counts = np.insert(self._counts, at, np.ones(new.size, dtype=np.uint16))

    @property
    def n_pairs(self) -> int:
        return int(self._keys.size)

    def state(self) -> dict:
        return {"delta0": self.delta0, "cap": self.cap, "keys": self._keys, "counts": self._counts}

    @classmethod
    def from_state(cls, d: dict) -> "ContributionBounder":
        b = cls(int(d["delta0"]), int(d["cap"]))
        b._keys = np.asarray(d["keys"], dtype=np.int64)
        b._counts = np.asarray(d["counts"], dtype=np.uint16)
        return b
