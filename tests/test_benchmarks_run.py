"""Every benchmark script still runs end to end, at toy sizes (a smoke test: no figure is checked here; the
measurements live in BENCHMARKS.md). A harness can rot silently: from 2026-11-22 19:04 until 2026-11-23,
``bench_kafka_worker.py`` stopped at its second repeat (the worker rightly refused to start over from the
flushed store; the harness now passes ``allow_empty_store``) and nothing noticed. The Kafka and Redis benchmarks
start their own tansu and redis-server, as the integration tests do."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RUNS = [  # (script and toy arguments, a line its table prints)
    ("bench_dp_sqlp.py --ticks 3 --users 3000 --seeds 1", "DP-SQLP workload: 3 ticks"),
    ("bench_emd.py --quick", "## PrivEMDLinear"),
    ("bench_filter_redis.py --sizes 1000 --rounds 1 --repeats 1", "admit/s"),
    ("bench_geo.py --quick", "## CGP identity query"),
    ("bench_grid_means.py --runs 1", "## ITMS profile"),
    ("bench_ingest.py --events 4000 --batch 1000 --repeats 1", "# 4000 events"),
    ("bench_kafka_worker.py --events 4000 --partitions 2 --repeat 2 --batch 500",
     "ratio worker / raw aiokafka, median"),
    ("bench_kafka_worker.py --events 4000 --partitions 2 --repeat 1 --batch 500 --stages", "capacity model"),
    ("bench_kafka_worker.py --events 4000 --partitions 2 --repeat 1 --batch 500 --split --split-n2",
     "split capacity model"),
    ("bench_range_queries.py --quick --sections speed", "total wall time"),
    ("bench_samplers.py --n 1000 --repeat 1", "vs PCG64"),
    ("bench_stages.py --events 4000 --repeats 1", "median µs/event"),
    ("bench_sums_neighbours.py --universes 300", "violations: 0"),
    ("bench_tree_variance.py --items 50", "plain MSE (analytic)"),
    ("bench_window_close.py --items 1000 --repeats 1", "# window close, L=4096"),
    ("bench_window_histogram.py --trials 2", "## through the engine"),
]


def test_every_benchmark_script_is_listed():
    listed = {spec.split()[0] for spec, _ in RUNS}
    present = {f for f in os.listdir(os.path.join(ROOT, "benchmarks")) if f.startswith("bench_") and f.endswith(".py")}
    assert listed == present


@pytest.mark.parametrize("spec, expect", RUNS,
                         ids=[s.split()[0] + "".join(f" {o}" for o in ("--stages", "--split") if o in s.split())
                              for s, _ in RUNS])
def test_benchmark_runs_at_toy_size(spec, expect):
    script, *args = spec.split()
    r = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", script), *args], cwd=ROOT,
                       capture_output=True, text=True, timeout=240, env=dict(os.environ, PYTHONWARNINGS="ignore"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert expect in r.stdout, r.stdout[-3000:]
