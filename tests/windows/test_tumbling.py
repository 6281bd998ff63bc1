import math

import numpy as np
import pytest

from streamdp.windows.tumbling import TumblingWindows


def test_numbering_and_bounds():
    w = TumblingWindows(10.0, origin=100.0)
    np.testing.assert_array_equal(w.window_of(np.array([100.0, 109.999, 110.0, 99.0])), [1, 1, 2, 0])
    assert w.bounds(3) == (120.0, 130.0)


def test_each_window_closes_once_in_order():
    w = TumblingWindows(10.0, origin=0.0, allowed_lateness=2.0)
    w.observe(11.0)
    assert w.due() == []  # watermark 9 < end of window 1 (10)
    w.observe(12.0)
    assert w.due() == [1]
    w.observe(45.0)
    assert w.due() == [2, 3, 4]  # watermark 43: windows ending at 20, 30, 40
    w.observe(30.0)  # older event does not move the watermark back
    assert w.due() == []
    assert w.last_closed == 4


def test_watermark_is_min_over_partitions_with_idle_timeout():
    w = TumblingWindows(10.0, origin=0.0, idle_timeout=5.0)
    w.observe(100.0, partition=0, now=0.0)
    w.observe(20.0, partition=1, now=0.0)
    assert w.watermark_at(now=1.0) == 20.0
    # partition 1 idle for more than 5 s of wall clock: ignored
    w.observe(101.0, partition=0, now=10.0)
    assert w.watermark_at(now=10.0) == 101.0


@pytest.mark.parametrize("origin", [None, math.nan, math.inf, -math.inf, True, "0"])
def test_origin_is_required_and_finite(origin):
    """Windows are numbered from a configured, public time: an origin derived from the first event would put that
    event's time into every published window's bounds (privacy review of 2026-11-23, F2)."""
    with pytest.raises(ValueError, match="origin"):
        TumblingWindows(3600.0, origin)


def test_state_round_trip():
    w = TumblingWindows(10.0, origin=0.0)
    w.observe(35.0)
    w.due()
    w2 = TumblingWindows.from_state(w.state())
    assert w2.state() == w.state() and w2.watermark == 35.0


@pytest.mark.parametrize("length", [0.0, -1.0, math.inf])
def test_bad_length(length):
    with pytest.raises(ValueError):
        TumblingWindows(length, 0.0)
