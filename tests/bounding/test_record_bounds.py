"""The record bounder of ``continual_sums`` against a plain-Python reference: the three rules in event order, each
pair's history (earlier records, Σ G[s, t], Σ x_s·G[s, t]) through the signatures and links, and the snapshot."""

from __future__ import annotations

import numpy as np

from streamdp.bounding.record_bounds import RecordBounder


def reference(windows, C, delta0, m, gram):
    """windows: list of lists of (user, key, value, order). Returns per window the kept records and, per kept pair,
    (n_prior, Σ G, Σ xG), by scanning each user's records in order — the rules as the docs state them."""
    history = {}  # user → list of (key, t, x)
    out = []
    for t, recs in enumerate(windows, start=1):
        g = gram(t)
        kept = []
        by_user = {}
        for r in sorted(recs, key=lambda r: (r[0], r[3])):
            by_user.setdefault(r[0], []).append(r)
        pairs = {}
        for u, rs in by_user.items():
            hist = history.get(u, [])
            taken = len(hist)
            # rule 1: per (user, key) cap, earlier windows included
            r1, seen = [], {}
            for r in rs:
                n = sum(1 for h in hist if h[0] == r[1]) + seen.get(r[1], 0)
                if n < m:
                    r1.append(r)
                    seen[r[1]] = seen.get(r[1], 0) + 1
            # rule 2: first Δ0 keys of the window
            keys = []
            for r in r1:
                if r[1] not in keys:
                    keys.append(r[1])
            r2 = [r for r in r1 if keys.index(r[1]) < delta0]
            # rule 3: first C − taken records
            r3 = r2[: max(0, C - taken)]
            kept += r3
            for r in r3:
                if (u, r[1]) not in pairs:
                    prior = [h for h in hist if h[0] == r[1]]
                    pairs[(u, r[1])] = (len(prior), sum(g[h[1]] for h in prior), sum(h[2] * g[h[1]] for h in prior))
        for r in kept:
            history.setdefault(r[0], []).append((r[1], t, r[2]))
        out.append((sorted((r[0], r[1], r[2]) for r in kept), pairs))
    return out


def test_bounder_matches_the_reference_and_survives_a_snapshot():
    g = np.random.default_rng(5)
    C, delta0, m = 6, 3, 2
    gram = lambda t: np.concatenate([[0.0], 1.0 + 0.5 * np.arange(t)[::-1] / t])  # any positive column  # noqa
    windows = []
    for t in range(1, 9):
        n = 300
        users = g.integers(0, 40, n)
        keys = g.integers(0, 12, n)
        vals = np.round(g.normal(0, 3, n), 3)
        order = g.permutation(n)
        windows.append(list(zip(users.tolist(), keys.tolist(), vals.tolist(), order.tolist())))
    ref = reference(windows, C, delta0, m, gram)
    b = RecordBounder(C, delta0, m, with_values=True)
    for t, (recs, (want_kept, want_pairs)) in enumerate(zip(windows, ref), start=1):
        if t == 5:  # restore from the snapshot halfway: links, signatures and counts rebuilt from the log
            b = RecordBounder.from_state(b.state())
        u, k, x, r = (np.array(c) for c in zip(*recs))
        out = b.bound(u, k, x, r, t, gram(t))
        got_kept = sorted(zip(out.rec_user.tolist(), out.rec_key.tolist(), out.rec_x.tolist()))
        assert got_kept == want_kept, t
        got_pairs = {(int(pu), int(pk)): (int(n), float(pg), float(pxg)) for pu, pk, n, pg, pxg in
                     zip(out.pair_user, out.pair_key, out.prior_n, out.prior_g, out.prior_xg)}
        assert got_pairs.keys() == want_pairs.keys()
        for key, (n, sg, sxg) in want_pairs.items():
            assert got_pairs[key][0] == n and np.isclose(got_pairs[key][1], sg) and np.isclose(got_pairs[key][2], sxg)
        # per pair: j records kept, their value sum
        for pu, pk, j, a in zip(out.pair_user, out.pair_key, out.pair_j, out.pair_a):
            mine = [rec for rec in want_kept if rec[0] == pu and rec[1] == pk]
            assert j == len(mine) and np.isclose(a, sum(rec[2] for rec in mine))
        b.commit(out, np.ones(100, dtype=bool))
    assert sum(out.dropped.values()) > 0  # the rules bound in this stream


def test_commit_only_admitted_users():
    b = RecordBounder(4, 4, 4)
    out = b.bound(np.array([1, 2, 2]), np.array([7, 7, 8]), None, np.arange(3), 1, np.array([0.0, 1.0]))
    admitted = np.zeros(3, dtype=bool)
    admitted[2] = True
    b.commit(out, admitted)
    assert b.taken(np.array([1, 2])).tolist() == [0, 2]
    out2 = b.bound(np.array([1, 2]), np.array([7, 7]), None, np.arange(2), 2, np.array([0.0, 1.0, 1.0]))
    assert dict(zip(out2.pair_user.tolist(), out2.prior_n.tolist())) == {1: 0, 2: 1}
