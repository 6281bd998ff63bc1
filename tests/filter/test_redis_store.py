"""Redis-specific behaviour of the budget store (the shared semantics are in test_store_contract.py):
key layout and hash tags, script reloading, URL forms (AUTH, unix socket, TLS), and errors mapped to StoreError."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import redis

from streamdp.accounting.cost import N_COMPONENTS
from streamdp.filter import StoreError, open_store
from streamdp.filter.redis_store import RedisBudgetStore

pytestmark = pytest.mark.integration

B = [10, 10, 0, 0, 0, 0]
C = [3, 1, 0, 0, 0, 0]
Z = [0] * N_COMPONENTS


def _key_slot(key: bytes) -> int:
    """Redis Cluster slot of a key (CRC16/XMODEM of the hash tag, mod 16384), written from the cluster spec."""
    s = key.find(b"{")
    if s >= 0:
        e = key.find(b"}", s + 1)
        if e > s + 1:
            key = key[s + 1:e]
    crc = 0
    for byte in key:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
            crc &= 0xFFFF
    return crc % 16384


def test_key_layout_and_hash_tags(redis_url):
    st = RedisBudgetStore.from_url(redis_url, default_budget=B)
    st.admit("counts", 4, ["alice"], C)
    st.put_release("counts|0|4", b"rec")
    st.append_ledger({"query": "counts"})
    r = redis.Redis.from_url(redis_url)
    assert sorted(r.keys()) == [b"sdp:default", b"sdp:ledger", b"sdp:meta", b"sdp:rel:counts|0|4", b"sdp:{u:alice}"]
    assert r.hgetall("sdp:meta") == {b"default": b"set"}  # the store had a default: a missing one was lost
    assert r.type("sdp:ledger") == b"stream"
    h = r.hgetall("sdp:{u:alice}")
    assert h == {b"s0": b"3", b"s1": b"1", b"x:counts": b"4 1 1 3 1 0 0 0 0"}
    assert r.hgetall("sdp:default") == {str(i).encode(): str(v).encode() for i, v in enumerate(B)}
    # the CRC16 below agrees with the server, and every key of a user hashes by the user's tag
    assert _key_slot(b"sdp:{u:alice}") == _key_slot(b"u:alice") == _key_slot(b"other:{u:alice}:x")
    st.close()


def test_keyslot_matches_server(spawn_redis):
    """The slot function above agrees with a real server in cluster mode, so one user's keys share a slot."""
    srv = spawn_redis(extra=("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"))
    r = redis.Redis.from_url(srv.url)
    for k in [b"sdp:{u:alice}", b"sdp:{u:a}b}", b"sdp:{u:}", b"sdp:default", b"123456789"]:
        assert r.execute_command("CLUSTER KEYSLOT", k) == _key_slot(k)
    assert _key_slot(b"123456789") == 0x31C3 % 16384  # CRC16/XMODEM check value from the cluster spec


def test_script_reloaded_after_flush(redis_url):
    st = RedisBudgetStore.from_url(redis_url, default_budget=B)
    assert st.admit("q", 1, ["a"], C).tolist() == [True]
    redis.Redis.from_url(redis_url).script_flush()  # as after a server restart: NOSCRIPT on the next EVALSHA
    assert st.admit("q", 2, ["a"], C).tolist() == [True]
    st.settle("q", 2, ["a"], Z)
    assert st.get_user("a").spent.tolist() == C


def test_stored_default_is_kept(redis_url, caplog):
    st = RedisBudgetStore.from_url(redis_url, default_budget=B)
    with caplog.at_level(logging.WARNING, logger="streamdp.filter.redis_store"):
        st2 = RedisBudgetStore.from_url(redis_url, default_budget=[1] * N_COMPONENTS)
    assert st2.default_budget().tolist() == B
    assert "set-default" in caplog.text
    st3 = RedisBudgetStore.from_url(redis_url)
    assert st3.default_budget().tolist() == B
    assert st.ledger() == []  # initialisation is configuration, not an administrative change
    for s in (st, st2, st3):
        s.close()


def test_namespaces_are_separate(redis_url):
    a = RedisBudgetStore.from_url(redis_url, default_budget=B, namespace="tenant-a")
    b = RedisBudgetStore.from_url(redis_url, default_budget=[5] * N_COMPONENTS, namespace="tenant-b")
    a.admit("q", 1, ["u"], C)
    assert b.get_user("u") is None
    assert [u.user for u in a.iter_users()] == ["u"] and list(b.iter_users()) == []
    assert b.default_budget().tolist() == [5] * N_COMPONENTS
    with pytest.raises(ValueError, match="namespace"):
        RedisBudgetStore.from_url(redis_url, namespace="x{y}")


def test_open_store_dispatches_to_redis(redis_url):
    st = open_store(redis_url, default_budget=B)
    assert isinstance(st, RedisBudgetStore)
    assert st.admit("q", 1, ["a"], C).tolist() == [True]


