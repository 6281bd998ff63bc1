"""The release log refuses a second, different record for a key it holds (docs/contract.md §3: fresh noise must never be
published for the same quantity; ``adapters/kafka/checkpoint.py``), and the keys and bytes it is indexed by.

* :class:`DeferredReleaseLog` (the worker's store wrapper) answers ``put_release`` with the record already logged —
  in Redis, or pending in its own memory until the next checkpoint — so the engine sees the conflict;
* the checkpoint's Lua script refuses to overwrite a logged record with different bytes (``CheckpointConflict``),
  and an ``ack`` of an older checkpoint version does not clear the pending records of a newer one (real
  redis-server, the session fixture);
* a record's key is ``query/epoch/t`` with t the window number WITHIN the epoch, and its bytes are canonical JSON
  (sorted keys), so a replay produces the same key and the same bytes.

Mutants C3–C6, R2 and R3 of the state mutation audit survived the suite; each test here kills at least one.
"""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from streamdp.accounting.cost import Cost, budget_vector
from streamdp.adapters.kafka.checkpoint import (CheckpointConflict, DeferredReleaseLog, PendingRecord,
                                                RedisCheckpoint, decode_pending)
from streamdp.engine.engine import EngineConfig, ReleaseConflict, ReleaseEngine
from streamdp.engine.pipeline import EmbeddedPipeline
from streamdp.engine.query import QueryRelease, Reservation, WindowQuery
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.outputs.sinks import ListSink


class NoisyCount(WindowQuery):
    """Test-only query: a count of the users present plus N(0, 1) noise from the engine's generator, reserving
    zCDP ρ = 0.01 per user present."""

    kind = "noisy_count"

    def __init__(self, qid: str = "n") -> None:
        super().__init__(qid)
        self.cost = Cost.zcdp(0.01)

    def prepare(self, w, rng):
        users = np.unique(w.user_ids)
        return Reservation(users, np.tile(self.cost.to_fixed(), (users.size, 1)))

    def release(self, w, res, admitted, rng, items):
        n = int(admitted[res.users].sum()) if res.users.size else 0
        return QueryRelease(values={"count": n + float(rng.normal(0.0, 1.0))})

    def state(self):
        return {}

    def load_state(self, d):
        pass


def ev(user, ts):
    return orjson.dumps({"user": user, "ts": ts, "items": []})


def make_engine(store, seed: int = 3, horizon: int = 4) -> ReleaseEngine:
    conf = EngineConfig(window_seconds=10.0, horizon=horizon, origin=0.0, unsafe_test_seed=seed)
    return ReleaseEngine(conf, [NoisyCount()], store)


def budget_store() -> MemoryBudgetStore:
    return MemoryBudgetStore(budget_vector(Cost.zcdp(100.0)))


SIX_WINDOWS = [ev("a", 5.0 + 10.0 * k) for k in range(6)]  # windows 1…6, one event each


# ------------------------------------------------------------------------------------------ DeferredReleaseLog
def test_the_deferred_log_answers_with_the_record_already_logged():
    """The inner store (the release log in Redis) holds A for q/0/1: putting B answers A, and B is not queued for
    the next checkpoint. A key that is not logged anywhere is queued and answered with its own bytes."""
    inner = MemoryBudgetStore()
    inner.put_release("q/0/1", b"A")
    d = DeferredReleaseLog(inner)
    assert d.put_release("q/0/1", b"B") == b"A"
    assert d.put_release("q/0/2", b"C") == b"C"
    assert d.take()[0] == {"q/0/2": b"C"}
    assert inner.get_release("q/0/1") == b"A" and inner.get_release("q/0/2") is None  # nothing written yet


def test_the_deferred_log_answers_with_its_own_pending_record():
    """Before any checkpoint, C is pending for q/0/2 (in memory only): putting D answers C, and only C is queued
    (the inner store knows nothing of the key, so only the wrapper's own memory can refuse D)."""
    d = DeferredReleaseLog(MemoryBudgetStore())
    assert d.put_release("q/0/2", b"C") == b"C"
    assert d.put_release("q/0/2", b"D") == b"C"
    assert d.get_release("q/0/2") == b"C"
    assert d.take()[0] == {"q/0/2": b"C"}


