"""The per-user sum of the queries' fixed-point costs never wraps (review of 2026-11-23, F2).

Three continual-count queries whose per-window cost each fits the ledger (ρ = 1/(2σ²) ≈ 6.15e6 < INT64_MAX/10¹²)
add up to 2⁶⁴ + 5384 units: the old int64 sum wrapped to 5384 units (ρ ≈ 5.4e-9) and admitted a user with a budget
of ρ = 1 to a window costing ρ ≈ 1.8e7, releasing near-exact counts of their data. The engine now saturates at
INT64_MAX (no finite budget admits it); the config loader refuses such a configuration at start."""

import warnings

import numpy as np
import orjson
import pytest

from streamdp.accounting.cost import INT64_MAX, Cost, budget_vector
from streamdp.config.loader import ConfigError, parse_config
from streamdp.engine.engine import _add_rows
from streamdp.engine.queries.continual_counts import ContinualCounts

from engine_helpers import engine, run

SIGMA = 0.0002851581367178794  # ρ_item = C²·⌈log2(L+1)⌉/(2σ²) with L = 1 → 6148914691236519000 units; ×3 = 2⁶⁴ + 5384


def _three():
    return [ContinualCounts(f"c{i}", sigma=SIGMA, horizon=1, delta_item=1e-9, max_items_per_window=1)
            for i in range(3)]


def test_wrapping_sum_of_three_query_costs_halts_instead_of_admitting():
    e, store = engine(_three(), Cost.zcdp(1.0, 1e-3), horizon=1)
    recs = run(e, [orjson.dumps({"user": "u", "ts": 1, "items": ["x"]}),
                   orjson.dumps({"user": "v", "ts": 25, "items": ["y"]})])
    u = store.get_user("u")
    assert u.halted, f"admitted: charged {u.spent[0]} units of ρ for a window costing 3 × 6.1e6 ρ"
    assert int(u.spent[0]) == 0
    assert recs  # the window was released (without u)


def test_add_rows_saturates_exactly_at_int64_max():
    users = np.array([3, 5], dtype=np.int64)
    total = np.zeros((2, 6), dtype=np.int64)
    big = np.zeros((2, 6), dtype=np.int64)
    big[:, 0] = 6148914691236519000
    big[1, 1] = 7
    for _ in range(3):
        _add_rows(total, users, users, big, subset=True)
    assert total[:, 0].tolist() == [INT64_MAX, INT64_MAX]
    assert total[1, 1] == 21  # the other components add exactly
    # below the range the sums are exact (and the fast paths are used)
    t2 = np.zeros((2, 6), dtype=np.int64)
    _add_rows(t2, users, users[1:], big[1:], subset=True)
    _add_rows(t2, users, users[1:], big[1:], subset=True)
    assert t2[1, 0] == INT64_MAX  # 2 × 6.1e18 > INT64_MAX: saturated, not wrapped to a negative
    t3 = np.zeros((2, 6), dtype=np.int64)
    _add_rows(t3, users, users, big // 4, subset=True)
    _add_rows(t3, users, users, big // 4, subset=True)
    assert t3[:, 0].tolist() == [2 * (6148914691236519000 // 4)] * 2  # exact below the range


def test_config_with_a_summed_worst_case_past_the_ledger_is_refused():
    q = lambda i: {"id": f"c{i}", "kind": "continual_counts", "sigma": SIGMA,  # noqa: E731
                   "max_items_per_window": 1, "delta_item": 1e-9}
    conf = {"service": {"window_seconds": 60.0, "origin": 0.0, "horizon": 1},
            "budget": {"zcdp_rho": 1.0, "zcdp_delta": 1e-3}, "query": [q(0), q(1), q(2)]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ConfigError, match="do not fit the fixed-point ledger in zcdp_rho"):
            parse_config(conf)
        conf["query"] = conf["query"][:1]
        parse_config(conf)  # one of them alone fits (a warning: it exceeds the budget)
