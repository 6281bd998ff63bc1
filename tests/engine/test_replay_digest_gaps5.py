"""The engine's replay digest chain: inputs the first tests did not pin (mutation audit, 2026-11-23).

``D_seq`` (``streamdp/engine/replay_digest.py``) must change with every event field of the window (times,
values, locations), with a reservation held by only some of the batch's users, and with the user and item names
interned since the previous close (not since some other count); the engine must carry the digest of its last close
forward (the next close chains on it, the snapshot stores it). Each was a one-line bug that no test caught.
"""

from __future__ import annotations

import numpy as np
from test_replay_digest import T0, Recording, batch, config

from streamdp.accounting.cost import budget_vector
from streamdp.engine.engine import ReleaseEngine
from streamdp.engine.replay_digest import GENESIS, partition_digest, window_digest


def digests(events_per_step, c=None):
    """Run an engine over the given ingest steps (``close_due`` after each) and return {seq: digest}."""
    c = c or config()
    store = Recording(budget_vector(c.budget))
    eng = ReleaseEngine(c.engine_config(), c.build_queries(), store)
    for evs in events_per_step:
        eng.ingest(batch(evs))
        eng.close_due()
    return dict(store.digests), eng, store


def test_a_reservation_only_some_users_hold_enters_the_digest():
    base = dict(prev=GENESIS, seq=1, generator_state=b"g", new_users=["a", "b"], new_items=[],
                arrays=(np.arange(2),), all_users=np.arange(2))
    r5, r7 = np.zeros((2, 6), np.int64), np.zeros((2, 6), np.int64)
    r5[0, 0], r7[0, 0] = 5, 7  # component 0 is used by user 0 only
    zero = np.zeros((2, 6), np.int64)
    assert len({window_digest(**base, reservations=r) for r in (r5, r7, zero)}) == 3


def test_the_engine_chains_on_its_last_digest_and_the_snapshot_carries_it():
    evs = [{"user": "u", "ts": T0 + 1, "items": ["x"]}, {"user": "u", "ts": T0 + 61, "items": ["x"]},
           {"user": "u", "ts": T0 + 121, "items": ["x"]}]
    got, eng, store = digests([evs])
    assert sorted(got) == [1, 2]
    # the engine holds the digest of its last close (the next close chains on it) and its snapshot stores it; the
    # store gets the digest of the close's one partition, chained on it
    assert eng.state_tree()["history"]["digest"] == eng.history.hex()
    users, _ = store.batches[-1]
    assert partition_digest(eng.history, 0, 0, 1, users).hex() == got[2]  # partition 0, its row range [0, 1)
    assert partition_digest(GENESIS, 0, 0, 1, users).hex() != got[2]  # the chain enters it
    assert partition_digest(eng.history, 1, 0, 1, users).hex() != got[2]  # and the partition


def _two_windows(new_user: str, new_item: str, users_first: int, items_first: int):
    """Window 1 interns ``users_first`` users and ``items_first`` items; window 2 (ingested after window 1 closed)
    brings one new user and one new item, with ids that do not depend on their names."""
    first = [{"user": f"u{i}", "ts": T0 + 1 + i, "items": [f"i{j}" for j in range(items_first)] if i == 0 else
              ["i0"]} for i in range(users_first)]
    first.append({"user": "u0", "ts": T0 + 70, "items": ["i0"]})  # in window 2: closes window 1
    second = [{"user": new_user, "ts": T0 + 75, "items": [new_item]}, {"user": "u0", "ts": T0 + 130, "items": ["i0"]}]
    got, _, _ = digests([first, second])
    return got


def test_window_2_digest_covers_the_user_names_interned_since_window_1():
    """Four items and one user before window 1's close: a count mixed up with the item count would cover none of
    window 2's new user names."""
    a = _two_windows("p", "n", users_first=1, items_first=4)
    b = _two_windows("q", "n", users_first=1, items_first=4)
    assert a[1] == b[1] and a[2] != b[2]


def test_window_2_digest_covers_the_item_names_interned_since_window_1():
    """Four users and one item before window 1's close: the converse."""
    a = _two_windows("n", "p", users_first=4, items_first=1)
    b = _two_windows("n", "q", users_first=4, items_first=1)
    assert a[1] == b[1] and a[2] != b[2]


def test_every_event_field_enters_the_digest():
    """Runs that differ in one event's time (within the window), value or location only: same users, items and
    reservations (continual counts price items), other window arrays, so another digest."""
    def run(**field):
        ev = {"user": "u", "ts": T0 + 1, "items": ["x"], "value": 1.0, "loc": [10.0, 20.0]}
        ev.update(field)
        got, _, _ = digests([[ev, {"user": "w", "ts": T0 + 70, "items": ["x"]}]])
        return got[1]
    base = run()
    assert run() == base
    for field in ({"ts": T0 + 2}, {"value": 2.0}, {"loc": [10.0, 21.0]}):
        assert run(**field) != base, field
