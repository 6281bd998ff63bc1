"""A window close that fails without a retry never skips its windows (review of 2026-11-23). The due windows are
taken off the watermark before they close, so a second close_due() after a StoreError (store_retries = 0, the
EngineConfig default) returned [] and window 1 was never released, its later events judged late. The engine now
refuses every ingest and close after a failed close (EngineFailed) until it is restored; from the snapshot taken
before, the same windows close, with the same releases as an undisturbed run."""
import pytest

from streamdp.accounting.cost import Cost
from streamdp.engine.engine import EngineFailed
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.filter.store import StoreError
from streamdp.input.events import parse_batch

from engine_helpers import PresenceCount, engine, ev


class FlakyStore(MemoryBudgetStore):
    fail = 0

    def admit(self, *a, **kw):
        if self.fail:
            self.fail -= 1
            raise StoreError("redis down")
        return super().admit(*a, **kw)


def _batches():
    return [parse_batch([ev("a", 1.0), ev("b", 2.0), ev("c", 25.0)])[0], parse_batch([ev("d", 12.0)])[0]]


def _undisturbed():
    e, _ = engine([PresenceCount("p")], Cost.zcdp(10.0), store_cls=FlakyStore)
    e.ingest(_batches()[0])
    return e.close_due(), e


def test_failed_close_refuses_until_restored_then_closes_the_same_windows():
    e, store = engine([PresenceCount("p")], Cost.zcdp(10.0), store_cls=FlakyStore)
    first, _ = _batches()
    e.ingest(first)
    snap = e.snapshot(include_rng=True)
    store.fail = 1
    with pytest.raises(StoreError):
        e.close_due()
    with pytest.raises(EngineFailed, match="restore a snapshot"):
        e.close_due()
    with pytest.raises(EngineFailed):
        e.ingest(parse_batch([ev("d", 12.0)])[0])
    e.restore(snap, own_retry=True)
    closed = e.close_due()
    assert [s.seq for s in closed] == [1, 2]
    ref, _ = _undisturbed()
    assert [[r.to_bytes() for r in s.records] for s in closed] == [[r.to_bytes() for r in s.records] for s in ref]
    assert [(s.seq, s.admitted) for s in closed] == [(1, 2), (2, 0)]
