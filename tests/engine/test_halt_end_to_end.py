"""End-to-end HALT (docs/contract.md §3 "Filter"): a user at their budget is refused at the next window that would charge
them, halted for good, and their data in that and every later window changes no release.

Each test runs the same deterministic (test-mode) engine three times:

* H — the user U at budget, with later events: U must be halted, U's spend must not grow, and every release must be
  byte-identical (and charge the same users) as
* R — the same run without U's later events;
* P — the positive control: U's later events admitted (a large budget, or no halt), and the releases DO change, so
  that the H = R comparison cannot pass vacuously.

The scenarios put U's contribution where one user decides the release: an item one count short of passing the
noisy top-k threshold, a count just below a threshold query's T, a KDE / kNN point U sits next to, a selected item's
running count. The budgets are the contract §3 / paper formulas written out here, with values exact in binary floating
point so that "exactly one reservation" is exact on the fixed-point grid too.
"""

import math

import numpy as np
import orjson
import pytest

from streamdp.accounting.cost import COMPONENTS, LOSS_SCALE, Cost, budget_vector
from streamdp.engine.queries.adaptive_point import KDEPoint, KNNPoint, ThresholdCount
from streamdp.engine.queries.continual_counts import ContinualCounts
from streamdp.engine.queries.top_k import TopK
from streamdp.noise.generator import synthetic_data_generator

from engine_helpers import engine, run

ZRHO, ZDELTA, CGP = (COMPONENTS.index(c) for c in ("zcdp_rho", "zcdp_delta", "cgp_rho"))


def ev(user, ts, items=(), loc=None):
    d = {"user": user, "ts": ts, "items": list(items)}
    if loc is not None:
        d["loc"] = [float(loc[0]), float(loc[1])]
    return orjson.dumps(d)


def go(make_query, default_budget: Cost, payloads, u_budget=None, seed=7):
    """One test-mode run (windows of 10 s from 0); ``u_budget`` (a Cost) is granted to user "U" first."""
    e, store = engine([make_query()], default_budget, seed=seed)
    if u_budget is not None:
        store.grant("U", budget_vector(u_budget))
    return run(e, sorted(payloads, key=lambda b: orjson.loads(b)["ts"])), store


def same_releases(r1, r2):
    """Byte-identical published records, and the same realised charges (ledger side)."""
    assert [r.to_bytes() for r in r1] == [r.to_bytes() for r in r2]
    assert [r.realized for r in r1] == [r.realized for r in r2]


def spent(store, user="U"):
    return store.get_user(user).spent.copy()


