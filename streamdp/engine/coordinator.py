"""The coordinator's share of a window close: the partitions' admissions merged, settles sent back per partition
(docs/DECISIONS.md, "Scale-out: stage A admits").

Stage A admits each (window, partition) on its own (:mod:`streamdp.engine.stage_a`); the coordinator takes the
:class:`~streamdp.engine.stage_a.AdmittedPart` s of every partition of window t, in partition order, and releases
from the admitted users only. Reserve-and-settle kinds settle after the release, each user in the scope and batch
their partition admitted them in, before any partition admits window t + 1 (the ordering rule of DECISIONS).
"""

from __future__ import annotations

import numpy as np

from streamdp.engine.query import Names
from streamdp.engine.stage_a import AdmittedPart
from streamdp.filter.store import BudgetStore


def merge_admissions(all_users: np.ndarray, parts: list[AdmittedPart]) -> np.ndarray:
    """The admitted mask over ``all_users`` (sorted ids: every user of the window) from the partitions' parts.
    Every user must be in exactly one part."""
    mask = np.zeros(all_users.size, dtype=bool)
    covered = [p.users for p in parts if p.users.size]
    if covered:
        every = np.sort(np.concatenate(covered))
        if every.size > 1 and (every[1:] == every[:-1]).any():
            # a user answered by two parts: the later answer would win and could turn a refusal into an admission
            raise ValueError("the partitions' admissions name a user twice")
    seen = 0
    for part in sorted(parts, key=lambda p: p.partition):
        if part.users.size == 0:
            continue
        pos = np.searchsorted(all_users, part.users)
        if (pos >= all_users.size).any() or not np.array_equal(all_users[np.minimum(pos, all_users.size - 1)],
                                                               part.users):
            raise ValueError(f"partition {part.partition}'s admission names users outside the window")
        mask[pos] = part.admitted
        seen += part.users.size
    if seen != all_users.size:
        raise ValueError(f"the partitions' admissions cover {seen} users, the window has {all_users.size}")
    return mask


def settle_parts(store: BudgetStore, parts: list[AdmittedPart], users: np.ndarray, actual: np.ndarray,
                 table: Names) -> None:
    """Lower the reservations of the admitted ``users`` (sorted ids) to ``actual``, each in the scope and batch of
    the part that admitted them (one settle call per partition, in partition order)."""
    settle_ids = getattr(store, "settle_ids", None)
    live = [p for p in sorted(parts, key=lambda p: p.partition) if p.users.size]
    for part in live:
        if len(live) == 1:
            sel = slice(None)
        else:
            pos = np.minimum(np.searchsorted(part.users, users), part.users.size - 1)
            sel = part.users[pos] == users
            if not sel.any():
                continue
        if settle_ids is not None:
            store.settle_ids(part.scope, part.seq, users[sel], actual[sel], table)
        else:
            store.settle(part.scope, part.seq, table.names(users[sel]), actual[sel])
