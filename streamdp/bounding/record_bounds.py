"""User-level bounds on records (event counts and sums per key) and each user's own record history.

Used by ``continual_sums``. A *record* is one (event, key) occurrence: an event with items [a, b] and value v
contributes the record (a, v) and the record (b, v). Bounds chosen by the operator, applied per user in event order
(event time, then position in the input, then the item's position in the event) — each a function of the user's own
data and the public configuration only:

1. per (user, key): at most ``max_per_key`` (m) records over the epoch — a record on a pair already at m is dropped;
2. per window: records on at most ``max_keys_per_window`` (Δ0) distinct keys — the user's first Δ0 keys of the
   window (among the records left by rule 1), records on later keys are dropped;
3. per epoch: at most ``max_contributions`` (C) records in all, across keys — the user's first C records (left by
   rules 1–2), later ones are dropped.

The individual accounting needs, for each (user, key) of a window, what the user already put into that key's
noisy state: the windows s and values x_s of the user's earlier records on that key. The bounder keeps every
admitted record of the epoch (≤ C per user) in an append-only log — user, key, window, value — with each record
linked to the same user's previous record, so a user's history is a walk of at most C steps. To skip the walk for
(user, key) pairs the user never touched (nearly all pairs in a workload where users rarely repeat a key), each
user has two 64-bit signatures with one bit per key set (two independent hashes of the key id): a pair whose two
bits are not both set has no earlier record for certain; only the others are walked. The signature decides
nothing on its own: the walk compares key ids, so a collision costs a walk, never a wrong answer.

The snapshot is the log itself (four append-only arrays: a checkpoint appends one window's records); the links,
signatures and per-user counts are rebuilt from it on restore.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streamdp.arrays import put_rows
from streamdp.engine.append_log import AppendLog

__all__ = ["BoundedRecords", "RecordBounder"]

_H1 = np.uint64(0x9E3779B97F4A7C15)
_H2 = np.uint64(0xC2B2AE3D27D4EB4F)
_TOP6 = np.uint64(58)
_ONE = np.uint64(1)
_MAX_LOG = 2**31 - 1  # log positions are int32 (links)
_LOW32 = np.uint64(0xFFFFFFFF)
_SHIFT32 = np.uint64(32)


def _signature_bits(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two signature bits of each key id: 1 << (top 6 bits of two multiplicative hashes)."""
    k = np.asarray(keys).astype(np.uint64)
    return _ONE << ((k * _H1) >> _TOP6), _ONE << ((k * _H2) >> _TOP6)


def _segments(sorted_keys: np.ndarray) -> np.ndarray:
    """Start index of every run of equal values in a sorted array (non-empty)."""
    if sorted_keys.size == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.empty(sorted_keys.size, dtype=bool)
    starts[0] = True
    np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=starts[1:])
    return np.flatnonzero(starts)


@dataclass
class BoundedRecords:
    """One window's records after the bounds, before admission. Pairs and records are sorted by (user, key)."""

    t: int
    # the records kept (one row per record): what is committed for admitted users
    rec_user: np.ndarray  # int64
    rec_key: np.ndarray  # int64
    rec_x: np.ndarray | None  # float64 values (None: counts only)
    # the (user, key) pairs with at least one kept record
    pair_user: np.ndarray  # int64
    pair_key: np.ndarray  # int64
    pair_j: np.ndarray  # int64: records kept on the pair in this window
    pair_a: np.ndarray | None  # float64: their value sum
    prior_n: np.ndarray  # int64: the user's earlier records on the pair (this epoch)
    prior_g: np.ndarray  # float64: Σ over them of G[s, t]
    prior_xg: np.ndarray | None  # float64: Σ over them of x_s·G[s, t]
    dropped: dict  # records dropped per rule: {"max_per_key", "max_keys_per_window", "max_contributions"}
    users: np.ndarray | None = None  # int64: the distinct users of the window's records (sorted) …
    user_rows: np.ndarray | None = None  # … and their bounder rows when bound() ran (commit reuses them)

    @property
    def n_records(self) -> int:
        return int(self.rec_user.size)


