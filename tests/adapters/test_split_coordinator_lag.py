"""The split coordinator exports ``streamdp_consumer_lag`` of the parts topic (OPERATIONS.md, "Sizing the split":
the metric that shows the coordinator saturating; it commits no group offsets, so Kafka's lag tools cannot show
it), on the active coordinator and on a standby alike. Its loop is driven here with a stand-in consumer
and a real redis-server (the checkpoint needs the Redis store; nothing is written)."""

from __future__ import annotations

import asyncio
import os

from streamdp.adapters.kafka.split_coordinator import SplitCoordinator
from streamdp.adapters.kafka.topics import parts_topic
from streamdp.adapters.kafka.worker import WorkerOptions
from streamdp.adapters.metrics import WorkerMetrics
from streamdp.config.loader import load_config
from streamdp.filter import open_store

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _TP:
    def __init__(self, topic: str, partition: int) -> None:
        self.topic, self.partition = topic, partition

    def __hash__(self) -> int:
        return hash((self.topic, self.partition))

    def __eq__(self, other) -> bool:
        return (self.topic, self.partition) == (other.topic, other.partition)


class _Consumer:
    """getmany() returns nothing and stops the coordinator after ``polls`` calls; the parts topic's partitions
    have high watermarks ``hw`` and positions ``pos``."""

    def __init__(self, worker, hw: dict, pos: dict, polls: int = 1) -> None:
        self.worker, self.hw, self.pos, self.polls = worker, hw, pos, polls

    async def getmany(self, *a, **kw):
        self.polls -= 1
        if self.polls <= 0:
            self.worker.stopping.set()
        return {}

    def assignment(self):
        return set(self.hw)

    def highwater(self, tp):
        return self.hw[tp]

    async def position(self, tp):
        return self.pos[tp]


def _lags(m: WorkerMetrics) -> dict[tuple[str, str], float]:
    out = {}
    for metric in m.registry.collect():
        if metric.name == "streamdp_consumer_lag":
            for s in metric.samples:
                out[(s.labels["topic"], s.labels["partition"])] = s.value
    return out


def test_the_split_coordinator_exports_the_parts_topic_lag(redis_url):
    cfg = load_config(os.path.join(ROOT, "deploy", "streamdp-split.toml"))
    opts = WorkerOptions.from_config(cfg.kafka, role="coordinator")
    metrics = WorkerMetrics()
    store = open_store(redis_url, None)  # nothing is read or written: the coordinator is a standby
    co = SplitCoordinator(cfg, store, {}, opts, metrics=metrics, worker_id="t")
    parts = parts_topic(cfg.kafka)
    assert opts.parts_topic == parts
    a, b = _TP(parts, 0), _TP(parts, 3)
    other = _TP(cfg.kafka["input_topic"], 0)  # not the coordinator's source: not exported
    co.consumer = _Consumer(co, {a: 120, b: 7, other: 50}, {a: 100, b: 7, other: 0})
    assert co.coord is None  # a standby: it exports its (assigned) lag too
    asyncio.run(co._loop())
    assert _lags(metrics) == {(parts, "0"): 20.0, (parts, "3"): 0.0}
    store.close()
