"""Engine-test helpers: a minimal query kind (a noisy count of distinct users present, fixed cost per user), and
the test-mode engine and embedded run that the query-kind tests share."""

import numpy as np
import orjson

from streamdp.accounting.cost import Cost, budget_vector
from streamdp.engine.engine import EngineConfig, ReleaseEngine
from streamdp.engine.pipeline import EmbeddedPipeline
from streamdp.engine.query import QueryRelease, Reservation, WindowQuery
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.outputs.sinks import ListSink


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


def ev_at(user, ts, loc=None, items=()):
    """An event with an optional [lat, lon] (the located-query tests)."""
    d = {"user": user, "ts": ts, "items": list(items)}
    if loc is not None:
        d["loc"] = [float(loc[0]), float(loc[1])]
    return orjson.dumps(d)


class RecordingStore(MemoryBudgetStore):
    """The in-memory store, recording every reservation and every settle per window seq, as ``project(cost vector)``
    (by default the whole fixed-point vector)."""

    project = staticmethod(np.array)

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.admits, self.settles = {}, {}

    def admit(self, scope, seq, users, costs, digest=None):
        ok = super().admit(scope, seq, users, costs, digest=digest)
        self.admits[seq] = {u: self.project(c) for u, c in zip(users, costs)}
        return ok

    def settle(self, scope, seq, users, actual):
        super().settle(scope, seq, users, actual)
        self.settles[seq] = {u: self.project(c) for u, c in zip(users, actual)}

    def charged(self, seq, user):
        """What ``user`` finally pays for window ``seq`` (no settle call when it equals the reservation)."""
        return self.settles.get(seq, {}).get(user, self.admits[seq][user])


def engine(queries, budget: Cost, seed: int = 11, horizon: int = 8, store_cls=MemoryBudgetStore):
    """A test-mode engine (windows of 10 s from 0, deterministic noise) over a fresh store: (engine, store)."""
    store = store_cls(budget_vector(budget))
    conf = EngineConfig(window_seconds=10.0, horizon=horizon, origin=0.0, unsafe_test_seed=seed)
    return ReleaseEngine(conf, queries, store), store


def by_time(payloads):
    """The payloads in event-time order (stable; a payload without a readable ``ts`` keeps its place at the front).
    Lateness is judged per event in input order since 2026-12-07, so a test that builds its stream user by user
    (every window of one user, then every window of the next) feeds it in time order, as a producer would."""
    def ts(p):
        try:
            t = orjson.loads(p).get("ts")
        except (orjson.JSONDecodeError, AttributeError):
            return float("-inf")
        return t if isinstance(t, (int, float)) and not isinstance(t, bool) else float("-inf")

    return sorted(payloads, key=ts)


def run(e, payloads):
    """Every payload through the embedded pipeline as one batch, in event-time order (:func:`by_time`); the
    release records."""
    sink = ListSink()
    EmbeddedPipeline(e, [sink]).run([by_time(payloads)])
    return sink.records
