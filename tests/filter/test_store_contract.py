"""Contract tests of every budget store (streamdp/filter/store.py module doc; Liang–Yi (adaptive budgeting) Alg. 1, filter eq. (7)).

Each test runs against the in-memory store AND the Redis store on a real redis-server (fixture ``make_store``).
Expected outcomes are recomputed here from eq. (7) — admit iff spent + cost ≤ budget in every component — with
plain Python integers, never by asking the store under test.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from streamdp.accounting.cost import (COMPONENTS, INT64_MAX, LOSS_SCALE, N_COMPONENTS, Cost, budget_to_fixed,
                                     budget_vector)
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.filter.store import DefaultBudgetMissing, Fenced
from streamdp.noise.generator import unsafe_seeded_generator

Z = [0] * N_COMPONENTS


def vec(**kw) -> list[int]:
    v = [0] * N_COMPONENTS
    for k, x in kw.items():
        v[COMPONENTS.index(k)] = x
    return v


def spent(st, user) -> list[int]:
    return st.get_user(user).spent.tolist()


def halted(st, user) -> bool:
    return st.get_user(user).halted


# ---- eq. (7): admit iff spent + cost <= budget, componentwise ----------------------------------------------


def test_random_batches_follow_filter_eq7(make_store):
    """Random budgets, overrides and costs (some components zero, some all-zero rows) over many batches: every
    outcome and every spent vector equals a plain-integer model of Liang–Yi (adaptive budgeting) Alg. 1 with filter (7)."""
    rng = unsafe_seeded_generator(7001)
    default = [int(x) for x in rng.integers(0, 60, N_COMPONENTS)]
    st = make_store(default)
    users = [f"u{i}" for i in range(40)]
    budget = {u: list(default) for u in users}
    for u in users[:10]:  # per-user overrides
        b = [int(x) for x in rng.integers(0, 80, N_COMPONENTS)]
        st.grant(u, b)
        budget[u] = b
    model_spent = {u: [0] * N_COMPONENTS for u in users}
    model_halted = {u: False for u in users}
    n_admit = n_halt = 0
    for seq in range(1, 31):
        batch = [users[i] for i in rng.choice(len(users), size=int(rng.integers(1, len(users))), replace=False)]
        costs = rng.integers(0, 8, (len(batch), N_COMPONENTS)) * (rng.random((len(batch), N_COMPONENTS)) < 0.6)
        costs[rng.random(len(batch)) < 0.1] = 0  # all-zero rows
        mask = st.admit("q", seq, batch, costs)
        assert mask.dtype == bool and mask.shape == (len(batch),)
        for u, c, got in zip(batch, costs.tolist(), mask.tolist()):
            if model_halted[u]:
                want = False
            elif not any(c):
                want = True
            else:
                want = all(s + x <= b for s, x, b in zip(model_spent[u], c, budget[u]))
                if want:
                    model_spent[u] = [s + x for s, x in zip(model_spent[u], c)]
                else:
                    model_halted[u] = True
                    n_halt += 1
            n_admit += want
            assert got == want, (seq, u, c)
    assert n_admit > 100 and n_halt > 10  # the workload exercised both branches
    for u in users:
        rec = st.get_user(u)
        assert rec.spent.tolist() == model_spent[u]
        assert rec.halted == model_halted[u]
        assert rec.budget.tolist() == budget[u]
        assert (rec.spent <= rec.budget).all()


def test_exact_fit_admitted_and_one_unit_over_halts(make_store):
    b = budget_vector(Cost.zcdp(0.5, 1e-6))
    st = make_store(b)
    half = b // 2
    rest = b - half
    assert st.admit("q", 1, ["a", "b"], [half, half]).tolist() == [True, True]
    # a: exact fit (spent + cost == budget in every component) is admitted
    # b: over by one fixed-point unit in ONE component (δ) is refused and halted
    over = rest.copy()
    over[1] += 1
    assert st.admit("q", 2, ["a", "b"], [rest, over]).tolist() == [True, False]
    assert spent(st, "a") == b.tolist() and not halted(st, "a")
    assert spent(st, "b") == half.tolist() and halted(st, "b")  # nothing charged to the halted user


def test_every_component_is_checked(make_store):
    for i in range(N_COMPONENTS):
        st = make_store([5] * N_COMPONENTS)
        c = [1] * N_COMPONENTS
        c[i] = 6
        assert st.admit(f"q{i}", 1, [f"u{i}"], c).tolist() == [False], COMPONENTS[i]


def test_halt_is_sticky(make_store):
    st = make_store(vec(zcdp_rho=10))
    assert st.admit("q", 1, ["a"], vec(zcdp_rho=11)).tolist() == [False]
    assert halted(st, "a")
    # later batches: a zero-cost and a small cost that would fit are refused, in this and in other scopes
    assert st.admit("q", 2, ["a"], Z).tolist() == [False]
    assert st.admit("q", 3, ["a"], vec(zcdp_rho=1)).tolist() == [False]
    assert st.admit("other", 1, ["a"], vec(zcdp_rho=1)).tolist() == [False]
    assert spent(st, "a") == Z
    # a larger grant does not un-halt
    st.grant("a", vec(zcdp_rho=1000))
    assert st.admit("q", 4, ["a"], vec(zcdp_rho=1)).tolist() == [False]
    assert halted(st, "a")


def test_zero_cost_admitted_free(make_store):
    st = make_store(vec(zcdp_rho=10))
    assert st.admit("q", 1, ["a", "b"], Z).tolist() == [True, True]
    assert spent(st, "a") == Z and not halted(st, "a")
    # even with a zero budget, or after the budget was lowered below what was spent (Liang–Yi (adaptive budgeting) Alg. 1: R = 0 → NULL)
    st.grant("z", Z)
    assert st.admit("q", 2, ["z"], Z).tolist() == [True]
    assert st.admit("q", 3, ["b"], vec(zcdp_rho=8)).tolist() == [True]
    st.grant("b", vec(zcdp_rho=5))
    assert st.admit("q", 4, ["b"], Z).tolist() == [True]
    assert not halted(st, "b") and spent(st, "b") == vec(zcdp_rho=8)
    # ... but any positive cost now halts b (spent already exceeds the lowered budget)
    assert st.admit("q", 5, ["b"], vec(emd_delta=1)).tolist() == [False]
    assert halted(st, "b")


def test_unknown_user_is_none_until_named(make_store):
    st = make_store(vec(zcdp_rho=3))
    assert st.get_user("nobody") is None
    st.admit("q", 1, ["a"], Z)
    rec = st.get_user("a")
    assert rec.user == "a" and rec.spent.tolist() == Z and rec.budget.tolist() == vec(zcdp_rho=3)
    assert [u.user for u in st.iter_users()] == ["a"]


# ---- budgets ------------------------------------------------------------------------------------------------


def test_grant_overrides_default(make_store):
    st = make_store(vec(zcdp_rho=10))
    st.grant("rich", vec(zcdp_rho=100, zcdp_delta=5))
    assert st.admit("q", 1, ["rich", "poor"], vec(zcdp_rho=50)).tolist() == [True, False]
    assert st.get_user("rich").budget.tolist() == vec(zcdp_rho=100, zcdp_delta=5)
    # changing the default moves users without an override only
    st.set_default_budget(vec(zcdp_rho=20))
    assert st.default_budget().tolist() == vec(zcdp_rho=20)
    assert st.admit("q", 2, ["rich", "new"], vec(zcdp_rho=15)).tolist() == [True, True]
    assert st.get_user("rich").budget.tolist() == vec(zcdp_rho=100, zcdp_delta=5)
    assert st.get_user("new").budget.tolist() == vec(zcdp_rho=20)
    # a grant can lower a budget: the next positive cost that does not fit halts
    st.grant("rich", vec(zcdp_rho=66))
    assert st.admit("q", 3, ["rich"], vec(zcdp_rho=2)).tolist() == [False]


def test_default_budget_zero_when_unset(make_store):
    """The embedded store's default is 0 until set: every positive cost is refused. A Redis store that holds no
    default refuses to decide (DefaultBudgetMissing) and writes nothing — never a halt (tests/filter/
    test_exactly_once.py has the lost default)."""
    st = make_store()
    assert st.default_budget().tolist() == Z
    if make_store.kind == "memory":
        assert st.admit("q", 1, ["a"], vec(cgp_rho=1)).tolist() == [False]
        return
    with pytest.raises(DefaultBudgetMissing):
        st.admit("q", 1, ["a"], vec(cgp_rho=1))
    assert st.get_user("a") is None
    st.set_default_budget(Z)
    assert st.admit("q", 1, ["a"], vec(cgp_rho=1)).tolist() == [False]


def test_infinite_budget_sentinel(make_store):
    """INT64_MAX (budget_to_fixed(inf)) admits every cost that keeps spent within int64."""
    inf = budget_to_fixed(float("inf"), LOSS_SCALE)
    assert inf == INT64_MAX
    st = make_store(vec(zcdp_rho=inf, zcdp_delta=inf))
    big = 2**62
    assert st.admit("q", 1, ["a"], vec(zcdp_rho=big, zcdp_delta=1)).tolist() == [True]
    assert st.admit("q", 2, ["a"], vec(zcdp_rho=INT64_MAX - big)).tolist() == [True]  # exactly INT64_MAX
    assert spent(st, "a") == vec(zcdp_rho=INT64_MAX, zcdp_delta=1)
    assert st.admit("q", 3, ["a"], vec(zcdp_rho=1)).tolist() == [False]


@pytest.mark.parametrize("b", [2**53 + 1, 2**60 + 1, 10**18 + 7, INT64_MAX - 2])
def test_exact_above_2_pow_53(make_store, b):
    """Amounts above 2^53 (not exact as doubles, hence not in Redis' Lua numbers) are compared exactly."""
    st = make_store(vec(zcdp_delta=b))
    assert st.admit("q", 1, ["a", "b"], [vec(zcdp_delta=b - 1), vec(zcdp_delta=b - 1)]).tolist() == [True, True]
    assert st.admit("q", 2, ["a", "b"], [vec(zcdp_delta=1), vec(zcdp_delta=2)]).tolist() == [True, False]
    assert spent(st, "a") == vec(zcdp_delta=b) and spent(st, "b") == vec(zcdp_delta=b - 1)
    assert st.admit("q", 3, ["a"], vec(zcdp_delta=1)).tolist() == [False]
    # settle exactly across the 2^53 boundary: reserve 2^53 + 3 over 2^53 − 1 spent, settle to 5
    st2 = st
    st2.grant("c", vec(cgp_delta=INT64_MAX))
    assert st2.admit("q", 4, ["c"], vec(cgp_delta=2**53 - 1)).tolist() == [True]
    assert st2.admit("q", 5, ["c"], vec(cgp_delta=2**53 + 3)).tolist() == [True]
    assert spent(st2, "c") == vec(cgp_delta=2**54 + 2)
    st2.settle("q", 5, ["c"], vec(cgp_delta=5))
    assert spent(st2, "c") == vec(cgp_delta=2**53 + 4)


def test_bad_input_raises_valueerror(make_store):
    st = make_store(vec(zcdp_rho=10))
    with pytest.raises(ValueError, match="twice"):
        st.admit("q", 1, ["a", "b", "a"], Z)
    with pytest.raises(ValueError, match="shape"):
        st.admit("q", 1, ["a", "b"], [[1, 2, 3]])
    with pytest.raises(ValueError, match="≥ 0"):
        st.admit("q", 1, ["a"], vec(zcdp_rho=-1))
    with pytest.raises(ValueError, match="fixed-point"):
        st.admit("q", 1, ["a"], [0.5, 0, 0, 0, 0, 0])  # a float cost would be truncated: refused
    with pytest.raises(ValueError, match="fixed-point"):
        st.settle("q", 1, ["a"], np.zeros(N_COMPONENTS))
    with pytest.raises(ValueError, match="seq"):
        st.admit("q", 2**53, ["a"], Z)
    with pytest.raises(ValueError, match="seq"):
        st.admit("q", 1.5, ["a"], Z)
    with pytest.raises(ValueError, match="budget"):
        st.grant("a", [1.0] * N_COMPONENTS)  # floats: forgot budget_vector
    with pytest.raises(ValueError, match="budget"):
        st.grant("a", vec(zcdp_rho=-1))
    with pytest.raises(ValueError, match="budget"):
        st.set_default_budget([1, 2])
    with pytest.raises(ValueError, match="budget"):
        st.set_default_budget([2**63] + [0] * 5)
    with pytest.raises(ValueError, match="twice"):
        st.settle("q", 1, ["a", "a"], Z)
    # nothing of the refused calls happened
    assert st.get_user("a") is None and st.get_user("b") is None
    assert st.default_budget().tolist() == vec(zcdp_rho=10)
    assert st.ledger() == []


# ---- reserve and settle -------------------------------------------------------------------------------------


def test_reserve_then_settle_to_actual(make_store):
    st = make_store(vec(zcdp_rho=100, zcdp_delta=10))
    reserve = vec(zcdp_rho=40, zcdp_delta=4)
    assert st.admit("topk", 1, ["a", "b", "c"], reserve).all()
    st.settle("topk", 1, ["a", "b"], [vec(zcdp_rho=10, zcdp_delta=4), Z])
    assert spent(st, "a") == vec(zcdp_rho=10, zcdp_delta=4)
    assert spent(st, "b") == Z
    assert spent(st, "c") == reserve  # never settled: keeps the worst case
    # the saving is reusable: a can now take 90 more
    assert st.admit("topk", 2, ["a"], vec(zcdp_rho=90)).tolist() == [True]


def test_settle_above_reservation_raises_and_changes_nothing(make_store):
    st = make_store(vec(zcdp_rho=100))
    st.admit("q", 1, ["a", "b"], vec(zcdp_rho=40))
    with pytest.raises(ValueError, match="exceeds the reservation"):
        st.settle("q", 1, ["a", "b"], [vec(zcdp_rho=10), vec(zcdp_rho=41)])
    assert spent(st, "a") == vec(zcdp_rho=40) and spent(st, "b") == vec(zcdp_rho=40)
    with pytest.raises(ValueError, match="exceeds the reservation"):
        st.settle("q", 1, ["a"], vec(zcdp_rho=1, cgp_rho=1))  # a component that was not reserved at all
    st.settle("q", 1, ["a", "b"], [vec(zcdp_rho=10), vec(zcdp_rho=40)])  # still open: settles now
    assert spent(st, "a") == vec(zcdp_rho=10) and spent(st, "b") == vec(zcdp_rho=40)


def test_settle_twice_and_settle_without_reservation_are_noops(make_store):
    st = make_store(vec(zcdp_rho=100))
    st.admit("q", 1, ["a"], vec(zcdp_rho=40))
    st.admit("q", 1, ["h"], vec(zcdp_rho=400))  # refused → halted, no reservation
    st.settle("q", 1, ["a"], vec(zcdp_rho=30))
    st.settle("q", 1, ["a"], vec(zcdp_rho=0))  # second settle: no-op (no refund below executed cost)
    assert spent(st, "a") == vec(zcdp_rho=30)
    st.settle("q", 1, ["h", "ghost"], Z)  # not admitted / unknown user: no-op
    assert spent(st, "h") == Z and st.get_user("ghost") is None
    st.settle("q", 7, ["a"], Z)  # no batch 7
    st.settle("other", 1, ["a"], Z)  # other scope
    assert spent(st, "a") == vec(zcdp_rho=30)
    # a newer batch in the scope replaces the open reservation: settling the old one is a no-op
    st.admit("q", 2, ["a"], vec(zcdp_rho=20))
    st.admit("q", 3, ["a"], vec(zcdp_rho=20))
    st.settle("q", 2, ["a"], Z)
    assert spent(st, "a") == vec(zcdp_rho=70)
    st.settle("q", 3, ["a"], vec(zcdp_rho=5))
    assert spent(st, "a") == vec(zcdp_rho=55)


def test_settle_of_zero_cost_admission(make_store):
    st = make_store(vec(zcdp_rho=100, zcdp_delta=10))
    assert st.admit("q", 1, ["a", "b"], [Z, vec(zcdp_delta=3)]).tolist() == [True, True]
    with pytest.raises(ValueError, match="exceeds the reservation"):
        st.settle("q", 1, ["a"], vec(zcdp_rho=1))  # nothing was reserved for a
    with pytest.raises(ValueError, match="exceeds the reservation"):
        st.settle("q", 1, ["b"], vec(zcdp_rho=1, zcdp_delta=3))
    st.settle("q", 1, ["a", "b"], [Z, vec(zcdp_delta=2)])
    assert spent(st, "a") == Z and spent(st, "b") == vec(zcdp_delta=2)


def test_replay_of_settled_batch_charges_nothing(make_store):
    st = make_store(vec(zcdp_rho=100))
    st.admit("q", 1, ["a"], vec(zcdp_rho=40))
    st.settle("q", 1, ["a"], vec(zcdp_rho=10))
    assert st.admit("q", 1, ["a"], vec(zcdp_rho=40)).tolist() == [True]
    st.settle("q", 1, ["a"], Z)
    assert spent(st, "a") == vec(zcdp_rho=10)


# ---- idempotency --------------------------------------------------------------------------------------------


def test_replay_same_batch_same_mask_no_charge(make_store):
    st = make_store(vec(zcdp_rho=10))
    users = ["a", "b", "c"]
    costs = [vec(zcdp_rho=4), vec(zcdp_rho=11), Z]
    first = st.admit("q", 1, users, costs)
    assert first.tolist() == [True, False, True]
    before = {u: (spent(st, u), halted(st, u)) for u in users}
    for _ in range(3):
        # a retry — even with different costs — returns the first outcome and charges nothing
        again = st.admit("q", 1, users, [vec(zcdp_rho=1)] * 3)
        assert again.tolist() == first.tolist()
    assert {u: (spent(st, u), halted(st, u)) for u in users} == before
    # a retry that adds a user the first attempt did not name applies to that user only
    mixed = st.admit("q", 1, ["c", "d", "a"], vec(zcdp_rho=6))
    assert mixed.tolist() == [True, True, True]
    assert spent(st, "d") == vec(zcdp_rho=6) and spent(st, "a") == vec(zcdp_rho=4)


def test_stale_seq_admitted_no_charge(make_store):
    """A stale replay (the user's state is of a later seq) is answered "admitted": a refusal halts for good and its
    state is never rewritten, so whoever took part at the earlier seq was admitted then (b's first refusal is at
    5). Answering "refused" to halted users made a replay drop data the lost run had released."""
    st = make_store(vec(zcdp_rho=10))
    st.admit("q", 5, ["a", "b"], [vec(zcdp_rho=3), vec(zcdp_rho=20)])
    assert st.admit("q", 2, ["a", "b"], vec(zcdp_rho=9)).tolist() == [True, True]
    assert spent(st, "a") == vec(zcdp_rho=3) and spent(st, "b") == Z
    assert st.admit("q", 5, ["a", "b"], vec(zcdp_rho=9)).tolist() == [True, False]  # the same seq: first outcome
    assert st.admit("q", 6, ["b"], Z).tolist() == [False]  # and later ones: halted


def test_scopes_are_independent(make_store):
    st = make_store(vec(zcdp_rho=10))
    assert st.admit("counts", 1, ["a"], vec(zcdp_rho=3)).tolist() == [True]
    assert st.admit("topk", 1, ["a"], vec(zcdp_rho=3)).tolist() == [True]  # same seq, other scope: charged
    assert st.admit("counts", 1, ["a"], vec(zcdp_rho=3)).tolist() == [True]  # replay: not charged
    assert spent(st, "a") == vec(zcdp_rho=6)
    st.settle("topk", 1, ["a"], vec(zcdp_rho=1))
    assert spent(st, "a") == vec(zcdp_rho=4)
    st.settle("counts", 1, ["a"], vec(zcdp_rho=1))
    assert spent(st, "a") == vec(zcdp_rho=2)


def test_scope_names_with_odd_characters(make_store):
    st = make_store(vec(zcdp_rho=10))
    for i, scope in enumerate(["a b", "x:y", "{tag}", "ü∑", ""]):
        assert st.admit(scope, 1, ["u"], vec(zcdp_rho=1)).tolist() == [True]
    assert spent(st, "u") == vec(zcdp_rho=5)


def test_user_ids_with_odd_characters(make_store):
    st = make_store(vec(zcdp_rho=10))
    users = ["a}b", "{x}", "*", "sp ace", "ü", "a:b", "", "u\nv"]
    assert st.admit("q", 1, users, vec(zcdp_rho=2)).all()
    assert st.admit("q", 2, users, vec(zcdp_rho=9)).sum() == 0
    assert sorted(u.user for u in st.iter_users()) == sorted(users)
    for u in users:
        assert spent(st, u) == vec(zcdp_rho=2) and halted(st, u)


# ---- large batches ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("chunk", [None, 1000])
def test_large_batch(make_store, chunk):
    rng = unsafe_seeded_generator(7002)
    st = make_store(vec(zcdp_rho=1000, zcdp_delta=1000), chunk=chunk)
    n = 5000
    users = [f"user-{i}" for i in range(n)]
    c1 = np.zeros((n, N_COMPONENTS), dtype=np.int64)
    c1[:, 0] = rng.integers(0, 900, n)
    c1[:, 1] = rng.integers(0, 3, n) * 400  # 0, 400 or 800: few distinct δ, many distinct ρ
    assert st.admit("q", 1, users, c1).all()
    c2 = np.zeros_like(c1)
    c2[:, 0] = 150
    c2[:, 1] = 150
    want = (c1[:, 0] + 150 <= 1000) & (c1[:, 1] + 150 <= 1000)
    got = st.admit("q", 2, users, c2)
    np.testing.assert_array_equal(got, want)
    recs = {u.user: u for u in st.iter_users()}
    assert len(recs) == n
    for i in rng.choice(n, 200, replace=False):
        r = recs[users[i]]
        np.testing.assert_array_equal(r.spent, c1[i] + (c2[i] if want[i] else 0))
        assert r.halted == (not want[i])
    # the replay of a large batch is answered identically
    np.testing.assert_array_equal(st.admit("q", 2, users, c2), want)
    # settle everyone's second batch to zero
    st.settle("q", 2, users, np.zeros_like(c2))
    for i in rng.choice(n, 50, replace=False):
        np.testing.assert_array_equal(st.get_user(users[i]).spent, c1[i])


def test_large_settle_validates_before_writing(make_store):
    st = make_store(vec(zcdp_rho=10), chunk=1000)
    users = [f"u{i}" for i in range(2500)]
    st.admit("q", 1, users, vec(zcdp_rho=5))
    actual = np.zeros((2500, N_COMPONENTS), dtype=np.int64)
    actual[-1, 0] = 6  # the last user (in the last chunk) is over its reservation
    with pytest.raises(ValueError, match="u2499"):
        st.settle("q", 1, users, actual)
    assert spent(st, "u0") == vec(zcdp_rho=5)  # the first chunk was not settled


# ---- release log and ledger ---------------------------------------------------------------------------------


def test_release_log_first_write_wins(make_store):
    st = make_store()
    assert st.get_release("q|0|1") is None
    assert st.put_release("q|0|1", b"first") == b"first"
    assert st.put_release("q|0|1", b"second") == b"first"
    assert st.get_release("q|0|1") == b"first"
    blob = bytes(range(256)) * 3  # arbitrary bytes survive
    assert st.put_release("q|0|2", blob) == blob
    assert st.get_release("q|0|2") == blob
    assert st.get_release("q|0|3") is None


def test_ledger_append_and_filter(make_store):
    st = make_store()
    t0 = time.time()
    st.append_ledger({"type": "release", "query": "counts", "window": 1, "ts": t0 - 100, "rho": 0.25})
    st.append_ledger({"type": "release", "query": "topk", "window": 1, "ts": t0 - 50, "items": ["x", "y"]})
    st.append_ledger({"type": "release", "query": "counts", "window": 2, "nested": {"a": [1, 2]}})
    all_ = st.ledger()
    assert [e["window"] for e in all_] == [1, 1, 2]  # append order
    assert all_[1]["items"] == ["x", "y"] and all_[0]["rho"] == 0.25
    assert all_[2]["ts"] >= t0  # a timestamp is added when missing
    assert [e["window"] for e in st.ledger(query="counts")] == [1, 2]
    assert [e["query"] for e in st.ledger(since=t0 - 60)] == ["topk", "counts"]
    assert [e["window"] for e in st.ledger(query="counts", since=t0 - 60)] == [2]
    assert st.ledger(query="nope") == []
    # returned entries are copies
    st.ledger()[2]["nested"]["a"].append(3)
    assert st.ledger()[2]["nested"] == {"a": [1, 2]}
    with pytest.raises(ValueError, match="JSON"):
        st.append_ledger({"bad": object()})
    with pytest.raises(ValueError, match="JSON"):
        st.append_ledger({"bad": float("nan")})
    assert len(st.ledger()) == 3


def test_admin_actions_write_audit_entries(make_store):
    st = make_store(vec(zcdp_rho=10))
    st.grant("a", vec(zcdp_rho=50), actor="alice", reason="ticket 1")
    st.grant("a", vec(zcdp_rho=60), actor="bob")
    st.set_default_budget(vec(zcdp_rho=20, cgp_rho=7), actor="carol", reason="policy")
    audit = [e for e in st.ledger() if e.get("type") == "admin"]
    assert [(e["action"], e["actor"]) for e in audit] == [("grant", "alice"), ("grant", "bob"),
                                                          ("set-default", "carol")]
    assert audit[0]["user"] == "a" and audit[0]["reason"] == "ticket 1"
    assert audit[0]["old"] == vec(zcdp_rho=10) and audit[0]["new"] == vec(zcdp_rho=50)
    assert audit[1]["old"] == vec(zcdp_rho=50) and audit[1]["new"] == vec(zcdp_rho=60)
    assert audit[2]["old"] == vec(zcdp_rho=10) and audit[2]["new"] == vec(zcdp_rho=20, cgp_rho=7)
    assert all(isinstance(e["ts"], float) for e in audit)


# ---- persistence (embedded store only) ----------------------------------------------------------------------


def test_memory_store_save_load_roundtrip(tmp_path):
    path = str(tmp_path / "sub" / "store.json")
    st = MemoryBudgetStore(vec(zcdp_rho=10, zcdp_delta=2**60), path=path)
    st.grant("rich", vec(zcdp_rho=100))
    st.admit("q", 1, ["a", "rich", "h"], [vec(zcdp_rho=4), vec(zcdp_rho=40), vec(zcdp_rho=11)])
    st.admit("topk", 3, ["a"], vec(zcdp_rho=2, zcdp_delta=2**59))
    st.put_release("k", b"\x00\xffbytes")
    st.append_ledger({"query": "q", "x": 1})
    st.close()  # saves
    st2 = MemoryBudgetStore.load(path)
    for u in ["a", "rich", "h"]:
        r1, r2 = st.get_user(u), st2.get_user(u)
        assert r1.spent.tolist() == r2.spent.tolist() and r1.budget.tolist() == r2.budget.tolist()
        assert r1.halted == r2.halted
    assert st2.get_release("k") == b"\x00\xffbytes"
    assert st2.ledger() == st.ledger()
    assert st2.default_budget().tolist() == vec(zcdp_rho=10, zcdp_delta=2**60)
    # idempotency state survives: replay answers the same and settles the open reservation
    assert st2.admit("q", 1, ["a", "rich", "h"], Z).tolist() == [True, True, False]
    st2.settle("topk", 3, ["a"], vec(zcdp_rho=1))
    assert spent(st2, "a") == vec(zcdp_rho=5)
    assert spent(st2, "rich") == vec(zcdp_rho=40)


# ---- exactly once, however the batch is cut; fences --------------------------------------------------------------


def test_a_batch_is_charged_once_however_it_is_cut(make_store):
    """The same batch (scope, seq, digest) reaching the store in pieces — other cuts, users left out, repeated, in
    another order — charges every user once; every piece answers the first outcome of its users (store.py,
    "Exactly once")."""
    st = make_store(vec(zcdp_rho=10), chunk=3)
    users = [f"u{i}" for i in range(12)]
    cost = [vec(zcdp_rho=4 + (i % 2) * 3) for i in range(12)]  # 4 or 7: a second charge of 7 would not fit
    d = "ab" * 16
    pieces = [range(0, 5), range(3, 12), range(11, -1, -1), range(0, 12, 2), range(12)]
    for p in pieces:
        idx = list(p)
        got = st.admit("q", 1, [users[i] for i in idx], [cost[i] for i in idx], digest=d)
        assert got.tolist() == [True] * len(idx), idx
    for i, u in enumerate(users):
        assert spent(st, u) == cost[i] and not halted(st, u)
    # another digest at the same seq is another batch: charged (once too)
    for _ in range(2):
        assert st.admit("q", 1, users[:2], [vec(zcdp_rho=1)] * 2, digest="cd" * 16).tolist() == [True, True]
    assert spent(st, "u0") == vec(zcdp_rho=5) and spent(st, "u1") == vec(zcdp_rho=8)
    # settling the second batch (its digest) lowers its reservation only; settling the first one is a no-op now
    st.settle("q", 1, users[:2], [Z, Z], digest="ab" * 16)
    assert spent(st, "u0") == vec(zcdp_rho=5)
    st.settle("q", 1, users[:2], [Z, Z], digest="cd" * 16)
    st.settle("q", 1, users[:2], [Z, Z], digest="cd" * 16)
    assert spent(st, "u0") == vec(zcdp_rho=4) and spent(st, "u1") == vec(zcdp_rho=7)


def test_a_refusal_is_answered_to_every_copy(make_store):
    st = make_store(vec(zcdp_rho=5), chunk=2)
    users = ["a", "b", "c"]
    costs = [vec(zcdp_rho=6), vec(zcdp_rho=1), vec(zcdp_rho=6)]
    d = "0f" * 16
    assert st.admit("q", 1, users, costs, digest=d).tolist() == [False, True, False]
    for cut in ([2, 1, 0], [1], [0, 2]):
        got = st.admit("q", 1, [users[i] for i in cut], [costs[i] for i in cut], digest=d)
        assert got.tolist() == [i == 1 for i in cut]
    assert spent(st, "b") == vec(zcdp_rho=1) and halted(st, "a") and halted(st, "c")


def test_a_fenced_admit_or_settle_is_refused_and_writes_nothing(make_store):
    st = make_store(vec(zcdp_rho=10))
    f1 = st.claim_fence("ckpt:g:t")
    assert st.admit("q", 1, ["a"], vec(zcdp_rho=3), fence=f1).tolist() == [True]
    f2 = st.claim_fence("ckpt:g:t")
    assert f2.epoch > f1.epoch and f2.name == f1.name
    for call in (lambda: st.admit("q", 2, ["a", "b"], vec(zcdp_rho=3), fence=f1),
                 lambda: st.settle("q", 1, ["a"], Z, fence=f1)):
        with pytest.raises(Fenced):
            call()
    assert spent(st, "a") == vec(zcdp_rho=3) and st.get_user("b") is None
    assert st.admit("q", 2, ["a", "b"], vec(zcdp_rho=3), fence=f2).tolist() == [True, True]
    st.settle("q", 2, ["a"], Z, fence=f2)
    assert spent(st, "a") == vec(zcdp_rho=3) and spent(st, "b") == vec(zcdp_rho=3)
    other = st.claim_fence("ckpt:g:other")  # fences of other names are independent
    assert st.admit("q", 3, ["c"], vec(zcdp_rho=1), fence=other).tolist() == [True]
    assert st.admit("q", 3, ["d"], vec(zcdp_rho=1), fence=f2).tolist() == [True]


# ---- release-log retention ----------------------------------------------------------------------------------------


def test_the_release_log_keeps_digests_for_good_and_records_of_the_latest_windows(make_store):
    """Retention (store.py, "release log"): records of the latest N windows of each query, a digest of every one.
    A window whose record was dropped still refuses a different record (no re-noise) and accepts the same one."""
    st = make_store()
    st.release_bodies_kept = 3
    recs = {f"q/{e}/{t}": f'{{"window":[{e},{t}]}}'.encode() for e in (0, 1) for t in (1, 2, 3)}
    for k, v in recs.items():
        assert st.put_release(k, v) == v
    st.put_release("r/0/1", b"other query")
    st.put_release("legacy|0|1", b"not the engine's key form: kept for good")
    kept = ["q/1/1", "q/1/2", "q/1/3"]
    for k, v in recs.items():
        got = st.get_release(k)
        if k in kept:
            assert got == v
        else:
            assert got is not None and got.startswith(b"\x00") and got != v  # dropped: a marker, never a record
            assert st.put_release(k, v) == v  # the same record again: accepted (its digest matches)
            assert st.put_release(k, v + b" ") != v + b" "  # another one: refused (the caller sees a conflict)
            assert st.get_release(k).startswith(b"\x00")  # and the record stays dropped
    assert st.get_release("r/0/1") == b"other query" and st.get_release("legacy|0|1").startswith(b"not")
    assert st.put_release("q/1/2", b"changed") == recs["q/1/2"]  # first write wins, as before
    assert st.get_release("q/0/9") is None
    for i in range(1, 6):  # other queries are trimmed by their own windows
        st.put_release(f"r/0/{i + 1}", b"x%d" % i)
    assert st.get_release("r/0/1").startswith(b"\x00") and st.get_release("q/1/1") == recs["q/1/1"]
