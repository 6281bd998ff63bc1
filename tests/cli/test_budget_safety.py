"""Operator safety of ``streamdp budget`` (file store, redis-server and the 3-primary Redis Cluster):

* ``grant`` / ``set-default`` below what a user has spent are refused without ``--force`` (the 2026-12-07 audit:
  ``grant alice --rho 0.5 --yes`` with 0.6 spent printed ``granted``, and alice's next window halted her for good);
* ``export`` writes exact decimals of the fixed-point integers (the audit: δ as floats, a spend one grid unit above
  the budget read as equal), and escapes producer-chosen user ids against CSV formula injection;
* text output escapes control and formatting characters in user ids (terminal escapes, bidi overrides);
* a store FILE that is not a regular file (``/dev/zero``, a FIFO) is refused before anything is read or locked.
"""

from __future__ import annotations

import csv
import io
import json
import os
from decimal import Decimal

import numpy as np
import pytest

from streamdp.accounting.cost import DELTA_SCALE, INT64_MAX, LOSS_SCALE, N_COMPONENTS, SCALES
from streamdp.cli.main import main
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.filter.redis_store import RedisBudgetStore

DEFAULT = np.array([LOSS_SCALE, 10**12, 0, 0, 0, 0], dtype=np.int64)  # ρ 1, δ 1e-6


def vec(rho: int = 0, delta: int = 0) -> list[int]:
    v = [0] * N_COMPONENTS
    v[0], v[1] = rho, delta
    return v


