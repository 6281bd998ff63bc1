"""``continual_sums`` end to end: individual accounting with the real in-memory filter (a heavy user truncated or
halted as configured while a light one pays only for its records), bad input, snapshots, the record's shape."""

from __future__ import annotations

import warnings

import numpy as np
import orjson
import pytest

from streamdp.accounting.cost import Cost
from streamdp.engine.queries.continual_sums import ContinualSums
from streamdp.outputs.sinks import ListSink
from streamdp.engine.pipeline import EmbeddedPipeline
from tests.engine.engine_helpers import engine, ev, run

warnings.simplefilter("ignore")

L, SIGMA = 8, 2.0  # tree at L = 8: every window lies in 4 completed nodes, so one record costs 4/(2σ²) = 0.5


def q(**kw):
    args = dict(sigma=SIGMA, horizon=L, delta_key=1e-6, noise="tree", max_contributions=32)
    args.update(kw)
    return ContinualSums("s", **args)


def spent_rho(store, user):
    return store.get_user(user).spent[0] / 1e12


def test_heavy_user_halted_light_user_pays_only_its_records():
    e, store = engine([q()], Cost.zcdp(2.0, 1e-3), horizon=L)
    crowd = [ev(f"c{i}", 1.0 + i * 0.01, ["k"]) for i in range(60)]  # k is selected at window 1 (T ≈ 32 + 10)
    recs = run(e, crowd + [
        ev("light", 2.0, ["k"]),                                           # 0.5
        ev("heavy", 3.0, ["k"]), ev("heavy", 3.1, ["k"]), ev("heavy", 3.2, ["k"]),  # ‖C·3e₁‖²/8 = 4.5 > 2
        ev("mid", 4.0, ["a"]), ev("mid", 4.1, ["b"]),                      # window 1: 1.0
        ev("mid", 14.0, ["c"]), ev("mid", 14.1, ["d"]), ev("mid", 14.2, ["e"]),  # window 2: +3·3/8 > 2 → halted
        ev("light", 75.0, ["z"]),  # window 8: ‖C e₈‖² = 1 (plain reads [1..8] only) → +0.125
    ])
    users = {u.user: u for u in store.iter_users()}
    assert not users["light"].halted and spent_rho(store, "light") == pytest.approx(0.625, abs=1e-9)
    assert users["heavy"].halted and spent_rho(store, "heavy") == 0.0
    assert users["mid"].halted and spent_rho(store, "mid") == pytest.approx(1.0, abs=1e-9)
    # the crowd was never charged for anyone else: 0.5 each
    assert all(spent_rho(store, f"c{i}") == pytest.approx(0.5, abs=1e-9) for i in range(60))
    # the heavy user's records never reached the counts: k holds the crowd and the light user only
    ids, counts, _ = e.queries[0].mech.exact()
    exact = dict(zip(e.items.names(ids), counts.tolist()))
    assert exact["k"] == 61 and "c" not in exact and exact.get("a") == 1
    assert recs[-1].values["counts"].keys() >= {"k"}


def test_heavy_user_truncated_by_C_is_not_halted():
    e, store = engine([q(max_contributions=3)], Cost.zcdp(2.0, 1e-3), horizon=L)
    run(e, [ev("heavy", 1.0 + i, [f"k{i}"]) for i in range(6)] + [ev("light", 1.0, ["k0"])])
    users = {u.user: u for u in store.iter_users()}
    assert not users["heavy"].halted and spent_rho(store, "heavy") == pytest.approx(1.5, abs=1e-9)
    assert spent_rho(store, "light") == pytest.approx(0.5, abs=1e-9)
    ids, counts, _ = e.queries[0].mech.exact()
    assert sorted(e.items.names(ids)) == ["k0", "k1", "k2"]  # the first three in event time


def test_record_has_the_same_fields_with_and_without_data():
    qq = q(value_range=[0.0, 10.0], value_sigma=3.0, max_per_key=1)
    e, store = engine([qq], Cost.zcdp(100.0, 1e-3), horizon=L)
    recs = run(e, [ev(f"u{i}", 1.0, ["k"], 4.0) for i in range(40)] + [ev("x", 35.0, ["k"], 1.0)])
    shapes = {tuple(sorted(r.values)) for r in recs}
    assert shapes == {("ci95", "counts", "new_keys", "sums", "threshold")}
    by_t = {r.t: r for r in recs}
    assert by_t[2].values["counts"] and by_t[2].meta == {"selected": 1, "new_selected": 0}  # a window without data
    assert all(r.meta for r in recs)
    v = by_t[4].to_dict()["values"]
    lo, hi = v["ci95"]["count"]["k"]
    assert lo < v["counts"]["k"] < hi and isinstance(v["counts"]["k"], int)
    s_lo, s_hi = v["ci95"]["sum"]["k"]
    assert s_lo < v["sums"]["k"] < s_hi
    assert (v["sums"]["k"] / qq.grid).is_integer()  # on the public grid
    # counts only: sums and the sums' intervals are null, never missing
    e2, _ = engine([q(max_per_key=1)], Cost.zcdp(100.0, 1e-3), horizon=L)
    r2 = run(e2, [ev(f"u{i}", 1.0, ["k"]) for i in range(40)])
    assert all(r.values["sums"] is None and r.values["ci95"]["sum"] is None for r in r2)


