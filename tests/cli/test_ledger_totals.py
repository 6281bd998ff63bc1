"""``streamdp budget ledger --totals`` (contract §3 "Ledger": running totals per query), hand-made entries."""

import json

import pytest

from streamdp.cli.main import main
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.outputs.ledger_totals import ledger_totals

ENTRIES = [
    {"type": "release", "query": "counts", "kind": "continual_counts", "seq": 2, "zcdp_rho_max": 1.5,
     "zcdp_delta_max": 3e-6, "users_charged": 10},
    {"type": "admin", "action": "grant", "user": "u1"},
    {"type": "release", "query": "top", "kind": "top_k", "seq": 2, "zcdp_rho_max": 0.25, "zcdp_delta_max": 1e-6,
     "users_charged": 7, "items_returned": 2, "pwyg_used": 2},
    {"type": "release", "query": "counts", "kind": "continual_counts", "seq": 3, "zcdp_rho_max": 0.5,
     "zcdp_delta_max": 1e-6, "users_charged": 4},
    {"type": "release", "query": "top", "kind": "top_k", "seq": 3, "zcdp_rho_max": 0.375, "zcdp_delta_max": 1e-6,
     "users_charged": 9, "items_returned": 3, "pwyg_used": 5},
    {"type": "release", "query": "geo", "kind": "geo_locations", "seq": 1, "cgp_rho_max": 2e-8, "users_charged": 0},
]


def test_totals_by_hand():
    t = {x["query"]: x for x in ledger_totals(ENTRIES)}
    assert list(t) == ["counts", "top", "geo"]  # order of first appearance; the admin entry is not a release
    assert t["counts"]["releases"] == 2 and (t["counts"]["first_seq"], t["counts"]["last_seq"]) == (2, 3)
    assert t["counts"]["max_cost_sum"] == pytest.approx({"zcdp_rho": 2.0, "zcdp_delta": 4e-6})
    assert t["counts"]["user_windows_charged"] == 14 and "pwyg_used" not in t["counts"]
    assert t["top"]["max_cost_sum"] == pytest.approx({"zcdp_rho": 0.625, "zcdp_delta": 2e-6})
    assert t["top"]["items_returned"] == 5 and t["top"]["pwyg_used"] == 5  # the last counter, not a sum
    assert t["geo"]["max_cost_sum"] == pytest.approx({"cgp_rho": 2e-8}) and t["geo"]["user_windows_charged"] == 0


def test_cli_totals_json_text_and_query_filter(tmp_path, capsys):
    path = str(tmp_path / "b.json")
    st = MemoryBudgetStore(path=path)
    for e in ENTRIES:
        st.append_ledger(e)
    st.save()
    assert main(["budget", "ledger", "--store", path, "--totals", "--json", "--query", "top"]) == 0
    (top,) = json.loads(capsys.readouterr().out)
    assert top["query"] == "top" and top["releases"] == 2 and top["pwyg_used"] == 5
    assert main(["budget", "ledger", "--store", path, "--totals"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:4] == ["query", "kind", "releases", "windows"]
    row = next(x for x in out if x.startswith("counts")).split()
    assert row[:4] == ["counts", "continual_counts", "2", "2–3"] and "14" in row
