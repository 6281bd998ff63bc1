"""Config review of 2026-11-23 (a new user's own TOML): values that passed `config check` and then crashed at the
first window close after users were charged, a budget warning that looked at one query at a time, and a `store`
that `config check` accepted but `streamdp run` refused."""

import pytest

from streamdp.cli.main import main
from streamdp.config.kinds import ConfigError
from streamdp.config.loader import parse_config
from streamdp.mechanisms.emd.freq_est import MIN_SEPARATION, ClusteredKRR

SERVICE = {"window_seconds": 3600.0, "horizon": 32, "origin": 1_700_000_000.0}


def _raw(queries, budget=None, **top):
    return {"service": dict(SERVICE), "budget": budget or {"zcdp_rho": 4.0, "zcdp_delta": 1e-4, "emd_alpha": 10.0},
            "query": queries, **top}


# ---- F1: a per-window worst case past the fixed-point ledger is refused at start, naming the query
def test_a_window_cost_past_the_ledger_is_a_config_error_not_a_traceback(tmp_path, capsys):
    q = {"id": "q", "kind": "continual_counts", "sigma": 2.0, "max_items_per_window": 20_000_000}
    with pytest.raises(ConfigError, match=r"query\[0\] 'q': the worst-case cost of one window .* does not fit"):
        parse_config(_raw([q]))
    p = tmp_path / "c.toml"
    p.write_text('[service]\nwindow_seconds = 3600.0\norigin = 0\n[[query]]\nid = "q"\nkind = "continual_counts"\n'
                 'sigma = 2.0\nmax_items_per_window = 20000000\n')
    assert main(["config", "check", str(p)]) == 1
    err = capsys.readouterr().err
    assert "max_items_per_window" in err and "Traceback" not in err
    q["max_items_per_window"] = 1000  # a large but representable worst case is only warned about
    assert parse_config(_raw([q])).warnings


# ---- F4: emd_frequency with an alpha0 whose k-RR inverse is not resolvable in floats
@pytest.mark.parametrize("alpha0", [1e-17, 1e-12, 1e-300])
def test_a_tiny_alpha0_is_refused_naming_the_field(alpha0):
    q = {"id": "f", "kind": "emd_frequency", "alpha0": alpha0, "gamma": 0.5,
         "clusters": {"a": ["x", "y"], "b": ["z", "w"]}}
    with pytest.raises(ConfigError, match=r"query\[0\]\.alpha0: .* too small"):
        parse_config(_raw([q]))


def test_the_separation_bound_is_the_boundary():
    ClusteredKRR(2, 2, 1.0, 2 * MIN_SEPARATION)  # 1 − e^(−2e-9) ≈ 2e-9 ≥ 1e-9: accepted
    with pytest.raises(ValueError, match="alpha0"):
        ClusteredKRR(2, 2, 1.0, 0.5 * MIN_SEPARATION)


# ---- F6: queries that each fit the default budget but not together
CC = {"id": "counts", "kind": "continual_counts", "sigma": 1.0, "max_items_per_window": 4}  # ≤ 4·6/2 = 12 / window
WH = {"id": "hist", "kind": "window_histogram", "epsilon": 2.0, "max_items_per_window": 4}  # ≤ 4·2²/2 = 8 / window


def test_queries_that_together_exceed_the_budget_are_warned_about():
    w = parse_config(_raw([dict(CC), dict(WH)], budget={"zcdp_rho": 19.0, "zcdp_delta": 1e-3})).warnings
    assert len(w) == 1 and "together" in w[0] and "'counts'" in w[0] and "'hist'" in w[0] and "zcdp_rho 20" in w[0]
    assert not parse_config(_raw([dict(CC), dict(WH)], budget={"zcdp_rho": 20.0, "zcdp_delta": 1e-3})).warnings
    # one query over the budget on its own: its own warning, not a second one for the sum
    w = parse_config(_raw([dict(CC), dict(WH)], budget={"zcdp_rho": 7.0, "zcdp_delta": 1e-3})).warnings
    assert len(w) == 2 and not any("together" in x for x in w)


# ---- F9: the store `streamdp run` would refuse
@pytest.mark.parametrize("store", ["/var/lib/streamdp/budgets.json", "foo://x", "redis:/x"])
def test_a_store_that_run_refuses_is_refused_by_config_check(store):
    with pytest.raises(ConfigError, match=r"^store: must be a Redis URL"):
        parse_config(_raw([dict(CC)], store=store))


@pytest.mark.parametrize("store", ["redis://localhost:6379/0", "rediss://h:6380/1", "unix:///run/redis.sock"])
def test_redis_stores_are_accepted(store):
    assert parse_config(_raw([dict(CC)], store=store)).store == store


# ---- F7: a sigma too small for the ledger names sigma (was "float division by zero" / "zcdp_rho must be finite")
@pytest.mark.parametrize("sigma", [1e-300, 1e-160, 1e-7])
def test_a_tiny_sigma_names_the_field(sigma):
    q = {"id": "c", "kind": "continual_counts", "sigma": sigma}
    with pytest.raises(ConfigError, match=r"query\[0\]: .*sigma: .* is too small: the per-item cost"):
        parse_config(_raw([q]))
    q["sigma"] = 0.01  # ρ = 7/(2·10⁻⁴) = 35,000 per item: representable, accepted (a budget warning follows)
    assert parse_config(_raw([q])).build_queries()


# ---- F7: geo_locations with mechanism 'gp' names epsilon (the key the user set), not rho
def test_a_gp_epsilon_past_the_ledger_names_epsilon():
    q = {"id": "g", "kind": "geo_locations", "mechanism": "gp", "epsilon": 1e7, "units": "metres", "ref_lat": 37.0,
         "region": [24.0, 50.0, -125.0, -66.0]}
    with pytest.raises(ConfigError, match=r"^query\[0\]\.epsilon: 10000000\.0 \(charged as .* too large"):
        parse_config(_raw([q], budget={"cgp_rho": 1.0}), log_warnings=False)
    q["epsilon"] = 1e-3
    assert parse_config(_raw([q], budget={"cgp_rho": 1.0}), log_warnings=False).build_queries()
