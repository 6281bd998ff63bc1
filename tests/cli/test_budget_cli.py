"""``streamdp budget …`` against an embedded store file AND a real redis-server (same assertions for both)."""

from __future__ import annotations

import csv
import io
import json
import time

import numpy as np
import pytest

from streamdp.accounting.cost import (DELTA_SCALE, INT64_MAX, LOSS_SCALE, N_COMPONENTS, Cost, budget_vector)
from streamdp.cli.main import main
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.filter.redis_store import RedisBudgetStore

DEFAULT = budget_vector(Cost(zcdp_rho=1.0, zcdp_delta=1e-6))
VIP = budget_vector(Cost(zcdp_rho=5.0, zcdp_delta=1e-6, cgp_rho=2.0))


def _fill(st) -> None:
    """a: 0.25 of 1 used; b: halted; vip: override with a cgp budget; u00..u19: used 0.00 .. 0.95."""
    st.grant("vip", VIP, actor="setup", reason="fixture")
    st.admit("q", 1, ["a", "b", "vip"], [Cost(zcdp_rho=0.25, zcdp_delta=1e-8).to_fixed(),
                                          Cost(zcdp_rho=2.0).to_fixed(),
                                          Cost(zcdp_rho=1.5, cgp_rho=0.5).to_fixed()])
    users = [f"u{i:02d}" for i in range(20)]
    costs = np.zeros((20, N_COMPONENTS), dtype=np.int64)
    costs[:, 0] = np.arange(20) * (LOSS_SCALE // 20)  # 0, 0.05, …, 0.95
    st.admit("q", 1, users, costs)
    st.append_ledger({"type": "release", "query": "counts", "window": 1, "ts": time.time() - 7200})
    st.append_ledger({"type": "release", "query": "topk", "window": 1})


@pytest.fixture(params=["file", "redis", "cluster"])
def store_url(request, tmp_path):
    if request.param == "file":
        path = str(tmp_path / "budgets.json")
        st = MemoryBudgetStore(DEFAULT, path=path)
        _fill(st)
        st.save()
        return path
    url = request.getfixturevalue("redis_url" if request.param == "redis" else "redis_cluster_url")
    st = RedisBudgetStore.from_url(url, default_budget=DEFAULT)
    _fill(st)
    st.close()
    return url


def run(capsys, *argv) -> tuple[int, str, str]:
    try:
        rc = main(["budget", *argv])
    except SystemExit as e:  # argparse usage errors
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


def run_json(capsys, *argv):
    rc, out, err = run(capsys, *argv, "--json")
    assert rc == 0, err
    return json.loads(out)


def _reopen(url):
    return RedisBudgetStore.from_url(url) if url.startswith(("redis://", "redis+cluster://")) \
        else MemoryBudgetStore.load(url)


# ---- show ---------------------------------------------------------------------------------------------------


def test_show_json_exact_object(capsys, store_url):
    obj = run_json(capsys, "show", "a", "--store", store_url)
    assert set(obj.pop("converted")) == {"zcdp"}  # see test_show_converted_guarantees
    # fixed point: spent = ceil(cost · scale) / scale, budget = floor(budget · scale) / scale (cost.py)
    assert obj == {"user": "a", "halted": False,
                   "zcdp": {"spent": 0.25, "budget": 1.0, "delta_spent": 1e-8, "delta_budget": 1e-6}}
    vip = run_json(capsys, "show", "vip", "--store", store_url)
    assert set(vip.pop("converted")) == {"zcdp", "cgp"}
    assert vip == {"user": "vip", "halted": False,
                   "zcdp": {"spent": 1.5, "budget": 5.0, "delta_spent": 0.0, "delta_budget": 1e-6},
                   "cgp": {"spent": 0.5, "budget": 2.0, "delta_spent": 0.0, "delta_budget": 0.0}}
    b = run_json(capsys, "show", "b", "--store", store_url)
    assert b["halted"] is True and b["zcdp"]["spent"] == 0.0  # refused, nothing charged


def test_show_human_table(capsys, store_url):
    rc, out, err = run(capsys, "show", "vip", "--store", store_url)
    assert rc == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == "user vip: active"
    head, zcdp, cgp = lines[1], lines[2], lines[3]
    assert head.split() == ["notion", "spent", "budget", "remaining", "δ", "spent", "δ", "budget", "δ", "remaining"]
    assert zcdp.split()[:4] == ["zcdp", "1.5", "5", "3.5"] and cgp.split()[:4] == ["cgp", "0.5", "2", "1.5"]
    # columns are aligned: every value starts where its header starts
    for col in ("spent", "budget", "remaining"):
        at = head.index(col)
        assert zcdp[at - 1] == " " and zcdp[at] != " " and cgp[at] != " "


def test_show_converted_guarantees(capsys, store_url):
    """contract §3: reports show the converted guarantees. zCDP (ρ, δ) → (ε, δ + δ′)-DP by CKS; CGP ρ per m² → ε per
    km (Liang–Yi (CGP) Lemma 3.7) — the numbers are those of streamdp.accounting.report (known answers in
    tests/accounting/test_report.py); here: the right amounts reach the right conversion, in JSON and in text."""
    from streamdp.accounting.report import as_dp, as_gp

    conv = run_json(capsys, "show", "vip", "--store", store_url, "--delta-prime", "1e-9", "--gp-within-km", "5")
    conv = conv["converted"]
    assert conv["zcdp"] == {"spent": as_dp(1.5, 0.0, 1e-9), "budget": as_dp(5.0, 1e-6, 1e-9)}
    assert conv["cgp"] == {"spent": as_gp(0.5, 0.0, 1e-9, 5.0), "budget": as_gp(2.0, 0.0, 1e-9, 5.0)}
    assert conv["zcdp"]["budget"]["delta"] == pytest.approx(1e-6 + 1e-9)
    assert 0 < conv["zcdp"]["spent"]["epsilon"] < conv["zcdp"]["budget"]["epsilon"]
    rc, out, _ = run(capsys, "show", "vip", "--store", store_url)
    eps_spent = as_dp(1.5, 0.0)["epsilon"]
    assert rc == 0 and f"zcdp as (ε, δ)-DP (CKS conversion, δ′ = 1e-06): spent ε = {eps_spent:.4g}" in out
    assert "cgp as geo-privacy, ε per km for locations ≤ 1 km apart" in out
    rc, _, err = run(capsys, "show", "vip", "--store", store_url, "--delta-prime", "1")
    assert rc == 2 and "δ′ must lie in (0, 1)" in err
    rc, _, err = run(capsys, "show", "vip", "--store", store_url, "--gp-within-km", "0")
    assert rc == 2 and "expected a finite number > 0" in err


def test_unknown_user_one_line_error(capsys, store_url):
    rc, out, err = run(capsys, "show", "nobody", "--store", store_url)
    assert rc == 1 and out == ""
    assert err.count("\n") == 1 and "unknown user 'nobody'" in err and "Traceback" not in err


# ---- list / stats -------------------------------------------------------------------------------------------


def test_list_json_sorted_top_exhausted_notion(capsys, store_url):
    users = run_json(capsys, "list", "--store", store_url)
    names = [u["user"] for u in users]
    assert len(names) == 23
    # highest used fraction first: b (halted, 0 spent) ranks by fraction 0 → near the end
    assert names[:3] == ["u19", "u18", "u17"]
    top = run_json(capsys, "list", "--top", "4", "--store", store_url)
    assert [u["user"] for u in top] == ["u19", "u18", "u17", "u16"]
    assert top[0] == {"user": "u19", "halted": False,
                      "zcdp": {"spent": 0.95, "budget": 1.0, "delta_spent": 0.0, "delta_budget": 1e-6}}
    ex = run_json(capsys, "list", "--exhausted", "--store", store_url)
    assert [u["user"] for u in ex] == ["b"]
    cgp = run_json(capsys, "list", "--notion", "cgp", "--store", store_url)
    assert [u["user"] for u in cgp] == ["vip"]


def test_list_human(capsys, store_url):
    rc, out, _ = run(capsys, "list", "--top", "2", "--store", store_url)
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["user", "status", "used"]
    assert lines[1].split() == ["u19", "active", "95.0%", "0.95/1"]
    assert lines[-1] == "(2 users)"


def test_stats(capsys, store_url):
    s = run_json(capsys, "stats", "--store", store_url)
    assert (s["users"], s["active"], s["halted"]) == (23, 22, 1)
    hist = s["remaining_fraction_histogram"]
    assert [(h["from"], h["to"]) for h in hist] == [(i / 10, (i + 1) / 10) for i in range(10)]
    # remaining fraction 1 − used: u_i → 1 − i/20 (i = 0..19; 1.0 falls in the closed last bin);
    # a → 1 − 0.25 = 0.75; vip → 1 − max(1.5/5, 0.5/2) = 0.7; b is halted and not counted
    want = [0] * 10
    for i in range(20):
        want[min(9, (10 * (20 - i)) // 20)] += 1
    want[7] += 2
    assert want == [1, 2, 2, 2, 2, 2, 2, 4, 2, 3]
    assert [h["count"] for h in hist] == want
    rc, out, _ = run(capsys, "stats", "--store", store_url)
    assert rc == 0 and "halted" in out.splitlines()[0]
    assert out.count("#") > 0 and "[0.9, 1.0]" in out


# ---- ledger -------------------------------------------------------------------------------------------------


def test_ledger_filters(capsys, store_url):
    all_ = run_json(capsys, "ledger", "--store", store_url)
    assert [e.get("query") or e.get("action") for e in all_] == ["grant", "counts", "topk"]
    assert [e["query"] for e in run_json(capsys, "ledger", "--query", "topk", "--store", store_url)] == ["topk"]
    recent = run_json(capsys, "ledger", "--since", "1h", "--store", store_url)
    assert [e.get("query") or e.get("action") for e in recent] == ["grant", "topk"]
    rc, out, _ = run(capsys, "ledger", "--query", "counts", "--store", store_url)
    assert rc == 0 and "counts" in out and "(1 entry)" in out
    rc, _, err = run(capsys, "ledger", "--since", "yesterday", "--store", store_url)
    assert rc == 2 and "--since" in err


# ---- administrative commands --------------------------------------------------------------------------------


def test_grant_requires_yes_then_changes_one_notion_and_audits(capsys, store_url):
    rc, _, err = run(capsys, "grant", "a", "--rho", "3", "--store", store_url)
    assert rc == 2 and "--yes" in err
    assert run_json(capsys, "show", "a", "--store", store_url)["zcdp"]["budget"] == 1.0  # unchanged
    obj = run_json(capsys, "grant", "a", "--rho", "3", "--notion", "cgp", "--delta", "1e-7", "--yes",
                   "--reason", "ticket 7", "--actor", "alice", "--store", store_url)
    assert obj["cgp"] == {"spent": 0.0, "budget": 3.0, "delta_spent": 0.0, "delta_budget": 1e-7}
    assert obj["zcdp"]["budget"] == 1.0 and obj["zcdp"]["delta_budget"] == 1e-6  # other notions kept
    st = _reopen(store_url)  # persisted
    b = st.get_user("a").budget
    assert b.tolist() == [LOSS_SCALE, DELTA_SCALE // 10**6, 3 * LOSS_SCALE, DELTA_SCALE // 10**7, 0, 0]
    audit = [e for e in st.ledger() if e.get("action") == "grant" and e.get("user") == "a"]
    assert len(audit) == 1 and audit[0]["actor"] == "alice" and audit[0]["reason"] == "ticket 7"
    # unlimited budgets print as null
    obj = run_json(capsys, "grant", "newbie", "--rho", "inf", "--notion", "emd", "--yes", "--store", store_url)
    assert obj["emd"]["budget"] is None and obj["zcdp"]["budget"] == 1.0
    assert _reopen(store_url).get_user("newbie").budget[4] == INT64_MAX
    rc, _, err = run(capsys, "grant", "a", "--rho", "-1", "--yes", "--store", store_url)
    assert rc == 2 and "--rho" in err
    for bad in ("1", "2.5"):  # a δ of 1 or more guarantees nothing: refused, nothing changed
        rc, _, err = run(capsys, "grant", "a", "--rho", "3", "--delta", bad, "--yes", "--store", store_url)
        assert rc == 2 and "--delta" in err and "< 1" in err
    assert _reopen(store_url).get_user("a").budget[1] == DELTA_SCALE // 10**6


def test_set_default(capsys, store_url):
    rc, _, err = run(capsys, "set-default", "--rho", "2", "--store", store_url)
    assert rc == 2 and "--yes" in err
    d = run_json(capsys, "set-default", "--rho", "2", "--yes", "--store", store_url)
    assert d == {"zcdp": {"budget": 2.0, "delta_budget": 1e-6}}
    assert run_json(capsys, "show", "a", "--store", store_url)["zcdp"]["budget"] == 2.0
    assert run_json(capsys, "show", "vip", "--store", store_url)["zcdp"]["budget"] == 5.0  # override kept
    audit = [e for e in _reopen(store_url).ledger() if e.get("action") == "set-default"]
    assert len(audit) == 1 and audit[0]["new"][0] == 2 * LOSS_SCALE


# ---- export -------------------------------------------------------------------------------------------------


def test_export_csv_and_jsonl(capsys, store_url):
    rc, out, _ = run(capsys, "export", "--store", store_url)
    assert rc == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 23 and [r["user"] for r in rows] == sorted(r["user"] for r in rows)
    a = next(r for r in rows if r["user"] == "a")
    assert a["halted"] == "false" and float(a["zcdp_spent"]) == 0.25 and float(a["zcdp_delta_budget"]) == 1e-6
    assert float(a["cgp_budget"]) == 0.0
    rc, out, _ = run(capsys, "export", "--format", "jsonl", "--store", store_url)
    objs = [json.loads(line) for line in out.splitlines()]
    assert len(objs) == 23 and next(o for o in objs if o["user"] == "b")["halted"] is True


# ---- store selection and errors -----------------------------------------------------------------------------


def test_store_from_environment(capsys, store_url, monkeypatch):
    monkeypatch.setenv("STREAMDP_STORE", store_url)
    rc, out, _ = run(capsys, "show", "a")
    assert rc == 0 and "user a: active" in out


def test_no_store_is_an_error(capsys, monkeypatch):
    monkeypatch.delenv("STREAMDP_STORE", raising=False)
    rc, out, err = run(capsys, "stats")
    assert rc == 2 and out == "" and "--store" in err and err.count("\n") == 1


def test_missing_file_store(capsys, tmp_path):
    path = str(tmp_path / "nope.json")
    for argv in (["show", "a"], ["list"], ["stats"], ["ledger"], ["export"]):
        rc, out, err = run(capsys, *argv, "--store", path)
        assert rc == 1 and out == "" and "does not exist" in err and "Traceback" not in err
    # an administrative write creates it only with --create (review 12 F5: a mistyped path "succeeded")
    rc, _, err = run(capsys, "grant", "a", "--rho", "1", "--yes", "--store", path)
    assert rc == 1 and "does not exist" in err and "--create" in err
    rc, _, err = run(capsys, "grant", "a", "--rho", "1", "--yes", "--create", "--store", path)
    assert rc == 0, err
    assert MemoryBudgetStore.load(path).get_user("a").budget[0] == LOSS_SCALE


def test_corrupt_file_store(capsys, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    rc, _, err = run(capsys, "stats", "--store", str(path))
    assert rc == 1 and f"{path} is not a streamdp budget store file (not JSON" in err and err.count("\n") == 1
    assert err.count(str(path)) == 1  # the path once
    path.write_text("{}")  # JSON, but not a store
    rc, _, err = run(capsys, "stats", "--store", str(path))
    assert rc == 1 and f"{path} is not a streamdp budget store file (KeyError" in err and err.count("\n") == 1


def test_unreachable_and_bad_urls(capsys):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc, out, err = run(capsys, "show", "a", "--store", f"redis://:pw@127.0.0.1:{port}/0")
    assert rc == 1 and out == "" and err.count("\n") == 1 and "unreachable" in err and "pw" not in err
    rc, _, err = run(capsys, "show", "a", "--store", "http://example.org/x")
    assert rc == 2 and "unsupported store URL" in err
    rc, _, err = run(capsys, "show", "a", "--store", "redis://localhost:notaport/0")
    assert rc == 2 and err.count("\n") == 1
