"""grid_means with neighbours = "bounded_unsafe_presence" (the IoT-means paper's bounded estimators) end to end:
ReleaseEngine + EmbeddedPipeline + MemoryBudgetStore. Their cost is in the separate notion bounded_unsafe_presence,
held by the query itself (never in the store's zcdp), with the per-query budget bounded_budget_rho."""

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
from streamdp.engine.queries.grid_means_bounded import ESTIMATOR_NAMES, BoundedGridMeans
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


BIG = 1e6  # a bounded budget nobody reaches


def GridMeans(qid, **kw):  # noqa: N802 — the bounded variant with an unreachable budget unless one is given
    kw.setdefault("bounded_budget_rho", BIG)
    return BoundedGridMeans(qid, **kw)


def grid_query(**kw):
    args = dict(epsilon=0.5, upper=100.0, cells="grid", cell_size=1.0)
    args.update(kw)
    return GridMeans("g", **args)


def bspent(e, q, user: str) -> int:
    """The user's spend in the bounded notion, fixed point (the query's own ledger)."""
    i = e.users.index.get(user)
    return 0 if i is None else round(q.spent(i) * LOSS_SCALE)


def zspent(store, user: str) -> int:
    u = store.get_user(user)
    return 0 if u is None else int(u.spent[0])


# ------------------------------------------------------------------------------------------- (a) known-answer cost
@pytest.mark.parametrize("eps", [0.5, 0.75])
def test_user_in_k_cells_pays_exactly_k_eps2_over_2(eps):
    q = grid_query(epsilon=eps)
    e, store = engine([q], Cost.zcdp(1e6, 1.0))
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
    assert bspent(e, q, "a") == (3 + 2) * per_cell
    assert bspent(e, q, "b") == 1 * per_cell
    assert bspent(e, q, "c") == 0
    # nothing in the store's zcdp: the bounded cost is never charged (nor converted) as standard zCDP
    assert all(zspent(store, u) == 0 and int(store.get_user(u).spent[1]) == 0 for u in "abc")
    w1, w2 = recs
    assert sorted(w1.values["cells"]) == ["0,0", "1,0", "5,-4"]
    assert w1.values["cells"]["0,0"]["users"] == 2 and w1.values["cells"]["0,0"]["samples"] == 3
    assert "zcdp" not in w1.realized and w1.cost["bounded_unsafe_presence"] == {"rho": eps**2 / 2, "delta": 0.0}
    assert "zcdp" not in w1.cost


def test_item_cells_use_the_first_item_and_charge_per_category():
    eps = 0.75
    q = GridMeans("i", epsilon=eps, upper=60.0, cells="item")
    e, store = engine([q], Cost.zcdp(1e6, 1.0))
    recs = run(e, [ev("a", 1.0, 5.0, items=["JFK", "ATL"]), ev("a", 2.0, 7.0, items=["LGA"]),
                   ev("b", 3.0, 9.0, items=["JFK"]),
                   ev("c", 4.0, 9.0)])  # a value but no item: ignored
    assert sorted(recs[0].values["cells"]) == ["JFK", "LGA"]  # "ATL" (second item) is not a category
    assert recs[0].values["cells"]["JFK"]["users"] == 2
    assert bspent(e, q, "a") == 2 * rho_fixed(eps)
    assert bspent(e, q, "b") == rho_fixed(eps)
    assert bspent(e, q, "c") == 0


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
    assert all(abs(bspent(e, q, f"u{j}") - rho_fixed(eps, estimator)) <= 1 for j in range(40))
    assert recs[0].cost["bounded_unsafe_presence"]["rho"] == pytest.approx(float(Fraction(eps) ** 2 * CELL_COST[estimator]), rel=1e-12)


