"""``continual_sums``: known answers for every charge, threshold and bound, through the engine and the real filter.

Expected values are computed here from first principles: the tree's strategy matrix C (node-incidence rows, built
in the test), a user's contribution vector Δ over the windows, and ρ = ‖CΔ‖²/(2σ²) (+ the same for the sums with
σ_s); δ = δ_key per key first touched while unselected; T_t = m + σ·√v_t·Φ⁻¹(1 − δ_key/L) with v_t the BLUE/plain
variance from an explicit decomposition and Φ⁻¹ from ``norm.ppf``. Spent budgets are read back from the store: each
window's charge is rounded up to the 10⁻¹² grid, so spent ∈ [ρ, ρ + windows·10⁻¹²].
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy.stats import norm

from streamdp.accounting.cost import Cost
from streamdp.engine.queries.continual_sums import ContinualSums
from tests.engine.engine_helpers import engine, ev, run
from tests.mechanisms.test_continual_sums_noise import decomposition, tree_strategy

warnings.simplefilter("ignore")

L = 8
SIGMA = 2.0
VSIGMA = 4.0
DK = 1e-6
BIG = Cost.zcdp(1e6, 0.5)


def rho_of(deltas: dict, sigma: float, L: int = L, estimator: str = "plain") -> float:
    """Σ over keys of ‖C·Δ_key‖²/(2σ²), Δ_key a {window: amount} map; C the nodes the estimator reads (plain: the
    left children; optimal: every completed node)."""
    C = tree_strategy(L, estimator)
    total = 0.0
    for d in deltas.values():
        v = np.zeros(L)
        for t, a in d.items():
            v[t - 1] += a
        total += float(np.sum((C @ v) ** 2))
    return total / (2 * sigma * sigma)


def spent(store, user):
    u = store.get_user(user)
    return u.spent[0] / 1e12, u.spent[1] / 1e18


def q(**kw):
    args = dict(sigma=SIGMA, horizon=L, delta_key=DK, noise="tree", max_contributions=32)
    args.update(kw)
    return ContinualSums("s", **args)


def assert_charged(store, user, rho, delta, windows):
    r, d = spent(store, user)
    assert rho - 1e-12 <= r <= rho + windows * 1e-12 + 1e-9 * rho, (user, r, rho)
    assert d == pytest.approx(delta, rel=1e-9, abs=1e-18)


def test_one_record_costs_its_column_norm_and_delta_key():
    e, store = engine([q()], BIG, horizon=L)
    run(e, [ev("a", 25.0, ["k1"]), ev("b", 5.0, ["k2"])])  # a: window 3; b: window 1
    # ‖C e_t‖² = number of used nodes containing t: 4 for t = 1 ([1], [1,2], [1..4], [1..8]) and 3 for t = 3 at
    # L = 8 ([3], [1..4], [1..8]; [3,4] is a right child, never read by the plain estimate)
    assert_charged(store, "a", rho_of({"k1": {3: 1}}, SIGMA), DK, 1)
    assert_charged(store, "b", rho_of({"k2": {1: 1}}, SIGMA), DK, 1)
    assert rho_of({"k1": {3: 1}}, SIGMA) == 3 / 8 and rho_of({"k2": {1: 1}}, SIGMA) == 4 / 8


@pytest.mark.parametrize("estimator, nodes", [("plain", 1), ("optimal", 4)])
def test_a_record_is_charged_the_nodes_the_estimator_reads(estimator, nodes):
    """Window 8 of L = 8 lies in [8], [7,8], [5..8], [1..8]: the plain estimate reads only [1..8] (the others are
    right children), Honaker's reads all four. The plain tree used to be charged all four (4× over)."""
    e, store = engine([q(estimator=estimator)], BIG, horizon=L)
    run(e, [ev("a", 75.0, ["k"])])
    assert_charged(store, "a", nodes / (2 * SIGMA ** 2), DK, 1)
    assert rho_of({"k": {8: 1}}, SIGMA, estimator=estimator) == nodes / 8


