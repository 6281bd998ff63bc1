"""The Kafka worker's canonical stage closes windows by the same float boundaries as the engine
(``streamdp/adapters/kafka/ordering.py``: ``CanonicalStage.due_until`` / ``release``; docs/contract.md §2), without a broker.

Window t is ``[origin + (t−1)·length, origin + t·length)`` in floats (the expected values here are that definition
written out). The stage holds events per window and steps the engine's watermark to each window's end: a watermark
exactly at ``bounds(t)[1]`` makes window t due, one ulp below it does not. Before ea3efb6 the stage and the engine
computed "due" from floor((wm − origin)/length), which for a length like 0.7 s falls one short at a boundary: the
drain at the end of the input (``release(flush=True)``) released windows 1 and 2 of events at 0.1, 0.8 and 1.5 and
left window 3's event in the engine's buffer. Also: the stage's late / allowed-lateness rules and its restored
watermarks (mutants O1–O4 and O10 of the state mutation audit survived the suite).
"""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from streamdp.accounting.cost import Cost, budget_vector
from streamdp.adapters.kafka.ordering import CanonicalStage
from streamdp.engine import state_codec
from streamdp.engine.engine import EngineConfig, ReleaseEngine
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.input.events import parse_batch

from window_helpers import EventTimes


def end(origin: float, length: float, t):
    """The end of window t by definition (docs/contract.md §2), in floats: origin + t·length."""
    return origin + t * length


def below(x: float) -> float:
    return float(np.nextafter(x, -np.inf))


def stage(length: float = 10.0, origin: float = 0.0, lateness: float = 0.0, partitions=(0,)):
    conf = EngineConfig(window_seconds=length, horizon=64, origin=origin, allowed_lateness=lateness,
                        unsafe_test_seed=3)
    e = ReleaseEngine(conf, [EventTimes()], MemoryBudgetStore(budget_vector(Cost.zcdp(100.0))))
    s = CanonicalStage(e)
    s.wm.register(list(partitions))
    return e, s


def batch(*pairs):
    b, dead = parse_batch([orjson.dumps({"user": u, "ts": t, "items": []}) for u, t in pairs])
    assert not dead
    return b


def seqs(summaries):
    return [s.seq for s in summaries]


def times(summaries):
    return [r.values["ts"] for s in summaries for r in s.records]


# ------------------------------------------------------------------------------------------ float boundaries
def test_the_drain_releases_every_window_at_0_7_seconds():
    """The audit's reproduction: window 0.7 s from origin 0, events at 0.1, 0.8 and 1.5 (windows 1, 2, 3) in one
    batch. ``release(flush=True)`` releases seq 1, 2, 3, each with its own event, and leaves nothing held in the
    stage or buffered in the engine (before the fix: seq 1, 2 only, 1.5 stuck in the engine's buffer)."""
    e, s = stage(0.7)
    assert s.add(0, batch(("a", 0.1), ("b", 0.8), ("c", 1.5))) == []
    out = s.release(flush=True)
    assert seqs(out) == [1, 2, 3] and times(out) == [[0.1], [0.8], [1.5]]
    assert s.held == {} and s.held_events == 0 and e.held_events == 0
    assert e.windows.last_closed == 3


def test_the_same_events_step_by_step_at_0_7_seconds():
    """Same events: the watermark 1.5 has passed window 2's end 1.4 (but not window 3's, 2.0999999999999996), so
    ``release()`` gives seq 1, 2; the drain then gives seq 3."""
    e, s = stage(0.7)
    s.add(0, batch(("a", 0.1), ("b", 0.8), ("c", 1.5)))
    assert s.due_until() == 2
    first = s.release()
    assert seqs(first) == [1, 2]
    last = s.release(flush=True)
    assert seqs(last) == [3] and times(last) == [[1.5]] and e.held_events == 0


@pytest.mark.parametrize("length,origin", [(0.7, 0.0), (3.3, 0.0), (86400 / 7, 0.0), (0.7, 1.7e9),
                                           (3.3, 1.7e9), (86400 / 7, 1.7e9)])
def test_windows_close_exactly_when_the_watermark_reaches_their_end(length, origin):
    """For t = 1…150: add an event one ulp below end(t) (window t's) — ``due_until`` stays t−1 and nothing is
    released; then an event at exactly end(t) (window t+1's) — ``due_until`` is t and ``release()`` gives exactly
    window t, holding [end(t−1), one ulp below end(t)] (window 1: only the event below end(1)). The drain then
    releases window 151 with the event at end(150)."""
    e, s = stage(length, origin)
    for t in range(1, 151):
        b = end(origin, length, t)
        assert s.add(0, batch((f"u{t}", below(b)))) == []
        assert s.due_until() == t - 1 and s.release() == [], t
        assert s.add(0, batch((f"v{t}", b))) == []
        assert s.due_until() == t, t
        out = s.release()
        assert seqs(out) == [t], t
        want = [below(b)] if t == 1 else [end(origin, length, t - 1), below(b)]
        assert times(out) == [want], t
    last = s.release(flush=True)
    assert seqs(last) == [151] and times(last) == [[end(origin, length, 150)]] and e.held_events == 0


