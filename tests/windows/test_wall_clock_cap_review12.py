"""An event time more than ``max_future_seconds`` past the wall clock is dead-lettered whatever the stream's
position (2026-11-23 input review): before any watermark a batch's median is the reference, so a first fetch of
ONE record stamped 2042 was its own reference, closed ~11k one-day windows and turned every later good event into
a ``late`` dead letter. Both paths: the embedded engine and the Kafka worker's canonical stage."""

from __future__ import annotations

import copy
import time

import numpy as np
import orjson

from streamdp.accounting.cost import budget_vector
from streamdp.adapters.kafka.ordering import CanonicalStage
from streamdp.config.loader import parse_config
from streamdp.engine.engine import ReleaseEngine
from streamdp.engine.pipeline import EmbeddedPipeline
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.input.events import parse_batch
from streamdp.outputs.sinks import ListSink
from streamdp.windows.tumbling import absurd_times

DAY = 86400.0
ORIGIN = 1356998400.0  # 2013-01-01
FUTURE = 5680281600.0  # 2150-01-01: far past any clock this test runs on, before the parser's 2200 limit
RAW = {"service": {"window_seconds": DAY, "horizon": 16, "unsafe_test_seed": 5, "origin": ORIGIN},
       "budget": {"zcdp_rho": 5.0, "zcdp_delta": 1e-4},
       "query": [{"id": "c", "kind": "continual_counts", "sigma": 1.0, "max_items_per_window": 1}]}


def ev(user, ts):
    return orjson.dumps({"user": user, "ts": ts, "items": ["a"]})


def _engine():
    cfg = parse_config(copy.deepcopy(RAW))
    return ReleaseEngine(cfg.engine_config(), cfg.build_queries(), MemoryBudgetStore(budget_vector(cfg.budget)))


GOOD = [ev(f"u{i % 40}", ORIGIN + 3600.0 + i * 1800.0) for i in range(198)]  # ~4 days of 2013


def test_the_rule():
    ts = np.array([100.0, 150.0, 1000.0, 120.0])
    # position 100, max_future 1000: nothing is ahead of the stream, but 1000 is past now (0) + 500
    assert absurd_times(ts, 100.0, 1000.0, now=None).tolist() == [False] * 4
    assert absurd_times(ts, 100.0, 500.0, now=0.0).tolist() == [False, False, True, False]
    # a refused time is no reference for the chain: 1400 is within 500 of 1000 but 1000 was refused
    ts = np.array([100.0, 1000.0, 1400.0, 450.0])
    assert absurd_times(ts, 100.0, 500.0, now=0.0).tolist() == [False, True, True, False]
    assert not absurd_times(ts, 100.0, None, now=0.0).any()


def test_one_far_future_event_alone_in_the_first_batch_is_dead_lettered():
    e, sink = _engine(), ListSink()
    EmbeddedPipeline(e, [sink]).run([[ev("x", FUTURE)]] + [GOOD[i:i + 50] for i in range(0, len(GOOD), 50)])
    assert [d.reason for d in sink.dead] == ["too_far_in_future"]
    assert "past the current time" in sink.dead[0].detail
    assert 3 <= e.windows.last_closed <= 6  # the days of the good events, not 10,949


def test_the_worker_stage_too():
    eng = _engine()
    stage = CanonicalStage(eng)
    stage.wm.register([0])
    batch, _ = parse_batch([ev("x", FUTURE)])
    assert [why for _, why in stage.add(0, batch)] == ["too_far_in_future"]
    rejected = []
    for i in range(0, len(GOOD), 50):
        batch, _ = parse_batch(GOOD[i:i + 50])
        rejected += stage.add(0, batch)
        stage.release()
    assert rejected == []


def test_live_times_are_judged_against_the_clock():
    now = time.time()
    ts = np.array([now - 10.0, now + 20 * DAY, now + 31 * DAY])
    assert absurd_times(ts, now, 30 * DAY, now=now).tolist() == [False, False, True]
