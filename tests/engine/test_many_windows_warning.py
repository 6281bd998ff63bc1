"""A configured origin far before the data closes (and releases) every window in between: one watermark advance
closing ``MANY_WINDOWS_AT_ONCE`` windows or more is logged as a warning naming the origin (review of
2026-11-23, finding 8: an origin 23 days early with 100 s windows published 20,217 records for 10 events, with no
word)."""

from __future__ import annotations

import logging

import orjson

from streamdp.accounting.cost import Cost, budget_vector
from streamdp.engine.engine import MANY_WINDOWS_AT_ONCE, EngineConfig, ReleaseEngine
from streamdp.engine.queries.continual_counts import ContinualCounts
from streamdp.filter import MemoryBudgetStore
from streamdp.input.events import parse_batch


def _engine(origin: float) -> ReleaseEngine:
    store = MemoryBudgetStore(budget_vector(Cost(zcdp_rho=1e3, zcdp_delta=1.0)))
    q = ContinualCounts("c", sigma=1.0, horizon=4096, delta_item=1e-6)
    return ReleaseEngine(EngineConfig(window_seconds=1.0, horizon=4096, origin=origin, unsafe_test_seed=1,
                                      max_future_seconds=None), [q], store)


def _feed(eng: ReleaseEngine, ts: list[float]):
    batch, dead = parse_batch([orjson.dumps({"user": "u", "ts": t, "items": ["a"]}) for t in ts])
    assert not dead
    eng.ingest(batch)
    return eng.close_due()


def test_closing_many_windows_at_once_is_a_warning(caplog):
    assert MANY_WINDOWS_AT_ONCE == 1000
    eng = _engine(origin=0.0)
    with caplog.at_level(logging.WARNING, logger="streamdp.engine"):
        out = _feed(eng, [1000.5, 1001.5])  # window 1002 is open: windows 1…1001 close, 1001 of them
    assert len(out) == 1001
    msgs = [r.getMessage() for r in caplog.records if r.name == "streamdp.engine"]
    assert len(msgs) == 1 and "closing 1001 windows at once (windows 1…1001" in msgs[0]
    assert "origin (0.0)" in msgs[0]


def test_fewer_windows_are_not_a_warning(caplog):
    eng = _engine(origin=0.0)
    with caplog.at_level(logging.WARNING, logger="streamdp.engine"):
        out = _feed(eng, [998.5, 999.5])  # windows 1…999 close
    assert len(out) == 999
    assert not [r for r in caplog.records if r.name == "streamdp.engine"]
