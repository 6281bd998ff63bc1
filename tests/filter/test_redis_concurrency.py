"""Concurrency: 4 processes (spawn) charge overlapping users against one real redis-server at the same time.

Workload designed so that the outcome does not depend on the interleaving: every charge costs the same vector
c and every budget is exactly 10·c, so under filter (7) a user is admitted exactly min(requests, 10) times and
is halted iff requests > 10 (the 11th request halts, and HALT is sticky). Any lost update or check/charge race
in the store would show up as a user admitted more than 10 times, spent > budget, or a mismatch with the serial
run on the in-memory store.
"""

from __future__ import annotations

import multiprocessing as mp

import numpy as np
import pytest

from streamdp.filter.memory import MemoryBudgetStore
from streamdp.filter.redis_store import RedisBudgetStore
from streamdp.noise.generator import unsafe_seeded_generator

pytestmark = pytest.mark.integration

N_USERS = 400
N_PROCS = 4
ROUNDS = 30
COST = np.array([7, 3, 0, 0, 0, 11], dtype=np.int64)
BUDGET = 10 * COST


def _batches(proc: int) -> list[list[str]]:
    """Process ``proc``'s batches: user i is asked with probability 0.4·i/N (requests from 0 to ~48 in total)."""
    rng = unsafe_seeded_generator(9100 + proc)
    p = 0.4 * np.arange(N_USERS) / N_USERS
    out = []
    for _ in range(ROUNDS):
        pick = np.flatnonzero(rng.random(N_USERS) < p)
        rng.shuffle(pick)
        out.append([f"u{i}" for i in pick])
    return out


def _worker(url: str, proc: int, barrier, q) -> None:
    st = RedisBudgetStore.from_url(url, chunk=25)  # small chunks: many interleaved script calls
    barrier.wait()
    masks = [st.admit(f"w{proc}", seq, batch, COST).tolist() for seq, batch in enumerate(_batches(proc), 1)]
    q.put((proc, masks))
    st.close()


def test_four_processes_never_overspend(redis_url):
    RedisBudgetStore.from_url(redis_url, default_budget=BUDGET).close()
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(N_PROCS)
    q = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(redis_url, p, barrier, q)) for p in range(N_PROCS)]
    for p in procs:
        p.start()
    results = dict(q.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(30)
        assert p.exitcode == 0

    requests = {f"u{i}": 0 for i in range(N_USERS)}
    admitted = dict.fromkeys(requests, 0)
    for proc in range(N_PROCS):
        for batch, mask in zip(_batches(proc), results[proc]):
            for u, ok in zip(batch, mask):
                requests[u] += 1
                admitted[u] += ok
    assert min(requests.values()) <= 5 and max(requests.values()) >= 30  # both regimes are present

    st = RedisBudgetStore.from_url(redis_url)
    serial = MemoryBudgetStore(BUDGET)
    for proc in range(N_PROCS):
        for seq, batch in enumerate(_batches(proc), 1):
            serial.admit(f"w{proc}", seq, batch, COST)
    recs = {r.user: r for r in st.iter_users()}
    n_halted = 0
    for u, req in requests.items():
        if req == 0:
            assert u not in recs
            continue
        want = min(req, 10)
        assert admitted[u] == want, u
        r, s = recs[u], serial.get_user(u)
        assert r.spent.tolist() == (want * COST).tolist() == s.spent.tolist(), u
        assert (r.spent <= r.budget).all()
        assert r.halted == (req > 10) == s.halted, u
        n_halted += r.halted
    assert 0 < n_halted < len(recs)