class RecordBounder:
    def __init__(self, max_contributions: int, max_keys_per_window: int, max_per_key: int,
                 with_values: bool = False, horizon: int | None = None) -> None:
        for name, v in (("max_contributions", max_contributions), ("max_keys_per_window", max_keys_per_window),
                        ("max_per_key", max_per_key)):
            if isinstance(v, bool) or int(v) != v or v < 1:
                raise ValueError(f"{name} must be an integer ≥ 1, got {v!r}")
        self.C = int(max_contributions)
        self.delta0 = int(max_keys_per_window)
        self.m = int(max_per_key)
        self.with_values = bool(with_values)
        # windows fit int16 below 2¹⁵ (2 bytes per record saved: 10⁸ records are 200 MB)
        self._t_dtype = np.int16 if horizon is not None and horizon < 2 ** 15 else np.int32
        self.horizon = horizon
        self.reset()

    # ------------------------------------------------------------------------------------------------- state
    def reset(self) -> None:
        """A new epoch: no records."""
        self._n = 0
        cap = 1024
        self._log_user = np.zeros(cap, dtype=np.int32)
        self._log_key = np.zeros(cap, dtype=np.int32)
        self._log_t = np.zeros(cap, dtype=self._t_dtype)
        self._log_x = np.zeros(cap if self.with_values else 0, dtype=np.float64)
        self._log_prev = np.zeros(cap, dtype=np.int32)
        # per user, one row of three words (one cache line for every lookup): the two signatures, and
        # (head + 1) << 32 | taken — head: log position of the user's last record; taken: records this epoch
        self._user = np.zeros((0, 3), dtype=np.uint64)

    def _grow_users(self, need: int) -> None:
        have = self._user.shape[0]
        if need <= have:
            return
        # in place where the allocator can (no second copy); the new rows are zero
        self._user.resize((max(need, 2 * have, 1024), 3), refcheck=False)

    def _grow_log(self, need: int) -> None:
        if need > _MAX_LOG:
            raise OverflowError(f"more than {_MAX_LOG} records in one epoch")
        cap = self._log_user.size
        if need <= cap:
            return
        new = min(max(need, cap + cap // 4), _MAX_LOG)  # in place (realloc): 25 % headroom is enough
        # ndarray.resize reallocates in place where it can (no second copy of a large log)
        for name in ("_log_user", "_log_key", "_log_t", "_log_prev") + (("_log_x",) if self.with_values else ()):
            getattr(self, name).resize(new, refcheck=False)

    def _rows(self, user_ids: np.ndarray) -> np.ndarray:
        """The per-user rows of ``user_ids`` ((n, 3) uint64; zeros for users never seen)."""
        u = np.asarray(user_ids, dtype=np.int64)
        have = self._user.shape[0]
        if u.size and int(u.max()) < have:
            return np.take(self._user, u, axis=0)
        out = np.zeros((u.size, 3), dtype=np.uint64)
        ok = u < have
        out[ok] = np.take(self._user, u[ok], axis=0)
        return out

    def taken(self, user_ids: np.ndarray) -> np.ndarray:
        """Records admitted this epoch per user (0 for users never seen)."""
        return (self._rows(user_ids)[:, 2] & _LOW32).astype(np.int64)

    @property
    def n_log(self) -> int:
        return self._n

    def nbytes(self) -> int:
        arrays = [self._log_user, self._log_key, self._log_t, self._log_x, self._log_prev, self._user]
        return int(sum(a.nbytes for a in arrays))

    # ----------------------------------------------------------------------------------------------- history
    def _history(self, rows: np.ndarray, keys: np.ndarray, gram: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """For distinct (user, key) pairs, given the users' rows: (n, Σ G[s, t], Σ x_s·G[s, t]) over the user's
        earlier records on the key (``gram[s]`` = G[s, t])."""
        n = keys.size
        prior_n = np.zeros(n, dtype=np.int64)
        prior_g = np.zeros(n, dtype=np.float64)
        prior_xg = np.zeros(n, dtype=np.float64) if self.with_values else None
        if n == 0 or self._n == 0:
            return prior_n, prior_g, prior_xg
        b1, b2 = _signature_bits(keys)
        cand = np.flatnonzero(((rows[:, 0] & b1) != 0) & ((rows[:, 1] & b2) != 0))
        if cand.size == 0:
            return prior_n, prior_g, prior_xg
        pos = (rows[cand, 2] >> _SHIFT32).astype(np.int64) - 1
        want = keys[cand]
        live = np.flatnonzero(pos >= 0)
        while live.size:  # one step back along each user's records per round (≤ C rounds)
            p = pos[live]
            hit = self._log_key[p] == want[live]
            if hit.any():
                at, ph = cand[live[hit]], p[hit]
                g = gram[self._log_t[ph]]
                prior_n[at] += 1
                prior_g[at] += g
                if prior_xg is not None:
                    prior_xg[at] += self._log_x[ph] * g
            pos[live] = self._log_prev[p]
            live = live[pos[live] >= 0]
        return prior_n, prior_g, prior_xg

    # ------------------------------------------------------------------------------------------------- bound
    def bound(self, user_ids: np.ndarray, key_ids: np.ndarray, values: np.ndarray | None, order: np.ndarray,
              t: int, gram: np.ndarray) -> BoundedRecords:
        """Bound one window's records (one row per record). ``order``: distinct integers giving each record's
        place in event order; ``gram[s]`` = G[s, t] for s ≤ t (the charges' Gram column of this window)."""
        u = np.asarray(user_ids, dtype=np.int64)
        k = np.asarray(key_ids, dtype=np.int64)
        r = np.asarray(order, dtype=np.int64)
        x = None if values is None else np.asarray(values, dtype=np.float64)
        if (x is None) == self.with_values:
            raise ValueError("values must be given exactly when the bounder keeps values")
        dropped = {"max_per_key": 0, "max_keys_per_window": 0, "max_contributions": 0}
        empty_f = np.zeros(0, dtype=np.float64)
        if u.size == 0:
            z = np.zeros(0, dtype=np.int64)
            return BoundedRecords(t, z, z, empty_f if self.with_values else None, z, z, z,
                                  empty_f if self.with_values else None, z, empty_f,
                                  empty_f if self.with_values else None, dropped)
        pk = (u << np.int64(32)) | k
        o = None
        if x is None:  # counts only: the sorted keys are all we need (the order only for binding users)
            pk_s = np.sort(pk)
        else:
            # stable: a pair's records stay in input order, so its value sum (a float) is the same whatever other
            # users' records share the window (the staged split bounds a partition alone: bit-for-bit equal)
            o = np.argsort(pk, kind="stable")
            pk_s = pk[o]
            x = x[o]
        u, k = pk_s >> np.int64(32), pk_s & np.int64(0xFFFFFFFF)
        ps = _segments(pk_s)  # pair starts
        p_user, p_key = u[ps], k[ps]
        p_j = np.diff(np.append(ps, pk_s.size))
        us = _segments(p_user)  # user starts over pairs
        users = p_user[us]
        rows = self._rows(p_user)
        prior_n, prior_g, prior_xg = self._history(rows, p_key, gram)
        n_pairs_u = np.diff(np.append(us, p_user.size))
        n_rec_u = np.add.reduceat(p_j, us)
        taken_u = (rows[us, 2] & _LOW32).astype(np.int64)
        over_m = (prior_n + p_j) > self.m
        binding = (taken_u + n_rec_u > self.C) | (n_pairs_u > self.delta0)
        if over_m.any():
            binding |= np.logical_or.reduceat(over_m, us)
        keep = np.ones(pk_s.size, dtype=bool)
        if binding.any():
            if o is None:
                o = np.argsort(pk, kind="stable")
            r = r[o]
            rec_pair = np.repeat(np.arange(ps.size), p_j)
            rec_userix = np.repeat(np.arange(us.size), n_pairs_u)[rec_pair]
            sub = np.flatnonzero(binding[rec_userix])
            keep[sub] = self._sequential(u[sub], pk_s[sub], r[sub], prior_n[rec_pair[sub]],
                                         taken_u[rec_userix[sub]], dropped)
        if keep.all():
            j, a = p_j, (None if x is None else np.add.reduceat(x, ps))
            rec_user, rec_key, rec_x = u, k, x
            sel = slice(None)
        else:
            kept = keep.astype(np.int64)
            j = np.add.reduceat(kept, ps)
            a = None if x is None else np.add.reduceat(np.where(keep, x, 0.0), ps)
            rec_user, rec_key, rec_x = u[keep], k[keep], (None if x is None else x[keep])
            sel = np.flatnonzero(j > 0)
            j = j[sel]
            if a is not None:
                a = a[sel]
        return BoundedRecords(
            t=int(t), rec_user=rec_user, rec_key=rec_key, rec_x=rec_x,
            pair_user=p_user[sel], pair_key=p_key[sel], pair_j=j, pair_a=a,
            prior_n=prior_n[sel], prior_g=prior_g[sel], prior_xg=None if prior_xg is None else prior_xg[sel],
            dropped=dropped, users=users, user_rows=rows[us])

    def _sequential(self, u: np.ndarray, pk: np.ndarray, r: np.ndarray, prior_n: np.ndarray, taken: np.ndarray,
                    dropped: dict) -> np.ndarray:
        """The three rules in event order, for the records of users some rule binds (any order in; the keep mask
        comes back in that order)."""
        o = np.lexsort((r, u))  # event order within each user
        pk_o, u_o, prior_o, taken_o = pk[o], u[o], prior_n[o], taken[o]
        n = o.size
        # 1. per (user, key): earlier records on the pair this epoch + rank within the window < m
        op = np.lexsort((np.arange(n), pk_o))  # by pair, event order kept within the pair
        starts = _segments(pk_o[op])
        rank = np.arange(n) - np.repeat(starts, np.diff(np.append(starts, n)))
        rank_in_pair = np.empty(n, dtype=np.int64)
        rank_in_pair[op] = rank
        keep = prior_o + rank_in_pair < self.m
        dropped["max_per_key"] += int(n - keep.sum())
        # 2. the user's first Δ0 keys of the window (among the records kept by rule 1), ranked by first kept record
        idx = np.flatnonzero(keep)  # event order within each user
        if idx.size:
            pk_k = pk_o[idx]
            op2 = np.lexsort((np.arange(idx.size), pk_k))  # by pair, event order within the pair
            s2 = _segments(pk_k[op2])
            first = np.zeros(idx.size, dtype=bool)
            first[op2[s2]] = True  # each pair's first kept record
            cs = np.cumsum(first)
            ustart = _segments(u_o[idx])
            at_start = np.repeat(cs[ustart], np.diff(np.append(ustart, idx.size)))
            rank_first = cs - at_start  # 0-based rank among the user's keys (a user's first record is a first)
            pair_rank = np.empty(idx.size, dtype=np.int64)
            pair_rank[op2] = np.repeat(rank_first[op2[s2]], np.diff(np.append(s2, idx.size)))
            ok2 = pair_rank < self.delta0
            dropped["max_keys_per_window"] += int(idx.size - ok2.sum())
            keep[idx[~ok2]] = False
        # 3. the user's first C − taken records (kept by rules 1–2), in event order
        idx = np.flatnonzero(keep)
        if idx.size:
            fu = u_o[idx]
            ustart = _segments(fu)
            q = np.arange(idx.size) - np.repeat(ustart, np.diff(np.append(ustart, idx.size)))
            ok3 = taken_o[idx] + q < self.C
            dropped["max_contributions"] += int(idx.size - ok3.sum())
            keep[idx[~ok3]] = False
        out = np.empty(n, dtype=bool)
        out[o] = keep
        return out

    # ------------------------------------------------------------------------------------------------ commit
    def commit(self, b: BoundedRecords, admitted: np.ndarray) -> None:
        """Append the kept records of admitted users (``admitted``: bool per user id) to the history."""
        if b.rec_user.size == 0:
            return
        mask = admitted[b.rec_user]
        if mask.all():
            u, k, x = b.rec_user, b.rec_key, b.rec_x
        else:
            u, k = b.rec_user[mask], b.rec_key[mask]
            x = None if b.rec_x is None else b.rec_x[mask]
        rows = None
        if b.users is not None and u.size and b.users.size:  # the rows bound() read: nothing changed them since
            starts = _segments(u)
            if starts.size == b.users.size:  # every user of the window kept a record and was admitted
                rows = b.user_rows
            else:
                rows = b.user_rows[np.searchsorted(b.users, u[starts])]
        self._append(u, k, np.full(u.size, b.t, dtype=np.int64), x, rows)

    def _append(self, u: np.ndarray, k: np.ndarray, t: np.ndarray, x: np.ndarray | None,
                rows: np.ndarray | None = None) -> None:
        """Append records sorted by user (any key order within a user); ``rows``: the current rows of their
        distinct users, when the caller has them."""
        m = u.size
        if m == 0:
            return
        if int(u.max()) > np.iinfo(np.int32).max or int(k.max()) > np.iinfo(np.int32).max:
            raise OverflowError("user and key ids must fit int32")
        lo, hi = self._n, self._n + m
        self._grow_log(hi)
        self._grow_users(int(u.max()) + 1)
        us = _segments(u)
        users = u[us]
        sizes = np.diff(np.append(us, m))
        if rows is None:
            rows = np.take(self._user, users, axis=0)
        prev = np.arange(lo - 1, hi - 1, dtype=np.int64)  # the previous record of the same user …
        prev[us] = (rows[:, 2] >> _SHIFT32).astype(np.int64) - 1  # … or the user's last one before
        self._log_user[lo:hi] = u
        self._log_key[lo:hi] = k
        self._log_t[lo:hi] = t
        self._log_prev[lo:hi] = prev
        if self.with_values:
            self._log_x[lo:hi] = x
        b1, b2 = _signature_bits(k)
        rows[:, 0] |= np.bitwise_or.reduceat(b1, us)
        rows[:, 1] |= np.bitwise_or.reduceat(b2, us)
        head1 = (lo + us + sizes).astype(np.uint64)  # last record's position + 1
        rows[:, 2] = (head1 << _SHIFT32) | ((rows[:, 2] & _LOW32) + sizes.astype(np.uint64))
        put_rows(self._user, users, rows)
        self._n = hi

    # --------------------------------------------------------------------------------------------- snapshots
    def state(self) -> dict:
        n = self._n
        out = {"C": self.C, "delta0": self.delta0, "m": self.m, "with_values": self.with_values,
               "horizon": self.horizon,
               "user": AppendLog(self._log_user[:n].astype("<i4", copy=False).tobytes()),
               "key": AppendLog(self._log_key[:n].astype("<i4", copy=False).tobytes()),
               "t": AppendLog(self._log_t[:n].astype("<i4", copy=False).tobytes())}
        if self.with_values:
            out["x"] = AppendLog(self._log_x[:n].astype("<f8", copy=False).tobytes())
        return out

    @classmethod
    def from_state(cls, d: dict) -> "RecordBounder":
        b = cls(int(d["C"]), int(d["delta0"]), int(d["m"]), bool(d["with_values"]), d.get("horizon"))
        u = np.frombuffer(bytes(d["user"]), dtype="<i4").astype(np.int64)
        k = np.frombuffer(bytes(d["key"]), dtype="<i4").astype(np.int64)
        t = np.frombuffer(bytes(d["t"]), dtype="<i4").astype(np.int64)
        x = np.frombuffer(bytes(d["x"]), dtype="<f8").astype(np.float64) if b.with_values else None
        if not (u.size == k.size == t.size and (x is None or x.size == u.size)):
            raise ValueError("record bounder state: log arrays of different lengths")
        if u.size:
            if u.min() < 0 or k.min() < 0:
                raise ValueError("record bounder state: negative ids")
            counts = np.bincount(u)
            if counts.max() > b.C:
                raise ValueError(f"record bounder state has a user with {int(counts.max())} records, above C = {b.C}")
            # replay in log order, one user-sorted block per run of equal windows keeps the links in log order
            o = np.argsort(u, kind="stable")
            b._grow_log(u.size)
            b._grow_users(int(u.max()) + 1)
            us = _segments(u[o])
            prev = np.empty(u.size, dtype=np.int64)
            prev[o] = np.concatenate([[-1], o[:-1]])
            prev[o[us]] = -1
            n = u.size
            b._log_user[:n] = u
            b._log_key[:n] = k
            b._log_t[:n] = t
            b._log_prev[:n] = prev
            if x is not None:
                b._log_x[:n] = x
            users = u[o[us]]
            sizes = np.diff(np.append(us, n))
            b1, b2 = _signature_bits(k[o])
            b._user[users, 0] = np.bitwise_or.reduceat(b1, us)
            b._user[users, 1] = np.bitwise_or.reduceat(b2, us)
            head1 = (o[us + sizes - 1] + 1).astype(np.uint64)
            b._user[users, 2] = (head1 << _SHIFT32) | sizes.astype(np.uint64)
            b._n = n
        return b
