"""Config → mechanism wiring gaps found by mutation (round 2): the service horizon L reaches the continual-count
tree's cost and the engine, a δ budget ≥ 1 is refused in EVERY notion, and the kinds' defaults are the documented
ones (docs/query_*.md parameter tables, docs/contract.md §3 "default C = 1"), checked by their effect on thresholds and
costs computed by hand from Rogers (unknown-domain) Thm 7/9/10/11 and docs/contract.md §3."""

from __future__ import annotations

import math
import os
import re

import pytest
from scipy import stats

from streamdp.config.kinds import ConfigError, kinds
from streamdp.config.loader import parse_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cfg(query: dict, **service) -> dict:
    return {"service": {"window_seconds": 60.0, "origin": 0.0, **service}, "query": [{"id": "q", **query}]}


# ------------------------------------------------------------------------------------------------ horizon wiring
def test_service_horizon_reaches_the_tree_cost_threshold_and_engine():
    """L = 1000: levels = ⌈log2 1001⌉ = 10 (2^9 = 512 ≤ 1000 < 1024). σ = 2, C = 1 (default, DESIGN §3):
    ρ = Δ2²/(2σ²) with Δ2² = levels for C = 1: 10/8 = 1.25, δ = δ_item; T = C + σ·√P·Φ⁻¹(1 − δ_item/L) with
    P = the largest popcount of t ≤ 1000 = 9 (511).
    With the default L = 64 the tree would have 7 levels (ρ = 0.875): the cost would undercount."""
    cfg = parse_config(_cfg({"kind": "continual_counts", "sigma": 2.0, "delta_item": 1e-6}, horizon=1000))
    assert cfg.engine_config().horizon == 1000
    (q,) = cfg.build_queries()
    assert q.item_cost.zcdp_rho == pytest.approx(1.25, rel=1e-12)
    assert q.item_cost.zcdp_delta == pytest.approx(1e-6, rel=1e-12)
    assert q.threshold == pytest.approx(1 + 2 * math.sqrt(9) * stats.norm.isf(1e-6 / 1000), rel=1e-9)
    # positive control: the default horizon 64 gives 7 levels (64 < 127 < 128) — the check can tell them apart
    (q64,) = parse_config(_cfg({"kind": "continual_counts", "sigma": 2.0})).build_queries()
    assert q64.item_cost.zcdp_rho == pytest.approx(7 / 8, rel=1e-12)


def test_continual_counts_default_cap_is_one():
    """contract §3: over the horizon a user adds to any one item at most C times, default C = 1 (distinct users).
    Defaults of `streamdp queries kinds`: δ_item = 1e-6, Δ0 = 4 (as window_histogram's documented Δ0).
    σ = 1, L = 64 (7 levels): ρ = 1·7/2 = 3.5, δ = 1e-6; T = 1 + √6·Φ⁻¹(1 − 1e-6/64) (P = popcount(63) = 6)."""
    (q,) = parse_config(_cfg({"kind": "continual_counts", "sigma": 1.0})).build_queries()
    assert q.bounder.cap == 1 and q.bounder.delta0 == 4
    assert q.item_cost.zcdp_delta == pytest.approx(1e-6, rel=1e-12)
    assert q.item_cost.zcdp_rho == pytest.approx(3.5, rel=1e-12)
    assert q.threshold == pytest.approx(1 + math.sqrt(6) * stats.norm.isf(1e-6 / 64), rel=1e-9)
    (q2,) = parse_config(_cfg({"kind": "continual_counts", "sigma": 1.0, "max_per_item": 2})).build_queries()
    # control: C = 2 costs more — windows 1 and 2 share the nodes of levels 1..6 (2² each), window 1 alone has
    # level 0 (window 2 is a right child): Δ2² = 1 + 6·4 = 25 (the per-level bound C²·levels gives 28)
    assert q2.item_cost.zcdp_rho == pytest.approx(25 / 2, rel=1e-12)


# ----------------------------------------------------------------------------------------------- budget ranges
@pytest.mark.parametrize("key", ["zcdp_delta", "cgp_delta", "emd_delta"])
def test_a_delta_budget_of_one_is_refused_in_every_notion(key):
    base = _cfg({"kind": "continual_counts", "sigma": 1.0})
    for bad in (1.0, 1.5):
        with pytest.raises(ConfigError, match=f"budget.{key}"):
            parse_config({**base, "budget": {key: bad}})
    assert getattr(parse_config({**base, "budget": {key: 0.999}}).budget, key) == 0.999  # control


