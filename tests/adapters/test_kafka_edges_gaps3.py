"""Kafka-facing edges without a broker: ``replay`` (every line, in order, keyed by user; a failed send is an error),
``start_retrying`` (backoff doubling to its cap, half-started clients stopped), ``ensure_topics`` (existing topics
left alone, a concurrent creator tolerated, any other error raised), the SASL/SSL client settings, and the lean
fetch over a batch whose last records compaction removed. aiokafka's producer and admin client are replaced by
recorders; the lean fetch is compared with aiokafka's own iterator."""

from __future__ import annotations

import asyncio
import logging
import struct
import subprocess

import aiokafka
import aiokafka.admin
import pytest
from aiokafka.errors import KafkaConnectionError, KafkaError
from aiokafka.record.util import calc_crc32c

from streamdp.adapters.kafka.broker_config import client_kwargs
from streamdp.adapters.kafka.replay import replay
from streamdp.adapters.kafka.topics import ensure_topics, start_retrying

from test_lean_fetch import ATTRIBUTES_AT, CRC_AT, batch_bytes, both


# ------------------------------------------------------------------------------------------------ replay
class FakeProducer:
    """Records sends; the send numbers in ``fail`` resolve with a KafkaError (as a refused produce would)."""

    last = None

    def __init__(self, **kw):
        self.kw, self.sent, self.flushed, self.stopped = kw, [], False, False
        FakeProducer.last = self

    async def start(self):
        pass

    async def send(self, topic, value=None, key=None):
        self.sent.append((topic, value, key))
        fut = asyncio.get_running_loop().create_future()
        if len(self.sent) in FakeProducer.fail:
            fut.set_exception(KafkaError("refused"))
        else:
            fut.set_result(None)
        return fut

    async def flush(self):
        self.flushed = True

    async def stop(self):
        self.stopped = True


@pytest.fixture
def producer(monkeypatch):
    FakeProducer.fail = set()
    monkeypatch.setattr(aiokafka, "AIOKafkaProducer", FakeProducer)
    return FakeProducer


EVENTS = [b'{"user": "u1", "ts": 1}', b'{"user": "u2", "ts": 2}', b'{"user": 7, "ts": 3}', b'{"user": "u1"',
          b'{"ts": 5}', b'{"user": true, "ts": 6}', b'[1, 2]']
KEYS = [b"u1", b"u2", b"7", None, None, None, None]  # no readable user (or a boolean one): no key


@pytest.mark.parametrize("rate", [None, 200.0])
def test_replay_sends_every_line_once_in_order_keyed_by_user(producer, rate):
    """Without a rate, sends are awaited per chunk of 3; at 200 events/s replay runs ahead of the rate from the
    second event and awaits what it sent before sleeping (the chunk is never reached)."""
    progress = []
    n = asyncio.run(replay(iter(EVENTS), "in", {}, rate=rate, create=False, progress=progress.append,
                           chunk=3 if rate is None else 5000))
    p = producer.last
    assert n == len(EVENTS)
    assert p.sent == [("in", e, k) for e, k in zip(EVENTS, KEYS)]
    assert sum(progress) == len(EVENTS) and all(x > 0 for x in progress)
    if rate is None:
        assert progress == [3, 3, 1]
    assert p.flushed and p.stopped


@pytest.mark.parametrize("rate,failing", [(None, 2), (None, 7), (200.0, 2), (200.0, 7)])
def test_replay_does_not_swallow_a_failed_send(producer, rate, failing):
    producer.fail = {failing}
    with pytest.raises(KafkaError):
        asyncio.run(replay(iter(EVENTS), "in", {}, rate=rate, create=False, chunk=3 if rate is None else 5000))
    assert producer.last.stopped


# ------------------------------------------------------------------------------------------------ start_retrying
class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.retry_in = []

    def emit(self, record):
        if hasattr(record, "retry_in"):
            self.retry_in.append(record.retry_in)


def test_start_retrying_backs_off_to_the_cap_and_stops_half_started_clients():
    calls = {"start": 0, "stop": 0}

    async def start():
        calls["start"] += 1
        if calls["start"] <= 4:
            raise KafkaConnectionError("no broker")

    async def stop():
        calls["stop"] += 1

    h = _Records()
    lg = logging.getLogger("streamdp.kafka")
    lg.addHandler(h)
    try:
        ok = asyncio.run(start_retrying(start, stop, asyncio.Event(), first_delay=0.01, max_delay=0.03))
    finally:
        lg.removeHandler(h)
    assert ok is True and calls == {"start": 5, "stop": 4}
    assert h.retry_in == pytest.approx([0.01, 0.02, 0.03, 0.03])


def test_start_retrying_gives_up_when_stopping():
    calls = []

    async def start():
        calls.append("start")
        raise OSError("refused")

    async def stop():
        calls.append("stop")

    async def go():
        stopping = asyncio.Event()
        asyncio.get_running_loop().call_later(0.05, stopping.set)
        return await start_retrying(start, stop, stopping, first_delay=0.5, max_delay=10.0)

    assert asyncio.run(go()) is False
    assert calls == ["start", "stop"]  # one attempt, its clients stopped, nothing retried after the stop signal


