"""The Kafka worker stops (exit 7, nothing published) when a replay asks more than its open reservation
(``ReplayCostExceeded``, tests/filter/test_replay_cost.py): no retry can turn it into the release that was charged.

Driven step by step against the real Redis with the recording stand-ins of test_worker_protocol_gaps3.py: a fault
after the admit (a Redis error) makes the worker restore its checkpoint and replay the window; the replay is made
nondeterministic by hand (the counts query reserves twice as much)."""

from __future__ import annotations

from test_worker_protocol_gaps3 import OUT, Trace, _fetched, _input, _worker

from streamdp.adapters.kafka.topics import EXIT_REPLAY_COST
from streamdp.filter.redis_store import RedisBudgetStore


def _spent(redis_url: str) -> dict:
    st = RedisBudgetStore.from_url(redis_url)
    try:
        return {u.user: [int(x) for x in u.spent] for u in st.iter_users()}
    finally:
        st.close()


async def test_a_replay_that_reserves_more_stops_the_worker_with_nothing_published(redis_url):
    events, _ = _input()
    trace = Trace()
    w = _worker(redis_url, trace, fault="after_admit")
    await w._recover(first=True)
    assert await w._safe(w._step, [_fetched(w, events)]) is False  # the fault: restored, to be replayed
    charged = _spent(redis_url)
    assert charged and w.engine is not None and w.exit_code == 0
    q = w.engine.queries[0]
    prepare = q.prepare

    def more(win, rng):
        r = prepare(win, rng)
        r.costs = r.costs * 2
        return r
    q.prepare = more
    assert await w._safe(w._step, [_fetched(w, events)]) is False
    assert w.exit_code == EXIT_REPLAY_COST == 7 and w.stopping.is_set() and w.engine is None
    assert not [c for c in trace.calls if c[0] == "send" and c[1].startswith(OUT)]  # nothing published
    assert not [c for c in trace.calls if c[0] == "checkpoint"]
    assert _spent(redis_url) == charged  # nobody charged again
