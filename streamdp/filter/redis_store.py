"""Redis budget store: the per-user privacy filters of Liang–Yi (adaptive budgeting) Alg. 1 / filter eq. (7) held in Redis or a Redis
Cluster.

Implements :class:`streamdp.filter.store.BudgetStore` exactly (same contract tests as the in-memory store, run
against a single redis-server and a 3-primary cluster).

URLs: ``redis://[user:pass@]host:port/db``, ``rediss://…`` (TLS; ``?ssl_ca_certs=…`` etc. as in redis-py),
``unix:///path/redis.sock?db=0``, and for a Redis Cluster ``redis+cluster://[user:pass@]host:port`` or
``rediss+cluster://…`` (any one node; the others are discovered). One store parameter may be added to any of them:
``assume_noeviction=1`` (see :meth:`RedisBudgetStore.from_url`, "eviction").

Layout (namespace ``ns``, default ``"sdp"``; ``<meta>`` is ``<ns>:`` on a single Redis and ``{<ns>}:`` on a
cluster, where every key that is not a user's shares the hash slot of the tag ``<ns>``; field layout in
:mod:`streamdp.filter.redis_scripts`):

* ``<ns>:{u:<user>}`` — one hash per user: spent, budget override, halted flag, per-scope state of the last batch
  applied (seq, batch tag, outcome, open reservation). The braces are a Redis Cluster hash tag.
* ``<meta>default`` — hash of the default budget; ``<meta>meta`` marks a store whose default was set.
* ``<meta>digests:<scope>`` — the replay digests of a scope.
* ``<meta>rel:<key>`` — release log (first write wins, later writes read it back).
* ``<meta>ledger`` — a Redis stream; each entry has one field ``e`` holding the JSON of the ledger entry.
* ``<meta>ckpt:<group>:<topic>`` — the Kafka worker's checkpoint (``streamdp/adapters/kafka/checkpoint.py``),
  whose field ``fence`` is the worker's fence; on a cluster also ``<ns>:{<slot tag>}:fence:<name>``, the fence's
  copy in each hash slot (:data:`streamdp.filter.redis_scripts.ADMIT`).

Atomicity and exactly-once: :meth:`RedisBudgetStore.admit` and :meth:`RedisBudgetStore.settle` are ONE Lua script
call per chunk of up to ``chunk`` users (default 10 000) — on a cluster, per chunk of the users each primary
serves (their keys passed as arguments; a slot that moved fails the call before any write, and the batch is grouped
again and resent). Each call is atomic and validates everything before its first write (nothing
half-written). A user's outcome is recorded in the user's own hash, tagged with the batch (seq and digest tag), so
every later copy of any chunk — a retry after a lost reply or a socket timeout (retried here once, on a new
connection), the late packet of a stalled connection, another owner's replay, the batch cut into other chunks —
finds it and charges nothing (store.py, "Exactly once"). A batch cut short by a failure is completed by the retry.

Integer arithmetic: amounts travel as decimal strings and are added/compared exactly inside Lua (doubles while
the sums stay below 2^53, two base-10⁹ limbs above; settles subtract with HINCRBY), so every int64 amount up to
INT64_MAX — including the "infinite" budget sentinel — is handled exactly; no budget needs to be refused. Batch
sequence numbers must satisfy ``|seq| < 2^53`` (they are compared as Lua numbers); both stores enforce this.

Client side: :meth:`RedisBudgetStore.admit_ids` / :meth:`RedisBudgetStore.settle_ids` (the engine's path) cache
the packed key (and hash slot) of each id of the caller's name table, and the store remembers, per scope, the
users the admit script reported as refused for good (halted — which is permanent — with a refusal or no state in
the scope: every later admit of them in that scope answers "refused" and writes nothing, see
:data:`streamdp.filter.redis_scripts.ADMIT`); later batches answer those users locally, without sending them.

Errors: any connection, timeout, authentication or server failure raises
:class:`streamdp.filter.store.StoreError` (never a raw ``redis`` exception); nothing was charged by a script
that did not run. A missing default budget raises :class:`~streamdp.filter.store.DefaultBudgetMissing` (a
StoreError), a refused fence :class:`~streamdp.filter.store.Fenced`, a fence record that is gone
:class:`~streamdp.filter.store.StoreLost`. At open (:meth:`RedisBudgetStore.from_url`) a misconfiguration —
TLS against a plain port or the reverse, an untrusted certificate, an eviction policy other than ``noeviction`` —
raises :class:`StoreConfigError` (a ValueError: the CLI's configuration error, exit 2), never retried as an outage.
Read-only and idempotent calls are retried once immediately (a pooled connection may have died with a restarted
server); ledger appends are not retried (an append whose reply was lost may already be stored).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from typing import Callable, Iterator, Sequence, TypeVar

import numpy as np

from streamdp.accounting.cost import N_COMPONENTS, budget_text
from streamdp.filter import redis_scripts
from streamdp.filter.redis_setup import (SCHEMES, SLOTS, StoreConfigError, connection_problem, slot_of, slot_tags,
                                         split_store_params, truthy)
from streamdp.filter.memory import _merged, check_batch, check_budget, check_id_batch, ledger_entry_json
from streamdp.filter.store import (RELEASE_BODIES_KEPT, BudgetStore, DefaultBudgetMissing, Fence, Fenced,
                                   StoreError, StoreLost, UserBudget, check_digest, check_fence, digest_tag,
                                   release_digest, release_parts, trimmed_marker)

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_CHUNK = 10_000
# answer codes of the admit script, one byte per user (see redis_scripts.ADMIT)
_ADMITTED, _HALTED, _REFUSED = ord("1"), ord("h"), ord("0")
_NEVER = np.iinfo(np.int64).max  # halted-user cache: not known to be refused


class _HaltedIds:
    """One scope's cache of table ids known refused for good, with the seq of that answer: sorted ids and their
    seqs. Sparse — it holds the refused users only — because an engine admits in one scope per input partition
    (streamdp.engine.stage_a): a dense array over every table id per scope (as before) cost 8 bytes × interned
    users × partitions. ``cache[ids]`` → their seqs (``_NEVER``: not known)."""

    __slots__ = ("ids", "seqs")

    def __init__(self) -> None:
        self.ids = np.zeros(0, dtype=np.int64)
        self.seqs = np.zeros(0, dtype=np.int64)

    def __getitem__(self, uid) -> np.ndarray:
        uid = np.asarray(uid, dtype=np.int64)
        if self.ids.size == 0:
            return np.full(uid.shape, _NEVER, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self.ids, uid), self.ids.size - 1)
        return np.where(self.ids[pos] == uid, self.seqs[pos], _NEVER)

    def record(self, uid: np.ndarray, seq: int) -> None:
        """``uid`` (distinct) refused at ``seq``: each keeps the lowest seq it was refused at."""
        ids = np.concatenate([self.ids, np.asarray(uid, dtype=np.int64)])
        seqs = np.concatenate([self.seqs, np.full(len(uid), seq, dtype=np.int64)])
        order = np.lexsort((seqs, ids))  # by id, then lowest seq first
        ids, seqs = ids[order], seqs[order]
        first = np.concatenate(([True], ids[1:] != ids[:-1])) if ids.size else np.zeros(0, dtype=bool)
        self.ids, self.seqs = ids[first], seqs[first]
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
    followed by the arguments, ``nargs`` strings in all; ``slot``: the hash slot of its keys on a cluster (None on
    a single Redis)."""

    __slots__ = ("nkeys", "nargs", "body", "slot")

    def __init__(self, nkeys: int, nargs: int, body: bytes, slot: int | None = None) -> None:
        self.nkeys, self.nargs, self.body, self.slot = nkeys, nargs, body, slot


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


