"""A partition that delivers events is not idle, even when everything it delivers is rejected (review of
2026-11-23). The idle clock restarted only for accepted rows, so a partition that came back after an idle spell
with late events stayed "idle": windows kept closing past it and its whole backlog was dead-lettered as late.

Scenario (window 100 s, lateness 0, idle_timeout 10 s of wall clock, partitions 0 and 1):
  now=0   p0 and p1 deliver ts 50 (window 1).
  now=20  p0 delivers ts 150..350; p1 silent for 20 s > 10 s -> idle; windows 1..3 close (documented).
  now=21  p1 comes back with ts 120 (window 2, closed): late, as documented.
  now=22  p0 delivers ts 450, 550. p1 delivered an event 1 s ago: it holds the watermark, window 4 stays open.
  now=23  p1 delivers ts 380 (window 4): accepted.
"""
import numpy as np
import orjson

from window_helpers import EventTimes

from streamdp.accounting.cost import Cost, budget_vector
from streamdp.adapters.kafka.ordering import CanonicalStage
from streamdp.engine.engine import EngineConfig, ReleaseEngine
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.input.events import parse_batch


def batch(*pairs):
    b, dead = parse_batch([orjson.dumps({"user": u, "ts": t, "items": []}) for u, t in pairs])
    assert not dead
    return b


def test_a_partition_delivering_late_events_is_not_idle():
    conf = EngineConfig(window_seconds=100.0, horizon=64, origin=0.0, allowed_lateness=0.0, idle_timeout=10.0,
                        unsafe_test_seed=3)
    e = ReleaseEngine(conf, [EventTimes()], MemoryBudgetStore(budget_vector(Cost.zcdp(100.0))))
    s = CanonicalStage(e)
    s.wm.register([0, 1], now=0.0)
    assert s.add(0, batch(("a", 50.0)), now=0.0) == []
    assert s.add(1, batch(("b", 50.0)), now=0.0) == []
    s.release(now=0.0)
    assert s.add(0, batch(("a", 150.0), ("a", 250.0), ("a", 350.0)), now=20.0) == []
    s.release(now=20.0)
    assert e.windows.last_closed == 3          # p1 idle for 20 s: documented behaviour
    assert s.add(1, batch(("b", 120.0)), now=21.0) == [(0, "late")]   # window 2 is closed: late, as documented
    assert s.add(0, batch(("a", 450.0), ("a", 550.0)), now=22.0) == []
    s.release(now=22.0)
    # p1 delivered an event one second ago (not idle by the docs): window 4 must still be open
    assert e.windows.last_closed == 3, f"windows closed past a delivering partition: last_closed={e.windows.last_closed}"
    assert s.add(1, batch(("b", 380.0)), now=23.0) == []


def test_the_embedded_engine_keeps_a_delivering_partition_too():
    conf = EngineConfig(window_seconds=100.0, horizon=64, origin=0.0, allowed_lateness=0.0, idle_timeout=10.0,
                        unsafe_test_seed=3)
    e = ReleaseEngine(conf, [EventTimes()], MemoryBudgetStore(budget_vector(Cost.zcdp(100.0))))
    assert e.ingest(batch(("a", 50.0)), partition=0, now=0.0) == []
    assert e.ingest(batch(("b", 50.0)), partition=1, now=0.0) == []
    assert e.ingest(batch(("a", 150.0), ("a", 250.0), ("a", 350.0)), partition=0, now=20.0) == []
    e.close_due(now=20.0)
    assert e.windows.last_closed == 3
    assert e.ingest(batch(("b", 120.0)), partition=1, now=21.0) == [(0, "late")]
    assert e.ingest(batch(("a", 450.0), ("a", 550.0)), partition=0, now=22.0) == []
    e.close_due(now=22.0)
    assert e.windows.last_closed == 3
    assert e.ingest(batch(("b", 380.0)), partition=1, now=23.0) == []
