"""Crash-safe worker checkpoints in Redis (docs/contract.md §3 "Atomicity", §6 "A killed worker resumes …").

One checkpoint = ONE Lua script call (Redis runs it atomically) that writes, together:

* the worker state: engine snapshot + held events of open windows + noise-generator state + consumed offsets;
* the release-log entries of the windows closed since the last checkpoint (idempotency keys query/epoch/window)
  and their ledger entries — the engine writes these through :class:`DeferredReleaseLog`, which keeps them in
  memory until this script runs, so the release log never holds a record whose state was not checkpointed;
* the records not yet acknowledged as published (``pending``).

Protocol of one consumed batch: parse → stage → engine (admit: atomic, idempotent per (scope, window seq);
settle: idempotent) → **checkpoint** → publish the pending records (keyed by query/epoch/window) → **ack** (clears
``pending``) → commit the Kafka offsets (for lag monitoring only; the checkpoint is the source of truth).

On start (and after any Redis or Kafka failure) the worker **claims** the checkpoint (fencing token), restores it,
re-publishes ``pending`` (same keys and bytes: subscribers and compacted topics see each release once) and seeks
every partition to the stored offsets. Kill points:

* before the checkpoint (e.g. right after admit): nothing was published or logged; the restored state is the
  previous checkpoint and the same events are replayed. The replay draws the same randomness (the generator state
  is part of the checkpoint), so it recomputes exactly what the lost run computed; its admits carry the lost run's
  replay digests, so admission answers the first outcome and charges nothing, and settling again is a no-op — no
  double charge, no fresh noise published. (A replay that differs — outside the ordering module's determinism
  conditions — carries other digests and is charged again: :mod:`streamdp.engine.replay_digest`);
* after the checkpoint, before or during publishing: the restart re-publishes the pending records (duplicates of
  the same key carry identical bytes);
* after publishing, before the ack: same, the records are published again with identical bytes.

Noise-generator state: a secure engine re-keys on restore, but a replay after a crash must draw the randomness
the lost run drew (the contribution-bounding subset decides what admission charged). The worker therefore keys a
fresh CSPRNG at every checkpoint and stores that key in the checkpoint: the key only ever covers the draws until
the next checkpoint, and it is as sensitive as the tree-node noise that the engine snapshot holds anyway (Redis is
inside the trust boundary of the service).

Fencing: :meth:`RedisCheckpoint.claim` sets a new owner token and a new epoch of the checkpoint's fence (the hash's
field ``fence``; on a Redis Cluster also copied into every hash slot, :meth:`RedisBudgetStore.spread_fence`); a
checkpoint or ack by anyone else fails with :class:`Fenced`, and so do the admits and settles of the worker's
engine, which go through :class:`DeferredReleaseLog` under that fence: a worker that lost its partitions without
noticing — stalled, or cut off — can neither overwrite its successor's state nor charge anyone any more. A
checkpoint hash (or fence) that is gone altogether raises :class:`StoreLost`: the store lost its state (flushed,
restarted without persistence), which is not another owner.

On a Redis Cluster every key of the checkpoint — the hash, its append logs, the release log and the ledger — carries
the store's hash tag (``{<ns>}:…``), so the checkpoint script stays in one hash slot.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import numpy as np

from streamdp.engine import state_codec
from streamdp.engine.append_log import join_logs, split_logs
from streamdp.engine.engine import ReleaseConflict
from streamdp.filter import redis_scripts
from streamdp.filter.memory import ledger_entry_json
from streamdp.filter.store import BudgetStore, Fence, Fenced, StoreError, StoreLost, UserBudget

__all__ = ["CHECKPOINT_FORMAT", "Checkpoint", "CheckpointConflict", "DeferredReleaseLog", "Fenced", "PendingRecord",
           "RedisCheckpoint", "StoreLost"]

CHECKPOINT_FORMAT = 2  # 2: append logs in their own keys (format 1, one state blob, still loads)

# KEYS: 1 checkpoint hash, 2 ledger stream, 3 … 2+nr release-log keys, then one key per append log
# ARGV: 1 owner, 2 state (without its append logs), 3 offsets json, 4 pending, 5 info json, 6 nl ledger entries,
#       7 nr release records, 8 logs manifest json ({name: {"key", "len"}}), 9 the records kept per query (the
#       release log's retention), then the nl ledger entries, then per release record 8 strings: the record and
#       its retention arguments (RedisBudgetStore.release_args: digest, digest key, order key, offset, score,
#       member, record-key prefix — keys of the store's hash slot), then per append log: mode ('A' append / 'S'
#       set), the length it must have before an append, the bytes to append or set
# Every check (owner, key types, release-log conflicts, append-log lengths, the old manifest) comes before the first
# write: an error leaves nothing half-written.
_OWNER_LUA = """
local t = redis.call('TYPE', KEYS[1])['ok']
if t == 'none' then
  return redis.error_reply('LOST checkpoint ' .. KEYS[1] .. ' is gone: the store lost its state')
