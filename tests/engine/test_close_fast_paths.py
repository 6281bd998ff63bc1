"""Window close through the store's id fast path (``BudgetStore.admit_ids``) gives byte-identical output to the
name path, and the close stage's array helpers equal the numpy expressions they replace."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from streamdp.accounting.cost import Cost, N_COMPONENTS, budget_vector
from streamdp.arrays import put_rows, rows_all, rows_any_nonzero, take_rows
from streamdp.engine import state_codec
from streamdp.engine.engine import EngineConfig, ReleaseEngine, _add_rows
from streamdp.engine.pipeline import EmbeddedPipeline
from streamdp.engine.queries.continual_counts import ContinualCounts
from streamdp.engine.queries.top_k import TopK
from streamdp.engine.query import QueryRelease, Reservation, WindowQuery
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.noise.generator import unsafe_seeded_generator
from streamdp.outputs.sinks import ListSink

from engine_helpers import PresenceCount


class Shuffled(WindowQuery):
    """Reserves in DESCENDING user order (unique, unsorted) with per-user costs, and settles every admitted user to
    half of it, reported in another order: the engine's general (unsorted) summing paths and a settle."""

    kind = "shuffled"

    def prepare(self, w, rng):
        users = np.unique(w.user_ids)[::-1].copy()
        costs = np.outer(users % 3 + 1, Cost.zcdp(0.02, 1e-9).to_fixed())
        return Reservation(users, costs)

    def release(self, w, res, admitted, rng, items):
        keep = admitted[res.users] if res.users.size else np.zeros(0, dtype=bool)
        users, costs = res.users[keep], res.costs[keep] // 2
        order = np.argsort(users % 5, kind="stable")
        return QueryRelease(values={"n": int(users.size)}, users=users[order], actual=costs[order])

    def state(self):
        return {}

    def load_state(self, d):
        pass


class ByName(MemoryBudgetStore):
    """Overriding admit/settle switches the in-memory store's id fast path off: admission goes by name."""

    def admit(self, scope, seq, users, costs, digest=None):
        return super().admit(scope, seq, users, costs, digest=digest)

    def settle(self, scope, seq, users, actual):
        super().settle(scope, seq, users, actual)


class DuckStore:
    """A store that is not a BudgetStore (no admit_ids): the engine admits by name."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        if name in ("admit_ids", "settle_ids"):
            raise AttributeError(name)
        return getattr(self.inner, name)


def _queries():
    return [ContinualCounts("counts", sigma=2.0, horizon=8, delta_item=1e-6, max_items_per_window=2, max_per_item=2),
            TopK("top", epsilon=0.8, delta=1e-6, k=3, kbar=5, k_star=60),
            PresenceCount("p", rho=0.05),
            Shuffled("s")]


def _payloads(seed: int, n: int = 3000) -> list[bytes]:
    rng = unsafe_seeded_generator(seed)
    out = []
    for i in range(n):
        items = [f"i{int(x)}" for x in rng.zipf(1.6, int(rng.integers(0, 5))) if x < 40]
        out.append(orjson.dumps({"user": f"u{int(rng.integers(0, 120))}", "ts": i * 0.05 + float(rng.random()),
                                 "items": items}))
    return out


def _run(store, payloads, seed, restore_at=None):
    conf = EngineConfig(window_seconds=10.0, horizon=8, origin=0.0, unsafe_test_seed=seed)
    e = ReleaseEngine(conf, _queries(), store)
    sink = ListSink()
    p = EmbeddedPipeline(e, [sink])
    for k in range(0, len(payloads), 250):
        if restore_at is not None and k == restore_at:
            e.restore(e.snapshot())  # new name tables: the store's id cache must follow
        p.feed(payloads[k:k + 250])
    p._emit(e.flush())
    snap = state_codec.decode(e.snapshot())
    snap["counters"].pop("last_close_seconds")
    return [r.to_bytes() for r in sink.records], state_codec.encode(snap), e.counters


def _store_state(st):
    d = st.to_json()
    for x in d["ledger"]:
        x.pop("ts", None)
    return d


@pytest.mark.parametrize("seed,rho", [(5, 2.0), (6, 0.6)])
def test_engine_output_identical_with_and_without_the_id_fast_path(seed, rho):
    payloads = _payloads(seed)
    budget = budget_vector(Cost.zcdp(rho, 1.0))
    fast = MemoryBudgetStore(budget)
    calls = {"admit_ids": 0, "settle_ids": 0}
    for m in calls:  # count through instance attributes: the class methods (the fast path) stay in use
        f = getattr(fast, m)
        setattr(fast, m, lambda *a, _f=f, _m=m, **k: (calls.__setitem__(_m, calls[_m] + 1), _f(*a, **k))[1])
    slow, duck = ByName(budget), MemoryBudgetStore(budget)
    out_fast = _run(fast, payloads, seed, restore_at=1500)
    out_slow = _run(slow, payloads, seed, restore_at=1500)
    out_duck = _run(DuckStore(duck), payloads, seed)
    assert out_fast[0] == out_slow[0] == out_duck[0]  # every release record, byte for byte
    assert out_fast[1] == out_slow[1] == out_duck[1]  # engine state (queries, counters, rng)
    assert _store_state(fast) == _store_state(slow) == _store_state(duck)  # spend, halts, ledger, user order
    c = out_fast[2]
    assert calls["admit_ids"] == c.windows_closed and calls["settle_ids"] > 0
    assert c.halted_users > 0 and c.admitted_users > 0 and c.windows_closed > 8  # HALTs and a second epoch


def test_add_rows_equals_add_at():
    rng = unsafe_seeded_generator(31)
    for trial in range(300):
        all_users = np.unique(rng.integers(0, 60, int(rng.integers(1, 40))))
        kind = trial % 4
        if kind == 0:
            users = all_users.copy()  # the whole set, sorted
        elif kind == 1:
            users = np.sort(rng.choice(all_users, int(rng.integers(0, all_users.size + 1)), replace=False))
        elif kind == 2:
            users = rng.permutation(rng.choice(all_users, int(rng.integers(0, all_users.size + 1)), replace=False))
        else:
            users = rng.choice(all_users, int(rng.integers(0, 2 * all_users.size + 1)))  # repeats
        costs = rng.integers(0, 1000, (users.size, N_COMPONENTS))
        want = rng.integers(0, 10, (all_users.size, N_COMPONENTS))
        got = want.copy()
        np.add.at(want, np.searchsorted(all_users, users), costs)
        _add_rows(got, all_users, users, costs, subset=bool(trial % 2))
        np.testing.assert_array_equal(got, want)


def test_row_helpers_equal_numpy():
    rng = unsafe_seeded_generator(32)
    for n in (0, 1, 7, 500):
        a = rng.integers(0, 3, (n, N_COMPONENTS)) * (rng.random((n, N_COMPONENTS)) < 0.3)
        m = rng.random((n, N_COMPONENTS)) < 0.8
        np.testing.assert_array_equal(rows_all(m), m.all(axis=1))
        np.testing.assert_array_equal(rows_any_nonzero(a), a.any(axis=1))
        big = rng.integers(0, 100, (n + 20, N_COMPONENTS))
        idx = rng.choice(n + 20, size=n, replace=False)
        np.testing.assert_array_equal(take_rows(big, idx), big[idx])
        want = big.copy()
        want[idx] = a
        put_rows(big, idx, a)
        np.testing.assert_array_equal(big, want)