def test_repeats_pay_the_cross_terms_exactly():
    e, store = engine([q()], BIG, horizon=L)
    # u: k1 at windows 1 and 2 (nodes [1,2], [1..4], [1..8] shared), twice at window 6, and k2 at window 2
    run(e, [ev("u", 1.0, ["k1"]), ev("u", 11.0, ["k1", "k2"]), ev("u", 51.0, ["k1"]), ev("u", 52.0, ["k1"])])
    want = rho_of({"k1": {1: 1, 2: 1, 6: 2}, "k2": {2: 1}}, SIGMA)
    assert_charged(store, "u", want, 2 * DK, 3)  # δ only for the first records on k1 and on k2
    # k2 alone adds ‖C e2‖² = 3 ([1,2], [1..4], [1..8]; [2] is a right child), k1 adds ‖C(e1 + e2 + 2e6)‖²
    v = np.zeros(L)
    v[[0, 1, 5]] = [1, 1, 2]
    assert want == pytest.approx((float(np.sum((tree_strategy(L, "plain") @ v) ** 2)) + 3) / (2 * SIGMA ** 2))


def test_sums_pay_value_squared_with_their_own_sigma():
    e, store = engine([q(value_range=[-10.0, 10.0], value_sigma=VSIGMA)], BIG, horizon=L)
    run(e, [ev("u", 1.0, ["k"], 3.0), ev("u", 31.0, ["k"], -2.5), ev("w", 2.0, ["k"], 50.0)])
    want = rho_of({"k": {1: 1, 4: 1}}, SIGMA) + rho_of({"k": {1: 3.0, 4: -2.5}}, VSIGMA)
    assert_charged(store, "u", want, DK, 2)
    # w's value 50 is clamped to 10, not refused: charged as 10
    assert_charged(store, "w", rho_of({"k": {1: 1}}, SIGMA) + rho_of({"k": {1: 10.0}}, VSIGMA), DK, 1)


def test_no_delta_for_a_key_selected_before():
    # 40 users put k in window 1 (selected at once: count 40 ≫ T); a newcomer in window 2 pays ρ but no δ
    e, store = engine([q(delta_key=1e-3)], BIG, horizon=L)
    recs = run(e, [ev(f"u{i}", 1.0, ["k"]) for i in range(40)] + [ev("late", 12.0, ["k", "fresh"])])
    assert "k" in recs[0].values["counts"]
    assert_charged(store, "late", rho_of({"k": {2: 1}, "fresh": {2: 1}}, SIGMA), 1e-3, 1)  # only "fresh"


def test_threshold_is_m_plus_sigma_sqrt_v_times_the_quantile():
    for noise, est in (("tree", "plain"), ("tree", "optimal")):
        e, store = engine([q(estimator=est, max_per_key=3)], BIG, horizon=L)
        recs = run(e, [ev("u", 10.0 * (t - 1) + 1, ["k"]) for t in range(1, L + 1)])
        z = float(norm.ppf(1 - DK / L))
        for r in recs:
            t = r.t
            if est == "plain":
                v = len(decomposition(t))
            else:
                X = tree_strategy(t)
                v = float(np.ones(t) @ np.linalg.solve(X.T @ X, np.ones(t)))
            assert r.values["threshold"] == pytest.approx(3 + SIGMA * math.sqrt(v) * z, rel=1e-9)


def test_first_C_records_in_event_order():
    # C = 3: u's five records of window 1 arrive out of time order; the three earliest in event time are kept
    e, store = engine([q(max_contributions=3)], BIG, horizon=L)
    run(e, [ev("u", 5.0, ["late1"]), ev("u", 1.0, ["a"]), ev("u", 2.0, ["b"]), ev("u", 9.0, ["late2"]),
            ev("u", 3.0, ["c"])])
    assert_charged(store, "u", rho_of({"a": {1: 1}, "b": {1: 1}, "c": {1: 1}}, SIGMA), 3 * DK, 1)
    bounder = e.queries[0].bounder
    assert bounder.n_log == 3
    # later windows: nothing more is taken from u (C reached), so nothing more is charged
    run(e, [ev("u", 15.0, ["d"]), ev("u", 25.0, ["e"])])
    assert bounder.n_log == 3
    assert_charged(store, "u", rho_of({"a": {1: 1}, "b": {1: 1}, "c": {1: 1}}, SIGMA), 3 * DK, 3)


