"""Same input, same releases (issue 32): the engine's releases, dead letters and spend are a function of each input
partition's record sequence and the configuration alone — not of the batch size, of how the partitions are
interleaved, or of a snapshot and restore in the middle.

The stream has three partitions (user-keyed) with disorder inside the allowed lateness, events far behind their
partition's watermark (late), an event before the origin, a far-future event, and new user and item names that
first appear, in input order, in a later window than the one they are released in (the engine used to number
names in input order, the Kafka worker in (window, partition, offset) order, and test-mode noise follows the
numbers). Before 2026-12-07 the engine decided lateness per batch: batches of 50 and of 20,000 gave different
dead letters and releases (24 `late` events against 0 in the outside check)."""

from __future__ import annotations

import copy

import numpy as np
import orjson
import pytest

from streamdp.accounting.cost import budget_vector
from streamdp.config.loader import parse_config
from streamdp.engine.engine import ReleaseEngine
from streamdp.engine.pipeline import EmbeddedPipeline
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.input.events import parse_batch
from streamdp.noise.generator import synthetic_data_generator
from streamdp.outputs.sinks import ListSink

H = 3600.0
ORIGIN = 1_700_000_000.0
P = 3
RAW = {"service": {"window_seconds": H, "horizon": 8, "origin": ORIGIN, "allowed_lateness": 600.0,
                   "unsafe_test_seed": 7},
       "budget": {"zcdp_rho": 10.0, "zcdp_delta": 1e-4, "cgp_rho": 1e-4},
       "query": [{"id": "c", "kind": "continual_counts", "sigma": 1.0, "max_items_per_window": 2},
                 {"id": "k", "kind": "top_k", "epsilon": 1.0, "k": 3, "kbar": 8, "k_star": 1000},
                 {"id": "g", "kind": "geo_locations", "mechanism": "cgp", "rho": 1e-7, "units": "metres",
                  "ref_lat": 40.0, "region": [39.0, 41.0, -75.0, -73.0], "location": "last"}]}


def _stream() -> list[list[bytes]]:
    """Per partition, its records in offset order."""
    g = synthetic_data_generator(5)
    parts: list[list[bytes]] = [[] for _ in range(P)]
    for i in range(1800):
        u = int(g.integers(0, 90))
        ts = ORIGIN + 500.0 + i * 12.0 + float(g.uniform(-500.0, 0.0))  # ≈ 6 hours, disorder within the lateness
        ev = {"user": f"u{u}", "ts": ts, "items": [f"i{int(x)}" for x in g.integers(0, 25, int(g.integers(0, 3)))],
              "loc": [40.0 + float(g.uniform(-0.5, 0.5)), -74.0 + float(g.uniform(-0.5, 0.5))]}
        parts[u % P].append(orjson.dumps(ev))
    # late: far behind the partition's watermark (one and two windows), and a name first seen there
    for k, p in enumerate((0, 1, 2, 0)):
        at = len(parts[p]) * (k + 2) // 7
        parts[p].insert(at, orjson.dumps({"user": f"late{k}", "ts": ORIGIN + 60.0 * k, "items": ["late-item"]}))
    # names that first appear (in input order) in window 3, then in window 2 (inside the lateness)
    p = 1
    at = next(i for i, e in enumerate(parts[p]) if orjson.loads(e)["ts"] >= ORIGIN + 2 * H + 100.0)
    parts[p][at:at] = [orjson.dumps({"user": "fresh-b", "ts": ORIGIN + 2 * H + 50.0, "items": ["new-b"],
                                     "loc": [40.1, -74.1]}),
                       orjson.dumps({"user": "fresh-a", "ts": ORIGIN + 2 * H - 300.0, "items": ["new-a"],
                                     "loc": [40.2, -74.2]})]
    parts[2].insert(5, orjson.dumps({"user": "u2", "ts": ORIGIN - 10.0, "items": []}))  # before the origin
    parts[0].insert(100, orjson.dumps({"user": "u0", "ts": ORIGIN + 400 * 86400.0, "items": []}))  # absurd
    return parts


PARTS = _stream()


def _engine():
    cfg = parse_config(copy.deepcopy(RAW))
    store = MemoryBudgetStore(budget_vector(cfg.budget))
    e = ReleaseEngine(cfg.engine_config(), cfg.build_queries(), store)
    e.register_partitions(range(P))
    return e, store


def _outcome(e, store, records, dead):
    spend = {u.user: (tuple(int(x) for x in u.spent), bool(u.halted)) for u in store.iter_users()}
    return records, sorted(dead), spend


