"""The in-memory store's admission by the engine's interned ids (``BudgetStore.admit_ids`` / ``settle_ids``).

The fast path maps table ids → store ids through a cached int array; it must be indistinguishable from admitting by
name: same masks, same spend/halts/reservations, same store ids (user order), same errors — over random batches
with replays, stale batches, settles, several scopes, budget overrides, users named outside the table, a table that
grows and a table object that is replaced (an engine restored from a snapshot).
"""

from __future__ import annotations

import numpy as np
import pytest

from streamdp.accounting.cost import N_COMPONENTS
from streamdp.engine.query import Names
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.filter.store import BudgetStore
from streamdp.noise.generator import unsafe_seeded_generator


def _state(st: MemoryBudgetStore) -> dict:
    d = st.to_json()
    for e in d["ledger"]:
        e.pop("ts", None)
    return d


class ByName(MemoryBudgetStore):
    """Admission by name only: overriding admit/settle turns the fast path off (the subclass keeps its say)."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.calls = 0

    def admit(self, scope, seq, users, costs, digest=None):
        self.calls += 1
        return super().admit(scope, seq, users, costs, digest=digest)

    def settle(self, scope, seq, users, actual):
        self.calls += 1
        super().settle(scope, seq, users, actual)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_id_path_equals_name_path_on_random_batches(seed):
    rng = unsafe_seeded_generator(9100 + seed)
    default = [int(x) for x in rng.integers(5, 40, N_COMPONENTS)]
    fast, slow = MemoryBudgetStore(np.array(default)), ByName(np.array(default))
    if seed == 3:  # a store that already knows users when the table is first bound (loaded from a file)
        for st in (fast, slow):
            st.grant("n7", [50] * N_COMPONENTS)
            st.admit("engine", 1, ["n3", "n1"], [[1] * N_COMPONENTS] * 2)
    table = Names()
    table.ids([f"n{i}" for i in range(30)])
    seqs = {"engine": 1, "other": 1}
    n_settle = n_refused = n_replay = 0
    for step in range(120):
        if step % 17 == 5:  # the engine interns new users
            table.ids([f"n{i}" for i in range(len(table), len(table) + int(rng.integers(1, 40)))])
        if step % 29 == 11:  # restored engine: same names, new table object (the cache must follow)
            table = Names.from_state(table.state())
        if step % 23 == 7:  # an operator grants a budget by name, possibly to a user the store has not seen
            u = f"n{int(rng.integers(0, len(table) + 5))}"
            b = [int(x) for x in rng.integers(0, 60, N_COMPONENTS)]
            fast.grant(u, b)
            slow.grant(u, b)
        scope = "engine" if rng.random() < 0.8 else "other"
        replay = rng.random() < 0.1 and seqs[scope] > 2
        if replay:
            seq = seqs[scope] - 1  # a replay of the previous batch, or (for other users) a stale one
            n_replay += 1
        else:
            seqs[scope] += 1
            seq = seqs[scope]
        m = int(rng.integers(0, min(60, len(table)) + 1))
        ids = rng.choice(len(table), size=m, replace=False)
        if rng.random() < 0.7:
            ids = np.sort(ids)  # the engine's batches are sorted; others must work too
        costs = rng.integers(0, 6, (m, N_COMPONENTS)) * (rng.random((m, N_COMPONENTS)) < 0.5)
        costs[rng.random(m) < 0.1] = 0
        a = fast.admit_ids(scope, seq, ids, costs, table)
        b = slow.admit_ids(scope, seq, ids, costs, table)
        np.testing.assert_array_equal(a, b)
        n_refused += int((~a).sum())
        if m and not replay and rng.random() < 0.5:  # settle some admitted users to at most their reservation
            sel = np.flatnonzero(a)
            sel = sel[rng.random(sel.size) < 0.7]
            actual = (costs[sel] * rng.random((sel.size, N_COMPONENTS))).astype(np.int64)
            fast.settle_ids(scope, seq, ids[sel], actual, table)
            slow.settle_ids(scope, seq, ids[sel], actual, table)
            n_settle += 1
        if step % 10 == 0:
            assert _state(fast) == _state(slow)
    assert _state(fast) == _state(slow)  # spend, halts, reservations, overrides, user order (store ids)
    for u in slow.iter_users():
        f = fast.get_user(u.user)
        assert f.halted == u.halted
        np.testing.assert_array_equal(f.spent, u.spent)
    assert slow.calls > 100 and n_settle > 20 and n_refused > 0 and n_replay > 3


def test_id_path_survives_save_and_load(tmp_path):
    table = Names()
    table.ids(["a", "b", "c"])
    st = MemoryBudgetStore(np.full(N_COMPONENTS, 10), path=str(tmp_path / "s.json"))
    one = np.ones((2, N_COMPONENTS), dtype=np.int64)
    assert st.admit_ids("engine", 1, np.array([0, 2]), one, table).tolist() == [True, True]
    st.save()
    st2 = MemoryBudgetStore.load(str(tmp_path / "s.json"))
    # a loaded store resolves the table's ids through its names: the same users, charged again
    assert st2.admit_ids("engine", 2, np.array([0, 1, 2]), np.ones((3, N_COMPONENTS), np.int64), table).all()
    assert st2.get_user("a").spent.tolist() == [2] * N_COMPONENTS
    assert st2.get_user("b").spent.tolist() == [1] * N_COMPONENTS
    assert [u.user for u in st2.iter_users()] == ["a", "c", "b"]


def test_subclass_admit_keeps_its_say():
    table = Names()
    table.ids(["x", "y"])
    st = ByName(np.full(N_COMPONENTS, 10))
    st.admit_ids("engine", 1, np.array([0, 1]), np.ones((2, N_COMPONENTS), np.int64), table)
    st.settle_ids("engine", 1, np.array([1]), np.zeros((1, N_COMPONENTS), np.int64), table)
    assert st.calls == 2


def test_default_implementation_goes_through_names():
    class Recorder(BudgetStore):
        def __getattribute__(self, name):
            if name in ("admit", "settle"):
                def rec(scope, seq, users, costs, **kw):
                    object.__getattribute__(self, "seen").append((name, scope, seq, list(users), kw))
                    return np.ones(len(users), dtype=bool)
                return rec
            return object.__getattribute__(self, name)

    Recorder.__abstractmethods__ = frozenset()
    r = Recorder()
    r.seen = []
    table = Names()
    table.ids(["p", "q", "r"])
    r.admit_ids("s", 4, np.array([2, 0]), np.zeros((2, N_COMPONENTS), np.int64), table, digest="0123abcd")
    r.settle_ids("s", 4, np.array([1]), np.zeros((1, N_COMPONENTS), np.int64), table)
    assert r.seen == [("admit", "s", 4, ["r", "p"], {"digest": "0123abcd"}), ("settle", "s", 4, ["q"], {})]


def test_id_path_errors():
    table = Names()
    table.ids(["a", "b"])
    st = MemoryBudgetStore(np.full(N_COMPONENTS, 10))
    one = np.ones((2, N_COMPONENTS), dtype=np.int64)
    with pytest.raises(ValueError, match="twice"):
        st.admit_ids("engine", 1, np.array([1, 1]), one, table)
    with pytest.raises(ValueError, match="user_ids"):
        st.admit_ids("engine", 1, np.array([0, 2]), one, table)  # not an id of the table
    with pytest.raises(ValueError, match="user_ids"):
        st.admit_ids("engine", 1, np.array([-1, 0]), one, table)
    with pytest.raises(ValueError, match="user_ids"):
        st.admit_ids("engine", 1, np.array([0.0, 1.0]), one, table)
    with pytest.raises(ValueError, match="costs"):
        st.admit_ids("engine", 1, np.array([0, 1]), one.astype(float), table)
    with pytest.raises(ValueError, match="seq"):
        st.admit_ids("engine", 2**53, np.array([0, 1]), one, table)
    assert st.get_user("a") is None  # nothing was registered by the refused batches
    assert st.admit_ids("engine", 1, np.array([0, 1]), one, table).tolist() == [True, True]
    with pytest.raises(ValueError, match="twice"):
        st.settle_ids("engine", 1, np.array([0, 0]), one, table)
    with pytest.raises(ValueError, match="reservation of user 'b'"):
        st.settle_ids("engine", 1, np.array([0, 1]), np.array([[0] * N_COMPONENTS, [2] * N_COMPONENTS]), table)
    st.settle_ids("engine", 1, np.array([1]), np.zeros((1, N_COMPONENTS), np.int64), table)
    assert st.get_user("b").spent.tolist() == [0] * N_COMPONENTS
    assert st.admit_ids("engine", 3, np.zeros(0, np.int64), np.zeros((0, N_COMPONENTS), np.int64), table).size == 0


def test_unknown_user_settle_is_a_noop_and_registers_nobody():
    table = Names()
    table.ids(["a", "b"])
    st = MemoryBudgetStore(np.full(N_COMPONENTS, 10))
    st.settle_ids("engine", 1, np.array([0, 1]), np.zeros((2, N_COMPONENTS), np.int64), table)
    assert list(st.iter_users()) == [] and st.to_json()["scopes"] == {}


def test_user_named_outside_the_table_is_not_duplicated():
    """A user the store first sees by name (an operator's grant) is the same user when the table names them."""
    table = Names()
    table.ids(["a", "b"])
    st = MemoryBudgetStore(np.full(N_COMPONENTS, 10))
    assert st.admit_ids("engine", 1, np.array([0, 1]), np.ones((2, N_COMPONENTS), np.int64), table).all()
    st.grant("c", np.full(N_COMPONENTS, 3))
    table.ids(["c"])
    # c's own budget (3), not the default (10), decides
    assert st.admit_ids("engine", 2, np.array([2]), np.full((1, N_COMPONENTS), 4), table).tolist() == [False]
    assert [u.user for u in st.iter_users()] == ["a", "b", "c"] and st.get_user("c").halted


def test_replaced_table_with_other_names_for_the_same_ids():
    """An engine restored from an OLDER snapshot re-assigns later ids to other names: the id cache must not carry
    over to the new table object."""
    t1 = Names()
    t1.ids(["a", "b"])
    t2 = Names.from_state(t1.state())
    t1.ids(["c"])  # id 2 = "c" in t1
    t2.ids(["d"])  # id 2 = "d" in t2
    st = MemoryBudgetStore(np.full(N_COMPONENTS, 10))
    st.admit_ids("engine", 1, np.array([2]), np.full((1, N_COMPONENTS), 7), t1)
    st.admit_ids("engine", 2, np.array([2]), np.full((1, N_COMPONENTS), 1), t2)
    assert st.get_user("c").spent.tolist() == [7] * N_COMPONENTS
    assert st.get_user("d").spent.tolist() == [1] * N_COMPONENTS