# ------------------------------------------------------------------------------------------- (b) halting
def test_user_at_budget_is_halted_and_later_events_change_no_output():
    """The bounded notion's own filter: a user at their bounded budget is halted for this query, for good, and
    their later events change no record."""
    eps = 0.5
    budget = 2 * eps**2 / 2  # exactly two cells' worth, in the bounded notion

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
    q = lambda b=budget: grid_query(epsilon=eps, bounded_budget_rho=b)  # noqa: E731
    q1 = q()
    e1, s1 = engine([q1], Cost.zcdp(1e6, 1.0), seed=5)
    r1 = run(e1, base() + heavy_w1 + heavy_later)
    hid = e1.users.index["h"]
    assert q1.halted(hid) and bspent(e1, q1, "h") == 2 * rho_fixed(eps)  # admitted exactly at budget, then halted
    assert not s1.get_user("h").halted  # halted in this query's notion only, not in the store
    assert r1[0].meta["halted_bounded"] == 0 and r1[1].meta["halted_bounded"] == 1  # h, at window 2
    assert "3,3" in r1[0].values["cells"] and "7,7" not in r1[1].values["cells"]
    e2, _ = engine([q()], Cost.zcdp(1e6, 1.0), seed=5)
    r2 = run(e2, base() + heavy_w1)  # the halted user's later events removed
    strip = lambda rs: [orjson.dumps({**r.to_dict(), "meta": {k: v for k, v in r.meta.items()  # noqa: E731
                                                               if k != "halted_bounded"}}) for r in rs]
    assert strip(r1) == strip(r2)
    # and they do matter when the user is not halted (the test can fail)
    e3, _ = engine([q(100.0)], Cost.zcdp(1e6, 1.0), seed=5)
    r3 = run(e3, base() + heavy_w1 + heavy_later)
    assert strip(r3) != strip(r2)


def test_a_user_halted_in_the_store_is_dropped_here_too():
    q = grid_query(epsilon=0.5)
    from engine_helpers import PresenceCount

    e, store = engine([PresenceCount("p", rho=1.0), q], Cost.zcdp(1.5, 1.0), seed=2)
    from streamdp.accounting.cost import budget_vector

    store.grant("v", budget_vector(Cost.zcdp(10.0, 1.0)))
    recs = run(e, [ev("h", 1.0, 50.0, (0.5, 0.5)), ev("v", 1.1, 10.0, (0.5, 0.5)),
                   ev("h", 11.0, 99.0, (0.5, 0.5)), ev("v", 11.1, 10.0, (0.5, 0.5))])
    assert store.get_user("h").halted  # the presence count's second charge does not fit
    w2 = [r for r in recs if r.query == "g"][1]
    assert w2.values["cells"]["0,0"]["users"] == 1  # h's value is not in the bounded release either


def test_min_users_suppresses_small_cells_and_nobody_pays_for_them():
    eps = 0.5
    per = rho_fixed(eps)
    q = grid_query(epsilon=eps, min_users=3, bounded_budget_rho=4 * eps**2 / 2)
    # a user reserves every cell they have values in (h: 3 cells per window) and pays for the released ones
    e, store = engine([q], Cost.zcdp(1e6, 1.0))
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
    assert list(w1.values["cells"]) == ["0,0"] and w1.meta == {"selected": 1, "suppressed": 3, "halted_bounded": 0}
    assert bspent(e, q, "lone") == 0
    # window 2: h reserves 3 cells (per + 3·per ≤ 4·per: admitted), pays for 0,0 only, released with 3 users
    assert list(w2.values["cells"]) == ["0,0"] and w2.values["cells"]["0,0"]["users"] == 3
    assert w2.meta == {"selected": 1, "suppressed": 2, "halted_bounded": 0}
    assert bspent(e, q, "h") == 2 * per and not q.halted(e.users.index["h"])
    assert bspent(e, q, "a1") == 2 * per


def test_min_users_cell_emptied_by_a_halt_is_not_released_and_its_users_pay_nothing():
    eps = 0.5
    per = rho_fixed(eps)
    q = grid_query(epsilon=eps, min_users=3, bounded_budget_rho=eps**2 / 2)  # one cell's worth per user
    e, store = engine([q], Cost.zcdp(1e6, 1.0))
    payloads = [
        ev("h", 1.0, 30.0, (0.5, 0.5)), ev("x1", 1.1, 1.0, (0.5, 0.5)), ev("x2", 1.2, 2.0, (0.5, 0.5)),
        # window 2: 0,0 has h, a1, a2 (3 users before admission: reserved by all); h is at budget → halted,
        # so 0,0 has 2 admitted users < 3: not released, a1 and a2 pay nothing
        ev("h", 11.0, 30.0, (0.5, 0.5)), ev("a1", 11.1, 10.0, (0.5, 0.5)), ev("a2", 11.2, 20.0, (0.5, 0.5)),
    ]
    w1, w2 = run(e, payloads)
    assert w1.values["cells"]["0,0"]["users"] == 3
    assert q.halted(e.users.index["h"])
    assert w2.values["cells"] == {} and w2.meta == {"selected": 0, "suppressed": 1, "halted_bounded": 1}
    assert bspent(e, q, "a1") == 0 and bspent(e, q, "a2") == 0
    assert not q.halted(e.users.index["a1"])
    assert bspent(e, q, "x1") == per