end
if t ~= 'hash' then return redis.error_reply('WRONGTYPE checkpoint ' .. KEYS[1] .. ' is not a hash') end
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner ~= ARGV[1] then
  return redis.error_reply('FENCED checkpoint is owned by ' .. tostring(owner))
end
"""

CHECKPOINT_LUA = redis_scripts.RELEASE_HELPERS + _OWNER_LUA + """
local lt = redis.call('TYPE', KEYS[2])['ok']
if lt ~= 'none' and lt ~= 'stream' then return redis.error_reply('WRONGTYPE ledger ' .. KEYS[2] .. ' is not a stream') end
local ver = redis.call('HGET', KEYS[1], 'version')
if ver and not string.find(ver, '^%d+$') then return redis.error_reply('CORRUPT checkpoint version ' .. ver) end
local old = redis.call('HGET', KEYS[1], 'logs')
local oldlogs = {}
if old then
  local ok, dec = pcall(cjson.decode, old)
  if not ok or type(dec) ~= 'table' then return redis.error_reply('CORRUPT checkpoint manifest of ' .. KEYS[1]) end
  oldlogs = dec
end
local nl = tonumber(ARGV[6])
local nr = tonumber(ARGV[7])
local keep = tonumber(ARGV[9])
local rbase = 9 + nl
local lbase = rbase + 8 * nr
local fresh = {}
for i = 1, nr do
  local a = rbase + 8 * (i - 1)
  local old, d, e = rel_read(KEYS[2 + i], ARGV[a + 3], ARGV[a + 4], tonumber(ARGV[a + 5]))
  if e then return redis.error_reply(e) end
  if (old and old ~= ARGV[a + 1]) or (d and d ~= ARGV[a + 2]) then
    return redis.error_reply('CONFLICT release log holds a different record for ' .. KEYS[2 + i])
  end
  fresh[i] = not old and not d
end
local nlogs = #KEYS - 2 - nr
for j = 1, nlogs do
  local a = lbase + 3 * (j - 1)
  if ARGV[a + 1] == 'A' and redis.call('STRLEN', KEYS[2 + nr + j]) ~= tonumber(ARGV[a + 2]) then
    return redis.error_reply('LOGMISMATCH ' .. KEYS[2 + nr + j] .. ' is not the length this writer appended to')
  end
  local kt = redis.call('TYPE', KEYS[2 + nr + j])['ok']
  if kt ~= 'none' and kt ~= 'string' then
    return redis.error_reply('WRONGTYPE append log ' .. KEYS[2 + nr + j] .. ' is not a string')
  end
end
for i = 1, nr do
  if fresh[i] then
    local a = rbase + 8 * (i - 1)
    rel_write(KEYS[2 + i], ARGV[a + 3], ARGV[a + 4], ARGV[a + 1], ARGV[a + 2], tonumber(ARGV[a + 5]), ARGV[a + 6],
              ARGV[a + 7], keep, ARGV[a + 8])
  end
end
for i = 1, nl do
  redis.call('XADD', KEYS[2], '*', 'e', ARGV[9 + i])
