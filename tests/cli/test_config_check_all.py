"""``streamdp config check`` (newcomer review of 2026-12-06, privacy review of 2026-12-06):

* it takes several files, and reports EVERY problem of a file, each naming its field (it stopped at the first);
* a TOML date-time for ``origin`` is taken when it names an instant (``Z`` or an offset) and refused in words when
  it does not (it was refused with a Python repr, ``datetime.datetime(2013, 1, 1, 0, 0, tzinfo=…)``);
* test mode (``unsafe_test_seed``) is warned about (it printed ``OK``, exit 0, silently), and ``--strict`` fails on
  it and on a default budget that halts a user active in every window in the first window (``zcdp_delta = 0`` and
  ``zcdp_rho = 0.01`` printed ``OK … 2 warnings``, exit 0) or a budget component at 0 that a query charges;
* ``--explain`` prints per query and in all the worst-case charge per window (ρ, δ and the (ε, δ) it converts to)
  and how many windows a user active in every window lasts — numbers recomputed here from the papers' formulas.
"""

from __future__ import annotations

import glob
import json
import math
import os

import pytest

from streamdp.cli.main import main
from streamdp.config.kinds import ConfigError
from streamdp.config.loader import parse_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = sorted(glob.glob(os.path.join(ROOT, "examples", "*.toml")))

GOOD = """[service]
window_seconds = 86400.0
origin = {origin}
horizon = 16
{extra}
[budget]
zcdp_rho = {rho}
zcdp_delta = {delta}

[[query]]
id = "counts"
kind = "continual_counts"
sigma = 4.0
delta_item = 1e-6
max_items_per_window = 2
"""


def _file(tmp_path, name="c.toml", *, origin="1356998400", extra="", rho=10.0, delta=1e-4, body=None) -> str:
    p = tmp_path / name
    p.write_text(body if body is not None else GOOD.format(origin=origin, extra=extra, rho=rho, delta=delta))
    return str(p)


# ---------------------------------------------------------------------------------------------- all the errors
BAD = """[service]
window_seconds = 0
origin = 0
horizon = 0
unknown_thing = 1

[budget]
zcdp_rho = -1.0

[kafka]
partitions = 0

[[query]]
id = "a"
kind = "continual_counts"
sigma = -1.0
max_items_per_window = 0

[[query]]
id = "b"
kind = "top_k"
epsilon = 1.0
colour = "red"

[[query]]
id = "c"
kind = "no_such_kind"
"""

BAD_FIELDS = ["service.unknown_thing", "service.window_seconds", "service.horizon", "budget.zcdp_rho",
              "kafka.partitions", "query[0].sigma", "query[0].max_items_per_window", "query[1].colour",
              "query[2].kind"]


