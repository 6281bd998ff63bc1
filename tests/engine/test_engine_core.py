"""Engine mechanics independent of the mechanisms: windows close once, admission/HALT, idempotency, snapshots."""

import numpy as np
import pytest

from streamdp.accounting.cost import Cost, budget_vector
from streamdp.engine.engine import EngineConfig, ReleaseConflict, ReleaseEngine
from streamdp.engine.pipeline import EmbeddedPipeline
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.input.events import parse_batch
from streamdp.outputs.sinks import ListSink

from engine_helpers import PresenceCount, ev


def make(budget_rho=1.0, rho=0.5, seed=3, store=None, sigma=1.0, **cfg):
    store = store or MemoryBudgetStore(budget_vector(Cost.zcdp(budget_rho)))
    conf = EngineConfig(window_seconds=10.0, horizon=4, origin=0.0, unsafe_test_seed=seed, **cfg)
    return ReleaseEngine(conf, [PresenceCount("p", rho=rho, sigma=sigma)], store), store


def run(engine, payloads):
    sink = ListSink()
    EmbeddedPipeline(engine, [sink]).run([payloads])
    return sink


def test_windows_close_once_and_in_order():
    e, _ = make(budget_rho=100)
    sink = run(e, [ev("a", 1), ev("b", 12), ev("a", 35)])
    assert [(r.seq, r.values["true_admitted"]) for r in sink.records] == [(1, 1), (2, 1), (3, 0), (4, 1)]
    assert [(r.epoch, r.t) for r in sink.records] == [(0, 1), (0, 2), (0, 3), (0, 4)]


def test_user_at_budget_is_halted_and_later_events_change_nothing():
    # budget 1.0, cost 0.5 per window present: admitted in windows 1 and 2, halted at window 3, forever.
    e, store = make(budget_rho=1.0, rho=0.5)
    events = [ev("a", 1), ev("a", 11), ev("a", 21), ev("a", 31), ev("b", 31)]
    sink = run(e, events)
    assert [r.values["true_admitted"] for r in sink.records] == [1, 1, 0, 1]
    ua = store.get_user("a")
    assert ua.halted and ua.spent_cost().zcdp_rho == pytest.approx(1.0)
    assert not store.get_user("b").halted
    assert e.counters.halted_users == 2  # refusals summed over windows: halted at window 3, refused again at 4
    # the same stream without the halted user's later events gives the identical releases (same seed)
    e2, _ = make(budget_rho=1.0, rho=0.5)
    sink2 = run(e2, events[:2] + [ev("b", 31)])
    assert [r.to_bytes() for r in sink.records] == [r.to_bytes() for r in sink2.records]


def test_late_events_are_dead_lettered_and_counted():
    e, _ = make(budget_rho=100)
    sink = ListSink()
    p = EmbeddedPipeline(e, [sink])
    p.feed([ev("a", 1), ev("a", 25)])  # closes windows 1 (watermark 25 ≥ 10) and 2
    p.feed([ev("b", 5), ev("c", 15), ev("d", 26)])
    assert [d.reason for d in sink.dead] == ["late", "late"]
    assert e.counters.late == 2


def test_absurd_future_event_is_dead_lettered():
    e, _ = make(budget_rho=100, max_future_seconds=100.0)
    sink = ListSink()
    p = EmbeddedPipeline(e, [sink])
    p.feed([ev("a", 1)])
    p.feed([ev("a", 10_000)])
    assert [d.reason for d in sink.dead] == ["too_far_in_future"]


def test_epochs_restart_window_numbering():
    e, _ = make(budget_rho=100)
    sink = run(e, [ev("a", 5 + 10 * k) for k in range(9)])
    assert [(r.epoch, r.t, r.seq) for r in sink.records][3:6] == [(0, 4, 4), (1, 1, 5), (1, 2, 6)]


def test_admit_replay_charges_nothing_and_release_log_is_idempotent():
    store = MemoryBudgetStore(budget_vector(Cost.zcdp(10)))
    e1, _ = make(store=store)
    snap = None
    sink = ListSink()
    p = EmbeddedPipeline(e1, [sink])
    p.feed([ev("a", 1), ev("b", 2)])
    snap = e1.snapshot()
    p.feed([ev("a", 15)])  # closes window 1: charges a and b
    spent = store.get_user("a").spent.copy()
    # crash after charge+log, restore the pre-close snapshot: re-closing window 1 re-admits without charging,
    # and (same seed, same rng state) produces the identical record, accepted by the release log
    e2, _ = make(store=store)
    e2.restore(snap)
    sink2 = ListSink()
    EmbeddedPipeline(e2, [sink2]).feed([ev("a", 15)])
    np.testing.assert_array_equal(store.get_user("a").spent, spent)
    assert sink2.records[0].to_bytes() == sink.records[0].to_bytes()


def test_fresh_noise_for_a_published_release_is_refused():
    store = MemoryBudgetStore(budget_vector(Cost.zcdp(10)))
    e1, _ = make(store=store, seed=1, sigma=1e6)
    p = EmbeddedPipeline(e1, [ListSink()])
    p.feed([ev("a", 1), ev("b", 2)])
    snap = e1.snapshot()
    p.feed([ev("a", 15)])
    e2, _ = make(store=store, seed=99, sigma=1e6)  # a different noise stream: the recomputed release differs
    e2.restore(snap)
    e2.rng = __import__("streamdp.noise.generator", fromlist=["x"]).unsafe_seeded_generator(12345)
    with pytest.raises(ReleaseConflict):
        EmbeddedPipeline(e2, [ListSink()]).feed([ev("a", 15)])


