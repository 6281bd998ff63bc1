"""Canonical ingestion order (streamdp/adapters/kafka/ordering.py), without a broker: the releases do not depend on
how partitions interleave, on batch sizes, or on a checkpoint/restore in the middle of the stream."""

from __future__ import annotations

import copy

import numpy as np
import orjson
import pytest

from streamdp.accounting.cost import budget_vector
from streamdp.adapters.kafka.ordering import CanonicalStage, batch_from_state, batch_state, concat_batches, take_rows
from streamdp.config.loader import parse_config
from streamdp.engine import state_codec
from streamdp.engine.engine import ReleaseEngine
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.input.events import parse_batch
from streamdp.input.sources import synthetic_events
from streamdp.noise.generator import synthetic_data_generator

P = 4
RAW = {"service": {"window_seconds": 3600.0, "horizon": 16, "origin": 1_700_000_000.0, "unsafe_test_seed": 5},
       "budget": {"zcdp_rho": 2.0, "zcdp_delta": 1e-4},
       "query": [{"id": "c", "kind": "continual_counts", "sigma": 1.0, "max_items_per_window": 1},
                 {"id": "k", "kind": "top_k", "epsilon": 1.0, "k": 3, "kbar": 8, "k_star": 1000}]}


@pytest.fixture(scope="module")
def partitions():
    evs = list(synthetic_events(n_users=400, n_items=60, windows=6, events_per_window=600, seed=3))
    parts: list[list[bytes]] = [[] for _ in range(P)]
    for e in evs:
        parts[int(orjson.loads(e)["user"][1:]) % P].append(e)  # per-partition event-time order kept
    return parts


def _engine():
    cfg = parse_config(copy.deepcopy(RAW))
    return ReleaseEngine(cfg.engine_config(), cfg.build_queries(), MemoryBudgetStore(budget_vector(cfg.budget)))


def _run(parts, chunk: int, order_seed: int, restore_after: int | None = None) -> dict[str, bytes]:
    """Feed chunks of the partitions in a random interleaving; optionally snapshot + restore mid-stream."""
    eng = _engine()
    stage = CanonicalStage(eng)
    stage.wm.register(range(P))
    pos = [0] * P
    g = synthetic_data_generator(order_seed)
    out: dict[str, bytes] = {}
    steps = 0
    while any(pos[p] < len(parts[p]) for p in range(P)):
        p = int(g.choice([q for q in range(P) if pos[q] < len(parts[q])]))
        batch, dead = parse_batch(parts[p][pos[p]:pos[p] + chunk])
        assert not dead
        assert stage.add(p, batch) == []
        pos[p] += chunk
        for s in stage.release():
            out.update({r.key: r.to_bytes() for r in s.records})
        steps += 1
        if restore_after is not None and steps == restore_after:
            snap, st = eng.snapshot(), state_codec.encode(stage.state())
            store = eng.store
            eng = _engine()
            eng.store = store
            eng.restore(snap)
            stage = CanonicalStage(eng)
            stage.load_state(state_codec.decode(st))
            stage.wm.register(range(P))
    for s in stage.release(flush=True):
        out.update({r.key: r.to_bytes() for r in s.records})
    return out


def test_releases_do_not_depend_on_interleaving_batching_or_restore(partitions):
    ref = _run(partitions, 100, 1)
    assert len(ref) == 2 * 6
    assert _run(partitions, 100, 2) == ref
    assert _run(partitions, 37, 3) == ref
    assert _run(partitions, 250, 4, restore_after=7) == ref


def test_a_silent_partition_holds_the_watermark(partitions):
    eng = _engine()
    stage = CanonicalStage(eng)
    stage.wm.register(range(P))
    for p in range(P - 1):
        stage.add(p, parse_batch(partitions[p])[0])
    assert stage.release() == []  # partition 3 has not spoken: nothing may close
    stage.add(P - 1, parse_batch(partitions[P - 1])[0])
    assert len(stage.release()) >= 1


def test_late_and_far_future_events_are_rejected_on_arrival(partitions):
    eng = _engine()
    stage = CanonicalStage(eng)
    stage.wm.register([0])
    stage.add(0, parse_batch(partitions[0])[0])
    closed = stage.release()
    assert closed
    late = orjson.dumps({"user": "u1", "ts": 1_700_000_000.0 + 10, "items": ["x"]})
    future = orjson.dumps({"user": "u1", "ts": 1_700_000_000.0 + 400 * 86400, "items": ["x"]})
    b, _ = parse_batch([late, future])
    assert stage.add(0, b) == [(0, "late"), (1, "too_far_in_future")]
    assert eng.counters.by_reason == {"late": 1, "too_far_in_future": 1} and eng.counters.late == 1


def test_take_rows_concat_and_state_round_trip():
    payloads = [orjson.dumps({"user": f"u{i}", "ts": 1_700_000_000.0 + i, "items": [f"i{j}" for j in range(i % 3)],
                              "value": float(i)}) for i in range(10)]
    b, _ = parse_batch(payloads)
    rows = np.array([1, 2, 5, 9])
    t = take_rows(b, rows)
    assert t.users == ["u1", "u2", "u5", "u9"] and t.items == ["i0", "i0", "i1", "i0", "i1", "i0", "i1"][:len(t.items)]
    assert list(np.diff(t.item_offsets)) == [1, 2, 2, 0]
    c = concat_batches([take_rows(b, np.arange(0, 4)), take_rows(b, np.arange(4, 10))])
    assert c.users == b.users and c.items == b.items and np.array_equal(c.item_offsets, b.item_offsets)
    r = batch_from_state(state_codec.decode(state_codec.encode(batch_state(b))))
    assert r.users == b.users and r.items == b.items and np.array_equal(r.ts, b.ts)
    assert np.array_equal(np.isnan(r.loc), np.isnan(b.loc))