def test_the_bounded_ledger_survives_a_snapshot():
    q = grid_query(epsilon=0.5, bounded_budget_rho=0.25)
    e, store = engine([q], Cost.zcdp(1e6, 1.0), seed=3)
    run(e, [ev("h", 1.0, 30.0, (0.5, 0.5)), ev("h", 2.0, 30.0, (1.5, 0.5)), ev("v", 3.0, 1.0, (0.5, 0.5))])
    snap = e.snapshot()
    q2 = grid_query(epsilon=0.5, bounded_budget_rho=0.25)
    e2, _ = engine([q2], Cost.zcdp(1e6, 1.0), seed=3)
    e2.restore(snap)
    assert bspent(e2, q2, "h") == 2 * rho_fixed(0.5) and bspent(e2, q2, "v") == rho_fixed(0.5)


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
    assert k.notion == "zcdp" and "epsilon^2/2" in k.cost and "IoT-means" in k.source
    assert "as public" in k.doc and "NOT" in k.doc and "bounded_unsafe_presence" in k.cost
    names = {p.name for p in k.params}
    assert {"neighbours", "epsilon", "upper", "estimator", "cells", "cell_size", "origin", "grouping", "m_ub",
            "min_users", "publish_counts", "bounded_budget_rho", "rho", "sum_share", "cell_selection", "delta_cell",
            "cell_list"} <= names
    assert next(p for p in k.params if p.name == "neighbours").default == "add_remove"
    assert main(["queries", "kinds"]) == 0
    assert "grid_means" in capsys.readouterr().out


def test_example_config_checks(capsys):
    assert main(["config", "check", EXAMPLE]) == 0
    out = capsys.readouterr().out
    assert "OK" in out and "grid_means" in out


B = {"neighbours": "bounded_unsafe_presence", "bounded_budget_rho": 3.0}


def test_config_builds_estimator_options():
    q = build_query("query[0]", {"id": "a", "kind": "grid_means", **B, "epsilon": 1.0, "upper": 5.0,
                                 "estimator": "levy", "cells": "item", "grouping": "wraparound", "m_ub": 3},
                    horizon=8)
    assert q.estimator.grouping == "wraparound" and q.estimator.m_ub_rule == 3
    q = build_query("query[0]", {"id": "a", "kind": "grid_means", **B, "epsilon": 1.0, "upper": 5.0,
                                 "estimator": "array_averaging", "cells": "item"}, horizon=8)
    assert q.estimator.grouping == "bestfit" and q.estimator.m_ub_rule == "median"
    q = build_query("query[0]", {"id": "a", "kind": "grid_means", **B, "epsilon": 1.0, "upper": 5.0,
                                 "cell_size": 0.5, "origin": [40, -74]}, horizon=8)
    assert q.origin == (40.0, -74.0) and q.min_users == 1 and q.estimator_name == "baseline"
    assert q.notion == "bounded_unsafe_presence" and q.bounded_budget_rho == 3.0


BASE = ("[service]\nwindow_seconds = 60\norigin = 0\n[[query]]\nid='m'\nkind='grid_means'\n"
        "neighbours='bounded_unsafe_presence'\nbounded_budget_rho=1\n")


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
    ("epsilon=1\nupper=10\ncell_size=1\nrho=1\n", "query[0].rho"),  # an add/remove parameter
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
        build_query("q", {"id": "a", "kind": "grid_means", **B, "epsilon": 1, "upper": 1, "cells": "item",
                          "origin": [0, 0]}, horizon=1)


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
