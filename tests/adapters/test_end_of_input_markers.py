"""Stage A's end-of-input markers and the coordinator's drain (forward.py, "End of input"; worker review of
2026-11-23, finding 2: the coordinator's ``--drain-idle`` looked at the internal topic only, so a stage A that had
not forwarded everything yet — down, rebalancing, behind — was taken for the end of the input, and the missing
partitions' events came out late).

Against a REAL redis-server (the coordinator's checkpoint) with the recording Kafka stand-ins of
``test_worker_protocol_gaps3``; expected offsets are set by hand from the input, never read back from the code.
"""

from __future__ import annotations

import numpy as np
import pytest
from aiokafka import TopicPartition

from streamdp.adapters.kafka.forward import ForwardError, ForwardRecord, Stream, decode, encode
from streamdp.adapters.kafka.ingest import IngestWorker
from streamdp.adapters.kafka.worker import Fetched, KafkaWorker, WorkerOptions, decode_fetched
from streamdp.filter.redis_store import RedisBudgetStore
from streamdp.input import sources
from streamdp.input.events import EventBatch

from test_worker_protocol_gaps3 import TOPIC, Consumer, Producer, Rec, Trace, _cfg

INTERNAL = "eoi.internal.parsed"
STREAM = Stream("g3.workers", TOPIC)


def _marker(p: int, lo: int, pos: int, stream: Stream = STREAM) -> ForwardRecord:
    return ForwardRecord(p, lo, pos - 1, np.zeros(0, dtype=np.int64), [], EventBatch(), stream, end=True)


# ---- the record -------------------------------------------------------------------------------------------------
def test_a_marker_round_trips_and_an_ordinary_record_is_no_marker():
    r = decode(encode(_marker(3, 40, 42)))
    assert (r.partition, r.lo, r.hi, r.next_offset, r.end, len(r.batch), r.stream) == (3, 40, 41, 42, True, 0, STREAM)
    plain = ForwardRecord(3, 40, 41, np.zeros(0, dtype=np.int64), [], EventBatch(), STREAM)
    assert decode(encode(plain)).end is False
    assert b'"end"' not in encode(plain)  # an ordinary record is byte for byte what it was before markers


def test_a_marker_with_events_or_a_malformed_end_flag_is_refused():
    ev = list(sources.nycflights13_events(3))
    from streamdp.input.events import parse_batch

    batch, _ = parse_batch(ev)
    with pytest.raises(ValueError, match="no events"):
        encode(ForwardRecord(0, 0, 2, np.arange(3, dtype=np.int64), ev, batch, STREAM, end=True))
    good = encode(_marker(0, 5, 5))
    for bad in (b'"end":1', b'"end":"yes"', b'"end":null'):
        forged = good.replace(b'"end":true', bad)
        hlen = int.from_bytes(good[4:8], "little") + len(bad) - len(b'"end":true')
        forged = forged[:4] + hlen.to_bytes(4, "little") + forged[8:]
        with pytest.raises(ForwardError, match="end-of-input marker"):
            decode(forged)
    # the flag on a record that carries events (a forged or corrupt header) is refused too, not taken as a marker
    rec = encode(ForwardRecord(0, 0, 2, np.arange(3, dtype=np.int64), ev, batch, STREAM))
    hlen = int.from_bytes(rec[4:8], "little")
    head = rec[8:8 + hlen].replace(b'"v":2', b'"v":2,"end":true')
    with pytest.raises(ForwardError, match="end-of-input marker"):
        decode(rec[:4] + len(head).to_bytes(4, "little") + head + rec[8 + hlen:])


# ---- stage A ------------------------------------------------------------------------------------------------------
class EndConsumer(Consumer):
    """Two input partitions with settable positions and high watermarks (None: no fetch answered yet)."""

    def __init__(self, trace: Trace) -> None:
        super().__init__(trace)
        self.pos = {0: 0, 1: 0}
        self.hw: dict[int, int | None] = {0: None, 1: None}
        self.commits = {0: 0, 1: 7}

    def assignment(self):
        return {TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)}

    def highwater(self, tp):
        return self.hw[tp.partition]

    async def position(self, tp):
        return self.pos[tp.partition]

    async def committed(self, tp):
        return self.commits[tp.partition]


