"""One location per user per window, by a configured rule — shared by the geo (Liang–Yi (CGP)) and adaptive (Liang–Yi (adaptive budgeting)) kinds."""

from __future__ import annotations

from typing import Callable

import numpy as np

from streamdp.engine.query import WindowData

RULES = ("last", "first", "mean")


def locate_users(w: WindowData, accepted: np.ndarray, to_planar: Callable[[np.ndarray], np.ndarray],
                 rule: str) -> tuple[np.ndarray, np.ndarray]:
    """(sorted unique user ids, (n, 2) planar locations) over the events whose ``accepted`` flag is set.

    ``rule``: ``last`` / ``first`` event of the user in the window (by event time, then arrival), or the ``mean``
    of the user's projected locations. A user's location is a function of their own events only.
    """
    rows = np.flatnonzero(accepted)
    if rows.size == 0:
        return np.zeros(0, np.int64), np.zeros((0, 2))
    u = w.user_ids[rows]
    if rule == "mean":
        users, inv = np.unique(u, return_inverse=True)
        xy = to_planar(w.loc[rows])
        cnt = np.bincount(inv, minlength=users.size).astype(np.float64)
        mx = np.bincount(inv, weights=xy[:, 0], minlength=users.size) / cnt
        my = np.bincount(inv, weights=xy[:, 1], minlength=users.size) / cnt
        return users, np.column_stack([mx, my])
    order = np.lexsort((rows, w.ts[rows], u))  # by user, then event time, then arrival
    us = u[order]
    change = us[1:] != us[:-1]
    pick = np.flatnonzero(np.r_[change, True] if rule == "last" else np.r_[True, change])
    return us[pick], to_planar(w.loc[rows[order[pick]]])
