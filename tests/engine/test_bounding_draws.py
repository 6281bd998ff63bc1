"""The Δ0 bounding's randomness (streamdp/engine/stage_a.py ``BoundingDraws``, docs/DECISIONS.md "Bounding
randomness"): a bounding root key Kb, one-way from the noise generator's key, and per (user, item) pair a keyed-hash
priority of (query, window, user name, item name); a user over Δ0 keeps their Δ0 items of smallest priority.

* known answers: Kb and the priorities recomputed here with hashlib from the documented recipe;
* a user's kept subset depends on their own pairs only (before 2026-12-07 the draws of a partition were handed out
  in (user id, item name) order, so another user's items shifted which draws a user got);
* BoundingDraws holds Kb only: nothing in it reproduces the release noise;
* the kept subset is uniform (χ², fixed key).
"""

from __future__ import annotations

import hashlib
import warnings

import numpy as np
import pytest
from randomgen import ChaCha
from scipy import stats

from streamdp.bounding.contribution import delta0_subset, pair_keys
from streamdp.engine.query import Names
from streamdp.engine.stage_a import BoundingDraws, pair_priority
from streamdp.noise.generator import bounding_key, secure_generator, unsafe_seeded_generator

warnings.simplefilter("ignore")


def recipe_kb(parent) -> bytes:
    keysetup = np.asarray(parent.bit_generator.state["state"]["keysetup"], dtype="<u4").tobytes()
    return hashlib.blake2b(keysetup, digest_size=32, person=b"streamdp-bound").digest()


def recipe_priority(kb: bytes, query: str, seq: int, user: str, item: str) -> float:
    parts = [query.encode(), seq.to_bytes(8, "little", signed=True), user.encode(), item.encode()]
    msg = b"".join(len(x).to_bytes(4, "little") + x for x in parts)
    d = hashlib.blake2b(msg, key=kb, digest_size=8, person=b"streamdp-prio").digest()
    return (int.from_bytes(d, "big") >> 11) / 2**53


def kept(draws: BoundingDraws, users: Names, items: Names, events: dict[str, list[str]], delta0: int) -> dict:
    """Bound one window's distinct (user, item) pairs with ``delta0_subset``: each user's kept item names."""
    u = np.concatenate([users.ids([name] * len(its)) for name, its in events.items()])
    i = np.concatenate([items.ids(its) for its in events.values()])
    keys = np.unique(pair_keys(u, i))
    keep = delta0_subset(keys >> np.int64(32), delta0, draws, keys & np.int64(0xFFFFFFFF))
    keys = keys if keep is None else keys[keep]
    out: dict[str, set] = {}
    for k in keys.tolist():
        out.setdefault(users.names([k >> 32])[0], set()).add(items.names([k & 0xFFFFFFFF])[0])
    return out


def test_the_bounding_key_is_the_documented_hash_of_the_generator_key():
    g = unsafe_seeded_generator(3)
    kb = bounding_key(g)
    assert kb == recipe_kb(g) and len(kb) == 32
    g.random(1000)  # the key set-up is fixed for the generator's life: drawing does not move Kb
    assert bounding_key(g) == kb
    restored = np.random.Generator(ChaCha(seed=0, rounds=20))
    restored.bit_generator.state = g.bit_generator.state  # what a checkpoint restore does
    assert bounding_key(restored) == kb
    assert bounding_key(unsafe_seeded_generator(4)) != kb
    assert bounding_key(secure_generator()) != bounding_key(secure_generator())


def test_a_pair_priority_is_the_documented_keyed_hash():
    kb = bytes(range(32))
    for q, seq, user, item in [("hist", 17, "alice", "x"), ("q", -1, "", "é"), ("counts", 2**40, "u:1", "item|2")]:
        assert pair_priority(kb, q, seq, user, item) == recipe_priority(kb, q, seq, user, item)
    # the length prefixes: moving a character between user and item changes the priority
    assert pair_priority(kb, "q", 1, "ab", "c") != pair_priority(kb, "q", 1, "a", "bc")
    # end to end: a user over Δ0 keeps the Δ0 items of smallest documented priority
    users, items = Names(), Names()
    names = [f"item{j}" for j in range(7)]
    got = kept(BoundingDraws(kb, 17, users, items).for_query("hist"), users, items, {"alice": names}, 3)
    assert got["alice"] == set(sorted(names, key=lambda n: recipe_priority(kb, "hist", 17, "alice", n))[:3])


