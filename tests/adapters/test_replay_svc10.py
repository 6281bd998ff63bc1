"""Service review s10/svc, finding 7d: ``streamdp replay FILE`` stopped at the first line of 2 MiB or more (more than
the producer's ``max_request_size``) with ``replay failed: [Error 10] MessageSizeTooLargeError …``, naming neither
the line nor how many events were sent; the lines after it were never sent. A line too large to send is now skipped
with a warning naming ``FILE:LINE`` and the replay goes on; any other failed send stops it with an error naming the
line and the number of events the broker acknowledged. aiokafka's producer is replaced by a recorder."""

from __future__ import annotations

import asyncio

import aiokafka
import pytest
from aiokafka.errors import KafkaError, MessageSizeTooLargeError

from streamdp.adapters.kafka.replay import JsonlFile, ReplayError, replay
from streamdp.cli.main import main

LIMIT = 2 * 1024 * 1024


class FakeProducer:
    """Refuses a value over its ``max_request_size`` in ``send`` (as aiokafka does); the values in ``broker_too_large``
    / ``broker_fail`` fail their future (as the broker's MESSAGE_TOO_LARGE / another error would)."""

    last = None
    broker_too_large: set = set()
    broker_fail: set = set()

    def __init__(self, **kw):
        self.kw, self.sent = kw, []
        FakeProducer.last = self

    async def start(self):
        pass

    async def send(self, topic, value=None, key=None):
        if len(value) > self.kw["max_request_size"]:
            raise MessageSizeTooLargeError(f"The message is {len(value)} bytes when serialized which is larger "
                                           "than the maximum request size")
        fut = asyncio.get_running_loop().create_future()
        if value in self.broker_too_large:
            fut.set_exception(MessageSizeTooLargeError())
        elif value in self.broker_fail:
            fut.set_exception(KafkaError("refused"))
        else:
            self.sent.append(value)
            fut.set_result(None)
        return fut

    async def flush(self):
        pass

    async def stop(self):
        pass


@pytest.fixture
def producer(monkeypatch):
    import streamdp.adapters.kafka.topics as topics

    async def no_admin(*a, **k):
        return []

    FakeProducer.broker_too_large, FakeProducer.broker_fail = set(), set()
    monkeypatch.setattr(aiokafka, "AIOKafkaProducer", FakeProducer)
    monkeypatch.setattr(topics, "ensure_topics", no_admin)
    return FakeProducer


def _event(i: int) -> bytes:
    return b'{"user": "u%d", "ts": %d}' % (i, 100 + i)


BIG = b'{"user": "big", "ts": 1, "items": ["' + b"x" * (3 * 1024 * 1024) + b'"]}'


@pytest.fixture
def big_file(tmp_path):
    """100 events, a 3 MB line (line 102: a blank line before it), 100 events."""
    path = tmp_path / "big.jsonl"
    lines = [_event(i) for i in range(100)] + [b"", BIG] + [_event(i) for i in range(100, 200)]
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_jsonl_file_names_the_line_of_each_event(tmp_path):
    path = tmp_path / "e.jsonl"
    path.write_bytes(b"a\r\n\n\nb\nc\n\r\nd")
    f = JsonlFile(str(path))
    assert list(f) == [b"a", b"b", b"c", b"d"]  # as sources.jsonl_events reads it
    assert [f.where(i) for i in range(4)] == [f"{path}:1", f"{path}:4", f"{path}:5", f"{path}:7"]
    assert list(f) == [b"a", b"b", b"c", b"d"] and f.where(3) == f"{path}:7"  # read again: the same


@pytest.mark.parametrize("chunk", [5000, 7])
def test_a_line_too_large_to_send_is_skipped_with_its_line_named(producer, big_file, chunk):
    warnings, progress = [], []
    f = JsonlFile(str(big_file))
    n = asyncio.run(replay(f, "t", {}, create=False, where=f.where, on_skip=warnings.append,
                           progress=progress.append, chunk=chunk))
    assert n == 200 and producer.last.sent == [_event(i) for i in range(200)]  # the lines after it are sent too
    assert len(warnings) == 1 and warnings[0].startswith(f"{big_file}:102: ")
    assert f"{len(BIG):,} bytes" in warnings[0] and "not sent" in warnings[0]
    assert sum(progress) == 201  # the bar counts the skipped line as processed


def test_a_line_the_broker_refuses_as_too_large_is_skipped_with_its_line_named(producer, big_file):
    producer.broker_too_large = {_event(150)}
    warnings = []
    f = JsonlFile(str(big_file))
    n = asyncio.run(replay(f, "t", {}, create=False, where=f.where, on_skip=warnings.append, chunk=7))
    assert n == 199 and _event(150) not in producer.last.sent and _event(199) in producer.last.sent
    assert [w.split(": ", 1)[0] for w in warnings] == [f"{big_file}:102", f"{big_file}:153"]


def test_another_failed_send_stops_the_replay_naming_the_line(producer, big_file):
    producer.broker_fail = {_event(120)}
    f = JsonlFile(str(big_file))
    with pytest.raises(ReplayError) as e:
        asyncio.run(replay(f, "t", {}, create=False, where=f.where, on_skip=lambda m: None, chunk=7))
    assert isinstance(e.value, KafkaError)  # still a Kafka error for callers that catch those
    assert e.value.where == f"{big_file}:123" and e.value.acknowledged == len(producer.last.sent)
    assert str(e.value).startswith(f"{big_file}:123: ") and "refused" in str(e.value)


def test_without_where_an_event_is_named_by_its_number(producer):
    warnings = []
    n = asyncio.run(replay([_event(0), BIG, _event(1)], "t", {}, create=False, on_skip=warnings.append))
    assert n == 2 and warnings[0].startswith("event 2: ")


def test_replay_cli_skips_the_big_line_and_names_it(producer, big_file, capsys):
    # the rest of the file is sent, and the exit status says the file was not sent whole
    assert main(["replay", str(big_file), "--topic", "bigN", "--bootstrap", "b:1", "--quiet"]) == 1
    out, err = capsys.readouterr()
    assert len(producer.last.sent) == 200 and "200 events → bigN" in out and "1 line skipped" in out
    assert f"streamdp: warning: {big_file}:102: " in err and "Traceback" not in err


def test_replay_cli_names_the_line_of_a_failed_send(producer, big_file, capsys):
    producer.broker_fail = {_event(120)}
    assert main(["replay", str(big_file), "--topic", "bigN", "--bootstrap", "b:1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2  # the warning about line 102, then the error
    assert f"streamdp: error: replay failed at {big_file}:123: " in err and "events acknowledged" in err
