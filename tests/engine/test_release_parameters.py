"""A snapshot is restored only under the release parameters it was written under (engine/release_parameters.py).

The state was built under them: a continual-count tree keeps the σ it was made with (its nodes' noise, its
threshold), the windows their length and origin. Before this check, a worker restarted with σ = 0.5 instead of 2
over a checkpoint restored the σ = 2 tree (the tree reads σ from its bytes) while pricing each first contribution
with the configured σ, and a changed window length or lateness was silently ignored (the windows read theirs from
the snapshot). Hand values as in tests/filter/test_admission_scope.py: horizon L = 8 → 4 levels, C = 1, so a first
contribution costs ρ = C²·levels/(2σ²): 0.5 at σ = 2, 8 at σ = 0.5 (Rogers (unknown-domain) Thm 11, contract §3).
"""

from __future__ import annotations

import copy

import orjson
import pytest

from streamdp.accounting.cost import LOSS_SCALE, budget_vector
from streamdp.config.kinds import kinds
from streamdp.config.loader import parse_config
from streamdp.engine import state_codec
from streamdp.engine.engine import ReleaseEngine
from streamdp.engine.queries.continual_counts import ContinualCounts
from streamdp.engine.release_parameters import ParametersChanged, canonical
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.input.events import parse_batch

BASE = {"service": {"window_seconds": 60.0, "origin": 1.7e9, "horizon": 8, "unsafe_test_seed": 3},
        "budget": {"zcdp_rho": 100.0, "zcdp_delta": 1e-3},
        "query": [{"id": "counts", "kind": "continual_counts", "sigma": 2.0},
                  {"id": "top", "kind": "top_k", "epsilon": 1.0, "delta": 1e-6, "k": 2, "kbar": 4, "k_star": 8}]}


def _raw(service=None, **query_over) -> dict:
    raw = copy.deepcopy(BASE)
    raw["service"].update(service or {})
    for qid, over in query_over.items():
        q = next(q for q in raw["query"] if q["id"] == qid)
        q.update(over)
    return raw


def _engine(raw: dict, store=None) -> ReleaseEngine:
    c = parse_config(raw)
    return ReleaseEngine(c.engine_config(), c.build_queries(),
                         store if store is not None else MemoryBudgetStore(budget_vector(c.budget)))


def _events(k: int):
    return parse_batch([orjson.dumps({"user": f"u{i}", "ts": 1.7e9 + 10.0 + 60 * (i % 3), "items": ["x", f"i{i}"]})
                        for i in range(k)])[0]


def _snapshot(raw: dict) -> tuple[bytes, ReleaseEngine]:
    eng = _engine(raw)
    eng.ingest(_events(30))
    eng.flush()
    assert eng.windows.last_closed >= 2
    return eng.snapshot(), eng


def test_a_snapshot_restores_under_the_same_parameters_written_differently():
    snap, eng = _snapshot(_raw())
    same = _raw({"window_seconds": 60, "horizon": 8.0})  # ints and floats as TOML gives them, same values
    same["query"][0] = {"sigma": 2, "kind": "continual_counts", "id": "counts", "delta_item": 1e-6}  # a default, given
    again = _engine(same)
    assert again.scope == eng.scope
    again.restore(snap)
    assert again.windows.last_closed == eng.windows.last_closed


def test_a_changed_sigma_is_refused_before_anything_is_loaded():
    snap, _ = _snapshot(_raw())
    eng = _engine(_raw(counts={"sigma": 0.5}))
    with pytest.raises(ParametersChanged, match=r"query 'counts' sigma: 2\.0 in the checkpoint, 0\.5 now"):
        eng.restore(snap)
    assert eng.windows.last_closed == 0 and len(eng.users) == 0  # nothing of the snapshot was loaded


@pytest.mark.parametrize("field,value", [("window_seconds", 120.0), ("horizon", 16), ("origin", 1.7e9 - 60.0),
                                         ("allowed_lateness", 5.0), ("idle_timeout", 30.0),
                                         ("max_future_seconds", 3600.0)])
def test_every_window_parameter_is_checked(field, value):
    snap, eng = _snapshot(_raw())
    other = _engine(_raw({field: value}))
    assert other.scope != eng.scope
    with pytest.raises(ParametersChanged, match=f"service.{field}: "):
        other.restore(snap)


def test_every_query_parameter_is_checked_and_all_differences_are_named():
    snap, _ = _snapshot(_raw())
    eng = _engine(_raw(counts={"max_items_per_window": 3}, top={"epsilon": 0.5, "k": 1}))
    with pytest.raises(ParametersChanged) as e:
        eng.restore(snap)
    msg = str(e.value)
    for part in ("query 'counts' max_items_per_window:", "query 'top' epsilon: 1.0 in the checkpoint, 0.5 now",
                 "query 'top' k: 2 in the checkpoint, 1 now", "Revert the configuration"):
        assert part in msg


