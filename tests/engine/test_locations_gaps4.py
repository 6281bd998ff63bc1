"""locate_users: one location per user per window (shared by the geo (Liang–Yi (CGP)) and adaptive (Liang–Yi (adaptive budgeting)) kinds).

Several users with interleaved arrivals: each returned id must sit next to a location computed from that user's own
events only (the sequential adaptive queries charge each user by their location), and equal event times are broken
by arrival order. Expected answers are written out by hand.
"""

from __future__ import annotations

import numpy as np
import pytest

from streamdp.engine.queries.locations import locate_users
from streamdp.engine.query import WindowData


def _window(users, ts, locs) -> WindowData:
    n = len(users)
    return WindowData(seq=1, epoch=0, t=1, start=0.0, end=10.0, user_ids=np.array(users, dtype=np.int64),
                      ts=np.array(ts, dtype=np.float64), item_offsets=np.zeros(n + 1, dtype=np.int64),
                      item_ids=np.zeros(0, dtype=np.int64), value=np.full(n, np.nan),
                      loc=np.array(locs, dtype=np.float64))


def _identity(loc):
    return np.asarray(loc, dtype=np.float64).copy()


# arrival rows:       0        1        2        3        4         5        6
USERS = [7, 3, 7, 5, 3, 7, 3]
TS = [4.0, 2.0, 1.0, 3.0, 6.0, 4.0, 2.0]
LOCS = [[70, 1], [30, 1], [71, 2], [50, 5], [32, 9], [72, 3], [31, 4]]
# user 3: rows 1 (t2), 6 (t2), 4 (t6)  → first = row 1 (arrived before row 6), last = row 4
# user 5: row 3
# user 7: rows 2 (t1), 0 (t4), 5 (t4)  → first = row 2, last = row 5 (arrived after row 0)


@pytest.mark.parametrize("rule,want", [
    ("first", [[30, 1], [50, 5], [71, 2]]),
    ("last", [[32, 9], [50, 5], [72, 3]]),
    ("mean", [[31, 14 / 3], [50, 5], [71, 2]]),
])
def test_each_user_gets_their_own_location(rule, want):
    users, xy = locate_users(_window(USERS, TS, LOCS), np.ones(7, bool), _identity, rule)
    assert users.tolist() == [3, 5, 7]
    assert xy == pytest.approx(np.array(want, dtype=np.float64))


def test_equal_event_times_are_broken_by_arrival():
    w = _window([1, 1, 1], [2.0, 2.0, 2.0], [[0, 0], [1, 1], [2, 2]])
    assert locate_users(w, np.ones(3, bool), _identity, "first")[1].tolist() == [[0, 0]]
    assert locate_users(w, np.ones(3, bool), _identity, "last")[1].tolist() == [[2, 2]]


def test_rejected_events_are_ignored_for_every_rule():
    acc = np.array([True, False, True, True, False, True, True])  # drop rows 1 and 4 (user 3's first and last)
    w = _window(USERS, TS, LOCS)
    for rule, want in (("first", [[31, 4], [50, 5], [71, 2]]), ("last", [[31, 4], [50, 5], [72, 3]]),
                       ("mean", [[31, 4], [50, 5], [71, 2]])):
        users, xy = locate_users(w, acc, _identity, rule)
        assert users.tolist() == [3, 5, 7] and xy == pytest.approx(np.array(want, dtype=np.float64)), rule
    users, xy = locate_users(w, np.zeros(7, bool), _identity, "last")
    assert users.shape == (0,) and xy.shape == (0, 2)
