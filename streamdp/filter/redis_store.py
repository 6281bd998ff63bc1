"""Redis budget store: the per-user privacy filters of Liang–Yi (adaptive budgeting) Alg. 1 / filter eq. (7) held in Redis.

Implements :class:`streamdp.filter.store.BudgetStore` exactly (same contract tests as the in-memory store).

Layout (namespace ``ns``, default ``"sdp"``; field layout in :mod:`streamdp.filter.redis_scripts`):

* ``<ns>:{u:<user>}`` — one hash per user: spent, budget override, halted flag, per-scope idempotency state.
  The braces are a Redis Cluster hash tag, so everything of one user lives in one slot.
* ``<ns>:default`` — hash of the default budget.
* ``<ns>:rel:<key>`` — release log (``SET … NX GET``: the first write wins, later writes read it back).
* ``<ns>:ledger`` — a Redis stream; each entry has one field ``e`` holding the JSON of the ledger entry.

Atomicity: :meth:`RedisBudgetStore.admit` and :meth:`RedisBudgetStore.settle` are ONE Lua script call per chunk
of up to ``chunk`` users (default 10 000; ``SCRIPT LOAD`` once, ``EVALSHA``, reload on ``NOSCRIPT``). A chunk is
all-or-nothing (Redis runs a script atomically; the settle script validates before it writes). A batch larger than
one chunk is applied chunk by chunk; if the connection fails in between, retrying the same ``(scope, seq)``
completes it without charging anyone twice (idempotency, see the contract), so a retry loop always converges.
For the same reason a lost reply is harmless: the engine's retry of the same batch gets the first answer.

Integer arithmetic: amounts travel as decimal strings and are added/compared exactly inside Lua (doubles while
the sums stay below 2^53, two base-10⁹ limbs above; settles subtract with HINCRBY), so every int64 amount up to
INT64_MAX — including the "infinite" budget sentinel — is handled exactly; no budget needs to be refused. Batch
sequence numbers must satisfy ``|seq| < 2^53`` (they are compared as Lua numbers); both stores enforce this.

Client side: :meth:`RedisBudgetStore.admit_ids` / :meth:`RedisBudgetStore.settle_ids` (the engine's path) cache
the packed key of each id of the caller's name table, and the store remembers, per scope, the users the admit
script reported as refused for good (halted — which is permanent — with a refusal or no state in the scope:
every later admit of them in that scope answers "refused" and writes nothing, see
:data:`streamdp.filter.redis_scripts.ADMIT`); later batches answer those users locally, without sending them.

Errors: any connection, timeout, authentication or server failure raises
:class:`streamdp.filter.store.StoreError` (never a raw ``redis`` exception); nothing was charged by a script
that did not run. Read-only and idempotent calls are retried once immediately (a pooled connection may have died
with a restarted server); ledger appends are not retried (an append whose reply was lost may already be stored).

Cluster: keys of one user share a hash tag, but a batched script names many users (and the default key), which
Redis Cluster only accepts when all keys hash to one slot. This store therefore needs a standalone Redis (or a
primary with replicas / Sentinel). Running on Cluster would need the batch grouped by slot with a copy of the
default budget per slot; that is not implemented.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Callable, Iterator, Sequence, TypeVar

import numpy as np

from streamdp.accounting.cost import N_COMPONENTS, budget_text
from streamdp.filter import redis_scripts
from streamdp.filter.memory import _merged, check_batch, check_budget, check_id_batch, ledger_entry_json
from streamdp.filter.store import BudgetStore, StoreError, UserBudget, check_digest

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_CHUNK = 10_000
# answer codes of the admit script, one byte per user (see redis_scripts.ADMIT)
_ADMITTED, _HALTED, _REFUSED = ord("1"), ord("h"), ord("0")
_NEVER = np.iinfo(np.int64).max  # halted-user cache: not known to be refused
_SPENT_FIELDS = tuple(f"s{i}".encode() for i in range(N_COMPONENTS))
_BUDGET_FIELDS = tuple(f"b{i}".encode() for i in range(N_COMPONENTS))


def _pack(parts: list[bytes]) -> bytes:
    """A RESP command: an array of bulk strings."""
    return b"".join([b"*%d\r\n" % len(parts), *[b"$%d\r\n%b\r\n" % (len(p), p) for p in parts]])


def _bulks(parts: list[bytes]) -> list[bytes]:
    """The RESP bulk strings of ``parts`` (a command's arguments, to be joined after its array header)."""
    return [b"$%d\r\n%b\r\n" % (len(p), p) for p in parts]


class _Call:
    """One script call, packed but for its header: ``body`` holds the RESP bulk strings of ``nkeys`` keys
    followed by the arguments, ``nargs`` strings in all."""

    __slots__ = ("nkeys", "nargs", "body")

    def __init__(self, nkeys: int, nargs: int, body: bytes) -> None:
        self.nkeys, self.nargs, self.body = nkeys, nargs, body


def _unique_rows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(a, axis=0, return_inverse=True)`` of a 2-D int64 array (same rows, same order, same inverse),
    ~15× faster for cost matrices: each non-constant column is replaced by its order-preserving code and the codes
    are combined into one mixed-radix int64 key (lexicographic row order = key order); falls back to numpy's
    row-wise unique when the key could overflow."""
    key = np.zeros(a.shape[0], dtype=np.int64)
    span = 1
    for j in range(a.shape[1]):
        col = a[:, j]
        if (col == col[0]).all():
            continue
        u, c = np.unique(col, return_inverse=True)
        span *= u.size
        if span >= 1 << 62:
            uniq, inv = np.unique(a, axis=0, return_inverse=True)
            return uniq, inv.ravel()
        key = key * u.size + c.ravel()
    _, first, inv = np.unique(key, return_index=True, return_inverse=True)
    return a[first], inv.ravel()


def redact_url(url: str) -> str:
    """``url`` with its credentials replaced by ``***``: the userinfo before ``@`` and the values of ``password``
    and ``username`` query parameters (redis-py accepts both forms)."""
    import re

    u = url or ""
    if "://" in u:
        scheme, rest = u.split("://", 1)
        host, slash, path = rest.partition("/")
        if "@" in host:
            u = f"{scheme}://***@{host.rsplit('@', 1)[1]}{slash}{path}"
    return re.sub(r"(?i)([?&](?:password|username)=)[^&#]*", r"\1***", u)


def _glob_escape(s: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in s)


class RedisBudgetStore(BudgetStore):
    """Budget store in a standalone Redis (≥ 7). Build with :meth:`from_url`."""

    def __init__(self, client, *, default_budget=None, namespace: str = "sdp", chunk: int = DEFAULT_CHUNK,
                 url: str = "") -> None:
        import redis

        self._redis_mod = redis
        if chunk < 1:
            raise ValueError(f"chunk must be ≥ 1, got {chunk}")
        if not namespace or any(c in namespace for c in "{}"):
            raise ValueError(f"namespace must be non-empty and free of braces, got {namespace!r}")
        self.r = client
        self.ns = namespace
        self.chunk = int(chunk)
        self.url = url
        self._default_key = f"{namespace}:default"
        self._ledger_key = f"{namespace}:ledger"
        self._user_prefix = f"{namespace}:{{u:"
        self._sha: dict[str, str] = {}
        # admit_ids/settle_ids: the caller's name table and, per table id, the RESP bulk string of its user key
        self._xtable = None
        self._xfrag = np.empty(0, dtype=object)
        self._xhave = np.zeros(0, dtype=bool)
        # users known to be refused for good in a scope (answer code 'h' of the admit script: halted, with a
        # refusal or no state in the scope), with the seq of that answer: later admits of that seq or a later one
        # answer them without asking Redis (an earlier seq is a stale replay, which Redis answers "admitted").
        # name → seq per scope (admit), and per table id of _xtable per scope (admit_ids; _NEVER: not known).
        self._halted_names: dict[str, dict[str, int]] = {}
        self._halted_ids: dict[str, np.ndarray] = {}
        if default_budget is not None:
            b = check_budget(default_budget, "default_budget")
            stored = self._call(lambda: self._eval("init_default", [self._default_key], [str(int(x)) for x in b]))
            if not stored:
                cur = self.default_budget()
                if not np.array_equal(cur, b):
                    log.warning("Redis store %s keeps its stored default budget (%s), ignoring the configured one "
                                "(%s); change it with `streamdp budget set-default`", self._where(),
                                budget_text(cur), budget_text(b))

    @classmethod
    def from_url(cls, url: str, default_budget=None, *, namespace: str = "sdp", chunk: int = DEFAULT_CHUNK,
                 socket_timeout: float = 10.0, connect_timeout: float = 2.0) -> "RedisBudgetStore":
        """``redis://[user:pass@]host:port/db``, ``rediss://…`` (TLS; ``?ssl_ca_certs=…`` etc. as in redis-py),
        or ``unix:///path/redis.sock?db=0``.

        ``default_budget`` initialises the default budget of a store that has none; a stored default is kept
        (it is changed only by the audited :meth:`set_default_budget`).
        """
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        if not isinstance(url, str) or not url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"url must start with redis://, rediss:// or unix://, got {url!r}")
        try:
            client = redis.Redis.from_url(
                url, socket_timeout=socket_timeout, socket_connect_timeout=connect_timeout,
                retry=Retry(NoBackoff(), 0), health_check_interval=0,
            )
        except (ValueError, TypeError) as e:
            raise ValueError(f"invalid Redis URL {url!r}: {e}") from None
        return cls(client, default_budget=default_budget, namespace=namespace, chunk=chunk, url=url)

    # ---- plumbing ------------------------------------------------------------------------------------------
    def _user_key(self, user: str) -> str:
        if not isinstance(user, str):
            raise ValueError(f"user ids must be str, got {type(user).__name__}")
        return f"{self._user_prefix}{user}}}"

    def _user_of_key(self, key: bytes) -> str:
        return key.decode()[len(self._user_prefix):-1]

    def _call(self, fn: Callable[[], T], *, retry: bool = True) -> T:
        """Run ``fn``; map every redis failure to StoreError. Idempotent calls get one immediate retry."""
        redis = self._redis_mod
        for attempt in (0, 1):
            try:
                return fn()
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as e:
                if retry and attempt == 0 and not isinstance(e, redis.exceptions.AuthenticationError):
                    continue
                raise StoreError(f"Redis budget store unreachable ({self._where()}): {e}") from e
            except redis.exceptions.RedisError as e:
                raise StoreError(f"Redis budget store failed ({self._where()}): {e}") from e
        raise AssertionError("unreachable")  # pragma: no cover

    def _where(self) -> str:
        """The store's URL for messages and logs, without credentials (``user:password@`` and a ``password=`` or
        ``username=`` query parameter), else its namespace."""
        return redact_url(self.url) or self.ns

    _SCRIPTS = {"admit": redis_scripts.ADMIT, "settle": redis_scripts.SETTLE,
                "init_default": redis_scripts.INIT_DEFAULT}

    def _sha_of(self, name: str, reload: bool = False) -> bytes:
        sha = self._sha.get(name)
        if sha is None or reload:
            sha = self._sha[name] = self.r.script_load(self._SCRIPTS[name])
        return sha.encode() if isinstance(sha, str) else sha

    def _eval(self, name: str, keys: list, args: list):
        """One EVALSHA of a script loaded once; reloaded when the server answers NOSCRIPT (e.g. after a restart)."""
        parts = [k.encode() for k in keys] + [a.encode() for a in args]
        return self._eval_many(name, [_Call(len(keys), len(parts), b"".join(_bulks(parts)))])[0]

    def _eval_many(self, name: str, calls: list[_Call]) -> list:
        """Pipelined EVALSHA calls on one connection, in order: chunk k+1 is sent while the server runs chunk k.
        Each call is atomic on its own. Requests are packed here (RESP arrays of bulk strings; the keys' bulk
        strings come pre-packed, see :meth:`_key_frags`), which is several times faster than the generic command
        packer for batches of 10⁴ keys."""
        redis = self._redis_mod
        sha = self._sha_of(name)
        results: list = [None] * len(calls)
        todo = list(range(len(calls)))
        for attempt in (0, 1):
            pool = self.r.connection_pool
            conn = pool.get_connection()
            noscript = []
            try:
                for i in todo:
                    c = calls[i]
                    nk = b"%d" % c.nkeys
                    head = b"*%d\r\n$7\r\nEVALSHA\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n" % (
                        3 + c.nargs, len(sha), sha, len(nk), nk)
                    conn.send_packed_command([head, c.body], check_health=False)
                error = None
                for i in todo:
                    try:
                        results[i] = conn.read_response()
                    except redis.exceptions.NoScriptError:
                        noscript.append(i)
                    except redis.exceptions.ResponseError as e:  # keep reading: the connection stays in sync
                        error = error or e
            except BaseException:
                conn.disconnect()
                raise
            finally:
                pool.release(conn)
            if error is not None:
                raise error
            if not noscript:
                return results
            todo = noscript
            sha = self._sha_of(name, reload=True)
        raise StoreError(f"script {name} is not accepted by the server (NOSCRIPT after SCRIPT LOAD)")

    @staticmethod
    def _cost_args(costs: np.ndarray) -> list[bytes]:
        """Script arguments of a chunk's costs: the number m of distinct cost vectors, the width w of an index,
        their 6·m decimal components and the index string: each user's 0-based index into them as w big-endian
        bytes (empty when m = 1)."""
        if (costs == costs[0]).all():
            return [b"1", b"1", *[b"%d" % x for x in costs[0].tolist()], b""]
        uniq, inv = _unique_rows(costs)
        m = len(uniq)
        w = 1 if m <= 1 << 8 else 2 if m <= 1 << 16 else 3 if m <= 1 << 24 else 4
        idx = inv.astype(">u4").view(np.uint8).reshape(-1, 4)[:, 4 - w:]
        return [b"%d" % m, b"%d" % w, *[b"%d" % x for x in uniq.ravel().tolist()], idx.tobytes()]

    def _key_frags(self, users) -> list[bytes]:
        """The RESP bulk strings of the users' keys."""
        p = self._user_prefix
        try:
            keys = [(p + u + "}").encode() for u in users]
        except TypeError:
            for u in users:
                self._user_key(u)  # raises the ValueError naming the bad id
            raise
        return _bulks(keys)

    def _table_frags(self, uid: np.ndarray, table) -> np.ndarray:
        """:meth:`_key_frags` of ``table.names(uid)`` through a cache indexed by table id (an object array): a
        name is looked up and encoded only the first time its id comes by. The cache follows one table object
        (held here, so its identity cannot be reused; the table is append-only) and is rebuilt for another."""
        if table is not self._xtable:
            self._xtable = table
            self._xfrag = np.empty(0, dtype=object)
            self._xhave = np.zeros(0, dtype=bool)
            self._halted_ids = {}
        m = len(table)
        if self._xfrag.size < m:
            cap = max(m, 2 * self._xfrag.size, 1024)
            frag = np.empty(cap, dtype=object)
            frag[:self._xfrag.size] = self._xfrag
            have = np.zeros(cap, dtype=bool)
            have[:self._xhave.size] = self._xhave
            self._xfrag, self._xhave = frag, have
        miss = uid[~self._xhave[uid]]
        if miss.size:
            new = np.empty(miss.size, dtype=object)
            new[:] = self._key_frags(table.names(miss))
            self._xfrag[miss] = new
            self._xhave[miss] = True
        return self._xfrag[uid]

    # ---- budgets -------------------------------------------------------------------------------------------
    def _parse_default(self, vals) -> np.ndarray:
        return np.array([int(v) if v is not None else 0 for v in vals], dtype=np.int64)

    def default_budget(self) -> np.ndarray:
        vals = self._call(lambda: self.r.hmget(self._default_key, [str(i) for i in range(N_COMPONENTS)]))
        return self._parse_default(vals)

    def _admin(self, watch_keys: list[str], build: Callable) -> None:
        """Optimistic transaction: WATCH, read the old value, MULTI/EXEC the change and its audit entry."""
        redis = self._redis_mod

        def run():
            with self.r.pipeline(transaction=True) as pipe:
                while True:
                    try:
                        pipe.watch(*watch_keys)
                        build(pipe)
                        pipe.execute()
                        return
                    except redis.exceptions.WatchError:
                        continue

        self._call(run, retry=False)

    def set_default_budget(self, budget, *, actor: str = "operator", reason: str = "", components=None) -> None:
        given = check_budget(budget)

        def build(pipe):  # WATCHed: the merge below reads the values the write replaces
            old = self._parse_default(pipe.hmget(self._default_key, [str(i) for i in range(N_COMPONENTS)]))
            budget = _merged(old, given, components)
            entry = ledger_entry_json({"type": "admin", "action": "set-default", "actor": actor,
                                       "reason": reason, "old": old.tolist(), "new": budget.tolist()})
            pipe.multi()
            pipe.hset(self._default_key, mapping={str(i): str(int(v)) for i, v in enumerate(budget)})
            pipe.xadd(self._ledger_key, {"e": entry})

        self._admin([self._default_key], build)

    def grant(self, user: str, budget, *, actor: str = "operator", reason: str = "", components=None) -> None:
        given = check_budget(budget)
        key = self._user_key(user)

        def build(pipe):  # WATCHed: the merge below reads the values the write replaces
            d = self._parse_default(pipe.hmget(self._default_key, [str(i) for i in range(N_COMPONENTS)]))
            b = pipe.hmget(key, list(_BUDGET_FIELDS))
            old = d if b[0] is None else np.array([int(x) for x in b], dtype=np.int64)
            budget = _merged(old, given, components)
            entry = ledger_entry_json({"type": "admin", "action": "grant", "user": user, "actor": actor,
                                       "reason": reason, "old": old.tolist(), "new": budget.tolist()})
            pipe.multi()
            pipe.hset(key, mapping={f"b{i}": str(int(v)) for i, v in enumerate(budget)})
            pipe.xadd(self._ledger_key, {"e": entry})

        self._admin([self._default_key, key], build)

    # ---- admission -----------------------------------------------------------------------------------------
    def admit(self, scope: str, seq: int, users: Sequence[str], costs, digest: str | None = None) -> np.ndarray:
        users, costs, seq = check_batch(users, costs, seq)
        digest = check_digest(digest)
        n = len(users)
        if n == 0:
            return np.zeros(0, dtype=bool)
        known = self._halted_names.get(scope)
        send = None
        if known:
            get = known.get
            send = np.flatnonzero(np.fromiter((get(u, _NEVER) > seq for u in users), dtype=bool, count=n))
            if send.size == n:
                send = None
        sent = users if send is None else [users[i] for i in send.tolist()]
        codes = self._admit(scope, seq, self._key_frags(sent), costs if send is None else costs[send], digest)
        halted = np.flatnonzero(codes == _HALTED)
        if halted.size:
            known = self._halted_names.setdefault(scope, {})
            for i in halted.tolist():
                known[sent[i]] = min(known.get(sent[i], _NEVER), seq)
        return self._mask(n, send, codes)

    def admit_ids(self, scope: str, seq: int, user_ids: np.ndarray, costs, table,
                  digest: str | None = None) -> np.ndarray:
        if type(self).admit is not RedisBudgetStore.admit:  # a subclass's own admit keeps its say
            return super().admit_ids(scope, seq, user_ids, costs, table, digest=digest)
        uid, costs, seq = check_id_batch(user_ids, table, costs, seq)
        digest = check_digest(digest)
        n = uid.size
        if n == 0:
            return np.zeros(0, dtype=bool)
        frags = self._table_frags(uid, table)  # (binds the halted-id cache to this table)
        known = self._halted_ids.get(scope)
        send = None
        if known is not None:
            if known.size < len(table):
                known = self._grow_halted_ids(scope, len(table))
            k = known[uid] <= seq
            if k.any():
                send = np.flatnonzero(~k)
        codes = self._admit(scope, seq, frags if send is None else frags[send], costs if send is None else costs[send],
                            digest)
        halted = np.flatnonzero(codes == _HALTED)
        if halted.size:
            if known is None or known.size < len(table):
                known = self._grow_halted_ids(scope, len(table))
            hid = uid[halted] if send is None else uid[send[halted]]
            known[hid] = np.minimum(known[hid], seq)
        return self._mask(n, send, codes)

    def _grow_halted_ids(self, scope: str, m: int) -> np.ndarray:
        old = self._halted_ids.get(scope)
        new = np.full(max(m, 1024, 0 if old is None else 2 * old.size), _NEVER, dtype=np.int64)
        if old is not None:
            new[:old.size] = old
        self._halted_ids[scope] = new
        return new

    @staticmethod
    def _mask(n: int, send: np.ndarray | None, codes: np.ndarray) -> np.ndarray:
        """The admission mask of a batch of n users of which ``send`` (None: all) were asked with answer codes."""
        if send is None:
            return codes == _ADMITTED
        out = np.zeros(n, dtype=bool)
        out[send] = codes == _ADMITTED
        return out

    def _digest_key(self, scope: str) -> str:
        return f"{self.ns}:digests:{scope}"

    def _admit(self, scope: str, seq: int, frags, costs: np.ndarray, digest: str | None = None) -> np.ndarray:
        """Admission of a validated batch given the RESP bulk strings of its user keys (a list or object array):
        the admit script's answer code per user (uint8: ``_ADMITTED``, ``_HALTED`` or ``_REFUSED``). With a
        digest, every chunk carries it and one nonce for the batch, and a batch with no user to ask (all answered
        from the halted cache) still records it (as the memory store does)."""
        n = len(frags)
        out = np.empty(n, dtype=np.uint8)
        if n == 0 and digest is None:
            return out
        head = _bulks([f"x:{scope}".encode(), b"%d" % seq])
        dkey = _bulks([self._default_key.encode(), self._digest_key(scope).encode()])
        parts, bounds = [], []
        for lo in range(0, max(n, 1), self.chunk):
            hi = min(n, lo + self.chunk)
            args = _bulks(self._cost_args(costs[lo:hi]) if hi > lo else [b"0", b"1", b""])
            keys = frags[lo:hi]
            if isinstance(keys, np.ndarray):
                keys = keys.tolist()
            parts.append((2 + hi - lo, 2 + hi - lo + len(head) + len(args), b"".join(dkey + keys + head + args)))
            bounds.append((lo, hi))

        def attempt() -> list:
            # A fresh call nonce per ATTEMPT: a retry after a lost reply must not pass for a later chunk of the
            # call that recorded the digest (that is judged as a new batch and charged again — review of
            # 2026-11-23, F1); under a new nonce it is another call under the recorded digest and gets the
            # first outcome for the users already answered, and is judged anew for chunks that never ran.
            tail = b"".join(_bulks([(digest or "").encode(), os.urandom(8).hex().encode() if digest else b""]))
            return self._eval_many("admit", [_Call(nk, na + 2, body + tail) for nk, na, body in parts])

        res = self._call(attempt)
        for (lo, hi), r in zip(bounds, res):
            if not isinstance(r, bytes) or len(r) != hi - lo:
                raise StoreError(f"admit script answered {r!r:.40} for {hi - lo} users")
            out[lo:hi] = np.frombuffer(r, dtype=np.uint8)
        if not ((out == _ADMITTED) | (out == _HALTED) | (out == _REFUSED)).all():
            raise StoreError("admit script answered an unknown code")
        return out

    def settle(self, scope: str, seq: int, users: Sequence[str], actual) -> None:
        users, actual, seq = check_batch(users, actual, seq, "settle batch")
        if not users:
            return
        self._settle(scope, seq, self._key_frags(users), actual, users.__getitem__)

    def settle_ids(self, scope: str, seq: int, user_ids: np.ndarray, actual, table) -> None:
        if type(self).settle is not RedisBudgetStore.settle:
            return super().settle_ids(scope, seq, user_ids, actual, table)
        uid, actual, seq = check_id_batch(user_ids, table, actual, seq, "settle batch")
        if uid.size == 0:
            return
        self._settle(scope, seq, self._table_frags(uid, table), actual, lambda i: table.names(uid[i:i + 1])[0])

    def _settle(self, scope: str, seq: int, frags, actual: np.ndarray, name_at: Callable[[int], str]) -> None:
        """Settle of a validated batch given the RESP bulk strings of its user keys; ``name_at(i)`` names user i
        (for the error message)."""
        n = len(frags)
        head = _bulks([f"x:{scope}".encode(), b"%d" % seq])
        bodies, starts = [], []
        for lo in range(0, n, self.chunk):
            hi = min(n, lo + self.chunk)
            keys = frags[lo:hi]
            args = head + _bulks(self._cost_args(actual[lo:hi]))
            bodies.append((hi - lo, b"".join((keys.tolist() if isinstance(keys, np.ndarray) else keys) + args),
                           len(args)))
            starts.append(lo)

        def run(mode: bytes) -> None:  # mode b"1": validate only, write nothing
            tail = b"$1\r\n%b\r\n" % mode
            calls = [_Call(k, k + a + 1, body + tail) for k, body, a in bodies]
            for lo, bad in zip(starts, self._call(lambda: self._eval_many("settle", calls))):
                if bad:
                    raise ValueError("settle: actual cost exceeds the reservation of user "
                                     f"{name_at(lo + int(bad) - 1)!r}")

        if n > self.chunk:  # several script calls: validate everything first so that a ValueError changes nothing
            run(b"1")
        run(b"0")

    # ---- release log and ledger ----------------------------------------------------------------------------
    def _release_key(self, key: str) -> str:
        return f"{self.ns}:rel:{key}"

    def put_release(self, key: str, record: bytes) -> bytes:
        record = bytes(record)
        rk = self._release_key(key)
        old = self._call(lambda: self.r.set(rk, record, nx=True, get=True))  # SET NX GET: atomic first-write-wins
        return record if old is None else bytes(old)

    def get_release(self, key: str) -> bytes | None:
        v = self._call(lambda: self.r.get(self._release_key(key)))
        return None if v is None else bytes(v)

    def append_ledger(self, entry: dict) -> None:
        js = ledger_entry_json(entry)
        self._call(lambda: self.r.xadd(self._ledger_key, {"e": js}), retry=False)

    def ledger(self, *, query: str | None = None, since: float | None = None) -> list[dict]:
        def read_all():
            out, start = [], "-"
            while True:
                page = self.r.xrange(self._ledger_key, min=start, max="+", count=2000)
                out.extend(json.loads(fields[b"e"]) for _, fields in page)
                if len(page) < 2000:
                    return out
                start = "(" + page[-1][0].decode()

        entries = self._call(read_all)
        if query is not None:
            entries = [e for e in entries if e.get("query") == query]
        if since is not None:
            entries = [e for e in entries if e.get("ts", 0) >= since]
        return entries

    # ---- inspection ----------------------------------------------------------------------------------------
    def _user_from_hash(self, user: str, h: dict, default: np.ndarray) -> UserBudget:
        spent = np.array([int(h.get(f, 0)) for f in _SPENT_FIELDS], dtype=np.int64)
        if _BUDGET_FIELDS[0] in h:
            budget = np.array([int(h[f]) for f in _BUDGET_FIELDS], dtype=np.int64)
        else:
            budget = default.copy()
        return UserBudget(user=user, halted=h.get(b"h") == b"1", spent=spent, budget=budget)

    def get_user(self, user: str) -> UserBudget | None:
        key = self._user_key(user)

        def read():
            pipe = self.r.pipeline(transaction=True)
            pipe.hgetall(key)
            pipe.hmget(self._default_key, [str(i) for i in range(N_COMPONENTS)])
            return pipe.execute()

        h, d = self._call(read)
        if not h:
            return None
        return self._user_from_hash(user, h, self._parse_default(d))

    def iter_users(self) -> Iterator[UserBudget]:
        default = self.default_budget()
        pattern = _glob_escape(self._user_prefix) + "*"
        cursor = 0
        seen: set[bytes] = set()
        while True:
            cursor, keys = self._call(lambda c=cursor: self.r.scan(cursor=c, match=pattern, count=1000))
            keys = [k for k in keys if k not in seen]  # SCAN may return a key more than once
            seen.update(keys)
            if keys:
                def read(ks=keys):
                    pipe = self.r.pipeline(transaction=False)
                    for k in ks:
                        pipe.hgetall(k)
                    return pipe.execute()

                for k, h in zip(keys, self._call(read)):
                    if h:
                        yield self._user_from_hash(self._user_of_key(k), h, default)
            if cursor == 0:
                return

    def ping(self) -> None:
        """Raise StoreError unless the server answers."""
        self._call(self.r.ping)

    def close(self) -> None:
        try:
            self.r.close()
        except Exception:  # pragma: no cover - closing a dead connection
            pass
