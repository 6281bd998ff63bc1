"""Window boundaries in floats (``streamdp/windows/tumbling.py``, docs/contract.md §2), and the watermark rules the mutation
audit of state found untested.

Window t is ``[origin + (t−1)·length, origin + t·length)``, and those float values (what :meth:`bounds` returns) ARE
the boundaries: an event at exactly ``bounds(t)[1]`` belongs to window t+1 and one ulp below it to window t, and a
watermark exactly at ``bounds(t)[1]`` makes window t due. For a length that is not a binary fraction (0.7 s, 3.3 s,
86400/7 s) the quotient ``(ts − origin)/length`` can fall one ulp short of the integer t at a boundary (hand value:
3·0.7 = 2.0999999999999996 and 2.0999999999999996/0.7 = 2.9999999999999996), so numbering or closing windows by
``floor`` of that quotient puts the event at a window's end inside it and closes the window one step late (the
bug fixed in ea3efb6). The expected boundaries here are the definition written out: ``origin + t * length``.
"""

from __future__ import annotations

import math

import numpy as np
import orjson
import pytest

from streamdp.accounting.cost import Cost, budget_vector
from streamdp.engine.engine import EngineConfig, ReleaseEngine
from streamdp.engine.pipeline import EmbeddedPipeline
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.noise.generator import synthetic_data_generator
from streamdp.outputs.sinks import ListSink
from streamdp.windows.tumbling import TumblingWindows

from window_helpers import EventTimes

# (length, origin): lengths that are not binary fractions, at origin 0 and at a realistic epoch-seconds origin,
# plus one exact (binary) control
PAIRS = [(0.7, 0.0), (3.3, 0.0), (86400 / 7, 0.0), (0.7, 1.7e9), (3.3, 1.7e9), (86400 / 7, 1.7e9),
         (0.1, 123.4), (10.0, 100.0)]
TS = np.concatenate([np.arange(1, 3001), [10_000, 99_999, 1_000_000]]).astype(np.int64)  # window numbers checked


def end(origin: float, length: float, t):
    """The end of window t by definition (docs/contract.md §2), in floats: origin + t·length."""
    return origin + t * length


def below(x):
    """The float one ulp below x."""
    return np.nextafter(x, -np.inf)


def ev(user, ts):
    return orjson.dumps({"user": user, "ts": ts, "items": []})


def make_engine(length: float, origin: float | None, lateness: float = 0.0) -> ReleaseEngine:
    conf = EngineConfig(window_seconds=length, horizon=64, origin=origin, allowed_lateness=lateness,
                        unsafe_test_seed=3)
    return ReleaseEngine(conf, [EventTimes()], MemoryBudgetStore(budget_vector(Cost.zcdp(100.0))))


# ------------------------------------------------------------------------------------------ numbering
def test_hand_values_at_0_7_seconds():
    """Length 0.7, origin 0: window 3 is [1.4, 2.0999999999999996) (3·0.7 in floats). The event at
    2.0999999999999996 is window 4's (floor of the quotient 2.9999999999999996 said 3); one ulp below it,
    2.099999999999999, is window 3's; 1.4 starts window 3 and one ulp below 1.4 is window 2's. A watermark at
    2.0999999999999996 has ended window 3 (floor said 2)."""
    w = TumblingWindows(0.7, origin=0.0)
    assert w.bounds(3) == (1.4, 2.0999999999999996)
    ts = np.array([2.0999999999999996, 2.099999999999999, 2.1, 1.4, below(1.4), 0.0])
    np.testing.assert_array_equal(w.window_of(ts), [4, 3, 4, 3, 2, 1])
    assert w.last_ended(2.0999999999999996) == 3
    assert w.last_ended(2.099999999999999) == 2
    assert w.last_ended(0.7) == 1 and w.last_ended(below(0.7)) == 0


@pytest.mark.parametrize("length,origin", PAIRS)
def test_every_boundary_agrees_with_bounds(length, origin):
    """For windows t = 1…3000, 10⁴, 99 999 and 10⁶: bounds(t) is (end(t−1), end(t)); an event at end(t) is in
    window t+1, one ulp below it in window t, at end(t−1) (the start) in window t; last_ended(end(t)) = t and
    last_ended(one ulp below end(t)) = t−1. For the non-binary lengths the naive quotient misplaces some of these
    boundaries (asserted, so the parameters really exercise the hard case); for the binary control it misplaces
    none."""
    w = TumblingWindows(length, origin=origin)
    ends = end(origin, length, TS.astype(np.float64))
    starts = end(origin, length, (TS - 1).astype(np.float64))
    for t in (1, 7, 3000):
        assert w.bounds(t) == (end(origin, length, t - 1), end(origin, length, t))
    np.testing.assert_array_equal(w.window_of(ends), TS + 1)
    np.testing.assert_array_equal(w.window_of(below(ends)), TS)
    np.testing.assert_array_equal(w.window_of(starts), TS)
    assert [w.last_ended(float(x)) for x in ends] == TS.tolist()
    assert [w.last_ended(float(x)) for x in below(ends)] == (TS - 1).tolist()
    naive = np.floor((ends - origin) / length).astype(np.int64) + 1  # the numbering before ea3efb6
    if length == 10.0:
        assert (naive == TS + 1).all()
    else:
        assert (naive != TS + 1).sum() > 0


