"""Watermark alignment decisions (``adapters/kafka/alignment.py``), without a broker."""

from __future__ import annotations

import math

import pytest

from streamdp.adapters.kafka.alignment import PartitionAlignment


def test_pauses_what_runs_ahead_and_resumes_when_the_frontier_catches_up():
    a = PartitionAlignment(max_skew=100.0, idle=1.0)
    for p, ts in ((0, 1000.0), (1, 50.0), (2, 120.0)):
        a.observe(p, ts, now=0.0)
    assert a.frontier(0.0) == 50.0
    assert a.decide(0.0) == ([0], [])  # 1000 > 50 + 100; 120 is within
    assert a.decide(0.1) == ([], [])  # no change, no calls
    a.observe(1, 400.0, now=0.2)
    a.observe(2, 600.0, now=0.2)
    assert a.decide(0.2) == ([2], [])  # frontier 400: 1000 and 600 > 500
    a.observe(1, 950.0, now=0.3)
    # paused 2 (not idle) is now the least: it resumes, and 1 (950 > 600 + 100) pauses
    assert a.frontier(0.3) == 600.0 and a.decide(0.3) == ([1], [2])
    a.observe(2, 900.0, now=0.4)
    assert a.frontier(0.4) == 900.0 and a.decide(0.4) == ([], [0, 1])


def test_the_frontier_partition_is_never_paused():
    a = PartitionAlignment(max_skew=1.0)
    for p in range(5):
        a.observe(p, 10.0 * p, now=0.0)
    pause, _ = a.decide(0.0)
    assert 0 not in pause and sorted(pause) == [1, 2, 3, 4]


def test_an_ended_or_quiet_partition_leaves_the_frontier():
    """The slow partition delivers nothing for ``idle`` seconds (its end): the paused ones resume — no deadlock."""
    a = PartitionAlignment(max_skew=10.0, idle=1.0)
    a.observe(0, 500.0, now=0.0)
    a.observe(1, 5.0, now=0.0)
    assert a.decide(0.5) == ([0], [])
    assert a.decide(0.9) == ([], [])
    assert a.frontier(1.5) == math.inf  # neither delivered within 1 s (0 is paused, 1 ended)
    assert a.decide(1.5) == ([], [0])


def test_reset_and_events_without_times():
    a = PartitionAlignment(max_skew=10.0)
    a.observe(0, 500.0, now=0.0)
    a.observe(1, -math.inf, now=0.0)  # only dead letters: seen, no event time
    a.observe(2, 1.0, now=0.0)
    assert a.decide(0.0) == ([0], [])
    a.reset()
    assert a.paused == set() and a.frontier(0.0) == math.inf and a.decide(0.0) == ([], [])


@pytest.mark.parametrize("skew,idle", [(0, 1), (-1, 1), (math.inf, 1), (1, 0)])
def test_bad_parameters(skew, idle):
    with pytest.raises(ValueError):
        PartitionAlignment(skew, idle)