end
local live = {}
for j = 1, nlogs do
  local a = lbase + 3 * (j - 1)
  local key = KEYS[2 + nr + j]
  live[key] = true
  if ARGV[a + 1] == 'S' then
    redis.call('SET', key, ARGV[a + 3])
  elseif #ARGV[a + 3] > 0 then
    redis.call('APPEND', key, ARGV[a + 3])
  end
end
for _, entry in pairs(oldlogs) do
  if type(entry) == 'table' and entry['key'] and not live[entry['key']] then
    redis.call('DEL', entry['key'])
  end
end
local v = redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'offsets', ARGV[3], 'pending', ARGV[4], 'info', ARGV[5],
           'logs', ARGV[8])
return v
"""

# KEYS: 1 checkpoint hash ; ARGV: 1 owner, 2 version
ACK_LUA = _OWNER_LUA + """
if redis.call('HGET', KEYS[1], 'version') == ARGV[2] then
  redis.call('HSET', KEYS[1], 'pending', '')
  return 1
end
return 0
"""

# KEYS: 1 checkpoint hash ; ARGV: 1 new owner. Returns version, state, offsets, pending, the new fence epoch, then
# name, bytes per append log of the manifest (each read to its recorded length)
CLAIM_LUA = """
local t = redis.call('TYPE', KEYS[1])['ok']
if t ~= 'none' and t ~= 'hash' then return redis.error_reply('WRONGTYPE checkpoint ' .. KEYS[1] .. ' is not a hash') end
redis.call('HSET', KEYS[1], 'owner', ARGV[1])
local epoch = redis.call('HINCRBY', KEYS[1], 'fence', 1)
local out = redis.call('HMGET', KEYS[1], 'version', 'state', 'offsets', 'pending', 'logs')
local manifest = out[5]
out[5] = epoch
if manifest then
  for name, entry in pairs(cjson.decode(manifest)) do
    local n = tonumber(entry['len'])
    local data = ''
    if n > 0 then
      data = redis.call('GETRANGE', entry['key'], 0, n - 1)
    end
    if #data ~= n then
      return redis.error_reply('LOGMISSING append log ' .. entry['key'] .. ' holds ' .. #data .. ' of ' .. n
                               .. ' bytes')
    end
    table.insert(out, name)
    table.insert(out, data)
  end