@pytest.mark.parametrize("length,origin", PAIRS)
def test_window_of_is_one_after_last_ended_everywhere(length, origin):
    """For any time x, the window holding an event at x is the one after the last window a watermark at x has
    ended: window_of(x) = last_ended(x) + 1 (one rule for numbering and closing). 2000 seeded times over 5000
    windows, plus every end and the float below it for t = 1…500."""
    w = TumblingWindows(length, origin=origin)
    g = synthetic_data_generator(17)  # test data, not privacy noise
    ends = end(origin, length, np.arange(1, 501, dtype=np.float64))
    xs = np.concatenate([origin + g.uniform(0, 5000 * length, 2000), ends, below(ends)])
    assert w.window_of(xs).tolist() == [w.last_ended(float(x)) + 1 for x in xs]


# ------------------------------------------------------------------------------------------ closing
@pytest.mark.parametrize("length,origin", PAIRS)
def test_a_watermark_exactly_at_a_window_end_makes_it_due(length, origin):
    """Stepping the watermark one ulp below end(t), then to end(t), for t = 1…400: ``due`` hands out nothing at
    the first step and exactly [t] at the second — window t closes when the watermark reaches its end, not a step
    later."""
    w = TumblingWindows(length, origin=origin)
    for t in range(1, 401):
        b = end(origin, length, t)
        w.observe(float(below(b)))
        assert w.due() == [], t
        w.observe(b)
        assert w.due() == [t], t
    assert w.last_closed == 400


def test_the_embedded_pipeline_releases_every_window_at_0_7_seconds():
    """The audit's reproduction, embedded path: window 0.7 s from origin 0, events at 0.1, 0.8 and 1.5 (windows
    1, 2, 3) release seq 1, 2, 3, each with its own event, and nothing stays buffered."""
    e = make_engine(0.7, 0.0)
    sink = ListSink()
    EmbeddedPipeline(e, [sink]).run([[ev("a", 0.1), ev("b", 0.8), ev("c", 1.5)]])
    assert [r.seq for r in sink.records] == [1, 2, 3]
    assert [r.values["ts"] for r in sink.records] == [[0.1], [0.8], [1.5]]
    assert e.held_events == 0


@pytest.mark.parametrize("length,origin", [(0.7, 0.0), (3.3, 1.7e9), (86400 / 7, 0.0), (86400 / 7, 1.7e9)])
def test_events_at_window_ends_land_in_the_next_window_end_to_end(length, origin):
    """Embedded pipeline, 60 windows: for each t an event one ulp below end(t) and one at end(t), fed in order,
    one batch per window. Window t (t ≥ 2) releases exactly [end(t−1), one ulp below end(t)] and window 1 only
    [one ulp below end(1)]; each window is released by the batch whose watermark reaches its end (the batch
    holding end(t) releases window t, so after feeding window t's pair the releases are 1…t)."""
    e = make_engine(length, origin)
    sink = ListSink()
    p = EmbeddedPipeline(e, [sink])
    for t in range(1, 61):
        b = end(origin, length, t)
        p.feed([ev(f"u{t}", float(below(b))), ev(f"v{t}", b)])
        assert [r.seq for r in sink.records] == list(range(1, t + 1)), t
    p.run([])
    got = {r.seq: r.values["ts"] for r in sink.records}
    assert got[1] == [float(below(end(origin, length, 1)))]
    for t in range(2, 61):
        assert got[t] == [end(origin, length, t - 1), float(below(end(origin, length, t)))], t
    assert got[61] == [end(origin, length, 60)]


