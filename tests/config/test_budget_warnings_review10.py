"""Review 10, finding 9: a config whose default budget halts every user passed ``config check`` silently (no
``[budget]``: every notion's budget is 0; or a query whose one-window cost exceeds the budget), and the demo then
HALTed every user for good at their first event. ``config check`` now prints a warning per such query (exit status
0: the config is valid — a store that already holds a default keeps its own), ``run`` logs it at start, and
``parse_config`` logs it on ``streamdp.config``. The per-window cost comes from the query's own cost code
(``QueryKind.window_cost``: ``public_cost`` / the top-k reservation), never a formula of the loader's."""

from __future__ import annotations

import copy
import glob
import json
import logging
import os
import tomllib

import pytest

from streamdp.cli.main import CLIError, main
from streamdp.config.kinds import kinds
from streamdp.config.loader import budget_warnings, load_config, parse_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = sorted(glob.glob(os.path.join(ROOT, "examples", "*.toml"))) + [os.path.join(ROOT, "deploy",
                                                                                          "streamdp.toml")]
CC = {"id": "cc", "kind": "continual_counts", "sigma": 1.0, "delta_item": 1e-6, "max_items_per_window": 2}


def _cfg(budget: dict | None, *queries):
    raw = {"service": {"window_seconds": 100.0, "origin": 0.0, "horizon": 4}, "query": list(queries)}
    if budget is not None:
        raw["budget"] = budget
    return parse_config(raw, log_warnings=False)


@pytest.mark.parametrize("path", EXAMPLES)
def test_the_shipped_configs_have_no_warning(path):
    assert load_config(path, log_warnings=False).warnings == []


@pytest.mark.parametrize("path", EXAMPLES)
def test_without_a_budget_every_query_of_every_kind_is_warned_about(path):
    with open(path, "rb") as f:
        raw = tomllib.load(f)
    raw.pop("budget", None)
    cfg = parse_config(raw, log_warnings=False)
    assert len(cfg.warnings) == len(raw["query"])
    for i, (q, w) in enumerate(zip(raw["query"], cfg.warnings)):
        notion = kinds()[q["kind"]].notion
        main_c = "emd_alpha" if notion == "emd" else f"{notion}_rho"
        assert w.startswith(f"query[{i}] {q['id']!r} ({q['kind']}, notion {notion}): the default budget [budget] "
                            f"{main_c} is 0, so every user would be halted")


def test_a_notion_without_budget_is_warned_about_even_when_another_has_one():
    cfg = _cfg({"zcdp_rho": 10.0, "zcdp_delta": 1e-3}, CC,
               {"id": "emd", "kind": "emd_linear", "alpha": 1.0, "lipschitz": 2.0, "features": {"A": [0.0]}})
    assert len(cfg.warnings) == 1 and cfg.warnings[0].startswith("query[1] 'emd' (emd_linear, notion emd): the "
                                                                 "default budget [budget] emd_alpha is 0")


def test_a_window_cost_above_the_budget_is_warned_about_with_the_querys_own_cost():
    """The reviewer's case: ρ = 1.5 per item, Δ0 = 2, default budget ρ = 1."""
    cfg = _cfg({"zcdp_rho": 1.0, "zcdp_delta": 1e-3}, CC)
    (q,) = cfg.build_queries()
    worst = q.public_cost(None).zcdp_rho
    assert worst == pytest.approx(3.0)
    (w,) = cfg.warnings
    assert w.startswith(f"query[0] 'cc' (continual_counts, notion zcdp): one window can cost a user zcdp_rho "
                        f"{worst:.6g} (per user, this window: at most max_items_per_window first contributions), "
                        "more than the default budget zcdp_rho 1;")
    assert "halted" in w


def test_a_zero_delta_budget_is_warned_about():
    cfg = _cfg({"zcdp_rho": 10.0}, {"id": "t", "kind": "top_k", "epsilon": 1.0})
    (w,) = cfg.warnings
    assert "one window can cost a user zcdp_delta 1e-06" in w and "default budget zcdp_delta 0" in w


@pytest.mark.parametrize("budget,warned", [(3.0, False), (2.999999, True), (1e6, False)])
def test_the_bound_is_inclusive_as_admission_is(budget, warned):
    assert bool(_cfg({"zcdp_rho": budget, "zcdp_delta": 1e-3}, CC).warnings) == warned


