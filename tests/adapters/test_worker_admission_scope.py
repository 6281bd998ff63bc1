"""The Kafka worker's engine admits under a scope that names its stream — consumer group and input topic, as the
checkpoint key does — so two deployments sharing one Redis never have their admits answered as replays of each
other's (see tests/filter/test_admission_scope.py for the engine-level charge); the staged coordinator shares the
``all`` worker's scope, as it shares its checkpoint (a deployment may switch shapes and carry its state over)."""

from __future__ import annotations

import copy

from streamdp.accounting.cost import budget_vector
from streamdp.adapters.kafka.worker import KafkaWorker, WorkerOptions
from streamdp.cli.demo import DEFAULT_NYC_CONFIG
from streamdp.config.loader import parse_config
from streamdp.engine.engine import ReleaseEngine, admission_scope
from streamdp.engine.release_parameters import canonical
from streamdp.filter.redis_store import RedisBudgetStore


def _scope(redis_url: str, group: str, topic: str, role: str = "all") -> str:
    raw = copy.deepcopy(DEFAULT_NYC_CONFIG)
    raw["kafka"] = {"bootstrap": "127.0.0.1:1", "input_topic": topic, "group_id": group}
    cfg = parse_config(raw)
    store = RedisBudgetStore.from_url(redis_url, budget_vector(cfg.budget))
    try:
        w = KafkaWorker(cfg, store, {}, WorkerOptions.from_config(cfg.kafka, role=role), worker_id="w")
        ids = [q["id"] for q in raw["query"]]
        eng = ReleaseEngine(w.engine_config(), cfg.build_queries(), store)
        # by hand: the documented recipe (the release parameters are tested in tests/engine/test_release_parameters.py)
        assert eng.scope == admission_scope(f"engine:{group}:{topic}", ids, canonical(eng.parameters))
        return eng.scope
    finally:
        store.close()


def test_scope_differs_per_group_and_topic_and_is_shared_by_the_coordinator(redis_url):
    a = _scope(redis_url, "flights", "events")
    assert _scope(redis_url, "flights", "events", role="coordinator") == a
    assert _scope(redis_url, "flights-2", "events") != a
    assert _scope(redis_url, "flights", "events-2") != a
