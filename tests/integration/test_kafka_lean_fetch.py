"""The lean fetch against a real broker (tansu): a consumer with the hook reads exactly the records (offsets, values,
null values included) and ends at exactly the positions of a plain aiokafka consumer on the same topic — plain and
gzip-compressed batches, from the beginning and after seeks into the middle of a (compressed) batch — and its
``getmany`` results cut by ``split_runs`` respect ``max_records``."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from streamdp.adapters.kafka.lean_fetch import RecordRun, install_lean_fetch, record_count, split_runs

pytestmark = pytest.mark.integration

N = 3000


async def produce_topic(bootstrap: str, topic: str, compression: str | None) -> None:
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=False, linger_ms=20,
                         compression_type=compression, max_batch_size=4096)
    await p.start()
    try:
        futs = [await p.send(topic, key=b"k", value=None if i % 97 == 5 else b"v%d" % i, partition=i % 2)
                for i in range(N)]
        await asyncio.gather(*futs)
    finally:
        await p.stop()


async def consume(bootstrap: str, topic: str, lean: bool, start: dict[int, int], max_records: int = 500):
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                         max_partition_fetch_bytes=8192, fetch_max_bytes=16384)
    await c.start()
    try:
        if lean:
            assert install_lean_fetch(c)
        tps = [TopicPartition(topic, p) for p in sorted(start)]
        c.assign(tps)
        for tp in tps:
            c.seek(tp, start[tp.partition])
        want = sum(len(range(start[p], N // 2)) for p in start)  # N/2 records per partition, offsets 0…N/2-1
        got: dict[int, list] = {p: [] for p in start}
        kinds = set()
        while sum(len(v) for v in got.values()) < want:
            res = await c.getmany(timeout_ms=2000, max_records=max_records)
            assert res, "no records within 2 s"
            for chunk in split_runs(res, max_records):
                assert sum(record_count(v) for v in chunk.values()) <= max_records
                for tp, msgs in chunk.items():
                    for m in msgs:
                        kinds.add(type(m))
                        if type(m) is RecordRun:
                            got[tp.partition].extend(zip(m.offsets, m.values))
                        else:
                            got[tp.partition].append((m.offset, m.value))
        positions = {tp.partition: await c.position(tp) for tp in tps}
        return got, positions, kinds
    finally:
        await c.stop()


@pytest.mark.parametrize("compression", [None, "gzip"])
def test_lean_fetch_reads_what_aiokafka_reads(tansu, topic_prefix, compression):
    topic = f"{topic_prefix}lean.{compression or 'plain'}"
    asyncio.run(produce_topic(tansu.bootstrap, topic, compression))
    for start in ({0: 0, 1: 0}, {0: 7, 1: 333}, {0: 1499, 1: 1}):  # mid-batch seeks: batches hold ~hundreds
        lean, lean_pos, lean_kinds = asyncio.run(consume(tansu.bootstrap, topic, True, start))
        ref, ref_pos, ref_kinds = asyncio.run(consume(tansu.bootstrap, topic, False, start))
        assert lean_kinds == {RecordRun} and RecordRun not in ref_kinds
        assert lean == ref
        assert lean_pos == ref_pos == {0: N // 2, 1: N // 2}
        for p, recs in lean.items():
            assert [o for o, _ in recs] == list(range(start[p], N // 2))
            assert all(v == (None if (2 * o + p) % 97 == 5 else b"v%d" % (2 * o + p)) for o, v in recs)
