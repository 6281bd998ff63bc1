"""The release engine: windows → bounding → filter → mechanisms → release records (docs/contract.md §2–4).

Pure core: the only outside object it talks to is a :class:`~streamdp.filter.store.BudgetStore` (in-memory in the
embedded pipeline, Redis in the service), through the store contract.

Window close, in order. A failure in any step leaves the window to be closed again from state taken before it:
with ``store_retries`` the engine restores its own in-memory snapshot and retries; otherwise (and once the retries
are spent) the engine refuses every later ingest and close (:class:`EngineFailed`) until it is restored from a
snapshot — the Kafka worker restores its checkpoint — so a failed window is never skipped:

1. every query :meth:`~streamdp.engine.query.WindowQuery.prepare`\\ s (side-effect free) and states each user's
   worst-case cost;
2. one atomic admit per input partition of the users with data in the window, in partition order — stage A's cut
   (:mod:`streamdp.engine.stage_a`; docs/DECISIONS.md "Scale-out: stage A admits"): a user's events are all on one
   partition, so the batches are disjoint. Scope :func:`stage_a.partition_scope` of :func:`admission_scope` (a
   digest of the stream the service names in ``EngineConfig.scope`` and of the engine's queries and their
   parameters); seq = global window number; idempotent on a retry that repeats the close exactly, which the store
   checks by the partition's replay digest, chained on the close's (:mod:`streamdp.engine.replay_digest`). The
   bounding in step 1 ranks a user's pairs by keyed hashes of (query, window, user, item) under a key derived one-way
   from the noise generator's (:class:`stage_a.BoundingDraws`), never drawing from the noise generator.
   Users that do not fit are halted for good and their data is dropped;
3. every query releases from admitted users' data only (this advances the query state: tree nodes, counters);
4. records are written to the store's release log under their idempotency key (query, epoch, window) — if the
   log already holds a *different* record for the key, the engine refuses to go on (:class:`ReleaseConflict`):
   publishing fresh noise for a quantity already published would allow averaging;
5. reservations are settled to the actual costs, each user in their partition's scope
   (:func:`coordinator.settle_parts`); a ledger entry is appended per release.

The service publishes records only after step 4 and stores :meth:`snapshot` atomically with its input offsets.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass, field

import numpy as np
import orjson

from streamdp.arrays import put_rows, take_rows, unique_sorted
from streamdp.accounting.cost import COMPONENTS, INT64_MAX, N_COMPONENTS, SCALES
from streamdp.engine import state_codec
from streamdp.engine.append_log import AppendLog
from streamdp.engine.query import Names, QueryRelease, WindowData, WindowQuery
from streamdp.engine.release_parameters import ParametersChanged, canonical, check_unchanged, release_parameters
from streamdp.engine.coordinator import merge_admissions, settle_parts
from streamdp.engine.replay_digest import GENESIS, generator_fingerprint, partition_digest, window_digest
from streamdp.engine.stage_a import BoundingDraws, UserPartitions, admit_partition
from streamdp.filter.store import BudgetStore, StoreError
from streamdp.input.events import EventBatch
from streamdp.noise.generator import bounding_key, make_generator
from streamdp.outputs.records import ReleaseRecord, release_key
from streamdp.windows.held import HeldEvents
from streamdp.windows.judge import judge_and_hold
from streamdp.windows.held import take_rows as take_events
from streamdp.windows.tumbling import TumblingWindows, default_max_future

log = logging.getLogger("streamdp.engine")

#: one watermark advance closing this many windows or more is logged as a warning: every window is released
#: (mostly empty), which is right for a stream that was idle that long but is usually a wrong ``origin``
MANY_WINDOWS_AT_ONCE = 1000

#: a watermark advance is closed in steps of at most this many windows by callers that checkpoint in between
#: (the Kafka worker): memory stays bounded and a restart resumes where the last step stopped
CLOSE_STEP_WINDOWS = 256

# 3: events held per (window, partition) until the close, per-partition watermarks in ``windows``; 2: names without
# the closing bracket (append logs); 1 and 2 still load (their interned buffers must be empty)
SNAPSHOT_VERSION = 3


def admission_scope(base: str, query_ids, parameters: str = "") -> str:
    """The budget-store scope of an engine's window admissions: ``engine:`` and a 48-bit digest of ``base`` (the
    service names its stream there: consumer group and input topic) and the sorted query ids (short, because the
    scope is a field name in every user's hash).

    The store answers a second admit of the same (scope, seq) with the first outcome and charges nothing (a retry
    after a crash must not charge twice). That is right only when both admits are for the same releases: those are
    keyed (query, epoch, window), so the scope names the query set. With one scope for every engine, a second
    service sharing the store (other query ids, same window numbers) had its users admitted for free wherever the
    first service had admitted them — their data was released uncharged. The Kafka worker puts its consumer group
    and input topic in ``base`` (as in its checkpoint key), so two deployments never share a scope even with the same
    query ids. The engine passes its release parameters (``release_parameters.canonical``) as ``parameters``: the
    same query ids under another σ, ε, window length… are other releases. Changing the query set, their parameters
    or the stream starts a new scope: windows replayed after that charge again (never less)."""
    digest = hashlib.sha256("\n".join([base, *sorted(query_ids), parameters]).encode("utf-8")).hexdigest()[:12]
    return f"engine:{digest}"


class ReleaseConflict(RuntimeError):
    """The release log holds a different record for this (query, epoch, window): restore the matching snapshot."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"release log already holds a different release for {key}: restore the snapshot stored "
                         "with it instead of recomputing (fresh noise must never be published for the same quantity)")