@pytest.mark.parametrize("length,origin", [(0.7, 0.0), (86400 / 7, 1.7e9), (0.1, 123.4)])
def test_the_drain_releases_the_window_of_an_event_at_a_window_start(length, origin):
    """The drain releases every window holding events, also when the newest event sits exactly at a window's
    start end(t−1) (it is window t's). Hand value: length 0.7, origin 0, t = 13: the event at
    12·0.7 = 8.399999999999999 is released by seq 13. t = 2…41."""
    for t in range(2, 42):
        e, s = stage(length, origin)
        start = end(origin, length, t - 1)
        s.add(0, batch(("a", origin + 0.5 * length), ("b", start)))
        out = s.release(flush=True)
        assert seqs(out) == list(range(1, t + 1)), (t, start)
        assert times(out)[-1] == [start] and e.held_events == 0 and s.held == {}


@pytest.mark.parametrize("lateness", [1.1, 7.0])
def test_the_drain_releases_every_window_with_allowed_lateness(lateness):
    """Length 0.7 s, origin 0, allowed lateness 1.1 s or 7 s: one event in the middle of each of windows 1…k, then
    the drain releases exactly seq 1…k and leaves nothing in the engine's buffer, for k = 1…60. The stage steps
    the engine to window t's end PLUS the lateness, and the engine subtracts it again; the window must close
    anyway. Hand value: k = 5, lateness 1.1: window 5 ends at 5·0.7 = 3.5, and (3.5 + 1.1) − 1.1 =
    3.4999999999999996 in floats, one ulp short of 3.5."""
    for k in range(1, 61):
        e, s = stage(0.7, 0.0, lateness=lateness)
        s.add(0, batch(*[(f"u{j}", (j - 0.5) * 0.7) for j in range(1, k + 1)]))
        out = s.release(flush=True)
        assert seqs(out) == list(range(1, k + 1)), (k, end(0.0, 0.7, k))
        assert e.held_events == 0 and s.held == {}


# ------------------------------------------------------------------------------------------ late and lateness
def test_only_the_passed_windows_close_and_a_closed_window_is_late():
    """Length 10, origin 0, no lateness. Events at 5 and 15: watermark 15 has passed window 1's end (10), not
    window 2's (20), so only seq 1 is released. An event at 25 moves it to 25: seq 2. Then an event at 15
    (window 2, closed) is ``late``; one at 20 (window 3, open) is held, and counted nowhere as dead."""
    e, s = stage()
    s.add(0, batch(("a", 5.0), ("a", 15.0)))
    assert seqs(s.release()) == [1]
    s.add(0, batch(("a", 25.0)))
    assert seqs(s.release()) == [2]
    assert s.add(0, batch(("b", 15.0), ("c", 20.0))) == [(0, "late")]
    assert e.counters.late == 1 and e.counters.by_reason == {"late": 1}
    assert sorted(s.held) == [3] and s.held_events == 2  # the 25 and the 20
    assert s.add(0, batch(("d", 9.0))) == [(0, "late")]  # window 1 is closed too


def test_the_stage_respects_allowed_lateness():
    """Lateness 5: events at 5 and 12 give a watermark of 12 − 5 = 7 < 10, nothing is due; an event at 16 gives
    11 ≥ 10: seq 1, with its event 5 — and the ENGINE's watermark must also have reached 10 (the stage steps it to
    the window's end plus the lateness), else its close_due would close nothing. (Since the engine holds the
    per-partition watermarks itself, its watermark is the partition's: 16 − 5 = 11.)"""
    e, s = stage(lateness=5.0)
    s.add(0, batch(("a", 5.0), ("a", 12.0)))
    assert s.due_until() == 0 and s.release() == []
    s.add(0, batch(("a", 16.0)))
    out = s.release()
    assert seqs(out) == [1] and times(out) == [[5.0]]
    assert e.windows.watermark == 11.0 and e.windows.last_closed == 1


def test_a_restored_stage_keeps_its_partition_watermarks():
    """Two partitions, events held up to 15 (partition 0) and 12 (partition 1): the watermark is 12. After a
    snapshot of the engine and of the stage and a restore into fresh objects, the watermark is still 12 and the
    restored worker releases seq 1 at once, byte for byte as the original does (a stage that forgot its
    watermarks would release nothing until every partition delivered again)."""
    e, s = stage(partitions=(0, 1))
    s.add(0, batch(("a", 5.0), ("a", 15.0)))
    s.add(1, batch(("b", 7.0), ("b", 12.0)))
    snap, st = e.snapshot(), state_codec.encode(s.state())
    e2, s2 = stage(partitions=(0, 1))
    e2.restore(snap)
    s2.load_state(state_codec.decode(st))
    s2.wm.register([0, 1])
    assert s2.wm.max_ts == {0: 15.0, 1: 12.0} and s2.wm.watermark_at() == 12.0
    mine, theirs = s.release(), s2.release()
    assert seqs(theirs) == [1] and times(theirs) == [[5.0, 7.0]]
    assert [r.to_bytes() for x in theirs for r in x.records] == [r.to_bytes() for x in mine for r in x.records]


def test_an_event_before_the_configured_origin_is_rejected_by_the_stage():
    """Origin 100, length 10: an event at 95 (window 0) and one ulp below 100 are ``before_origin``; the event at
    exactly 100 is held in window 1."""
    e, s = stage(origin=100.0)
    assert s.add(0, batch(("a", 95.0), ("b", below(100.0)), ("c", 100.0))) == [(0, "before_origin"),
                                                                              (1, "before_origin")]
    assert sorted(s.held) == [1] and s.held_events == 1
    assert e.counters.by_reason == {"before_origin": 2}
