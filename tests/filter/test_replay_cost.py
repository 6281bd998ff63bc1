"""A replayed admit may not ask an admitted user for more than their open reservation (the store contract,
``streamdp/filter/store.py``; both stores).

The store answers a replay of a batch with its first outcome and charges nothing: that is how a retry after a crash
avoids a double charge, and it is right only when the replay is the release that was charged. Replays are
deterministic, so a replay that asks more than was reserved is a bug (or a configuration the scope should have
told apart: tests/filter/test_admission_scope.py); it would release more than the users paid for. The stores now
refuse it (``ReplayCostExceeded``) while the reservation is open, which is always for queries whose cost is known
before the release (they never settle) and, for the others, between the admit and the settle of a window. Once
settled, the stored amount is the actual cost, below any reservation a replay asks: not checkable (documented).
"""

from __future__ import annotations

import orjson
import pytest

from streamdp.accounting.cost import INT64_MAX, N_COMPONENTS
from streamdp.filter.store import ReplayCostExceeded

Z = [0] * N_COMPONENTS


def vec(i: int, v: int) -> list[int]:
    out = list(Z)
    out[i] = v
    return out


def spent(st, user):
    return [int(x) for x in st.get_user(user).spent]


@pytest.mark.parametrize("component", range(N_COMPONENTS))
def test_a_replay_asking_more_in_any_component_is_refused_and_charges_nothing(make_store, component):
    st = make_store([10 ** 6] * N_COMPONENTS)
    assert st.admit("q", 4, ["a", "b"], [vec(component, 40), vec(component, 7)]).tolist() == [True, True]
    with pytest.raises(ReplayCostExceeded, match="more than the open reservation"):
        st.admit("q", 4, ["a", "b"], [vec(component, 40), vec(component, 8)])
    assert spent(st, "a") == vec(component, 40) and spent(st, "b") == vec(component, 7)
    # the state is untouched: the faithful replay, and one asking less, still get the first outcome for free
    assert st.admit("q", 4, ["a", "b"], [vec(component, 40), vec(component, 7)]).tolist() == [True, True]
    assert st.admit("q", 4, ["b"], [vec(component, 3)]).tolist() == [True]
    assert spent(st, "a") == vec(component, 40) and spent(st, "b") == vec(component, 7)


def test_a_user_admitted_free_cannot_be_replayed_at_a_cost(make_store):
    st = make_store([100] * N_COMPONENTS)
    assert st.admit("q", 1, ["a"], [Z]).tolist() == [True]
    with pytest.raises(ReplayCostExceeded):
        st.admit("q", 1, ["a"], [vec(0, 1)])
    assert spent(st, "a") == Z


def test_amounts_beyond_two_to_the_53_are_compared_exactly(make_store):
    """The Redis script compares decimal strings (limbs past 2^53, redis_scripts.py): 2^53 + 2 > 2^53 + 1 although
    both are the same double."""
    big = 2 ** 53 + 1
    st = make_store([INT64_MAX] * N_COMPONENTS)
    st.admit("q", 1, ["a"], [vec(1, big)])
    with pytest.raises(ReplayCostExceeded):
        st.admit("q", 1, ["a"], [vec(1, big + 1)])
    assert st.admit("q", 1, ["a"], [vec(1, big)]).tolist() == [True]
    assert spent(st, "a") == vec(1, big)


def test_refused_users_stale_replays_and_settled_batches_are_not_checked(make_store):
    st = make_store([50] * N_COMPONENTS)
    assert st.admit("q", 1, ["poor", "s"], [vec(0, 60), vec(0, 40)]).tolist() == [False, True]
    # a refused user: the replay is refused whatever it asks (no data of theirs is released)
    assert st.admit("q", 1, ["poor"], [vec(0, 99)]).tolist() == [False]
    # settled: the stored amount is the actual cost (10); a replay asks the reservation (40) — not checkable
    st.settle("q", 1, ["s"], [vec(0, 10)])
    assert st.admit("q", 1, ["s"], [vec(0, 40)]).tolist() == [True]
    # a stale replay (the user's last batch in the scope is later): answered "admitted iff not halted", unchecked
    st.admit("q", 2, ["s"], [vec(0, 5)])
    assert st.admit("q", 1, ["s"], [vec(0, 45)]).tolist() == [True]
    assert spent(st, "s") == vec(0, 15)


def test_the_check_applies_in_every_chunk_and_through_the_id_path(make_store):
    from streamdp.engine.query import Names

    st = make_store([100] * N_COMPONENTS, chunk=2)
    table = Names()
    ids = table.ids([f"u{i}" for i in range(5)])
    costs = [vec(0, 10 + i) for i in range(5)]
    assert st.admit_ids("q", 3, ids, costs, table).all()
    worse = [list(c) for c in costs]
    worse[4][0] += 1  # the last user, in the last chunk of two
    with pytest.raises(ReplayCostExceeded):
        st.admit_ids("q", 3, ids, worse, table)
    assert [spent(st, f"u{i}")[0] for i in range(5)] == [10, 11, 12, 13, 14]


def test_the_engine_refuses_a_replay_that_reserves_more_and_logs_no_release(make_store):
    """A nondeterministic replay, simulated: the same engine configuration closes the same window again after a
    crash (the release never reached the log), but its query now reserves twice as much. Nothing may go out."""
    from streamdp.accounting.cost import budget_vector
    from streamdp.adapters.kafka.checkpoint import DeferredReleaseLog
    from streamdp.config.loader import parse_config
    from streamdp.engine.engine import ReleaseEngine
    from streamdp.input.events import parse_batch

    raw = {"service": {"window_seconds": 60.0, "origin": 1.7e9, "horizon": 8, "unsafe_test_seed": 3},
           "budget": {"zcdp_rho": 100.0, "zcdp_delta": 1e-3},
           "query": [{"id": "counts", "kind": "continual_counts", "sigma": 1.0}]}
    c = parse_config(raw)
    store = make_store(budget_vector(c.budget))
    batch, _ = parse_batch([orjson.dumps({"user": "u", "ts": 1.7e9 + 10.0, "items": ["x"]})])

    def run(inflate: bool):
        deferred = DeferredReleaseLog(store)
        eng = ReleaseEngine(c.engine_config(), c.build_queries(), deferred)
        if inflate:
            q = eng.queries[0]
            prepare = q.prepare

            def more(w, rng):
                r = prepare(w, rng)
                r.costs = r.costs * 2
                return r
            q.prepare = more
        eng.ingest(batch)
        try:
            return eng.flush()
        finally:
            got = dict(deferred.releases)
            deferred.discard()  # the crash: no checkpoint
            run.logged = got

    run(False)
    first = spent(store, "u")
    with pytest.raises(ReplayCostExceeded):
        run(True)
    assert run.logged == {} and spent(store, "u") == first
