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
    from streamdp.engine.queries.continual_counts import ContinualCounts

    return engine([ContinualCounts("cc", sigma=1.0, delta_item=1e-6, horizon=4, max_items_per_window=2,
                                   max_per_item=2)], Cost.zcdp(1e6), seed=seed, horizon=4)


def feed(e, payloads):
    EmbeddedPipeline(e, [ListSink()]).feed(payloads)


def test_engine_logs_only_grow_within_an_epoch_and_restore_exactly():
    events = [ev(f"u{i % 13}", 10.0 * (i // 9) + 0.5, items=[f"i{i % 5}", f"j{i % 7}"]) for i in range(200)]
    e, _ = _continual_engine()
    prev: dict[str, bytes] = {}
    prev_epoch, epochs = None, set()
    for k in range(0, len(events), 20):
        feed(e, events[k:k + 20])
        base, logs = split_logs(e.state_tree())
        assert {'["users"]', '["items"]', '["queries","cc","bounder","log"]'} <= set(logs)
        for name, blob in logs.items():
            if name in prev and e.epoch == prev_epoch:
                assert blob.startswith(prev[name]), name
        prev, prev_epoch = logs, e.epoch
        epochs.add(e.epoch)
        restored, _ = _continual_engine()
        restored.restore_tree(join_logs(state_codec.decode(state_codec.encode(base)), logs))
        assert restored.snapshot() == e.snapshot()
    assert len(epochs) >= 3  # the tree restarted (a new epoch: new, shorter bounder log) more than once


def test_version_1_snapshot_restores():
    events = [ev(f"u{i % 5}", 3.0 * i, items=[f"i{i % 3}"]) for i in range(40)]
    e, _ = _continual_engine()
    feed(e, events)
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