class EngineFailed(RuntimeError):
    """A window close failed and the engine was not restored since: its windows were taken as due, so going on
    would skip them (their releases lost, their events later judged late). Restore a snapshot first."""


@dataclass
class EngineConfig:
    window_seconds: float
    horizon: int = 64  # windows per epoch (the continual-count tree horizon L)
    origin: float | None = None  # REQUIRED: the start of window 1 (a public time; None is refused)
    allowed_lateness: float = 0.0
    idle_timeout: float | None = None
    # events further ahead of their partition's newest time, or of the clock, are dead-lettered; "auto": 1,000
    # windows within [7 days, 30 days] (windows.tumbling.default_max_future); None: not checked
    max_future_seconds: float | str | None = "auto"
    unsafe_test_seed: int | None = None  # deterministic noise: TEST MODE ONLY (warns)
    scope: str = "engine"  # filter batch scope
    store_retries: int = 0  # retries of a window close when the budget store is unavailable (0 = raise at once)
    store_backoff_seconds: float = 0.2
    store_backoff_max_seconds: float = 10.0

    def __post_init__(self) -> None:
        if self.horizon < 1:
            raise ValueError("horizon must be ≥ 1")
        if self.max_future_seconds == "auto":
            self.max_future_seconds = default_max_future(self.window_seconds)
        if self.origin is None:  # a keyword after defaults, so it cannot be a plain required field
            raise ValueError("origin: required — the event time where window 1 starts. Windows are numbered from a "
                             "configured, public time: an origin taken from the first event would put that one "
                             "event's time into every published window's bounds (docs/contract.md §2)")


@dataclass
class EngineCounters:
    events_in: int = 0
    dead_lettered: int = 0
    late: int = 0
    windows_closed: int = 0
    releases: int = 0
    admitted_users: int = 0  # summed over windows
    halted_users: int = 0  # users refused (and halted) at admission, summed over windows
    dropped_halted_events: int = 0
    last_close_seconds: float = 0.0
    store_retries: int = 0
    by_reason: dict = field(default_factory=dict)

    def dead(self, reason: str, n: int = 1) -> None:
        self.dead_lettered += n
        self.by_reason[reason] = self.by_reason.get(reason, 0) + n


