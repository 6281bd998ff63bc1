"""Service review s10/svc, finding 7e: an existing internal topic with fewer partitions than the input stopped
``streamdp run --role ingest|coordinator`` with a Python traceback (exit 1, documented as "an unexpected error")
and "Unclosed AIOKafkaConsumer" noise. The start now refuses with one line naming the topic and the partitions it
needs (exit 2), after stopping the half-started clients; a topic that cannot be created or never appears is refused
the same way."""

from __future__ import annotations

import asyncio

import pytest

from streamdp.adapters.kafka.topics import TopicSetupError, check_internal_topic, start_retrying
from streamdp.cli.main import main

# the words of the workers' former check (ingest.py and worker.py now call check_internal_topic)
WORKER_WORDS = ("internal topic 'ip.int.parsed' has 1 partitions, the input topic 'b3.events' 3: it needs one per "
                "input partition")


def _too_small() -> TopicSetupError:
    """What the workers raise at start for this internal topic (they call check_internal_topic)."""
    try:
        check_internal_topic("ip.int.parsed", 1, "b3.events", 3)
    except TopicSetupError as e:
        return e
    raise AssertionError("check_internal_topic accepted a too-small topic")


def _start(error: Exception):
    calls = {"start": 0, "stop": 0}

    async def start():
        calls["start"] += 1
        raise error

    async def stop():
        calls["stop"] += 1

    async def go():
        return await start_retrying(start, stop, asyncio.Event(), first_delay=0.01)

    return go, calls


def test_the_workers_too_small_internal_topic_becomes_a_setup_error_and_the_clients_are_stopped():
    go, calls = _start(_too_small())
    with pytest.raises(TopicSetupError) as e:
        asyncio.run(go())
    assert calls == {"start": 1, "stop": 1}  # not retried; the half-started clients are stopped
    msg = str(e.value)
    assert "'ip.int.parsed' has 1 partition," in msg and "'b3.events' 3" in msg and "at least 3" in msg
    assert "\n" not in msg


@pytest.mark.parametrize("error", [RuntimeError("something else"), RuntimeError(WORKER_WORDS), ValueError(WORKER_WORDS), KeyError("x")])
def test_another_error_at_start_is_raised_as_it_is_after_stopping_the_clients(error):
    go, calls = _start(error)
    with pytest.raises(type(error)) as e:
        asyncio.run(go())
    assert e.value is error and not isinstance(e.value, TopicSetupError)
    assert calls == {"start": 1, "stop": 1}


def test_check_internal_topic():
    check_internal_topic("i", 3, "in", 3)
    check_internal_topic("i", 4, "in", 3)
    with pytest.raises(TopicSetupError, match=r"'i' has 2 partitions, the input topic 'in' 3: it needs at least 3"):
        check_internal_topic("i", 2, "in", 3)


def test_topic_partitions_of_a_missing_topic_is_a_setup_error():
    from streamdp.adapters.kafka.topics import topic_partitions

    class Client:
        async def force_metadata_update(self):
            pass

    class Consumer:
        _client = Client()

        def partitions_for_topic(self, topic):
            return None

    with pytest.raises(TopicSetupError, match="'nope' has no partitions"):
        asyncio.run(topic_partitions(Consumer(), "nope", timeout=0.0))


@pytest.mark.parametrize("role", ["ingest", "coordinator"])
def test_run_refuses_the_start_in_one_line_with_exit_2(role, tmp_path, monkeypatch, capsys):
    import streamdp.adapters.kafka.ingest as ingest
    import streamdp.adapters.kafka.logs as logs
    import streamdp.adapters.kafka.worker as worker
    import streamdp.cli.service as service

    class FakeStore:
        budget = None

        def default_budget(self):  # a new store: the configuration's default (run reads it for its warnings)
            return self.budget

        def close(self):
            pass

    class Refused:
        def __init__(self, *a, **k):
            pass

        async def run(self):
            go, _ = _start(_too_small())
            return await go()

    def fake_open(url, budget, wait):
        st = FakeStore()
        st.budget = budget
        return st

    monkeypatch.setattr(service, "open_store_retrying", fake_open)
    monkeypatch.setattr(worker, "KafkaWorker", Refused)
    monkeypatch.setattr(ingest, "IngestWorker", Refused)
    monkeypatch.setattr(logs, "setup_logging", lambda *a, **k: None)
    assert main(["run", "--role", role, "--store", "redis://127.0.0.1:1/0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("streamdp: error: internal topic 'ip.int.parsed' has 1 partition,")
    assert "at least 3" in err and "Traceback" not in err