def test_the_engine_through_the_deferred_log_refuses_fresh_noise_for_a_logged_window():
    """A worker's engine (seed 3) closing window 1 while the release log already holds a DIFFERENT record for
    n/0/1 (the release of the same window with other noise, seed 4) raises ReleaseConflict instead of publishing.
    Positive control: when the log holds exactly the bytes this engine computes, the window closes, the record is
    returned, and nothing is queued again for n/0/1 — for an engine on the store itself (the embedded path). The
    worker's DeferredReleaseLog refuses a logged key even then, before the admit (refuse_logged): its release log is
    written only with the checkpoint of the state that produced it, so a window about to close whose key is logged
    was released by another deployment (service review of 2026-11-23)."""
    ref = ListSink()
    EmbeddedPipeline(make_engine(budget_store(), seed=4), [ref]).feed(SIX_WINDOWS[:2])
    own = ListSink()
    EmbeddedPipeline(make_engine(budget_store(), seed=3), [own]).feed(SIX_WINDOWS[:2])
    other, mine = ref.records[0].to_bytes(), own.records[0].to_bytes()
    assert ref.records[0].key == own.records[0].key == "n/0/1" and other != mine  # the noise differs

    inner = budget_store()
    inner.put_release("n/0/1", other)
    with pytest.raises(ReleaseConflict):
        EmbeddedPipeline(make_engine(DeferredReleaseLog(inner), seed=3), [ListSink()]).feed(SIX_WINDOWS[:2])

    inner = budget_store()
    inner.put_release("n/0/1", mine)
    sink = ListSink()
    EmbeddedPipeline(make_engine(inner, seed=3), [sink]).feed(SIX_WINDOWS[:2])
    assert [r.to_bytes() for r in sink.records] == [mine]

    inner = budget_store()
    inner.put_release("n/0/1", mine)
    d = DeferredReleaseLog(inner)
    with pytest.raises(ReleaseConflict):
        EmbeddedPipeline(make_engine(d, seed=3), [ListSink()]).feed(SIX_WINDOWS[:2])
    assert d.take()[0] == {} and list(inner.iter_users()) == []  # refused before the admit: nobody charged


# ------------------------------------------------------------------------------------------ keys and bytes
def test_record_keys_use_the_window_within_the_epoch_and_bytes_are_canonical():
    """Horizon 4, six windows: seq 1…6 are (epoch, t) = (0,1) (0,2) (0,3) (0,4) (1,1) (1,2), so the keys are
    n/0/1 … n/0/4, n/1/1, n/1/2 (seq 5 is NOT n/1/5) — in the records and in the release log the worker
    checkpoints. Every record's bytes are JSON with sorted keys (canonical: a replay gives identical bytes)."""
    d = DeferredReleaseLog(budget_store())
    sink = ListSink()
    EmbeddedPipeline(make_engine(d), [sink]).run([SIX_WINDOWS])
    keys = ["n/0/1", "n/0/2", "n/0/3", "n/0/4", "n/1/1", "n/1/2"]
    assert [r.key for r in sink.records] == keys
    assert [(r.seq, r.epoch, r.t) for r in sink.records][4] == (5, 1, 1)
    logged = d.take()[0]
    assert list(logged) == keys
    for r in sink.records:
        b = r.to_bytes()
        assert logged[r.key] == b
        assert b == orjson.dumps(orjson.loads(b), option=orjson.OPT_SORT_KEYS)
        assert orjson.loads(b)["key"] == r.key
    assert list(orjson.loads(sink.records[4].to_bytes())) == sorted(orjson.loads(sink.records[4].to_bytes()))


# ------------------------------------------------------------------------------------------ Redis checkpoint
def test_the_checkpoint_refuses_a_different_record_for_a_logged_key(ckpt):
    """Checkpoint 1 logs A for q/0/1 with state {"x": 1}. A checkpoint carrying B for q/0/1 fails with
    CheckpointConflict and changes nothing: the log still holds A, the version is still 1 and a reader gets state
    {"x": 1} and offsets {0: 1}. Positive control: a checkpoint carrying A again (a replay) is accepted
    (version 2)."""
    assert ckpt.write({"x": 1}, {0: 1}, [], {"q/0/1": b"A"}, [], {}) == 1
    with pytest.raises(CheckpointConflict):
        ckpt.write({"x": 2}, {0: 2}, [], {"q/0/1": b"B"}, [], {})
    assert ckpt.store.get_release("q/0/1") == b"A"
    assert ckpt.read_info()["version"] == 1 and ckpt.read_info()["offsets"] == {"0": 1}
    assert ckpt.write({"x": 3}, {0: 3}, [], {"q/0/1": b"A"}, [], {}) == 2
    back = RedisCheckpoint(ckpt.store, "g", "events").claim("reader")
    assert back.version == 2 and back.state["x"] == 3 and back.offsets == {0: 3}


def test_a_stale_ack_does_not_clear_newer_pending_records(ckpt):
    """Checkpoint 1 has pending k1, checkpoint 2 pending k2. Acknowledging version 1 (its records were published,
    but checkpoint 2's were not yet) returns False and leaves k2 pending; acknowledging version 2 returns True and
    clears it (positive control)."""
    v1 = ckpt.write({"x": 1}, {0: 1}, [PendingRecord("t", "k1", b"1")], {}, [], {})
    v2 = ckpt.write({"x": 2}, {0: 2}, [PendingRecord("t", "k2", b"2")], {}, [], {})
    assert (v1, v2) == (1, 2)
    assert ckpt.ack(v1) is False
    assert [(p.key, p.value) for p in decode_pending(ckpt.r.hget(ckpt.key, "pending"))] == [("k2", b"2")]
    assert ckpt.read_info()["pending_records"] == 1
    assert ckpt.ack(v2) is True
    assert ckpt.read_info()["pending_records"] == 0
    assert RedisCheckpoint(ckpt.store, "g", "events").claim("reader").pending == []
