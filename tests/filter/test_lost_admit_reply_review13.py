"""F1: a lost reply of the admit script (connection reset / socket timeout after Redis ran it) is retried by
RedisBudgetStore._call with the SAME nonce, so the retry is taken for "a later chunk of the recording call" and
every user is charged a second time (or halted for good when the second charge does not fit).

Contract (store.py, redis_store.py module doc): "a lost reply is harmless: the engine's retry of the same batch gets
the first answer"; contract §3/§6: "no budget charged twice".
"""
import numpy as np
import redis

from streamdp.accounting.cost import N_COMPONENTS
from streamdp.filter.redis_store import RedisBudgetStore


def c(rho):
    v = [0] * N_COMPONENTS
    v[0] = rho
    return v


DIGEST = "ab" * 16


def _lose_first_reply(monkeypatch):
    """The server runs the script and replies; the client's first read then fails as on a reset connection."""
    real = redis.connection.Connection.read_response
    state = {"lost": False}

    def flaky(self, *a, **k):
        r = real(self, *a, **k)
        if not state["lost"]:
            state["lost"] = True
            raise redis.exceptions.ConnectionError("connection reset by peer (simulated, after the reply)")
        return r

    monkeypatch.setattr(redis.connection.Connection, "read_response", flaky)
    return state


def test_lost_reply_with_digest_charges_once(redis_url, monkeypatch):
    st = RedisBudgetStore.from_url(redis_url, default_budget=np.array(c(10), dtype=np.int64))
    st._sha_of("admit")  # script loaded: the next reply read is the admit's
    state = _lose_first_reply(monkeypatch)
    out = st.admit("engine:x", 1, ["u", "v"], [c(4), c(4)], digest=DIGEST)
    assert state["lost"]  # the first reply was lost and _call retried internally
    assert out.tolist() == [True, True]
    assert int(st.get_user("u").spent[0]) == 4, "charged twice for one admit"


def test_lost_reply_does_not_halt_a_user_who_fits(redis_url, monkeypatch):
    st = RedisBudgetStore.from_url(redis_url, default_budget=np.array(c(10), dtype=np.int64))
    st._sha_of("admit")
    _lose_first_reply(monkeypatch)
    out = st.admit("engine:x", 1, ["u"], [c(6)], digest=DIGEST)
    # 6 fits a budget of 10 once; the retry charges 6 again, does not fit, and halts u for good
    assert out.tolist() == [True]
    assert not st.get_user("u").halted


def test_lost_reply_of_a_multi_chunk_admit_charges_each_user_once(redis_url, monkeypatch):
    """The pipeline's connection breaks after the server ran the first chunk: the retry gets the first outcome for
    that chunk's users and judges the chunks that never ran as new (each user charged exactly once)."""
    st = RedisBudgetStore.from_url(redis_url, default_budget=np.array(c(10), dtype=np.int64))
    st.chunk = 2
    st._sha_of("admit")
    _lose_first_reply(monkeypatch)
    users = [f"u{i}" for i in range(7)]
    out = st.admit("engine:x", 1, users, [c(4)] * 7, digest=DIGEST)
    assert out.all()
    assert [int(st.get_user(u).spent[0]) for u in users] == [4] * 7
    # and a second admit of the same window (the engine's own retry) still answers the first outcome
    assert st.admit("engine:x", 1, users, [c(4)] * 7, digest=DIGEST).all()
    assert [int(st.get_user(u).spent[0]) for u in users] == [4] * 7
