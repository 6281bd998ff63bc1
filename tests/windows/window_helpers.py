"""Shared by the window tests: a test-only query that shows which window each event went to."""

from __future__ import annotations

import numpy as np

from streamdp.accounting.cost import Cost
from streamdp.engine.query import QueryRelease, Reservation, WindowQuery


class EventTimes(WindowQuery):
    """Test-only query: releases the exact event times its window received (no noise — it exists to show which
    window each event went to). Reserves a fixed small zCDP cost per user present."""

    kind = "event_times"

    def __init__(self, qid: str = "n") -> None:
        super().__init__(qid)
        self.cost = Cost.zcdp(0.01)

    def prepare(self, w, rng):
        users = np.unique(w.user_ids)
        return Reservation(users, np.tile(self.cost.to_fixed(), (users.size, 1)))

    def release(self, w, res, admitted, rng, items):
        return QueryRelease(values={"ts": sorted(float(x) for x in w.ts)})

    def state(self):
        return {}

    def load_state(self, d):
        pass
