"""Known answers and sharp laws for the Liang–Yi (adaptive budgeting) point queries kde_point (Alg. 7) and knn_point (Alg. 8, PIE-k).

Every expected value below is worked out here from Liang–Yi (adaptive budgeting)'s formulas and the configured numbers, never read from the
query object (no ``q.B``, no ``q.allocation``):

* Alg. 3 (line 3–4) for query l of m, user's remaining budget B_i, sequence budget B:
      γ_l = ((l − 1)/(m − 1))·(1 − 3/4) + 3/4,        r_i = γ_l·(B_i − ((m − l + 1)/m)·B) + B/m;
  γ_1 = 3/4, γ_2 = 7/8, γ_3 = 1 for m = 3. On the service's 1e-12 fixed-point grid (contract §3: costs are integers)
  r_i is rounded down (so B_i − r_i keeps the Alg. 3 invariant); the configurations below make it exact.
* PIE round split (Liang–Yi (adaptive budgeting) §7): even r_{i,j} = r_i/c; doubling r_{i,j} = 2^{j−1}/(2^c − 1)·r_i.
* Alg. 4 line 6 / Alg. 5 line 5: B_i ← B_i − r_{i,j} only for the rounds user i actually runs; eliminated users keep
  the rest (Liang–Yi (adaptive budgeting) §6.2 after Cor. 6.3, Thm 4.4). contract §3 "Reserve and settle": admit and reserve r_i, settle to
  Σ_{s ≤ j_i} r_{i,s} rounded UP to the grid (never below what was executed).
* units = "m" is the ledger's canonical CGP unit, so the store sees these fixed-point values unchanged.
"""

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from streamdp.accounting.cost import COMPONENTS, Cost
from streamdp.engine.queries.adaptive_point import KDEPoint, KNNPoint
from streamdp.mechanisms.adaptive.knn import knn_pie
from streamdp.noise.generator import unsafe_seeded_generator

from engine_helpers import RecordingStore as SharedRecordingStore, engine as make_engine, ev_at as ev, run

CGP = COMPONENTS.index("cgp_rho")
GRID = 10**12  # fixed point: 1 unit = 1e-12 ρ per m²
P_MIN = 1e-6


class RecordingStore(SharedRecordingStore):
    """Records the CGP component of every reservation and settle, as a plain int."""

    project = staticmethod(lambda c: int(c[CGP]))


def alg3(B_i: int, B: int, l: int, m: int) -> int:
    """Liang–Yi (adaptive budgeting) Alg. 3 line 4 in exact rationals, rounded down to the grid (independent of the code's integer form)."""
    if m == 1:
        return B_i
    gamma = Fraction(l - 1, m - 1) * (1 - Fraction(3, 4)) + Fraction(3, 4)
    return math.floor(gamma * (B_i - Fraction(m - l + 1, m) * B) + Fraction(B, m))


