"""Absurd timestamps inside the accepted range (docs/contract.md §6), before any watermark exists: one event years ahead
(or decades behind) in the FIRST batch must be dead-lettered, not set the watermark (every window up to it due at
once, every later event late). Both ingestion paths: the embedded engine and the Kafka worker's canonical stage.
(The origin is always configured since 2026-11-23: one derived from the first event leaked that event's time.)"""

import copy

import numpy as np
import orjson
import pytest

from streamdp.accounting.cost import budget_vector
from streamdp.adapters.kafka.ordering import CanonicalStage
from streamdp.config.loader import parse_config
from streamdp.engine.engine import ReleaseEngine
from streamdp.engine.pipeline import EmbeddedPipeline
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.input.events import parse_batch
from streamdp.outputs.sinks import ListSink
from streamdp.windows.tumbling import absurd_times

T0 = 1_700_000_000.0
DAY = 86400.0
ORIGIN = (T0 + 17.0) // 3600.0 * 3600.0  # the hour of the first good event
RAW = {"service": {"window_seconds": 3600.0, "horizon": 16, "unsafe_test_seed": 5, "origin": ORIGIN},
       "budget": {"zcdp_rho": 5.0, "zcdp_delta": 1e-4},
       "query": [{"id": "c", "kind": "continual_counts", "sigma": 1.0, "max_items_per_window": 1}]}


def ev(user, ts, item="a"):
    return orjson.dumps({"user": user, "ts": ts, "items": [item]})


def good_events():
    return [ev(f"u{i % 50}", T0 + 17.0 + i * 7.3, f"i{i % 7}") for i in range(3000)]  # ≈ 6 hours


def _engine():
    cfg = parse_config(copy.deepcopy(RAW))
    return ReleaseEngine(cfg.engine_config(), cfg.build_queries(), MemoryBudgetStore(budget_vector(cfg.budget)))


# ------------------------------------------------------------------------------------------ the rule
def test_without_a_reference_only_the_clock_judges_and_the_first_accepted_time_becomes_the_reference():
    """Since 2026-12-07 every event is judged in its partition's order (no batch median: it made the verdict depend
    on where the first fetch was cut). A partition's first event has no reference: only the wall clock judges it;
    then the chain starts from it."""
    ts = np.array([1000.0, 1050.0, 1200.0, 1100.0])
    assert absurd_times(ts, -np.inf, max_future=100.0).tolist() == [False, False, True, False]
    assert absurd_times(ts, -np.inf, max_future=100.0, now=0.0).tolist() == [True, True, True, True]
    assert absurd_times(ts[2:], -np.inf, max_future=100.0).tolist() == [False, False]  # cut elsewhere: 1200 first


def test_absurd_times_bounds():
    # bound: 1000 + 100 (1101 comes before 1100: nothing accepted before it is past 1000)
    ts = np.array([0.0, 889.0, 890.0, 1000.0, 1101.0, 1100.0])
    fut = absurd_times(ts, 1000.0, max_future=100.0)
    assert fut.tolist() == [False, False, False, False, True, False]  # > position + max_future
    assert not absurd_times(ts, 1000.0, max_future=None).any()


def test_a_batch_own_in_order_progress_counts():
    """An event is too far ahead only against the newest time accepted before it — the position or an accepted
    earlier event of the batch (review of 2026-11-23: a 90-day backfill in one fetch lost every event more than 30
    days past the batch's median, and a partition's 40-day backlog in one fetch lost its last 10 days)."""
    ts = np.array([1000.0, 1100.0, 1200.0, 1300.0, 1299.0, 1500.0, 1600.0])
    fut = absurd_times(ts, 1000.0, max_future=100.0)
    # a chain of steps ≤ 100 is accepted; 1500 is 200 past the newest accepted (1300) and refused, and being
    # refused it is no reference: 1600 is 300 past 1300
    assert fut.tolist() == [False, False, False, False, False, True, True]
    # an absurd time anywhere is refused, and so is a second one right behind it
    ts = np.array([1000.0, 1050.0, 9e9, 9e9 + 1.0, 1060.0, 1150.0])
    fut = absurd_times(ts, 1000.0, max_future=100.0)
    assert fut.tolist() == [False, False, True, True, False, False]
    # the earlier events of the batch count from the start, flagged or not by the position alone
    ts = np.array([1090.0, 1180.0, 1270.0])
    fut = absurd_times(ts, 1000.0, max_future=100.0)
    assert not fut.any()


# ------------------------------------------------------------------------------------------ embedded engine
@pytest.mark.parametrize("outlier,reason", [(T0 + 170 * 365 * DAY, "too_far_in_future"),  # year ≈ 2193
                                            (5.0, "before_origin"),  # 1970
                                            (T0 - 40 * DAY, "before_origin")])
