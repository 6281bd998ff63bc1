"""The Redis store's fast paths must be invisible: same answers, spend and halts as the in-memory store.

The admit script decides each component from doubles when the operands allow it exactly (below 2^53), remembers
per-value outcomes within a call (memo, switched off when it misses), reads users with HGETALL or HMGET
(switching on large hashes), packs cost-vector indices into one string of 1–3 bytes per user, and answers users
it knows are refused for good (halted, with a refusal state in the scope) without asking Redis. Each is checked
here at its boundaries against :class:`MemoryBudgetStore` (the reference semantics; outcomes are also recomputed
from eq. (7) of Liang–Yi (adaptive budgeting) with Python integers where the test builds the amounts itself).
"""

from __future__ import annotations

import numpy as np
import pytest
import redis

from streamdp.accounting.cost import INT64_MAX, N_COMPONENTS
from streamdp.engine.query import Names
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.filter.redis_store import RedisBudgetStore
from streamdp.noise.generator import unsafe_seeded_generator

pytestmark = pytest.mark.integration

P53 = 2**53


def _users(st) -> dict:
    return {u.user: (u.spent.tolist(), u.budget.tolist(), bool(u.halted)) for u in st.iter_users()}


def _evalsha_calls(url: str) -> int:
    return redis.Redis.from_url(url).info("commandstats").get("cmdstat_evalsha", {"calls": 0})["calls"]


# ---- exact decisions at the double boundary --------------------------------------------------------------------

_AMOUNTS = [10**14 - 1, 10**14, 10**15 - 1, 10**15, 10**15 + 1, P53 - 2, P53 - 1, P53, P53 + 1, P53 + 2,
            10**16, 2**62, INT64_MAX - 1, INT64_MAX]