async def test_stage_a_marks_each_partition_once_at_its_end_after_the_last_run_and_commits_after_the_ack():
    cfg = _cfg()
    trace = Trace()
    ing = IngestWorker({}, WorkerOptions.from_config(cfg.kafka, internal_topic=INTERNAL), worker_id="i")
    ing.producer, ing.consumer = Producer(trace), EndConsumer(trace)
    c = ing.consumer

    def markers():
        return [(k, p, decode(v)) for (t, k, v), p in zip(ing.producer.sent, ing.producer.partitions)
                if t == INTERNAL]

    await ing.mark_ends(ing.generation)
    assert markers() == []  # no fetch answered yet: no end known
    assert not await ing._at_end()
    # partition 0: read to 120 of 120 (last run forwarded 100..119); partition 1: 50 of 60 read (not at its end)
    ing.next[0], c.pos[0], c.hw[0] = 120, 120, 120
    c.pos[1], c.hw[1] = 50, 60
    await ing.mark_ends(ing.generation)
    (k, p, r), = markers()
    assert (k, p, r.partition, r.lo, r.next_offset, r.end, len(r.batch)) == (b"0/120", 0, 0, 120, 120, True, 0)
    commit = trace.index(lambda x: x[0] == "commit")
    assert len(commit) == 1 and commit[0] > max(trace.index(lambda x: x[0] == "broker_ack"))
    assert trace.calls[commit[0]] == ("commit", {0: 120})
    assert not await ing._at_end()
    await ing.mark_ends(ing.generation)
    assert len(markers()) == 1  # the same position is marked once
    # partition 1 reaches its end with nothing forwarded since the assignment: the marker vouches from the
    # committed offset (7), as a run's lo does — nothing of [7, 60) was fetched unforwarded
    c.pos[1] = 60
    await ing.mark_ends(ing.generation)
    r = markers()[-1][2]
    assert (r.partition, r.lo, r.next_offset) == (1, 7, 60)
    assert await ing._at_end()
    # new input on partition 0: forwarded, then marked again at the new position, from the run's end
    c.pos[0], c.hw[0] = 130, 130
    ing.next[0] = 125  # 125..129: offsets without records (transaction markers): the marker vouches for them
    await ing.mark_ends(ing.generation)
    r = markers()[-1][2]
    assert (r.partition, r.lo, r.hi, r.next_offset) == (0, 125, 129, 130) and len(markers()) == 3
    # a rebalance meanwhile: nothing is sent for positions of an older generation
    n = len(markers())
    c.pos[0], c.hw[0] = 140, 140
    await ing.mark_ends(ing.generation - 1)
    assert len(markers()) == n


# ---- the coordinator -----------------------------------------------------------------------------------------------
def _coordinator(redis_url: str, trace: Trace) -> KafkaWorker:
    from streamdp.accounting.cost import budget_vector

    cfg = _cfg()
    store = RedisBudgetStore.from_url(redis_url, budget_vector(cfg.budget))
    opts = WorkerOptions.from_config(cfg.kafka, use_group=False, offload=False, role="coordinator",
                                     internal_topic=INTERNAL, checkpoint_batches=1)
    w = KafkaWorker(cfg, store, {}, opts, worker_id="c-test")
    w.producer, w.consumer = Producer(trace), Consumer(trace)
    w.input_partitions, w.owned = {0, 1}, {0}
    return w


def _forward(good: list[bytes], lo: int, first: int, last: int, p: int = 0) -> ForwardRecord:
    from streamdp.input.events import parse_batch

    evs = good[first:last + 1]
    batch, dead = parse_batch(evs)
    assert not dead
    return ForwardRecord(p, lo, last, np.arange(first, last + 1, dtype=np.int64), evs, batch, STREAM)


async def test_the_coordinator_drains_only_where_every_input_partition_is_marked_at_its_own_position(redis_url):
    good = list(sources.nycflights13_events(300))  # 2013-01-01 only: nothing closes, every event stays held
    trace = Trace()
    w = _coordinator(redis_url, trace)
    await w._recover(first=True)
    src = {0: 0, 1: 0}  # internal partition → next offset

    async def step(*recs: ForwardRecord, internal: int = 0) -> None:
        msgs = []
        for r in recs:
            msgs.append(Rec(src[internal], encode(r)))
            src[internal] += 1
        await w._step([Fetched(w.generation, decode_fetched({TopicPartition(INTERNAL, internal): msgs}, INTERNAL),
                               len(msgs))])

    assert w._stage_a_at_end() is False  # nothing said yet: an idle internal topic is no end of input
    await step(_forward(good, 0, 0, 99), _marker(0, 100, 100))
    assert w.offsets == {0: 100} and w.ended == {0: 100}
    assert w._stage_a_at_end() is False  # partition 1 unmarked
    # partition 1 holds no record at all: its marker (from the beginning, 0) sets its position
    await step(_marker(1, 0, 0), internal=1)
    assert w.offsets == {0: 100, 1: 0} and w.ended == {0: 100, 1: 0}
    assert w._stage_a_at_end() is True
    # more input on partition 0: the marker is stale until the next one
    await step(_forward(good, 100, 100, 149))
    assert w.offsets[0] == 150 and w._stage_a_at_end() is False
    # a stale marker (an older position, sent by an owner that had not seen 100..149) changes nothing
    await step(_marker(0, 100, 100))
    assert w.ended[0] == 100 and w._stage_a_at_end() is False
    # a marker vouching for offsets without records (150..154: transaction markers) moves the position past them
    await step(_marker(0, 150, 155))
    assert w.offsets[0] == 155 and w.ended[0] == 155 and w._stage_a_at_end() is True
    # a marker beyond the coordinator's position (a gap: a forward record still to come) is not taken
    await step(_marker(0, 160, 170))
    assert w.offsets[0] == 155 and w.ended[0] == 155
    assert w.stage.held_events == 150  # markers hold no events
    # the markers are checkpointed with the offsets they match: a restore needs no marker read again
    w.store.close()
    w2 = _coordinator(redis_url, Trace())
    await w2._recover(first=True)
    assert w2.offsets == {0: 155, 1: 0} and w2.ended == {0: 155, 1: 0} and w2._stage_a_at_end() is True
    assert w2.src_offsets == {0: 6, 1: 1} == src
    w2.store.close()


def test_role_all_drains_without_markers(redis_url):
    from streamdp.accounting.cost import budget_vector

    cfg = _cfg()
    store = RedisBudgetStore.from_url(redis_url, budget_vector(cfg.budget))
    w = KafkaWorker(cfg, store, {}, WorkerOptions.from_config(cfg.kafka, use_group=False), worker_id="a")
    w.input_partitions = {0, 1}
    assert w._stage_a_at_end() is True
    store.close()