# ------------------------------------------------------------------------------------------------ ensure_topics
class FakeAdmin:
    errors: list = []

    def __init__(self, **kw):
        FakeAdmin.made = self
        self.requested, self.closed = None, False

    async def start(self):
        pass

    async def list_topics(self):
        return ["old"]

    async def create_topics(self, topics):
        self.requested = [(t.name, t.num_partitions, t.replication_factor, t.topic_configs) for t in topics]

        class Resp:
            topic_errors = FakeAdmin.errors
        return Resp()

    async def close(self):
        self.closed = True


def test_ensure_topics_creates_the_missing_ones_and_tolerates_a_concurrent_creator(monkeypatch):
    monkeypatch.setattr(aiokafka.admin, "AIOKafkaAdminClient", FakeAdmin)
    FakeAdmin.errors = [("a", 0, None), ("b", 36, "Topic 'b' already exists.")]
    created = asyncio.run(ensure_topics({}, ["old", "a", "b", "a"], 3, configs={"cleanup.policy": "compact"}))
    assert created == ["a"]
    assert FakeAdmin.made.requested == [("a", 3, 1, {"cleanup.policy": "compact"}),
                                        ("b", 3, 1, {"cleanup.policy": "compact"})]
    assert FakeAdmin.made.closed
    FakeAdmin.errors = [("a", 0, None), ("b", 29, "Topic authorization failed.")]
    with pytest.raises(RuntimeError, match="'b'.*29"):
        asyncio.run(ensure_topics({}, ["a", "b"], 2))
    assert FakeAdmin.made.closed


# ------------------------------------------------------------------------------------------------ SASL / SSL
def test_sasl_plaintext_passes_the_credentials_without_tls():
    kw = client_kwargs({"bootstrap": "b:9092", "security_protocol": "SASL_PLAINTEXT",
                        "sasl_mechanism": "SCRAM-SHA-256", "sasl_username": "svc", "sasl_password": "pw"})
    assert (kw["security_protocol"], kw["sasl_mechanism"], kw["sasl_plain_username"], kw["sasl_plain_password"]) \
        == ("SASL_PLAINTEXT", "SCRAM-SHA-256", "svc", "pw")
    assert "ssl_context" not in kw
    assert client_kwargs({"security_protocol": "SASL_PLAINTEXT", "sasl_username": "svc",
                          "sasl_password": ""})["sasl_mechanism"] == "PLAIN"


def test_ssl_cafile_is_loaded_into_the_context(tmp_path):
    cert, key = tmp_path / "ca.pem", tmp_path / "ca.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj",
                    "/CN=streamdp-gaps3-ca"], check=True, capture_output=True)
    for proto in ("SSL", "SASL_SSL"):
        k = {"security_protocol": proto, "ssl_cafile": str(cert)}
        if proto == "SASL_SSL":
            k.update(sasl_username="u", sasl_password="p")
        ctx = client_kwargs(k)["ssl_context"]
        subjects = [dict(x[0] for x in c["subject"]).get("commonName") for c in ctx.get_ca_certs()]
        assert "streamdp-gaps3-ca" in subjects, proto  # the configured CA, not only the system's
        assert ctx.check_hostname


# ------------------------------------------------------------------------------------------------ lean fetch
def compacted_tail(base: int, deltas: list[int], values: list, last_delta: int) -> bytes:
    """A v2 batch whose header keeps ``last_delta`` after compaction removed its last records (Kafka keeps a
    batch's last offset so that consumers move past it)."""
    buf = bytearray(batch_bytes(base, deltas, values))
    struct.pack_into(">i", buf, ATTRIBUTES_AT + 2, last_delta)  # lastOffsetDelta follows the attributes
    struct.pack_into(">I", buf, CRC_AT, calc_crc32c(bytes(buf[ATTRIBUTES_AT:])))
    return bytes(buf)


@pytest.mark.parametrize("fetch_offset", [200, 201])
def test_lean_fetch_moves_past_a_batch_whose_last_records_were_compacted(fetch_offset):
    data = compacted_tail(200, [0, 1], [b"a", b"b"], 4) + batch_bytes(205, [0, 1], [b"c", b"d"])
    (ref, ref_pos), (lean, lean_pos), _ = both(data, fetch_offset)
    assert lean == ref == [(o, v) for o, v in [(200, b"a"), (201, b"b"), (205, b"c"), (206, b"d")]
                           if o >= fetch_offset]
    assert lean_pos == ref_pos == 207
    (ref, ref_pos), (lean, lean_pos), _ = both(compacted_tail(200, [0, 1], [b"a", b"b"], 4), fetch_offset)
    assert lean_pos == ref_pos == 205  # not 202: a re-fetch from 202 would return this batch again