def test_bad_url_is_valueerror():
    with pytest.raises(ValueError, match="redis://"):
        RedisBudgetStore.from_url("http://localhost:6379")
    with pytest.raises(ValueError):
        RedisBudgetStore.from_url("redis://localhost:notaport/0")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_server_raises_storeerror_everywhere():
    with pytest.raises(StoreError) as ei:  # the first contact is at open
        RedisBudgetStore.from_url(f"redis://:secret@127.0.0.1:{_free_port()}/0", connect_timeout=0.5)
    assert "secret" not in str(ei.value)
    st = RedisBudgetStore.from_url(f"redis://:secret@127.0.0.1:{_free_port()}/0", connect_timeout=0.5, check=False)
    calls = [
        lambda: st.admit("q", 1, ["a"], C), lambda: st.settle("q", 1, ["a"], Z), lambda: st.get_user("a"),
        lambda: list(st.iter_users()), lambda: st.default_budget(), lambda: st.grant("a", B),
        lambda: st.set_default_budget(B), lambda: st.put_release("k", b"x"), lambda: st.get_release("k"),
        lambda: st.append_ledger({"a": 1}), lambda: st.ledger(), st.ping,
    ]
    for call in calls:
        with pytest.raises(StoreError) as ei:
            call()
        assert "secret" not in str(ei.value)  # passwords never leak into messages
    with pytest.raises(StoreError):
        RedisBudgetStore.from_url(f"redis://127.0.0.1:{_free_port()}/0", default_budget=B)


def test_server_side_errors_are_storeerror(redis_url):
    st = RedisBudgetStore.from_url(redis_url, default_budget=B)
    r = redis.Redis.from_url(redis_url)
    r.set("sdp:{u:broken}", "not a hash")
    with pytest.raises(StoreError, match="WRONGTYPE"):
        st.admit("q", 1, ["ok", "broken"], C)
    with pytest.raises(StoreError):
        st.get_user("broken")


def test_auth_password(spawn_redis):
    srv = spawn_redis(password="s3cr3t")
    st = RedisBudgetStore.from_url(srv.url, default_budget=B)
    assert st.admit("q", 1, ["a"], C).tolist() == [True]
    with pytest.raises(StoreError) as ei:  # refused at open
        RedisBudgetStore.from_url(srv.url.replace("s3cr3t", "wrong"))
    assert "wrong" not in str(ei.value)
    bad = RedisBudgetStore.from_url(srv.url.replace("s3cr3t", "wrong"), check=False)
    with pytest.raises(StoreError) as ei:
        bad.get_user("a")
    assert "wrong" not in str(ei.value)
    with pytest.raises(StoreError):
        RedisBudgetStore.from_url(f"redis://127.0.0.1:{srv.port}/0")
    anon = RedisBudgetStore.from_url(f"redis://127.0.0.1:{srv.port}/0", check=False)
    with pytest.raises(StoreError):
        anon.admit("q", 2, ["a"], C)
    assert st.get_user("a").spent.tolist() == C  # the refused calls charged nothing


def test_unix_socket(spawn_redis):
    srv = spawn_redis(unix=True)
    assert srv.url.startswith("unix://")
    st = RedisBudgetStore.from_url(srv.url, default_budget=B)
    assert st.admit("q", 1, ["a", "b"], C).tolist() == [True, True]
    assert sorted(u.user for u in st.iter_users()) == ["a", "b"]


def test_tls_with_auth(spawn_redis):
    srv = spawn_redis(tls=True, password="pw")
    assert srv.url.startswith("rediss://")
    st = RedisBudgetStore.from_url(srv.url, default_budget=B)
    assert st.admit("q", 1, ["a"], C).tolist() == [True]
    assert st.get_user("a").spent.tolist() == C
    # plain TCP against the TLS port: a configuration error at open (tests/filter/test_store_config_errors.py);
    # without the check, every call fails cleanly
    plain = RedisBudgetStore.from_url(f"redis://:pw@127.0.0.1:{srv.port}/0", socket_timeout=1.0,
                                      connect_timeout=1.0, check=False)
    with pytest.raises(StoreError):
        plain.get_user("a")


def test_many_distinct_costs_in_one_batch(redis_url):
    """The script receives distinct cost vectors once plus an index per user; check the index path exactly."""
    st = RedisBudgetStore.from_url(redis_url, default_budget=[100] * N_COMPONENTS)
    users = [f"u{i}" for i in range(300)]
    costs = np.zeros((300, N_COMPONENTS), dtype=np.int64)
    costs[:, 0] = np.arange(300) % 7 * 20  # 0 .. 120: the ones > 100 are refused
    costs[:, 5] = np.arange(300) % 3
    mask = st.admit("q", 1, users, costs)
    np.testing.assert_array_equal(mask, costs[:, 0] <= 100)
    for i in (0, 1, 5, 6, 13, 299):
        rec = st.get_user(users[i])
        want = costs[i] if mask[i] else np.zeros(N_COMPONENTS, dtype=np.int64)
        np.testing.assert_array_equal(rec.spent, want)
        assert rec.halted == (not mask[i])


