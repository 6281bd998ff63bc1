"""The budget store charges exactly once, fences replaced owners and writes nothing before an error — against a
real redis-server (and, where marked, the 3-primary cluster of ``tests/conftest.py``).

Regressions of the budget-store audit of 2026-12-07: a multi-chunk admit whose connection stalled was retried and
its late chunks charged again; a missing default budget halted every user of the batch; a wrong-type key or a
corrupted field in the middle of a chunk left the chunk half-written; nothing fenced a replaced owner's admits.
Expected spends are written out from Liang–Yi (adaptive budgeting) eq. (7) (spent + cost ≤ budget, componentwise), never read back from the
store under test.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import redis

from streamdp.accounting.cost import N_COMPONENTS
from streamdp.filter.redis_store import RedisBudgetStore
from streamdp.filter.store import DefaultBudgetMissing, Fenced, StoreError, StoreLost

from stall_proxy import StallProxy

pytestmark = pytest.mark.integration

D1, D2 = "d1" * 16, "e2" * 16


def c(rho: int, delta: int = 0) -> list[int]:
    v = [0] * N_COMPONENTS
    v[0], v[1] = rho, delta
    return v


def spent0(r: redis.Redis, user: str, ns: str = "sdp") -> int:
    return int(r.hget(f"{ns}:{{u:{user}}}", "s0") or 0)


def evalsha_calls(r: redis.Redis) -> int:
    return r.info("commandstats").get("cmdstat_evalsha", {"calls": 0})["calls"]


# ---- a stalled connection, retried ------------------------------------------------------------------------------


def test_a_multi_chunk_admit_stalled_after_its_first_chunk_is_retried_and_charges_each_user_once(redis_url,
                                                                                                 redis_server):
    """The audit's single-worker case: 25,000 users in 3 chunks; the connection stalls after the first chunk past
    the socket timeout, the store retries on a new connection, and the stalled chunks land afterwards. Each user is
    charged once (before: the late chunks were judged as a new batch — 15,000 users charged twice)."""
    r = redis.Redis.from_url(redis_url)
    proxy = StallProxy(redis_server.port)
    try:
        st = RedisBudgetStore.from_url(proxy.url, default_budget=c(10, 10), chunk=10_000, socket_timeout=1.0)
        st._sha_of("admit")  # loaded: the stalled pipeline's first EVALSHA runs the chunk
        users = [f"u{i}" for i in range(25_000)]
        proxy.stall_after_first()
        mask = st.admit("engine:x", 1, users, c(6, 6), digest=D1)
        assert proxy.stalled.is_set(), "the proxy never stalled the admit"
        assert mask.all()
        before = evalsha_calls(r)
        proxy.release()  # the stalled connection's two chunks reach Redis now
        assert evalsha_calls(r) >= before + 2, "the held chunks did not run"
        pipe = r.pipeline(transaction=False)
        for u in users:
            pipe.hmget(f"sdp:{{u:{u}}}", "s0", "h")
        got = pipe.execute()
        assert sum(1 for s, _ in got if s != b"6") == 0, "users charged other than once"
        assert not any(h for _, h in got), "users halted by a second charge"
        # the engine's own replay of the window (a restart from the checkpoint before it): the first outcome, free
        assert st.admit("engine:x", 1, users, c(6, 6), digest=D1).all()
        assert spent0(r, users[0]) == 6 and spent0(r, users[-1]) == 6
        st.close()
    finally:
        proxy.close()


def test_two_stores_admitting_the_same_multi_chunk_batch_at_once_charge_once(redis_url):
    """An old owner and its successor replay the same windows at the same moment, cut into small chunks (and the
    successor's cut differs: other chunk boundaries, its own chunk size): every user is charged once per window,
    and both get the same answers."""
    r = redis.Redis.from_url(redis_url)
    a = RedisBudgetStore.from_url(redis_url, default_budget=c(100), chunk=37)
    b = RedisBudgetStore.from_url(redis_url, default_budget=c(100), chunk=50)
    users = [f"w{i}" for i in range(3000)]
    costs = np.array([c(1 + i % 3) for i in range(len(users))], dtype=np.int64)
    want = np.zeros(len(users), dtype=np.int64)
    for seq in range(1, 6):
        digest = f"{seq:032x}"
        gate = threading.Barrier(2)
        out: dict = {}

        def run(name, st, us, cs):
            gate.wait()
            out[name] = st.admit("engine:x", seq, us, cs, digest=digest)

        ta = threading.Thread(target=run, args=("a", a, users, costs))
        tb = threading.Thread(target=run, args=("b", b, users[::-1], costs[::-1]))  # another order, another cut
        ta.start(), tb.start()
        ta.join(), tb.join()
        assert out["a"].all() and out["b"].all()
        want += costs[:, 0]
        pipe = r.pipeline(transaction=False)
        for u in users:
            pipe.hget(f"sdp:{{u:{u}}}", "s0")
        got = np.array([int(x) for x in pipe.execute()])
        assert (got == want).all(), f"window {seq}: {int((got != want).sum())} users charged other than once"


# ---- fencing ----------------------------------------------------------------------------------------------------


def test_a_fenced_owners_admit_and_settle_are_refused_before_anything_is_written(redis_url):
    from streamdp.adapters.kafka.checkpoint import DeferredReleaseLog, RedisCheckpoint

    r = redis.Redis.from_url(redis_url)
    st = RedisBudgetStore.from_url(redis_url, default_budget=c(10))
    old = RedisCheckpoint(st, "g", "events")
    old.claim("worker-a")
    old_view = DeferredReleaseLog(st, fence=lambda: old.fence)
    assert old_view.admit("engine:x", 1, ["u"], c(4), digest=D1).tolist() == [True]
    new = RedisCheckpoint(RedisBudgetStore.from_url(redis_url), "g", "events")
    new.claim("worker-b")  # the successor takes over: the old owner is fenced from now on
    keys = sorted(r.keys())
    with pytest.raises(Fenced):
        old_view.admit("engine:x", 2, ["u", "v"], c(4), digest=D2)
    with pytest.raises(Fenced):
        old_view.settle("engine:x", 1, ["u"], c(1))
    with pytest.raises(Fenced):
        old.write({}, {}, [], {}, [], {})
    assert sorted(r.keys()) == keys and spent0(r, "u") == 4  # nothing written
    new_view = DeferredReleaseLog(st, fence=lambda: new.fence)
    assert new_view.admit("engine:x", 2, ["u", "v"], c(4), digest=D2).tolist() == [True, True]
    new_view.settle("engine:x", 2, ["u"], c(1))
    assert spent0(r, "u") == 4 + 1 and spent0(r, "v") == 4


def test_a_flushed_store_is_reported_lost_not_fenced(redis_url):
    """FLUSHALL while a worker runs: its next admit, checkpoint or ack says the store lost its state (the worker's
    exit 4), not that another worker took over (exit 3)."""
    from streamdp.adapters.kafka.checkpoint import DeferredReleaseLog, RedisCheckpoint

    st = RedisBudgetStore.from_url(redis_url, default_budget=c(10))
    ck = RedisCheckpoint(st, "g", "events")
    ck.claim("worker-a")
    view = DeferredReleaseLog(st, fence=lambda: ck.fence)
    v = ck.write({"x": 1}, {0: 5}, [], {}, [], {})
    redis.Redis.from_url(redis_url).flushall()
    with pytest.raises(StoreLost):
        view.admit("engine:x", 1, ["u"], c(1), digest=D1)
    with pytest.raises(StoreLost):
        ck.write({"x": 2}, {0: 6}, [], {}, [], {})
    with pytest.raises(StoreLost):
        ck.ack(v)


# ---- nothing written before an error ----------------------------------------------------------------------------


def test_a_missing_default_budget_is_an_error_and_writes_nothing(redis_url):
    """The audit: with sdp:default gone, admission read the default as 0 and halted every user of the batch for good;
    re-creating the default did not bring them back."""
    r = redis.Redis.from_url(redis_url)
    st = RedisBudgetStore.from_url(redis_url, default_budget=c(10), chunk=2)
    assert st.admit("engine:x", 1, ["u"], c(3), digest=D1).tolist() == [True]
    before = {k: r.dump(k) for k in r.keys()}
    r.delete("sdp:default")
    for attempt in (lambda: st.admit("engine:x", 2, ["u", "v", "w"], c(3), digest=D2),
                    lambda: st.admit("engine:x", 2, ["u", "v", "w"], c(3))):
        with pytest.raises(DefaultBudgetMissing, match="set-default"):
            attempt()
    assert {k: r.dump(k) for k in r.keys()} == {k: v for k, v in before.items() if k != b"sdp:default"}
    with pytest.raises(DefaultBudgetMissing):  # a worker's restart does not put the configured one in its place
        RedisBudgetStore.from_url(redis_url, default_budget=c(10))
    with pytest.raises(DefaultBudgetMissing):
        st.get_user("u")
    st.set_default_budget(c(10), actor="ops", reason="restore")  # the operator restores it
    assert st.admit("engine:x", 2, ["u", "v", "w"], c(3), digest=D2).tolist() == [True] * 3
    assert [spent0(r, u) for u in "uvw"] == [6, 3, 3] and not r.hget("sdp:{u:u}", "h")
    assert st.ledger()[-1]["restored"] is True


@pytest.mark.parametrize("damage", ["wrong type", "spent", "halted flag", "state", "override"])
def test_a_damaged_key_in_the_middle_of_a_chunk_leaves_the_chunk_unwritten(redis_url, damage):
    """The audit: a wrong-type key or a corrupted field in the middle of a batch charged the users before it and
    not the rest (and the digest record's taint, written last, was lost)."""
    r = redis.Redis.from_url(redis_url)
    st = RedisBudgetStore.from_url(redis_url, default_budget=c(10))
    users = [f"p{i}" for i in range(40)]
    st.admit("engine:x", 1, users[:30], c(1), digest=D1)  # existing states for the first 30
    bad = "sdp:{u:p20}"
    if damage == "wrong type":
        r.delete(bad)
        r.set(bad, "not a hash")
    elif damage == "spent":
        r.hset(bad, "s0", "1.5")
    elif damage == "halted flag":
        r.hset(bad, "h", "yes")
    elif damage == "state":
        r.hset(bad, "x:engine:x", "one 1 1")
    else:
        r.hset(bad, mapping={"b0": "10", "b1": "10"})  # an override must hold all six components
    before = {k: r.dump(k) for k in r.keys()}
    with pytest.raises(StoreError, match="p20"):
        st.admit("engine:x", 2, users, c(1), digest=D2)
    assert {k: r.dump(k) for k in r.keys()} == before  # not one user charged, no digest record
    if damage in ("spent", "state"):  # what a settle reads (the state, the spent fields it lowers)
        with pytest.raises(StoreError, match="p20"):
            st.settle("engine:x", 1, users[:30], [c(0)] * 30)
        assert {k: r.dump(k) for k in r.keys()} == before


def test_a_corrupted_spent_field_under_a_settle_leaves_every_chunk_unsettled(redis_url):
    r = redis.Redis.from_url(redis_url)
    st = RedisBudgetStore.from_url(redis_url, default_budget=c(10), chunk=3)
    users = [f"s{i}" for i in range(10)]
    st.admit("engine:x", 1, users, c(5), digest=D1)
    r.hset("sdp:{u:s7}", "s0", "2")  # below its open reservation of 5: HINCRBY would go negative
    before = {k: r.dump(k) for k in r.keys()}
    with pytest.raises(StoreError, match="s7"):
        st.settle("engine:x", 1, users, [c(1)] * 10, digest=D1)
    assert {k: r.dump(k) for k in r.keys()} == before


# ---- the same on a Redis Cluster ---------------------------------------------------------------------------------


def _cluster_store_through_proxies(cluster, **kw):
    """A cluster store whose connections to every primary go through a StallProxy (the client's node addresses are
    remapped to the proxies)."""
    from redis.cluster import RedisCluster

    proxies = {p: StallProxy(p) for p in cluster.ports}
    client = RedisCluster(host="127.0.0.1", port=proxies[cluster.ports[0]].port, socket_timeout=1.0,
                          address_remap=lambda addr: (addr[0], proxies[addr[1]].port) if addr[1] in proxies
                          else addr)
    return RedisBudgetStore(client, cluster=True, url=cluster.url, **kw), proxies


def test_on_a_cluster_a_stalled_pipeline_is_retried_and_charges_each_user_once(redis_cluster_url,
                                                                                    redis_cluster):
    st, proxies = _cluster_store_through_proxies(redis_cluster, default_budget=c(10, 10), chunk=300)
    try:
        st._sha_of("admit")
        users = [f"u{i}" for i in range(6000)]
        victim = proxies[redis_cluster.ports[1]]
        victim.stall_after_first(RedisBudgetStore._SHAS["admit"])  # one primary's calls, after the first
        assert st.admit("engine:x", 1, users, c(6, 6), digest=D1).all()
        assert victim.stalled.is_set()
        node = redis.Redis(port=redis_cluster.ports[1])
        before = evalsha_calls(node)
        victim.release()
        assert evalsha_calls(node) >= before + 2, "the held calls did not run"
        check = RedisBudgetStore.from_url(redis_cluster_url)
        for u in users:
            rec = check.get_user(u)
            assert rec.spent[0] == 6 and not rec.halted, u
    finally:
        for p in proxies.values():
            p.close()


def test_on_a_cluster_two_stores_admitting_the_same_batch_at_once_charge_once(redis_cluster_url):
    a = RedisBudgetStore.from_url(redis_cluster_url, default_budget=c(100))
    b = RedisBudgetStore.from_url(redis_cluster_url, default_budget=c(100))
    users = [f"w{i}" for i in range(3000)]
    costs = np.array([c(1 + i % 3) for i in range(len(users))], dtype=np.int64)
    for seq in (1, 2, 3):
        gate = threading.Barrier(2)
        out: dict = {}

        def run(name, st, us, cs, seq=seq):
            gate.wait()
            out[name] = st.admit("engine:x", seq, us, cs, digest=f"{seq:032x}")

        ts = [threading.Thread(target=run, args=("a", a, users, costs)),
              threading.Thread(target=run, args=("b", b, users[::-1], costs[::-1]))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert out["a"].all() and out["b"].all()
    for i in range(0, len(users), 97):
        assert a.get_user(users[i]).spent[0] == 3 * (1 + i % 3)


def test_on_a_cluster_a_fenced_owner_is_refused_in_every_slot(redis_cluster_url):
    from streamdp.adapters.kafka.checkpoint import DeferredReleaseLog, RedisCheckpoint

    st = RedisBudgetStore.from_url(redis_cluster_url, default_budget=c(10))
    old = RedisCheckpoint(st, "g", "events")
    old.claim("worker-a")
    assert old.key == "{sdp}:ckpt:g:events"
    old_view = DeferredReleaseLog(st, fence=lambda: old.fence)
    users = [f"f{i}" for i in range(200)]
    assert old_view.admit("engine:x", 1, users, c(2), digest=D1).all()
    new = RedisCheckpoint(RedisBudgetStore.from_url(redis_cluster_url), "g", "events")
    new.claim("worker-b")
    with pytest.raises(Fenced):
        old_view.admit("engine:x", 2, users, c(2), digest=D2)
    # the calls themselves refuse it too, by the slot's copy (a call that passed the meta check just before the claim)
    with pytest.raises(Fenced):
        st._call(lambda: st._exec("admit", [_slot_group_call(st, users[0], old.fence)]))
    with pytest.raises(Fenced):
        old.write({}, {}, [], {}, [], {})
    new_view = DeferredReleaseLog(st, fence=lambda: new.fence)
    assert new_view.admit("engine:x", 2, users, c(2), digest=D2).all()
    assert st.get_user(users[0]).spent[0] == 4


def _slot_group_call(st, user, fence):
    """One raw cluster admit call of ``user`` under ``fence`` (as the client builds it after the meta check: the fence
    copy of the user's slot and the user's key in ARGV, redis_scripts.ADMIT mode 'C')."""
    from streamdp.filter.redis_store import _bulks, _Call

    slot = int(st._user_slots([user])[0])
    parts = [*_bulks([b"x:engine:x", b"2", b"1", b"1", b"2", b"0", b"0", b"0", b"0", b"0", b"", D2.encode(), b"0",
                      b"%d" % fence.epoch, b"C", b"10", b"0", b"0", b"0", b"0", b"0", b"R", b"1"]),
             st._fence_frag(fence.name, slot), *st._key_frags([user])]
    return _Call(0, len(parts), b"".join(parts), slot)


def test_on_a_cluster_slots_moved_under_a_store_are_found_again(redis_cluster_url, redis_cluster):
    """Resharding between two admits: the store's slot map is stale, its calls name keys a primary no longer serves
    (an error before any write), it refreshes the map, groups the batch again and sends it: each user charged once,
    per slot or per primary."""
    import subprocess

    st = RedisBudgetStore.from_url(redis_cluster_url, default_budget=c(100), chunk=400)
    users = [f"m{i}" for i in range(3000)]
    assert st.admit("engine:x", 1, users, c(2), digest=D1).all()
    nodes = redis.Redis(port=redis_cluster.ports[0]).cluster("nodes")  # "host:port@bus" → {"node_id", …}
    ids = {addr.split("@")[0]: n["node_id"] for addr, n in nodes.items()}
    src, dst = ids[f"127.0.0.1:{redis_cluster.ports[0]}"], ids[f"127.0.0.1:{redis_cluster.ports[1]}"]
    res = subprocess.run(["redis-cli", "--cluster", "reshard", f"127.0.0.1:{redis_cluster.ports[0]}", "--cluster-from",
                          src, "--cluster-to", dst, "--cluster-slots", "1500", "--cluster-yes"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert st.admit("engine:x", 2, users, c(3), digest=D2).all()  # the map is stale now
    st.cluster_groups = "slot"
    assert st.admit("engine:x", 3, users[::-1], c(4), digest="f3" * 16).all()
    assert st.admit("engine:x", 3, users, c(4), digest="f3" * 16).all()  # a copy: free
    check = RedisBudgetStore.from_url(redis_cluster_url)
    for u in users[::37]:
        assert check.get_user(u).spent[0] == 2 + 3 + 4, u