@pytest.mark.parametrize("length,origin", [(0.7, 0.0), (3.3, 0.0), (86400 / 7, 123.4), (0.1, 1.7e9)])
def test_flush_releases_the_window_of_the_newest_event_at_a_window_start(length, origin):
    """End of a bounded input (``EmbeddedPipeline.run`` → ``ReleaseEngine.flush``): every window up to the newest
    event is released, also when that event sits exactly at a window's start end(t−1) (it is window t's, see
    above). Hand value: length 0.7, origin 0, t = 13: the newest event at 12·0.7 = 8.399999999999999 is window
    13's, so seq 1…13 are released and nothing stays buffered. Checked for the first 40 windows t whose start
    needs it."""
    for t in range(2, 42):
        e = make_engine(length, origin)
        sink = ListSink()
        start = end(origin, length, t - 1)
        EmbeddedPipeline(e, [sink]).run([[ev("a", origin + 0.5 * length), ev("b", start)]])
        assert [r.seq for r in sink.records] == list(range(1, t + 1)), (t, start)
        assert sink.records[-1].values["ts"] == [start] and e.held_events == 0


# ------------------------------------------------------------------------------------------ origin and watermark
def test_before_the_configured_origin_is_dead_lettered():
    """Origin 100, length 10: window 1 is [100, 110). An event at 95 (window 0 by the quotient) and one ulp below
    100 are dead-lettered ``before_origin``; the event at exactly 100 is window 1's and released."""
    e = make_engine(10.0, 100.0)
    sink = ListSink()
    EmbeddedPipeline(e, [sink]).run([[ev("a", 95.0), ev("b", float(below(100.0))), ev("c", 100.0)]])
    assert [d.reason for d in sink.dead] == ["before_origin", "before_origin"]
    assert e.counters.by_reason == {"before_origin": 2}
    assert [(r.seq, r.values["ts"]) for r in sink.records] == [(1, [100.0])]


def test_the_watermark_never_moves_back():
    """Lateness 2: after an event at 45 the watermark is 43; an older event (30) leaves it at 43 (docs/contract.md §2:
    the MAXIMUM event time seen minus the lateness), and windows 1…4 (ends 10…40) are due, not just 1 and 2."""
    w = TumblingWindows(10.0, origin=0.0, allowed_lateness=2.0)
    w.observe(45.0)
    w.observe(30.0)
    assert w.watermark == 43.0
    assert w.due() == [1, 2, 3, 4]


def test_a_partition_idle_exactly_the_timeout_still_holds_the_watermark():
    """Idle timeout 5 s: partition 1 (max 20) last seen at wall clock 0. At now = 5 it has been idle exactly 5 s,
    which is not MORE than the timeout: it still holds the watermark at 20. One ulp of wall clock later it is
    ignored and the watermark is partition 0's 101."""
    w = TumblingWindows(10.0, origin=0.0, idle_timeout=5.0)
    w.observe(100.0, partition=0, now=0.0)
    w.observe(20.0, partition=1, now=0.0)
    w.observe(101.0, partition=0, now=5.0)
    assert w.watermark_at(now=5.0) == 20.0
    assert w.watermark_at(now=math.nextafter(5.0, math.inf)) == 101.0


def test_flush_closes_every_window_despite_lateness():
    """Lateness 15 s, length 10: events at 1 and 12 (windows 1, 2). The watermark (12 − 15 = −3) closes nothing,
    but the end of the input releases both windows, marked ``closed_by: end_of_input``."""
    w = TumblingWindows(10.0, origin=0.0, allowed_lateness=15.0)
    w.observe(12.0)
    assert w.due() == []
    e = make_engine(10.0, 0.0, lateness=15.0)
    sink = ListSink()
    EmbeddedPipeline(e, [sink]).run([[ev("a", 1.0), ev("b", 12.0)]])
    assert [(r.seq, r.values["ts"], r.closed_by) for r in sink.records] == [(1, [1.0], "end_of_input"),
                                                                            (2, [12.0], "end_of_input")]


def test_allowed_lateness_is_bounded_by_the_accepted_time_range():
    """Past the accepted time range (MAX_TS = 7,258,118,400 s, 2200-01-01) a lateness closes no window ever, and
    past ~10¹³ s the float end + lateness is coarser than 1 ms windows (a window could close before its events
    are fed): the loader refuses it; the bound itself and 0 are accepted, so is an infinite lateness not."""
    from streamdp.config.kinds import ConfigError
    from streamdp.config.loader import parse_config

    def cfg(lateness):
        return {"service": {"window_seconds": 0.001, "origin": 0.0, "allowed_lateness": lateness},
                "query": [{"id": "q", "kind": "continual_counts", "sigma": 1.0}]}

    for ok in (0.0, 3600.0, 7_258_118_400.0):
        assert parse_config(cfg(ok)).engine_config().allowed_lateness == ok
    for bad in (7_258_118_401.0, 1e13, math.inf, math.nan, -1.0):
        with pytest.raises(ConfigError, match="allowed_lateness"):
            parse_config(cfg(bad))