# ------------------------------------------------------------------------------------------------------ top-k
def test_top_k_user_at_one_reservation_is_halted_and_later_events_change_no_ranked_list():
    # ε = 10 (Gumbel β = 0.1), δ = 2⁻⁷, k = k̄ = 2: T = 1 + log(k̄/δ)/ε = 1 + log(256)/10 ≈ 1.55 (Rogers (unknown-domain) Thm 9).
    # An item passes iff c_i + G_i > T + c_(k̄+1) + G_0: with a gap of 1 over the third count it (almost surely)
    # fails, with a gap of 2 it (almost surely) passes — one user decides.
    eps, delta, k = 10.0, 2.0**-7, 2
    q = lambda: TopK("t", epsilon=eps, delta=delta, k=k, kbar=k, k_star=1000)  # noqa: E731
    assert q().threshold == pytest.approx(1 + math.log(k / delta) / eps)
    reserve = Cost.zcdp(k * eps**2 / 8, delta)  # contract §3: reserve k·ε²/8 and δ per window with data
    big = Cost.zcdp(1e6, 1.0)
    base = []
    for w in range(4):  # per window: a held by 6 users, b by 6, c by 5 (c_(k̄+1) = 5)
        t0 = 10.0 * w + 1
        base += [ev(f"a{j}", t0 + 0.01 * j, ["a"]) for j in range(6)]
        base += [ev(f"b{j}", t0 + 0.1 + 0.01 * j, ["b"]) for j in range(6)]
        base += [ev(f"c{j}", t0 + 0.2 + 0.01 * j, ["c"]) for j in range(5)]
    u_first = [ev("U", 5.0, ["a"])]  # window 1: admitted, charged
    u_later = [ev("U", 10.0 * w + 5, ["a"]) for w in (1, 2, 3)]  # would lift a from a gap of 1 to a gap of 2

    rH, sH = go(q, big, base + u_first + u_later, u_budget=reserve)
    rR, sR = go(q, big, base + u_first, u_budget=reserve)
    rP, sP = go(q, big, base + u_first + u_later)  # positive control: U has the large default budget

    # window 1: U admitted and settled to what the call returned, |I(1)|·ε²/8 and δ (Rogers (unknown-domain) Thm 10)
    n1 = len(rH[0].values["items"])
    assert 1 <= n1 <= k
    assert int(spent(sH)[ZRHO]) == Cost.zcdp(n1 * eps**2 / 8).to_fixed()[ZRHO]
    assert int(spent(sH)[ZDELTA]) == budget_vector(reserve)[ZDELTA]  # δ used up: no second call fits
    # H: halted at window 2, spend unchanged, every release as if U's later events did not exist
    assert sH.get_user("U").halted and not sR.get_user("U").halted
    assert np.array_equal(spent(sH), spent(sR))
    same_releases(rH, rR)
    # P: the same later events, admitted, change the ranked lists (a passes only with U)
    assert not sP.get_user("U").halted
    assert int(spent(sP)[ZDELTA]) == 4 * budget_vector(reserve)[ZDELTA]
    later_R = [r.values["items"] for r in rR[1:]]
    later_P = [r.values["items"] for r in rP[1:]]
    assert later_P != later_R
    assert sum("a" in x for x in later_P) > sum("a" in x for x in later_R)


# ---------------------------------------------------------------------------------------------- threshold_count
def test_threshold_count_user_at_budget_is_halted_and_later_events_change_no_answer():
    # one threshold query per window on item x with T = 9.5: 9 other users hold x (below T), U makes it 10 (above).
    # ρ = 200 per query: per-round σ = 1/√(2·50) = 0.1, so the answer is decided by the count, not the noise.
    rho, T = 200.0, 9.5
    q = lambda: ThresholdCount("th", queries=[{"window": w, "threshold": T, "item": "x"}  # noqa: E731
                                              for w in (1, 2, 3, 4)], rho=rho, rounds=4)
    big = Cost.zcdp(1e6)
    base = []
    for w in range(4):
        t0 = 10.0 * w + 1
        base += [ev(f"v{j}", t0 + 0.01 * j, ["x"]) for j in range(9)] + [ev("by", t0 + 0.5, ["y"])]
    u_first = [ev("U", 5.0, ["x"])]
    u_later = [ev("U", 10.0 * w + 5, ["x"]) for w in (1, 2, 3)]
    budget = Cost.zcdp(rho)  # exactly one reservation (every present user reserves ρ, Liang–Yi (adaptive budgeting) App. C)

    rH, sH = go(q, big, base + u_first + u_later, u_budget=budget)
    rR, sR = go(q, big, base + u_first, u_budget=budget)
    rP, sP = go(q, big, base + u_first + u_later)

    # window 1: U admitted (count 10 > T: "not below") and settled to the executed rounds, > 0 and ≤ ρ
    assert rH[0].values["below_threshold"] is False
    s1 = int(spent(sH)[ZRHO])
    assert 0 < s1 <= budget_vector(budget)[ZRHO]
    assert sH.get_user("U").halted and not sR.get_user("U").halted
    assert np.array_equal(spent(sH), spent(sR))
    same_releases(rH, rR)
    assert [r.values["below_threshold"] for r in rR[1:]] == [True, True, True]  # 9 < 9.5
    # positive control: with budget, U's later events turn every later answer
    assert not sP.get_user("U").halted and int(spent(sP)[ZRHO]) > s1
    assert [r.values["below_threshold"] for r in rP[1:]] == [False, False, False]  # 10 > 9.5