def test_bad_values_are_dead_lettered_and_out_of_range_values_clamped():
    qq = q(value_range=[-5.0, 5.0], value_sigma=3.0)
    e, _ = engine([qq], Cost.zcdp(100.0, 1e-3), horizon=L)
    sink = ListSink()
    good = [ev(f"u{i}", 1.0, ["k"], 100.0 if i == 0 else -100.0 if i == 1 else 1.25) for i in range(10)]
    bad = [ev("nv", 2.0, ["k"]),                                          # items, no value: missing_value
           b'{"user": "s", "ts": 2.0, "items": ["k"], "value": "12"}',  # a string: bad_value
           b'{"user": "n", "ts": 2.0, "items": ["k"], "value": NaN}',   # not JSON
           b'{"user": "i", "ts": 2.0, "items": ["k"], "value": 1e999}',  # inf: bad_value
           ev("novalue_noitems", 2.0, [])]                                  # no items: nothing to sum, accepted
    EmbeddedPipeline(e, [sink]).run([good + bad])
    reasons = [d.reason for d in sink.dead]
    assert sorted(reasons) == sorted(["missing_value", "bad_value", "malformed_json", "bad_value"])
    detail = next(d.detail for d in sink.dead if d.reason == "missing_value")
    assert "value" in detail and "continual_sums" in detail
    assert e.counters.by_reason["missing_value"] == 1
    ids, counts, sums = qq.mech.exact()
    # 100 → 5, −100 → −5, 8 × 1.25: the clamped values are summed, nothing was refused
    assert counts.tolist() == [10] and sums[0] * qq.grid == pytest.approx(5 - 5 + 8 * 1.25)


def test_snapshot_restore_continues_with_the_kept_noise():
    evs = [ev(f"u{i % 50}", 10.0 * (i % L) + 1.0 + i * 1e-3, [f"k{i % 7}"], float(i % 5)) for i in range(400)]
    first = [x for x in evs if orjson.loads(x)["ts"] < 40.0]
    rest = [x for x in evs if orjson.loads(x)["ts"] >= 40.0]

    def make():
        return engine([q(value_range=[0.0, 4.0], value_sigma=2.0, noise="blt")], Cost.zcdp(100.0, 1e-3),
                      horizon=L)

    e1, _ = make()
    straight = run(e1, first) + run(e1, rest)
    e2, _ = make()
    part = run(e2, first)
    snap = e2.snapshot()
    e3, _ = make()
    e3.restore(snap)
    e3.store = e2.store  # the budget store lives on (Redis in the service)
    resumed = part + run(e3, rest)
    assert [r.to_bytes() for r in straight] == [r.to_bytes() for r in resumed]


def test_a_new_epoch_restarts_totals_selection_and_the_records_per_user():
    # L = 4, C = 2: u's one record per window is kept in windows 1, 2 (epoch 0) and 5, 6 (epoch 1) only
    e, store = engine([q(max_contributions=2, horizon=4, max_per_key=1)], Cost.zcdp(100.0, 1e-3), horizon=4)
    recs = run(e, [ev("u", 10.0 * w + 1, [f"k{w}"]) for w in range(8)]
               + [ev(f"c{i}", 10.0 * w + 2, ["pop"]) for w in (0, 4) for i in range(40)])
    # ‖C e_t‖² at L = 4 (3 levels, plain: the left children): window 1 lies in 3 used nodes, window 2 in 2 ([2] is
    # a right child); per epoch 5/8
    assert spent_rho(store, "u") == pytest.approx(2 * (3 + 2) / 8, abs=1e-9)
    assert e.queries[0].bounder.n_log == 42  # epoch 1: u's two records and the 40 others
    by = {(r.epoch, r.t): r for r in recs}
    assert "pop" in by[(0, 1)].values["counts"] and "pop" in by[(1, 1)].values["counts"]
    assert by[(1, 1)].values["counts"]["pop"] < 60  # restarted: epoch 1's own 40 records, not 80