def test_max_keys_per_window_keeps_the_first_keys():
    # Δ0 = 2: window 1 has keys x (t=1), y (t=2), z (t=3), x again (t=4) → x, y and the second x are kept
    e, store = engine([q(max_keys_per_window=2)], BIG, horizon=L)
    run(e, [ev("u", 1.0, ["x"]), ev("u", 2.0, ["y"]), ev("u", 3.0, ["z"]), ev("u", 4.0, ["x"])])
    assert_charged(store, "u", rho_of({"x": {1: 2}, "y": {1: 1}}, SIGMA), 2 * DK, 1)


def test_max_per_key_counts_earlier_windows():
    # m = 2: two records on k in window 1, a third in window 2 is dropped; another key in window 2 is fine
    e, store = engine([q(max_per_key=2)], BIG, horizon=L)
    run(e, [ev("u", 1.0, ["k"]), ev("u", 2.0, ["k"]), ev("u", 11.0, ["k", "j"])])
    assert_charged(store, "u", rho_of({"k": {1: 2}, "j": {2: 1}}, SIGMA), 2 * DK, 2)


def test_items_of_one_event_in_order_and_rules_combined():
    # C = 4, Δ0 = 2, m = 1: event 1 [a, a, b, c] → a (second a dropped by m), b (c dropped by Δ0);
    # window 2: [a, d, e] → a dropped (m, from window 1), d, e kept → 4 records: C reached;
    # window 3: [f, g] both dropped by C
    e, store = engine([q(max_contributions=4, max_keys_per_window=2, max_per_key=1)], BIG, horizon=L)
    run(e, [ev("u", 1.0, ["a", "a", "b", "c"]), ev("u", 11.0, ["a", "d", "e"]), ev("u", 21.0, ["f", "g"])])
    assert_charged(store, "u", rho_of({k: {w: 1} for k, w in (("a", 1), ("b", 1), ("d", 2), ("e", 2))}, SIGMA),
                   4 * DK, 2)
    assert e.queries[0].bounder.n_log == 4


def test_public_cost_bounds_every_realised_window_charge():
    qq = q(max_contributions=6, max_keys_per_window=3, max_per_key=2, value_range=[0.0, 5.0], value_sigma=VSIGMA)
    e, store = engine([qq], BIG, horizon=L)
    pay = [ev("u", 10.0 * w + i, ["a", "b", "c"], 5.0) for w in range(3) for i in range(2)]
    run(e, pay)
    bound = qq.public_cost(None)
    # (2m − 1)·min(C, Δ0·m) = 3·6 = 18 > m·C = 12 → 12·G_max·(1/(2σ²) + 25/(2σ_s²))
    assert bound.zcdp_rho == pytest.approx(12 * 4 * (1 / (2 * SIGMA ** 2) + 25 / (2 * VSIGMA ** 2)))
    assert bound.zcdp_delta == pytest.approx(3 * DK)
    r, _ = spent(store, "u")
    assert r <= qq.epoch_cost_bound().zcdp_rho + 1e-9


def test_blt_charges_and_thresholds_from_the_explicit_factorization():
    from streamdp.mechanisms.blt_noise import fit_blt
    from tests.mechanisms.test_continual_sums_noise import blt_matrices

    M, Cm, B, A = blt_matrices(fit_blt(L, 4))  # C = M⁻¹ and B = A·M, built entry by entry and inverted by numpy
    e, store = engine([q(noise="blt", max_per_key=2)], BIG, horizon=L)
    recs = run(e, [ev("u", 1.0, ["k"]), ev("u", 41.0, ["k"]), ev("w", 71.0, ["j"])])  # windows 1, 5 and 8
    v = np.zeros(L)
    v[[0, 4]] = 1.0
    assert_charged(store, "u", float(np.sum((Cm @ v) ** 2)) / (2 * SIGMA ** 2), DK, 2)
    assert_charged(store, "w", float(np.sum(Cm[:, 7] ** 2)) / (2 * SIGMA ** 2), DK, 1)
    z = float(norm.ppf(1 - DK / L))
    for r in recs:
        assert r.values["threshold"] == pytest.approx(2 + SIGMA * math.sqrt(B[r.t - 1] @ B[r.t - 1]) * z, rel=1e-9)