# ---------------------------------------------------------------------------------------------- kde / knn
M = 4  # one point query per window 1..4
B_RHO = 4000.0  # per-user sequence budget B, CGP ρ per m² (units = "m": the canonical unit, q = 1)


def first_reservation() -> Cost:
    """Liang–Yi (adaptive budgeting) Alg. 3 at l = 1 with B_i = B: r = γ_1·(B − (m/m)·B) + B/m = B/m (ρ per m²)."""
    return Cost.cgp(B_RHO / M)


def located_scenario(others: np.ndarray, u_loc):
    base = []
    for w in range(M):
        t0 = 10.0 * w + 1
        base += [ev(f"o{j}", t0 + 0.01 * j, loc=p) for j, p in enumerate(others)]
    u_first = [ev("U", 5.0, loc=u_loc)]
    u_later = [ev("U", 10.0 * w + 5, loc=u_loc) for w in (1, 2, 3)]
    return base, u_first, u_later


def check_cgp_halt(rH, sH, rR, sR, sP):
    r1 = budget_vector(first_reservation())[CGP]
    assert r1 == int(B_RHO * LOSS_SCALE) // M  # the grant IS one window-1 reservation on the grid
    s1 = int(spent(sH)[CGP])
    assert 0 < s1 <= r1  # admitted at window 1, settled to the executed rounds
    # window 2 reserves r_2 ≥ B/m again (Alg. 3 invariant): s1 + r_2 > r1, refused and halted
    assert sH.get_user("U").halted and not sR.get_user("U").halted
    assert np.array_equal(spent(sH), spent(sR))
    same_releases(rH, rR)
    assert not sP.get_user("U").halted and int(spent(sP)[CGP]) > s1


def halted_reference_and_positive(q, others, u_loc):
    """U located at ``u_loc`` with budget for the first window only: runs halted (H), without U's later events (R)
    and with budget (P); checks the CGP halt (check_cgp_halt) and returns (releases R, releases P)."""
    base, u_first, u_later = located_scenario(others, u_loc)
    big = Cost.cgp(1e5)
    rH, sH = go(q, big, base + u_first + u_later, u_budget=first_reservation())
    rR, sR = go(q, big, base + u_first, u_budget=first_reservation())
    rP, sP = go(q, big, base + u_first + u_later)
    check_cgp_halt(rH, sH, rR, sR, sP)
    return rR, rP


def test_kde_point_user_at_budget_is_halted_and_later_events_change_no_estimate():
    b = 2.0
    q = lambda: KDEPoint("k", queries=[{"window": w, "point": [0.0, 0.0]}  # noqa: E731
                                       for w in range(1, M + 1)], bandwidth=b, budget_rho=B_RHO, units="m")
    others = synthetic_data_generator(4).normal(0, 2.0, (10, 2))
    u_loc = (0.5, 0.0)
    rR, rP = halted_reference_and_positive(q, others, u_loc)

    # f(p, b) = (1/n) Σ exp(−‖x_i − p‖²/(2b²)) over the located users, without and with U (Liang–Yi (adaptive budgeting) §6.3)
    k_o = np.exp(-np.sum(others**2, axis=1) / (2 * b * b))
    f_without = float(k_o.mean())
    f_with = float((k_o.sum() + math.exp(-(u_loc[0] ** 2 + u_loc[1] ** 2) / (2 * b * b))) / (k_o.size + 1))
    assert f_with - f_without > 0.03
    for rr, rp in zip(rR[1:], rP[1:]):
        assert rr.values["users"] == 10 and rp.values["users"] == 11
        assert rr.values["estimate"] == pytest.approx(f_without, abs=0.01)
        assert rp.values["estimate"] == pytest.approx(f_with, abs=0.01)  # positive control: U moves it


