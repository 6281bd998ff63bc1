"""Operator review 12 of ``streamdp budget`` (/tmp/s12/operator FINDINGS F2, F4, F5, F9.4, F9.7), against an embedded
store file AND a real redis-server:

* F2 — ``--rho 1e400`` (``1e309``, ``--delta 1e400``) was parsed by ``float()`` as ``inf`` and granted an UNLIMITED
  budget; only the text ``inf``/``infinity`` means unlimited now, an overflowing finite number is refused with the
  maximum, and Python-only spellings (``1_000``, ``nan``) are refused;
* F4 — ``set-default --rho R`` without ``--delta`` on a store whose default δ is 0 made the default ρ > 0, δ = 0
  (every user of a zCDP query halted at their first window, no warning): refused; ``run`` and ``demo`` warn at start
  when the store's own default (the one applied) would halt users;
* F5 — a write to a missing ``--store FILE`` (a typo) created a new empty store and "succeeded"; a bare
  ``localhost:6379`` was a file name: refused (``--create`` makes a new file), and the confirmation names the store;
* F9.4 — ``--rho 1e-13`` became a budget of 0 ("no budget"): refused, naming the smallest value;
* F9.7 — ``ledger --since -1d`` was argparse's "expected one argument".
"""

from __future__ import annotations

import json
import logging
import os
import time

import pytest

from streamdp.accounting.cost import DELTA_SCALE, INT64_MAX, LOSS_SCALE, Cost, budget_vector
from streamdp.cli.main import CLIError, main
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.filter.redis_store import RedisBudgetStore

DEFAULT = budget_vector(Cost(zcdp_rho=1.0, zcdp_delta=1e-6))
MAX_RHO = "9223372.036854775807"


def run(capsys, *argv) -> tuple[int, str, str]:
    try:
        rc = main(["budget", *argv])
    except SystemExit as e:  # argparse usage errors
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def _reopen(url):
    return RedisBudgetStore.from_url(url) if url.startswith("redis://") else MemoryBudgetStore.load(url)


def _state(url) -> tuple[list, list, list]:
    st = _reopen(url)
    try:
        users = sorted((u.user, u.budget.tolist()) for u in st.iter_users())
        return st.default_budget().tolist(), users, st.ledger()
    finally:
        st.close()


@pytest.fixture(params=["file", "redis"])
def store_url(request, tmp_path):
    """A store with a default of ρ 1, δ 1e-6 (zcdp) and one user."""
    if request.param == "file":
        path = str(tmp_path / "budgets.json")
        st = MemoryBudgetStore(DEFAULT, path=path)
        st.grant("a", DEFAULT, actor="setup")
        st.save()
        return path
    url = request.getfixturevalue("redis_url")
    st = RedisBudgetStore.from_url(url, default_budget=DEFAULT)
    st.grant("a", DEFAULT, actor="setup")
    st.close()
    return url


@pytest.fixture(params=["file", "redis"])
def empty_store_url(request, tmp_path):
    """A store with NO default yet: a new file (made with --create) or a Redis database nobody wrote."""
    if request.param == "file":
        return str(tmp_path / "new.json")
    return request.getfixturevalue("redis_url")


def _create(url) -> list[str]:
    return [] if url.startswith("redis://") else ["--create"]


# ---- F2: an overflowing finite number is not inf ------------------------------------------------------------------