def test_a_query_cannot_be_added_but_can_be_removed():
    snap, eng = _snapshot(_raw())
    added = _raw()
    added["query"].append({"id": "more", "kind": "continual_counts", "sigma": 2.0})
    with pytest.raises(ParametersChanged, match="query 'more' is not in the checkpoint"):
        _engine(added).restore(snap)
    removed = _raw()
    removed["query"] = removed["query"][:1]
    fewer = _engine(removed)
    fewer.restore(snap)  # the remaining query's state and parameters are unchanged
    assert fewer.windows.last_closed == eng.windows.last_closed
    assert fewer.queries[0].tree.to_bytes() == eng.queries[0].tree.to_bytes()
    assert fewer.scope != eng.scope  # other releases: replayed windows are charged again


def test_a_snapshot_written_before_the_check_restores_unchecked():
    snap, eng = _snapshot(_raw())
    tree = state_codec.decode(snap)
    del tree["parameters"]
    other = _engine(_raw(counts={"sigma": 0.5}))
    other.restore(state_codec.encode(tree))  # nothing to compare with: as before
    assert other.windows.last_closed == eng.windows.last_closed


def test_the_restored_tree_would_have_released_at_the_old_sigma():
    """Why the refusal: the tree reads σ from its bytes, the cost from the configuration."""
    snap, _ = _snapshot(_raw())
    tree = state_codec.decode(snap)
    del tree["parameters"]
    other = _engine(_raw(counts={"sigma": 0.5}))
    other.restore(state_codec.encode(tree))
    q = other.queries[0]
    assert q.tree.sigma == 2.0 and q.sigma == 0.5
    assert q.item_cost.zcdp_rho == pytest.approx(8.0)  # priced at σ = 0.5 while the noise is σ = 2's


def test_parameters_of_a_query_are_its_validated_table_or_its_description():
    built = parse_config(_raw()).build_queries()[0]
    p = built.parameters()
    # every parameter, defaults in, and the version of the kind's cost/threshold rule (a checkpoint of rule 1
    # lacks it and is refused)
    assert set(p) == {"kind", "release_rule"} | {x.name for x in kinds()["continual_counts"].params}
    assert p["kind"] == "continual_counts" and p["sigma"] == 2.0 and p["delta_item"] == 1e-6
    q = ContinualCounts("c", sigma=2.0, horizon=8, delta_item=1e-6)  # built in code: no table
    assert q.config_params is None and q.parameters() == q.describe() and q.parameters()["release_rule"] == 3
    assert canonical({"b": 1, "a": [1.5, None]}) == '{"a":[1.5,null],"b":1}'


def test_the_unsafe_test_seed_is_not_a_release_parameter():
    a, b = _engine(_raw({"unsafe_test_seed": 3})), _engine(_raw({"unsafe_test_seed": 4}))
    assert a.scope == b.scope and a.parameters == b.parameters


def test_cost_in_fixed_point_of_the_hand_values():
    """The hand values of the module doc, from the queries as configured."""
    lo, hi = _engine(_raw()).queries[0], _engine(_raw(counts={"sigma": 0.5})).queries[0]
    assert lo.item_cost.to_fixed()[0] == 0.5 * LOSS_SCALE and hi.item_cost.to_fixed()[0] == 8 * LOSS_SCALE


def test_the_order_of_the_queries_is_a_release_parameter():
    """The engine draws the queries' noise in their order: two tables swapped are other releases (found by review:
    the scope sorted the ids and the parameters' JSON sorted its keys, so a swap kept the scope and restored)."""
    snap, eng = _snapshot(_raw())
    swapped = _raw()
    swapped["query"].reverse()
    other = _engine(swapped)
    assert other.scope != eng.scope
    with pytest.raises(ParametersChanged, match=r"query order: \['counts', 'top'\] in the checkpoint, "
                                                r"\['top', 'counts'\] now"):
        other.restore(snap)


def test_a_checkpoint_of_the_old_continual_counts_rule_is_refused():
    """Release rule 2 of continual_counts (exact Δ2² for C > 1, √P in the threshold) changed its costs and
    threshold without a configuration change: a checkpoint written under rule 1 (its parameters lack
    ``release_rule``) must not continue under rule 2 — its users were charged, and its items selected, under the
    old rule. Regression: without the ``release_rule`` parameter the old checkpoint restored silently."""
    import json

    snap, _ = _snapshot(_raw())
    tree = state_codec.decode(snap)
    params = json.loads(tree["parameters"])
    counts = next(p for qid, p in params["queries"] if qid == "counts")
    assert counts.pop("release_rule") == 3
    tree["parameters"] = canonical(params)
    with pytest.raises(ParametersChanged, match=r"query 'counts' release_rule: '\(unset\)' in the checkpoint, 3 now"):
        _engine(_raw()).restore(state_codec.encode(tree))


def test_a_checkpoint_of_release_rule_2_is_refused():
    """Release rule 3 (Honaker's estimator charged over every completed tree node) changed the cost of
    ``estimator = "optimal"`` with C > 1: a rule-2 checkpoint — users charged the prefix nodes only — must not
    continue under rule 3."""
    import json

    snap, _ = _snapshot(_raw())
    tree = state_codec.decode(snap)
    params = json.loads(tree["parameters"])
    counts = next(p for qid, p in params["queries"] if qid == "counts")
    counts["release_rule"] = 2
    tree["parameters"] = canonical(params)
    with pytest.raises(ParametersChanged, match=r"query 'counts' release_rule: 2 in the checkpoint, 3 now"):
        _engine(_raw()).restore(state_codec.encode(tree))
