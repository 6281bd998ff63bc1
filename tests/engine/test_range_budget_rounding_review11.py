"""Review 11, F2: the published whole-sequence CGP bound of ``range_counts`` / ``kde_point`` / ``knn_point``
(``budget_canonical``: the record's ``cost.cgp.rho``, ``budget_cgp_rho_per_m2`` in ``config check --json``) must be
TRUE — no user is charged more than it over the sequence — and the docs' budget rule must hold: with
``[budget] cgp_rho`` = the published bound nobody is halted, and a budget whose per-m² share cannot give each of
the m queries ``rounds`` grid units (10⁻¹² per m²) is refused at config time, naming ``budget_rho``.

Before the fix the split check ran on the per-unit² grid and each query's charge was rounded up to the per-m² grid
separately: the reviewer's configurations (below, as dicts) were accepted, users were charged up to m grid units for
a published bound of 1–3, and with the documented ``cgp_rho`` every user was halted after 3 of 100 queries.

Known answers are recomputed here: the published bound is ⌈B/q⌉ grid units (q = 10⁶ for km, exact integers; the
lat/lon case uses c of the equirectangular frame, as ``config check`` prints it), and each user's ledger total must lie
between their real executed cost ⌈(B − B_i)/q⌉ (never under-charged) and the published bound.
"""

import math

import numpy as np
import pytest

from streamdp.accounting.cgp import convert_cgp_rho
from streamdp.accounting.cost import COMPONENTS, LOSS_SCALE, budget_vector
from streamdp.config.kinds import ConfigError
from streamdp.config.loader import parse_config
from streamdp.engine.engine import ReleaseEngine
from streamdp.engine.pipeline import EmbeddedPipeline
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.outputs.sinks import ListSink

import orjson

CGP = COMPONENTS.index("cgp_rho")
DAY = 86400.0
ORIGIN = 1356998400.0
SERVICE = {"window_seconds": DAY, "horizon": 128, "origin": ORIGIN}
US = [24.0, 50.0, -125.0, -66.0]
ATL = [33.6367, -84.4281, 400.0, 400.0]

# /tmp/s11/config/f2.toml: the documented lat/lon setup, 100 queries, [budget] cgp_rho as docs/query_range.md says
F2 = {"service": SERVICE, "budget": {"cgp_rho": 3e-12},
      "query": [{"id": "hub", "kind": "range_counts", "budget_rho": 1e-6, "units": "km",
                 "projection": "equirectangular", "ref_lat": 37.0, "region": US, "rounds": 4,
                 "queries": [{"window": w, "rect": ATL} for w in range(1, 101)]}]}
# /tmp/s11/config/f2b.toml: planar km, B = 1e-6 per km² = 1e-12 per m² (one grid unit) for 6 queries, rounds = 1
F2B = {"service": SERVICE, "budget": {"cgp_rho": 1e-5},
       "query": [{"id": "hub", "kind": "range_counts", "budget_rho": 1e-6, "units": "km", "projection": "none",
                  "rounds": 1, "queries": [{"window": w, "rect": [33.6, -84.4, 400.0, 400.0]} for w in range(1, 7)]}]}


def _refused_naming_budget_rho(cfg):
    with pytest.raises(ConfigError) as ei:
        parse_config(cfg)
    msg = str(ei.value)
    assert msg.startswith("query[0].budget_rho:"), msg
    return msg


def test_reviewer_configs_are_refused_naming_budget_rho():
    # f2b: 1 grid unit per m² for m = 6 queries of 1 round: B/m = 1/6 unit < 1
    msg = _refused_naming_budget_rho(F2B)
    assert "m = 6" in msg and "per m²" in msg
    # f2: 1e-6 per km² over c = 579.71 m per projected km is 2.98e-12 per m² (2 whole units, rounded down) for
    # m = 100 queries of 4 rounds: needs 400 units
    msg = _refused_naming_budget_rho(F2)
    assert "m = 100" in msg
    # the same sequences as kde_point / knn_point (they share the budget machinery)
    for kind, extra in (("kde_point", {"bandwidth": 10.0}), ("knn_point", {"k": 2})):
        for base in (F2, F2B):
            q = dict(base["query"][0], kind=kind, **extra)
            q["queries"] = [{"window": e["window"], "point": e["rect"][:2]} for e in q["queries"]]
            _refused_naming_budget_rho({**base, "query": [q]})


def test_boundary_of_the_split_rule_in_the_canonical_unit():
    # planar km: B = 24e-6 per km² = exactly 24 grid units per m² = m·rounds for m = 6, rounds = 4 → accepted;
    # one fixed-point unit per km² less (23.999999 units per m², 23 whole) → refused
    q = dict(F2B["query"][0], budget_rho=24e-6, rounds=4)
    cfg = parse_config({**F2B, "query": [q]})
    (built,) = cfg.build_queries()
    assert built.budget_canonical == 24 and built.describe()["budget_cgp_rho_per_m2"] == 24e-12
    _refused_naming_budget_rho({**F2B, "query": [dict(q, budget_rho=23.999999e-6)]})
    # rounds = 1 on the same f2b budget shape: 6 units for 6 queries is the boundary, 5.999999 is not
    parse_config({**F2B, "query": [dict(F2B["query"][0], budget_rho=6e-6)]})
    _refused_naming_budget_rho({**F2B, "query": [dict(F2B["query"][0], budget_rho=5.999999e-6)]})


