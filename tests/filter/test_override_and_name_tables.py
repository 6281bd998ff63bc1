"""Budget stores: per-user overrides inside a batch that shares one cost vector, and the engine's name tables.

Runs against the in-memory store AND the Redis store on a real redis-server (fixture ``make_store``). Expected
outcomes are worked out by hand from the filter, Liang–Yi (adaptive budgeting) Alg. 1 eq. (7): admit iff spent + cost ≤ budget in every
component, with the user's own budget when an override is set (``grant``) and the default otherwise; a refused
user is HALTed for good (docs/contract.md §3 "Filter").

Two shortcuts of the Redis store are guarded here. The admit script memoises a judgement per spent value while a
cost vector is shared by several users (memo on when m·8 ≤ n, m = distinct cost vectors, n = users in the chunk):
that memo is valid for the default budget only, never for a user with an override. The Python side caches the
ids of HALTed users per name table: ids are positions in ONE table, so a new table must start with no halted ids.
"""

from __future__ import annotations

import numpy as np
import pytest

from streamdp.accounting.cost import N_COMPONENTS
from streamdp.engine.query import Names


def vec0(x: int) -> np.ndarray:
    """A fixed-point cost/budget vector with ``x`` in the first component (zCDP ρ) and 0 elsewhere."""
    v = np.zeros(N_COMPONENTS, dtype=np.int64)
    v[0] = x
    return v


@pytest.mark.parametrize("pos", [0, 8, 15])
def test_override_user_among_many_sharing_one_cost_vector(make_store, pos):
    """Guards: a user whose override budget is BELOW the default is judged against the override, wherever they
    sit in a batch of 16 users sharing one cost vector (m = 1, 8·m ≤ 16: the Redis script memoises per spent
    value). Position 0 is judged before any default user (a memoised refusal would then refuse everyone after
    it), 8 and 15 after default users with the same spent value (a memoised admission would admit them).

    Hand values (eq. (7)), default budget 10, cost 5: batch 1 — everybody 0 + 5 ≤ 10, admitted, spent 5. Then
    ``grant(users[pos], 5)``. Batch 2 — default users 5 + 5 = 10 ≤ 10, admitted, spent 10; the override user
    5 + 5 = 10 > 5, refused and HALTed, spent stays 5.
    """
    st = make_store(vec0(10))
    users = [f"u{i:02d}" for i in range(16)]
    cost = vec0(5)
    assert st.admit("s", 1, users, np.tile(cost, (16, 1))).tolist() == [True] * 16
    st.grant(users[pos], vec0(5))  # lowered to exactly what they have already spent
    got = st.admit("s", 2, users, np.tile(cost, (16, 1)))
    want = [i != pos for i in range(16)]
    assert got.tolist() == want
    rec = st.get_user(users[pos])
    assert rec.halted and rec.spent[0] == 5 and rec.budget[0] == 5
    for i, u in enumerate(users):
        if i != pos:
            r = st.get_user(u)
            assert r.spent[0] == 10 and not r.halted


def test_new_name_table_does_not_inherit_halted_ids(make_store):
    """Guards: HALTs remembered by table id (``admit_ids``) belong to that table only. With a new table, id 0 is
    a different user, who must be judged on their own budget; the halted user stays halted under their new id.

    Hand values (eq. (7)), default budget 10: table 1 = [a]; a asks 20 > 10 → refused, HALTed, spent 0. Table 2 =
    [b, a] (b is now id 0, a id 1); b asks 5: 0 + 5 ≤ 10 → admitted, spent 5; a asks 5: HALTed for good → refused
    (0 + 5 ≤ 10 would fit: the refusal is the halt, not the budget), spent stays 0.
    """
    st = make_store(vec0(10))
    t1 = Names()
    assert t1.ids(["a"]).tolist() == [0]
    assert st.admit_ids("s", 1, np.array([0]), vec0(20)[None, :], t1).tolist() == [False]
    assert st.get_user("a").halted
    t2 = Names()
    assert t2.ids(["b", "a"]).tolist() == [0, 1]
    got = st.admit_ids("s", 2, np.array([0, 1]), np.tile(vec0(5), (2, 1)), t2)
    assert got.tolist() == [True, False]
    b = st.get_user("b")
    assert b.spent[0] == 5 and not b.halted
    a = st.get_user("a")
    assert a.halted and a.spent[0] == 0
