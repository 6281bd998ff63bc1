"""In-memory budget store (the embedded default): numpy arrays over interned user ids.

Implements :class:`streamdp.filter.store.BudgetStore` exactly (same contract tests as the Redis store).
Optionally backed by a local file (``save``/``load``; the CLI's ``--store PATH``).
"""

from __future__ import annotations

import bisect
import heapq
import json
import os
import tempfile
import time
from typing import Iterator, Sequence

import numpy as np

from streamdp.accounting.cost import INT64_MAX, N_COMPONENTS
from streamdp.arrays import put_rows, rows_all, rows_any_nonzero, take_rows
from streamdp.filter.store import (DIGEST_KEEP, RELEASE_BODIES_KEPT, BudgetStore, Fence, Fenced, UserBudget,
                                   as_cost_matrix, check_digest, check_fence, digest_tag, release_digest,
                                   release_parts, trimmed_marker)

_NO_SEQ = np.iinfo(np.int64).min
SEQ_LIMIT = 2**53  # batch sequence numbers are compared as Lua numbers by the Redis store


#: The largest budget-store FILE read (the embedded store, ``--store FILE``): it is read whole into memory, so a
#: bound keeps a wrong path (a device, a huge unrelated file) from exhausting memory. 1 GiB holds about 4 million
#: users with one scope each; beyond that, use Redis.
MAX_STORE_FILE_BYTES = 1 << 30


def _too_large(path: str) -> str:
    return (f"{path} is larger than {MAX_STORE_FILE_BYTES >> 20} MiB, the limit of a budget store file (the embedded "
            "store is read whole into memory): not a streamdp store file, or a store that belongs in Redis")


def _check_regular(path: str, st: os.stat_result) -> None:
    import stat

    if not stat.S_ISREG(st.st_mode):
        kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode)
                or stat.S_ISBLK(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a socket"
                if stat.S_ISSOCK(st.st_mode) else "not a regular file")
        raise ValueError(f"{path} is {kind}, not a budget store file (a store file is a regular file)")
    if st.st_size > MAX_STORE_FILE_BYTES:
        raise ValueError(_too_large(path))


def check_store_file(path: str) -> None:
    """ValueError unless ``path`` is missing or a regular file of at most :data:`MAX_STORE_FILE_BYTES` (checked
    before a store file is locked or read: ``--store /dev/zero`` read without bound)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    _check_regular(path, st)


def check_budget(budget, name: str = "budget") -> np.ndarray:
    """A budget vector: ``N_COMPONENTS`` fixed-point integers in [0, INT64_MAX] (floats are refused: convert
    with :func:`streamdp.accounting.cost.budget_vector`)."""
    arr = np.asarray(budget)
    if arr.shape != (N_COMPONENTS,):
        raise ValueError(f"{name} must have shape ({N_COMPONENTS},), got {arr.shape}")
    integral = arr.dtype.kind in "iu" or (
        arr.dtype.kind == "O" and all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in arr))
    if not integral:
        raise ValueError(f"{name} must be fixed-point integers, got dtype {arr.dtype} "
                         "(see streamdp.accounting.cost.budget_vector)")
    vals = [int(x) for x in arr]
    if any(v < 0 or v > INT64_MAX for v in vals):
        raise ValueError(f"{name} components must lie in [0, 2**63 - 1], got {vals}")
    return np.array(vals, dtype=np.int64)


def check_costs(costs, n: int) -> np.ndarray:
    """:func:`as_cost_matrix`, refusing non-integer input (a float cost would be truncated, i.e. under-charged:
    convert with :meth:`streamdp.accounting.cost.Cost.to_fixed`, which rounds up)."""
    kind = np.asarray(costs).dtype.kind
    if kind not in "iu" and not (kind == "O" and all(
            isinstance(x, (int, np.integer)) for x in np.asarray(costs, dtype=object).ravel())):
        raise ValueError(f"costs must be fixed-point integers, got dtype {np.asarray(costs).dtype} "
                         "(see streamdp.accounting.cost.Cost.to_fixed)")
    return as_cost_matrix(costs, n)


def check_batch(users: Sequence[str], costs, seq, what: str = "batch") -> tuple[list[str], np.ndarray, int]:
    """The validated arguments of an admit or settle by names: (users as a list, cost matrix, seq). Refuses a batch
    that names a user twice."""
    users = list(users)
    costs = check_costs(costs, len(users))
    seq = check_seq(seq)
    if len(set(users)) != len(users):
        raise ValueError(f"a {what} must not name a user twice")
    return users, costs, seq


def check_id_batch(user_ids, table, costs, seq, what: str = "batch") -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`check_batch` for a batch named by the ids of a name ``table`` (the engine's interned users)."""
    uid = check_user_ids(user_ids, len(table))
    costs = check_costs(costs, uid.size)
    seq = check_seq(seq)
    if not distinct(uid):  # table ids are distinct iff their names are
        raise ValueError(f"a {what} must not name a user twice")
    return uid, costs, seq