def run(batch: int, order_seed: int | None = None, restore_at: int | None = None):
    """Every partition's records in batches of ``batch``, the partitions interleaved at random (``order_seed``;
    None: partition after partition), windows closed after every batch, the end of input at the end. Returns
    (records in publication order, dead letters (partition, offset, reason), spend per user)."""
    e, store = _engine()
    records: list[bytes] = []
    dead: list[tuple[int, int, str]] = []
    pos = [0] * P
    g = synthetic_data_generator(order_seed) if order_seed is not None else None
    steps = 0
    while any(pos[p] < len(PARTS[p]) for p in range(P)):
        open_ = [p for p in range(P) if pos[p] < len(PARTS[p])]
        p = int(g.choice(open_)) if g is not None else open_[0]
        chunk = PARTS[p][pos[p]:pos[p] + batch]
        b, bad = parse_batch(chunk)
        assert not bad
        for row, reason in e.ingest(b, p):
            dead.append((p, pos[p] + int(b.source_rows[row]), reason))
        pos[p] += len(chunk)
        records += [r.to_bytes() for s in e.close_due() for r in s.records]
        steps += 1
        if restore_at is not None and steps == restore_at:
            snap = e.snapshot()
            e2, _ = _engine()
            e2.store = e.store
            e2.restore(snap)
            e = e2
    records += [r.to_bytes() for s in e.flush() for r in s.records]
    return _outcome(e, store, records, dead)


@pytest.fixture(scope="module")
def reference():
    return run(20_000)


def test_the_reference_run_has_late_and_rejected_events_and_all_windows(reference):
    records, dead, spend = reference
    reasons = [r for *_, r in dead]
    assert reasons.count("late") == 4 and reasons.count("before_origin") == 1
    assert reasons.count("too_far_in_future") == 1
    windows = sorted({orjson.loads(r)["window"]["seq"] for r in records})
    assert windows == list(range(1, len(windows) + 1)) and len(windows) >= 6
    assert len(records) == 3 * len(windows)
    ends = [orjson.loads(r)["closed_by"] for r in records]  # the windows the end of input closed come last
    first_end = ends.index("end_of_input")
    assert first_end > 0 and set(ends[:first_end]) == {"watermark"} and set(ends[first_end:]) == {"end_of_input"}
    assert spend and any(s[0][0] > 0 for s in spend.values())


@pytest.mark.parametrize("batch,order_seed", [(1, 1), (50, 2), (50, None), (20_000, 3), (7, 4)])
def test_batch_sizes_and_interleavings_give_byte_identical_outcomes(reference, batch, order_seed):
    assert run(batch, order_seed) == reference


def test_a_snapshot_and_restore_mid_stream_changes_nothing(reference):
    assert run(50, 5, restore_at=40) == reference


def test_new_names_are_numbered_in_window_order():
    """fresh-b (window 3) is read before fresh-a (window 2): the engine numbers fresh-a first whatever the batch."""
    for batch in (1, 20_000):
        e, _ = _engine()
        for p in range(P):
            b, _ = parse_batch(PARTS[p])
            e.ingest(b, p)
            if batch == 1:
                e.close_due()
        e.flush()
        a, b_ = e.users.ids(["fresh-a", "fresh-b"]).tolist()
        assert a < b_


def test_the_embedded_pipeline_equals_the_engine_on_one_partition():
    """``demo --data FILE`` (the embedded pipeline: one partition) gives what the engine gives on the same records
    as partition 0, in any batches."""
    stream = PARTS[0] + PARTS[1]
    outs = []
    for batch in (1, 64, 50_000):
        e, store = _engine()
        e.windows.max_ts.clear()  # one partition only (no others registered)
        sink = ListSink()
        EmbeddedPipeline(e, [sink]).run([stream[i:i + batch] for i in range(0, len(stream), batch)])
        outs.append(([r.to_bytes() for r in sink.records], [(d.index, d.reason) for d in sink.dead],
                     {u.user: tuple(u.spent) for u in store.iter_users()}))
    assert outs[0] == outs[1] == outs[2]
    assert any(reason == "late" for _, reason in outs[0][1])


def test_a_late_event_is_judged_by_its_own_partition_only():
    """Partition 1 far ahead does not make partition 0's in-order events late (only its own watermark judges
    them), and partition 0 holds the close of window 1 until its own watermark passes it."""
    e, _ = _engine()

    def batch(*pairs):
        return parse_batch([orjson.dumps({"user": u, "ts": t, "items": ["x"]}) for u, t in pairs])[0]

    assert e.ingest(batch(("a", ORIGIN + 10.0)), 0) == []
    assert e.ingest(batch(("b", ORIGIN + 5 * H)), 1) == []
    assert e.ingest(batch(("c", ORIGIN + 5 * H)), 2) == []
    assert e.close_due() == []  # partition 0 holds window 1
    assert e.ingest(batch(("a", ORIGIN + 20.0), ("a", ORIGIN + H + 700.0), ("d", ORIGIN + 30.0)), 0) == [(2, "late")]
    assert [s.seq for s in e.close_due()] == [1]
    assert np.isclose(e.windows.watermark, ORIGIN + H + 100.0)