@pytest.mark.parametrize("other", [[], ["o1"], ["o1", "o2", "o3"], [f"o{j}" for j in range(11)]])
def test_a_users_kept_subset_does_not_depend_on_other_users(other):
    """Bob's kept items are the same whatever another user of the window (same partition, interned before or after
    him, with items interned before his or not) sends."""
    kb = bounding_key(unsafe_seeded_generator(5))
    bob = [f"b{j}" for j in range(6)]
    alone_users, alone_items = Names(), Names()
    alone = kept(BoundingDraws(kb, 1, alone_users, alone_items).for_query("hist"), alone_users, alone_items,
                 {"bob": bob}, 2)["bob"]
    for first in ("alice", "bob"):
        users, items = Names(), Names()
        users.ids([first])  # interning order: alice's id below bob's, or above
        items.ids(other[::-1])
        events = {"alice": other + bob[:2], "bob": bob}
        got = kept(BoundingDraws(kb, 1, users, items).for_query("hist"), users, items, events, 2)
        assert got["bob"] == alone


def test_bounding_draws_hold_the_bounding_key_only_and_it_does_not_give_the_noise():
    engine_rng = secure_generator()
    draws = BoundingDraws(bounding_key(engine_rng), 9, Names(), Names()).for_query("hist")
    noise = engine_rng.normal(0.0, 5.0, size=8)
    held = list(vars(draws).values())
    assert not any(isinstance(v, (np.random.Generator, np.random.BitGenerator, dict)) for v in held)
    keysetup = np.asarray(engine_rng.bit_generator.state["state"]["keysetup"], dtype="<u4").tobytes()
    assert draws.key != keysetup and keysetup not in b"".join(v for v in held if isinstance(v, bytes))
    # a generator keyed with Kb (as the old derivation keyed its parent from the key set-up) is another stream
    rebuilt = np.random.Generator(ChaCha(key=int.from_bytes(draws.key, "little"), rounds=20))
    assert not np.array_equal(rebuilt.normal(0.0, 5.0, size=8), noise)
    with pytest.raises(TypeError):
        BoundingDraws(engine_rng, 9, Names(), Names())


def test_the_kept_subset_of_a_user_is_uniform():
    """A user with 6 items and Δ0 = 2 (beside another user over Δ0), bounded in 6,000 windows under a fixed Kb: each
    item kept with probability 1/3, each of the 15 pairs of items with probability 1/15 (χ² at p = 10⁻³)."""
    kb = bounding_key(unsafe_seeded_generator(3))
    names = [f"item{j}" for j in range(6)]
    counts: dict[tuple, int] = {}
    per_item = dict.fromkeys(names, 0)
    n = 6000
    users, items = Names(), Names()
    for seq in range(1, n + 1):
        got = kept(BoundingDraws(kb, seq, users, items).for_query("q"), users, items,
                   {"zed": ["z1", "z2", "z3"], "ann": names}, 2)
        assert len(got["ann"]) == 2 and len(got["zed"]) == 2
        for it in got["ann"]:
            per_item[it] += 1
        pair = tuple(sorted(got["ann"]))
        counts[pair] = counts.get(pair, 0) + 1
    assert len(counts) == 15
    assert stats.chisquare(list(counts.values())).pvalue > 1e-3
    assert stats.chisquare(list(per_item.values())).pvalue > 1e-3 and sum(per_item.values()) == 2 * n


def test_a_prepare_that_draws_other_randomness_fails_loudly():
    draws = BoundingDraws(bytes(32), 1, Names(), Names()).for_query("q")
    with pytest.raises(AttributeError):
        draws.normal(0, 1)