@pytest.mark.parametrize("key", ["zcdp_rho", "zcdp_delta", "cgp_rho", "emd_alpha"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_budgets_are_refused(key, bad):
    """A NaN passes every `<`/`>` range check: only the finiteness check stops `zcdp_rho = nan` (TOML allows it)."""
    with pytest.raises(ConfigError, match=f"budget.{key}"):
        parse_config({**_cfg({"kind": "continual_counts", "sigma": 1.0}), "budget": {key: bad}})


@pytest.mark.parametrize("query", [{"kind": "continual_counts", "sigma": math.nan},
                                   {"kind": "top_k", "epsilon": math.nan},
                                   {"kind": "window_histogram", "epsilon": 1.0, "delta": math.nan}])
def test_non_finite_mechanism_parameters_are_refused(query):
    with pytest.raises(ConfigError, match=r"query\[0\]"):
        parse_config(_cfg(query))


# ---------------------------------------------------------------------------------------- defaults by effect
def test_window_histogram_defaults_give_the_documented_threshold_and_cost():
    """docs/query_window_histogram.md: δ = 1e-6, Δ0 = 4, threshold/Gaussian. ε = 0.5:
    T = 1 + Φ⁻¹(1 − δ/Δ0)/ε = 1 + 2·Φ⁻¹(1 − 2.5e-7) (Rogers (unknown-domain) Thm 7, Δ∞ = 1); full cost (Δ0·ε²/2, δ) = (0.5, 1e-6)."""
    (q,) = parse_config(_cfg({"kind": "window_histogram", "epsilon": 0.5})).build_queries()
    assert q.threshold == pytest.approx(1 + 2 * stats.norm.isf(2.5e-7), rel=1e-9)
    from streamdp.accounting.cost import fixed_to_cost

    full = fixed_to_cost(q.full_cost_fixed)
    assert full.zcdp_rho == pytest.approx(0.5, rel=1e-9) and full.zcdp_delta == pytest.approx(1e-6, rel=1e-9)
    (t,) = parse_config(_cfg({"kind": "window_histogram", "epsilon": 0.5, "algorithm": "top_kbar"})).build_queries()
    assert t.kbar == 20  # documented k̄


def test_top_k_defaults_threshold_and_reservation():
    """top_k defaults δ = 1e-6, k = 5, k̄ = 20, k* = 500 (`streamdp queries kinds`): T = 1 + log(k̄/δ)/ε (Rogers (unknown-domain) Thm 9);
    reservation k·ε²/8 and δ (Rogers (unknown-domain) Thm 10). ε = 0.5: T = 1 + 2·log(2e7); ρ = 5·0.25/8 = 0.15625."""
    (q,) = parse_config(_cfg({"kind": "top_k", "epsilon": 0.5})).build_queries()
    assert q.threshold == pytest.approx(1 + 2 * math.log(20 / 1e-6), rel=1e-12)
    r = q.pwyg.reserve_cost(q.k)
    assert q.k == 5 and r.zcdp_rho == pytest.approx(0.15625, rel=1e-12) and r.zcdp_delta == pytest.approx(1e-6)
    assert q.pwyg.k_star == 500  # k*: the run stops after 500 items (Thm 10's total k*·ε²/8)


def test_top_k_refuses_k_star_below_k():
    with pytest.raises(ConfigError, match=r"query\[0\]\.k_star"):
        parse_config(_cfg({"kind": "top_k", "epsilon": 1.0, "k": 5, "k_star": 4}))


def test_laplace_window_histogram_needs_delta_at_most_half_delta0():
    """Laplace threshold T = 1 + log(Δ0/(2δ))/ε needs δ ≤ Δ0/2 (otherwise T < 1 = Δ∞)."""
    with pytest.raises(ConfigError, match=r"query\[0\]\.delta"):
        parse_config(_cfg({"kind": "window_histogram", "epsilon": 1.0, "noise": "laplace",
                           "max_items_per_window": 1, "delta": 0.6}))
    parse_config(_cfg({"kind": "window_histogram", "epsilon": 1.0, "noise": "laplace",
                       "max_items_per_window": 1, "delta": 0.5}))  # control: δ = Δ0/2 is allowed


# -------------------------------------------------------------------------------- documented defaults (tables)
def _doc_defaults(path: str, kind: str) -> dict[str, str]:
    """{parameter: default cell} of the "| parameter | … |" table(s) of a docs/query_*.md file that document
    ``kind``: tables under the nearest heading naming a registered kind in backticks, when that kind is ``kind``
    (a page documents several kinds: query_range.md also has kde_point, knn_point and threshold_count)."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        lines = f.read().splitlines()
    registry = kinds()
    out, col, here = {}, None, None
    for line in lines:
        if line.startswith("#"):
            named = [n for n in re.findall(r"`([a-z_]+)`", line) if n in registry]
            here = named[0] if named else here
            continue
        if here != kind:
            continue
        if not line.startswith("|"):
            col = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "parameter":
            col = cells.index("default")
            continue
        if col is None or re.fullmatch(r":?-+:?", cells[0]):
            continue
        m = re.fullmatch(r"`([a-z_]+)`", cells[0])
        if m:
            out[m.group(1)] = cells[col]
    return out


def _value(cell: str):
    v = cell.strip("`").strip('"')
    if v in ("true", "false"):
        return v == "true"
    try:
        return int(v)
    except ValueError:
        pass
    try:
        return float(v)
    except ValueError:
        return v


@pytest.mark.parametrize("kind,doc", [("window_histogram", "docs/query_window_histogram.md"),
                                      ("grid_means", "docs/query_grid_means.md"),
                                      ("range_counts", "docs/query_range.md")])
def test_registered_defaults_are_the_documented_ones(kind, doc):
    table = _doc_defaults(doc, kind)
    params = {p.name: p for p in kinds()[kind].params}
    checked = 0
    for name, cell in table.items():
        assert name in params, f"{doc}: {name} is not a parameter of {kind}"
        p = params[name]
        if cell == "required" or p.required:
            assert p.required and cell == "required", f"{kind}.{name}: required? doc {cell!r}"
        elif p.default is None:  # resolved later ("—", "region middle", grid origin [0, 0])
            continue
        else:
            assert p.default == _value(cell), f"{kind}.{name}: registry default {p.default!r}, {doc} says {cell}"
            checked += 1
    assert checked >= 3  # the table was found and read
