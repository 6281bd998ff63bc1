"""Two engines sharing one budget store each charge their own releases (docs/contract.md §3: every release that reads a
user's data is charged; a retry of the same release charges nothing).

The store answers a second admit of the same (scope, window) with the first outcome and no charge — the retry
rule. Before the fix every engine used the one scope ``"engine"``: a second service sharing the store (other query
ids, same window numbers) had its users admitted for free wherever the first service had admitted them, and
released their data uncharged. Now the scope names the engine's query set and their release parameters (and, in
the Kafka worker, its consumer group and input topic): a replay after a parameter change is other releases.

Hand values: continual_counts with σ = 1 and horizon L = 8 has levels = ⌈log2(9)⌉ = 4, so a user's first
contribution to an item costs ρ = C²·levels/(2σ²) = 2 and δ = δ_item = 1e-6 (Rogers (unknown-domain) Thm 11, contract §3).
"""

from __future__ import annotations

import orjson

from streamdp.accounting.cost import DELTA_SCALE, LOSS_SCALE, budget_vector
from streamdp.config.loader import parse_config
from streamdp.engine.engine import ReleaseEngine, admission_scope
from streamdp.input.events import parse_batch

RHO, DELTA = 2 * LOSS_SCALE, 10 ** -6 * DELTA_SCALE  # one first contribution, in fixed point


def _cfg(qid: str, seed: int = 3):
    return parse_config({"service": {"window_seconds": 60.0, "origin": 1.7e9, "horizon": 8, "unsafe_test_seed": seed},
                         "budget": {"zcdp_rho": 100.0, "zcdp_delta": 1e-3},
                         "query": [{"id": qid, "kind": "continual_counts", "sigma": 1.0}]})


def _run(store, qid: str, seed: int = 3) -> list:
    c = _cfg(qid, seed)
    eng = ReleaseEngine(c.engine_config(), c.build_queries(), store)
    batch, dead = parse_batch([orjson.dumps({"user": "u", "ts": 1.7e9 + 10.0, "items": ["x"]})])
    assert dead == []
    eng.ingest(batch)
    out = eng.flush()
    assert eng.counters.admitted_users == 1
    return out


def _spent(store, user: str = "u") -> tuple[int, int]:
    s = store.get_user(user).spent
    return int(s[0]), int(s[1])


def test_a_second_engine_with_other_queries_pays_for_its_own_release(make_store):
    store = make_store(budget_vector(_cfg("a").budget))
    _run(store, "service_a_counts")
    assert _spent(store) == (RHO, int(DELTA))
    _run(store, "service_b_counts")  # same window number, other release keys: a new charge
    assert _spent(store) == (2 * RHO, 2 * int(DELTA))


def test_a_retry_of_the_same_engine_still_charges_nothing(make_store):
    """Positive control for the retry rule: the same query set closing the same window again (a restart from an
    older snapshot, deterministic test-mode noise so the release log holds the same bytes) is not charged again."""
    store = make_store(budget_vector(_cfg("a").budget))
    first = _run(store, "counts")
    again = _run(store, "counts")
    assert _spent(store) == (RHO, int(DELTA))
    assert [s.records for s in first] == [s.records for s in again]


def test_the_scope_names_the_stream_and_the_query_set():
    s = admission_scope("engine", ["b", "a"])
    assert s == admission_scope("engine", ["a", "b"]) and s.startswith("engine:") and len(s) == len("engine:") + 12
    assert s != admission_scope("engine", ["a"]) and s != admission_scope("engine", ["a", "b", "c"])
    assert s != admission_scope("engine:group-2:events", ["a", "b"])


def _run_then_crash(store, sigma: float) -> list:
    """One window closed through the worker's view of the store (admits go to the store, release-log writes wait
    for a checkpoint), then a crash: the checkpoint never comes, the release log never holds the window."""
    from streamdp.adapters.kafka.checkpoint import DeferredReleaseLog

    raw = {"service": {"window_seconds": 60.0, "origin": 1.7e9, "horizon": 8, "unsafe_test_seed": 3},
           "budget": {"zcdp_rho": 100.0, "zcdp_delta": 1e-3},
           "query": [{"id": "counts", "kind": "continual_counts", "sigma": sigma}]}
    c = parse_config(raw)
    deferred = DeferredReleaseLog(store)
    eng = ReleaseEngine(c.engine_config(), c.build_queries(), deferred)
    batch, _ = parse_batch([orjson.dumps({"user": "u", "ts": 1.7e9 + 10.0, "items": ["x"]})])
    eng.ingest(batch)
    out = eng.flush()
    deferred.discard()
    return out


def test_a_replay_under_other_query_parameters_is_charged_again(make_store):
    """A worker crashed after a window's admit; it restarts with σ = 0.5 instead of 2 under the same query id and
    replays the window. Its release now costs ρ = C²·levels/(2σ²) = 4/(2·0.25) = 8, not 4/(2·4) = 0.5. Before the
    parameters were in the scope, the replay's admit was answered with the first outcome and the user stayed at
    ρ = 0.5 for a release costing 8."""
    store = make_store(budget_vector(_cfg("a").budget))
    _run_then_crash(store, 2.0)
    assert _spent(store) == (RHO // 4, int(DELTA))
    out = _run_then_crash(store, 0.5)
    assert [len(s.records) for s in out] == [1]  # released (the release log never got the first run's record)
    assert _spent(store) == (RHO // 4 + 4 * RHO, 2 * int(DELTA))


def test_a_replay_under_the_same_parameters_is_not_charged_again(make_store):
    store = make_store(budget_vector(_cfg("a").budget))
    _run_then_crash(store, 2.0)
    _run_then_crash(store, 2.0)
    assert _spent(store) == (RHO // 4, int(DELTA))
