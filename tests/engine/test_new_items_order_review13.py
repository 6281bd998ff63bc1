"""continual_counts publishes `new_items` sorted by name (review of 2026-11-23). It was published in the tree's row
order — an item's first admitted contribution in the epoch, ties (items first seen in one window) by interned id,
i.e. by the first appearance of the NAME in the stream, interned at ingest before admission:
(a) a user who alone contributed to x in window 1 was revealed with certainty at any later window where x is selected
    together with another item (with them x's row precedes y's, without them y's precedes x's);
(b) a HALTED user's refused event still interned the name and so changed the published order.
`counts` is a dict serialised with sorted keys, so it was never affected."""

import orjson

from engine_helpers import engine, run

from streamdp.accounting.cost import Cost, budget_vector
from streamdp.engine.queries.continual_counts import ContinualCounts


def ev(user, ts, items):
    return orjson.dumps({"user": user, "ts": ts, "items": items})


def query():
    return ContinualCounts("c", sigma=2.0, horizon=8, delta_item=1e-6, max_items_per_window=2)


# window 3: 200 other users, each listing "y" before "x" (so without u, "y" is interned first)
CROWD = [ev(f"v{i}", 21 + i * 0.01, ["y", "x"]) for i in range(200)]
CLOSE = [ev("tick", 45, ["t"])]


def window3(records):
    (r,) = [r for r in records if r.t == 3]
    return r.values


def test_admitted_users_earlier_item_is_not_revealed_by_new_items_order():
    e1, _ = engine([query()], Cost.zcdp(100.0, 1.0))
    with_u = window3(run(e1, [ev("u", 1, ["x"])] + CROWD + CLOSE))
    e2, _ = engine([query()], Cost.zcdp(100.0, 1.0))
    without_u = window3(run(e2, [ev("w", 1, ["z"])] + CROWD + CLOSE))  # same number of events in window 1
    assert set(with_u["new_items"]) == set(without_u["new_items"]) == {"x", "y"}
    # u is absent from window 3; the set released is the same; the ORDER must not depend on u's window-1 data
    assert with_u["new_items"] == without_u["new_items"], (with_u["new_items"], without_u["new_items"])


def test_halted_users_dropped_event_does_not_change_the_new_items_order():
    def run_with(first_event):
        e, store = engine([query()], Cost.zcdp(100.0, 1.0))
        store.grant("u", budget_vector(Cost.zcdp(1e-9, 1e-15)))  # u cannot afford anything: refused, halted
        recs = run(e, [first_event] + CROWD + CLOSE)
        return window3(recs), store

    with_u, store = run_with(ev("u", 1, ["x"]))
    assert store.get_user("u").halted  # u's event was dropped before the mechanism
    without_u, _ = run_with(ev("u", 1, []))  # same user, same time, no item
    assert set(with_u["new_items"]) == set(without_u["new_items"]) == {"x", "y"}
    assert with_u["new_items"] == without_u["new_items"], (with_u["new_items"], without_u["new_items"])