@pytest.fixture(params=["file", "redis", "cluster"])
def store(request, tmp_path):
    """(URL, reopen) of a store holding: alice spent ρ 0.6; bob spent ρ 0.2; carol halted (spent 0.9); dave has
    his own budget of ρ 5 (spent 0.7)."""
    if request.param == "file":
        url = str(tmp_path / "budgets.json")
        st = MemoryBudgetStore(DEFAULT, path=url)
    else:
        url = request.getfixturevalue("redis_url" if request.param == "redis" else "redis_cluster_url")
        st = RedisBudgetStore.from_url(url, default_budget=DEFAULT)
    st.grant("dave", vec(5 * LOSS_SCALE, 10**12))
    st.admit("q", 1, ["alice", "bob", "carol", "dave"],
             [vec(6 * LOSS_SCALE // 10, 10**9), vec(2 * LOSS_SCALE // 10), vec(9 * LOSS_SCALE // 10),
              vec(7 * LOSS_SCALE // 10)])
    assert st.admit("q", 2, ["carol"], vec(2 * LOSS_SCALE // 10)).tolist() == [False]  # 0.9 + 0.2 > 1: halted
    if request.param == "file":
        st.save()
        return url, lambda: MemoryBudgetStore.load(url)
    st.close()
    return url, lambda: RedisBudgetStore.from_url(url)


def run(capsys, *argv) -> tuple[int, str, str]:
    try:
        rc = main(["budget", *argv])
    except SystemExit as e:
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def admin_entries(st) -> list[dict]:
    return [e for e in st.ledger() if e.get("type") == "admin"]


def test_a_grant_below_the_users_spend_is_refused_without_force(capsys, store):
    url, reopen = store
    n_admin = len(admin_entries(reopen()))
    rc, out, err = run(capsys, "grant", "alice", "--rho", "0.5", "--yes", "--store", url)
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert "halt" in err and "for good" in err and "--force" in err and "0.6" in err
    st = reopen()
    assert st.get_user("alice").budget[0] == LOSS_SCALE and len(admin_entries(st)) == n_admin  # nothing changed
    # a δ budget below the δ spent is the same
    rc, _, err = run(capsys, "grant", "alice", "--rho", "2", "--delta", "1e-10", "--yes", "--store", url)
    assert rc == 2 and "δ" in err
    # at or above the spend: granted; a halted user: granted (nothing more to lose); with --force: granted
    assert run(capsys, "grant", "alice", "--rho", "0.6", "--yes", "--store", url)[0] == 0
    assert run(capsys, "grant", "carol", "--rho", "0.1", "--yes", "--store", url)[0] == 0
    rc, out, _ = run(capsys, "grant", "bob", "--rho", "0.1", "--yes", "--force", "--store", url)
    assert rc == 0 and "granted bob" in out
    st = reopen()
    assert st.get_user("alice").budget[0] == 6 * LOSS_SCALE // 10
    assert st.get_user("bob").budget[0] == LOSS_SCALE // 10
    assert len(admin_entries(st)) == n_admin + 3


def test_set_default_below_users_spend_is_refused_and_counts_them(capsys, store):
    url, reopen = store
    rc, out, err = run(capsys, "set-default", "--rho", "0.5", "--yes", "--store", url)
    # alice (0.6) would be halted; bob (0.2) would not; carol is halted already; dave has his own budget
    assert rc == 2 and out == "" and "1 user " in err and "alice" in err and "for good" in err and "--force" in err
    assert "bob" not in err and "carol" not in err and "dave" not in err
    assert reopen().default_budget()[0] == LOSS_SCALE
    rc, _, err = run(capsys, "set-default", "--rho", "0.1", "--yes", "--store", url)
    assert rc == 2 and "2 users " in err and "alice" in err and "bob" in err
    assert run(capsys, "set-default", "--rho", "0.6", "--yes", "--store", url)[0] == 0  # equal: no halt
    assert run(capsys, "set-default", "--rho", "0.1", "--yes", "--force", "--store", url)[0] == 0
    assert reopen().default_budget()[0] == LOSS_SCALE // 10


def test_export_writes_exact_decimals_that_round_trip(capsys, store):
    url, reopen = store
    st = reopen()
    # one grid unit of δ above the budget: a float made it read as equal
    st.grant("edge", vec(LOSS_SCALE, 10**12))
    st.admit("q", 3, ["edge"], vec(1, 10**12))
    st.grant("edge", vec(LOSS_SCALE, 10**12 - 1), components=[1])  # below its spend, as a --force would leave it
    st.grant("big", vec(INT64_MAX - 1, INT64_MAX))  # near the top of int64: no float holds these
    st.admit("q", 3, ["big"], vec(INT64_MAX - 3, 7))
    if hasattr(st, "save"):
        st.save()
    rc, out, _ = run(capsys, "export", "--store", url)
    assert rc == 0
    rows = {r["user"]: r for r in csv.DictReader(io.StringIO(out))}
    e = rows["edge"]
    assert e["zcdp_delta_spent"] == "0.000001" and e["zcdp_delta_budget"] == "0.000000999999999999"
    assert Decimal(e["zcdp_delta_spent"]) > Decimal(e["zcdp_delta_budget"])
    assert rows["big"]["zcdp_spent"] == "9223372.036854775804" and rows["big"]["zcdp_delta_budget"] == "inf"
    cols = [(n, i) for i, n in enumerate(["zcdp_spent", "zcdp_delta_spent", "cgp_spent", "cgp_delta_spent",
                                          "emd_spent", "emd_delta_spent"])]
    for rec in st.iter_users():  # every exported figure × its scale is the stored integer
        row = rows[rec.user]
        for name, i in cols:
            comp = [0, 1, 2, 3, 4, 5][i]
            assert Decimal(row[name]) * SCALES[comp] == int(rec.spent[comp]), (rec.user, name)
            bname = name.replace("spent", "budget")
            want = "inf" if rec.budget[comp] == INT64_MAX else None
            if want:
                assert row[bname] == "inf"
            else:
                assert Decimal(row[bname]) * SCALES[comp] == int(rec.budget[comp]), (rec.user, bname)
    rc, out, _ = run(capsys, "export", "--format", "jsonl", "--store", url)
    objs = {o["user"]: o for o in (json.loads(line, parse_float=Decimal) for line in out.splitlines())}
    assert objs["edge"]["zcdp"]["delta_spent"] * DELTA_SCALE == 10**12
    assert objs["edge"]["zcdp"]["delta_budget"] * DELTA_SCALE == 10**12 - 1
    assert objs["big"]["zcdp"]["spent"] * LOSS_SCALE == INT64_MAX - 3 and objs["big"]["zcdp"]["delta_budget"] is None


HOSTILE = ["=HYPERLINK(\"http://x\",\"y\")", "+cmd|' /C calc'!A0", "@SUM(1)", "-2+3", "\tx", "\ry", "'quoted", "ok"]


def test_export_csv_escapes_formula_user_ids(capsys, tmp_path):
    url = str(tmp_path / "s.json")
    st = MemoryBudgetStore(DEFAULT, path=url)
    st.admit("q", 1, HOSTILE, vec(1))
    st.save()
    rc, out, _ = run(capsys, "export", "--store", url)
    assert rc == 0
    cells = [r["user"] for r in csv.DictReader(io.StringIO(out, newline=""))]
    assert len(cells) == len(HOSTILE)
    for cell in cells:
        assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")), cell
    back = sorted(c[1:] if c.startswith("'") else c for c in cells)
    assert back == sorted(HOSTILE)  # one leading ' removed gives every id back
    assert sum(c.startswith("'") for c in cells) == len(HOSTILE) - 1  # all but "ok"


EVIL = ["evil\x1b[2J\x1b]0;pwned\x07", "\u202egnp.exe", "back\\slash", "bell\x07\x9b"]


def test_text_output_escapes_control_characters_in_user_ids(capsys, tmp_path):
    url = str(tmp_path / "s.json")
    st = MemoryBudgetStore(DEFAULT, path=url)
    st.admit("q", 1, EVIL, vec(1))
    st.save()
    outs = [run(capsys, "list", "--store", url)[1]]
    for u in EVIL:
        outs.append(run(capsys, "show", u, "--store", url)[1])
        outs.append(run(capsys, "grant", u, "--rho", "2", "--yes", "--store", url)[1])
    outs.append(run(capsys, "ledger", "--store", url)[1])
    for out in outs:
        assert out, "no output"
        assert not any(ch in out for ch in "\x1b\x07\x9b\u202e"), repr(out)
    listing = outs[0]
    assert "evil\\x1b[2J\\x1b]0;pwned\\x07" in listing and "\\u202egnp.exe" in listing
    assert "back\\\\slash" in listing and "bell\\x07\\x9b" in listing
    # --json keeps the ids exact (JSON escapes control characters itself)
    rc, out, _ = run(capsys, "list", "--json", "--store", url)
    assert sorted(o["user"] for o in json.loads(out)) == sorted(EVIL)


def test_a_store_file_that_is_not_a_regular_file_is_refused(capsys, tmp_path):
    for argv in (["list"], ["show", "a"], ["export"], ["grant", "a", "--rho", "1", "--yes"]):
        rc, out, err = run(capsys, *argv, "--store", "/dev/zero")
        assert rc == 1 and out == "" and "/dev/zero is a device" in err and err.count("\n") == 1
    assert not os.path.exists("/dev/zero.lock")  # refused before its lock file was made
    fifo = str(tmp_path / "pipe")
    os.mkfifo(fifo)
    rc, _, err = run(capsys, "stats", "--store", fifo)  # would block forever if opened for reading
    assert rc == 1 and "is a FIFO" in err
    d = tmp_path / "dir"
    d.mkdir()
    rc, _, err = run(capsys, "stats", "--store", str(d))
    assert rc == 1 and "is a directory" in err


def test_a_store_file_larger_than_the_bound_is_refused(tmp_path, monkeypatch):
    import streamdp.filter.memory as memory

    path = tmp_path / "big.json"
    st = MemoryBudgetStore(DEFAULT, path=str(path))
    st.admit("q", 1, [f"u{i}" for i in range(100)], vec(1))
    st.save()
    monkeypatch.setattr(memory, "MAX_STORE_FILE_BYTES", path.stat().st_size - 1)
    with pytest.raises(ValueError, match="larger than"):
        MemoryBudgetStore.load(str(path))
    from streamdp.filter import open_store

    with pytest.raises(ValueError, match="/dev/zero is a device"):
        open_store("/dev/zero", lock=True)