def _cases():
    """(budget, spent, cost): spent ≤ budget, cost > 0 and spent + cost ∈ {budget − 1, budget, budget + 1}."""
    out = []
    for b in _AMOUNTS:
        for s in {0, 1, b // 2, b - 3, P53 - 1 if P53 - 1 <= b else 0, max(0, b - P53)}:
            if not 0 <= s <= b:
                continue
            for total in (b - 1, b, b + 1):
                c = total - s
                if 0 <= c <= INT64_MAX and c > 0:
                    out.append((b, s, c))
    return sorted(set(out))


@pytest.mark.parametrize("group", [1, 64])  # 1 user per case: memo off; 64 users sharing a case: memo on
def test_exact_at_the_double_boundary(redis_url, group):
    """Default budget b in component 0, spent s, cost c around b, 2^53, 10^15 and INT64_MAX: admitted iff
    s + c ≤ b (Python integers), and the new spent is exactly s + c; component 1 carries a second charge."""
    cases = _cases()
    assert len(cases) > 100
    for k, b in enumerate(sorted({x[0] for x in cases})):
        mine = [x for x in cases if x[0] == b]
        budget = [b, INT64_MAX, 0, 0, 0, 0]
        red = RedisBudgetStore.from_url(redis_url, default_budget=budget, namespace=f"t{k}")
        mem = MemoryBudgetStore(budget)
        users, first, second = [], [], []
        for i, (_, s, c) in enumerate(mine):
            for g in range(group):
                users.append(f"c{i}-{g}")
                first.append([s, 3, 0, 0, 0, 0])
                second.append([c, 2**60, 0, 0, 0, 0])
        for st in (red, mem):
            assert st.admit("q", 1, users, first).all()
        got = red.admit("q", 2, users, second)
        np.testing.assert_array_equal(got, mem.admit("q", 2, users, second))
        for i, (_, s, c) in enumerate(mine):
            want = s + c <= b
            for g in range(group):
                u = red.get_user(f"c{i}-{g}")
                assert bool(got[i * group + g]) == want, (b, s, c)
                assert u.spent.tolist() == ([s + c, 3 + 2**60] if want else [s, 3]) + [0] * 4, (b, s, c)
                assert u.halted == (not want)
        red.close()


def test_exact_against_overrides_and_in_settle(redis_url):
    """The same boundaries against per-user budgets (grant), then settled back to 1: spent = s + 1 exactly."""
    cases = [x for x in _cases() if x[1] + x[2] <= x[0]][:80]
    red = RedisBudgetStore.from_url(redis_url, default_budget=[0] * N_COMPONENTS)
    mem = MemoryBudgetStore([0] * N_COMPONENTS)
    users = [f"o{i}" for i in range(len(cases))]
    for u, (b, s, c) in zip(users, cases):
        for st in (red, mem):
            st.grant(u, [b, b, 0, 0, 0, 0])
            assert st.admit("q", 1, [u], [[s, 0, 0, 0, 0, 0]]).all()
    costs = [[c, c, 0, 0, 0, 0] for _, s, c in cases]
    got = red.admit("q", 2, users, costs)
    np.testing.assert_array_equal(got, mem.admit("q", 2, users, costs))
    assert got.all()  # s + c ≤ b in component 0, c ≤ b in component 1
    for u, (b, s, c) in zip(users, cases):
        assert red.get_user(u).spent.tolist()[:2] == [s + c, c]
    actual = [[1, 0, 0, 0, 0, 0]] * len(users)
    red.settle("q", 2, users, actual)
    mem.settle("q", 2, users, actual)
    assert _users(red) == _users(mem)
    for u, (b, s, c) in zip(users, cases):
        assert red.get_user(u).spent.tolist()[:2] == [s + 1, 0]


def test_settle_subtracts_exactly_near_int64_max(redis_url):
    big = INT64_MAX - 5
    red = RedisBudgetStore.from_url(redis_url, default_budget=[INT64_MAX] * N_COMPONENTS)
    users = [f"u{i}" for i in range(20)]
    costs = [[big - i, P53 + i, i, 0, 0, 1] for i in range(20)]
    assert red.admit("q", 1, users, costs).all()
    actual = [[i, P53 - 1, 0, 0, 0, 1] for i in range(20)]
    red.settle("q", 1, users, actual)
    for i, u in enumerate(users):
        assert red.get_user(u).spent.tolist() == [i, P53 - 1, 0, 0, 0, 1]
    red.settle("q", 1, users, [[0] * N_COMPONENTS] * 20)  # settled already: no-op
    assert red.get_user("u3").spent.tolist() == [3, P53 - 1, 0, 0, 0, 1]


# ---- memo switched off, HGETALL → HMGET switch, index widths ---------------------------------------------------


def test_memo_turned_off_when_every_user_differs(redis_url):
    """600 users with distinct spent values, one cost vector (memo on, then off after 512 users): exact."""
    n = 600
    budget = [10**12, 10**12, 0, 0, 0, 0]
    red = RedisBudgetStore.from_url(redis_url, default_budget=budget)
    mem = MemoryBudgetStore(budget)
    users = [f"u{i}" for i in range(n)]
    first = np.zeros((n, N_COMPONENTS), dtype=np.int64)
    first[:, 0] = 10**12 - 1000 - np.arange(n)  # the later charge of 1300 fits for users 300.. only
    first[:, 1] = np.arange(n) * 7
    for st in (red, mem):
        st.admit("q", 1, users, first)
    cost = [1300, 5, 0, 0, 0, 0]
    got = red.admit("q", 2, users, cost)
    np.testing.assert_array_equal(got, mem.admit("q", 2, users, cost))
    assert not got[:300].any() and got[300:].all()  # (users after the switch, 512.., are admitted)
    assert _users(red) == _users(mem)


def test_users_with_many_scopes_and_overrides(redis_url):
    """Hashes of 12+ fields (state in 8 scopes, overrides): the admit switches to HMGET mid-call; exact."""
    rng = unsafe_seeded_generator(5150)
    budget = [500, 500, 500, 0, 0, 0]
    red = RedisBudgetStore.from_url(redis_url, default_budget=budget, chunk=300)
    mem = MemoryBudgetStore(budget)
    users = [f"u{i}" for i in range(400)]
    for u in users[::7]:
        b = [int(x) for x in rng.integers(0, 900, N_COMPONENTS)]
        red.grant(u, b)
        mem.grant(u, b)
    for seq in range(1, 4):
        for sc in range(8):
            costs = rng.integers(0, 40, (len(users), N_COMPONENTS)) * (rng.random((len(users), N_COMPONENTS)) < .5)
            np.testing.assert_array_equal(red.admit(f"s{sc}", seq, users, costs),
                                          mem.admit(f"s{sc}", seq, users, costs))
    assert _users(red) == _users(mem)
    h = redis.Redis.from_url(redis_url).hgetall("sdp:{u:u7}")
    assert len(h) >= 12  # the regime this test is about


@pytest.mark.parametrize("m", [2, 255, 256, 257, 700])
def test_index_widths(redis_url, m):
    """m distinct cost vectors (1 byte per user up to 256, then 2): each user is charged its own row."""
    n = max(m, 300)
    red = RedisBudgetStore.from_url(redis_url, default_budget=[10**6] * N_COMPONENTS)
    users = [f"u{i}" for i in range(n)]
    costs = np.zeros((n, N_COMPONENTS), dtype=np.int64)
    costs[:, 0] = np.arange(n) % m + 1
    costs[:, 3] = (np.arange(n) * 7) % m
    assert red.admit("q", 1, users, costs).all()
    for i in (0, 1, m - 1, n - 1, n // 2):
        np.testing.assert_array_equal(red.get_user(users[i]).spent, costs[i])


def test_three_byte_index_decodes(redis_url):
    """The script's 3-byte index path (m > 65536) on a small batch: the same charges as the 1-byte encoding."""
    red = RedisBudgetStore.from_url(redis_url, default_budget=[10**6] * N_COMPONENTS)
    n = 600
    costs = np.zeros((n, N_COMPONENTS), dtype=np.int64)
    costs[:, 0] = np.arange(n) % 300 + 1  # 300 vectors: indices use the middle byte too
    costs[:, 5] = np.arange(n) % 7
    args = red._cost_args(costs)
    assert args[1] == b"2" and len(args[-1]) == 2 * n
    args[1] = b"3"
    args[-1] = b"".join(b"\x00" + args[-1][2 * i:2 * i + 2] for i in range(n))
    users = [f"u{i}" for i in range(n)]
    keys = [f"sdp:{{u:{u}}}" for u in users]
    r = redis.Redis.from_url(redis_url)
    res = r.evalsha(red._sha_of("admit").decode(), 2 + n, "sdp:default", "sdp:digests:q", *keys, "x:q", "1", *args,
                    "", "2", "", "S")  # no digest, 2 meta keys, no fence, a single Redis
    assert res == b"1" * n
    for i in (0, 1, 255, 256, 299, 300, 555, n - 1):
        np.testing.assert_array_equal(red.get_user(users[i]).spent, costs[i])


# ---- users refused for good are answered without Redis ---------------------------------------------------------


def test_halted_users_are_answered_locally(redis_url):
    red = RedisBudgetStore.from_url(redis_url, default_budget=[10] * N_COMPONENTS)
    users = ["a", "b", "c"]
    assert red.admit("q", 1, users, [[4] * 6, [11] * 6, [4] * 6]).tolist() == [True, False, True]
    assert red._halted_names == {"q": {"b": 1}}  # refused from seq 1 on
    calls = _evalsha_calls(redis_url)
    assert red.admit("q", 2, ["b"], [[0] * 6]).tolist() == [False]  # even a free batch: b is halted
    assert _evalsha_calls(redis_url) == calls  # not asked
    assert red.admit("q", 3, users, [[4] * 6] * 3).tolist() == [True, False, True]
    assert _evalsha_calls(redis_url) == calls + 1
    # another store object (another worker, no cache) answers the same, and so does the in-memory store
    other = RedisBudgetStore.from_url(redis_url)
    for seq in (1, 2, 3, 4):
        assert other.admit("q", seq, ["b"], [[0] * 6]).tolist() == [False]
    # the ids path has its own cache, per table
    table = Names()
    table.ids(["c", "b", "a"])
    assert red.admit_ids("q", 5, np.array([0, 1, 2]), np.ones((3, 6), np.int64), table).tolist() == [True, False,
                                                                                                       True]
    assert red._halted_ids["q"][1] == 5 and red._halted_ids["q"][0] == np.iinfo(np.int64).max
    calls = _evalsha_calls(redis_url)
    assert red.admit_ids("q", 6, np.array([1]), np.ones((1, 6), np.int64), table).tolist() == [False]
    assert _evalsha_calls(redis_url) == calls


def test_halt_in_another_scope_then_replays(redis_url):
    """A user admitted in scope S (seq 5, settled), halted in T, then admitted in S at seq 6: a replay of 6 and
    any new seq are refusals; a stale replay of 5 answers its first outcome, an admission (the refusal at 6 came
    later) — in both stores and with or without the local cache."""
    for cached in (True, False):
        red = RedisBudgetStore.from_url(redis_url, default_budget=[10] * N_COMPONENTS, namespace=f"n{cached}")
        mem = MemoryBudgetStore([10] * N_COMPONENTS)

        def both(scope, seq, cost):
            st = red if cached else RedisBudgetStore.from_url(redis_url, namespace=f"n{cached}")
            a, b = st.admit(scope, seq, ["u"], [cost]), mem.admit(scope, seq, ["u"], [cost])
            np.testing.assert_array_equal(a, b)
            return bool(a[0])

        assert both("S", 5, [3] * 6)
        red.settle("S", 5, ["u"], [[2] * 6])
        mem.settle("S", 5, ["u"], [[2] * 6])
        assert both("S", 5, [3] * 6)  # replay: first outcome
        assert not both("T", 1, [9] * 6)  # halted in T
        assert both("S", 5, [3] * 6)  # a replay of S/5 still answers its first outcome
        assert not both("S", 6, [0] * 6)
        assert not both("S", 6, [0] * 6)
        assert both("S", 5, [3] * 6)  # now stale: admitted at 5 in the first place, charged nothing
        assert not both("S", 7, [1] * 6)
        assert _users(red) == _users(mem)


def test_open_reservation_of_a_user_halted_elsewhere_is_closed(redis_url):
    """Admitted in S (open), halted in T, admitted in S again: the open reservation of S is dropped (a settle of
    the old seq is a no-op afterwards), as in the in-memory store."""
    red = RedisBudgetStore.from_url(redis_url, default_budget=[10] * N_COMPONENTS)
    mem = MemoryBudgetStore([10] * N_COMPONENTS)
    for st in (red, mem):
        assert st.admit("S", 1, ["u"], [[4] * 6]).all()
        assert not st.admit("T", 1, ["u"], [[7] * 6]).any()
        assert not st.admit("S", 2, ["u"], [[1] * 6]).any()
        st.settle("S", 1, ["u"], [[0] * 6])  # the reservation of S/1 is gone: no-op
    assert _users(red) == _users(mem) == {"u": ([4] * 6, [10] * 6, True)}


# ---- everything together -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2])
def test_random_differential_names_and_ids(redis_url, seed):
    """Random batches over 3 scopes with replays, stale batches, settles, grants and default changes (raised and
    lowered below spent), amounts around 10^12 and 2^53, by name and by table id (a table that grows and is
    replaced): answers and final users equal the in-memory store's; a cache-free store object agrees too."""
    rng = unsafe_seeded_generator(6200 + seed)
    big = seed == 2
    unit = 2**51 if big else 10**11

    def amounts(shape, p=0.5):
        return rng.integers(0, 6, shape) * unit * (rng.random(shape) < p)

    default = [int(x) for x in rng.integers(20, 60, N_COMPONENTS) * unit]
    red = RedisBudgetStore.from_url(redis_url, default_budget=default, chunk=37)
    mem = MemoryBudgetStore(default)
    names = [f"n{i}" for i in range(90)]
    table = Names()
    table.ids(names[:60])
    seqs = {"a": 1, "b": 1, "c": 1}
    opened: list = []
    n_refused = n_replays = 0
    for step in range(150):
        if step % 41 == 20:
            table.ids(names[len(table):len(table) + 10])
        if step % 53 == 30:
            table = Names.from_state(table.state())
        if step % 19 == 9:
            u = names[int(rng.integers(0, len(names)))]
            b = [int(x) for x in rng.integers(0, 80, N_COMPONENTS) * unit]
            red.grant(u, b)
            mem.grant(u, b)
        if step % 37 == 17:
            b = [int(x) for x in rng.integers(5, 70, N_COMPONENTS) * unit]
            red.set_default_budget(b)
            mem.set_default_budget(b)
        scope = ["a", "b", "c"][int(rng.integers(0, 3))]
        if rng.random() < 0.12 and opened:
            scope, seq, ids, costs, by_ids = opened[int(rng.integers(0, len(opened)))]
            n_replays += 1
        else:
            seqs[scope] += 1
            seq = seqs[scope]
            m = int(rng.integers(1, 50))
            ids = np.sort(rng.choice(len(table), size=min(m, len(table)), replace=False))
            costs = amounts((ids.size, N_COMPONENTS))
            costs[rng.random(ids.size) < 0.1] = 0
            by_ids = rng.random() < 0.6
        users = table.names(ids)
        if by_ids:
            got = red.admit_ids(scope, seq, ids, costs, table)
        else:
            got = red.admit(scope, seq, users, costs)
        want = mem.admit(scope, seq, users, costs)
        np.testing.assert_array_equal(got, want)
        fresh = RedisBudgetStore.from_url(redis_url)  # no local cache: Redis' own answer for a replay
        np.testing.assert_array_equal(fresh.admit(scope, seq, users, costs), want)
        n_refused += int((~want).sum())
        opened.append((scope, seq, ids, costs, by_ids))
        if rng.random() < 0.4:
            sel = np.flatnonzero(want)
            actual = (costs[sel] * rng.random((sel.size, N_COMPONENTS))).astype(np.int64) // unit * unit
            if by_ids:
                red.settle_ids(scope, seq, ids[sel], actual, table)
            else:
                red.settle(scope, seq, [users[i] for i in sel], actual)
            mem.settle(scope, seq, [users[i] for i in sel], actual)
        if step % 25 == 24:
            assert _users(red) == _users(mem), step
    assert _users(red) == _users(mem)
    assert n_refused > 20 and n_replays > 5
    assert sum(h for _, _, h in _users(mem).values()) > 3


def test_the_halted_id_cache_holds_the_refused_users_only(redis_url):
    """An engine admits in one scope per input partition (engine/stage_a.py): a cache over every table id per
    scope (8 bytes × interned users × partitions; 1 GB for 12 partitions of 10⁷ users) became a sparse one."""
    red = RedisBudgetStore.from_url(redis_url, default_budget=[10] * N_COMPONENTS)
    table = Names()
    table.ids([f"user{i}" for i in range(50_000)])
    for p in range(4):
        uid = np.arange(p, 40, 4, dtype=np.int64)  # 10 users of the partition
        costs = np.full((uid.size, N_COMPONENTS), 4, dtype=np.int64)
        costs[:2] = 11  # two of them do not fit
        assert red.admit_ids(f"s/p{p}", 1, uid, costs, table).tolist() == [False, False] + [True] * 8
        assert red.admit_ids(f"s/p{p}", 2, uid, np.zeros_like(costs), table).tolist() == [False, False] + [True] * 8
    sizes = [c.nbytes if isinstance(c, np.ndarray) else c.ids.nbytes + c.seqs.nbytes
             for c in red._halted_ids.values()]
    assert len(sizes) == 4 and max(sizes) <= 64
    assert red._halted_ids["s/p1"][np.array([1, 5, 9, 2])].tolist() == [1, 1, np.iinfo(np.int64).max,
                                                                          np.iinfo(np.int64).max]