_SLOT_ERRORS = ("MovedError", "AskError", "TryAgainError", "ClusterDownError")
#: a script's error when a key it names (undeclared, see redis_scripts.ADMIT) is not served by the node: the slot map
#: changed (resharding, failover)
_NOT_LOCAL = ("non local key", "do not hash to the same slot")


class _SlotsMoved(Exception):
    """A node-grouped call met a slot that its node no longer serves: the slot map was refreshed; group again."""


class RedisBudgetStore(BudgetStore):
    """Budget store in Redis (≥ 7), a single server or a Redis Cluster. Build with :meth:`from_url`."""

    def __init__(self, client, *, default_budget=None, namespace: str = "sdp", chunk: int = DEFAULT_CHUNK,
                 url: str = "", cluster: bool = False, check: bool = False, assume_noeviction: bool = False) -> None:
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
        self.cluster = bool(cluster)
        self._meta = f"{{{namespace}}}:" if cluster else f"{namespace}:"
        self._meta_slot = slot_of(namespace.encode())
        self._default_key = self._meta + "default"
        self._meta_key = self._meta + "meta"
        self._ledger_key = self._meta + "ledger"
        self.release_bodies_kept = RELEASE_BODIES_KEPT  # the release log's retention (store.py)
        self._user_prefix = f"{namespace}:{{u:"
        self._slot_clients: list = [None] * SLOTS  # cluster: slot → the client of its primary (refreshed on MOVED)
        self._fence_frags: dict[str, dict[int, bytes]] = {}  # cluster: fence name → slot → its copy's bulk string
        # admit_ids/settle_ids: the caller's name table and, per table id, the RESP bulk string of its user key
        # (and, on a cluster, its hash slot)
        self._xtable = None
        self._xfrag = np.empty(0, dtype=object)
        self._xslot = np.zeros(0, dtype=np.int16)
        self._xhave = np.zeros(0, dtype=bool)
        # users known to be refused for good in a scope (answer code 'h' of the admit script: halted, with a
        # refusal or no state in the scope), with the seq of that answer: later admits of that seq or a later one
        # answer them without asking Redis (an earlier seq is a stale replay, which Redis answers "admitted").
        # name → seq per scope (admit), and per table id of _xtable per scope (admit_ids, sparse: _HaltedIds).
        self._halted_names: dict[str, dict[str, int]] = {}
        self._halted_ids: dict[str, _HaltedIds] = {}
        if check:
            self._check_server(assume_noeviction)
        if default_budget is not None:
            b = check_budget(default_budget, "default_budget")
            stored = self._call(lambda: self._exec_meta("init_default", [self._default_key, self._meta_key],
                                                        [str(int(x)) for x in b]))
            if stored == -1:
                raise DefaultBudgetMissing(self._lost_default_text("the configured [budget] is not applied in its "
                                                                   "place: "))
            if not stored:
                cur = self.default_budget()
                if not np.array_equal(cur, b):
                    log.warning("Redis store %s keeps its stored default budget (%s), ignoring the configured one "
                                "(%s); change it with `streamdp budget set-default`", self._where(),
                                budget_text(cur), budget_text(b))

    @classmethod
    def from_url(cls, url: str, default_budget=None, *, namespace: str = "sdp", chunk: int = DEFAULT_CHUNK,
                 socket_timeout: float = 10.0, connect_timeout: float = 2.0, assume_noeviction: bool = False,
                 check: bool = True) -> "RedisBudgetStore":
        """``redis://[user:pass@]host:port/db``, ``rediss://…`` (TLS; ``?ssl_ca_certs=…`` etc. as in redis-py),
        ``unix:///path/redis.sock?db=0``, or a Redis Cluster: ``redis+cluster://[user:pass@]host:port`` /
        ``rediss+cluster://…`` (any node of it).

        ``default_budget`` initialises the default budget of a store that never had one; a stored default is kept
        (it is changed only by the audited :meth:`set_default_budget`), and a default the store had and lost is
        :class:`DefaultBudgetMissing` (the configured one is not put in its place silently).

        ``check`` (the default): the server is contacted at once — every primary of a cluster — and refused with
        :class:`StoreConfigError` when the URL does not fit it (``rediss://`` against a plain port, ``redis://``
        against a TLS port, an untrusted certificate) or when its ``maxmemory-policy`` is not ``noeviction``
        (eviction would drop budgets and the release log: a halted user back with a fresh budget, a window
        re-released with fresh noise). Where ``CONFIG GET`` is not allowed (managed Redis), confirm the policy with
        the provider and say so with ``assume_noeviction=True`` or ``?assume_noeviction=1`` in the URL; a policy
        the server does show is never overridden.
        """
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        if not isinstance(url, str) or not url.startswith(SCHEMES):
            raise ValueError(f"url must start with redis://, rediss://, unix://, redis+cluster:// or "
                             f"rediss+cluster://, got {redact_url(str(url))!r}")
        target, params = split_store_params(url)
        if "assume_noeviction" in params:
            assume_noeviction = assume_noeviction or truthy(params["assume_noeviction"])
        cluster = target.startswith(("redis+cluster://", "rediss+cluster://"))
        if cluster:
            target = target.replace("+cluster", "", 1)
        kw = dict(socket_timeout=socket_timeout, socket_connect_timeout=connect_timeout)
        try:
            if cluster:
                from redis.cluster import RedisCluster

                client = RedisCluster.from_url(target, retry=Retry(NoBackoff(), 0), **kw)
            else:
                client = redis.Redis.from_url(target, retry=Retry(NoBackoff(), 0), health_check_interval=0, **kw)
        except (ValueError, TypeError) as e:
            raise ValueError(f"invalid Redis URL {redact_url(url)!r}: {e}") from None
        except redis.exceptions.RedisError as e:  # a cluster client reads the slot map at once
            problem = connection_problem(e, target)
            if problem:
                raise StoreConfigError(f"Redis budget store {redact_url(url)}: {problem}") from None
            raise StoreError(f"Redis budget store unreachable ({redact_url(url)}): {e}") from e
        return cls(client, default_budget=default_budget, namespace=namespace, chunk=chunk, url=url,
                   cluster=cluster, check=check, assume_noeviction=assume_noeviction)

    # ---- plumbing ------------------------------------------------------------------------------------------
    def _user_key(self, user: str) -> str:
        if not isinstance(user, str):
            raise ValueError(f"user ids must be str, got {type(user).__name__}")
        return f"{self._user_prefix}{user}}}"

    def _user_of_key(self, key: bytes) -> str:
        return key.decode()[len(self._user_prefix):-1]

    def _call(self, fn: Callable[[], T], *, retry: bool = True) -> T:
        """Run ``fn``; map every redis failure to StoreError (the scripts' own refusals to Fenced, StoreLost,
        DefaultBudgetMissing). Idempotent calls get one immediate retry."""
        redis = self._redis_mod
        for attempt in (0, 1):
            try:
                return fn()
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as e:
                if retry and attempt == 0 and not isinstance(e, redis.exceptions.AuthenticationError):
                    continue
                raise StoreError(f"Redis budget store unreachable ({self._where()}): {e}") from e
            except redis.exceptions.ResponseError as e:
                raise self._script_error(e) from e
            except redis.exceptions.RedisError as e:
                raise StoreError(f"Redis budget store failed ({self._where()}): {e}") from e
        raise AssertionError("unreachable")  # pragma: no cover

    def _script_error(self, e: Exception) -> Exception:
        text = str(e)
        code = text.split(" ", 1)[0]
        if code == "FENCED":
            return Fenced(f"budget store {self._where()}: {text}: a later owner took over")
        if code == "LOST":
            return StoreLost(f"budget store {self._where()}: {text} (flushed, or restarted without persistence)")
        if code == "NODEFAULT":
            return DefaultBudgetMissing(self._lost_default_text(""))
        return StoreError(f"Redis budget store failed ({self._where()}): {text}")

    def _lost_default_text(self, what: str) -> str:
        return (f"the budget store {self._where()} holds no default budget ({self._default_key} is missing: "
                f"deleted, evicted, or lost in a restart without persistence); nothing was charged — {what}"
                "restore it with `streamdp budget set-default --rho R --delta D --notion N --yes` for every notion "
                "in use (see `streamdp budget ledger` for its last value)")

    def _where(self) -> str:
        """The store's URL for messages and logs, without credentials (``user:password@`` and a ``password=`` or
        ``username=`` query parameter), else its namespace."""
        return redact_url(self.url) or self.ns

    def _check_server(self, assume_noeviction: bool) -> None:
        """The first contact (see :meth:`from_url`): reachable, the URL fits, ``maxmemory-policy`` is
        ``noeviction`` on every primary."""
        redis = self._redis_mod
        for client in self._primaries():
            try:
                client.ping()
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as e:
                problem = None if isinstance(e, redis.exceptions.AuthenticationError) else \
                    connection_problem(e, split_store_params(self.url)[0].replace("+cluster", "", 1))
                if problem:
                    raise StoreConfigError(f"Redis budget store {self._where()}: {problem}") from None
                raise StoreError(f"Redis budget store unreachable ({self._where()}): {e}") from e
            except redis.exceptions.RedisError as e:
                raise StoreError(f"Redis budget store failed ({self._where()}): {e}") from e
            try:
                policy = client.config_get("maxmemory-policy").get("maxmemory-policy")
            except redis.exceptions.ResponseError as e:
                if assume_noeviction:  # the operator confirmed it (managed Redis without CONFIG)
                    continue
                raise StoreConfigError(
                    f"cannot read maxmemory-policy of the Redis budget store {self._where()} (CONFIG GET refused: "
                    f"{e}). Budgets and the release log must never be evicted. Confirm with your Redis provider that "
                    "the eviction policy (maxmemory-policy) is noeviction, then add assume_noeviction=1 to the store "
                    "URL (…/0?assume_noeviction=1) to say so") from None
            except redis.exceptions.RedisError as e:
                raise StoreError(f"Redis budget store unreachable ({self._where()}): {e}") from e
            if policy != "noeviction":
                raise StoreConfigError(
                    f"the Redis budget store {self._where()} has maxmemory-policy {policy}: it may evict keys — a "
                    "user's budget record (a halted user would come back with a fresh budget) or the release log (a "
                    "window re-released with fresh noise). Set maxmemory-policy noeviction (redis.conf, or CONFIG "
                    "SET maxmemory-policy noeviction) and start again")

    def _primaries(self) -> list:
        """The clients of every server holding the store: the one server, or each primary of a cluster."""
        if not self.cluster:
            return [self.r]
        return [self.r.get_redis_connection(n) for n in self.r.get_primaries()]

    # ---- running scripts -----------------------------------------------------------------------------------
    _SCRIPTS = {"admit": redis_scripts.ADMIT, "settle": redis_scripts.SETTLE,
                "init_default": redis_scripts.INIT_DEFAULT, "admit_begin": redis_scripts.ADMIT_BEGIN,
                "admit_record": redis_scripts.ADMIT_RECORD, "claim_fence": redis_scripts.CLAIM_FENCE,
                "raise_fence": redis_scripts.RAISE_FENCE, "check_fence": redis_scripts.CHECK_FENCE,
                "put_release": redis_scripts.PUT_RELEASE, "get_release": redis_scripts.GET_RELEASE}
    _SHAS = {k: hashlib.sha1(v.encode()).hexdigest().encode() for k, v in _SCRIPTS.items()}

    def _client_of_slot(self, slot: int | None):
        if slot is None:
            return self.r
        c = self._slot_clients[slot]
        if c is None:
            c = self._slot_clients[slot] = self.r.get_redis_connection(self.r.nodes_manager.get_node_from_slot(slot))
        return c

    def _refresh_slots(self) -> None:
        self.r.nodes_manager.initialize()
        self._slot_clients = [None] * SLOTS

    def _exec(self, name: str, calls: list, regroup: bool = False) -> list:
        """Run script ``name`` once per call, pipelined per server (a cluster's primaries all at once: every
        request is sent before any reply is read), each call atomic on its own; the results in order. NOSCRIPT:
        the script is loaded on that server and those calls run again; on a cluster a slot that moved (MOVED,
        ASK, TRYAGAIN, CLUSTERDOWN) refreshes the slot map and its calls run again — every script is idempotent by
        construction (``regroup``: calls whose keys were grouped by node raise :class:`_SlotsMoved` instead, after
        the refresh, for the caller to group again). Another error reply is raised after every reply was read (the
        connections stay in sync).
        Requests are packed here (RESP arrays of bulk strings; the keys' bulk strings come pre-packed), which is
        several times faster than the generic packer for batches of 10⁴ keys."""
        redis = self._redis_mod
        sha = self._SHAS[name]
        results: list = [None] * len(calls)
        todo = list(range(len(calls)))
        for attempt in range(8):
            by_client: dict[int, tuple] = {}
            for i in todo:
                c = self._client_of_slot(calls[i].slot)
                by_client.setdefault(id(c), (c, []))[1].append(i)
            taken = []
            try:
                for c, idx in by_client.values():
                    pool = c.connection_pool
                    conn = pool.get_connection()
                    taken.append((pool, conn))
                    packed = []
                    for i in idx:
                        k = calls[i]
                        nk = b"%d" % k.nkeys
                        packed.append(b"*%d\r\n$7\r\nEVALSHA\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n" % (
                            3 + k.nargs, len(sha), sha, len(nk), nk))
                        packed.append(k.body)
                    conn.send_packed_command([b"".join(packed)], check_health=False)  # one send per server
                replies = []
                for (pool, conn), (c, idx) in zip(taken, by_client.values()):
                    for i in idx:
                        try:
                            replies.append((i, c, conn.read_response()))
                        except redis.exceptions.ResponseError as e:  # keep reading: the connection stays in sync
                            replies.append((i, c, e))
            except BaseException:
                for pool, conn in taken:
                    conn.disconnect()
                raise
            finally:
                for pool, conn in taken:
                    pool.release(conn)
            again, error, load, moved = [], None, {}, False
            for i, c, r in replies:
                if isinstance(r, redis.exceptions.NoScriptError):
                    again.append(i)
                    load[id(c)] = c
                elif isinstance(r, redis.exceptions.ResponseError) and (
                        type(r).__name__ in _SLOT_ERRORS or any(t in str(r) for t in _NOT_LOCAL)):
                    again.append(i)
                    moved = True
                elif isinstance(r, redis.exceptions.ResponseError):
                    error = error or r
                else:
                    results[i] = r
            if error is not None:
                raise error
            if not again:
                return results
            for c in load.values():
                c.script_load(self._SCRIPTS[name])
            if moved:
                import time

                time.sleep(min(0.05 * 2 ** attempt, 1.0))  # a slot being migrated or failed over
                self._refresh_slots()
                if regroup:
                    raise _SlotsMoved()
            todo = again
        raise StoreError(f"Redis budget store {self._where()}: script {name} could not run (slots kept moving, or "
                         "NOSCRIPT after SCRIPT LOAD)")

    def _sha_of(self, name: str, reload: bool = False) -> bytes:
        """The SHA1 of script ``name``, loaded on the server (the single Redis; every primary of a cluster)."""
        for c in self._primaries():
            self._call(lambda c=c: c.script_load(self._SCRIPTS[name]))
        return self._SHAS[name]

    def _exec_meta(self, name: str, keys: list[str], args: list[str]):
        """One call of script ``name`` on the meta keys' server (their hash slot on a cluster)."""
        parts = [k.encode() for k in keys] + [a.encode() for a in args]
        call = _Call(len(keys), len(parts), b"".join(_bulks(parts)), self._meta_slot if self.cluster else None)
        return self._exec(name, [call])[0]

    @staticmethod
    def _cost_args(costs: np.ndarray) -> list[bytes]:
        """Script arguments of a chunk's costs: the number m of distinct cost vectors, the width w of an index,
        their 6·m decimal components and the index string: each user's 0-based index into them as w big-endian
        bytes (empty when m = 1)."""
        if (costs == costs[0]).all():
            return [b"1", b"1", *[b"%d" % x for x in costs[0].tolist()], b""]
        uniq, inv = _unique_rows(costs)
        return RedisBudgetStore._indexed_cost_args(uniq, inv)

    @staticmethod
    def _indexed_cost_args(uniq: np.ndarray, inv: np.ndarray) -> list[bytes]:
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

    @staticmethod
    def _user_slots(users) -> np.ndarray:
        """The hash slot of each user's key (its tag ``u:<user up to a first '}'>``)."""
        return np.fromiter((slot_of(("u:" + u.split("}", 1)[0]).encode()) for u in users), dtype=np.int16,
                           count=len(users))

    def _table_frags(self, uid: np.ndarray, table) -> np.ndarray:
        """:meth:`_key_frags` of ``table.names(uid)`` through a cache indexed by table id (an object array): a
        name is looked up and encoded only the first time its id comes by. The cache follows one table object
        (held here, so its identity cannot be reused; the table is append-only) and is rebuilt for another."""
        if table is not self._xtable:
            self._xtable = table
            self._xfrag = np.empty(0, dtype=object)
            self._xslot = np.zeros(0, dtype=np.int16)
            self._xhave = np.zeros(0, dtype=bool)
            self._halted_ids = {}
        m = len(table)
        if self._xfrag.size < m:
            cap = max(m, 2 * self._xfrag.size, 1024)
            frag = np.empty(cap, dtype=object)
            frag[:self._xfrag.size] = self._xfrag
            slot = np.zeros(cap, dtype=np.int16)
            slot[:self._xslot.size] = self._xslot
            have = np.zeros(cap, dtype=bool)
            have[:self._xhave.size] = self._xhave
            self._xfrag, self._xslot, self._xhave = frag, slot, have
        miss = uid[~self._xhave[uid]]
        if miss.size:
            names = table.names(miss)
            new = np.empty(miss.size, dtype=object)
            new[:] = self._key_frags(names)
            self._xfrag[miss] = new
            if self.cluster:
                self._xslot[miss] = self._user_slots(names)
            self._xhave[miss] = True
        return self._xfrag[uid]

    def _fence_frag(self, name: str, slot: int) -> bytes:
        """The bulk string of fence ``name``'s copy in hash ``slot`` (cluster)."""
        per = self._fence_frags.setdefault(name, {})
        f = per.get(slot)
        if f is None:
            f = per[slot] = _bulks([f"{self.ns}:{{{slot_tags()[slot]}}}:fence:{name}".encode()])[0]
        return f

    def _fence_key(self, name: str) -> str:
        return self._meta + name

    # ---- budgets -------------------------------------------------------------------------------------------
    def _parse_default(self, vals) -> np.ndarray:
        return np.array([int(v) if v is not None else 0 for v in vals], dtype=np.int64)

    def _read_default(self) -> tuple[np.ndarray, bool, bool]:
        """(the default budget — zeros where absent —, whether it is stored, whether the store ever had one)."""
        def read():
            pipe = self._client_of_slot(self._meta_slot if self.cluster else None).pipeline(transaction=False)
            pipe.hmget(self._default_key, [str(i) for i in range(N_COMPONENTS)])
            pipe.hexists(self._meta_key, "default")
            return pipe.execute()

        vals, marked = self._call(read)
        return self._parse_default(vals), any(v is not None for v in vals), bool(marked)

    def default_budget(self) -> np.ndarray:
        """The default budget; zeros when the store never had one; :class:`DefaultBudgetMissing` when it had one
        and lost it."""
        d, stored, marked = self._read_default()
        if not stored and marked:
            raise DefaultBudgetMissing(self._lost_default_text(""))
        return d

    def _admin(self, client, watch_keys: list[str], build: Callable) -> None:
        """Optimistic transaction on ``client`` (one server; on a cluster all keys in one slot): WATCH, read the
        old value, MULTI/EXEC the change and its audit entry."""
        redis = self._redis_mod

        def run():
            with client.pipeline(transaction=True) as pipe:
                while True:
                    try:
                        pipe.watch(*watch_keys)
                        build(pipe)
                        pipe.execute()
                        return
                    except redis.exceptions.WatchError:
                        continue

        self._call(run, retry=False)

    @staticmethod
    def _check_types(pipe, keys: dict[str, tuple[str, ...]]) -> None:
        """Inside a WATCH: refuse (before MULTI, so nothing is written) a key of another type than allowed."""
        for k, allowed in keys.items():
            t = pipe.type(k)
            t = t.decode() if isinstance(t, bytes) else t
            if t not in ("none", *allowed):
                raise StoreError(f"Redis budget store: {k} is a {t}, not a {' or '.join(allowed)}: nothing was "
                                 "changed")

    def set_default_budget(self, budget, *, actor: str = "operator", reason: str = "", components=None) -> None:
        given = check_budget(budget)

        def build(pipe):  # WATCHed: the merge below reads the values the write replaces
            self._check_types(pipe, {self._default_key: ("hash",), self._meta_key: ("hash",),
                                     self._ledger_key: ("stream",)})
            vals = pipe.hmget(self._default_key, [str(i) for i in range(N_COMPONENTS)])
            old = self._parse_default(vals)
            budget = _merged(old, given, components)
            entry = {"type": "admin", "action": "set-default", "actor": actor, "reason": reason,
                     "old": old.tolist(), "new": budget.tolist()}
            if all(v is None for v in vals) and pipe.hexists(self._meta_key, "default"):
                entry["restored"] = True  # the default had been lost (see default_budget)
            pipe.multi()
            pipe.hset(self._default_key, mapping={str(i): str(int(v)) for i, v in enumerate(budget)})
            pipe.hset(self._meta_key, "default", "set")
            pipe.xadd(self._ledger_key, {"e": ledger_entry_json(entry)})

        self._admin(self._client_of_slot(self._meta_slot if self.cluster else None),
                    [self._default_key, self._meta_key], build)

    def grant(self, user: str, budget, *, actor: str = "operator", reason: str = "", components=None) -> None:
        given = check_budget(budget)
        key = self._user_key(user)
        if not self.cluster:
            def build(pipe):  # WATCHed: the merge below reads the values the write replaces
                self._check_types(pipe, {key: ("hash",), self._default_key: ("hash",),
                                         self._ledger_key: ("stream",)})
                d = self._parse_default(pipe.hmget(self._default_key, [str(i) for i in range(N_COMPONENTS)]))
                b = pipe.hmget(key, list(_BUDGET_FIELDS))
                old = d if b[0] is None else np.array([int(x) for x in b], dtype=np.int64)
                budget = _merged(old, given, components)
                entry = ledger_entry_json({"type": "admin", "action": "grant", "user": user, "actor": actor,
                                           "reason": reason, "old": old.tolist(), "new": budget.tolist()})
                pipe.multi()
                pipe.hset(key, mapping={f"b{i}": str(int(v)) for i, v in enumerate(budget)})
                pipe.xadd(self._ledger_key, {"e": entry})

            self._admin(self.r, [self._default_key, key], build)
            return
        # Cluster: the user's hash and the ledger live in different slots. The change is made atomically in the
        # user's slot (its old value read under WATCH; the default as it is read just before), then its audit entry
        # is appended; should that append fail, the error says the grant was made without it.
        d = self.default_budget()
        done: dict = {}

        def build(pipe):
            self._check_types(pipe, {key: ("hash",)})
            b = pipe.hmget(key, list(_BUDGET_FIELDS))
            old = d if b[0] is None else np.array([int(x) for x in b], dtype=np.int64)
            done["old"], done["new"] = old, _merged(old, given, components)
            pipe.multi()
            pipe.hset(key, mapping={f"b{i}": str(int(v)) for i, v in enumerate(done["new"])})

        self._admin(self._client_of_slot(int(self._user_slots([user])[0])), [key], build)
        entry = ledger_entry_json({"type": "admin", "action": "grant", "user": user, "actor": actor,
                                   "reason": reason, "old": done["old"].tolist(), "new": done["new"].tolist()})
        try:
            self._call(lambda: self.r.xadd(self._ledger_key, {"e": entry}), retry=False)
        except StoreError as e:
            raise StoreError(f"the grant of {user!r} was made, but its audit entry could not be written to the "
                             f"ledger ({e}); record it by hand") from e

    # ---- fences --------------------------------------------------------------------------------------------
    def claim_fence(self, name: str) -> Fence:
        fence = check_fence(Fence(name, 1))  # the name's check
        epoch = int(self._call(lambda: self._exec_meta("claim_fence", [self._fence_key(name)], [])))
        fence = Fence(fence.name, epoch)
        self.spread_fence(fence)
        return fence

    def spread_fence(self, fence: Fence) -> None:
        """Cluster: raise the fence's copy in every hash slot to its epoch (admits and settles in a slot compare
        with that copy), so that an earlier owner's calls are refused in every slot from now on. The slot groups
        raise their copy themselves too, so a claim cut short here still fences each slot at the new owner's
        first call there. A single Redis has one fence record: nothing to do."""
        if not self.cluster:
            return
        arg = _bulks([b"%d" % fence.epoch])[0]
        calls = [_Call(1, 2, self._fence_frag(fence.name, s) + arg, s) for s in range(SLOTS)]
        self._call(lambda: self._exec("raise_fence", calls))
        self._fence_frags.pop(fence.name, None)  # 16384 cached strings: not kept for a one-off

    # ---- admission -----------------------------------------------------------------------------------------
    def admit(self, scope: str, seq: int, users: Sequence[str], costs, digest: str | None = None,
              fence: Fence | None = None) -> np.ndarray:
        users, costs, seq = check_batch(users, costs, seq)
        digest = check_digest(digest)
        fence = check_fence(fence)
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
        slots = self._user_slots(sent) if self.cluster else None
        codes = self._admit(scope, seq, self._key_frags(sent), costs if send is None else costs[send], digest,
                            fence, slots)
        halted = np.flatnonzero(codes == _HALTED)
        if halted.size:
            known = self._halted_names.setdefault(scope, {})
            for i in halted.tolist():
                known[sent[i]] = min(known.get(sent[i], _NEVER), seq)
        return self._mask(n, send, codes)

    def admit_ids(self, scope: str, seq: int, user_ids: np.ndarray, costs, table,
                  digest: str | None = None, fence: Fence | None = None) -> np.ndarray:
        if type(self).admit is not RedisBudgetStore.admit:  # a subclass's own admit keeps its say
            return super().admit_ids(scope, seq, user_ids, costs, table, digest=digest, fence=fence)
        uid, costs, seq = check_id_batch(user_ids, table, costs, seq)
        digest = check_digest(digest)
        fence = check_fence(fence)
        n = uid.size
        if n == 0:
            return np.zeros(0, dtype=bool)
        frags = self._table_frags(uid, table)  # (binds the halted-id cache to this table)
        known = self._halted_ids.get(scope)
        send = None
        if known is not None:
            k = known[uid] <= seq
            if k.any():
                send = np.flatnonzero(~k)
        sent = uid if send is None else uid[send]
        codes = self._admit(scope, seq, frags if send is None else frags[send],
                            costs if send is None else costs[send], digest, fence,
                            self._xslot[sent] if self.cluster else None)
        halted = np.flatnonzero(codes == _HALTED)
        if halted.size:
            if known is None:
                known = self._halted_ids[scope] = _HaltedIds()
            known.record(sent[halted], seq)
        return self._mask(n, send, codes)

    @staticmethod
    def _mask(n: int, send: np.ndarray | None, codes: np.ndarray) -> np.ndarray:
        """The admission mask of a batch of n users of which ``send`` (None: all) were asked with answer codes."""
        if send is None:
            return codes == _ADMITTED
        out = np.zeros(n, dtype=bool)
        out[send] = codes == _ADMITTED
        return out

    def _digest_key(self, scope: str) -> str:
        return f"{self._meta}digests:{scope}"

    #: how a cluster batch is cut: "node" — one call per primary (chunks of ``chunk`` users) for the users of the
    #: slots it serves; "slot" — one call per hash slot (measured far slower: BENCHMARKS.md; kept for comparison)
    cluster_groups = "node"

    def _groups(self, n: int, slots: np.ndarray | None) -> list[tuple[int | None, np.ndarray]]:
        """The calls of a batch of n users: (a hash slot to route by, or None; positions) — chunks of ``chunk``
        users in order on a single Redis; on a cluster the users of each primary (or of each hash slot, see
        :attr:`cluster_groups`), in chunks."""
        if slots is None:
            return [(None, np.arange(lo, min(n, lo + self.chunk))) for lo in range(0, n, self.chunk)]
        if self.cluster_groups == "slot":
            key = slots.astype(np.int64)
        else:  # the primary serving each user's slot
            node_of: dict[int, int] = {}
            slot_node = np.full(SLOTS, -1, dtype=np.int64)
            for sl in np.unique(slots).tolist():
                slot_node[sl] = node_of.setdefault(id(self._client_of_slot(sl)), len(node_of))
            key = slot_node[slots]
        order = np.argsort(key, kind="stable")
        ks = key[order]
        cuts = np.flatnonzero(ks[1:] != ks[:-1]) + 1
        out = []
        for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), n]):
            for lo in range(a, b, self.chunk):
                idx = order[lo:min(b, lo + self.chunk)]
                out.append((int(slots[idx[0]]), idx))
        return out

    def _fence_copies(self, fence: Fence | None, slots: np.ndarray | None, idx: np.ndarray) -> list[bytes]:
        """A cluster call's count of fence copies and the copies, of the slots of its users (as ARGV bulks)."""
        if fence is None:
            return _bulks([b"0"])
        own = np.unique(slots[idx]).tolist()
        return _bulks([b"%d" % len(own)]) + [self._fence_frag(fence.name, sl) for sl in own]

    @staticmethod
    def _keys_of(frags, slots) -> Callable[[np.ndarray], list[bytes]]:
        """The bulk strings of a call's user keys: a slice of ``frags`` for the chunks of a single Redis (their
        positions are a range), picked by position on a cluster."""
        if slots is None:
            if isinstance(frags, np.ndarray):
                return lambda idx: frags[int(idx[0]):int(idx[-1]) + 1].tolist() if idx.size else []
            return lambda idx: frags[int(idx[0]):int(idx[-1]) + 1] if idx.size else []
        if isinstance(frags, np.ndarray):
            return lambda idx: frags[idx].tolist()
        return lambda idx: [frags[i] for i in idx.tolist()]

    def _group_cost_args(self, costs: np.ndarray, groups) -> Callable[[np.ndarray], list[bytes]]:
        """Cost arguments per call: shared by every call when the batch has one cost vector, else per call."""
        if (costs == costs[0]).all():
            shared = _bulks([b"1", b"1", *[b"%d" % x for x in costs[0].tolist()], b""])
            return lambda idx: shared
        if not self.cluster:  # chunks of a single Redis: positions are a range
            return lambda idx: _bulks(self._cost_args(costs[int(idx[0]):int(idx[-1]) + 1]))
        if len(groups) <= 3:  # a call per primary: each its own distinct vectors
            return lambda idx: _bulks(self._cost_args(costs[idx]))
        uniq, inv = _unique_rows(costs)  # once per batch; each call re-indexes its own users' rows

        def per(idx: np.ndarray) -> list[bytes]:
            sub = inv[idx]
            if (sub == sub[0]).all():
                return _bulks([b"1", b"1", *[b"%d" % x for x in uniq[sub[0]].tolist()], b""])
            u, local = np.unique(sub, return_inverse=True)
            return _bulks(self._indexed_cost_args(uniq[u], local.ravel()))

        return per

    def _admit(self, scope: str, seq: int, frags, costs: np.ndarray, digest: str | None = None,
               fence: Fence | None = None, slots: np.ndarray | None = None) -> np.ndarray:
        """Admission of a validated batch given the RESP bulk strings of its user keys (a list or object array) and,
        on a cluster, their hash slots: the admit script's answer code per user (uint8: ``_ADMITTED``, ``_HALTED``
        or ``_REFUSED``). A batch with no user to ask (all answered from the halted cache) still records its
        digest (as the memory store does)."""
        n = len(frags)
        out = np.empty(n, dtype=np.uint8)
        if n == 0 and digest is None:
            return out
        xf = f"x:{scope}".encode()
        head = _bulks([xf, b"%d" % seq])
        dg = (digest or "").encode()
        epoch = b"%d" % fence.epoch if fence is not None else b""
        groups = self._groups(n, slots) if n else [(None if slots is None else self._meta_slot, np.arange(0))]
        cost_of = self._group_cost_args(costs, groups) if n else (lambda idx: _bulks([b"0", b"1", b""]))
        keys_of = self._keys_of(frags, slots)

        def attempt() -> list:
            calls = []
            if not self.cluster:
                meta = [self._default_key, self._digest_key(scope)] + (
                    [self._fence_key(fence.name)] if fence is not None else [])
                mk = _bulks([k.encode() for k in meta])
                tail = _bulks([dg, b"%d" % len(meta), epoch, b"S"])
                for _, idx in groups:
                    body = mk + keys_of(idx) + head + cost_of(idx) + tail
                    calls.append(_Call(len(mk) + idx.size, len(body), b"".join(body), None))
                return self._exec("admit", calls)
            # cluster: the meta slot first (fence, default, digest record: read-only), then every slot group (each
            # checks the fence's copy in its slot), then the digest record if this is the first admit of the seq
            meta = [self._default_key, self._digest_key(scope)] + (
                [self._fence_key(fence.name)] if fence is not None else [])
            begin = self._exec_meta("admit_begin", meta, [str(seq), dg.decode(), epoch.decode()])
            d, fresh = begin[:6], begin[7]

            def run_groups(gs, how: bytes) -> list:
                tail = _bulks([dg, b"0", epoch, b"C", *d, how])
                cs = []
                for slot, idx in gs:  # the user keys in ARGV (redis_scripts.ADMIT, mode 'C')
                    body = head + cost_of(idx) + tail + self._fence_copies(fence, slots, idx) + keys_of(idx)
                    cs.append(_Call(0, len(body), b"".join(body), slot))
                return self._exec("admit", cs, regroup=True)

            res = [bytearray(r) for r in run_groups(groups, b"R")] if n else []
            if digest is not None and fresh == b"1":
                self._exec_meta("admit_record", [self._digest_key(scope)] + (
                    [self._fence_key(fence.name)] if fence is not None else []), [str(seq), digest, epoch.decode()])
            stale = [(g, i) for g, r in enumerate(res) for i in range(len(r)) if r[i] == ord("s")]
            if stale:  # stale candidates: trusted now? (the record is immutable once written: see ADMIT)
                first = self._client_of_slot(self._meta_slot).zrangebyscore(self._digest_key(scope), seq, seq,
                                                                            start=0, num=1)
                head_ = f"{seq}:{digest}:".encode()
                if first and first[0].startswith(head_) and first[0].endswith(b"C"):
                    for g, i in stale:
                        res[g][i] = ord("1")
                else:  # not trusted: those users are judged as new
                    redo: dict[int, list[int]] = {}
                    for g, i in stale:
                        redo.setdefault(g, []).append(i)
                    again = [(groups[g][0], groups[g][1][np.array(ii)]) for g, ii in redo.items()]
                    for (g, ii), r in zip(redo.items(), run_groups(again, b"N")):
                        for i, c in zip(ii, r):
                            res[g][i] = c
            return [bytes(r) for r in res]

        for _ in range(8):
            try:
                res = self._call(attempt)
                break
            except _SlotsMoved:  # the slot map changed under a node-grouped call: group again (safe to resend)
                groups = self._groups(n, slots)
                cost_of = self._group_cost_args(costs, groups)
        else:
            raise StoreError(f"Redis budget store {self._where()}: the cluster's slots kept moving")
        for (_, idx), r in zip(groups, res):
            if not isinstance(r, bytes) or len(r) != idx.size:
                raise StoreError(f"admit script answered {r!r:.40} for {idx.size} users")
            out[idx] = np.frombuffer(r, dtype=np.uint8)
        if not ((out == _ADMITTED) | (out == _HALTED) | (out == _REFUSED)).all():
            raise StoreError("admit script answered an unknown code")
        return out

    def settle(self, scope: str, seq: int, users: Sequence[str], actual, digest: str | None = None,
               fence: Fence | None = None) -> None:
        users, actual, seq = check_batch(users, actual, seq, "settle batch")
        digest = check_digest(digest)
        fence = check_fence(fence)
        if not users:
            return
        self._settle(scope, seq, self._key_frags(users), actual, users.__getitem__, digest, fence,
                     self._user_slots(users) if self.cluster else None)

    def settle_ids(self, scope: str, seq: int, user_ids: np.ndarray, actual, table, digest: str | None = None,
                   fence: Fence | None = None) -> None:
        if type(self).settle is not RedisBudgetStore.settle:
            return super().settle_ids(scope, seq, user_ids, actual, table, digest=digest, fence=fence)
        uid, actual, seq = check_id_batch(user_ids, table, actual, seq, "settle batch")
        digest = check_digest(digest)
        fence = check_fence(fence)
        if uid.size == 0:
            return
        frags = self._table_frags(uid, table)
        self._settle(scope, seq, frags, actual, lambda i: table.names(uid[i:i + 1])[0], digest, fence,
                     self._xslot[uid] if self.cluster else None)

    def _settle(self, scope: str, seq: int, frags, actual: np.ndarray, name_at: Callable[[int], str],
                digest: str | None = None, fence: Fence | None = None, slots: np.ndarray | None = None) -> None:
        """Settle of a validated batch given the RESP bulk strings of its user keys (and their slots on a cluster);
        ``name_at(i)`` names user i (for the error message)."""
        n = len(frags)
        head = _bulks([f"x:{scope}".encode(), b"%d" % seq])
        tag = digest_tag(digest).encode()
        epoch = b"%d" % fence.epoch if fence is not None else b""
        groups = self._groups(n, slots)
        cost_of = self._group_cost_args(actual, groups)
        keys_of = self._keys_of(frags, slots)
        def run(check_only: bytes) -> None:  # b"1": validate only, write nothing
            calls = []
            for slot, idx in groups:
                if not self.cluster:
                    mk = _bulks([self._fence_key(fence.name).encode()]) if fence is not None else []
                    parts = mk + keys_of(idx) + head + cost_of(idx) + _bulks([check_only, tag, b"%d" % len(mk),
                                                                              epoch, b"S"])
                    calls.append(_Call(len(mk) + idx.size, len(parts), b"".join(parts), None))
                else:  # the fence copies and user keys in ARGV (redis_scripts.SETTLE, mode 'C')
                    parts = head + cost_of(idx) + _bulks([check_only, tag, b"0", epoch, b"C"]) + \
                        self._fence_copies(fence, slots, idx) + keys_of(idx)
                    calls.append(_Call(0, len(parts), b"".join(parts), slot))

            def go():
                if self.cluster and fence is not None:  # the authoritative fence first (read-only)
                    self._exec_meta("check_fence", [self._fence_key(fence.name)], [str(fence.epoch)])
                return self._exec("settle", calls, regroup=True)

            for (_, idx), bad in zip(groups, self._call(go)):
                if bad:
                    raise ValueError("settle: actual cost exceeds the reservation of user "
                                     f"{name_at(int(idx[int(bad) - 1]))!r}")

        for _ in range(8):
            try:
                if len(groups) > 1:  # several calls: validate everything first so that a ValueError changes nothing
                    run(b"1")
                run(b"0")
                return
            except _SlotsMoved:
                groups = self._groups(n, slots)
                cost_of = self._group_cost_args(actual, groups)
        raise StoreError(f"Redis budget store {self._where()}: the cluster's slots kept moving")

    # ---- release log and ledger ----------------------------------------------------------------------------
    def _release_key(self, key: str) -> str:
        return f"{self._meta}rel:{key}"

    def release_args(self, key: str, record: bytes | None = None) -> list[bytes]:
        """The retention arguments of a release (redis_scripts.RELEASE_HELPERS): [digest key, order key, offset,
        score, member, keep, record-key prefix] ('' digest key: not of the engine's form, kept for good), preceded
        by the record's digest when ``record`` is given."""
        parts = release_parts(key)
        head = [] if record is None else [release_digest(record)]
        if parts is None:
            return head + [b"", b"", b"0", b"0", b"", b"0", b""]
        q, e, t = parts
        return head + [f"{self._meta}reld:{q}/{e}".encode(), f"{self._meta}relq:{q}".encode(),
                       b"%d" % (16 * (t - 1)), b"%d" % (e * (1 << 21) + t), f"{e}/{t}".encode(),
                       b"%d" % self.release_bodies_kept, f"{self._meta}rel:{q}/".encode()]

    def put_release(self, key: str, record: bytes) -> bytes:
        record = bytes(record)
        args = [record, *self.release_args(key, record)]
        res = self._call(lambda: self._exec_release("put_release", key, args))
        if int(res[0]) == 1:
            return record
        return bytes(res[1]) if int(res[0]) == 0 else trimmed_marker(bytes(res[1]))

    def get_release(self, key: str) -> bytes | None:
        res = self._call(lambda: self._exec_release("get_release", key, self.release_args(key)[:3]))
        if not res:
            return None
        return bytes(res[1]) if int(res[0]) == 0 else trimmed_marker(bytes(res[1]))

    def _exec_release(self, name: str, key: str, args: list[bytes]):
        parts = [self._release_key(key).encode(), *args]
        return self._exec(name, [_Call(1, len(parts), b"".join(_bulks(parts)), self._meta_slot if self.cluster
                                       else None)])[0]

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
        return UserBudget(user=user, halted=h.get(b"h") == b"1", spent=spent, budget=budget,
                          extra={"override": _BUDGET_FIELDS[0] in h})

    def get_user(self, user: str) -> UserBudget | None:
        key = self._user_key(user)
        if self.cluster:  # the user's slot and the meta slot: two reads
            h = self._call(lambda: self.r.hgetall(key))
            if not h:
                return None
            if _BUDGET_FIELDS[0] in h:
                return self._user_from_hash(user, h, np.zeros(N_COMPONENTS, dtype=np.int64))
            return self._user_from_hash(user, h, self.default_budget())

        def read():
            pipe = self.r.pipeline(transaction=True)
            pipe.hgetall(key)
            pipe.hmget(self._default_key, [str(i) for i in range(N_COMPONENTS)])
            pipe.hexists(self._meta_key, "default")
            return pipe.execute()

        h, d, marked = self._call(read)
        if not h:
            return None
        if _BUDGET_FIELDS[0] not in h and all(v is None for v in d) and marked:
            raise DefaultBudgetMissing(self._lost_default_text(""))
        return self._user_from_hash(user, h, self._parse_default(d))

    def iter_users(self, default: np.ndarray | None = None) -> Iterator[UserBudget]:
        """Every user (``default``: the budget shown for users without an override instead of the stored default —
        for an operator command restoring a lost one)."""
        default = self.default_budget() if default is None else np.asarray(default, dtype=np.int64)
        pattern = _glob_escape(self._user_prefix) + "*"
        for client in self._primaries():
            cursor = 0
            seen: set[bytes] = set()
            while True:
                cursor, keys = self._call(lambda c=cursor, cl=client: cl.scan(cursor=c, match=pattern, count=1000))
                keys = [k for k in keys if k not in seen]  # SCAN may return a key more than once
                seen.update(keys)
                if keys:
                    def read(ks=keys, cl=client):
                        pipe = cl.pipeline(transaction=False)
                        for k in ks:
                            pipe.hgetall(k)
                        return pipe.execute()

                    for k, h in zip(keys, self._call(read)):
                        if h:
                            yield self._user_from_hash(self._user_of_key(k), h, default)
                if cursor == 0:
                    break

    def ping(self) -> None:
        """Raise StoreError unless the server (every primary of a cluster) answers."""
        for client in self._primaries():
            self._call(client.ping)

    def close(self) -> None:
        try:
            self.r.close()
        except Exception:  # pragma: no cover - closing a dead connection
            pass
