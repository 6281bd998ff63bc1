"""Append logs in engine snapshots (``engine/append_log.py``): split/join round trips, the engine's name lists and
bounder logs grow by appending, and a version-1 snapshot (before append logs) still restores."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from streamdp.engine import state_codec
from streamdp.engine.append_log import LOG_MARK, AppendLog, join_logs, split_logs

from streamdp.accounting.cost import Cost
from streamdp.engine.pipeline import EmbeddedPipeline
from streamdp.outputs.sinks import ListSink

from engine_helpers import engine, ev


def test_split_and_join_round_trip():
    tree = {"a": AppendLog(b"xyz"), "b": [1, {"c": AppendLog(b""), "d": np.arange(3)}], "e": b"plain"}
    base, logs = split_logs(tree)
    assert set(logs) == {'["a"]', '["b",1,"c"]'} and logs['["a"]'] == b"xyz"
    assert base["a"] == {LOG_MARK: '["a"]'} and base["e"] == b"plain"
    back = join_logs(state_codec.decode(state_codec.encode(base)), logs)
    assert back["a"] == b"xyz" and back["b"][1]["c"] == b"" and back["e"] == b"plain"
    np.testing.assert_array_equal(back["b"][1]["d"], np.arange(3))
    with pytest.raises(ValueError, match="missing append log"):
        join_logs(base, {})
    with pytest.raises(ValueError, match=LOG_MARK):
        split_logs({LOG_MARK: 1})


def _continual_engine(seed=3):
    """Continual counts under an ample budget in ρ AND δ: every item costs δ > 0, so a budget with δ = 0
    (Cost.zcdp(1e6)) would refuse every user and leave the tree and the bounder log empty (the restore tests
    below would then pass vacuously; they assert that users were admitted and the tree holds items)."""
    from streamdp.engine.queries.continual_counts import ContinualCounts

    return engine([ContinualCounts("cc", sigma=1.0, delta_item=1e-6, horizon=4, max_items_per_window=2,
                                   max_per_item=2)], Cost.zcdp(1e6, 1.0), seed=seed, horizon=4)


def feed(e, payloads):
    EmbeddedPipeline(e, [ListSink()]).feed(payloads)


def test_engine_logs_only_grow_within_an_epoch_and_restore_exactly():
    """200 events of 13 users over 23 windows (horizon 4: six epochs), a checkpoint after every 20: within an
    epoch every append log (user names, item names, the bounder's commit log) only grows (the new blob extends the
    old), and a fresh engine restored from the split state equals the original (snapshot bytes). Not vacuous: every
    user is admitted (198 admissions, 0 refused), the bounder log and the tree's items are non-empty at some
    checkpoint, and the tree's kept node noise is nonzero there (a restore dropping it would differ)."""
    events = [ev(f"u{i % 13}", 10.0 * (i // 9) + 0.5, items=[f"i{i % 5}", f"j{i % 7}"]) for i in range(200)]
    e, _ = _continual_engine()
    prev: dict[str, bytes] = {}
    prev_epoch, epochs = None, set()
    grew = tree_items = 0
    for k in range(0, len(events), 20):
        feed(e, events[k:k + 20])
        base, logs = split_logs(e.state_tree())
        assert {'["users"]', '["items"]', '["queries","cc","bounder","log"]'} <= set(logs)
        for name, blob in logs.items():
            if name in prev and e.epoch == prev_epoch:
                assert blob.startswith(prev[name]), name
                if name == '["queries","cc","bounder","log"]' and len(blob) > len(prev[name]):
                    grew += 1
        prev, prev_epoch = logs, e.epoch
        epochs.add(e.epoch)
        tree = e.queries[0].tree
        if tree.n_items:
            tree_items = max(tree_items, tree.n_items)
            assert np.any(tree._noise[:, :tree.n_items] != 0)
        restored, _ = _continual_engine()
        restored.restore_tree(join_logs(state_codec.decode(state_codec.encode(base)), logs))
        assert restored.snapshot() == e.snapshot()
    assert len(epochs) >= 3  # the tree restarted (a new epoch: new, shorter bounder log) more than once
    assert e.counters.admitted_users == 198 and e.counters.halted_users == 0
    assert tree_items > 0 and grew > 0  # the tree held items; the bounder log grew by appending within an epoch


def test_version_1_snapshot_restores():
    """A version-1 snapshot (name lists as whole JSON lists, the bounder's counters instead of its log) restores
    the same names and bounder counters. Not vacuous: users were admitted, so the counters are non-empty."""
    events = [ev(f"u{i % 5}", 3.0 * i, items=[f"i{i % 3}"]) for i in range(40)]
    e, _ = _continual_engine()
    feed(e, events)
    assert e.counters.admitted_users > 0 and e.counters.halted_users == 0
    assert len(e.queries[0].bounder.counters()["keys"]) > 0
    st = state_codec.decode(e.snapshot())
    v1 = dict(st, version=1, users=orjson.dumps(e.users.state()), items=orjson.dumps(e.items.state()))
    v1["queries"] = dict(st["queries"])
    b = e.queries[0].bounder
    v1["queries"]["cc"] = dict(st["queries"]["cc"], bounder={"delta0": b.delta0, "cap": b.cap, **b.counters()})
    old, _ = _continual_engine()
    old.restore(state_codec.encode(v1))
    assert old.users.state() == e.users.state() and old.items.state() == e.items.state()
    for k in ("keys", "counts"):
        np.testing.assert_array_equal(old.queries[0].bounder.counters()[k], b.counters()[k])
