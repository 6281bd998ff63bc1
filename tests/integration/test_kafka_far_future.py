"""One far-future event is no poison pill (issue 26.1), against tansu and Redis.

In a one-partition topic with one-minute windows, one event 0.9 day ahead moves the watermark past ~1,300 windows.
Before 2026-12-07 the worker closed them all in ONE step — every record in one checkpoint and one publish round
(the fault campaign's 43,117 windows took 63 s and 1.25 GB, and a restart killed mid-step never moved its
checkpoint: a crash loop) — the engine's "closing N windows at once" warning never fired in the worker, and every
quiet window counted towards top_k's k*, so the one event ended top_k for good. Now the windows close in steps of
``CLOSE_STEP_WINDOWS``, each checkpointed and published before the next (a kill mid-advance leaves a checkpoint
part-way, and the restart resumes from it), the warning is logged, and top_k goes on."""

from __future__ import annotations

import collections

import orjson
import pytest

from streamdp.engine.engine import CLOSE_STEP_WINDOWS

from kafka_helpers import (checkpoint_info, engine_reference, produce, read_topic, service_config, start_worker,
                           wait_or_kill, write_config)

pytestmark = pytest.mark.integration

ORIGIN = 1_700_000_000.0
SERVICE = {"window_seconds": 60.0, "horizon": 64, "origin": ORIGIN, "max_future_seconds": 86400.0}
QUERIES = [{"id": "c", "kind": "continual_counts", "sigma": 1.0, "max_items_per_window": 2},
           {"id": "k", "kind": "top_k", "epsilon": 1.0, "delta": 1e-6, "k": 2, "kbar": 6, "k_star": 100}]


def _events() -> list[bytes]:
    evs = [orjson.dumps({"user": f"u{i % 20}", "ts": ORIGIN + i * 3.0, "items": [f"i{i % 5}"]}) for i in range(300)]
    evs.append(orjson.dumps({"user": "x", "ts": ORIGIN + 0.9 * 86400.0, "items": ["far"]}))
    # what follows in the partition is now far behind its watermark: late, not released
    evs += [orjson.dumps({"user": f"u{i % 20}", "ts": ORIGIN + 900.0 + i * 3.0, "items": ["after"]})
            for i in range(50)]
    return evs


def test_a_far_future_event_closes_its_windows_in_checkpointed_steps_and_a_restart_resumes(
        tansu, redis_server, tmp_path, topic_prefix):
    import redis

    events = _events()
    raw = service_config(topic_prefix, tansu.bootstrap, partitions=1, service=SERVICE, queries=QUERIES)
    records, dead, _ = engine_reference(raw, events, 1)
    n_windows = len(records) // 2
    assert n_windows > 4 * CLOSE_STEP_WINDOWS and sum(r == "late" for *_, r in dead) == 50
    cfg = write_config(tmp_path / "c.toml", raw)
    url = redis_server.url.rsplit("/", 1)[0] + "/9"
    redis.Redis.from_url(url).flushdb()
    assert produce(tansu.bootstrap, raw["kafka"]["input_topic"], events, 1) == len(events)
    log = tmp_path / "w.log"
    args = ["--config", cfg, "--store", url, "--standalone", "--drain-idle", "2", "--close-open-windows"]
    # killed right after its 3rd checkpoint: in the middle of the advance
    rc = wait_or_kill(start_worker(args, {"STREAMDP_CRASH_POINT": "after_checkpoint:3"}, str(log)), 60)
    assert rc == -9, log.read_text()[-3000:]
    info = checkpoint_info(url, raw["kafka"]["group_id"], raw["kafka"]["input_topic"])
    assert 0 < info["last_closed"] < n_windows  # a checkpoint part-way through the advance …
    assert info["records"] <= CLOSE_STEP_WINDOWS * len(QUERIES)  # … holding one step's records, not all of them
    assert "closing" in log.read_text() and "windows at once" in log.read_text()  # the warning fires
    assert wait_or_kill(start_worker(args, log_path=str(log)), 90) == 0, log.read_text()[-3000:]
    assert checkpoint_info(url, raw["kafka"]["group_id"], raw["kafka"]["input_topic"])["last_closed"] == n_windows

    got: dict[str, set[bytes]] = collections.defaultdict(set)
    for q in QUERIES:
        for _, _, k, v in read_topic(tansu.bootstrap, raw["kafka"]["output_prefix"] + q["id"], n_windows):
            got[k.decode()].add(v)
    assert {k: next(iter(v)) for k, v in got.items()} == records and all(len(v) == 1 for v in got.values())
    last_top = orjson.loads(records[f"k/{(n_windows - 1) // 64}/{(n_windows - 1) % 64 + 1}"])
    assert last_top["values"]["stopped"] is False  # quiet windows do not count towards k*
