"""``--drain-idle``: idleness alone is no end of input (service review of 2026-11-23, finding 3). A worker drained
on wall-clock idleness while a partition's first fetch had not come back (or while one was read in part); it then
closed every window without that partition's events, and every later run dead-lettered them as late. Here one
partition is paused at the consumer for the first 1.5 s — a broker slow to answer its first fetch — with a drain
idle time of 0.2 s: the worker must read every partition to its high watermark before it drains."""

from __future__ import annotations

import asyncio
import copy

import pytest

from kafka_helpers import service_config
from test_kafka_alignment import events_by_partition, produce_parts

pytestmark = pytest.mark.integration

P = 4


async def _run(raw: dict, store_url: str) -> dict[int, int]:
    from aiokafka import TopicPartition

    from streamdp.accounting.cost import budget_vector
    from streamdp.adapters.kafka.broker_config import client_kwargs
    from streamdp.adapters.kafka.worker import KafkaWorker, WorkerOptions
    from streamdp.config.loader import parse_config
    from streamdp.filter import open_store

    cfg = parse_config(copy.deepcopy(raw))
    store = open_store(store_url, budget_vector(cfg.budget))

    class SlowPartition(KafkaWorker):
        async def start(self):
            await super().start()
            tp = TopicPartition(self.source_topic, 3)
            self.consumer.pause(tp)  # its first fetch "has not come back" for 1.5 s
            asyncio.get_running_loop().call_later(1.5, self.consumer.resume, tp)

    opts = WorkerOptions.from_config(cfg.kafka, use_group=False, drain_idle=0.2, max_partition_skew_seconds=0.0,
                                     close_open_windows=True)
    w = SlowPartition(cfg, store, client_kwargs(cfg.kafka), opts)
    try:
        assert await asyncio.wait_for(w.run(), 120) == 0
        return dict(w.offsets), w.closed_windows
    finally:
        store.close()


def test_the_worker_does_not_drain_before_every_partition_is_read(tansu, redis_server, topic_prefix):
    import redis

    parts = events_by_partition(False)
    raw = service_config(topic_prefix, tansu.bootstrap, partitions=P,
                         service={"window_seconds": 3600.0, "origin": 1_700_000_000.0})
    asyncio.run(produce_parts(tansu.bootstrap, raw["kafka"]["input_topic"], parts))
    url = redis_server.url.rsplit("/", 1)[0] + "/7"
    redis.Redis.from_url(url).flushdb()
    offsets, closed = asyncio.run(_run(raw, url))
    assert offsets == {p: len(es) for p, es in enumerate(parts)}  # every partition read to its end
    assert closed == 16
