"""Valid, in-order events that arrive in bulk are not ``too_far_in_future`` (review of 2026-11-23, finding 1):
a backfill whose one fetch spans 90 days, and a partition whose 40-day backlog arrives in one fetch while another
partition lags, lost every event more than ``max_future_seconds`` (30 days) past the position the batch was judged
against. Both ingestion paths; an absurd time in the same batches is still refused."""

from __future__ import annotations

import copy

import orjson

from streamdp.accounting.cost import budget_vector
from streamdp.adapters.kafka.ordering import CanonicalStage
from streamdp.config.loader import parse_config
from streamdp.engine.engine import ReleaseEngine
from streamdp.engine.pipeline import EmbeddedPipeline
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.input.events import parse_batch
from streamdp.outputs.sinks import ListSink

DAY = 86400.0
T0 = 1_700_000_000.0 - (1_700_000_000.0 % DAY)
RAW = {"service": {"window_seconds": DAY, "horizon": 128, "origin": T0, "unsafe_test_seed": 3},
       "budget": {"zcdp_rho": 1e3, "zcdp_delta": 0.5},
       "query": [{"id": "c", "kind": "continual_counts", "sigma": 1.0, "max_items_per_window": 1}]}


def _engine() -> ReleaseEngine:
    cfg = parse_config(copy.deepcopy(RAW))
    return ReleaseEngine(cfg.engine_config(), cfg.build_queries(), MemoryBudgetStore(budget_vector(cfg.budget)))


def days(first: int, last: int, per_day: int = 40, tag: str = "") -> list[bytes]:
    return [orjson.dumps({"user": f"u{tag}{i}", "ts": T0 + d * DAY + 60.0 * i + 30.0, "items": [f"i{i % 5}"]})
            for d in range(first, last + 1) for i in range(per_day)]


def test_a_90_day_backfill_in_one_fetch_is_accepted_by_the_worker_stage():
    eng = _engine()
    stage = CanonicalStage(eng)
    stage.wm.register([0])
    payloads = days(0, 89)
    absurd = orjson.dumps({"user": "x", "ts": T0 + 3000 * DAY, "items": ["z"]})
    batch, bad = parse_batch(payloads[:1800] + [absurd] + payloads[1800:])
    assert not bad
    rejected = stage.add(0, batch)
    assert [(int(batch.source_rows[r]), why) for r, why in rejected] == [(1800, "too_far_in_future")]
    out = stage.release() + stage.release(flush=True)
    assert len(out) == 90 and sum(s.events for s in out) == 3600  # every day, every event


def test_a_partition_backlog_arriving_in_one_fetch_is_accepted():
    """Both partitions deliver day 0; then partition 1's days 1–40 arrive in one fetch while partition 0 lags
    (the watermark stays at day 0), then partition 0's days 1–40 in one fetch."""
    eng = _engine()
    stage = CanonicalStage(eng)
    stage.wm.register([0, 1])
    got = []
    for p, pl in [(0, days(0, 0, tag="a")), (1, days(0, 0, tag="b")), (1, days(1, 40, tag="b")),
                  (0, days(1, 40, tag="a"))]:
        batch, bad = parse_batch(pl)
        assert not bad
        assert stage.add(p, batch) == []
        got += stage.release()
    got += stage.release(flush=True)
    assert len(got) == 41 and sum(s.events for s in got) == 2 * 41 * 40


def test_a_90_day_backfill_in_one_batch_is_accepted_by_the_embedded_engine():
    eng = _engine()
    sink = ListSink()
    EmbeddedPipeline(eng, [sink]).run([days(0, 89)])
    assert sink.dead == [] and len(sink.records) == 90


def test_time_rejections_carry_a_detail():
    """Dead letters rejected for their time name the time and the rule (they had an empty detail; service review
    of 2026-11-23)."""
    eng = _engine()
    sink = ListSink()
    p = EmbeddedPipeline(eng, [sink])
    p.feed(days(0, 2))  # windows 1–2 close (the watermark is in day 2)
    late = T0 + 0.5 * DAY
    early = T0 - 3 * DAY
    far = T0 + 400 * DAY
    p.feed([orjson.dumps({"user": u, "ts": ts, "items": ["a"]}) for u, ts in (("l", late), ("b", early),
                                                                              ("f", far))])
    got = {d.reason: d.detail for d in sink.dead}
    assert got == {
        "late": f"event time {late!r} falls in window 1, already closed (last closed window 2)",
        "before_origin": f"event time {early!r} is before the windows' origin {T0!r}",
        "too_far_in_future": f"event time {far!r} is more than max_future_seconds = 2592000.0 past the newest time "
                             "accepted before it, or past the current time",
    }
