"""Faults: the real redis-server is killed (SIGKILL) mid-run and restarted (docs/contract.md §6).

The server runs with ``--appendonly yes --appendfsync always`` (every write is fsynced before its reply), so its
data survives the kill. While it is down every store call raises StoreError and nothing is charged; after the
restart the state is exactly what it was, and retrying the interrupted (scope, seq) batches converges to the
state and the answers of an undisturbed serial run (idempotency: a chunk applied before the kill is answered,
not charged, on the retry).
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from streamdp.accounting.cost import N_COMPONENTS
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.filter.redis_store import RedisBudgetStore
from streamdp.filter.store import StoreError
from streamdp.noise.generator import unsafe_seeded_generator

pytestmark = pytest.mark.integration

BUDGET = np.array([1000, 50, 0, 0, 0, 0], dtype=np.int64)


def _batch(seq: int, n_users: int, size: int):
    """Batch ``seq``: users, reserved costs and actual (settled) costs, all deterministic in seq."""
    rng = unsafe_seeded_generator(5000 + seq)
    users = [f"u{i}" for i in rng.choice(n_users, size=size, replace=False)]
    reserve = np.zeros((size, N_COMPONENTS), dtype=np.int64)
    reserve[:, 0] = rng.integers(0, 120, size)
    reserve[:, 1] = rng.integers(0, 4, size)
    actual = reserve // rng.integers(1, 4, (size, 1))
    return users, reserve, actual


def _state(st) -> dict:
    return {u.user: (u.spent.tolist(), u.budget.tolist(), u.halted) for u in st.iter_users()}


def _retry(fn, srv, errors: list):
    """The engine's loop: on StoreError, wait (restart the server if it is down, as an operator/supervisor
    would) and retry the same call."""
    while True:
        try:
            return fn()
        except StoreError as e:
            errors.append(e)
            if srv.proc.poll() is not None:
                srv.start()
            time.sleep(0.01)


def test_killed_server_raises_storeerror_then_resumes_with_same_state(spawn_redis):
    srv = spawn_redis(persistent=True)
    st = RedisBudgetStore.from_url(srv.url, default_budget=BUDGET, connect_timeout=0.5, socket_timeout=2.0)
    ref = MemoryBudgetStore(BUDGET)
    n_users, size = 300, 120
    for seq in range(1, 11):
        users, res, act = _batch(seq, n_users, size)
        np.testing.assert_array_equal(st.admit("w", seq, users, res), ref.admit("w", seq, users, res))
        st.settle("w", seq, users, act)
        ref.settle("w", seq, users, act)
    st.put_release("w|0|10", b"release-10")
    st.grant("vip", BUDGET * 3)
    ref.grant("vip", BUDGET * 3)
    before = _state(st)
    assert before == _state(ref)

    srv.kill()
    users, res, act = _batch(11, n_users, size)
    for call in (lambda: st.admit("w", 11, users, res), lambda: st.settle("w", 10, users, act),
                 lambda: st.get_user("u1"), lambda: st.put_release("w|0|11", b"x"), lambda: st.ledger(),
                 lambda: st.grant("vip", BUDGET)):
        with pytest.raises(StoreError):
            call()

    srv.start()
    assert _state(st) == before  # the data survived the kill, and the failed calls charged nothing
    assert st.get_release("w|0|10") == b"release-10" and st.get_release("w|0|11") is None
    assert [e["action"] for e in st.ledger()] == ["grant"]
    for seq in range(11, 21):
        users, res, act = _batch(seq, n_users, size)
        np.testing.assert_array_equal(st.admit("w", seq, users, res), ref.admit("w", seq, users, res))
        st.settle("w", seq, users, act)
        ref.settle("w", seq, users, act)
    assert _state(st) == _state(ref)


def test_kill_during_batches_retry_converges_to_undisturbed_run(spawn_redis):
    """A thread SIGKILLs the server while 5000-user batches (5 script calls each) are being admitted and
    settled; the retry loop restarts it and retries. Answers and final state equal an undisturbed serial run."""
    srv = spawn_redis(persistent=True)
    st = RedisBudgetStore.from_url(srv.url, default_budget=BUDGET, chunk=1000, connect_timeout=0.5,
                                   socket_timeout=2.0)
    ref = MemoryBudgetStore(BUDGET)
    n_users, size = 8000, 5000
    batches = [_batch(seq, n_users, size) for seq in range(1, 13)]
    killed = []

    def killer():
        time.sleep(0.15)
        srv.kill()
        killed.append(time.time())

    errors: list[StoreError] = []
    t = threading.Thread(target=killer)
    t.start()
    masks = []
    for seq, (users, res, act) in enumerate(batches, 1):
        masks.append(_retry(lambda: st.admit("w", seq, users, res), srv, errors))
        _retry(lambda: st.settle("w", seq, users, act), srv, errors)
    t.join()
    assert killed, "the server was never killed"
    assert errors, "the kill landed after the run; the test did not exercise a failure"
    for seq, (users, res, act) in enumerate(batches, 1):
        np.testing.assert_array_equal(masks[seq - 1], ref.admit("w", seq, users, res), err_msg=f"seq {seq}")
        ref.settle("w", seq, users, act)
    assert _state(st) == _state(ref)