@pytest.mark.parametrize("argv", [
    ["grant", "alice", "--rho", "1e400"],
    ["grant", "alice", "--rho", "1e309"],
    ["grant", "alice", "--rho", "-1e400"],
    ["grant", "alice", "--rho", "5", "--delta", "1e400"],
    ["set-default", "--rho", "1e309", "--delta", "1e-6"],
    ["set-default", "--rho", "2", "--delta", "1e309"],
    ["set-default", "--rho", "1e400", "--notion", "emd", "--delta", "0"],
])
def test_an_overflowing_number_is_refused_not_unlimited(capsys, store_url, argv):
    before = _state(store_url)
    rc, out, err = run(capsys, *argv, "--yes", "--store", store_url)
    assert rc == 2 and out == "" and "Traceback" not in err and err.count("\n") == 1
    if "--delta" in argv and argv[argv.index("--delta") + 1].endswith(("e400", "e309")):
        assert "argument --delta" in err and "< 1" in err
    elif argv[argv.index("--rho") + 1].startswith("-"):
        assert "argument --rho" in err
    else:
        assert "argument --rho" in err and MAX_RHO in err and "use inf for an unlimited budget" in err
    assert _state(store_url) == before  # nothing written, no audit entry


@pytest.mark.parametrize("text", ["1_000", "1_0.5", "nan", "NaN", "+nan", "0x10", "1e4_00", "infinit", "-inf"])
def test_python_only_float_spellings_are_refused(capsys, store_url, text):
    before = _state(store_url)
    rc, _, err = run(capsys, "grant", "alice", f"--rho={text}", "--yes", "--store", store_url)
    assert rc == 2 and "argument --rho" in err and repr(text) in err
    rc, _, err = run(capsys, "set-default", "--rho", "1", f"--delta={text}", "--yes", "--store", store_url)
    assert rc == 2 and "argument --delta" in err
    assert _state(store_url) == before


@pytest.mark.parametrize("text", ["inf", "INF", "+inf", "Infinity", "+INFINITY", "infinity"])
def test_inf_and_infinity_are_unlimited(capsys, store_url, text):
    rc, _, err = run(capsys, "grant", "bob", "--rho", text, "--delta", text, "--yes", "--store", store_url)
    assert rc == 0, err
    st = _reopen(store_url)
    assert st.get_user("bob").budget[:2].tolist() == [INT64_MAX, INT64_MAX]
    st.close()