def test_an_absurd_time_in_the_first_batch_is_dead_lettered_and_changes_no_release(outlier, reason):
    good = good_events()
    bad = good[:1000] + [ev("x", outlier, "z")] + good[1000:]

    def go(payloads):
        e = _engine()
        sink = ListSink()
        EmbeddedPipeline(e, [sink]).run([payloads])  # one batch: the outlier is in the first one
        return e, sink

    e1, s1 = go(bad)
    e2, s2 = go(good)
    assert [(d.reason, orjson.loads(d.payload)["user"]) for d in s1.dead] == [(reason, "x")]
    assert e1.windows.origin == e2.windows.origin == np.floor((T0 + 17.0) / 3600.0) * 3600.0
    assert len(s1.records) == len(s2.records) < 10  # ≈ 6 hourly windows, not millions
    assert [r.to_bytes() for r in s1.records] == [r.to_bytes() for r in s2.records]


def test_later_batches_keep_the_watermark_rule():
    e = _engine()
    sink = ListSink()
    p = EmbeddedPipeline(e, [sink])
    p.feed(good_events()[:100])
    p.feed([ev("y", T0 + 31 * DAY + 3600.0)])  # beyond watermark + 30 days (the default max_future_seconds)
    p.feed([ev("y", T0 - 40 * DAY)])  # the origin is known: late, not an origin question
    assert [d.reason for d in sink.dead] == ["too_far_in_future", "before_origin"]


# ------------------------------------------------------------------------------------------ canonical stage
def _stage_run(batches):
    """(partition, payloads) in order through a CanonicalStage of 2 partitions; releases by key and dead reasons."""
    eng = _engine()
    stage = CanonicalStage(eng)
    stage.wm.register([0, 1])
    dead, out = [], {}
    for p, payloads in batches:
        batch, bad = parse_batch(payloads)
        assert not bad
        dead += [(p, orjson.loads(payloads[int(batch.source_rows[r])])["user"], why) for r, why in stage.add(p, batch)]
        for s in stage.release():
            out.update({r.key: r.to_bytes() for r in s.records})
    for s in stage.release(flush=True):
        out.update({r.key: r.to_bytes() for r in s.records})
    return eng, dead, out


def test_the_worker_stage_dead_letters_absurd_times_before_any_watermark():
    good = good_events()
    p0, p1 = good[0::2], good[1::2]
    clean = [(0, p0[:500]), (0, p0[500:]), (1, p1)]
    e_ref, dead_ref, out_ref = _stage_run(clean)
    assert dead_ref == [] and out_ref
    # partition 0's first batch carries a year-2193 event and a 1970 event (no watermark, no origin yet)
    first = p0[:250] + [ev("x", T0 + 170 * 365 * DAY, "z"), ev("w", 5.0, "z")] + p0[250:500]
    # partition 1 has not spoken yet (the watermark over partitions is −∞), but partition 0 has: its own newest
    # time is the reference for its later batches — a lone far-future event cannot pass as its own median
    later = [ev("v", T0 + 90 * DAY, "z")] + p0[500:]
    e, dead, out = _stage_run([(0, first), (0, later), (1, p1)])
    assert sorted(dead) == [(0, "v", "too_far_in_future"), (0, "w", "before_origin"),
                            (0, "x", "too_far_in_future")]
    assert e.windows.origin == e_ref.windows.origin
    assert out == out_ref


def test_the_default_max_future_is_a_thousand_windows_within_seven_to_thirty_days():
    """One far-future event moves its partition's watermark at most max_future_seconds ahead: by default 1,000
    windows (the 30-day default let one event close 43,117 one-minute windows in the 2026-12-06 fault campaign), but
    at least 7 days — a partition silent for longer than the limit has its next events refused — and at most 30."""
    from streamdp.windows.tumbling import default_max_future

    assert default_max_future(60.0) == 7 * DAY  # 1,000 minutes is under a day: the 7-day floor
    assert default_max_future(900.0) == 900_000.0  # 1,000 quarter-hours ≈ 10.4 days
    assert default_max_future(3600.0) == default_max_future(DAY) == 30 * DAY
    raw = copy.deepcopy(RAW)
    assert parse_config(raw).engine_config().max_future_seconds == 30 * DAY  # hourly windows
    raw["service"]["window_seconds"] = 60.0
    assert parse_config(raw).engine_config().max_future_seconds == 7 * DAY
    raw["service"]["max_future_seconds"] = 120.0
    assert parse_config(raw).engine_config().max_future_seconds == 120.0