def test_every_problem_of_a_file_is_reported_each_naming_its_field(tmp_path, capsys):
    path = _file(tmp_path, "bad.toml", body=BAD)
    assert main(["config", "check", path]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == len(BAD_FIELDS), err
    for field in BAD_FIELDS:
        assert sum(line.startswith(f"streamdp: error: {path}: {field}:") for line in err) == 1, (field, err)
    assert not any("Traceback" in line for line in err)


def test_the_loader_raises_every_problem_at_once():
    import tomllib

    with pytest.raises(ConfigError) as e:
        parse_config(tomllib.loads(BAD))
    assert [m.split(":")[0] for m in e.value.errors] == BAD_FIELDS
    assert str(e.value).startswith("service.unknown_thing: unknown setting")  # one line, the first problem first


def test_several_files_are_checked_and_each_is_reported(tmp_path, capsys):
    good, bad = _file(tmp_path), _file(tmp_path, "bad.toml", body=BAD)
    assert main(["config", "check", good, bad, good]) == 1
    out, err = capsys.readouterr()
    assert out.count(f"{good}: OK — 1 query: counts (continual_counts)") == 2
    assert err.count(f"streamdp: error: {bad}: ") == len(BAD_FIELDS)
    assert main(["config", "check", good, good]) == 0


def test_json_for_several_files_and_for_one(tmp_path, capsys):
    good, bad = _file(tmp_path), _file(tmp_path, "bad.toml", body=BAD)
    assert main(["config", "check", "--json", good, bad]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False and [f["file"] for f in doc["files"]] == [good, bad]
    g, b = doc["files"]
    assert g["ok"] is True and g["errors"] == [] and g["error"] is None and g["queries"][0]["id"] == "counts"
    assert b["ok"] is False and len(b["errors"]) == len(BAD_FIELDS) and b["error"] == b["errors"][0]
    assert set(g) == set(b)  # one shape for a valid and an invalid file
    assert main(["config", "check", "--json", bad]) == 1
    one = json.loads(capsys.readouterr().out)
    assert one["file"] == bad and one["ok"] is False and len(one["errors"]) == len(BAD_FIELDS)


# ---------------------------------------------------------------------------------------------- TOML date-times
@pytest.mark.parametrize("text,unix", [
    ("2013-01-01T00:00:00Z", 1356998400.0),
    ("2013-01-01 00:00:00Z", 1356998400.0),
    ("2013-01-01T00:00:00-05:00", 1356998400.0 + 5 * 3600),
    ("2013-01-01T05:30:00+05:30", 1356998400.0),
    ("2013-01-01T00:00:00.25Z", 1356998400.25),
    ("1356998400", 1356998400.0),
])
def test_an_origin_with_an_offset_is_unix_seconds(tmp_path, capsys, text, unix):
    import tomllib

    path = _file(tmp_path, origin=text)
    assert main(["config", "check", path]) == 0
    with open(path, "rb") as f:
        cfg = parse_config(tomllib.load(f), log_warnings=False)
    assert cfg.service["origin"] == unix
    assert cfg.engine_config().origin == unix  # the windows start there; the release parameters hold the number


def test_a_datetime_origin_and_its_unix_seconds_are_the_same_release_parameters(tmp_path):
    import tomllib

    from streamdp.engine.release_parameters import canonical, release_parameters

    cfgs = []
    for origin in ("2013-01-01T00:00:00Z", "1356998400"):
        with open(_file(tmp_path, f"{origin[:4]}.toml", origin=origin), "rb") as f:
            cfg = parse_config(tomllib.load(f), log_warnings=False)
        cfgs.append(canonical(release_parameters(cfg.engine_config(), cfg.build_queries())))
    assert cfgs[0] == cfgs[1]


@pytest.mark.parametrize("text,what,example", [
    ("2013-01-01T00:00:00", "a local date-time (2013-01-01T00:00:00)", "2013-01-01T00:00:00Z (UTC)"),
    ("2013-01-01", "a local date (2013-01-01)", "2013-01-01T00:00:00Z (midnight UTC)"),
    ("07:32:00", "a local time (07:32:00)", "2013-01-01T00:00:00Z"),
])
def test_an_origin_without_an_offset_is_refused_in_words(tmp_path, capsys, text, what, example):
    assert main(["config", "check", _file(tmp_path, origin=text)]) == 1
    err = capsys.readouterr().err
    assert f"service.origin: {what} names no instant (no time zone)" in err and example in err
    assert "datetime." not in err and "tzinfo" not in err  # no Python repr


def test_an_origin_before_1970_is_refused_as_a_number_would_be(tmp_path, capsys):
    assert main(["config", "check", _file(tmp_path, origin="1969-12-31T00:00:00Z")]) == 1
    assert "service.origin: must be ≥ 0.0, got -86400.0" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- test mode, strict
def test_test_mode_is_warned_about_and_refused_under_strict(tmp_path, capsys):
    path = _file(tmp_path, extra="unsafe_test_seed = 7")
    assert main(["config", "check", path]) == 0
    out, err = capsys.readouterr()
    assert "OK" in out and "1 warning (stderr)" in out
    assert f"streamdp: warning: {path}: service.unsafe_test_seed = 7: TEST MODE" in err and "NOT" in err
    assert main(["config", "check", "--strict", path]) == 1
    out, err = capsys.readouterr()
    assert f"{path}: REFUSED (--strict)" in out and "TEST MODE" in err
    assert main(["config", "check", "--strict", "--json", path]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False and doc["test_mode"] is True and "TEST MODE" in doc["strict_findings"][0]


@pytest.mark.parametrize("budget,component", [
    ({"rho": 10.0, "delta": 0.0}, "zcdp_delta"),   # the reviewer's zcdp_delta = 0
    ({"rho": 0.01, "delta": 1e-4}, "zcdp_rho"),    # the reviewer's zcdp_rho = 0.01
])
def test_strict_refuses_a_budget_that_halts_everyone_in_the_first_window(tmp_path, capsys, budget, component):
    path = _file(tmp_path, **budget)
    assert main(["config", "check", path]) == 0  # valid: a warning only
    assert component in capsys.readouterr().err
    assert main(["config", "check", "--strict", path]) == 1
    out, err = capsys.readouterr()
    assert "REFUSED (--strict)" in out and component in err and "halted" in err


def test_strict_refuses_a_sequence_query_that_halts_in_window_one(tmp_path, capsys):
    """A range query registered at window 1 whose first allocation B/m exceeds the cgp budget: no budget warning
    (the kind has no per-window cost from its parameters alone), but the schedule halts the user in window 1."""
    body = """[service]
window_seconds = 60.0
origin = 0
[budget]
cgp_rho = 1e-7
[[query]]
id = "r"
kind = "range_counts"
budget_rho = 2.0
units = "km"
queries = [{ window = 1, rect = [0.0, 0.0, 1.0, 1.0] }, { window = 3, rect = [0.0, 0.0, 1.0, 1.0] }]
"""
    path = _file(tmp_path, body=body)
    assert main(["config", "check", path]) == 0
    capsys.readouterr()
    assert main(["config", "check", "--strict", "--explain", path]) == 1
    out, err = capsys.readouterr()
    assert "halted in window 1" in err and "cgp_rho" in err
    # B = 2 per km² = 2e-6 per m², m = 2: B/m = 1e-6 per m² > 1e-7 at window 1
    assert "r (range_counts, cgp), windows 1, 3: cgp ρ 1e-06 per m²" in out


@pytest.mark.parametrize("path", EXAMPLES)
def test_the_shipped_examples_pass_strict(path, capsys):
    assert main(["config", "check", "--strict", path]) == 0


# ---------------------------------------------------------------------------------------------- explain
def _cks_epsilon(rho: float, delta: float) -> float:
    """Canonne–Kamath–Steinke 2020, Cor. 13, minimised over the Rényi order on a fine grid (independent of the
    code's root finding): ε = inf_{α>1} αρ + (log(1/δ) + (α−1)·log(1−1/α) − log α)/(α−1)."""
    best = math.inf
    for i in range(1, 200001):
        a = 1.0 + i * 1e-3
        best = min(best, a * rho + (math.log(1 / delta) + (a - 1) * math.log(1 - 1 / a) - math.log(a)) / (a - 1))
    return best


def test_explain_continual_counts_from_the_formula(tmp_path, capsys):
    """σ = 4, L = 16, δ_item = 1e-6, Δ0 = 2: levels = ⌈log2 17⌉ = 5, ρ_item = 5/(2·16) = 0.15625, a window charges
    Δ0·ρ_item = 0.3125 and Δ0·δ_item = 2e-6; with ρ = 1 a user lasts ⌊1/0.3125⌋ = 3 windows."""
    path = _file(tmp_path, rho=1.0)
    assert main(["config", "check", "--explain", "--json", path]) == 0
    e = json.loads(capsys.readouterr().out)["explain"]
    (q,) = e["queries"]
    levels = math.ceil(math.log2(16 + 1))
    rho = 2 * levels / (2 * 4.0**2)
    assert q["when"] == "every window" and q["per_window"] == {"zcdp": {"rho": rho, "delta": 2e-6}}
    assert q["converted"]["dp"]["epsilon"] == pytest.approx(_cks_epsilon(rho, 1e-6), rel=1e-5)
    assert q["converted"]["dp"]["delta"] == pytest.approx(2e-6 + 1e-6)
    assert (e["lasts_windows"], e["halted_in_window"], e["limited_by"]) == (math.floor(1.0 / rho), 4, "zcdp_rho")
    assert main(["config", "check", "--explain", path]) == 0
    out = capsys.readouterr().out
    assert "counts (continual_counts, zcdp), every window: zcdp ρ 0.3125, δ 2e-06 → (ε " in out
    assert "a user active in every window lasts 3 windows: halted (for good) in window 4 (zcdp_rho runs out)" in out


TOPK = """[service]
window_seconds = 60.0
origin = 0
[budget]
zcdp_rho = {rho}
zcdp_delta = 1e-5
[[query]]
id = "top"
kind = "top_k"
epsilon = 1.0
delta = 1e-6
k = 3
k_star = 10
"""


@pytest.mark.parametrize("rho,halted,by", [(1.0, 3, "zcdp_rho"), (100.0, 11, "zcdp_delta")])
def test_explain_top_k_per_component(tmp_path, capsys, rho, halted, by):
    """⊥ does not count towards k*, so [⊥] windows never stop the query: ρ up to min(N·k, k* + N − 1) items' ε²/8
    through window N — k·ε²/8 = 0.375 in windows 1–4 (2 items and ⊥ each), 0.25 in window 5 (1 item and ⊥), then
    0.125 ([⊥]) for ever; δ = 1e-6 in every window. ρ = 1 runs out in window 3 (0.375·3 > 1); with ρ = 100, δ runs
    out in window 11 (11·1e-6 > 1e-5) — it used to say the query stops first (δ for k* = 10 windows only)."""
    path = _file(tmp_path, body=TOPK.format(rho=rho))
    assert main(["config", "check", "--explain", "--json", path]) == 0
    e = json.loads(capsys.readouterr().out)["explain"]
    (q,) = e["queries"]
    assert q["per_window"] == {"zcdp": {"rho": 0.375, "delta": 1e-6}}
    assert q["when"] == "every window: 3 items' worth in windows 1–4, then less (ρ); every window (δ)"
    assert (e["halted_in_window"], e["limited_by"]) == (halted, by)
    assert e["lasts_windows"] == (None if halted is None else halted - 1)


def test_explain_sums_the_queries_and_shows_the_gp_conversion(tmp_path, capsys):
    """Two queries in one window add (one admission per window charges the sum)."""
    path = os.path.join(ROOT, "examples", "geo.toml")
    assert main(["config", "check", "--explain", "--json", path]) == 0
    e = json.loads(capsys.readouterr().out)["explain"]
    per = [q["per_window"]["cgp"]["rho"] for q in e["queries"]]
    assert e["all"]["per_window_max"]["cgp"]["rho"] == pytest.approx(sum(per), rel=1e-12)
    assert all(q["converted"]["gp"]["within_km"] == 1.0 for q in e["queries"])
    assert e["halted_in_window"] == math.floor(e["budget"]["cgp"]["rho"] / e["all"]["per_window_max"]["cgp"]["rho"]
                                               * (1 + 1e-12)) + 1
