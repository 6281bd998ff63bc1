"""A broker that comes back empty under a running worker (issue 26.2, 26.3), against a tansu of its own (restarted
on the same port with in-memory storage: every topic and committed offset gone) and Redis.

* SIGTERM is honoured at once with exit code 5 (stopped during an outage): the offset commit on the shutdown path
  is bounded. Before, aiokafka retried the commit of the vanished topic for ever, the worker ignored SIGTERM (only
  SIGKILL stopped it) and logged ~40 lines a second.
* ``--drain-idle`` does not take a read position past the end of the log for "read to the end": the input topic
  recreated and refilled with fewer records than the checkpoint had read is reported (exit 4), and nothing is
  closed. Before, the drain released the open windows as final from part of their events and exited 0."""

from __future__ import annotations

import signal
import time

import orjson
import pytest
import redis

from conftest import TansuBroker, free_port

from kafka_helpers import (checkpoint_info, produce, read_topic, service_config, start_worker, wait_for,
                           wait_or_kill, write_config)

pytestmark = pytest.mark.integration

ORIGIN = 1_700_000_000.0
SERVICE = {"window_seconds": 600.0, "origin": ORIGIN, "horizon": 64}


def _events(n: int, start: int = 0) -> list[bytes]:
    return [orjson.dumps({"user": f"u{i % 11}", "ts": ORIGIN + i * 5.0, "items": [f"i{i % 3}"]})
            for i in range(start, start + n)]


@pytest.fixture
def own_broker():
    port = free_port()
    holder = {"b": TansuBroker(port)}

    def restart_empty() -> TansuBroker:
        holder["b"].stop()
        holder["b"] = TansuBroker(port)
        return holder["b"]

    yield holder["b"], restart_empty
    holder["b"].stop()


def test_sigterm_after_the_input_topic_vanished_exits_5_at_once(own_broker, redis_server, tmp_path):
    broker, restart_empty = own_broker
    raw = service_config("lost.", broker.bootstrap, partitions=2, service=SERVICE)
    cfg = write_config(tmp_path / "c.toml", raw)
    url = redis_server.url.rsplit("/", 1)[0] + "/11"
    redis.Redis.from_url(url).flushdb()
    produce(broker.bootstrap, raw["kafka"]["input_topic"], _events(400), 2)
    log = tmp_path / "w.log"
    w = start_worker(["--config", cfg, "--store", url, "--standalone", "--checkpoint-seconds", "1"],
                     log_path=str(log))
    try:
        wait_for(lambda: checkpoint_info(url, raw["kafka"]["group_id"], raw["kafka"]["input_topic"])
                 .get("last_closed", 0) >= 2, 60, "the first windows", w)
        restart_empty()  # every topic and committed offset is gone
        time.sleep(3.0)
        lines_before = len(log.read_bytes().splitlines())
        t0 = time.monotonic()
        w.send_signal(signal.SIGTERM)
        rc = wait_or_kill(w, 20)
        took = time.monotonic() - t0
    finally:
        if w.poll() is None:
            w.kill()
            w.wait()
    text = log.read_text()
    assert rc == 5, text[-3000:]
    assert took < 8.0, f"SIGTERM took {took:.1f} s"
    assert "stopping while Kafka is failing" in text
    assert len(text.splitlines()) - lines_before < 40, "log flood after SIGTERM"


def test_a_drain_does_not_take_a_position_past_the_end_for_the_end(own_broker, redis_server, tmp_path):
    broker, restart_empty = own_broker
    raw = service_config("trunc.", broker.bootstrap, partitions=1, service=SERVICE)
    topic = raw["kafka"]["input_topic"]
    cfg = write_config(tmp_path / "c.toml", raw)
    url = redis_server.url.rsplit("/", 1)[0] + "/12"
    redis.Redis.from_url(url).flushdb()
    produce(broker.bootstrap, topic, _events(300), 1)
    args = ["--config", cfg, "--store", url, "--standalone", "--drain-idle", "1.5"]
    log = tmp_path / "w.log"
    assert wait_or_kill(start_worker(args, log_path=str(log)), 60) == 0, log.read_text()[-3000:]
    info = checkpoint_info(url, raw["kafka"]["group_id"], topic)
    assert info["held_events"] > 0  # the open window stays open: no --close-open-windows

    broker = restart_empty()
    produce(broker.bootstrap, topic, _events(120, start=300), 1)  # recreated, refilled: 120 < 300 records
    log2 = tmp_path / "w2.log"
    rc = wait_or_kill(start_worker(args + ["--close-open-windows"], log_path=str(log2)), 60)
    text = log2.read_text()
    assert rc == 4, text[-3000:]
    assert "past the end of the log" in text
    after = checkpoint_info(url, raw["kafka"]["group_id"], topic)
    assert after["last_closed"] == info["last_closed"]  # nothing was closed on it
    for q in raw["query"]:
        assert read_topic(broker.bootstrap, raw["kafka"]["output_prefix"] + q["id"], 0, idle=0.5) == []