def _run(cfg_dict, locs_by_window, seed=3):
    """Parse the config, run one batch per window through an EmbeddedPipeline over a MemoryBudgetStore granted
    ``[budget]``; locs_by_window[w] = {user: loc}. Returns (query, store, engine, records)."""
    cfg = parse_config(cfg_dict)
    cfg.service["unsafe_test_seed"] = seed
    (q,) = cfg.build_queries()
    store = MemoryBudgetStore(budget_vector(cfg.budget))
    e = ReleaseEngine(cfg.engine_config(), [q], store)
    sink = ListSink()
    batches = []
    for w in sorted(locs_by_window):
        t0 = ORIGIN + (w - 1) * DAY + 100.0
        batches.append([orjson.dumps({"user": u, "ts": t0 + i, "items": [], "loc": [float(p[0]), float(p[1])]})
                        for i, (u, p) in enumerate(sorted(locs_by_window[w].items()))])
    t_last = ORIGIN + max(locs_by_window) * DAY + 100.0
    batches.append([orjson.dumps({"user": "closer", "ts": t_last, "items": []})])  # closes the last window
    EmbeddedPipeline(e, [sink]).run(batches)
    return q, store, e, sink.records


def _check_totals(q, store, e, recs, users, m, exact_q=None):
    """Every user answered all m queries (nobody halted at [budget] cgp_rho = the published bound), and every
    user's ledger total lies in [their real executed cost rounded up, the published bound]."""
    P = q.budget_canonical
    assert q.describe()["budget_cgp_rho_per_m2"] == P / LOSS_SCALE
    answered = [r for r in recs if r.query == q.id and r.values.get("query_index") is not None]
    assert [r.values["query_index"] for r in answered] == list(range(1, m + 1))
    for r in answered:
        assert r.cost["cgp"]["rho"] == P / LOSS_SCALE  # the published whole-sequence bound
        assert r.values["users"] == len(users)  # nobody halted
    totals = {}
    for u in users:
        rec = store.get_user(u)
        assert not rec.halted, u
        spent = int(rec.spent[CGP])
        used = q.B - int(q.remaining_of(np.array([e.users.index[u]]))[0])  # executed ρ per unit², fixed point
        if exact_q is not None:
            real = -(-used // exact_q)
        else:
            real = math.ceil(convert_cgp_rho(used / LOSS_SCALE, q.coords.metres_per_unit, "m") * LOSS_SCALE
                             * (1 - 1e-12))
        assert real <= spent <= P, (u, real, spent, P)
        assert int(q.charged_of(np.array([e.users.index[u]]))[0]) == spent  # the query's C_i = the store's spend
        totals[u] = spent
    return totals


def test_boundary_budget_km_nobody_is_charged_past_the_published_bound():
    # 24 units per m² for m = 6 queries of 4 rounds; [budget] cgp_rho = the published bound (the docs' rule).
    # 64 users: user k sits on the rectangle's boundary at query l if bit l−1 of k is set (never eliminated:
    # pays all 4 rounds of r_i), else 5·10⁵ km outside (σ ≈ 700 km per round: eliminated after round 1, pays
    # r_i/4). Alg. 3's r_i are then off the 10⁶ (km² → m²) grid, and rounding every query up separately charged
    # the mixed users up to 26 units.
    m = 6
    q = dict(F2B["query"][0], budget_rho=24e-6, rounds=4,
             queries=[{"window": w, "rect": [0.0, 0.0, 2e5, 2e5]} for w in range(1, m + 1)])
    cfg = {**F2B, "budget": {"cgp_rho": 24e-12}, "query": [q]}
    users = [f"u{k}" for k in range(2**m)]
    locs = {w: {f"u{k}": ((1e5, 0.0) if (k >> (w - 1)) & 1 else (5e5, 0.0)) for k in range(2**m)}
            for w in range(1, m + 1)}
    built, store, e, recs = _run(cfg, locs)
    assert built.budget_canonical == 24
    totals = _check_totals(built, store, e, recs, users, m, exact_q=10**6)
    # known answers: always on the boundary → all of B executed, exactly 24 units; always far → each query r_i/4
    assert totals[f"u{2**m - 1}"] == 24
    assert totals["u0"] < 24


def test_documented_latlon_setup_with_an_accepted_budget_stays_within_the_bound():
    # the f2 setup (equirectangular km over the contiguous US) with 10 queries and a budget the rule accepts;
    # cgp_rho = the published bound. c = 579.71 m per projected km: 1.4e-5 per km² is 41.66 units per m²
    # (41 ≥ 10·4 whole units), published ⌈·⌉ = 42. σ ≈ 1200 km per round: nobody is eliminated, everyone pays
    # all of B over the sequence, each query's share off the grid (ten separate round-ups charged ~46 units).
    m = 10
    q = dict(F2["query"][0], budget_rho=1.4e-5, queries=[{"window": w, "rect": ATL} for w in range(1, m + 1)])
    probe = parse_config({**F2, "query": [q]}).build_queries()[0]
    P = probe.budget_canonical
    want = convert_cgp_rho(1.4e-5, probe.coords.metres_per_unit, "m") * LOSS_SCALE
    assert P == math.ceil(want) == 42
    cfg = {**F2, "budget": {"cgp_rho": P / LOSS_SCALE}, "query": [q]}
    pts = {"atl": (33.6367, -84.4281), "edge": (35.43, -84.43), "den": (39.86, -104.67), "bos": (42.36, -71.0)}
    users = sorted(pts)
    built, store, e, recs = _run(cfg, {w: pts for w in range(1, m + 1)})
    totals = _check_totals(built, store, e, recs, users, m)
    assert max(totals.values()) == P  # everybody executed all of B: charged exactly the published bound
