"""The end of a bounded input in the staged topology (worker review of 2026-11-23, finding 2): the coordinator's
``--drain-idle`` looked at the internal topic only, so a stage A that had not forwarded everything yet — down,
frozen, rebalancing, behind — was taken for the end of the input, and the missing partitions' events came out late.

Here, without a broker: the gate of the coordinator's drain (``KafkaWorker._stage_a_done``: the input-topic probe
decides, at most once per ``drain_idle``, and its "waiting" is logged once per idle spell) and stage A's own
``--drain-idle`` condition (``topics.all_read_to_end``, shared with the ``all`` worker's drain). The probe itself
reads a real broker: ``tests/integration/test_staged_drain_probe.py`` and the last test of
``tests/integration/test_kafka_staged.py``.
"""

from __future__ import annotations

import logging
import types

from aiokafka import TopicPartition

from streamdp.adapters.kafka.ingest import IngestWorker
from streamdp.adapters.kafka.worker import KafkaWorker, WorkerOptions
from streamdp.filter.redis_store import RedisBudgetStore

from test_worker_protocol_gaps3 import TOPIC, Consumer, Trace, _cfg


class EndConsumer(Consumer):
    """Two input partitions with settable positions and high watermarks (None: no fetch answered yet)."""

    def __init__(self, trace: Trace, parts=(0, 1)) -> None:
        super().__init__(trace)
        self.parts = parts
        self.pos = {p: 0 for p in parts}
        self.hw: dict[int, int | None] = {p: None for p in parts}

    def assignment(self):
        return {TopicPartition(TOPIC, p) for p in self.parts}

    def highwater(self, tp):
        return self.hw[tp.partition]

    async def position(self, tp):
        return self.pos[tp.partition]


async def test_an_ingest_worker_is_at_the_end_only_when_every_partition_answered_and_is_read_to_its_high_watermark():
    from streamdp.adapters.kafka.topics import all_read_to_end

    ing = types.SimpleNamespace(consumer=EndConsumer(Trace()))
    ing._at_end = lambda: all_read_to_end(ing.consumer, TOPIC)
    c = ing.consumer
    assert not await ing._at_end()  # no fetch answered: idle is not the end
    c.hw[0], c.pos[0] = 120, 120
    assert not await ing._at_end()  # partition 1 has not answered
    c.hw[1], c.pos[1] = 60, 50
    assert not await ing._at_end()  # partition 1 read to 50 of 60
    c.pos[1] = 60
    assert await ing._at_end()
    c.hw[0] = 130  # more input arrived (a later fetch answer): not at the end any more
    assert not await ing._at_end()
    ing.consumer = EndConsumer(Trace(), parts=())
    assert await ing._at_end()  # nothing assigned (more ingest workers than partitions): nothing to wait for


def _worker(redis_url: str, role: str, drain_idle: float = 2.0) -> KafkaWorker:
    from streamdp.accounting.cost import budget_vector

    cfg = _cfg()
    store = RedisBudgetStore.from_url(redis_url, budget_vector(cfg.budget))
    opts = WorkerOptions.from_config(cfg.kafka, use_group=False, offload=False, role=role, drain_idle=drain_idle)
    w = KafkaWorker(cfg, store, {}, opts, worker_id="c-test")
    w.input_partitions = {0, 1}
    return w


async def test_the_coordinator_drains_only_when_the_probe_finds_nothing_unforwarded(redis_url, monkeypatch, caplog):
    w = _worker(redis_url, "coordinator", drain_idle=2.0)
    answers = [{1: 40}, None, {}, {}]
    probes = []

    async def probe(timeout: float = 10.0):
        probes.append(timeout)
        return answers[len(probes) - 1]

    monkeypatch.setattr(w, "_unforwarded", probe)
    clock = [1000.0]
    monkeypatch.setattr("streamdp.adapters.kafka.worker.time.monotonic", lambda: clock[0])
    caplog.set_level(logging.INFO, logger="streamdp.kafka")
    assert await w._stage_a_done() is False  # partition 1 holds records stage A has not forwarded
    waiting = [r for r in caplog.records if "waiting for stage A" in r.getMessage()]
    assert len(waiting) == 1 and waiting[0].partitions == {1: {"coordinator_offset": None, "first_record": 40}}
    clock[0] += 1.0
    assert await w._stage_a_done() is False and len(probes) == 1  # not probed again within drain_idle
    clock[0] += 1.0
    assert await w._stage_a_done() is False and len(probes) == 2  # no answer from the broker: not drained
    assert len([r for r in caplog.records if "waiting for stage A" in r.getMessage()]) == 1  # said once
    clock[0] += 2.0
    assert await w._stage_a_done() is True and len(probes) == 3
    w.store.close()


async def test_a_failing_probe_does_not_drain_and_role_all_never_probes(redis_url, monkeypatch):
    from aiokafka.errors import KafkaConnectionError

    def raising(exc: Exception):
        async def probe(timeout: float = 10.0):
            raise exc
        return probe

    w = _worker(redis_url, "coordinator")
    monkeypatch.setattr(w, "_unforwarded", raising(KafkaConnectionError("broker down (test)")))
    assert await w._stage_a_done() is False
    w.store.close()

    a = _worker(redis_url, "all")
    monkeypatch.setattr(a, "_unforwarded", raising(AssertionError("role all must not probe")))
    assert await a._stage_a_done() is True
    a.store.close()


async def test_the_probe_is_bounded_in_all_and_a_sigterm_ends_it():
    """A broker that accepts connections and never answers: the probe gives up after its timeout (connecting and
    the offsets lookups included, not only the fetches: aiokafka's own request timeout is 40 s), and a SIGTERM
    (``stopping``) ends it at once. Either way: no answer (None), not a drain."""
    import asyncio
    import time
    import types

    conns = []
    srv = await asyncio.start_server(lambda r, w: conns.append(w), "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    ns = types.SimpleNamespace(opts=types.SimpleNamespace(input_topic="x"), input_partitions={0}, offsets={0: 5},
                               client_kw={"bootstrap_servers": f"127.0.0.1:{port}"}, stopping=asyncio.Event())
    ns._probe = lambda probe: KafkaWorker._probe(ns, probe)
    try:
        t = time.monotonic()
        assert await KafkaWorker._unforwarded(ns, 1.5) is None
        assert time.monotonic() - t < 5.0
        asyncio.get_running_loop().call_later(0.3, ns.stopping.set)
        t = time.monotonic()
        assert await KafkaWorker._unforwarded(ns, 30.0) is None
        assert time.monotonic() - t < 5.0
    finally:
        for w in conns:
            w.close()
        srv.close()
        await srv.wait_closed()


async def test_an_idle_ingest_worker_with_drain_idle_stops_only_at_the_end_of_its_input():
    import asyncio

    ing = IngestWorker({}, WorkerOptions.from_config(_cfg().kafka, drain_idle=0.0), worker_id="i")
    c = EndConsumer(Trace())
    polls = []

    async def getmany(timeout_ms, max_records):
        polls.append(1)
        await asyncio.sleep(0.01)
        return {}  # idle: nothing fetched

    c.getmany = getmany
    ing.consumer = c
    loop = asyncio.ensure_future(ing._loop())
    await asyncio.sleep(0.2)
    assert not loop.done() and len(polls) > 3  # idle past drain_idle, but no partition has answered yet
    c.hw[0], c.pos[0], c.hw[1], c.pos[1] = 5, 5, 9, 3
    await asyncio.sleep(0.2)
    assert not loop.done()  # partition 1 read to 3 of 9
    c.pos[1] = 9
    await asyncio.wait_for(loop, 2.0)  # at the end: it stops
