"""Settling a window when queries compose (docs/contract.md §3 "Reserve and settle", "Ledger"; engine.close_window steps 4–5).

A window's admit charges the SUM of every query's reservation (Rogers (unknown-domain) Thm 6: zCDP costs add). When one query settles
to a smaller actual cost (pay-what-you-get top-k, Rogers (unknown-domain) Thm 10), the engine settles the user's WHOLE charge for the
window: the settled total must still include the queries that do not settle, or their cost is refunded. The
ledger's realised cost (``realized``: max individual cost and users charged) counts admitted users only — refused
(HALTed) users are charged nothing.

Known answers are written out by hand from the cost formulas of docs/contract.md §3 and Rogers (unknown-domain) (top-k: reserve k·ε²/8,
settle |I|·ε²/8 and δ; the test query ``PresenceCount``: a fixed ρ per user present), never read from the engine.
"""

from __future__ import annotations

import pytest

from streamdp.accounting.cost import Cost
from streamdp.engine.queries.top_k import TopK

from engine_helpers import PresenceCount, RecordingStore, engine, ev, run


@pytest.mark.parametrize("order", ["topk_first", "count_first"])
def test_settle_keeps_costs_of_queries_that_do_not_settle(order):
    """Guards: the settled total of a window keeps the cost of a query that does not settle (``rel.actual is
    None``) next to a query that does (TopK), in both query orders — ``topk_first`` adds the count AFTER the
    settle total was started (the ``elif`` branch of close_window step 4), ``count_first`` replays the count's
    charge, already summed, into it.

    Hand values (docs/contract.md §3 "Top-k", Rogers (unknown-domain) Thm 10; ε = 1, δ = 10⁻³, k = 3): one item "big" held by 200 users is far
    above the threshold T = 1 + log(k̄/δ)/ε = 1 + log 4000 ≈ 9.3, and no other item exists, so every window returns
    I = [big, ⊥], |I| = 2 < k: each user reserves k·ε²/8 = 3/8 and settles to |I|·ε²/8 = 2/8 = 0.25 (plus δ).
    The count costs ρ = 0.5 and never settles. Per window 0.25 + 0.5 = 0.75; over 3 windows ρ = 3·0.75 = 2.25 and
    δ = 3·10⁻³. (Omitting the count from the settle gives 3·0.25 = 0.75; not settling gives 3·0.875 = 2.625.)
    """
    eps, delta = 1.0, 1e-3
    t = TopK("t", epsilon=eps, delta=delta, k=3, kbar=4, k_star=100)
    p = PresenceCount("p", rho=0.5)
    e, store = engine([t, p] if order == "topk_first" else [p, t], Cost.zcdp(100, 1.0), store_cls=RecordingStore)
    users = [f"u{j:03d}" for j in range(200)]
    payloads = [ev(u, 10 * w + 1, ["big"]) for w in range(3) for u in users]
    recs = run(e, payloads)
    trecs = [r for r in recs if r.query == "t"]
    assert [r.values["items"] for r in trecs] == [["big", None]] * 3  # |I| = 2 < k = 3 in every window
    # the settle path really ran: one settle call per window (the reservation 3/8 + 0.5 ≠ the actual 2/8 + 0.5)
    assert sorted(store.settles) == [1, 2, 3]
    per_window_rho = 2 * eps ** 2 / 8 + 0.5
    for u in users:
        spent = store.get_user(u).spent_cost()
        assert spent.zcdp_rho == pytest.approx(3 * per_window_rho, rel=1e-9)  # 2.25
        assert spent.zcdp_delta == pytest.approx(3 * delta, rel=1e-9)
        assert not store.get_user(u).halted


def test_ledger_counts_only_admitted_users():
    """Guards: a release's realised cost (record ``realized`` and the stored ledger entry) counts only the users
    the filter admitted — a HALTed user's reservation is not charged and not counted in ``users_charged``.

    Hand values (Liang–Yi (adaptive budgeting) eq. (7): admit iff spent + cost ≤ budget; budget ρ = 1.0, PresenceCount ρ = 0.5 per window):
    window 1: a, b present, both admitted (0.5 ≤ 1) → 2 charged (positive control: the count is not stuck at 1);
    window 2: a admitted (1.0 ≤ 1) → 1 charged;
    window 3: a, b, c present; a refused and HALTed (1.5 > 1), b admitted (1.0), c admitted (0.5) → 2 charged,
    not 3. The max individual ρ is 0.5 in every window.
    """
    p = PresenceCount("p", rho=0.5)
    e, store = engine([p], Cost.zcdp(1.0))
    payloads = [ev("a", 1), ev("b", 2), ev("a", 11), ev("a", 21), ev("b", 22), ev("c", 23)]
    recs = run(e, payloads)
    assert [r.values["true_admitted"] for r in recs] == [2, 1, 2]
    assert [r.realized["users_charged"] for r in recs] == [2, 1, 2]
    assert [r.realized["zcdp"]["rho"] for r in recs] == [0.5, 0.5, 0.5]
    ledger = [x for x in store.ledger(query="p") if x.get("type") == "release"]
    assert [x["users_charged"] for x in ledger] == [2, 1, 2]
    a = store.get_user("a")
    assert a.halted and a.spent_cost().zcdp_rho == pytest.approx(1.0, rel=1e-9)
    assert store.get_user("b").spent_cost().zcdp_rho == pytest.approx(1.0, rel=1e-9)
    assert store.get_user("c").spent_cost().zcdp_rho == pytest.approx(0.5, rel=1e-9)
