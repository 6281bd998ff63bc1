"""``streamdp budget`` gaps found by mutation (round 2): a grant keeps the user's OTHER notions' per-user budgets
(not the defaults), ``list --exhausted`` lists users whose spend reached the budget exactly (admitted, not halted),
and a δ component used up counts as used (not only ρ). Embedded store file only (no redis). Known answers by hand."""

from __future__ import annotations

import json

from streamdp.accounting.cost import DELTA_SCALE, LOSS_SCALE, Cost, budget_vector
from streamdp.cli.main import main
from streamdp.filter.memory import MemoryBudgetStore

DEFAULT = budget_vector(Cost(zcdp_rho=1.0, zcdp_delta=1e-6))
VIP = budget_vector(Cost(zcdp_rho=5.0, zcdp_delta=1e-6, cgp_rho=2.0))


def _store(tmp_path) -> str:
    """vip: per-user override (ρ 5, δ 1e-6, cgp ρ 2); full: spent ρ 1 of 1 (admitted exactly at the budget);
    dfull: spent ρ 0.1 of 1 and δ 1e-6 of 1e-6; half: spent ρ 0.5 and δ 1e-7; halted: refused (ρ 2 > 1)."""
    path = str(tmp_path / "budgets.json")
    st = MemoryBudgetStore(DEFAULT, path=path)
    st.grant("vip", VIP, actor="setup", reason="fixture")
    ok = st.admit("q", 1, ["full", "dfull", "half", "halted"],
                  [Cost(zcdp_rho=1.0).to_fixed(), Cost(zcdp_rho=0.1, zcdp_delta=1e-6).to_fixed(),
                   Cost(zcdp_rho=0.5, zcdp_delta=1e-7).to_fixed(), Cost(zcdp_rho=2.0).to_fixed()])
    assert ok.tolist() == [True, True, True, False]  # spent + cost ≤ budget is admitted (Liang–Yi (adaptive budgeting) eq. (7))
    st.save()
    return path


def run_json(capsys, *argv):
    rc = main(["budget", *argv, "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return json.loads(out)


def test_grant_in_one_notion_keeps_the_users_own_budget_in_the_others(tmp_path, capsys):
    path = _store(tmp_path)
    obj = run_json(capsys, "grant", "vip", "--rho", "3", "--notion", "cgp", "--yes", "--store", path)
    # the per-user zcdp override (5, 1e-6) stays; the default (1, 1e-6) must not replace it
    assert obj["zcdp"]["budget"] == 5.0 and obj["cgp"]["budget"] == 3.0
    b = MemoryBudgetStore.load(path).get_user("vip").budget
    assert b.tolist() == [5 * LOSS_SCALE, DELTA_SCALE // 10**6, 3 * LOSS_SCALE, 0, 0, 0]
    # positive control: a user the store has never seen starts from the default in the other notions
    obj = run_json(capsys, "grant", "fresh", "--rho", "3", "--notion", "cgp", "--yes", "--store", path)
    assert obj["zcdp"]["budget"] == 1.0 and obj["cgp"]["budget"] == 3.0


def test_exhausted_lists_users_at_their_budget_not_only_halted_ones(tmp_path, capsys):
    path = _store(tmp_path)
    ex = run_json(capsys, "list", "--exhausted", "--store", path)
    # halted (refused), full (ρ 1/1) and dfull (δ 1e-6/1e-6) have nothing left; half and vip do
    assert sorted(u["user"] for u in ex) == ["dfull", "full", "halted"]
    assert next(u for u in ex if u["user"] == "full")["halted"] is False


def test_used_fraction_counts_the_delta_component(tmp_path, capsys):
    path = _store(tmp_path)
    users = run_json(capsys, "list", "--store", path)
    # used = max over components of spent/budget: dfull max(0.1, 1) = 1, full 1, half max(0.5, 0.1) = 0.5,
    # vip 0, halted 0 (nothing charged); ties by name
    assert [u["user"] for u in users] == ["dfull", "full", "half", "halted", "vip"]
    rc = main(["budget", "list", "--store", path])
    out = capsys.readouterr().out
    assert rc == 0
    rows = {line.split()[0]: line.split()[2] for line in out.splitlines()[1:-1]}
    assert rows["dfull"] == "100.0%" and rows["full"] == "100.0%" and rows["half"] == "50.0%"
    s = run_json(capsys, "stats", "--store", path)
    # remaining fraction 1 − used of active users: dfull 0, full 0 → bin [0, 0.1); half 0.5 → [0.5, 0.6);
    # vip 1 → [0.9, 1.0]; halted not counted
    assert [h["count"] for h in s["remaining_fraction_histogram"]] == [2, 0, 0, 0, 0, 1, 0, 0, 0, 1]


def test_grant_delta_zero_sets_a_zero_delta_budget(tmp_path, capsys):
    """``--delta 0`` is a value (revoke δ), not "unchanged": the δ budget becomes 0; omitting it keeps 1e-6."""
    path = _store(tmp_path)
    # half has spent δ: a δ budget of 0 is below that spend, refused without --force (tests/cli/test_budget_safety.py)
    obj = run_json(capsys, "grant", "half", "--rho", "2", "--delta", "0", "--yes", "--force", "--store", path)
    assert obj["zcdp"]["budget"] == 2.0 and obj["zcdp"]["delta_budget"] == 0.0
    assert MemoryBudgetStore.load(path).get_user("half").budget[1] == 0
    obj = run_json(capsys, "grant", "full", "--rho", "2", "--yes", "--store", path)  # control: δ omitted → kept
    assert obj["zcdp"]["delta_budget"] == 1e-6