# ---- the parser's interning help (per-batch dictionaries) through the canonical stage ------------------------
def _names_of(dictionary, codes) -> list:
    return [dictionary[c] for c in np.asarray(codes).tolist()]


def _fast_batch(n: int, seed: int, users: int = 300):
    evs = list(synthetic_events(n_users=users, n_items=50, windows=3, events_per_window=n // 3, seed=seed))
    b, dead = parse_batch(evs)
    assert not dead and b.user_codes is not None and b.item_codes is not None  # the fast path ran (≥ 2048 rows)
    return b


def test_take_rows_and_concat_carry_the_dictionaries():
    a, b = _fast_batch(3000, 1), _fast_batch(2400, 2)
    g = synthetic_data_generator(7)
    ra = np.sort(g.choice(len(a), 700, replace=False))
    rb = np.sort(g.choice(len(b), 50, replace=False))  # few rows of a big dictionary: compacted on concat
    ta, tb = take_rows(a, ra), take_rows(b, rb)
    for t in (ta, tb):
        assert t.user_dict is not None and _names_of(t.user_dict, t.user_codes) == t.users
        assert _names_of(t.item_dict, t.item_codes) == t.items
    # a batch without the help (exact path, or restored from a checkpoint) joins with names of its own
    plain = take_rows(parse_batch([orjson.dumps({"user": "zz", "ts": 1_700_000_000.0, "items": ["q", "r"]})])[0],
                      np.array([0]))
    assert plain.user_codes is None
    parts = [ta, take_rows(a, np.setdiff1d(np.arange(len(a)), ra)), plain, tb]
    c = concat_batches(parts)
    assert c.users == [u for p in parts for u in p.users] and c.items == [i for p in parts for i in p.items]
    assert _names_of(c.user_dict, c.user_codes) == c.users
    assert _names_of(c.item_dict, c.item_codes) == c.items
    assert len(c.user_dict) < len(a.user_dict) + len(b.user_dict) + 1  # a's dictionary once, b's compacted
    # a single cut of a big dictionary is compacted too; without codes=False nothing is carried
    one = concat_batches([tb])
    assert len(one.user_dict) <= len(tb) and _names_of(one.user_dict, one.user_codes) == tb.users
    assert concat_batches(parts, codes=False).user_codes is None


def test_interning_help_does_not_change_the_releases():
    """Batches large enough for the parser's fast path carry dictionaries through the stage (ingested as one
    concatenated batch per window); the releases equal those of small batches parsed on the exact path."""
    evs = list(synthetic_events(n_users=500, n_items=80, windows=6, events_per_window=3000, seed=9))
    parts: list[list[bytes]] = [[] for _ in range(P)]
    for e in evs:
        parts[int(orjson.loads(e)["user"][1:]) % P].append(e)
    assert min(len(p) for p in parts) > 2 * 2048
    big = _run(parts, 2100, 1)
    assert len(big) == 2 * 6
    assert _run(parts, 300, 2) == big
    assert _run(parts, 2500, 3, restore_after=3) == big


def test_held_events_state_is_append_logs(partitions):
    """Each (window, partition)'s held events are one append log of the engine's state (they moved from the stage
    into the engine on 2026-12-07): later states extend it until the window closes (then it is gone), a restored
    engine extends what it loaded, and a checkpoint of before — the stage's ``{"wm", "held"}``, with format-1
    held state (one batch_state per (window, partition)) — still loads to the same events and watermarks."""
    from streamdp.engine.append_log import AppendLog

    eng = _engine()
    stage = CanonicalStage(eng)
    stage.wm.register(range(P))
    prev: dict = {}
    pos = [0] * P
    closed_seen = False
    for step in range(40):
        p = step % P
        batch, _ = parse_batch(partitions[p][pos[p]:pos[p] + 37])
        pos[p] += 37
        stage.add(p, batch)
        if step % 5 == 4:
            closed_seen |= bool(stage.release())
        held = eng.state_tree()["held"]
        for t, parts in held.items():
            for q, log in parts.items():
                assert isinstance(log, AppendLog)
                if (t, q) in prev:
                    assert log.startswith(prev[(t, q)])
        assert all(int(t) > eng.windows.last_closed for t in held)  # closed windows' logs are gone
        prev = {(t, q): log for t, parts in held.items() for q, log in parts.items()}
    assert closed_seen and prev

    st = state_codec.decode(state_codec.encode(eng.state_tree()))
    again = _engine()
    again.restore_tree(st)
    assert again.held_events == eng.held_events and again.windows.max_ts == eng.windows.max_ts
    batch, _ = parse_batch(partitions[0][pos[0]:pos[0] + 37])
    for e in (eng, again):
        e.ingest(batch, 0)
    assert again.state_tree()["held"] == eng.state_tree()["held"]
    for t, parts in again.state_tree()["held"].items():
        for q, log in parts.items():
            assert log.startswith(st["held"][t][q]) if q in st["held"].get(t, {}) else True

    v1 = {"wm": {"max_ts": {str(q): v for q, v in eng.windows.max_ts.items()}},
          "held": {t: {q: batch_state(concat_batches(bs, codes=False)) for q, bs in
                       ((str(k), v) for k, v in stage.held[int(t)].items())}
                   for t in st["held"]}}
    old = CanonicalStage(_engine())
    old.load_state(state_codec.decode(state_codec.encode(v1)))
    assert old.held_events == stage.held_events and old.wm.max_ts == eng.windows.max_ts
    for t in stage.held:
        for q in stage.held[t]:
            a, b = concat_batches(stage.held[t][q], codes=False), concat_batches(old.held[t][q], codes=False)
            assert a.users == b.users and a.items == b.items and np.array_equal(a.ts, b.ts)