def check_seq(seq) -> int:
    """A batch sequence number: an integer with ``|seq| < 2**53``."""
    if isinstance(seq, bool) or not isinstance(seq, (int, np.integer)):
        raise ValueError(f"seq must be an integer, got {seq!r}")
    s = int(seq)
    if not -SEQ_LIMIT < s < SEQ_LIMIT:
        raise ValueError(f"seq must satisfy |seq| < 2**53, got {s}")
    return s


def ledger_entry_json(entry: dict) -> str:
    """The stored form of a ledger entry: JSON with a ``ts`` (seconds since the epoch) added if missing."""
    if not isinstance(entry, dict):
        raise ValueError(f"ledger entry must be a dict, got {type(entry).__name__}")
    e = dict(entry)
    e.setdefault("ts", time.time())
    try:
        return json.dumps(e, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as err:
        raise ValueError(f"ledger entry must be JSON-serialisable: {err}") from None


def check_user_ids(user_ids, n_names: int) -> np.ndarray:
    """Ids into a name table of ``n_names`` names: a 1-D integer array with values in [0, n_names)."""
    arr = np.asarray(user_ids)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
        raise ValueError(f"user_ids must be a 1-D integer array, got shape {arr.shape} dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and (arr.min() < 0 or arr.max() >= n_names):
        raise ValueError(f"user_ids must lie in [0, {n_names}) (ids of the name table)")
    return arr


def distinct(a: np.ndarray) -> bool:
    """No value of the 1-D array ``a`` repeats (O(n) when ``a`` is increasing, as the engine's batches are)."""
    if a.size < 2 or bool((a[1:] > a[:-1]).all()):
        return True
    b = np.sort(a)
    return not bool((b[1:] == b[:-1]).any())


def tag_value(digest: str | None) -> tuple[np.uint64, int] | None:
    """The batch tag of a digest (:func:`streamdp.filter.store.digest_tag`: its first 16 hex digits) as (the digits
    as an unsigned 64-bit integer, padded with zeros on the right, how many digits); None without a digest. Two tags
    are equal iff both parts are, as the strings are in Redis."""
    if digest is None:
        return None
    t = digest_tag(digest)
    return np.uint64(int(t.ljust(16, "0"), 16)), len(t)


class _ScopeState:
    """Per user: the last batch applied in the scope (its seq and tag), its outcome, the open reservation."""

    __slots__ = ("last_seq", "last_ok", "reserved", "open", "tag", "taglen")

    def __init__(self, cap: int) -> None:
        self.last_seq = np.full(cap, _NO_SEQ, dtype=np.int64)
        self.last_ok = np.zeros(cap, dtype=bool)
        self.reserved = np.zeros((cap, N_COMPONENTS), dtype=np.int64)
        self.open = np.zeros(cap, dtype=bool)  # reservation not yet settled
        self.tag = np.zeros(cap, dtype=np.uint64)  # the batch's tag (tag_value) …
        self.taglen = np.zeros(cap, dtype=np.int8)  # … and its length (0: the batch carried no digest)

    def grow(self, cap: int) -> None:
        n = self.last_seq.shape[0]
        self.last_seq = np.concatenate([self.last_seq, np.full(cap - n, _NO_SEQ, dtype=np.int64)])
        self.last_ok = np.concatenate([self.last_ok, np.zeros(cap - n, dtype=bool)])
        self.reserved = np.concatenate([self.reserved, np.zeros((cap - n, N_COMPONENTS), dtype=np.int64)])
        self.open = np.concatenate([self.open, np.zeros(cap - n, dtype=bool)])
        self.tag = np.concatenate([self.tag, np.zeros(cap - n, dtype=np.uint64)])
        self.taglen = np.concatenate([self.taglen, np.zeros(cap - n, dtype=np.int8)])


def _merged(old: np.ndarray, new: np.ndarray, components) -> np.ndarray:
    """``new`` at ``components`` (all when None), ``old`` elsewhere (the stores' partial budget change)."""
    if components is None:
        return new
    out = np.array(old, dtype=np.int64).copy()
    idx = np.asarray(list(components), dtype=np.int64)
    out[idx] = new[idx]
    return out


class MemoryBudgetStore(BudgetStore):
    def __init__(self, default_budget: np.ndarray | None = None, path: str | None = None) -> None:
        self._default = (np.zeros(N_COMPONENTS, dtype=np.int64) if default_budget is None
                         else check_budget(default_budget, "default_budget"))
        self._index_: dict[str, int] = {}  # name → store id for _names[:_indexed] (see _index)
        self._indexed = 0
        self._names: list[str] = []
        cap = 1024
        self._spent = np.zeros((cap, N_COMPONENTS), dtype=np.int64)
        self._budget = np.zeros((cap, N_COMPONENTS), dtype=np.int64)
        self._has_override = np.zeros(cap, dtype=bool)
        self._halted = np.zeros(cap, dtype=bool)
        self._scopes: dict[str, _ScopeState] = {}
        # replay digests: scope → seq → (the first digest of (scope, seq), "C" clean / "T" tainted), a min-heap of
        # those seqs, and the highest seq ever recorded (see _replay_trusted)
        self._digests: dict[str, dict[int, tuple[str, str]]] = {}
        self._digest_seqs: dict[str, list[int]] = {}
        self._digest_max: dict[str, int] = {}
        self._releases: dict[str, bytes] = {}  # the records kept (retention: store.py)
        self._release_digests: dict[str, bytes] = {}  # key → digest, of every record of the engine's key form
        self.release_bodies_kept = RELEASE_BODIES_KEPT
        self._release_order: dict[str, list[tuple[int, int, str]]] = {}  # query → its kept records' (epoch, t, key)
        self._ledger: list[dict] = []
        self._fences: dict[str, int] = {}  # fence name → its current epoch (claim_fence)
        self.path = path
        self._xtable = None  # admit_ids: the caller's name table and its id → store id map (see _table_ids)
        self._xmap = np.full(0, -1, dtype=np.int64)
        self._xonly = False  # every user came in through _xtable (then a table id never seen is a new user)

    # ---- internals -----------------------------------------------------------------------------------------
    def _grow(self, need: int) -> None:
        cap = self._spent.shape[0]
        if need <= cap:
            return
        new = max(need, 2 * cap)
        pad = new - cap
        self._spent = np.concatenate([self._spent, np.zeros((pad, N_COMPONENTS), dtype=np.int64)])
        self._budget = np.concatenate([self._budget, np.zeros((pad, N_COMPONENTS), dtype=np.int64)])
        self._has_override = np.concatenate([self._has_override, np.zeros(pad, dtype=bool)])
        self._halted = np.concatenate([self._halted, np.zeros(pad, dtype=bool)])
        for s in self._scopes.values():
            s.grow(new)

    @property
    def _index(self) -> dict[str, int]:
        """name → store id. Users added through :meth:`_table_ids` are indexed lazily, here (bulk insert)."""
        n = len(self._names)
        if self._indexed < n:
            self._index_.update(zip(self._names[self._indexed:n], range(self._indexed, n)))
            self._indexed = n
        return self._index_

    def _ids(self, users: Sequence[str]) -> np.ndarray:
        index = self._index
        found = list(map(index.get, users))  # one C-level pass; new users are the rare case
        if None in found:
            names = self._names
            for i in [i for i, f in enumerate(found) if f is None]:
                u = users[i]
                n = len(names)
                j = index.setdefault(u, n)  # one probe; a name repeated among the new ones keeps its first id
                if j == n:
                    names.append(u)
                found[i] = j
            self._indexed = len(names)
            self._xonly = False  # users named outside the table: a new table id may now be a known user
            self._grow(len(names))
        return np.array(found, dtype=np.int64)

    def _scope(self, scope: str) -> _ScopeState:
        s = self._scopes.get(scope)
        if s is None:
            s = self._scopes[scope] = _ScopeState(self._spent.shape[0])
        return s

    def _budgets_of(self, ids: np.ndarray) -> np.ndarray:
        if not self._has_override.any():  # no per-user override anywhere: the default for all (a view)
            return np.broadcast_to(self._default, (ids.size, N_COMPONENTS))
        return np.where(self._has_override[ids, None], take_rows(self._budget, ids), self._default[None, :])

    # ---- budgets -------------------------------------------------------------------------------------------
    def default_budget(self) -> np.ndarray:
        return self._default.copy()

    def set_default_budget(self, budget, *, actor: str = "operator", reason: str = "", components=None) -> None:
        budget = _merged(self._default, check_budget(budget), components)
        old = self._default.copy()
        self._default = budget.copy()
        self.append_ledger({"type": "admin", "action": "set-default", "actor": actor, "reason": reason,
                            "old": old.tolist(), "new": budget.tolist()})

    def grant(self, user: str, budget, *, actor: str = "operator", reason: str = "", components=None) -> None:
        budget = check_budget(budget)
        (j,) = self._ids([user])
        old = self._budgets_of(np.array([j]))[0].copy()
        budget = _merged(old, budget, components)
        self._budget[j] = budget
        self._has_override[j] = True
        self.append_ledger({"type": "admin", "action": "grant", "user": user, "actor": actor, "reason": reason,
                            "old": old.tolist(), "new": budget.tolist()})

    # ---- admission -----------------------------------------------------------------------------------------
    def admit(self, scope: str, seq: int, users: Sequence[str], costs, digest: str | None = None,
              fence: Fence | None = None) -> np.ndarray:
        users, costs, seq = check_batch(users, costs, seq)
        digest = check_digest(digest)
        self._check_fence(check_fence(fence))
        if not users:
            return np.zeros(0, dtype=bool)
        ids = self._ids(users)
        return self._admit(scope, seq, ids, costs, digest)

    # ---- fences --------------------------------------------------------------------------------------------
    def claim_fence(self, name: str) -> Fence:
        fence = check_fence(Fence(name, self._fences.get(name, 0) + 1))
        self._fences[name] = fence.epoch
        return fence

    def _check_fence(self, fence: Fence | None) -> None:
        if fence is not None and self._fences.get(fence.name) != fence.epoch:
            raise Fenced(f"fence {fence.name!r} is claimed by epoch {self._fences.get(fence.name)}, not "
                         f"{fence.epoch}: a later owner took over")

    def _replay_trusted(self, scope: str, seq: int, digest: str | None) -> bool:
        """Is this admit trusted with the stale answer (store.py, "Replay digests")? The first admit of (scope,
        seq) records its digest — tainted if a later seq of the scope is already recorded — and forgets the digests
        of seqs below ``seq - DIGEST_KEEP``; it is not trusted itself (the Redis store's later chunks of that first
        call are, which answers the same: see redis_scripts.ADMIT)."""
        if digest is None:
            return True
        known = self._digests.setdefault(scope, {})
        first = known.get(seq)
        if first is not None:
            return first == (digest, "C")
        heap = self._digest_seqs.setdefault(scope, [])
        later = self._digest_max.get(scope, seq) > seq  # the highest recorded seq is never forgotten
        known[seq] = (digest, "T" if later else "C")
        self._digest_max[scope] = max(self._digest_max.get(scope, seq), seq)
        heapq.heappush(heap, seq)
        while heap[0] < seq - DIGEST_KEEP:
            known.pop(heapq.heappop(heap), None)
        return False

    def _admit(self, scope: str, seq: int, ids: np.ndarray, costs: np.ndarray, digest: str | None) -> np.ndarray:
        """Admission of the distinct store ids ``ids`` (validated batch): copies of a batch already applied to a
        user get its outcome, trusted stale replays are admitted, everyone else is judged as new (store.py)."""
        sc = self._scope(scope)
        trusted = self._replay_trusted(scope, seq, digest)
        last = sc.last_seq[ids]
        tag = tag_value(digest)
        if (last < seq).all():
            return self._charge(sc, seq, ids, costs, tag)  # a new batch for every user (the usual case)
        if tag is None:
            copy = last == seq
            stale = last > seq
        else:
            copy = (last == seq) & (sc.taglen[ids] == tag[1]) & (sc.tag[ids] == tag[0])
            stale = (last > seq) & (sc.taglen[ids] > 0) if trusted else np.zeros(ids.size, dtype=bool)
        fresh = ~(copy | stale)
        out = np.empty(ids.size, dtype=bool)
        out[copy] = sc.last_ok[ids[copy]]
        out[stale] = True  # a refusal halts for good and is the last state written: earlier seqs were admissions
        out[fresh] = self._charge(sc, seq, ids[fresh], costs[fresh], tag)
        return out

    def _charge(self, sc: _ScopeState, seq: int, fid: np.ndarray, fc: np.ndarray,
                tag: tuple[np.uint64, int] | None) -> np.ndarray:
        """Check-and-charge of users judged as new for this batch (Liang–Yi (adaptive budgeting) Alg. 1 with filter eq. (7)); their state
        becomes (seq, tag)."""
        halted = self._halted[fid]
        spent = take_rows(self._spent, fid)
        # spent + cost <= budget in every component (Liang–Yi (adaptive budgeting) eq. (7)); computed without overflow
        fits = rows_all(fc <= self._budgets_of(fid) - spent)
        # an all-zero cost is admitted free even if a lowered budget is now below spent (Liang–Yi (adaptive budgeting) Alg. 1 line 7)
        ok = ~halted & (fits | ~rows_any_nonzero(fc))
        if ok.all():
            put_rows(self._spent, fid, spent + fc)  # ≤ budget ≤ INT64_MAX: no overflow
            put_rows(sc.reserved, fid, fc)
        else:
            self._spent[fid[ok]] += fc[ok]
            self._halted[fid[~halted & ~ok]] = True
            # a user already halted whose state here is a refusal (or none) keeps that state, as in the Redis
            # script: its seq stays the user's first refusal in the scope (stale replays rely on it)
            w = ~(halted & ~sc.last_ok[fid])
            wid, wok = fid[w], ok[w]
            sc.reserved[wid] = np.where(wok[:, None], fc[w], 0)
            sc.last_seq[wid] = seq
            sc.last_ok[wid] = wok
            sc.open[wid] = wok
            sc.tag[wid], sc.taglen[wid] = (0, 0) if tag is None else tag
            return ok
        sc.last_seq[fid] = seq
        sc.last_ok[fid] = ok
        sc.open[fid] = ok
        sc.tag[fid], sc.taglen[fid] = (0, 0) if tag is None else tag
        return ok

    def settle(self, scope: str, seq: int, users: Sequence[str], actual, digest: str | None = None,
               fence: Fence | None = None) -> None:
        users, actual, seq = check_batch(users, actual, seq, "settle batch")
        digest = check_digest(digest)
        self._check_fence(check_fence(fence))
        if not users:
            return
        index = self._index
        known = [(i, index[u]) for i, u in enumerate(users) if u in index]
        if not known:
            return
        pos = np.array([k[0] for k in known])
        ids = np.array([k[1] for k in known])
        self._settle(scope, seq, pos, ids, actual, users.__getitem__, digest)

    def _settle(self, scope: str, seq: int, pos: np.ndarray, ids: np.ndarray, actual: np.ndarray, name_at,
                digest: str | None = None) -> None:
        """Settle of the known users: batch positions ``pos``, store ids ``ids``; ``name_at(k)`` names the user at
        batch position ``k`` (for the error message); with ``digest`` only reservations of that batch."""
        sc = self._scope(scope)
        live = (sc.last_seq[ids] == seq) & sc.open[ids]
        if digest is not None:
            tag = tag_value(digest)
            live &= (sc.taglen[ids] == tag[1]) & (sc.tag[ids] == tag[0])
        if not live.all():
            pos, ids = pos[live], ids[live]
        act = actual[pos]
        res = sc.reserved[ids]
        over = rows_any_nonzero(act > res)
        if over.any():
            bad = name_at(int(pos[np.argmax(over)]))
            raise ValueError(f"settle: actual cost exceeds the reservation of user {bad!r}")
        self._spent[ids] -= res - act
        sc.reserved[ids] = act
        sc.open[ids] = False  # a second settle of this batch is a no-op

    # ---- admission by the engine's interned ids (BudgetStore.admit_ids) --------------------------------------
    def _table_ids(self, uid: np.ndarray, table, intern: bool) -> np.ndarray:
        """Store ids of ``table``'s ids ``uid`` through a cached int array (table id → store id, −1 = not yet
        seen): a name is looked up only the first time its table id comes by (a Python dict lookup costs several
        cache misses per name). Unknown names are interned (``intern``) or left at −1. The cache follows one table
        object (held here, so its identity cannot be reused) and is rebuilt when another one is passed."""
        if table is not self._xtable:
            self._xtable, self._xmap = table, np.full(0, -1, dtype=np.int64)
            self._xonly = not self._names
        m = len(table)
        if self._xmap.size < m:
            grown = np.full(max(m, 2 * self._xmap.size, 1024), -1, dtype=np.int64)
            grown[:self._xmap.size] = self._xmap
            self._xmap = grown
        sid = self._xmap[uid]
        miss = np.flatnonzero(sid < 0)
        if miss.size:
            um = uid[miss]
            names = table.names(um)
            if intern and self._xonly:  # distinct table ids never seen are distinct new users: no lookup
                n = len(self._names)
                self._names.extend(names)  # store ids in batch order, as admit(names) gives them
                got = np.arange(n, n + len(names), dtype=np.int64)
                self._grow(len(self._names))
            elif intern:
                got = self._ids(names)  # new users get store ids in batch order, as with admit(names)
            else:
                get = self._index.get
                got = np.array([-1 if j is None else j for j in map(get, names)], dtype=np.int64)
            sid[miss] = got
            self._xmap[um] = got
        return sid

    def admit_ids(self, scope: str, seq: int, user_ids: np.ndarray, costs, table,
                  digest: str | None = None, fence: Fence | None = None) -> np.ndarray:
        if type(self).admit is not MemoryBudgetStore.admit:  # a subclass's own admit keeps its say
            return super().admit_ids(scope, seq, user_ids, costs, table, digest=digest, fence=fence)
        uid, costs, seq = check_id_batch(user_ids, table, costs, seq)
        digest = check_digest(digest)
        self._check_fence(check_fence(fence))
        n = uid.size
        if n == 0:
            return np.zeros(0, dtype=bool)
        return self._admit(scope, seq, self._table_ids(uid, table, intern=True), costs, digest)

    def settle_ids(self, scope: str, seq: int, user_ids: np.ndarray, actual, table, digest: str | None = None,
                   fence: Fence | None = None) -> None:
        if type(self).settle is not MemoryBudgetStore.settle:
            return super().settle_ids(scope, seq, user_ids, actual, table, digest=digest, fence=fence)
        uid, actual, seq = check_id_batch(user_ids, table, actual, seq, "settle batch")
        digest = check_digest(digest)
        self._check_fence(check_fence(fence))
        if uid.size == 0:
            return
        sid = self._table_ids(uid, table, intern=False)
        pos = np.flatnonzero(sid >= 0)
        if pos.size:
            self._settle(scope, seq, pos, sid[pos], actual, lambda k: table.names(uid[k:k + 1])[0], digest)

    # ---- release log and ledger ----------------------------------------------------------------------------
    def put_release(self, key: str, record: bytes) -> bytes:
        record = bytes(record)
        old = self._releases.get(key)
        if old is not None:
            return old
        d = self._release_digests.get(key)
        if d is not None:  # recorded, its record dropped: the same record if the digest says so
            return record if release_digest(record) == d else trimmed_marker(d)
        self._releases[key] = record
        parts = release_parts(key)
        if parts is not None:
            self._release_digests[key] = release_digest(record)
            self._trim_releases(*parts, key)
        return record

    def _trim_releases(self, query: str, epoch: int, t: int, key: str) -> None:
        """Note the record of (``query``, ``epoch``, ``t``) and drop those of ``query`` beyond the latest
        ``release_bodies_kept`` windows (their digests stay)."""
        order = self._release_order.get(query)
        if order is None:  # (re)built from the records kept, in (epoch, window) order
            order = self._release_order[query] = sorted(
                (p[1], p[2], k) for k in self._releases if (p := release_parts(k)) is not None and p[0] == query
                and k != key)
        bisect.insort(order, (epoch, t, key))
        while len(order) > self.release_bodies_kept:
            del self._releases[order.pop(0)[2]]

    def get_release(self, key: str) -> bytes | None:
        rec = self._releases.get(key)
        if rec is None and key in self._release_digests:
            return trimmed_marker(self._release_digests[key])
        return rec

    def append_ledger(self, entry: dict) -> None:
        self._ledger.append(json.loads(ledger_entry_json(entry)))  # stored as its JSON round trip, like Redis

    def ledger(self, *, query: str | None = None, since: float | None = None) -> list[dict]:
        out = self._ledger
        if query is not None:
            out = [e for e in out if e.get("query") == query]
        if since is not None:
            out = [e for e in out if e.get("ts", 0) >= since]
        return json.loads(json.dumps(out))  # deep copies

    # ---- inspection ----------------------------------------------------------------------------------------
    def _user_at(self, j: int) -> UserBudget:
        return UserBudget(
            user=self._names[j],
            halted=bool(self._halted[j]),
            spent=self._spent[j].copy(),
            budget=self._budgets_of(np.array([j]))[0].copy(),
            extra={"override": bool(self._has_override[j])},
        )

    def get_user(self, user: str) -> UserBudget | None:
        j = self._index.get(user)
        return None if j is None else self._user_at(j)

    def iter_users(self) -> Iterator[UserBudget]:
        for j in range(len(self._names)):
            yield self._user_at(j)

    # ---- persistence (embedded store in a local file) -------------------------------------------------------
    def to_json(self) -> dict:
        n = len(self._names)
        return {
            "version": 1,
            "default": self._default.tolist(),
            "users": self._names,
            "spent": self._spent[:n].tolist(),
            "budget": self._budget[:n].tolist(),
            "override": self._has_override[:n].tolist(),
            "halted": self._halted[:n].tolist(),
            "scopes": {
                k: {"last_seq": s.last_seq[:n].tolist(), "last_ok": s.last_ok[:n].tolist(),
                    "reserved": s.reserved[:n].tolist(), "open": s.open[:n].tolist(),
                    "tag": [f"{t:016x}"[:g] if g else None for t, g in zip(s.tag[:n].tolist(), s.taglen[:n].tolist())]}
                for k, s in self._scopes.items()
            },
            "digests": {k: {str(q): list(g) for q, g in d.items()} for k, d in self._digests.items()},
            "digest_max": self._digest_max,
            "fences": self._fences,
            "releases": {k: v.decode("latin-1") for k, v in self._releases.items()},
            "release_digests": {k: v.hex() for k, v in self._release_digests.items()},
            "ledger": self._ledger,
        }

    @classmethod
    def from_json(cls, d: dict, path: str | None = None) -> "MemoryBudgetStore":
        st = cls(np.array(d["default"], dtype=np.int64), path=path)
        st._ids(d["users"])
        n = len(d["users"])
        if n:
            st._spent[:n] = np.array(d["spent"], dtype=np.int64)
            st._budget[:n] = np.array(d["budget"], dtype=np.int64)
            st._has_override[:n] = np.array(d["override"], dtype=bool)
            st._halted[:n] = np.array(d["halted"], dtype=bool)
        for k, s in d.get("scopes", {}).items():
            sc = st._scope(k)
            if n:
                sc.last_seq[:n] = np.array(s["last_seq"], dtype=np.int64)
                sc.last_ok[:n] = np.array(s["last_ok"], dtype=bool)
                sc.reserved[:n] = np.array(s["reserved"], dtype=np.int64)
                sc.open[:n] = np.array(s["open"], dtype=bool)
                tags = s.get("tag")  # absent from files of before batch tags: every state untagged
                if tags is not None:
                    sc.taglen[:n] = np.array([0 if t is None else len(t) for t in tags], dtype=np.int8)
                    sc.tag[:n] = np.array([0 if t is None else int(t.ljust(16, "0"), 16) for t in tags],
                                          dtype=np.uint64)
        for k, dg in d.get("digests", {}).items():
            st._digests[k] = {int(q): tuple(g) for q, g in dg.items()}
            st._digest_seqs[k] = sorted(st._digests[k])  # a sorted list is a heap
        st._digest_max = {k: int(v) for k, v in d.get("digest_max", {}).items()}
        st._fences = {str(k): int(v) for k, v in d.get("fences", {}).items()}
        st._releases = {k: v.encode("latin-1") for k, v in d.get("releases", {}).items()}
        st._release_digests = {k: bytes.fromhex(v) for k, v in d.get("release_digests", {}).items()}
        st._ledger = list(d.get("ledger", []))
        return st

    def save(self, path: str | None = None) -> None:
        path = path or self.path
        if not path:
            return
        d = os.path.dirname(os.path.abspath(path))
        os.makedirs(d, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".streamdp-store-")
        with os.fdopen(fd, "w") as f:
            json.dump(self.to_json(), f)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str) -> "MemoryBudgetStore":
        """The store saved at ``path``; ValueError naming the file when it is not one: not a regular file (a
        device such as ``/dev/zero``, a FIFO, a directory — read whole, they never end or block), larger than
        :data:`MAX_STORE_FILE_BYTES`, not JSON, or JSON of another shape."""
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))  # a FIFO must not block
        with os.fdopen(fd, "rb") as f:
            _check_regular(path, os.fstat(fd))
            data = f.read(MAX_STORE_FILE_BYTES + 1)
        if len(data) > MAX_STORE_FILE_BYTES:
            raise ValueError(_too_large(path))
        try:
            d = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(f"{path} is not a streamdp budget store file (not JSON: {e})") from None
        try:
            return cls.from_json(d, path=path)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
            raise ValueError(f"{path} is not a streamdp budget store file ({type(e).__name__}: {e})") from None

    file_lock = None  # a StoreFileLock held while this process writes ``path`` (file_lock.py)

    def close(self) -> None:
        try:
            self.save()
        finally:
            if self.file_lock is not None:
                self.file_lock.release()
