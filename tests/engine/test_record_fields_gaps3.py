"""Output record fields across epochs (docs/contract.md §1 "Subscribers": one record per (query, epoch, window), keyed
``query/epoch/window``): with horizon 3, window seq s is window t = (s-1) % 3 + 1 of epoch (s-1) // 3 — so t and seq
differ from the second epoch on, which a run inside epoch 0 cannot tell apart."""

from __future__ import annotations

import orjson

from streamdp.accounting.cost import Cost
from streamdp.engine.queries.continual_counts import ContinualCounts

from engine_helpers import PresenceCount, engine, ev, run

HORIZON = 3
SEQS = range(1, 9)  # windows of 10 s from 0: seq 1..8 = epochs 0, 1, 2


def _records():
    e, store = engine([PresenceCount("pc", rho=0.25)], Cost.zcdp(100.0), seed=5, horizon=HORIZON)
    payloads = [ev(f"u{i}", 10.0 * (s - 1) + 1.0 + i) for s in SEQS for i in range(2)]
    return run(e, payloads), store


def test_published_window_fields_and_key_across_epochs():
    recs, _ = _records()
    got = [orjson.loads(r.to_bytes()) for r in recs]
    assert [d["window"]["seq"] for d in got] == list(SEQS)
    for d in got:
        s = d["window"]["seq"]
        epoch, t = (s - 1) // HORIZON, (s - 1) % HORIZON + 1
        assert (d["epoch"], d["window"]["t"]) == (epoch, t), d
        assert d["key"] == f"pc/{epoch}/{t}"
        assert (d["window"]["start"], d["window"]["end"]) == (10.0 * (s - 1), 10.0 * s)
        assert d["query"] == "pc" and d["kind"] == "presence_count"
    assert len({d["key"] for d in got}) == len(got)  # the idempotency keys of different windows differ


def test_ledger_entries_name_the_window_within_the_epoch():
    recs, store = _records()
    led = [x for x in store.ledger() if x.get("type") == "release"]
    assert [x["seq"] for x in led] == list(SEQS)
    for x in led:
        s = x["seq"]
        epoch, t = (s - 1) // HORIZON, (s - 1) % HORIZON + 1
        assert (x["epoch"], x["window"], x["key"]) == (epoch, t, f"pc/{epoch}/{t}"), x
        assert x["users_charged"] == 2 and x["zcdp_rho_max"] == 0.25


def test_published_cost_basis_and_meta():
    """The published bound says what it is a bound per (a user, this window, at most max_items_per_window first
    contributions), not merely the kind's name: subscribers cannot read the number without it."""
    q = ContinualCounts("c", sigma=2.0, horizon=8, delta_item=1e-3, max_items_per_window=3)
    e, _ = engine([q], Cost.zcdp(100, 1.0))
    recs = run(e, [ev(f"u{i}", 1.0 + i, ["a"]) for i in range(3)] + [ev("z", 15.0, ["b"])])
    assert recs
    for r in recs:
        d = orjson.loads(r.to_bytes())
        basis = d["cost"]["basis"]
        assert basis.startswith("per user") and "max_items_per_window" in basis, basis
        # the published ledger extras: how many items are selected, and how many for the first time
        assert d["meta"] == {"selected": len(d["values"]["counts"]), "new_selected": len(d["values"]["new_items"])}