@dataclass
class WindowSummary:
    seq: int
    epoch: int
    t: int
    start: float
    end: float
    events: int
    users: int
    admitted: int
    refused: int
    records: list[ReleaseRecord]
    seconds: float


class ReleaseEngine:
    def __init__(self, config: EngineConfig, queries: list[WindowQuery], store: BudgetStore) -> None:
        ids = [q.id for q in queries]
        if len(set(ids)) != len(ids):
            raise ValueError(f"query ids must be unique, got {ids}")
        self.config = config
        self.queries = list(queries)
        self.store = store
        self.parameters = release_parameters(config, self.queries)
        self.scope = admission_scope(config.scope, ids, canonical(self.parameters))
        self.rng = make_generator(config.unsafe_test_seed)
        self.windows = TumblingWindows(config.window_seconds, config.origin, config.allowed_lateness,
                                       config.idle_timeout)
        self.users = Names()
        self.items = Names()
        self.epoch = 0
        self.counters = EngineCounters()
        self.held = HeldEvents()  # accepted events per (window, partition) until their window closes
        self._warned_through = 0  # MANY_WINDOWS_AT_ONCE: the last window of the advance already warned about
        # the replay digest chain (replay_digest.py): the last window's digest and the names it covers
        self.history, self._history_users, self._history_items = GENESIS, 0, 0
        # release keys this engine logged during the current close_due (kept across its retries' restores): a
        # logged key outside it was released by another run (_refuse_released)
        self._logged_here: set[str] = set()
        self._failed: str | None = None  # why the last close_due failed (EngineFailed until a restore)
        # a query that sums the events' value (continual_sums with value_range) cannot use an event with items and
        # no value: such events are dead-lettered here as "missing_value" rather than silently left out of its sums
        self._needs_value = [q.id for q in self.queries if getattr(q, "requires_value", False)]

    def _check_not_failed(self) -> None:
        if self._failed is not None:
            raise EngineFailed(f"a window close failed ({self._failed}) and the engine was not restored since: "
                               "restore a snapshot (the last checkpoint) before ingesting or closing more windows")

    # ---- ingest --------------------------------------------------------------------------------------------
    def register_partitions(self, partitions, now: float | None = None) -> None:
        """Input partitions that hold the watermark before they deliver anything (the Kafka worker registers every
        partition of its input topic: a window must not close without a partition that has not spoken yet)."""
        self.windows.register(partitions, now)

    @property
    def held_events(self) -> int:
        return self.held.events

    def ingest(self, batch: EventBatch, partition: int = 0, now: float | None = None) -> list[tuple[int, str]]:
        """Judge a parsed batch of ONE input partition (its events in offset order) and hold the accepted events
        for their windows. Returns (row, reason) for the rows rejected (``missing_value``: an event with items
        and no value while a query sums the value, judged first; ``before_origin``, ``too_far_in_future``,
        ``late``). Each event is judged against its own partition's watermark at that event
        (:meth:`TumblingWindows.judge`), so the verdicts do not depend on how the partition's sequence is cut into
        batches nor on what other partitions delivered meanwhile. Nothing is interned here: names get their ids
        when their window closes, in (window, partition, offset) order. ``now``: the monotonic clock of the idle
        timeout (tests)."""
        self._check_not_failed()
        n = len(batch)
        if n == 0:
            return []
        self.counters.events_in += n
        # content first (as the parser's rejections): an event no query can use whatever its time is dead-lettered
        # before it is judged, so it never moves its partition's watermark
        no_value = self.missing_value(batch)
        if no_value is not None and no_value.any():
            self.counters.dead("missing_value", int(no_value.sum()))
            kept = np.flatnonzero(~no_value)
            head = [(int(i), "missing_value") for i in np.flatnonzero(no_value).tolist()]
            if kept.size == 0:
                self.windows.touch(partition, now)  # delivering, even if nothing is accepted: not idle
                return head
            sub = self._ingest_judged(take_events(batch, kept), partition, now)
            return sorted(head + [(int(kept[i]), r) for i, r in sub])
        return self._ingest_judged(batch, partition, now)

    def _ingest_judged(self, batch: EventBatch, partition: int, now: float | None) -> list[tuple[int, str]]:
        """:meth:`ingest` of a batch whose every event some query can use: judged by time and held."""
        return judge_and_hold(self.windows, self.held, self.counters, batch, partition,
                              self.config.max_future_seconds, now)

    def missing_value(self, batch: EventBatch) -> np.ndarray | None:
        """Rows no configured query can use whatever their time — events with items and no value, when a query sums
        the value (``missing_value``) — as a bool mask, or None when no query needs a value. Anything that holds
        events before the engine (the Kafka worker's alignment) applies it on arrival, as the engine does."""
        if not self._needs_value:
            return None
        return np.isnan(batch.value) & (np.diff(batch.item_offsets) > 0)

    def _intern(self, batch: EventBatch) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Interned user ids, item ids and CSR item offsets of every row of ``batch`` (one window's events in
        (partition, offset) order). With the parser's per-batch dictionaries, one lookup per DISTINCT name;
        otherwise one per occurrence. New ids go to names in order of first appearance either way (users by row;
        items by row, then position)."""
        item_offsets = np.asarray(batch.item_offsets, dtype=np.int64)
        ucodes, icodes = getattr(batch, "user_codes", None), getattr(batch, "item_codes", None)
        if ucodes is not None:
            user_ids = self.users.ids_coded(batch.user_dict, ucodes)
        else:
            user_ids = self.users.ids(batch.users)
        if icodes is not None:
            item_ids = self.items.ids_coded(batch.item_dict, icodes)
        else:
            item_ids = self.items.ids(batch.items)
        return user_ids, item_ids, item_offsets

    # ---- window close --------------------------------------------------------------------------------------
    def due_windows(self, now: float | None = None) -> range:
        """The windows the watermark has passed and that are not closed yet (nothing is marked closed here)."""
        return range(self.windows.last_closed + 1, self.windows.due_until(now) + 1)

    def pending_windows(self, now: float | None = None, flush: bool = False) -> int:
        """How many windows :meth:`close_due` (``flush``: :meth:`flush`) would still close now."""
        return max(0, self._close_target(now, flush) - self.windows.last_closed)

    def _close_target(self, now: float | None, flush: bool) -> int:
        last = self.windows.due_until(now)
        if flush:
            top = self.held.last()
            if top is not None:
                last = max(last, top)
        return last

    def close_due(self, now: float | None = None, max_windows: int | None = None) -> list[WindowSummary]:
        """Close the due windows — those every partition's watermark has passed — in order (at most
        ``max_windows`` of them; the rest stay due for the next call). Their records say ``closed_by: watermark``.

        With ``config.store_retries > 0``, a :class:`StoreError` (Redis unreachable) restores the in-memory state
        taken before the first window — generator state included, so the retry draws the very same noise — waits
        with exponential backoff and closes the same windows again: admissions replay without charging twice,
        logged releases are found identical, nothing uncharged is returned. A failure that is not retried leaves
        the engine refusing further work until :meth:`restore` (EngineFailed): its state is part-way through a
        close."""
        return self._guarded(now, False, max_windows)

    def flush(self, now: float | None = None, max_windows: int | None = None) -> list[WindowSummary]:
        """End of a bounded input: close the due windows (``closed_by: watermark``), then every open window up to
        the newest one holding events, although the watermark has not passed them (``closed_by: end_of_input``:
        events for them may still have been coming). A closed window never reopens: their later events are late."""
        return self._guarded(now, True, max_windows)

    def _guarded(self, now: float | None, flush: bool, max_windows: int | None) -> list[WindowSummary]:
        self._check_not_failed()
        try:
            return self._close_due(now, flush, max_windows)
        except BaseException as e:
            self._failed = f"{type(e).__name__}: {e}"
            raise

    def _close_due(self, now: float | None, flush: bool, max_windows: int | None) -> list[WindowSummary]:
        first = self.windows.last_closed + 1
        by_watermark = self.windows.due_until(now)
        last = self._close_target(now, flush)
        if last < first:
            return []
        if last - first + 1 >= MANY_WINDOWS_AT_ONCE and last > self._warned_through:
            self._warned_through = last
            log.warning("closing %d windows at once (windows %d…%d, each released, most of them empty): events "
                        "far past the last closed window — check the configured origin (%s) and window_seconds "
                        "(%s)", last - first + 1, first, last, self.windows.origin, self.config.window_seconds)
        if max_windows is not None:
            last = min(last, first + max(1, int(max_windows)) - 1)
        due = [(t, "watermark" if t <= by_watermark else "end_of_input") for t in range(first, last + 1)]
        self._logged_here = set()
        if self.config.store_retries <= 0:
            return [self.close_window(t, how) for t, how in due]
        snap = self.snapshot(include_rng=True)
        delay = self.config.store_backoff_seconds
        for attempt in range(self.config.store_retries + 1):
            try:
                return [self.close_window(t, how) for t, how in due]
            except StoreError as e:
                if attempt == self.config.store_retries:
                    raise
                log.warning("budget store unavailable (%s); retry %d in %.2f s", e, attempt + 1, delay)
                self.counters.store_retries += 1
                time.sleep(delay)
                delay = min(delay * 2, self.config.store_backoff_max_seconds)
                retries = self.counters.store_retries
                self.restore(snap, own_retry=True)
                self.counters.store_retries = retries
        raise AssertionError("unreachable")

    def _window_data(self, seq: int, closed_by: str = "watermark") -> WindowData:
        L = self.config.horizon
        start, end = self.windows.bounds(seq)
        b = self.held.peek(seq)
        if b is not None:
            user_ids, item_ids, item_offsets = self._intern(b)
            data = dict(user_ids=user_ids, ts=np.asarray(b.ts, dtype=np.float64), item_offsets=item_offsets,
                        item_ids=item_ids, value=np.asarray(b.value, dtype=np.float64),
                        loc=np.asarray(b.loc, dtype=np.float64).reshape(-1, 2))
        else:
            data = dict(user_ids=np.zeros(0, np.int64), ts=np.zeros(0), item_offsets=np.zeros(1, np.int64),
                        item_ids=np.zeros(0, np.int64), value=np.zeros(0), loc=np.zeros((0, 2)))
        return WindowData(seq=seq, epoch=(seq - 1) // L, t=(seq - 1) % L + 1, start=start, end=end,
                          closed_by=closed_by, **data)

    def _refuse_released(self, keys: list[str]) -> None:
        """ReleaseConflict, before anything is drawn or charged, if the release log already holds one of ``keys``
        (the window about to close) from another run: its users would be charged again and the release, with fresh
        noise, refused only after the charge (a second ``demo --store redis://…`` over the same windows charged
        1,057 users before its refusal; 2026-11-23 operator review).

        * The worker's DeferredReleaseLog decides itself (``refuse_logged``): its release log is written with the
          checkpoint, so a restored engine never closes a logged window again.
        * Keys this engine logged in the current :meth:`close_due` are its own: a retry after a store failure
          closes them again with the same noise (the snapshot restores the generator) and finds them identical.
        * In test mode a re-run with the same seed draws the same noise: its admits are replays (no charge) and
          its releases identical, so it is let through (another seed still ends in ReleaseConflict)."""
        refuse_logged = getattr(self.store, "refuse_logged", None)
        if refuse_logged is not None:
            refuse_logged(keys)
            return
        if self.config.unsafe_test_seed is not None:
            return
        for k in keys:
            if k not in self._logged_here and self.store.get_release(k) is not None:
                raise ReleaseConflict(k)

    def close_window(self, seq: int, closed_by: str = "watermark") -> WindowSummary:
        """Close window ``seq`` (the next one: :meth:`close_due` and :meth:`flush` call this in order)."""
        t0 = time.perf_counter()
        generator_state = generator_fingerprint(self.rng)  # before anything of this close draws
        L = self.config.horizon
        self._refuse_released([release_key(q.id, (seq - 1) // L, (seq - 1) % L + 1) for q in self.queries])
        w = self._window_data(seq, closed_by)  # interns the window's new names, in (partition, offset) order
        if w.epoch != self.epoch:
            for q in self.queries:
                q.new_epoch()
            self.epoch = w.epoch
        # 1. prepare (side-effect free); queries that price by item name see the engine's name table first
        for q in self.queries:
            bind = getattr(q, "bind_names", None)
            if bind is not None:
                bind(self.items)
        # bounding priorities keyed by Kb = bounding_key(noise generator), one-way (stage_a.BoundingDraws)
        rows = self.held.partition_rows(seq)  # (partition, events) in partition order: w's row ranges
        ends = np.cumsum([n for _, n in rows], dtype=np.int64)
        present = unique_sorted(w.user_ids)
        user_partition = UserPartitions(w.user_ids, rows, present)
        draws = BoundingDraws(bounding_key(self.rng), seq, self.users, self.items)
        reservations = [q.prepare(w, draws.for_query(q.id)) for q in self.queries]
        # 2. admission per (window, partition), as stage A does it: each partition's users in their own batch
        all_users = unique_sorted(np.concatenate([present] + [r.users for r in reservations]))
        total = np.zeros((all_users.size, N_COMPONENTS), dtype=np.int64)
        for r in reservations:  # the queries' costs add: zCDP (Rogers (unknown-domain) Thm 6) and CGP (Liang–Yi (CGP) Thm 3.2) compose additively
            if r.users.size:
                _add_rows(total, all_users, r.users, r.costs, subset=True)
        # the replay digest of this close; each partition's admit carries its own, chained on it: the store trusts a
        # second admit of (scope of p, seq) only under the same one
        arrays = (w.user_ids, w.ts, w.item_offsets, w.item_ids, w.value, w.loc)
        digest = window_digest(self.history, seq, generator_state, self.users.since(self._history_users),
                               self.items.since(self._history_items), arrays, all_users, total)
        self.history, self._history_users, self._history_items = digest, len(self.users), len(self.items)
        owner = user_partition[all_users]
        if (owner < 0).any():
            raise ValueError(f"window {seq}: a query reserved for a user without events in the window (its input "
                             "partition, hence its admission batch, is unknown)")
        parts = []
        for (p, n), end in zip(rows, ends.tolist()):
            sel = np.flatnonzero(owner == p)
            if sel.size == 0:
                continue
            users_p, total_p = all_users[sel], total[sel]
            d = partition_digest(digest, p, end - n, end, users_p)
            parts.append(admit_partition(self.store, self.scope, seq, p, users_p, total_p, self.users, d.hex()))
        mask = merge_admissions(all_users, parts)
        everyone = bool(mask.all())
        admitted = np.zeros(len(self.users), dtype=bool)
        admitted[all_users if everyone else all_users[mask]] = True
        n_refused = int(mask.size - np.count_nonzero(mask))
        if not everyone and w.user_ids.size:
            self.counters.dropped_halted_events += int((~admitted[w.user_ids]).sum())
        # 3. release from admitted users only (advances query state)
        releases: list[QueryRelease] = []
        for q, r in zip(self.queries, reservations):
            releases.append(q.release(w, r, admitted, self.rng, self.items))
        # 4. records → release log (idempotency key); conflicts are fatal
        records: list[ReleaseRecord] = []
        actual_total = None  # None while every release charged exactly its admitted reservation
        charged: list[tuple[np.ndarray, np.ndarray]] = []  # (users, costs) summed so far while None
        for q, r, rel in zip(self.queries, reservations, releases):
            if everyone or not r.users.size:
                users, costs = r.users, r.costs
            else:
                keep = admitted[r.users]
                users, costs = r.users[keep], r.costs[keep]
            if rel.actual is not None:
                if actual_total is None and not (np.array_equal(rel.users, users)
                                                 and np.array_equal(rel.actual, costs)):
                    actual_total = np.zeros_like(total)
                    for u, c in charged:
                        if u.size:
                            _add_rows(actual_total, all_users, u, c, subset=True)
                users, costs = rel.users, rel.actual
            if actual_total is None:
                charged.append((users, costs))
            elif users.size:
                _add_rows(actual_total, all_users, users, costs, subset=rel.actual is None)
            rec = ReleaseRecord.build(q, w, rel, costs, test_mode=self.config.unsafe_test_seed is not None)
            body = rec.to_bytes()
            self._logged_here.add(rec.key)  # first: a write whose reply is lost may still have logged it
            stored = self.store.put_release(rec.key, body)
            if stored != body:
                raise ReleaseConflict(rec.key)
            records.append(rec)
        # 5. settle reservations to the actual costs; ledger
        adm_idx = np.flatnonzero(mask) if actual_total is not None else mask[:0]  # nothing to settle if None
        if adm_idx.size and (actual_total[adm_idx] != total[adm_idx]).any():
            settle_parts(self.store, parts, all_users[adm_idx], actual_total[adm_idx], self.users)
        for rec in records:
            self.store.append_ledger(rec.ledger_entry())
        self.held.drop(seq)
        if seq > self.windows.last_closed:
            self.windows.last_closed = seq
        dt = time.perf_counter() - t0
        c = self.counters
        c.windows_closed += 1
        c.releases += len(records)
        n_admitted = int(mask.size) - n_refused
        c.admitted_users += n_admitted
        c.halted_users += n_refused
        c.last_close_seconds = dt
        return WindowSummary(seq=seq, epoch=w.epoch, t=w.t, start=w.start, end=w.end, events=w.n_events,
                             users=int(present.size), admitted=n_admitted, refused=n_refused,
                             records=records, seconds=dt)

    # ---- snapshot ------------------------------------------------------------------------------------------
    def snapshot(self, include_rng: bool = False) -> bytes:
        """The whole engine state as bytes (exact): :meth:`state_tree`, encoded."""
        return state_codec.encode(self.state_tree(include_rng))

    def state_tree(self, include_rng: bool = False) -> dict:
        """The whole engine state as a tree for the snapshot codec. The noise generator's state is included in the
        unsafe test mode, or when ``include_rng`` (in-memory retries only: such a snapshot must never be
        persisted); a secure engine restored from a persisted snapshot re-keys from the OS (noise already drawn for
        tree nodes is part of the query state and is kept either way). The interned-name lists and the bounders'
        commit logs are :class:`~streamdp.engine.append_log.AppendLog` s (checkpoints append to them)."""
        return {
            "version": SNAPSHOT_VERSION,
            "windows": self.windows.state(),
            # name lists as one JSON blob each (one C call instead of a walk over millions of strings), without the
            # closing bracket: the blob of a longer list then extends the blob of a shorter one
            "users": AppendLog(orjson.dumps(self.users.state())[:-1]),
            "items": AppendLog(orjson.dumps(self.items.state())[:-1]),
            "epoch": self.epoch,
            "held": self.held.state(),
            "queries": {q.id: q.state() for q in self.queries},
            "counters": {k: v for k, v in self.counters.__dict__.items()},
            "rng": (self.rng.bit_generator.state
                    if include_rng or self.config.unsafe_test_seed is not None else None),
            "parameters": canonical(self.parameters),  # restored only under the same (release_parameters.py)
            "history": {"digest": self.history.hex(), "users": self._history_users, "items": self._history_items},
        }

    def restore(self, data: bytes, *, own_retry: bool = False) -> None:
        self.restore_tree(state_codec.decode(data), own_retry=own_retry)

    def restore_tree(self, st: dict, *, own_retry: bool = False) -> None:
        """Load a :meth:`state_tree` (decoded; append logs as bytes). Version 1 (before append logs) loads too.

        A snapshot carries its generator's state only in test mode (or in :meth:`close_due`'s own in-memory retry,
        ``own_retry``): a secure engine refuses any other snapshot that carries one. The ``noise`` release parameter
        refuses test-mode snapshots written since it exists; this also refuses those written before it, whose
        generator is keyed from the fixed seed (closing review of 2026-11-23)."""
        version = st.get("version")
        if version not in (1, 2, SNAPSHOT_VERSION):
            raise ValueError(f"unsupported snapshot version {version}")
        if st.get("rng") is not None and self.config.unsafe_test_seed is None and not own_retry:
            raise ParametersChanged(
                "the snapshot was written in test mode (it carries its noise generator's state, keyed from the "
                "fixed unsafe_test_seed, which anyone can reproduce; its releases are not differentially private): "
                "a secure engine does not continue it. Start a new deployment (a new consumer group and new query "
                "ids)")
        check_unchanged(st.get("parameters"), self.parameters)  # before anything is loaded
        names = (lambda b: orjson.loads(b)) if version == 1 else (lambda b: orjson.loads(bytes(b) + b"]"))
        self.windows = TumblingWindows.from_state(st["windows"])
        self._failed = None  # restored to state taken before the failed close: its windows are due again
        self.users = Names.from_state(names(st["users"]))
        self.items = Names.from_state(names(st["items"]))
        self.epoch = st["epoch"]
        if version < 3 and any(st.get("buffers") or {}):
            raise ValueError("a snapshot of version < 3 holding events of open windows in interned form cannot be "
                             "restored: their names were numbered in the old (input) order")
        self.held = HeldEvents()
        self.held.load_state(st.get("held") or {})
        for q in self.queries:
            if q.id not in st["queries"]:
                raise ValueError(f"snapshot has no state for query {q.id!r}")
            q.load_state(st["queries"][q.id])
        self.counters = EngineCounters(**st["counters"])
        hist = st.get("history")  # absent from snapshots of before replay digests: the chain restarts
        if hist is None:
            self.history, self._history_users, self._history_items = GENESIS, 0, 0
        else:
            self.history = bytes.fromhex(hist["digest"])
            self._history_users, self._history_items = int(hist["users"]), int(hist["items"])
        if st["rng"] is not None:
            self.rng.bit_generator.state = st["rng"]


def _add_rows(total: np.ndarray, all_users: np.ndarray, users: np.ndarray, costs: np.ndarray,
              subset: bool) -> None:
    """``total[row of u in the sorted all_users] += cost`` for every (u, cost): what ``np.add.at`` over
    ``searchsorted`` positions computes, without its per-element dispatch when the positions are distinct (queries
    hand over sorted distinct users). ``subset``: ``users ⊆ all_users`` is known (then sorted distinct users as
    many as ``all_users`` ARE ``all_users`` and need no search)."""
    if costs.size and total.size and int(total.max()) > INT64_MAX - int(costs.max()):
        # the int64 sum could wrap (a cost vector near the ledger's range, several queries: a wrapped sum is a
        # small charge that admits a user past their budget — review of 2026-11-23, F2): add saturating at
        # INT64_MAX, which no finite budget admits. Costs are non-negative, so min(c, MAX - t) + t cannot wrap.
        for p, c in zip(np.searchsorted(all_users, users).tolist(), costs):
            total[p] += np.minimum(c, INT64_MAX - total[p])
        return
    if subset and users.size == all_users.size and (users.size < 2 or bool((users[1:] > users[:-1]).all())):
        total += costs
        return
    pos = np.searchsorted(all_users, users)
    if pos.size < 2 or bool((pos[1:] > pos[:-1]).all()):
        rows = take_rows(total, pos)
        rows += costs  # in place: the casting rules of ``total[pos] += costs``
        put_rows(total, pos, rows)  # distinct rows: the same sums as np.add.at
    else:
        np.add.at(total, pos, costs)


def cost_columns() -> list[tuple[str, int]]:
    return list(zip(COMPONENTS, SCALES))
