"""A minimal query kind for engine tests: a noisy count of distinct users present, fixed cost per user."""

import numpy as np
import orjson

from streamdp.accounting.cost import Cost
from streamdp.engine.query import QueryRelease, Reservation, WindowQuery


class PresenceCount(WindowQuery):
    kind = "presence_count"

    def __init__(self, qid: str, rho: float = 0.5, sigma: float = 1.0) -> None:
        super().__init__(qid)
        self.cost = Cost.zcdp(rho)
        self.sigma = sigma
        self.windows = 0

    def prepare(self, w, rng):
        users = np.unique(w.user_ids)
        return Reservation(users, np.tile(self.cost.to_fixed(), (users.size, 1)))

    def release(self, w, res, admitted, rng, items):
        n = int(admitted[res.users].sum()) if res.users.size else 0
        self.windows += 1
        return QueryRelease(values={"count": int(round(n + rng.normal(0, self.sigma))), "true_admitted": n})

    def state(self):
        return {"windows": self.windows}

    def load_state(self, d):
        self.windows = d["windows"]


def ev(user, ts, items=(), value=None):
    d = {"user": user, "ts": ts, "items": list(items)}
    if value is not None:
        d["value"] = value
    return orjson.dumps(d)