def test_snapshot_restore_gives_identical_output():
    events = [ev(f"u{i % 7}", i * 1.7) for i in range(60)]
    e1, _ = make(budget_rho=100)
    s1 = run(e1, events)
    e2, _ = make(budget_rho=100)
    p = EmbeddedPipeline(e2, [ListSink()])
    p.feed(events[:30])
    snap = e2.snapshot()
    e3, _ = make(budget_rho=100, store=e2.store)
    e3.restore(snap)
    s3 = ListSink()
    p3 = EmbeddedPipeline(e3, [s3])
    p3.run([events[30:]])
    assert [r.to_bytes() for r in s1.records][-len(s3.records):] == [r.to_bytes() for r in s3.records]


def test_secure_mode_snapshot_holds_no_generator_state():
    store = MemoryBudgetStore(budget_vector(Cost.zcdp(10)))
    conf = EngineConfig(window_seconds=10.0, horizon=4, origin=0.0)
    e = ReleaseEngine(conf, [PresenceCount("p")], store)
    from streamdp.engine.state_codec import decode

    assert decode(e.snapshot())["rng"] is None


def test_duplicate_query_ids_rejected():
    with pytest.raises(ValueError, match="duplicate|twice|unique|x"):
        ReleaseEngine(EngineConfig(window_seconds=1, origin=0.0), [PresenceCount("x"), PresenceCount("x")],
                      MemoryBudgetStore())


def test_ingest_groups_items_per_window():
    """(Events of window 1 after one of window 2 are late since lateness is judged per event: in order here.)"""
    e, _ = make(budget_rho=100)
    b, _ = parse_batch([ev("a", 1, ["x", "y"]), ev("c", 2, []), ev("d", 3, ["y"]), ev("b", 11, ["z"])])
    e.ingest(b)
    w1 = e._window_data(1)
    assert e.users.names(w1.user_ids) == ["a", "c", "d"]
    assert e.items.names(w1.item_ids) == ["x", "y", "y"]
    assert w1.item_offsets.tolist() == [0, 2, 2, 3]
    w2 = e._window_data(2)
    assert e.items.names(w2.item_ids) == ["z"]


class FlakyStore(MemoryBudgetStore):
    """Fails the first `fail` calls to put_release / admit (a Redis outage in the middle of a window close)."""

    def __init__(self, *a, fail_admit=0, fail_put=0, **k):
        super().__init__(*a, **k)
        self.fail_admit, self.fail_put = fail_admit, fail_put

    def admit(self, *a, **k):
        if self.fail_admit > 0:
            self.fail_admit -= 1
            raise __import__("streamdp.filter.store", fromlist=["x"]).StoreError("down")
        return super().admit(*a, **k)

    def put_release(self, key, record):
        if self.fail_put > 0:
            self.fail_put -= 1
            # the write reached the store but the reply was lost: the record IS logged
            super().put_release(key, record)
            raise __import__("streamdp.filter.store", fromlist=["x"]).StoreError("reply lost")
        return super().put_release(key, record)


@pytest.mark.parametrize("fail_admit,fail_put", [(2, 0), (0, 1), (1, 2)])
def test_store_outage_mid_close_is_retried_with_identical_releases(fail_admit, fail_put):
    events = [ev(f"u{i % 5}", i * 3.1) for i in range(40)]
    e1, s1 = make(budget_rho=2.0)
    r1 = run(e1, events).records
    flaky = FlakyStore(budget_vector(Cost.zcdp(2.0)), fail_admit=fail_admit, fail_put=fail_put)
    e2, _ = make(store=flaky, store_retries=5, store_backoff_seconds=0.001)
    r2 = run(e2, events).records
    assert [r.to_bytes() for r in r1] == [r.to_bytes() for r in r2]
    assert e2.counters.store_retries == fail_admit + fail_put
    for u in ("u0", "u1", "u4"):
        np.testing.assert_array_equal(s1.get_user(u).spent, flaky.get_user(u).spent)  # nothing charged twice


def test_secure_mode_retry_reuses_the_same_noise():
    """Without a test seed, the in-memory retry snapshot carries the generator state: the logged record and the
    retried one are identical (no ReleaseConflict, no fresh noise)."""
    events = [ev(f"u{i % 5}", i * 3.1) for i in range(40)]
    flaky = FlakyStore(budget_vector(Cost.zcdp(50.0)), fail_put=3)
    conf = EngineConfig(window_seconds=10.0, horizon=4, origin=0.0, store_retries=5, store_backoff_seconds=0.001)
    e = ReleaseEngine(conf, [PresenceCount("p", sigma=1e6)], flaky)
    recs = run(e, events).records
    assert len(recs) == 13 and e.counters.store_retries == 3


def test_outage_longer_than_retries_raises_and_publishes_nothing():
    from streamdp.filter.store import StoreError

    flaky = FlakyStore(budget_vector(Cost.zcdp(2.0)), fail_admit=10)
    e, _ = make(store=flaky, store_retries=2, store_backoff_seconds=0.001)
    sink = ListSink()
    with pytest.raises(StoreError):
        EmbeddedPipeline(e, [sink]).run([[ev("a", 1), ev("a", 25)]])
    assert sink.records == []
