"""``continual_sums`` in the Kafka service (``streamdp run``) against a real broker (tansu) and a real redis-server,
next to ``continual_counts`` as in examples/flights_sums.toml: the worker's releases are byte for byte the embedded
pipeline's (test-mode noise, same seed), users were charged the same fixed-point amounts, every record validates
against its kind's schema, and flights without a departure delay reach the dead-letter topic as ``missing_value``.
"""

from __future__ import annotations

import collections
import tomllib
from pathlib import Path

import orjson
import pytest

from streamdp.adapters.kafka.schemas import release_validator
from streamdp.filter.redis_store import RedisBudgetStore
from streamdp.input import sources

from kafka_helpers import (embedded_releases, produce, read_topic, service_config, spent_by_user, start_worker,
                           wait_or_kill, write_config)

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "flights_sums.toml"


def test_continual_sums_through_the_kafka_worker(tansu, redis_url, topic_prefix, tmp_path):
    example = tomllib.loads(EXAMPLE.read_text())
    raw = service_config(topic_prefix, tansu.bootstrap, partitions=1, queries=example["query"],
                         budget=example["budget"])
    events = list(sources.nycflights13_events(20000))
    assert produce(tansu.bootstrap, raw["kafka"]["input_topic"], events, 1) == len(events)
    cfg = write_config(tmp_path / "service.toml", raw)
    p = start_worker(["--config", cfg, "--store", redis_url, "--drain-idle", "2", "--session-timeout-ms", "6000",
                      "--close-open-windows"],
                     log_path=str(tmp_path / "worker.log"))
    assert wait_or_kill(p, 150) == 0, (tmp_path / "worker.log").read_text()[-3000:]

    expected, dead, mem = embedded_releases(raw, events)
    got: dict[str, bytes] = {}
    for q in raw["query"]:
        validate = release_validator(q["kind"])
        for _, _, k, v in read_topic(tansu.bootstrap, raw["kafka"]["output_prefix"] + q["id"],
                                     sum(1 for key in expected if key.startswith(q["id"] + "/"))):
            assert got.setdefault(k.decode(), v) == v, f"two different records published for {k.decode()}"
            validate.validate(orjson.loads(v))
    assert sorted(got) == sorted(expected) and len(expected) >= 2 * 20
    for k in expected:
        assert got[k] == expected[k], k
    last = orjson.loads(expected[max((k for k in expected if k.startswith("flights/")),
                                     key=lambda k: int(k.split("/")[2]))])
    assert last["values"]["counts"] and last["values"]["sums"]  # destinations published, with their delay sums
    rs = RedisBudgetStore.from_url(redis_url)
    assert spent_by_user(rs) == spent_by_user(mem)
    reasons = collections.Counter(d.reason for d in dead)
    assert reasons["missing_value"] > 0  # cancelled flights: items but no departure delay
    dl = [orjson.loads(v) for *_, v in read_topic(tansu.bootstrap, raw["kafka"]["dead_letter_topic"], len(dead))]
    assert collections.Counter(d["reason"] for d in dl) == reasons
    rs.close()
