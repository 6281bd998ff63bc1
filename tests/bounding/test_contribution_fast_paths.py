"""The bounder's fast paths give exactly the results of the plain definitions.

* ``commit_bounded(b, keep)`` (reuses bound()'s search) ≡ ``commit(b.user_ids[keep], b.item_ids[keep])``;
* the Δ0 subset, which sorts only the pairs of users over Δ0, ≡ ranking ALL pairs by (user, random priority) with
  the very same draws — one ``rng.random(n)`` over the live pairs in key order, and no draw at all when no user is
  over Δ0 (the random stream, hence every later noise draw, is unchanged).
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from streamdp.bounding.contribution import ContributionBounder, pair_keys
from streamdp.noise.generator import unsafe_seeded_generator


def _st(g) -> bytes:
    return pickle.dumps(g.bit_generator.state)


def _reference_bound(keys_state: dict, delta0: int, cap: int, users, items, rng):
    """The plain definition (module doc): distinct pairs, drop those at C, then per user keep the Δ0 pairs with the
    smallest random priority (priorities drawn for all live pairs in key order, only if some user is over Δ0)."""
    keys = np.unique(pair_keys(users, items))
    stored = dict(zip(keys_state["keys"].tolist(), keys_state["counts"].tolist()))
    prior = np.array([stored.get(k, 0) for k in keys.tolist()], dtype=np.int64)
    keys, prior = keys[prior < cap], prior[prior < cap]
    u = keys >> 32
    per_user = {x: int((u == x).sum()) for x in np.unique(u).tolist()}
    if keys.size and max(per_user.values()) > delta0:
        prio = rng.random(keys.size)
        keep = np.zeros(keys.size, dtype=bool)
        for x in per_user:
            idx = np.flatnonzero(u == x)
            keep[idx[np.argsort(prio[idx], kind="stable")[:delta0]]] = True
        keys, prior = keys[keep], prior[keep]
    return keys, prior == 0


@pytest.mark.parametrize("delta0,cap", [(1, 1), (3, 1), (2, 3)])
def test_bound_and_commit_bounded_equal_the_definitions(delta0, cap):
    rng_data = unsafe_seeded_generator(500 + delta0 * 10 + cap)
    fast, slow = ContributionBounder(delta0, cap), ContributionBounder(delta0, cap)
    g_fast, g_slow, g_ref = (unsafe_seeded_generator(77) for _ in range(3))
    n_drawless = n_heavy = 0
    for w in range(40):
        if w == 25:
            fast.reset()
            slow.reset()
        n = int(rng_data.integers(0, 120))
        users = rng_data.integers(0, 30, n)
        items = rng_data.integers(0, 12, n)
        state_before = slow.counters()
        g_before = _st(g_ref)
        ref_keys, ref_first = _reference_bound(state_before, delta0, cap, users, items, g_ref)
        bf = fast.bound(users, items, g_fast)
        bs = slow.bound(users, items, g_slow)
        np.testing.assert_array_equal(pair_keys(bf.user_ids, bf.item_ids), ref_keys)
        np.testing.assert_array_equal(bf.first, ref_first)
        assert _st(g_fast) == _st(g_ref)  # the same draws
        if _st(g_ref) == g_before:
            n_drawless += 1
        else:
            n_heavy += 1
        keep = rng_data.random(bf.user_ids.size) < 0.8
        if w % 7 == 3:
            keep[:] = True
        fast.commit_bounded(bf, keep)
        slow.commit(bs.user_ids[keep], bs.item_ids[keep])
        for k in ("keys", "counts"):
            np.testing.assert_array_equal(fast.counters()[k], slow.counters()[k])
        assert fast.state() == slow.state()  # the same commit log too
    assert n_drawless > 0 and n_heavy > 0


def test_stale_bounded_window_falls_back_to_a_full_commit():
    b = ContributionBounder(4, 2)
    rng = unsafe_seeded_generator(1)
    w1 = b.bound(np.array([0, 0, 1]), np.array([5, 6, 5]), rng)
    w2 = b.bound(np.array([0, 2]), np.array([5, 9]), rng)  # bounded against the same (empty) counters
    b.commit_bounded(w1, np.ones(3, dtype=bool))
    b.commit_bounded(w2, np.ones(2, dtype=bool))  # the counters changed since w2 was bound: searched again
    d = b.counters()
    got = dict(zip(d["keys"].tolist(), d["counts"].tolist()))
    assert got == {(0 << 32) | 5: 2, (0 << 32) | 6: 1, (1 << 32) | 5: 1, (2 << 32) | 9: 1}


def test_commit_bounded_refuses_index_arrays():
    b = ContributionBounder(4, 1)
    w = b.bound(np.array([0, 1]), np.array([5, 6]), unsafe_seeded_generator(0))
    with pytest.raises(ValueError, match="keep"):
        b.commit_bounded(w, np.array([0, 1]))
    with pytest.raises(ValueError, match="keep"):
        b.commit_bounded(w, np.ones(3, dtype=bool))
