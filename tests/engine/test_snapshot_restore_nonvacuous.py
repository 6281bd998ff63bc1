"""Engine snapshots restore exactly — with state that is really there (``engine/engine.py``,
``engine/state_codec.py``, ``mechanisms/binary_tree.py``; docs/contract.md §3 "Atomicity": a restored worker must not
redraw noise already drawn).

The mutation audit found the engine-level restore test vacuous (its budget had δ = 0 while every continual-count
item costs δ > 0, so every user was refused and the tree never held an item): a restore that dropped the tree's
kept node noise (mutant BT1) passed it. Here the budget is Cost.zcdp(1e6, 1.0), users are admitted, the tree holds
items with nonzero noise (asserted), and a restored engine must both equal the original (snapshot bytes) and
CONTINUE with byte-identical releases. Also the codec's exactness for numpy float scalars (inf, nan) and the
writability of decoded arrays (mutants SC3, SC2).
"""

from __future__ import annotations

import math

import numpy as np

from streamdp.accounting.cost import Cost
from streamdp.engine import state_codec
from streamdp.engine.append_log import join_logs, split_logs
from streamdp.engine.pipeline import EmbeddedPipeline
from streamdp.engine.queries.continual_counts import ContinualCounts
from streamdp.outputs.sinks import ListSink

from engine_helpers import engine, ev

BUDGET = Cost.zcdp(1e6, 1.0)  # ample in ρ AND in δ: every user is admitted
# 14 windows of 10 s (horizon 4: epochs 0–3), 30 users per window, each with the item "hot" and one of i0…i3: "hot"
# (30 contributions per window) passes the tree's selection threshold (≈ 12 here), so its released counts carry the
# tree's node noise; the i-items (7–8 users each) stay below it
EVENTS = [ev(f"u{u}", 10.0 * w + 0.5 + 0.1 * u, items=["hot", f"i{u % 4}"]) for w in range(14) for u in range(30)]
CHUNK = 30  # one window per feed


def continual_engine(seed: int = 3):
    return engine([ContinualCounts("cc", sigma=1.0, delta_item=1e-6, horizon=4, max_items_per_window=2,
                                   max_per_item=2)], BUDGET, seed=seed, horizon=4)


def round_trip(e):
    """A fresh engine (same configuration) restored from ``e``'s state as a checkpoint stores it: append logs split
    off, the rest through the codec's bytes."""
    base, logs = split_logs(e.state_tree())
    r, _ = continual_engine()
    r.restore_tree(join_logs(state_codec.decode(state_codec.encode(base)), logs))
    return r


# ------------------------------------------------------------------------------------------ codec
def test_codec_keeps_numpy_float_scalars_exactly():
    """numpy float64 scalars (query state holds them: thresholds, sigmas) round-trip bit-exactly, inf and nan
    included (as JSON numbers they would come back as null), −0.0 keeps its sign and the smallest subnormal
    5e-324 survives."""
    back = state_codec.decode(state_codec.encode({
        "inf": np.float64(np.inf), "ninf": np.float64(-np.inf), "nan": np.float64(np.nan),
        "nz": np.float64(-0.0), "sub": np.float64(5e-324), "x": np.float64(0.1) + np.float64(0.2)}))
    assert back["inf"] == math.inf and back["ninf"] == -math.inf and math.isnan(back["nan"])
    assert back["nz"] == 0.0 and math.copysign(1.0, back["nz"]) == -1.0
    assert back["sub"] == 5e-324 and back["x"] == 0.30000000000000004


def test_decoded_arrays_are_writable_and_independent_of_the_blob():
    """Restored state is owned by whoever restores it and may be updated in place: decoded arrays must be
    writable, and writing them must not touch the snapshot bytes (decoded again: the original values)."""
    blob = state_codec.encode({"a": np.arange(3, dtype=np.int64), "m": np.zeros((2, 2))})
    back = state_codec.decode(blob)
    back["a"][0] = 7
    back["m"][1, 1] = 2.5
    assert back["a"].tolist() == [7, 1, 2] and back["m"][1, 1] == 2.5
    again = state_codec.decode(blob)
    assert again["a"].tolist() == [0, 1, 2] and again["m"][1, 1] == 0.0


# ------------------------------------------------------------------------------------------ engine restore
def test_restore_with_admitted_users_and_a_populated_tree_is_exact():
    """After every chunk of 20 events (so also mid-window), a restored copy's snapshot equals the original's. Not
    vacuous: all 14 · 30 = 420 admissions succeed (none refused), the tree held items with nonzero kept noise and
    the bounder's log was non-empty at some checkpoint."""
    e, _ = continual_engine()
    saw_tree = saw_log = False
    for k in range(0, len(EVENTS), 20):
        EmbeddedPipeline(e, [ListSink()]).feed(EVENTS[k:k + 20])
        tree = e.queries[0].tree
        if tree.n_items:
            saw_tree = True
            assert np.any(tree._noise[:, :tree.n_items] != 0)
        saw_log |= len(split_logs(e.state_tree())[1]['["queries","cc","bounder","log"]']) > 0
        assert round_trip(e).snapshot() == e.snapshot()
    assert e.counters.admitted_users == 13 * 30 and e.counters.halted_users == 0  # window 14 is still open
    assert saw_tree and saw_log


def test_a_restored_engine_continues_with_identical_releases():
    """Cut the stream mid-window (after 105, 195 or 345 events: windows 4, 7 and 12, i.e. t = 4, 3 and 4 of their
    epochs, so the tree holds "hot" and kept node noise), restore a fresh engine from the snapshot (same budget
    store) and feed it the rest: its releases are byte-identical to an uninterrupted run's. Not vacuous: every
    window releases a noisy count for "hot" (so the releases after the cut depend on the restored node noise; a
    restore that dropped it would change them)."""
    ref_e, _ = continual_engine()
    ref = ListSink()
    EmbeddedPipeline(ref_e, [ref]).run([EVENTS[k:k + CHUNK] for k in range(0, len(EVENTS), CHUNK)])
    ref_bytes = [r.to_bytes() for r in ref.records]
    assert len(ref_bytes) == 14 and ref_e.counters.admitted_users == 14 * 30
    assert all("hot" in r.values["counts"] for r in ref.records)
    for cut in (105, 195, 345):
        e, store = continual_engine()
        first = ListSink()
        EmbeddedPipeline(e, [first]).feed(EVENTS[:cut])
        tree = e.queries[0].tree
        assert tree.n_items > 0 and tree.t > 0 and np.any(tree._noise != 0), cut  # mid-epoch, populated
        r = round_trip(e)
        r.store = store
        rest = ListSink()
        EmbeddedPipeline(r, [rest]).run([EVENTS[k:k + CHUNK] for k in range(cut, len(EVENTS), CHUNK)])
        assert len(rest.records) > 0
        got = [x.to_bytes() for x in first.records + rest.records]
        assert got == ref_bytes, cut
        assert r.counters.admitted_users == ref_e.counters.admitted_users
