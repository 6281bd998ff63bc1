"""In-memory budget store (the embedded default): numpy arrays over interned user ids.

Implements :class:`streamdp.filter.store.BudgetStore` exactly (same contract tests as the Redis store).
Optionally backed by a local file (``save``/``load``; the CLI's ``--store PATH``).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from typing import Iterator, Sequence

import numpy as np

from streamdp.accounting.cost import INT64_MAX, N_COMPONENTS
from streamdp.filter.store import BudgetStore, UserBudget, as_cost_matrix

_NO_SEQ = np.iinfo(np.int64).min
SEQ_LIMIT = 2**53  # batch sequence numbers are compared as Lua numbers by the Redis store


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


class _ScopeState:
    __slots__ = ("last_seq", "last_ok", "reserved", "open")

    def __init__(self, cap: int) -> None:
        self.last_seq = np.full(cap, _NO_SEQ, dtype=np.int64)
        self.last_ok = np.zeros(cap, dtype=bool)
        self.reserved = np.zeros((cap, N_COMPONENTS), dtype=np.int64)
        self.open = np.zeros(cap, dtype=bool)  # reservation not yet settled

    def grow(self, cap: int) -> None:
        n = self.last_seq.shape[0]
        self.last_seq = np.concatenate([self.last_seq, np.full(cap - n, _NO_SEQ, dtype=np.int64)])
        self.last_ok = np.concatenate([self.last_ok, np.zeros(cap - n, dtype=bool)])
        self.reserved = np.concatenate([self.reserved, np.zeros((cap - n, N_COMPONENTS), dtype=np.int64)])
        self.open = np.concatenate([self.open, np.zeros(cap - n, dtype=bool)])


class MemoryBudgetStore(BudgetStore):
    def __init__(self, default_budget: np.ndarray | None = None, path: str | None = None) -> None:
        self._default = (np.zeros(N_COMPONENTS, dtype=np.int64) if default_budget is None
                         else check_budget(default_budget, "default_budget"))
        self._index: dict[str, int] = {}
        self._names: list[str] = []
        cap = 1024
        self._spent = np.zeros((cap, N_COMPONENTS), dtype=np.int64)
        self._budget = np.zeros((cap, N_COMPONENTS), dtype=np.int64)
        self._has_override = np.zeros(cap, dtype=bool)
        self._halted = np.zeros(cap, dtype=bool)
        self._scopes: dict[str, _ScopeState] = {}
        self._releases: dict[str, bytes] = {}
        self._ledger: list[dict] = []
        self.path = path

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

    def _ids(self, users: Sequence[str]) -> np.ndarray:
        index = self._index
        found = list(map(index.get, users))  # one C-level pass; new users are the rare case
        if None in found:
            for i, u in enumerate(users):
                if found[i] is None:
                    j = index.get(u)  # a name repeated among the new ones
                    if j is None:
                        j = len(self._names)
                        index[u] = j
                        self._names.append(u)
                    found[i] = j
            self._grow(len(self._names))
        return np.array(found, dtype=np.int64)

    def _scope(self, scope: str) -> _ScopeState:
        s = self._scopes.get(scope)
        if s is None:
            s = self._scopes[scope] = _ScopeState(self._spent.shape[0])
        return s

    def _budgets_of(self, ids: np.ndarray) -> np.ndarray:
        return np.where(self._has_override[ids, None], self._budget[ids], self._default[None, :])

    # ---- budgets -------------------------------------------------------------------------------------------
    def default_budget(self) -> np.ndarray:
        return self._default.copy()

    def set_default_budget(self, budget, *, actor: str = "operator", reason: str = "") -> None:
        budget = check_budget(budget)
        old = self._default.copy()
        self._default = budget.copy()
        self.append_ledger({"type": "admin", "action": "set-default", "actor": actor, "reason": reason,
                            "old": old.tolist(), "new": budget.tolist()})

    def grant(self, user: str, budget, *, actor: str = "operator", reason: str = "") -> None:
        budget = check_budget(budget)
        (j,) = self._ids([user])
        old = self._budgets_of(np.array([j]))[0].copy()
        self._budget[j] = budget
        self._has_override[j] = True
        self.append_ledger({"type": "admin", "action": "grant", "user": user, "actor": actor, "reason": reason,
                            "old": old.tolist(), "new": budget.tolist()})

    # ---- admission -----------------------------------------------------------------------------------------
    def admit(self, scope: str, seq: int, users: Sequence[str], costs) -> np.ndarray:
        users = list(users)
        n = len(users)
        costs = check_costs(costs, n)
        seq = check_seq(seq)
        if n == 0:
            return np.zeros(0, dtype=bool)
        if len(set(users)) != n:
            raise ValueError("a batch must not name a user twice")
        ids = self._ids(users)
        sc = self._scope(scope)
        last = sc.last_seq[ids]
        replay_same = last == seq
        stale = last > seq
        fresh = ~(replay_same | stale)
        out = np.empty(n, dtype=bool)
        out[replay_same] = sc.last_ok[ids[replay_same]]
        out[stale] = ~self._halted[ids[stale]]

        fid = ids[fresh]
        fc = costs[fresh]
        halted = self._halted[fid]
        # spent + cost <= budget in every component (000 eq. (7)); computed without overflow
        fits = np.all(fc <= self._budgets_of(fid) - self._spent[fid], axis=1)
        # an all-zero cost is admitted free even if a lowered budget is now below spent (000 Alg. 1 line 7)
        ok = ~halted & (fits | ~fc.any(axis=1))
        newly_halted = ~halted & ~ok
        self._spent[fid[ok]] += fc[ok]
        self._halted[fid[newly_halted]] = True
        sc.last_seq[fid] = seq
        sc.last_ok[fid] = ok
        sc.reserved[fid] = np.where(ok[:, None], fc, 0)
        sc.open[fid] = ok
        out[fresh] = ok
        return out

    def settle(self, scope: str, seq: int, users: Sequence[str], actual) -> None:
        users = list(users)
        n = len(users)
        actual = check_costs(actual, n)
        seq = check_seq(seq)
        if n == 0:
            return
        if len(set(users)) != n:
            raise ValueError("a settle batch must not name a user twice")
        known = [(i, self._index[u]) for i, u in enumerate(users) if u in self._index]
        if not known:
            return
        pos = np.array([k[0] for k in known])
        ids = np.array([k[1] for k in known])
        sc = self._scope(scope)
        live = (sc.last_seq[ids] == seq) & sc.open[ids]
        pos, ids = pos[live], ids[live]
        act = actual[pos]
        res = sc.reserved[ids]
        over = (act > res).any(axis=1)
        if over.any():
            bad = users[int(pos[np.argmax(over)])]
            raise ValueError(f"settle: actual cost exceeds the reservation of user {bad!r}")
        self._spent[ids] -= res - act
        sc.reserved[ids] = act
        sc.open[ids] = False  # a second settle of this batch is a no-op

    # ---- release log and ledger ----------------------------------------------------------------------------
    def put_release(self, key: str, record: bytes) -> bytes:
        return self._releases.setdefault(key, bytes(record))

    def get_release(self, key: str) -> bytes | None:
        return self._releases.get(key)

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
                    "reserved": s.reserved[:n].tolist(), "open": s.open[:n].tolist()}
                for k, s in self._scopes.items()
            },
            "releases": {k: v.decode("latin-1") for k, v in self._releases.items()},
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
        st._releases = {k: v.encode("latin-1") for k, v in d.get("releases", {}).items()}
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
        with open(path) as f:
            return cls.from_json(json.load(f), path=path)

    def close(self) -> None:
        self.save()