def test_geo_and_emd_costs_are_compared_in_their_own_notion():
    cfg = _cfg({"cgp_rho": 1e-12, "emd_alpha": 0.1},
               {"id": "g", "kind": "geo_locations", "rho": 1.0, "region": [24.0, 50.0, -125.0, -66.0]},
               {"id": "e", "kind": "emd_linear", "alpha": 0.5, "lipschitz": 2.0, "features": {"A": [0.0]}})
    assert [w.split(":")[0] for w in cfg.warnings] == ["query[0] 'g' (geo_locations, notion cgp)",
                                                       "query[1] 'e' (emd_linear, notion emd)"]
    assert "one window can cost a user cgp_rho" in cfg.warnings[0]
    assert "one window can cost a user emd_alpha 0.5" in cfg.warnings[1]


def test_budget_warnings_is_a_function_of_budget_and_queries():
    cfg = _cfg({"zcdp_rho": 10.0, "zcdp_delta": 1e-3}, CC)
    from streamdp.accounting.cost import Cost

    assert budget_warnings(cfg.budget, cfg.build_queries()) == []
    assert len(budget_warnings(Cost(), cfg.build_queries())) == 1


def test_config_check_prints_the_warnings_and_exits_0(tmp_path, capsys):
    p = tmp_path / "nobudget.toml"
    p.write_text('[service]\nwindow_seconds = 86400.0\norigin = 0\n[[query]]\nid = "c"\nkind = "continual_counts"\nsigma = 3.0\n')
    assert main(["config", "check", str(p)]) == 0
    out = capsys.readouterr()
    assert out.out.strip() == f"{p}: OK — 1 query: c (continual_counts) — 1 warning (stderr)"
    assert out.err.startswith(f"streamdp: warning: {p}: query[0] 'c' (continual_counts, notion zcdp): the default "
                              "budget [budget] zcdp_rho is 0") and "Traceback" not in out.err
    assert main(["config", "check", "--json", str(p)]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["ok"] is True and len(d["warnings"]) == 1 and "zcdp_rho is 0" in d["warnings"][0]


def test_config_check_of_a_clean_config_prints_no_warning(capsys):
    assert main(["config", "check", os.path.join(ROOT, "examples", "service.toml")]) == 0
    out = capsys.readouterr()
    assert "warning" not in out.out + out.err
    assert main(["config", "check", "--json", os.path.join(ROOT, "examples", "service.toml")]) == 0
    assert json.loads(capsys.readouterr().out)["warnings"] == []


def test_the_loader_logs_the_warnings(caplog):
    raw = {"service": {"window_seconds": 60.0, "origin": 0.0}, "query": [dict(CC)]}
    with caplog.at_level(logging.WARNING, logger="streamdp.config"):
        parse_config(copy.deepcopy(raw))
    assert [r.getMessage() for r in caplog.records if r.name == "streamdp.config"] == [
        "config warning: " + parse_config(copy.deepcopy(raw), log_warnings=False).warnings[0]]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="streamdp.config"):
        parse_config(copy.deepcopy(raw), log_warnings=False)
    assert not [r for r in caplog.records if r.name == "streamdp.config"]


def test_run_logs_the_warnings_once_its_log_is_set_up(tmp_path, capsys, monkeypatch):
    import streamdp.cli.service as service

    p = tmp_path / "cc1.toml"
    p.write_text('[service]\nwindow_seconds = 100.0\norigin = 0\n[budget]\nzcdp_rho = 1.0\nzcdp_delta = 1e-3\n[[query]]\n'
                 'id = "cc"\nkind = "continual_counts"\nsigma = 1.0\nmax_items_per_window = 2\n')

    def stop(*a, **k):
        raise CLIError("stopped here", code=1)

    monkeypatch.setattr(service, "open_store_retrying", stop)
    try:
        assert main(["run", "--config", str(p), "--store", "redis://127.0.0.1:1/0", "--log-format", "json"]) == 1
    finally:
        for name in ("streamdp", "aiokafka"):
            logging.getLogger(name).handlers[:] = []
            logging.getLogger(name).propagate = True
    lines = [json.loads(x) for x in capsys.readouterr().err.splitlines() if x.startswith("{")]
    (w,) = [x for x in lines if x["logger"] == "streamdp.config"]
    assert w["level"] == "warning" and w["msg"].startswith("config warning: query[0] 'cc' (continual_counts, "
                                                           "notion zcdp): one window can cost a user zcdp_rho 7")