def test_knn_point_user_at_budget_is_halted_and_later_events_change_no_distances():
    k = 3
    q = lambda: KNNPoint("n", queries=[{"window": w, "point": [0.0, 0.0]}  # noqa: E731
                                       for w in range(1, M + 1)], k=k, budget_rho=B_RHO, units="m")
    g = synthetic_data_generator(8)
    ang, rad = g.uniform(0, 2 * np.pi, 10), g.uniform(10.0, 40.0, 10)
    others = np.column_stack([rad * np.cos(ang), rad * np.sin(ang)])  # 10 users 10–40 m from p
    u_loc = (1.0, 1.0)  # √2 m from p: U would be the nearest
    rR, rP = halted_reference_and_positive(q, others, u_loc)

    d_o = np.sort(np.hypot(others[:, 0], others[:, 1]))
    without, with_u = d_o[:k], np.sort(np.append(d_o, math.sqrt(2)))[:k]
    for rr, rp in zip(rR[1:], rP[1:]):
        assert rr.values["users"] == 10 and rp.values["users"] == 11
        assert np.allclose(rr.values["distances"], without, atol=0.3)
        assert np.allclose(rp.values["distances"], with_u, atol=0.3)  # positive control: U is the nearest


# ---------------------------------------------------------------------------------- sticky HALT, zero cost
def test_halt_is_sticky_even_for_a_later_contribution_that_would_cost_nothing():
    # C = 2, σ = 2, L = 8: levels = ⌈log2 9⌉ = 4; the worst case of C = 2 contributions (windows 1, 2) touches
    # levels 1..3 twice and level 0 once: Δ2² = 1 + 3·4 = 13, a first contribution costs ρ = 13/(2σ²) = 1.625
    sigma, L, C, d_item = 2.0, 8, 2, 2.0**-10
    first_cost = Cost.zcdp(13 / (2 * sigma**2), d_item)
    assert first_cost.zcdp_rho == 1.625
    q = lambda: ContinualCounts("c", sigma=sigma, horizon=L, delta_item=d_item,  # noqa: E731
                                max_items_per_window=1, max_per_item=C)
    big = Cost.zcdp(1e6, 1.0)
    # 40 other users put x far above T ≈ 18.4 at t = 1 (selected for good); a ticker keeps windows 2–4 busy
    base = [ev(f"v{j}", 1 + 0.01 * j, ["x"]) for j in range(40)] + [ev("tick", 10.0 * w + 1, ["z"]) for w in (1, 2, 3)]
    w1 = [ev("U", 5.0, ["x"])]  # first contribution to x: charged, spent = budget
    w2 = [ev("U", 15.0, ["y"])]  # first contribution to y: does not fit → HALT
    w3 = [ev("U", 25.0, ["x"])]  # repeat of x (2nd of C = 2): costs nothing, but U is halted

    rH, sH = go(q, big, base + w1 + w2 + w3, u_budget=first_cost)
    rR, sR = go(q, big, base + w1 + w2, u_budget=first_cost)
    assert sH.get_user("U").halted and sR.get_user("U").halted
    assert np.array_equal(spent(sH), budget_vector(first_cost))  # charged once, never again
    assert np.array_equal(spent(sH), spent(sR))
    same_releases(rH, rR)
    x_H = [r.values["counts"]["x"] for r in rH]
    assert len(x_H) == 4 and x_H == [r.values["counts"]["x"] for r in rR]
    assert all("y" not in r.values["counts"] for r in rH)

    # positive control: without the window-2 event U is not halted, and the free repeat of x IS counted — with the
    # same node noise, x's published running count moves by exactly the one added contribution from t = 3 on
    rA, sA = go(q, big, base + w1 + w3, u_budget=first_cost)
    rB, sB = go(q, big, base + w1, u_budget=first_cost)
    assert not sA.get_user("U").halted
    assert np.array_equal(spent(sA), budget_vector(first_cost))  # the repeat was admitted at zero cost
    x_A = [r.values["counts"]["x"] for r in rA]
    x_B = [r.values["counts"]["x"] for r in rB]
    assert [a - b for a, b in zip(x_A, x_B)] == [0, 0, 1, 1]
    assert x_B == x_H  # (R's noise equals B's: U's refused events draw nothing)