def test_differential_against_memory_store_with_large_amounts(redis_url):
    """Random admits, settles, replays, grants and default changes with amounts around 2^53, 10^17 and
    INT64_MAX/2 (where doubles are inexact): the Redis store answers and ends exactly like the in-memory one."""
    from streamdp.filter.memory import MemoryBudgetStore
    from streamdp.noise.generator import unsafe_seeded_generator

    rng = unsafe_seeded_generator(4242)

    def amount(scale_choice):
        base = [0, 10**6, 2**53, 10**17, 2**61][scale_choice]
        return int(base + int(rng.integers(-3, 4)) * max(1, base // 10**6 or 1) + int(rng.integers(0, 7)))

    def vec_of(kind):
        return [max(0, amount(kind)) if rng.random() < 0.4 else 0 for _ in range(N_COMPONENTS)]

    red = RedisBudgetStore.from_url(redis_url, default_budget=[2**62] * N_COMPONENTS, chunk=7)
    mem = MemoryBudgetStore([2**62] * N_COMPONENTS)
    users = [f"u{i}" for i in range(25)]
    open_batches = []
    for step in range(120):
        kind = int(rng.choice([1, 2, 3, 4], p=[0.3, 0.3, 0.34, 0.06]))
        action = rng.random()
        if action < 0.55:
            seq = step
            batch = [users[i] for i in rng.choice(len(users), size=int(rng.integers(1, 20)), replace=False)]
            costs = [vec_of(kind) for _ in batch]
            np.testing.assert_array_equal(red.admit("s", seq, batch, costs), mem.admit("s", seq, batch, costs))
            open_batches.append((seq, batch, costs))
        elif action < 0.75 and open_batches:
            seq, batch, costs = open_batches[int(rng.integers(0, len(open_batches)))]
            actual = [[int(c) // int(rng.integers(1, 5)) for c in row] for row in costs]
            red.settle("s", seq, batch, actual)
            mem.settle("s", seq, batch, actual)
        elif action < 0.85 and open_batches:  # replay (same or stale seq)
            seq, batch, costs = open_batches[int(rng.integers(0, len(open_batches)))]
            np.testing.assert_array_equal(red.admit("s", seq, batch, costs), mem.admit("s", seq, batch, costs))
        elif action < 0.95:
            u = users[int(rng.integers(0, len(users)))]
            b = [amount(int(rng.integers(2, 5))) * int(rng.integers(1, 3)) for _ in range(N_COMPONENTS)]
            b = [min(x, 2**63 - 1) for x in b]
            red.grant(u, b)
            mem.grant(u, b)
        else:
            b = [min(2**63 - 1, amount(int(rng.integers(2, 5))) * 4) for _ in range(N_COMPONENTS)]
            red.set_default_budget(b)
            mem.set_default_budget(b)
        if step % 10 == 9:
            a = {u.user: (u.spent.tolist(), u.budget.tolist(), u.halted) for u in red.iter_users()}
            b_ = {u.user: (u.spent.tolist(), u.budget.tolist(), u.halted) for u in mem.iter_users()}
            assert a == b_, step
    halted = sum(u.halted for u in mem.iter_users())
    assert 0 < halted < len(users)
    assert max(int(u.spent.max()) for u in mem.iter_users()) > 2**60  # the large regime was exercised


def test_the_kept_default_warning_names_the_store_without_its_password(spawn_redis, caplog):
    """The warning that a store keeps its stored default budget printed the store URL as given, password included,
    into the worker's log (service review of 2026-11-23, finding 4), and the budgets as raw fixed-point integers."""
    from streamdp.accounting.cost import Cost, budget_vector

    srv = spawn_redis(password="s3cr3t")
    assert "s3cr3t" in srv.url
    st = RedisBudgetStore.from_url(srv.url, default_budget=budget_vector(Cost(zcdp_rho=2.0, zcdp_delta=1e-4)))
    with caplog.at_level(logging.WARNING, logger="streamdp.filter.redis_store"):
        st2 = RedisBudgetStore.from_url(srv.url, default_budget=budget_vector(Cost(zcdp_rho=5.0)))
    text = caplog.text
    assert "keeps its stored default budget (zcdp_rho=2, zcdp_delta=0.0001)" in text
    assert "ignoring the configured one (zcdp_rho=5)" in text
    assert "s3cr3t" not in text and "***@" in text
    for s in (st, st2):
        s.close()


def test_redact_url():
    from streamdp.filter.redis_store import redact_url

    assert redact_url("redis://:pw@h:6379/0") == "redis://***@h:6379/0"
    assert redact_url("rediss://user:p@ss@h:1/2") == "rediss://***@h:1/2"
    assert redact_url("redis://h:1/0?password=pw&db=2") == "redis://h:1/0?password=***&db=2"
    assert redact_url("unix:///run/r.sock?db=0&Username=u&password=pw") == \
        "unix:///run/r.sock?db=0&Username=***&password=***"
    assert redact_url("redis://h:1/0") == "redis://h:1/0" and redact_url("") == ""
