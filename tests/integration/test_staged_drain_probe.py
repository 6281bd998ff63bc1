"""The staged coordinator's input-topic probe (``KafkaWorker._unforwarded``) against a REAL broker (tansu): which
input partitions hold a record at or past the coordinator's next input offset, and the first such offset. Known
answers from what the test produced (offsets of one partition are 0, 1, 2, … in produce order)."""

from __future__ import annotations

import asyncio
import types
import uuid

import pytest
from aiokafka import AIOKafkaProducer

from streamdp.adapters.kafka.topics import ensure_topics
from streamdp.adapters.kafka.worker import KafkaWorker

pytestmark = pytest.mark.integration


def _coordinator(kw: dict, topic: str, parts, offsets: dict):
    """What ``_unforwarded`` reads of a coordinator: its input topic and partitions, its next input offsets."""
    ns = types.SimpleNamespace(opts=types.SimpleNamespace(input_topic=topic), input_partitions=set(parts),
                               offsets=dict(offsets), client_kw=kw, stopping=asyncio.Event())
    ns._probe = lambda probe: KafkaWorker._probe(ns, probe)
    return ns


def test_the_probe_names_each_partition_with_unreceived_records_and_the_first_of_them(tansu):
    kw = {"bootstrap_servers": tansu.bootstrap, "client_id": "probe-test"}
    topic = f"t{uuid.uuid4().hex[:8]}.in"

    async def probe(offsets: dict, parts=(0, 1, 2, 3)):
        return await KafkaWorker._unforwarded(_coordinator(kw, topic, parts, offsets), 20.0)

    async def main():
        await ensure_topics(kw, [topic], 4)
        prod = AIOKafkaProducer(**kw, max_request_size=2_000_000, max_batch_size=256 * 1024)
        await prod.start()
        try:
            for i in range(10):
                await prod.send_and_wait(topic, b"x" * 100, partition=0)
            for i in range(5):
                await prod.send_and_wait(topic, b"y" * 100, partition=2)
            # partitions 1 and 3 empty; offsets unknown: partitions with records are pending from their beginning
            assert await probe({}) == {0: 0, 2: 0}
            assert await probe({0: 10, 2: 5}) == {}  # everything received (unknown and empty: nothing to wait for)
            assert await probe({0: 9, 2: 5}) == {0: 9}  # exactly one record missing
            assert await probe({0: 10, 2: 4, 1: 0, 3: 0}) == {2: 4}  # one partition decides nothing for the others
            assert await probe({0: 10, 2: 0}) == {2: 0}
            # a record larger than the probe's 64 KiB partition fetch limit is still seen
            await prod.send_and_wait(topic, b"z" * 300_000, partition=1)
            assert await probe({0: 10, 2: 5}) == {1: 0}
            assert await probe({0: 10, 1: 1, 2: 5}) == {}
            # a batch of 100 records (100 KB) in one produce request; an offset inside it
            b = prod.create_batch()
            for _ in range(100):
                assert b.append(key=None, value=b"w" * 1000, timestamp=None) is not None  # all in one batch
            b.close()
            await (await prod.send_batch(b, topic, partition=0))
            assert await probe({0: 10, 1: 1, 2: 5}) == {0: 10}
            assert await probe({0: 60, 1: 1, 2: 5}) == {0: 60}
            assert await probe({0: 110, 1: 1, 2: 5}) == {}
        finally:
            await prod.stop()

    asyncio.run(main())
