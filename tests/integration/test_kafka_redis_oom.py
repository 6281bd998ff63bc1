"""Redis refusing writes (out of memory: ``maxmemory`` below what it holds, ``noeviction``): the worker backs off
0.2 s doubling to 10 s between failed steps, as OPERATIONS says, and goes on once Redis takes writes again
(issue 26.4). Before 2026-12-07 any step that succeeded without writing (a fetched batch that closed no window)
reset the failure count, so the doubling never applied: 28 full checkpoint restores in 8 s in the fault campaign."""

from __future__ import annotations

import signal
import time

import orjson
import pytest
import redis

from kafka_helpers import (checkpoint_info, produce, service_config, start_worker, wait_for, wait_or_kill,
                           write_config)
from outage_helpers import PersistentRedis, log_lines

pytestmark = pytest.mark.integration

ORIGIN = 1_700_000_000.0
FAILED = "step failed; restoring the last checkpoint"


PAD = [f"{'x' * 90}{j:04d}" for j in range(200)]  # 20 KB of items per event: big checkpoints, small claims


def _events(lo: int, hi: int) -> list[bytes]:
    # five-minute windows, an event every 1.5 s: a window closes every 200 events (its checkpoint appends ~4 MB of
    # held events), and with fetches of 20 records most steps write nothing
    return [orjson.dumps({"user": f"u{i % 13}", "ts": ORIGIN + i * 1.5, "items": [f"i{i % 4}", *PAD]})
            for i in range(lo, hi)]


def _failed_at(log) -> list[float]:
    """The times of the worker's failed steps (its JSON log)."""
    return [d["ts"] for d in log_lines(log) if d.get("msg") == FAILED]


def test_failed_steps_back_off_while_redis_refuses_writes(tansu, tmp_path, topic_prefix):
    srv = PersistentRedis()
    try:
        raw = service_config(topic_prefix, tansu.bootstrap, partitions=1,
                             service={"window_seconds": 300.0, "origin": ORIGIN, "horizon": 64})
        raw["kafka"]["batch_max_records"] = 20
        cfg = write_config(tmp_path / "c.toml", raw)
        topic = raw["kafka"]["input_topic"]
        produce(tansu.bootstrap, topic, _events(0, 500), 1)
        log = tmp_path / "w.log"
        w = start_worker(["--config", cfg, "--store", srv.url, "--standalone", "--checkpoint-seconds", "1000",
                          "--checkpoint-batches", "1000", "--log-format", "json"], log_path=str(log))
        try:
            group = raw["kafka"]["group_id"]
            wait_for(lambda: checkpoint_info(srv.url, group, topic).get("last_closed", 0) >= 2, 60,
                     "the first windows", w)
            r = redis.Redis.from_url(srv.url)
            used = int(r.info("memory")["used_memory"])
            r.config_set("maxmemory-policy", "noeviction")
            # room for the worker's small writes (its claim of the checkpoint), not for a checkpoint's held events:
            # Redis counts a command's arguments while it reads them and refuses the big ones
            r.config_set("maxmemory", str(used + 512 * 1024))
            r.set("probe", "x")
            with pytest.raises(redis.ResponseError, match="maxmemory"):
                r.set("probe", "x" * 4_000_000)
            t0 = time.monotonic()
            before = len(_failed_at(log))
            produce(tansu.bootstrap, topic, _events(500, 1100), 1)
            time.sleep(max(0.0, 10.0 - (time.monotonic() - t0)))
            at = _failed_at(log)[before:]
            gaps = [b - a for a, b in zip(at, at[1:])]
            # 0.2 s doubling: ≈ 6 failed steps in 10 s (a checkpoint small enough to pass starts the count over),
            # and the waits between them grow past 1.6 s (they stayed near 0.3 s while read-only steps reset it)
            assert 1 <= len(at) <= 8 and max(gaps, default=0.0) >= 1.5, (len(at), gaps)
            r.config_set("maxmemory", "0")  # writes accepted again: the worker goes on by itself
            wait_for(lambda: checkpoint_info(srv.url, group, topic).get("last_closed", 0) >= 5, 60,
                     "the windows after the outage", w)
            w.send_signal(signal.SIGTERM)
            assert wait_or_kill(w, 30) == 0
        finally:
            if w.poll() is None:
                w.kill()
                w.wait()
    finally:
        srv.stop()
