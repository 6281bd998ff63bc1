"""A replay after a crash gives every user the outcome the lost run gave them (the store contract's stale-replay
rule, ``streamdp/filter/store.py``).

Found by review (2026-11-23): windows 1 and 2 close in one step; user u is admitted at window 1 and halted at
window 2; the worker dies before its checkpoint. The replay of window 1 found u's state at window 2, a refusal,
and the rule "a stale replay is admitted iff not halted" refused u: window 1 was released without u's data, i.e.
not the release that was charged (the other users' costs could differ: a top-k over other data returns other
items). A refusal halts for good and its state is never rewritten, so a state of a later seq means the user was
admitted at every earlier seq they took part in; the stores now answer that.
"""

from __future__ import annotations

import numpy as np
import orjson
from test_redis_fast_paths import _evalsha_calls

from streamdp.accounting.cost import LOSS_SCALE, N_COMPONENTS, budget_vector
from streamdp.adapters.kafka.checkpoint import DeferredReleaseLog
from streamdp.config.loader import parse_config
from streamdp.engine.engine import ReleaseEngine
from streamdp.engine.query import Names
from streamdp.filter.redis_store import RedisBudgetStore
from streamdp.input.events import parse_batch

T0 = 1.7e9


def test_a_replayed_window_keeps_a_user_halted_in_a_later_window_of_the_lost_run(make_store):
    # continual counts, σ = 1, L = 8: a first contribution costs ρ = 4/(2·1) = 2; u can pay for one item only
    raw = {"service": {"window_seconds": 60.0, "origin": T0, "horizon": 8, "unsafe_test_seed": 5},
           "budget": {"zcdp_rho": 100.0, "zcdp_delta": 1e-3},
           "query": [{"id": "counts", "kind": "continual_counts", "sigma": 1.0}]}
    c = parse_config(raw)
    store = make_store(budget_vector(c.budget))
    store.grant("u", np.array([3 * LOSS_SCALE, 10 ** 15] + [0] * (N_COMPONENTS - 2), dtype=np.int64))
    events = [{"user": "u", "ts": T0 + 1, "items": ["x"]}, {"user": "v", "ts": T0 + 2, "items": ["x"]},
              {"user": "u", "ts": T0 + 61, "items": ["y"]}, {"user": "v", "ts": T0 + 62, "items": ["y"]},
              {"user": "v", "ts": T0 + 121, "items": ["z"]}]
    batch, _ = parse_batch([orjson.dumps(e) for e in events])

    def run(snap=None):
        deferred = DeferredReleaseLog(store)
        eng = ReleaseEngine(c.engine_config(), c.build_queries(), deferred)
        if snap is not None:
            eng.restore(snap)
        else:
            eng.ingest(batch)
        snap = eng.snapshot(include_rng=True)  # the checkpoint before windows 1 and 2 close
        out = eng.flush()
        deferred.discard()  # the crash: nothing logged, nothing published
        return snap, [(s.seq, s.admitted, s.refused, [r.to_bytes() for r in s.records]) for s in out]

    snap, first = run()
    assert [(seq, adm, ref) for seq, adm, ref, _ in first] == [(1, 2, 0), (2, 1, 1), (3, 1, 0)]
    spent = {u: store.get_user(u).spent.tolist() for u in ("u", "v")}
    _, again = run(snap)
    assert again == first  # u admitted at window 1 again, every record byte-identical
    assert {u: store.get_user(u).spent.tolist() for u in ("u", "v")} == spent  # nobody charged twice


def test_the_local_halted_cache_answers_only_seqs_from_the_refusal_on(redis_url):
    red = RedisBudgetStore.from_url(redis_url, default_budget=[10] * N_COMPONENTS)
    assert red.admit("q", 1, ["u"], [[6] * N_COMPONENTS]).tolist() == [True]
    assert red.admit("q", 2, ["u"], [[6] * N_COMPONENTS]).tolist() == [False]  # halted at 2
    calls = _evalsha_calls(redis_url)
    assert red.admit("q", 3, ["u"], [[0] * N_COMPONENTS]).tolist() == [False]  # answered locally
    assert _evalsha_calls(redis_url) == calls
    assert red.admit("q", 1, ["u"], [[6] * N_COMPONENTS]).tolist() == [True]  # stale: asked, admitted, free
    assert _evalsha_calls(redis_url) == calls + 1
    table = Names()
    ids = table.ids(["w", "u"])
    assert red.admit_ids("q", 2, ids, np.ones((2, N_COMPONENTS), np.int64), table).tolist() == [True, False]
    assert red.admit_ids("q", 1, ids[1:], np.ones((1, N_COMPONENTS), np.int64), table).tolist() == [True]
    assert red.admit_ids("q", 4, ids[1:], np.ones((1, N_COMPONENTS), np.int64), table).tolist() == [False]
    assert red.get_user("u").spent.tolist() == [6] * N_COMPONENTS
    red.close()