def test_decimal_notations_still_work(capsys, store_url):
    for rho, fixed in (("2", 2 * LOSS_SCALE), ("2.5", 5 * LOSS_SCALE // 2), (".5", LOSS_SCALE // 2),
                       ("5.", 5 * LOSS_SCALE), ("2.5E+1", 25 * LOSS_SCALE), (" 3 ", 3 * LOSS_SCALE),
                       ("9223372.0368547", 9223372036854700000), ("0", 0), ("-0", 0)):
        rc, _, err = run(capsys, "grant", "c", "--rho", rho, "--yes", "--store", store_url)
        assert rc == 0, (rho, err)
        st = _reopen(store_url)
        assert st.get_user("c").budget[0] == fixed, rho
        st.close()
    rc, _, err = run(capsys, "grant", "c", "--rho", "1e7", "--yes", "--store", store_url)  # past the range
    assert rc == 2 and MAX_RHO in err and "'1e7'" in err


def test_show_options_refuse_python_only_spellings(capsys, store_url):
    rc, _, err = run(capsys, "show", "a", "--gp-within-km", "1_0", "--store", store_url)
    assert rc == 2 and "--gp-within-km" in err
    rc, _, err = run(capsys, "show", "a", "--gp-within-km", "1e400", "--store", store_url)
    assert rc == 2 and "--gp-within-km" in err


# ---- F9.4: a non-zero value that rounds to 0 ----------------------------------------------------------------------


def test_a_value_that_rounds_to_zero_is_refused(capsys, store_url):
    before = _state(store_url)
    rc, out, err = run(capsys, "grant", "x", "--rho", "1e-13", "--yes", "--store", store_url)
    assert rc == 2 and out == "" and "rounds down to 0" in err and "1e-12" in err
    rc, _, err = run(capsys, "grant", "x", "--rho", "1", "--delta", "1e-19", "--yes", "--store", store_url)
    assert rc == 2 and "argument --delta" in err and "1e-18" in err
    rc, _, err = run(capsys, "set-default", "--rho", "9e-13", "--delta", "1e-6", "--yes", "--store", store_url)
    assert rc == 2 and "1e-12" in err
    assert _state(store_url) == before
    # the smallest values are taken, and 0 stays "no budget"
    rc, _, err = run(capsys, "grant", "x", "--rho", "1e-12", "--delta", "1e-18", "--yes", "--store", store_url)
    assert rc == 0, err
    st = _reopen(store_url)
    assert st.get_user("x").budget[:2].tolist() == [1, 1]
    st.close()
    rc, _, err = run(capsys, "grant", "x", "--rho", "0", "--delta", "0", "--yes", "--store", store_url)
    assert rc == 0, err


# ---- F4: set-default without --delta must not leave δ at 0 --------------------------------------------------------


def test_set_default_without_delta_on_a_store_with_no_default_is_refused(capsys, empty_store_url):
    url = empty_store_url
    rc, out, err = run(capsys, "set-default", "--rho", "10", "--yes", *_create(url), "--store", url)
    assert rc == 2 and out == "" and "--delta" in err and "halted" in err and "Traceback" not in err
    if url.startswith("redis://"):
        st = RedisBudgetStore.from_url(url)
        assert st.default_budget().tolist() == [0] * 6 and st.ledger() == []
        st.close()
    else:
        assert not os.path.exists(url)
    # unlimited ρ with δ 0 halts the same users
    rc, _, err = run(capsys, "set-default", "--rho", "inf", "--yes", *_create(url), "--store", url)
    assert rc == 2 and "--delta" in err
    # with --delta it goes through (and an explicit --delta 0 is the operator's choice)
    rc, out, err = run(capsys, "set-default", "--rho", "10", "--delta", "1e-4", "--yes", *_create(url),
                       "--store", url)
    assert rc == 0, err
    assert _reopen(url).default_budget()[:2].tolist() == [10 * LOSS_SCALE, DELTA_SCALE // 10**4]
    # now δ is 1e-4: --rho alone keeps it
    rc, _, err = run(capsys, "set-default", "--rho", "4", "--yes", "--store", url)
    assert rc == 0, err
    assert _reopen(url).default_budget()[:2].tolist() == [4 * LOSS_SCALE, DELTA_SCALE // 10**4]
    # a notion whose δ is still 0 and whose queries may charge δ (emd) needs --delta (0 where its queries charge none);
    # cgp does not (no cgp kind charges δ: closing review of the day)
    rc, _, err = run(capsys, "set-default", "--rho", "3", "--notion", "emd", "--yes", "--store", url)
    assert rc == 2 and "--delta 0" in err
    rc, _, err = run(capsys, "set-default", "--rho", "3", "--notion", "emd", "--delta", "0", "--yes", "--store", url)
    assert rc == 0, err
    rc, _, err = run(capsys, "set-default", "--rho", "3", "--notion", "cgp", "--yes", "--store", url)
    assert rc == 0, err
    # ρ 0 (no budget in the notion) needs no δ
    rc, _, err = run(capsys, "set-default", "--rho", "0", "--notion", "emd", "--yes", "--store", url)
    assert rc == 0, err


def test_set_default_rho_alone_keeps_a_nonzero_delta(capsys, store_url):
    rc, _, err = run(capsys, "set-default", "--rho", "2", "--yes", "--store", store_url)
    assert rc == 0, err
    assert _reopen(store_url).default_budget()[:2].tolist() == [2 * LOSS_SCALE, DELTA_SCALE // 10**6]


CC_TOML = """
{store}
[service]
window_seconds = 86400.0
origin = 1356998400.0
[budget]
zcdp_rho = 10.0
zcdp_delta = 1e-4
[[query]]
id = "cc"
kind = "continual_counts"
sigma = 3.0
delta_item = 1e-6
"""


def _run_until_the_worker(monkeypatch, capsys, config, url) -> list[dict]:
    """``streamdp run`` against the real Redis up to the point where the Kafka worker would start (the store is
    opened, its default read); the JSON log lines."""
    import streamdp.cli.service as service

    def stop(worker):
        raise CLIError("stopped before Kafka", code=1)

    monkeypatch.setattr(service, "_run_refusing_bad_topics", stop)
    try:
        assert main(["run", "--config", str(config), "--store", url, "--log-format", "json", "--metrics-port", "0",
                     "--standalone"]) == 1
    finally:
        for name in ("streamdp", "aiokafka"):
            logging.getLogger(name).handlers[:] = []
            logging.getLogger(name).propagate = True
    return [json.loads(x) for x in capsys.readouterr().err.splitlines() if x.startswith("{")]


def test_run_warns_when_the_stores_own_default_would_halt_users(redis_url, tmp_path, capsys, monkeypatch):
    cfg = tmp_path / "c.toml"
    cfg.write_text(CC_TOML.format(store=""))
    # the pre-provisioning of the review, with δ 0 now written explicitly
    rc, _, err = run(capsys, "set-default", "--rho", "10", "--delta", "0", "--yes", "--store", redis_url)
    assert rc == 0, err
    lines = _run_until_the_worker(monkeypatch, capsys, cfg, redis_url)
    warnings = [x["msg"] for x in lines if x["logger"] == "streamdp.config"]
    assert len(warnings) == 1, lines
    assert warnings[0].startswith("config warning: the budget store keeps its own default budget (zcdp_rho=10)")
    assert "query[0] 'cc' (continual_counts, notion zcdp)" in warnings[0] and "zcdp_delta 0" in warnings[0]
    assert "halted" in warnings[0]


def test_run_gives_no_store_warning_when_the_store_holds_the_configs_default(redis_url, tmp_path, capsys,
                                                                             monkeypatch):
    cfg = tmp_path / "c.toml"
    cfg.write_text(CC_TOML.format(store=""))
    lines = _run_until_the_worker(monkeypatch, capsys, cfg, redis_url)  # initialises the store's default
    assert not [x for x in lines if x["logger"] == "streamdp.config"]
    st = RedisBudgetStore.from_url(redis_url)
    assert st.default_budget().tolist() == budget_vector(Cost(zcdp_rho=10.0, zcdp_delta=1e-4)).tolist()
    st.close()
    # a store default that differs but halts nobody: no warning either
    rc, _, err = run(capsys, "set-default", "--rho", "20", "--yes", "--store", redis_url)
    assert rc == 0, err
    lines = _run_until_the_worker(monkeypatch, capsys, cfg, redis_url)
    assert not [x for x in lines if x["logger"] == "streamdp.config"]


@pytest.mark.parametrize("kind", ["file", "redis"])
def test_demo_warns_when_the_stores_own_default_would_halt_users(kind, tmp_path, capsys, request):
    url = str(tmp_path / "d.json") if kind == "file" else request.getfixturevalue("redis_url")
    rc, _, err = run(capsys, "set-default", "--rho", "10", "--delta", "0", "--yes", *_create(url), "--store", url)
    assert rc == 0, err
    assert main(["demo", "--store", url, "--out", str(tmp_path / "o"), "--limit", "1000", "--quiet",
                 "--no-plot"]) == 0
    err = capsys.readouterr().err
    assert "note: the store keeps its default budget (zcdp_rho=10)" in err
    warned = [x for x in err.splitlines() if x.startswith("warning: the budget store keeps its own default budget")]
    assert warned and all("zcdp_delta 0" in x and "halted" in x for x in warned)


# ---- F5: a missing store file, a bare host:port -------------------------------------------------------------------


@pytest.mark.parametrize("argv", [["grant", "u1", "--rho", "2"], ["set-default", "--rho", "2", "--delta", "1e-5"]])
def test_a_write_to_a_missing_file_is_refused_without_create(capsys, tmp_path, argv):
    path = tmp_path / "budgts.json"  # a typo of budgets.json
    rc, out, err = run(capsys, *argv, "--yes", "--store", str(path))
    assert rc == 1 and out == "" and "does not exist" in err and "--create" in err and "nothing was changed" in err
    assert list(tmp_path.iterdir()) == []  # no store file, no lock file
    rc, out, err = run(capsys, *argv, "--yes", "--create", "--store", str(path))
    assert rc == 0, err
    assert f"store {path}" in out  # the confirmation names the store it wrote
    assert MemoryBudgetStore.load(str(path)).ledger()[0]["action"] == argv[0]
    # --create on an existing file just uses it
    rc, _, err = run(capsys, *argv, "--yes", "--create", "--store", str(path))
    assert rc == 0, err
    assert len(MemoryBudgetStore.load(str(path)).ledger()) == 2


def test_a_missing_directory_is_refused_too(capsys, tmp_path):
    rc, _, err = run(capsys, "grant", "u1", "--rho", "2", "--yes", "--store", str(tmp_path / "nodir" / "s.json"))
    assert rc == 1 and "does not exist" in err
    assert not (tmp_path / "nodir").exists()


@pytest.mark.parametrize("store", ["localhost:6379", "127.0.0.1:6379", "redis.example.com:6379/0", "[::1]:6379",
                                   "localhost:6379/"])
@pytest.mark.parametrize("argv", [["grant", "u1", "--rho", "2", "--yes"], ["grant", "u1", "--rho", "2", "--yes",
                                                                          "--create"],
                                  ["set-default", "--rho", "2", "--delta", "1e-5", "--yes"], ["show", "u1"],
                                  ["stats"]])
def test_a_host_port_store_is_refused_with_a_hint(capsys, tmp_path, monkeypatch, store, argv):
    monkeypatch.chdir(tmp_path)
    rc, out, err = run(capsys, *argv, "--store", store)
    assert rc == 2 and out == "" and f"write redis://{store}" in err and err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def test_a_file_named_like_host_port_is_reached_with_a_path(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, out, err = run(capsys, "grant", "u1", "--rho", "2", "--yes", "--create", "--store", "./localhost:6379")
    assert rc == 0, err
    assert (tmp_path / "localhost:6379").exists()


def test_the_confirmation_names_the_redis_store(capsys, redis_url):
    rc, out, err = run(capsys, "set-default", "--rho", "2", "--delta", "1e-5", "--yes", "--store", redis_url)
    assert rc == 0, err
    assert out.strip().endswith(f"— store {redis_url}")
    rc, out, err = run(capsys, "grant", "u1", "--rho", "3", "--yes", "--store", redis_url)
    assert rc == 0, err
    assert out.startswith("granted u1: zcdp budget 3, δ budget 1e-05") and out.strip().endswith(f"store {redis_url}")


def test_the_demo_still_creates_its_store_file(tmp_path, capsys):
    path = tmp_path / "new_store.json"
    assert main(["demo", "--store", str(path), "--out", str(tmp_path / "o"), "--limit", "1000", "--quiet",
                 "--no-plot"]) == 0
    assert path.exists() and MemoryBudgetStore.load(str(path)).default_budget()[0] > 0


def test_the_help_describes_create(capsys):
    with pytest.raises(SystemExit):
        main(["budget", "grant", "--help"])
    out = capsys.readouterr().out
    assert "--create" in out and "1e-12" in out


# ---- F9.7: --since with a minus sign ------------------------------------------------------------------------------


def test_since_takes_a_negative_duration(capsys, store_url):
    st = _reopen(store_url)
    st.append_ledger({"type": "release", "query": "old", "window": 1, "ts": time.time() - 3 * 86400})
    st.append_ledger({"type": "release", "query": "new", "window": 2, "ts": time.time() - 3600})
    if hasattr(st, "save"):
        st.save()
    st.close()

    def queries(*since):
        rc, out, err = run(capsys, "ledger", *since, "--json", "--store", store_url)
        assert rc == 0, err
        return [e.get("query") for e in json.loads(out) if e.get("type") == "release"]

    assert queries("--since", "1d") == ["new"]
    assert queries("--since", "-1d") == ["new"]
    assert queries("--since=-1d") == ["new"]
    assert queries("--since", "-7d") == ["old", "new"]
    assert queries("--since", "-90m") == ["new"]
    rc, _, err = run(capsys, "ledger", "--since", "-x", "--store", store_url)
    assert rc == 2 and "--since" in err and "2h or -2h" in err and err.count("\n") == 1


# ---------------------------------------------------------------------------------- closing review of the day
def test_a_non_zero_number_that_underflows_is_refused(tmp_path, capsys):
    from streamdp.cli.main import main

    store = str(tmp_path / "s.json")
    for flag, text in (("--rho", "1e-400"), ("--delta", "1e-400")):
        argv = ["budget", "set-default", "--rho", "1", "--delta", "1e-6", "--yes", "--create", "--store", store]
        argv[argv.index(flag) + 1] = text
        with pytest.raises(SystemExit) as e:  # an argparse type error
            main(argv)
        assert e.value.code == 2
        assert "too small to hold" in capsys.readouterr().err
    assert main(["budget", "set-default", "--rho", "0e-400", "--delta", "0", "--yes", "--create", "--store",
                 store]) == 0  # a zero written so is still zero


def test_set_default_of_the_cgp_notion_needs_no_delta(tmp_path, capsys):
    """No cgp kind charges δ: its default δ is 0 on every store, and set-default --notion cgp was refused always."""
    from streamdp.cli.main import main

    store = str(tmp_path / "s.json")
    assert main(["budget", "set-default", "--notion", "cgp", "--rho", "1e-6", "--yes", "--create", "--store",
                 store]) == 0
    assert main(["budget", "set-default", "--notion", "emd", "--rho", "1", "--yes", "--store", store]) == 2  # emd may


def test_show_says_why_a_budget_has_no_dp_conversion(tmp_path, capsys):
    """A finite ρ with an unlimited δ has no (ε, δ) bound; `show` said "none (unlimited)" as if ρ were unlimited
    (operator review F9.2)."""
    from streamdp.cli.main import main

    store = str(tmp_path / "s.json")
    assert main(["budget", "grant", "bob", "--rho", "5", "--delta", "inf", "--yes", "--create", "--store", store]) == 0
    capsys.readouterr()
    assert main(["budget", "show", "bob", "--store", store]) == 0
    out = capsys.readouterr().out
    assert "budget no bound (its ρ or its δ is unlimited)" in out and "none (unlimited)" not in out


def test_the_ledger_table_shows_audit_budgets_as_numbers(tmp_path, capsys):
    """Audit entries showed raw fixed-point vectors ([2000000000000, 1000000000000, 0, …]) in the text table
    (operator review F9.3); --json keeps them raw."""
    import json as _json

    from streamdp.cli.main import main

    store = str(tmp_path / "s.json")
    assert main(["budget", "set-default", "--rho", "2", "--delta", "1e-6", "--yes", "--create", "--store", store]) == 0
    assert main(["budget", "grant", "u1", "--rho", "inf", "--yes", "--store", store]) == 0
    capsys.readouterr()
    assert main(["budget", "ledger", "--store", store]) == 0
    out = capsys.readouterr().out
    assert '"new":{"zcdp_rho":2.0,"zcdp_delta":1e-06}' in out and '"new":{"zcdp_rho":"inf","zcdp_delta":1e-06}' in out
    assert "2000000000000" not in out
    assert main(["budget", "ledger", "--store", store, "--json"]) == 0
    raw = _json.loads(capsys.readouterr().out)
    assert raw[0]["new"] == [2 * 10**12, 10**12, 0, 0, 0, 0]
