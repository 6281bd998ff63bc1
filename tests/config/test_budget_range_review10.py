"""Review 10, finding 7: a finite budget at or past INT64_MAX/scale (≈ 9.22e6 for ρ and α) silently became the
UNLIMITED sentinel (``budget_to_fixed`` maps everything past the range to INT64_MAX): ``[budget] zcdp_rho = 1e30``
passed ``config check`` and ``streamdp budget set-default --rho 1e7`` printed ``default zcdp budget inf``. Both
now refuse it with the maximum; ``inf`` keeps meaning unlimited in the CLI."""

from __future__ import annotations

import json

import pytest

from streamdp.accounting.cost import (DELTA_SCALE, INT64_MAX, LOSS_SCALE, budget_to_fixed, check_budget_range,
                                      max_budget_text)
from streamdp.cli.main import main
from streamdp.config.kinds import ConfigError
from streamdp.config.loader import parse_config

MAX = "9223372.036854775807"
Q = [{"id": "q", "kind": "continual_counts", "sigma": 3.0}]


def test_the_maximum_is_int64_max_at_the_scale():
    assert max_budget_text(LOSS_SCALE) == MAX and max_budget_text(DELTA_SCALE) == "9.223372036854775807"
    assert max_budget_text(1) == str(INT64_MAX)


@pytest.mark.parametrize("value", [1e7, 9223372.036854776, 1e30, 1.7e308])
def test_check_budget_range_refuses_what_would_become_unlimited(value):
    assert budget_to_fixed(value, LOSS_SCALE) == INT64_MAX  # what it would silently have become
    with pytest.raises(ValueError, match=rf"a finite budget must be < {MAX} \(the fixed-point range"):
        check_budget_range(value, LOSS_SCALE)


@pytest.mark.parametrize("value", [0.0, 1.0, 9e6, 9223372.0, 9223372.036854774])
def test_check_budget_range_keeps_every_budget_the_grid_holds(value):
    assert check_budget_range(value, LOSS_SCALE) == value
    assert budget_to_fixed(value, LOSS_SCALE) < INT64_MAX  # finite, not the sentinel


def test_inf_is_unlimited():
    assert check_budget_range(float("inf"), LOSS_SCALE) == float("inf")
    with pytest.raises(ValueError):
        check_budget_range(float("nan"), LOSS_SCALE)
    with pytest.raises(ValueError):
        check_budget_range(-1.0, LOSS_SCALE)


@pytest.mark.parametrize("key,value", [("zcdp_rho", 1e30), ("zcdp_rho", 1e7), ("cgp_rho", 9223372.036854776),
                                       ("emd_alpha", 10**7)])
def test_a_config_budget_past_the_range_names_the_field_and_the_maximum(key, value):
    with pytest.raises(ConfigError, match=rf"^budget\.{key}: a finite budget must be < {MAX}.*"
                                          r"set-default --rho inf"):
        parse_config({"service": {"window_seconds": 60.0, "origin": 0.0}, "budget": {key: value}, "query": Q})


def test_a_config_budget_below_the_range_is_kept():
    cfg = parse_config({"service": {"window_seconds": 60.0, "origin": 0.0}, "budget": {"zcdp_rho": 9e6, "zcdp_delta": 0.5},
                        "query": Q})
    assert cfg.budget.zcdp_rho == 9e6 and cfg.budget.zcdp_delta == 0.5


def test_config_check_refuses_the_reviewers_file(tmp_path, capsys):
    p = tmp_path / "bigbudget.toml"
    p.write_text('[service]\nwindow_seconds = 60.0\norigin = 0\n[budget]\nzcdp_rho = 1e30\n[[query]]\nid = "a"\nkind = "top_k"\n'
                 "epsilon = 1.0\n")
    assert main(["config", "check", str(p)]) == 1
    err = capsys.readouterr().err
    assert f"budget.zcdp_rho: a finite budget must be < {MAX}" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("argv", [["set-default"], ["grant", "u1"], ["grant", "u1", "--notion", "emd"],
                                  ["set-default", "--notion", "cgp"]])
@pytest.mark.parametrize("rho", ["1e7", "9223372.036854776", "1e300"])
def test_the_budget_cli_refuses_a_finite_rho_past_the_range(tmp_path, capsys, argv, rho):
    store = tmp_path / "st.json"
    with pytest.raises(SystemExit) as e:
        main(["budget", *argv, "--rho", rho, "--yes", "--store", str(store)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --rho: a finite budget must be < {MAX}" in err and "use inf for an unlimited budget" in err
    assert len(err.strip().splitlines()) == 1 and not store.exists()


def test_the_budget_cli_keeps_inf_and_the_largest_finite_budgets(tmp_path, capsys):
    store = str(tmp_path / "st.json")
    assert main(["budget", "set-default", "--rho", "inf", "--delta", "1e-6", "--create", "--yes", "--store", store, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["zcdp"]["budget"] is None  # unlimited
    assert main(["budget", "grant", "u1", "--rho", "9223372", "--yes", "--store", store, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["zcdp"]["budget"] == 9223372.0  # finite, kept