end
return out
"""


class CheckpointConflict(RuntimeError):
    """The release log holds a different record for a key being checkpointed (should never happen)."""


class _LogMismatch(Exception):
    """An append log in Redis is not the length this writer last wrote (an earlier call's outcome was unknown)."""


@dataclass
class PendingRecord:
    topic: str
    key: str
    value: bytes


@dataclass
class Checkpoint:
    version: int
    state: dict | None  # decoded worker state (None: nothing checkpointed yet)
    offsets: dict[int, int]
    pending: list[PendingRecord] = field(default_factory=list)


def encode_pending(records: list[PendingRecord]) -> bytes:
    if not records:
        return b""
    return state_codec.encode({"records": [[r.topic, r.key, r.value] for r in records]})


def decode_pending(b: bytes | None) -> list[PendingRecord]:
    if not b:
        return []
    return [PendingRecord(t, k, bytes(v)) for t, k, v in state_codec.decode(bytes(b))["records"]]


class RedisCheckpoint:
    """The checkpoint of one consumer group on one input topic, in the Redis of the budget store."""

    def __init__(self, store, group: str, input_topic: str) -> None:
        if not hasattr(store, "r") or not hasattr(store, "_release_key"):
            raise ValueError("checkpoints need the Redis budget store (store URL redis://…)")
        self.store = store
        self.r = store.r
        self.fence_name = f"ckpt:{group}:{input_topic}"
        self.key = store._fence_key(self.fence_name)  # <ns>:ckpt:… ({<ns>}:ckpt:… on a cluster)
        self.ledger_key = store._ledger_key  # the store's ledger stream (same layout as append_ledger)
        self.owner: str | None = None
        self.fence: Fence | None = None  # this owner's fence (claim): admits and settles of its engine carry it
        self.version = 0
        self.last_bytes = 0  # the state's size (append logs in full)
        self.last_written = 0  # bytes of state and append-log data the last checkpoint sent
        # append log name → the bytes Redis holds for it as far as this writer knows (what it last wrote or read);
        # cleared whenever a call's outcome is unknown, so the next checkpoint writes the logs whole
        self._logs: dict[str, bytes] = {}
        self._scripts: dict[str, object] = {}

    def _script(self, name: str, src: str):
        s = self._scripts.get(name)
        if s is None:
            s = self._scripts[name] = self.r.register_script(src)  # EVALSHA, reloads on NOSCRIPT
        return s

    def _call(self, fn: Callable):
        import redis

        try:
            return fn()
        except redis.exceptions.ResponseError as e:
            msg = str(e)
            if msg.startswith("FENCED"):
                raise Fenced(msg) from None
            if msg.startswith("LOST"):
                raise StoreLost(f"{msg} (flushed, or restarted without persistence)") from None
            if msg.startswith("CONFLICT"):
                raise CheckpointConflict(msg) from None
            if msg.startswith("LOGMISMATCH"):
                raise _LogMismatch(msg) from None
            raise StoreError(f"checkpoint failed: {msg}") from e
        except redis.exceptions.RedisError as e:
            raise StoreError(f"checkpoint store unreachable: {e}") from e

    def claim(self, worker_id: str) -> Checkpoint:
        """Become the owner (fencing out any previous one) and read the latest checkpoint."""
        token = f"{worker_id}:{uuid.uuid4().hex[:12]}"
        self._logs = {}
        self.fence = None
        res = self._call(lambda: self._script("claim", CLAIM_LUA)(keys=[self.key], args=[token]))
        version, state, offsets, pending, epoch = res[:5]
        logs = {bytes(res[i]).decode(): bytes(res[i + 1]) for i in range(5, len(res), 2)}
        fence = Fence(self.fence_name, int(epoch))
        self.store.spread_fence(fence)  # a cluster's copy in every hash slot (a single Redis: nothing to do)
        self.owner, self.fence = token, fence
        self.version = int(version or 0)
        st = state_codec.decode(bytes(state)) if state else None
        self.last_bytes = (len(state) + sum(len(b) for b in logs.values())) if state else 0  # as write() counts
        if st is not None:
            if st.get("format") not in (1, CHECKPOINT_FORMAT):
                raise ValueError(f"unsupported checkpoint format {st.get('format')!r} in {self.key}")
            st = join_logs(st, logs)
            self._logs = logs
        offs = {int(k): int(v) for k, v in json.loads(offsets).items()} if offsets else {}
        return Checkpoint(self.version, st, offs, decode_pending(pending))

    def write(self, state: dict, offsets: dict[int, int], pending: list[PendingRecord],
              releases: dict[str, bytes], ledger: list[dict], info: dict) -> int:
        """The atomic checkpoint (see module doc). The :class:`~streamdp.engine.append_log.AppendLog` s in
        ``state`` go to keys of their own, appended to where they extend what this writer last wrote. Returns the
        new version."""
        base, logs = split_logs(dict(state, format=CHECKPOINT_FORMAT))
        blob = state_codec.encode(base)
        self.last_bytes = len(blob) + sum(len(b) for b in logs.values())
        try:
            return self._write(blob, logs, offsets, pending, releases, ledger, info)
        except _LogMismatch:  # a lost reply left Redis ahead of what this writer knew: write the logs whole
            self._logs = {}
            return self._write(blob, logs, offsets, pending, releases, ledger, info)

    def _write(self, blob: bytes, logs: dict[str, bytes], offsets, pending, releases, ledger, info) -> int:
        rel_keys = list(releases)
        names = sorted(logs)
        log_keys = [f"{self.key}:log:{n}" for n in names]
        keys = [self.key, self.ledger_key] + [self.store._release_key(k) for k in rel_keys] + log_keys
        ledger_js = [ledger_entry_json(e) for e in ledger]
        log_args: list = []
        sent = len(blob)
        for n in names:
            new, old = logs[n], self._logs.get(n)
            if old is not None and new.startswith(old):
                log_args += ["A", str(len(old)), new[len(old):]]
                sent += len(new) - len(old)
            else:
                log_args += ["S", "0", new]
                sent += len(new)
        manifest = json.dumps({n: {"key": k, "len": len(logs[n])} for n, k in zip(names, log_keys)})
        rel_args = []
        for k in rel_keys:
            ra = self.store.release_args(k, releases[k])
            rel_args += [releases[k], *ra[:5], ra[5], ra[7]]  # (the store's keep goes once, below)
        args = [self.owner or "", blob,
                json.dumps({str(p): int(o) for p, o in sorted(offsets.items())}), encode_pending(pending),
                json.dumps(dict(info, time=time.time())), str(len(ledger_js)), str(len(rel_keys)), manifest,
                str(self.store.release_bodies_kept), *ledger_js, *rel_args, *log_args]
        try:
            v = self._call(lambda: self._script("ckpt", CHECKPOINT_LUA)(keys=keys, args=args))
        except BaseException:
            self._logs = {}  # the outcome is unknown (or nothing was written): no appends until we know again
            raise
        self._logs = {n: logs[n] for n in names}  # immutable bytes: kept, not copied
        self.last_written = sent
        self.version = int(v)
        return self.version

    def ack(self, version: int) -> bool:
        """Mark the pending records of checkpoint ``version`` as published."""
        return bool(self._call(lambda: self._script("ack", ACK_LUA)(keys=[self.key],
                                                                      args=[self.owner or "", str(version)])))

    def stored_parameters(self) -> str | None:
        """The release parameters of the latest checkpoint (its ``info``; None: no checkpoint, or one written
        before they were recorded) — read without claiming, so that a misconfigured worker fences nobody."""
        return self.stored_info().get("parameters")

    def stored_info(self) -> dict:
        """The ``info`` of the latest checkpoint ({} without one), read without claiming."""
        info = self._call(lambda: self.r.hget(self.key, "info"))
        return json.loads(info) if info else {}

    def read_info(self) -> dict:
        """Operator view: offsets, version, owner and summary of the latest checkpoint (no state decoding)."""
        h = self._call(lambda: self.r.hmget(self.key, ["version", "owner", "offsets", "info", "pending"]))
        version, owner, offsets, info, pending = h
        return {"key": self.key, "version": int(version or 0), "owner": owner.decode() if owner else None,
                "offsets": json.loads(offsets) if offsets else {}, "info": json.loads(info) if info else {},
                "pending_records": len(decode_pending(pending))}


class DeferredReleaseLog(BudgetStore):
    """The budget store as the engine sees it inside the worker.

    Admission and settlement go straight to the store (atomic, exactly once per batch), under the owner's fence:
    ``fence()`` (e.g. the checkpoint's current claim, :attr:`RedisCheckpoint.fence`) is passed with every admit and
    settle, so that a replaced owner's engine is refused (:class:`Fenced`). A settle carries the digest of its
    batch's admit (the last one of its scope and seq), so it lowers that batch's reservation only. Release-log
    writes and ledger entries are kept in memory and written by the next checkpoint, in the same atomic step as the
    state that produced them. ``after_admit`` is called after every successful admit (test-only fault injection,
    see ``faults.py``).
    """

    def __init__(self, inner: BudgetStore, after_admit: Callable[[], None] | None = None,
                 fence: Callable[[], Fence | None] | None = None) -> None:
        self.inner = inner
        self.after_admit = after_admit
        self.fence = fence or (lambda: None)
        self.releases: dict[str, bytes] = {}
        self.ledger_entries: list[dict] = []
        self._admitted: dict[str, tuple[int, str | None]] = {}  # scope → (seq, digest) of its last admit

    def take(self) -> tuple[dict[str, bytes], list[dict]]:
        rel, led = self.releases, self.ledger_entries
        self.releases, self.ledger_entries = {}, []
        return rel, led

    def discard(self) -> None:
        self.releases, self.ledger_entries = {}, []

    # delegated
    def default_budget(self) -> np.ndarray:
        return self.inner.default_budget()

    def set_default_budget(self, budget, *, actor: str = "operator", reason: str = "", components=None) -> None:
        self.inner.set_default_budget(budget, actor=actor, reason=reason, components=components)

    def grant(self, user: str, budget, *, actor: str = "operator", reason: str = "", components=None) -> None:
        self.inner.grant(user, budget, actor=actor, reason=reason, components=components)

    def claim_fence(self, name: str) -> Fence:
        return self.inner.claim_fence(name)

    def _settle_kw(self, scope: str, seq: int, digest: str | None, fence: Fence | None) -> dict:
        """A settle's digest (its batch's admit's: the last one of its scope and seq) and fence, as keywords — only
        those that are set, so that an inner store written before them still works unfenced."""
        if digest is None:
            last = self._admitted.get(scope)
            digest = last[1] if last is not None and last[0] == seq else None
        return self._kw(digest=digest, fence=fence)

    def _kw(self, **kw) -> dict:
        if kw.get("fence") is None:
            kw["fence"] = self.fence()
        return {k: v for k, v in kw.items() if v is not None}

    def admit(self, scope: str, seq: int, users: Sequence[str], costs, digest: str | None = None,
              fence: Fence | None = None) -> np.ndarray:
        out = self.inner.admit(scope, seq, users, costs, **self._kw(digest=digest, fence=fence))
        self._admitted[scope] = (seq, digest)
        if self.after_admit is not None:
            self.after_admit()
        return out

    def settle(self, scope: str, seq: int, users: Sequence[str], actual, digest: str | None = None,
               fence: Fence | None = None) -> None:
        self.inner.settle(scope, seq, users, actual, **self._settle_kw(scope, seq, digest, fence))

    # by interned ids: the inner store's fast path (BudgetStore's default converts to names)
    def admit_ids(self, scope: str, seq: int, user_ids, costs, table, digest: str | None = None,
                  fence: Fence | None = None) -> np.ndarray:
        out = self.inner.admit_ids(scope, seq, user_ids, costs, table, **self._kw(digest=digest, fence=fence))
        self._admitted[scope] = (seq, digest)
        if self.after_admit is not None:
            self.after_admit()
        return out

    def settle_ids(self, scope: str, seq: int, user_ids, actual, table, digest: str | None = None,
                   fence: Fence | None = None) -> None:
        self.inner.settle_ids(scope, seq, user_ids, actual, table, **self._settle_kw(scope, seq, digest, fence))

    def get_user(self, user: str) -> UserBudget | None:
        return self.inner.get_user(user)

    def iter_users(self) -> Iterator[UserBudget]:
        return self.inner.iter_users()

    def refuse_logged(self, keys: Sequence[str]) -> None:
        """ReleaseConflict if the store's release log already holds one of ``keys`` (a window about to close).

        Here the release log is written only with the checkpoint of the state that produced it, so the restored
        engine has closed every window whose release is logged and never closes one again: a logged key means
        another deployment with the same query ids released this window. Refusing before the admit keeps that
        mistake from charging users for releases that are never published (and a supervisor's restarts from
        charging them again each time)."""
        for k in keys:
            if k not in self.releases and self.inner.get_release(k) is not None:
                raise ReleaseConflict(k)

    # deferred
    def put_release(self, key: str, record: bytes) -> bytes:
        if key in self.releases:
            return self.releases[key]
        old = self.inner.get_release(key)
        if old is not None:
            return old
        self.releases[key] = bytes(record)
        return self.releases[key]

    def get_release(self, key: str) -> bytes | None:
        return self.releases.get(key) or self.inner.get_release(key)

    def append_ledger(self, entry: dict) -> None:
        ledger_entry_json(entry)  # validate now (JSON-able), stamp at checkpoint time
        self.ledger_entries.append(dict(entry, ts=entry.get("ts", time.time())))

    def ledger(self, *, query: str | None = None, since: float | None = None) -> list[dict]:
        return self.inner.ledger(query=query, since=since)
