"""Watermark alignment decisions (``adapters/kafka/alignment.py``) and the pinned partitions of the canonical
stage's watermark, without a broker."""

from __future__ import annotations

import math

import numpy as np
import pytest

from streamdp.adapters.kafka.alignment import MIN_EVIDENCE, PartitionAlignment
from streamdp.windows.tumbling import TumblingWindows


def run(start: float, n: int = MIN_EVIDENCE, span: float = 10.0) -> np.ndarray:
    """n event times from ``start`` over ``span`` seconds (a fetched run of one partition)."""
    return start + np.linspace(0.0, span, n)


def test_pauses_what_runs_ahead_and_resumes_when_the_frontier_catches_up():
    a = PartitionAlignment(max_skew=100.0, idle=1.0)
    a.observe(0, run(1000.0), now=0.0)
    a.observe(1, run(50.0), now=0.0)
    a.observe(2, run(120.0), now=0.0)
    assert a.frontier(0.0) == pytest.approx(50.5)
    assert a.decide(0.0) == ([0], [])  # 1000 > 50 + 100; 120 is within
    assert a.decide(0.1) == ([], [])  # no change, no calls
    a.observe(1, run(400.0), now=0.5)
    a.observe(2, run(420.0), now=0.5)
    assert a.decide(0.5) == ([], [])  # the frontier is still the older delivery of partition 1 (within 1 s)
    assert a.decide(1.2) == ([], [])  # 1's old run expired: frontier 400, 0 (last seen at 1000) stays paused
    a.observe(1, run(950.0), now=1.3)
    a.observe(2, run(960.0), now=1.3)
    assert a.decide(2.4) == ([], [0])  # frontier 950: 1000 is within 100


def test_the_frontier_partition_is_never_paused():
    a = PartitionAlignment(max_skew=1.0)
    for p in range(5):
        a.observe(p, run(100.0 * p), now=0.0)
    pause, _ = a.decide(0.0)
    assert 0 not in pause and sorted(pause) == [1, 2, 3, 4]


def test_an_outlier_or_a_trickle_pauses_nothing():
    """One far-future event does not move a partition's position (a low quantile of its recent events), and a
    partition with fewer than MIN_EVIDENCE recent events is never paused: a pause on such evidence would delay its
    ordinary events behind the others."""
    a = PartitionAlignment(max_skew=10.0)
    a.observe(0, np.append(run(100.0), 100.0 + 29 * 86400.0), now=0.0)  # an outlier 29 days ahead
    a.observe(1, run(100.0), now=0.0)
    assert a.decide(0.0) == ([], [])
    b = PartitionAlignment(max_skew=10.0)
    b.observe(0, run(5000.0, n=MIN_EVIDENCE - 1), now=0.0)  # far ahead, but only a trickle
    b.observe(1, run(100.0), now=0.0)
    assert b.decide(0.0) == ([], [])


def test_an_ended_or_quiet_partition_leaves_the_frontier():
    """The slow partition delivers nothing for ``idle`` seconds (its end): the paused ones resume — no deadlock."""
    a = PartitionAlignment(max_skew=10.0, idle=1.0)
    a.observe(0, run(500.0), now=0.0)
    a.observe(1, run(5.0), now=0.0)
    assert a.decide(0.5) == ([0], [])
    assert a.decide(0.9) == ([], [])
    assert a.frontier(1.5) == math.inf  # neither delivered within 1 s (0 is paused, 1 ended)
    assert a.decide(1.5) == ([], [0])


def test_reset_and_deliveries_without_event_times():
    a = PartitionAlignment(max_skew=10.0)
    a.observe(0, run(500.0), now=0.0)
    a.observe(1, np.zeros(0), now=0.0)  # only dead letters: seen, no event time
    a.observe(2, run(1.0), now=0.0)
    assert a.decide(0.0) == ([0], [])
    a.reset()
    assert a.paused == set() and a.frontier(0.0) == math.inf and a.decide(0.0) == ([], [])


@pytest.mark.parametrize("skew,idle", [(0, 1), (-1, 1), (math.inf, 1), (1, 0)])
def test_bad_parameters(skew, idle):
    with pytest.raises(ValueError):
        PartitionAlignment(skew, idle)


def test_a_pinned_partition_keeps_holding_the_watermark():
    """idle_timeout releases a silent partition from the watermark — but not one the worker paused: its unread
    events must be judged as if it had not been paused."""
    wm = TumblingWindows(10.0, 0.0, allowed_lateness=0.0, idle_timeout=5.0)  # the per-partition watermarks
    wm.register([0, 1], now=0.0)
    wm.observe(100.0, 0, now=0.0)
    wm.observe(900.0, 1, now=0.0)
    wm.observe(1000.0, 0, now=10.0)  # partition 1 silent for 10 s > idle_timeout
    assert wm.watermark_at(now=10.0) == 1000.0
    wm.pinned = frozenset({1})
    assert wm.watermark_at(now=10.0) == 900.0