def ceil_frac(x: Fraction) -> int:
    return -((-x.numerator) // x.denominator)


def round_weights(c: int, split: str) -> list[Fraction]:
    """Liang–Yi (adaptive budgeting) §7: even r_i/c, or doubling 2^{j−1}/(2^c − 1)·r_i."""
    if split == "even":
        return [Fraction(1, c)] * c
    return [Fraction(2**j, 2**c - 1) for j in range(c)]


def settle_value(r: int, rounds_run: int, c: int, split: str) -> int:
    """⌈Σ_{s ≤ rounds_run} r_{i,s}⌉ on the grid: executed rounds only, rounded up (contract §3)."""
    return ceil_frac(r * sum(round_weights(c, split)[:rounds_run]))


def check_ledger(store, e, plan, B, m, c, split):
    """Replay Liang–Yi (adaptive budgeting) Alg. 3 + PIE settlement by hand for ``plan`` = {user: {window l: rounds run}} and compare every
    reservation, every settle and the store's final spend (window seq = l here). Returns the hand-computed
    (r, charge) per (user, l)."""
    out = {}
    for u, per_l in plan.items():
        B_i, spent = B, 0
        for l in range(1, m + 1):
            if l not in per_l:
                assert u not in store.admits.get(l, {}) or store.admits[l][u] == 0, (u, l)
                continue
            r = alg3(B_i, B, l, m)
            charge = settle_value(r, per_l[l], c, split)
            assert store.admits[l][u] == r, (u, l, store.admits[l][u], r)
            assert store.charged(l, u) == charge, (u, l, store.charged(l, u), charge)
            out[u, l] = (r, charge)
            B_i -= charge
            spent += charge
        assert int(store.get_user(u).spent[CGP]) == spent, (u, spent)
        assert int(e.queries[0].remaining_of(np.array([e.users.index[u]]))[0]) == B_i
    return out


# ============================================================================================== kde_point
# Points (planar metres), query point p = (0, 0) in all three windows, bandwidth b = 100 m:
#   c0 at p (len_p = 0), c1 at (60, 80) (len_p = 100 = b), c2 at (0, −200) (len_p = 2b): never eliminated, since
#   Alg. 7 sets ν_low = −∞ (no S1) and S0 needs φ̄ > ν_high + h̄ = 6b + h̄ = 600 m + h̄, round noise σ ≤ 0.11 m;
#   far at (10 000, 0): len_p − 6b = 9 400 m ≫ h̄ (h̄ < 1 m), so it lands in S0 after round 1 (Alg. 4 line 11–12);
#   late (absent from window 1) at (−300, 0): len_p = 3b < 6b, never eliminated;
#   noloc: events without a location (no located data → reserves and pays nothing).
KDE_B_RHO = 960.0  # per m² over the sequence → B = 9.6e14 on the grid
KDE_POINTS = {"c0": (0.0, 0.0), "c1": (60.0, 80.0), "c2": (0.0, -200.0), "far": (10_000.0, 0.0)}
KDE_LATE = (-300.0, 0.0)


def kde_run(estimator, split="even", rounds=4, seed=5):
    q = KDEPoint("k", queries=[{"window": w, "point": [0.0, 0.0]} for w in (1, 2, 3)], bandwidth=100.0,
                 budget_rho=KDE_B_RHO, units="m", rounds=rounds, split=split, estimator=estimator)
    e, store = make_engine([q], Cost(cgp_rho=10_000.0), seed=seed, horizon=64, store_cls=RecordingStore)
    pl = []
    for w in (1, 2, 3):
        t0 = 10.0 * (w - 1) + 1.0
        pl += [ev(u, t0 + 0.01 * j, p) for j, (u, p) in enumerate(KDE_POINTS.items())]
        if w >= 2:
            pl.append(ev("late", t0 + 5, KDE_LATE))
        pl.append(ev("noloc", t0 + 6, None, ["x"]))
    recs = [r for r in run(e, pl) if r.query == "k"]
    return q, e, store, recs


@pytest.mark.parametrize("estimator", ["pm1", "pm0"])
def test_kde_point_reservations_and_settlements_are_the_hand_computed_alg3_values(estimator):
    """m = 3, B = 960 ρ/m² = 9.6e14 grid units, c = 4 even rounds. Written out (grid units, 1e-12 ρ per m²):

    l = 1 (γ_1 = 3/4, every B_i = B):   r = 3/4·(B − B) + B/3 = 3.2e14 for c0, c1, c2, far.
        c0, c1, c2 run all 4 rounds and pay 3.2e14; far runs 1 round and pays r/4 = 8.0e13.
    l = 2 (γ_2 = 7/8, floor (2/3)B = 6.4e14):
        c*:   B_i = 6.4e14  → r = 7/8·0 + 3.2e14 = 3.2e14, pays 3.2e14;
        far:  B_i = 8.8e14  → r = 7/8·(8.8e14 − 6.4e14) + 3.2e14 = 5.3e14, pays 5.3e14/4 = 1.325e14;
        late: B_i = 9.6e14  → r = 7/8·(9.6e14 − 6.4e14) + 3.2e14 = 6.0e14, pays 6.0e14.
    l = 3 (γ_3 = 1: r_i = B_i):
        c*: 3.2e14 (pays all); far: 9.6e14 − 8e13 − 1.325e14 = 7.475e14, pays 1.86875e14; late: 3.6e14.
    Totals: c* spend exactly B = 9.6e14, late 9.6e14, far 8e13 + 1.325e14 + 1.86875e14 = 3.99375e14.
    PrivSav (Liang–Yi (adaptive budgeting) §7.1) = (1/n) Σ (r_i − e_i)/r_i: window 1: (3/4)/4 = 0.1875; windows 2, 3: (3/4)/5 = 0.15."""
    q, e, store, recs = kde_run(estimator)
    B = 960 * GRID
    written = {
        ("c0", 1): (320 * 10**12, 320 * 10**12), ("far", 1): (320 * 10**12, 80 * 10**12),
        ("c0", 2): (320 * 10**12, 320 * 10**12), ("far", 2): (530 * 10**12, 132_500 * 10**9),
        ("late", 2): (600 * 10**12, 600 * 10**12),
        ("c0", 3): (320 * 10**12, 320 * 10**12), ("far", 3): (747_500 * 10**9, 186_875 * 10**9),
        ("late", 3): (360 * 10**12, 360 * 10**12),
    }
    plan = {u: {1: 4, 2: 4, 3: 4} for u in ("c0", "c1", "c2")}
    plan["far"] = {1: 1, 2: 1, 3: 1}
    plan["late"] = {2: 4, 3: 4}
    got = check_ledger(store, e, plan, B, m=3, c=4, split="even")
    for key, val in written.items():
        assert got[key] == val, (key, got[key], val)
    assert int(store.get_user("far").spent[CGP]) == 399_375 * 10**9
    for u in ("c0", "c1", "c2", "late"):
        assert int(store.get_user(u).spent[CGP]) == B
    assert store.get_user("noloc") is None or int(store.get_user("noloc").spent[CGP]) == 0
    for rec, n, sav in zip(recs, (4, 5, 5), (0.1875, 0.15, 0.15)):
        v = rec.values
        assert (v["users"], v["s0"], v["survivors"], v["rounds"], v["eliminated_early"]) == (n, 1, n - 1, 4, 1)
        assert v["privacy_savings"] == pytest.approx(sav, rel=1e-12)


def test_kde_point_doubling_split_settles_the_executed_fraction():
    """Same data, c = 3 rounds split by doubling (1/7, 2/7, 4/7 of r_i). far pays ⌈r_i/7⌉ each query:
    l = 1: r = 3.2e14 → ⌈3.2e14/7⌉ = 45 714 285 714 286;
    l = 2: B_i = 914 285 714 285 714 → r = ⌊7/8·(B_i − 6.4e14) + 3.2e14⌋ = 559 999 999 999 999, pays
           ⌈559 999 999 999 999/7⌉ = 80 000 000 000 000;
    l = 3: r = B_i = 834 285 714 285 714, pays ⌈r/7⌉ = 119 183 673 469 388."""
    q, e, store, recs = kde_run("pm1", split="doubling", rounds=3, seed=6)
    plan = {u: {1: 3, 2: 3, 3: 3} for u in ("c0", "c1", "c2")}
    plan["far"] = {1: 1, 2: 1, 3: 1}
    plan["late"] = {2: 3, 3: 3}
    got = check_ledger(store, e, plan, 960 * GRID, m=3, c=3, split="doubling")
    assert got["far", 1] == (320 * 10**12, 45_714_285_714_286)
    assert got["far", 2] == (559_999_999_999_999, 80_000_000_000_000)
    assert got["far", 3] == (834_285_714_285_714, 119_183_673_469_388)


def test_kde_point_estimate_is_the_hand_computed_kernel_sum():
    """Liang–Yi (adaptive budgeting) §6.3 / Alg. 7 line 5, PM1: Ã = (1/n)·(Σ_{G_c} exp(−ȳ_i²/(2b²)) + |S0|·e^{−18}) with ȳ_i ~ N(len_p(x_i),
    1/(2ρ_i)) (Fact 6.2). Noise-free value, by hand (b = 100 m; len_p = 0, b, 2b for c0, c1, c2; far ∈ S0; late 3b):
        window 1: (1 + e^{−1/2} + e^{−2} + e^{−18})/4 = 0.4354665…,
        windows 2, 3: (1 + e^{−1/2} + e^{−2} + e^{−9/2} + e^{−18})/5 = 0.3505950….
    The kernel is 1/(b√e)-Lipschitz in the distance, and every survivor has σ̄ = 1/√(2r_i) ≤ 1/√640 m, so
    |Ã − f| ≤ 8σ̄/(b√e) fails with probability < 1e-14. The wrong kernel exp(−d²/b²) is far outside; the S0 term
    |S0|·e^{−18}/n is below this tolerance, so it is checked on its own in the next test."""
    _, _, _, recs = kde_run("pm1", seed=7)
    e = math.exp
    f1 = (1 + e(-0.5) + e(-2) + e(-18)) / 4
    f2 = (1 + e(-0.5) + e(-2) + e(-4.5) + e(-18)) / 5
    assert f1 == pytest.approx(0.4354665, abs=1e-7) and f2 == pytest.approx(0.3505950, abs=1e-7)
    tol = 8 / math.sqrt(640) / (100 * math.sqrt(math.e))
    for rec, f in zip(recs, (f1, f2, f2)):
        assert abs(rec.values["estimate"] - f) < tol, (rec.values["estimate"], f)
    wrong = (1 + e(-1) + e(-4) + e(-18)) / 4
    assert abs(wrong - f1) > 20 * tol



def test_kde_point_counts_each_s0_user_as_e_minus_18_over_n():
    """Alg. 7 line 5 (PM1): each user in S0 adds e^{−18}/n (len_p ≥ 6b bound, Liang–Yi (adaptive budgeting) §6.3.2). One user at p and nine
    at 10⁶ m with b = 10⁴ m (6b = 6·10⁴ m): the nine land in S0 in round 1, so Ã = (exp(−ȳ²/(2b²)) + 9e^{−18})/10
    with ȳ ~ N(0, σ̄²), σ̄ = 1/√(2·1000) m (m = 1: r = B). 1 − exp(−ȳ²/(2b²)) ≤ (8σ̄)²/(2b²) = 1.6e-10 except with
    probability < 1e-14, so |Ã − (1 + 9e^{−18})/10| ≤ 2e-11, while dropping the S0 term moves Ã by 1.37e-8 and
    counting S0 users as 0 or as e^{−18} without the 1/n would be caught likewise."""
    q = KDEPoint("k", queries=[{"window": 1, "point": [0.0, 0.0]}], bandwidth=10_000.0, budget_rho=1000.0,
                 units="m", estimator="pm1")
    e, store = make_engine([q], Cost(cgp_rho=10_000.0), seed=8, horizon=64, store_cls=RecordingStore)
    pl = [ev("c", 1.0, (0.0, 0.0))] + [ev(f"f{i}", 1.1 + 0.01 * i, (0.0, 1e6 + i)) for i in range(9)]
    (rec,) = [r for r in run(e, pl) if r.query == "k"]
    v = rec.values
    assert (v["users"], v["s0"], v["survivors"]) == (10, 9, 1)
    tail = math.exp(-18)
    expected = (1 + 9 * tail) / 10
    assert abs(v["estimate"] - expected) < 2e-11, (v["estimate"], expected)
    assert abs(v["estimate"] - 1 / 10) > 1e-8  # without the S0 term
    # costs: m = 1 → r = B = 1e15 (Liang–Yi (adaptive budgeting) Alg. 3 with m = 1: r_i = B_i); S0 users pay one even round, 2.5e14
    assert store.admits[1]["c"] == store.charged(1, "c") == 1000 * GRID
    assert all(store.charged(1, f"f{i}") == 250 * GRID for i in range(9))

# ============================================================================================== knn_point
# k = 1, m = 3, B = 3 840 ρ/m² = 3.84e15 grid units, c = 4 even rounds, β = 1e-6 (β0 = β/4, Liang–Yi (adaptive budgeting) §6.4.2).
#   a at (10, 0) and a2 at (0, 10): len_p = 10 m for both, a tie. Their round-j intervals [ȳ ± h̄] always overlap:
#   |ȳ_a − ȳ_a2| ~ N(0, 2σ̄²) against 2h̄ = 2λσ̄ with λ = λ(1, β0/(c|G|)) ≥ 5.99, an 8.4-sd event. So |G_j| = 2 > k for
#   every j, PIE-k (Alg. 5 line 2) runs all c rounds and both pay r_i in full.
#   f at (100, 0), late (absent from window 1) at (0, −200): half-widths h̄ < 0.3 m, 90+ m from I_{t_1}:
#   eliminated in round 1 (line 13 fails), they pay r_i/4.
KNN_B_RHO = 3840.0
KNN_POINTS = {"a": (10.0, 0.0), "a2": (0.0, 10.0), "f": (100.0, 0.0)}
KNN_LATE = (0.0, -200.0)


def test_knn_point_per_user_charge_is_the_hand_computed_alg3_value():
    """Grid units (1e-12 ρ/m²), B = 3.84e15:
    l = 1 (γ = 3/4): r = B/3 = 1.28e15 for a, a2, f; a, a2 pay 1.28e15, f pays 3.2e14.
    l = 2 (γ = 7/8, floor (2/3)B = 2.56e15): a: r = 1.28e15 (pays all);
        f: B_i = 3.52e15 → r = 7/8·9.6e14 + 1.28e15 = 2.12e15, pays 5.3e14;
        late: B_i = B → r = 7/8·1.28e15 + 1.28e15 = 2.4e15, pays 6.0e14.
    l = 3 (r = B_i): a: 1.28e15; f: 2.99e15, pays 7.475e14; late: 3.24e15, pays 8.1e14.
    Totals: a, a2 = B; f = 3.2e14 + 5.3e14 + 7.475e14 = 1.5975e15; late = 1.41e15.
    Released noise std of the selected (tied) user: 1/√(2ρ̄) with ρ̄ = r_i = 1280 ρ/m² → 1/√2560 m."""
    q = KNNPoint("n", queries=[{"window": w, "point": [0.0, 0.0]} for w in (1, 2, 3)], k=1, budget_rho=KNN_B_RHO,
                 units="m", rounds=4, split="even", estimator="pm1", beta=1e-6)
    e, store = make_engine([q], Cost(cgp_rho=10_000.0), seed=9, horizon=64, store_cls=RecordingStore)
    pl = []
    for w in (1, 2, 3):
        t0 = 10.0 * (w - 1) + 1.0
        pl += [ev(u, t0 + 0.01 * j, p) for j, (u, p) in enumerate(KNN_POINTS.items())]
        if w >= 2:
            pl.append(ev("late", t0 + 5, KNN_LATE))
    recs = [r for r in run(e, pl) if r.query == "n"]
    B = 3840 * GRID
    plan = {"a": {1: 4, 2: 4, 3: 4}, "a2": {1: 4, 2: 4, 3: 4}, "f": {1: 1, 2: 1, 3: 1}, "late": {2: 1, 3: 1}}
    got = check_ledger(store, e, plan, B, m=3, c=4, split="even")
    T = 10**12
    written = {("a", 1): (1280 * T, 1280 * T), ("f", 1): (1280 * T, 320 * T),
               ("a", 2): (1280 * T, 1280 * T), ("f", 2): (2120 * T, 530 * T), ("late", 2): (2400 * T, 600 * T),
               ("a", 3): (1280 * T, 1280 * T), ("f", 3): (2990 * T, 747_500 * 10**9),
               ("late", 3): (3240 * T, 810 * T)}
    for key, val in written.items():
        assert got[key] == val, (key, got[key], val)
    assert [int(store.get_user(u).spent[CGP]) for u in ("a", "a2", "f", "late")] == \
        [B, B, 1_597_500 * 10**9, 1410 * T]
    for rec in recs:
        v = rec.values
        assert v["k"] == 1 and v["rounds"] == 4 and v["estimator"] == "PM1"
        assert v["noise_std"] == [pytest.approx(1 / math.sqrt(2 * 1280.0), rel=1e-12)]
        assert abs(v["distances"][0] - 10.0) < 8 / math.sqrt(2 * 1280.0)


# ============================================================================ PIE-k round-1 elimination law
# Two users, k = 1, distance privatisation (Liang–Yi (adaptive budgeting) Cor. 6.2 triple), φ = len_p: A with φ_A = 0, B with φ_B = D.
# Round 1 (Liang–Yi (adaptive budgeting) Alg. 5 lines 4–7): ṽ_i = φ_i + Z_i/√(2r_1), Z_i iid N(0, 1); ȳ_i(1) = ṽ_i (Fact 6.2 with one
# round); both users have the same r_1, so the same half-width h = λ(1, β0/(c·|G_0|))/√(2r_1), |G_0| = 2,
# λ(1, β) = √(2 log(2/β)) (Lemma 6.1). Line 8: t_1 is the user with the smaller right end ȳ + h, i.e. the smaller
# ȳ. Line 13 keeps the other user iff the intervals [ȳ ± h] overlap, i.e. |ȳ_B − ȳ_A| ≤ 2h. So B is eliminated in
# round 1 (and the loop stops: |G_1| = 1 = k) iff ȳ_B − ȳ_A > 2h. With ȳ_B − ȳ_A = D + (Z_B − Z_A)/√(2r_1)
# ~ N(D, 1/r_1):
#     P(B eliminated in round 1) = P(N(0, 1) > (2h − D)·√r_1) = Φ̄(√2·λ − D·√r_1).
# Symmetrically P(A eliminated in round 1) = Φ(−√2·λ − D·√r_1), so P(round 1 decides) is the sum of the two.

def law_b_out(D, r1, beta0, c, n=2):
    lam = math.sqrt(2 * math.log(2 / (beta0 / (c * n))))
    return stats.norm.sf(math.sqrt(2) * lam - D * math.sqrt(r1))


def law_round1(D, r1, beta0, c, n=2):
    lam = math.sqrt(2 * math.log(2 / (beta0 / (c * n))))
    return law_b_out(D, r1, beta0, c, n) + stats.norm.cdf(-math.sqrt(2) * lam - D * math.sqrt(r1))


@pytest.mark.statistical
@pytest.mark.parametrize("split,c", [("even", 4), ("doubling", 3)])
def test_pie_k_round_one_elimination_rate_is_the_gaussian_tail(split, c):
    """knn_pie (Liang–Yi (adaptive budgeting) Alg. 8 → PIE-k with β0 = β/4): exact two-sided binomial test at 1e-6 of the law above, over
    seeded trials, at two distances: D on the threshold (√r_1·D = √2λ, P = 1/2) and one noise sd closer
    (√r_1·D = √2λ − 1, P = Φ̄(1) ≈ 0.159), which pins both the threshold 2h and the noise scale 1/√(2r_1). The same
    counts reject (power) the threshold without the |G_{j−1}| factor (λ(1, β0/c)), β0 = β instead of β/4, and (at
    the second distance) round noise √2 times too large."""
    rng = unsafe_seeded_generator(811 if split == "even" else 812)
    beta, rho, trials = 0.1, 2.0, 2500
    beta0 = beta / 4
    r1 = rho * float(round_weights(c, split)[0])
    lam = math.sqrt(2 * math.log(2 / (beta0 / (c * 2))))
    for z in (0.0, -1.0):
        D = (math.sqrt(2) * lam + z) / math.sqrt(r1)
        x = np.array([[0.0, 0.0], [D, 0.0]])
        hits = 0
        for _ in range(trials):
            res = knn_pie(rng, x, (0.0, 0.0), 1, rho, privatization="distance", c=c, split=split, beta=beta)
            b_out = res.rounds == 1 and res.indices.tolist() == [0]
            hits += b_out
            if b_out:  # B ran exactly one round: settled to r_{B,1} (Alg. 5 line 5 once)
                assert res.executed_rho[1] == pytest.approx(r1, rel=1e-12)
        p = law_b_out(D, r1, beta0, c)
        assert p == pytest.approx(stats.norm.sf(-z), rel=1e-9)
        assert stats.binomtest(hits, trials, p).pvalue > P_MIN, (z, hits, trials, p)
        # power: nearby wrong laws are rejected by the same data
        lam_no_g = math.sqrt(2 * math.log(2 / (beta0 / c)))
        alts = [stats.norm.sf(math.sqrt(2) * lam_no_g - D * math.sqrt(r1)), law_b_out(D, r1, beta, c)]
        if z != 0.0:  # (2h − D)/√(2·σ_wrong²) with σ_wrong² = 1/r_1
            alts.append(stats.norm.sf((math.sqrt(2) * lam - D * math.sqrt(r1)) / math.sqrt(2)))
        for alt in alts:
            assert abs(alt - p) > 0.05
            assert stats.binomtest(hits, trials, alt).pvalue < P_MIN, (z, hits, trials, alt)


@pytest.mark.statistical
def test_knn_point_round_one_decision_rate_through_the_engine():
    """The same law through the engine: knn_point with reuse_savings = false gives every fresh user r_i = B/m
    (Liang–Yi (adaptive budgeting) §5.1); each window holds a fresh pair (A at p, B at distance D), k = 1, c = 4 even rounds, β0 = β/4.
    Round 1 decides (release ``rounds`` = 1, and both users settled to r_i/4) with probability
    Φ̄(√2λ − D√r_1) + Φ(−√2λ − D√r_1). Exact two-sided binomial test at 1e-6; power against λ(1, β0/c)."""
    M, c, beta, rho_i = 1500, 4, 0.1, 2.0
    beta0 = beta / 4
    r1 = rho_i / c
    lam = math.sqrt(2 * math.log(2 / (beta0 / (c * 2))))
    D = math.sqrt(2) * lam / math.sqrt(r1)
    q = KNNPoint("n", queries=[{"window": w, "point": [0.0, 0.0]} for w in range(1, M + 1)], k=1,
                 budget_rho=rho_i * M, units="m", reuse_savings=False, rounds=c, split="even", estimator="pm1",
                 beta=beta)
    e, store = make_engine([q], Cost(cgp_rho=10.0), seed=813, horizon=64, store_cls=RecordingStore)
    pl = []
    for w in range(M):
        pl += [ev(f"a{w}", 10 * w + 1, (0.0, 0.0)), ev(f"b{w}", 10 * w + 2, (D, 0.0))]
    recs = [r for r in run(e, pl) if r.query == "n"]
    assert len(recs) == M
    r_fixed = int(rho_i * GRID)  # B/m on the grid, by hand
    one_round = settle_value(r_fixed, 1, c, "even")
    hits = 0
    for w, rec in enumerate(recs, start=1):
        decided = rec.values["rounds"] == 1
        hits += decided
        for u in (f"a{w - 1}", f"b{w - 1}"):
            assert store.admits[w][u] == r_fixed
            assert (store.charged(w, u) == one_round) == decided
    p = law_round1(D, r1, beta0, c)
    assert stats.binomtest(hits, M, p).pvalue > P_MIN, (hits, M, p)
    lam_no_g = math.sqrt(2 * math.log(2 / (beta0 / c)))
    p_no_g = stats.norm.sf(math.sqrt(2) * lam_no_g - D * math.sqrt(r1))
    assert stats.binomtest(hits, M, p_no_g).pvalue < P_MIN, (hits, M, p_no_g)
