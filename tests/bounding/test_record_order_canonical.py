"""continual_sums' per-user float results do not depend on other users' records nor on the interned key ids
(docs/DECISIONS.md, "Scale-out: stage A admits", continual_sums): the staged split bounds a user in their input
partition only, with partition-local ids, and must reproduce the single engine's charges bit for bit."""

from __future__ import annotations

import numpy as np

from streamdp.bounding.record_bounds import RecordBounder
from streamdp.mechanisms.continual_sums import window_charges


def _bound(user, keys, x, others: int, seed: int):
    """One user's records (user id ``user``) bound alone or amid ``others`` records of other users."""
    g = np.random.default_rng(seed)
    u = np.full(len(keys), user, dtype=np.int64)
    k = np.asarray(keys, dtype=np.int64)
    v = np.asarray(x, dtype=np.float64)
    if others:
        ou = g.integers(0, 1000, others) * 2 + 1  # odd ids: never the user's
        ok = g.integers(0, 8, others)
        ov = g.random(others)
        at = np.sort(g.choice(len(keys) + others, len(keys), replace=False))
        mask = np.zeros(len(keys) + others, dtype=bool)
        mask[at] = True
        uu, kk, vv = (np.empty(mask.size, dtype=a.dtype) for a in (u, k, v))
        uu[mask], kk[mask], vv[mask] = u, k, v
        uu[~mask], kk[~mask], vv[~mask] = ou, ok, ov
        u, k, v = uu, kk, vv
    b = RecordBounder(64, 64, 64, with_values=True, horizon=4)
    gram = np.array([0.0, 1.0])
    out = b.bound(u, k, v, np.arange(u.size, dtype=np.int64), 1, gram)
    sel = out.pair_user == user
    recs = out.rec_user == user
    return out.pair_a[sel], out.rec_x[recs]


def test_a_pairs_value_sum_is_in_input_order_whatever_the_other_records():
    # 0.1 + 0.2 + 0.3 depends on the order of the terms: the pair's records must be summed in input order
    vals = [0.3, 0.1, 0.2, 0.7, 1e-17, 0.3] * 3
    keys = [4] * len(vals)
    alone, rec_alone = _bound(10, keys, vals, 0, 0)
    assert rec_alone.tolist() == vals  # the pair's records in input order …
    assert alone[0] == np.add.reduceat(np.array(vals), [0])[0]  # … and summed in it
    for seed in range(5):
        among, rec_among = _bound(10, keys, vals, 20_000, seed)
        assert among.tobytes() == alone.tobytes()
        assert rec_among.tobytes() == rec_alone.tobytes()


def test_a_users_charge_does_not_depend_on_the_order_of_their_keys():
    # inc = 2·j·prior_g/(2σ²) = prior_g (j = 1, G[t, t] = 0, σ = 1): 0.1, 0.2, 0.3, whose float sum depends on
    # the order ((0.1 + 0.2) + 0.3 ≠ (0.3 + 0.2) + 0.1); the pairs of a user come in key-id order, and key ids are
    # interned per process (partition-local in stage A)
    sigma = 1.0
    prior = np.array([0.1, 0.2, 0.3])
    users = np.zeros(3, dtype=np.int64)
    j = np.ones(3, dtype=np.int64)
    got = {window_charges(users, j, prior[list(p)], 0.0, sigma)[1].tobytes()
           for p in ([0, 1, 2], [2, 1, 0], [1, 0, 2], [2, 0, 1])}
    assert len(got) == 1


def test_charges_of_several_users_are_invariant_under_any_order_of_their_keys():
    g = np.random.default_rng(5)
    sizes = [1, 2, 5, 3, 7, 2]
    users = np.repeat(np.arange(len(sizes), dtype=np.int64) * 3, sizes)
    j = g.integers(1, 4, users.size)
    prior = g.random(users.size) * 10.0 ** g.integers(-3, 3, users.size)
    a = g.normal(size=users.size)
    xg = g.random(users.size)
    base = window_charges(users, j, prior, 0.7, 1.3, a, xg, 2.1)
    for _ in range(20):  # shuffle the pairs within each user (their keys interned in another order)
        perm = np.concatenate([g.permutation(np.flatnonzero(users == u)) for u in np.unique(users)])
        got = window_charges(users, j[perm], prior[perm], 0.7, 1.3, a[perm], xg[perm], 2.1)
        assert got[0].tolist() == base[0].tolist() and got[1].tobytes() == base[1].tobytes()
