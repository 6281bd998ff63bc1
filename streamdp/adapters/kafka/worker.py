"""The Kafka worker: consume → parse → canonical stage → release engine → checkpoint → publish (docs/contract.md §4–6).

The Kafka twin of :class:`streamdp.engine.pipeline.EmbeddedPipeline`, in two concurrent parts:

* the **fetcher** (a task) calls aiokafka ``getmany`` — with the lean fetch
  (:mod:`~streamdp.adapters.kafka.lean_fetch`) it returns one run of (offsets, values) per Kafka record batch, not
  a ``ConsumerRecord`` per record — cuts the result into batches of at most ``batch_max_records`` (pausing the
  partitions that run ahead in event time, :mod:`~streamdp.adapters.kafka.alignment`) and parses each at once — the
  payloads of all its partitions in one :func:`parse_batch` call, split back per partition (:func:`parse_fetched`)
  — into a bounded prefetch queue, so consuming and parsing go on while the processor waits for Redis;
* the **processor** takes the next batch (with those queued behind it, up to ``step_max_records`` records) and
  runs one step:

1. bad events → dead-letter topic ``{"reason", "detail", "payload", "partition", "offset", …}`` keyed
   ``<partition>/<offset>`` (an event whose record key is not its user too: ``key_mismatch``);
2. feed each partition's events to the engine through the :class:`~streamdp.adapters.kafka.ordering.CanonicalStage`
   — each judged against its own partition's watermark, held per (window, partition) — and close the windows every
   partition's watermark has passed (one atomic admit per window and input partition), at most ``CLOSE_STEP_WINDOWS`` per round;
3. if windows closed (or every N batches / T seconds): ONE atomic Redis checkpoint (state + offsets + release log +
   ledger + pending records, :mod:`~streamdp.adapters.kafka.checkpoint`); then publish each record to partition 0
   of ``<output_prefix><query id>`` keyed by ``query/epoch/window``; then acknowledge; then commit Kafka offsets (for
   lag monitoring only, bounded: ``COMMIT_TIMEOUT``). More due windows: another round (2–3) before the next step.

The blocking parts of a step — the window closes (the engine's admit/settle Lua calls) and the checkpoint (engine
snapshot, encoding, the Lua call) — run in a worker thread (``asyncio.to_thread``) while the event loop goes on
fetching; the step's protocol order is unchanged (the processor awaits each part, and holds ``lock``).

Positions and generations: every batch is stamped with the worker's ``generation`` when ``getmany`` returns it.
Restores (start, failure, rebalance) seek the consumer and bump the generation in one synchronous block
(:meth:`KafkaWorker._seek_all`), so a batch fetched before a seek — queued or in flight — is recognised and
dropped, and everything after the seek is fetched again from the restored offsets.

Redis or Kafka failures never publish anything uncharged: the worker drops its in-memory state, restores the last
checkpoint (retrying with backoff until Redis answers), re-publishes the pending records and seeks back to the
checkpointed offsets. SIGTERM finishes the current step (or round of closes), checkpoints and exits 0 — 5 when
Kafka fails meanwhile (the final offset commit failed or timed out).

Scale-out: workers of one consumer group use :class:`~streamdp.adapters.kafka.assignor.SingleOwnerAssignor` —
one active owner of all input partitions, the others standby; hand-over through the checkpoint.

Roles: ``all`` (the above, on the input topic) or ``coordinator`` — contract §4's staged topology, where stage A
(:mod:`~streamdp.adapters.kafka.ingest`) parses and dead-letters, and this worker consumes its forward records
(:mod:`~streamdp.adapters.kafka.forward`) from the internal topic instead of raw JSON, exactly once by input offset.
Both roles share ONE checkpoint per (group_id, input topic): its offsets are input offsets either way.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from dataclasses import dataclass, field, replace

import numpy as np

from streamdp.adapters.kafka.alignment import PartitionAlignment
from streamdp.adapters.kafka.assignor import SingleOwnerAssignor
from streamdp.adapters.kafka.checkpoint import (Checkpoint, DeferredReleaseLog, Fenced, PendingRecord,
                                                RedisCheckpoint)
from streamdp.adapters.kafka.faults import FaultInjector
from streamdp.adapters.kafka.forward import Stream, refusal
from streamdp.adapters.kafka.forward import accept as accept_forward
from streamdp.adapters.kafka.logs import Throttle
from streamdp.adapters.kafka.lean_fetch import install_lean_fetch, keys_of, offsets_and_values, split_runs
from streamdp.adapters.kafka.ordering import CLOSE_STEP_WINDOWS, CanonicalStage
from streamdp.adapters.kafka.topics import (EXIT_DEFAULT_BUDGET_MISSING, EXIT_PARAMETERS_CHANGED, EXIT_STOPPED_IN_OUTAGE,
                                            EXIT_STORE_LOST, OUTPUT_TOPIC_CONFIGS,
                                            all_read_to_end, check_internal_topic, ensure_topics, forward_topic,
                                            outcomes_topic, output_topic, parts_topic, read_to_end, start_retrying, stop_clients, ReadPastEnd,
                                            stop_on_signals, topic_partitions)
from streamdp.adapters.metrics import WorkerMetrics
from streamdp.engine.engine import ReleaseConflict, ReleaseEngine, WindowSummary
from streamdp.outputs.records import TEST_MODE_HEADERS
from streamdp.engine.release_parameters import (ParametersChanged, canonical, check_unchanged, release_parameters,
                                               removed_queries)
from streamdp.filter.store import DefaultBudgetMissing, StoreError, StoreLost
from streamdp.input.events import FAST_MIN_BATCH, DeadLetter, EventBatch, parse_batch
from streamdp.noise.generator import secure_generator
from streamdp.outputs.dead_letters import dead_letter_value
from streamdp.windows.held import take_rows
from streamdp.windows.tumbling import rejection_detail

log = logging.getLogger("streamdp.kafka")

PROBE_SECONDS = 10.0  # the coordinator's input-topic probe before a drain, in all (KafkaWorker._unforwarded)
OUTPUT_PARTITIONS = 1  # output topics the worker creates: one partition, so a query's releases are read in order
OUTPUT_PARTITION = 0  # … and every release is published on it (also on an older topic with more partitions)
EXIT_RELEASE_CONFLICT = 7  # `streamdp run` exit code: another deployment's releases hold this deployment's keys
EXIT_INPUT_PAST_END = 4  # `streamdp run` exit code (as a store behind what was published): the input log is behind
COMMIT_TIMEOUT = 2.0  # seconds an offset commit (lag monitoring only) may take, on the shutdown path too



@dataclass
class WorkerOptions:
    input_topic: str = "streamdp.events"
    output_prefix: str = "streamdp.out."
    dead_letter_topic: str = "streamdp.dead"
    group_id: str = "streamdp"
    partitions: int = 4  # of the topics created at start
    batch_max_records: int = 5000  # per getmany
    prefetch_batches: int = 8  # fetched + parsed batches waiting for the processor (two full steps: fetching goes on)
    # one step takes the queued batches up to this many records: when the processor falls behind, steps grow and
    # several windows share one checkpoint and one publish round (measured: 0.30 → 0.36 of raw at 20000 vs 5000)
    step_max_records: int = 20000
    offload: bool = True  # window closes and checkpoints in a worker thread (the event loop keeps fetching)
    # per fetch and per partition: small enough that the partitions advance together (the watermark is their
    # minimum: windows close — and Redis works — while fetching goes on, and fewer events are held), large enough
    # for few round trips. The total matters with brokers that fill a response from one partition (tansu does:
    # with 64 MiB it returned ~48k records of one partition per fetch; with 1 MiB ~10k, the partitions in turn).
    fetch_max_bytes: int = 1024 * 1024
    max_partition_fetch_bytes: int = 1024 * 1024
    poll_ms: int = 200
    # the split's internal topics (parts, outcomes): how long the broker may hold a fetch without data. Small: while
    # stage A catches up, every window waits for a read of each (aiokafka's default, 500 ms, cost ~0.3 s a window)
    internal_fetch_wait_ms: int = 50
    checkpoint_seconds: float = 5.0  # periodic checkpoint even without window closes
    checkpoint_batches: int = 100
    drain_idle: float | None = None  # exit after this long without input, the input read to its end (bounded inputs)
    # … and at that drain also close the windows the watermark has not passed (records marked end_of_input); without
    # it they stay open in the checkpoint for a later run
    close_open_windows: bool = False
    session_timeout_ms: int = 10000
    heartbeat_interval_ms: int = 1000
    max_request_bytes: int = 16 * 1024 * 1024  # releases of many items can be large
    create_topics: bool = True
    use_group: bool = True  # False: "standalone" — own every partition without group coordination (ONE worker)
    # "all": consume the input topic and do everything; "coordinator": stage C of the staged topology — consume
    # the forward records of stage A (``ingest.py``) from ``internal_topic`` instead of raw JSON
    role: str = "all"
    internal_topic: str = "streamdp.internal.parsed"
    # [kafka] stage_a: "forward" (stage A parses and forwards to internal_topic) or "admit" (the split: stage A
    # admits and sends parts and markers to parts_topic; the coordinator answers on outcomes_topic)
    stage_a: str = "forward"
    parts_topic: str = "streamdp.internal.parts"
    outcomes_topic: str = "streamdp.internal.outcomes"
    # read fetched records as runs of (offsets, values) per record batch instead of aiokafka ConsumerRecords
    # (lean_fetch.py; the input topic only — the coordinator's forward records are few and large)
    lean_fetch: bool = True
    # watermark alignment (alignment.py): pause input partitions whose fetched events run more than this many
    # seconds of event time ahead of the others (None: two windows; 0: off). Role "all" only.
    max_partition_skew_seconds: float | None = None
    # an empty checkpoint while Kafka holds offsets committed by this group means the budget store lost its state
    # (restarted without persistence, flushed): starting over would re-release every window with fresh noise and
    # reset every budget — refused unless the operator says it is meant (``--allow-empty-store``)
    allow_empty_store: bool = False

    @classmethod
    def from_config(cls, kafka: dict, **over) -> "WorkerOptions":
        o = cls(input_topic=kafka["input_topic"], output_prefix=kafka["output_prefix"],
                dead_letter_topic=kafka["dead_letter_topic"], group_id=kafka["group_id"],
                partitions=kafka["partitions"], batch_max_records=kafka["batch_max_records"])
        for k in ("fetch_max_bytes", "max_partition_fetch_bytes", "prefetch_batches", "step_max_records",
                  "lean_fetch", "max_partition_skew_seconds", "internal_fetch_wait_ms"):
            if k in kafka:
                setattr(o, k, kafka[k])
        o.internal_topic = forward_topic(kafka)
        o.stage_a = kafka.get("stage_a", "forward")
        o.parts_topic, o.outcomes_topic = parts_topic(kafka), outcomes_topic(kafka)
        for k, v in over.items():
            if v is not None:
                setattr(o, k, v)
        return o


@dataclass
class FetchedPartition:
    """One partition's records of one fetched batch, parsed."""

    partition: int
    offsets: np.ndarray  # int64, the records' offsets (increasing)
    payloads: list[bytes]
    parsed: EventBatch  # the valid events; ``source_rows`` index ``payloads``
    dead: list[tuple[int, DeadLetter]] = field(default_factory=list)  # (record index, dead letter), in order
    # a forward record (coordinator): the input offsets it vouches for start at ``lo`` and end before ``next``;
    # ``src``: (internal partition, its next offset) once this record is consumed
    lo: int | None = None
    next: int | None = None
    src: tuple[int, int] | None = None
    stream: Stream | None = None  # a forward record: the deployment whose stage A wrote it (None: version 1)


@dataclass
class Fetched:
    """One ``getmany`` result, parsed; ``generation``: the worker's generation when it was fetched."""

    generation: int
    parts: list[FetchedPartition]
    records: int


def parse_fetched(batch: dict, topic: str, check_keys: bool = True) -> list[FetchedPartition]:
    """Parse a ``getmany`` result (TopicPartition → records, or → ``RecordRun`` s of the lean fetch) of ``topic``:
    the payloads of all partitions in ONE :func:`parse_batch` call (bigger batches take the columnar fast path, and
    its per-batch name dictionaries serve every partition), then split back per partition, in partition order.
    Each event's parse does not depend on the batch it is parsed in, so this equals parsing partition by
    partition. With ``check_keys``, a valid event whose record key is not its ``user`` is a dead letter
    (``key_mismatch``, :func:`key_mismatches`)."""
    tps = sorted((tp for tp, msgs in batch.items() if tp.topic == topic and msgs), key=lambda tp: tp.partition)
    if not tps:
        return []
    payloads: list[bytes] = []
    keys: list = []
    offsets: list[np.ndarray] = []
    bounds = [0]
    for tp in tps:
        offs, vals = offsets_and_values(batch[tp])  # lean runs or ConsumerRecords (lean_fetch.py)
        payloads.extend(vals)
        if check_keys:
            keys.extend(keys_of(batch[tp]))
        offsets.append(offs)
        bounds.append(len(payloads))
    parsed, dead = parse_batch(payloads)
    if check_keys and len(parsed):
        bad = key_mismatches(keys, parsed)
        if bad.size:
            extra = [DeadLetter(payloads[j], "key_mismatch", _key_detail(keys[j]), j)
                     for j in parsed.source_rows[bad].tolist()]
            parsed = take_rows(parsed, np.setdiff1d(np.arange(len(parsed)), bad))
            dead = sorted(dead + extra, key=lambda d: d.index)
    dead_at: list[int] = []
    if dead:
        mask = np.ones(len(payloads), dtype=bool)
        mask[parsed.source_rows] = False
        dead_at = np.flatnonzero(mask).tolist()
    if len(tps) == 1:
        return [FetchedPartition(tps[0].partition, offsets[0], payloads, parsed, list(zip(dead_at, dead)))]
    part_of = np.searchsorted(np.asarray(bounds[1:-1], dtype=np.int64), parsed.source_rows, side="right")
    dead_part = np.searchsorted(np.asarray(bounds[1:-1], dtype=np.int64), np.asarray(dead_at, dtype=np.int64),
                                side="right").tolist()
    out = []
    for j, tp in enumerate(tps):
        lo, hi = bounds[j], bounds[j + 1]
        sub = take_rows(parsed, np.flatnonzero(part_of == j))
        sub = replace(sub, source_rows=sub.source_rows - lo)
        dl = [(i - lo, d) for i, d, q in zip(dead_at, dead, dead_part) if q == j]
        out.append(FetchedPartition(tp.partition, offsets[j], payloads[lo:hi], sub, dl))
    return out


def key_mismatches(keys: list, parsed: EventBatch) -> np.ndarray:
    """Rows of ``parsed`` whose record key (``keys[source row]``: bytes or None) is not the UTF-8 of the event's
    user. Events are keyed by user (so that a user's events stay in one partition, in order, and one user cannot
    move every partition's watermark): an event keyed otherwise, or not at all, is a dead letter
    (docs/DECISIONS.md, "Event time"). One C-level comparison per event."""
    users = parsed.users
    if parsed.user_codes is not None and parsed.user_dict is not None:
        enc = np.empty(len(parsed.user_dict), dtype=object)
        enc[:] = [u.encode() for u in parsed.user_dict]
        want = enc[np.asarray(parsed.user_codes, dtype=np.int64)]
    else:
        want = np.empty(len(users), dtype=object)
        want[:] = [u.encode() for u in users]
    got = np.empty(len(keys), dtype=object)
    got[:] = keys
    return np.flatnonzero(got[parsed.source_rows] != want)


def _key_detail(key) -> str:
    if key is None:
        return "the record has no key; events are keyed by their user"
    return f"the record's key ({len(key)} bytes) is not the event's user; events are keyed by their user"


def decode_fetched(batch: dict, topic: str) -> list[FetchedPartition]:
    """The coordinator's :func:`parse_fetched`: each forward record of ``topic`` (stage A's, see ``forward.py``)
    becomes one :class:`FetchedPartition` of its INPUT partition, in internal-partition then offset order. An
    undecodable record is logged and skipped (only a stage A of another version writes one)."""
    from streamdp.adapters.kafka.forward import ForwardError, decode

    out = []
    for tp in sorted((tp for tp, msgs in batch.items() if tp.topic == topic and msgs), key=lambda tp: tp.partition):
        for m in batch[tp]:
            src = (tp.partition, m.offset + 1)
            try:
                r = decode(m.value or b"")
            except ForwardError as e:
                log.error("undecodable forward record skipped", extra={"partition": tp.partition,
                                                                      "offset": m.offset, "error": str(e)})
                out.append(FetchedPartition(-1, np.zeros(0, dtype=np.int64), [], EventBatch(), src=src))
                continue
            out.append(FetchedPartition(r.partition, r.offsets, r.payloads, r.batch, lo=r.lo, next=r.next_offset,
                                        src=src, stream=r.stream))
    return out


def warm_up_parser() -> None:
    """Parse one synthetic batch on the fast path at start: its first call loads libraries lazily (~0.2 s
    measured), which would otherwise delay the first consumed batch."""
    parse_batch([b'{"user":"warm-up","ts":1700000000.0,"items":["a"],"value":1.0}'] * FAST_MIN_BATCH)


class KafkaWorker:
    def __init__(self, cfg, store, client_kw: dict, opts: WorkerOptions, *, metrics: WorkerMetrics | None = None,
                 worker_id: str | None = None) -> None:
        self.cfg = cfg
        self.store = store
        self.client_kw = client_kw
        self.opts = opts
        self.metrics = metrics or WorkerMetrics()
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        self.coordinator = opts.role == "coordinator"
        if opts.role not in ("all", "coordinator"):
            raise ValueError(f"role: {opts.role!r} is not a KafkaWorker role (all, coordinator)")
        self.source_topic = opts.internal_topic if self.coordinator else opts.input_topic
        self.group = f"{opts.group_id}.coordinator" if self.coordinator else opts.group_id
        # ONE engine state per (group_id, input topic) whatever the role: the checkpoint's offsets are input offsets
        # in both shapes, so a deployment can switch between `all` and the staged topology and carry its state (and
        # its drawn noise) over; an `all` worker and a coordinator running at once fence each other
        self.ckpt = RedisCheckpoint(store, opts.group_id, opts.input_topic)
        self.stream = Stream(opts.group_id, opts.input_topic)  # coordinator: the forward records it accepts
        self._refused: set = set()  # (why, stream) of refused forward records already logged
        self.faults = FaultInjector.from_env()
        # admits and settles carry the checkpoint's fence: a replaced owner is refused (Fenced, exit 3)
        self.dstore = DeferredReleaseLog(store, after_admit=lambda: self.faults.hit("after_admit"),
                                         fence=lambda: self.ckpt.fence)
        self.test_mode = cfg.service.get("unsafe_test_seed") is not None
        self.topic_of = {t["id"]: output_topic(cfg.kafka | {"output_prefix": opts.output_prefix}, t["id"])
                         for t in cfg.query_tables}
        self.engine: ReleaseEngine | None = None
        self.stage: CanonicalStage | None = None
        self.offsets: dict[int, int] = {}  # input partition → next input offset (what the engine has)
        self.src_offsets: dict[int, int] = {}  # coordinator: internal partition → next offset
        self.owned: set[int] = set()  # partitions of the consumed topic held by this worker
        self.input_partitions: set[int] = set()  # every input partition (they all hold the watermark)
        self._next_probe = 0.0  # coordinator drain: when the input topic may be probed again (_unforwarded)
        self._waiting_logged = False  # … and "waiting for stage A" said once per idle spell
        self.generation = 0  # bumped at every (re)assignment and seek: fetched batches of older ones are dropped
        self.lock = asyncio.Lock()
        self.stopping = asyncio.Event()
        self.exit_code = 0
        self.consumer = None
        self.producer = None
        self.lean = False  # the lean fetch is installed in the consumer
        skew = opts.max_partition_skew_seconds
        if skew is None:
            skew = 2.0 * float(cfg.service["window_seconds"])
        self.align = PartitionAlignment(skew) if skew > 0 and not self.coordinator else None
        self._assignor = SingleOwnerAssignor()
        self._batches_since = 0
        self._last_ckpt = time.monotonic()
        self._last_input = time.monotonic()
        self.closed_windows = 0
        self._carry: Fetched | None = None  # a fetched batch taken from the queue for the next step
        self._failures = 0  # consecutive failed steps (their backoff)
        self._removed: list[str] = []  # query ids removed from this deployment by a restart (checkpoint info)
        self._said = Throttle(log)  # repeated failures are logged at most once per 10 s per kind
        self._commit_failed = False  # the last offset commit failed or timed out

    # ---- lifecycle -----------------------------------------------------------------------------------------
    async def start(self) -> None:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

        o = self.opts
        warm_up_parser()
        if o.create_topics:
            names = [o.input_topic, o.dead_letter_topic] + ([o.internal_topic] if self.coordinator else [])
            await ensure_topics(self.client_kw, names, o.partitions)
            # releases are keyed by (query, epoch, window) and a re-publish repeats key and bytes: compaction keeps
            # one record per release; a topic takes records as large as the producer sends (existing topics are
            # left as they are). ONE partition: a query's releases are read in window order (every record is
            # published on partition 0 of its topic, also of an older topic with more partitions)
            await ensure_topics(self.client_kw, list(self.topic_of.values()), OUTPUT_PARTITIONS,
                                configs={**OUTPUT_TOPIC_CONFIGS, "max.message.bytes": str(o.max_request_bytes)})
        self.producer = AIOKafkaProducer(**self.client_kw, acks="all", linger_ms=0, enable_idempotence=False,
                                         max_request_size=o.max_request_bytes)
        await self.producer.start()
        self.consumer = AIOKafkaConsumer(
            **self.client_kw, group_id=self.group, enable_auto_commit=False, auto_offset_reset="earliest",
            partition_assignment_strategy=(self._assignor,), session_timeout_ms=o.session_timeout_ms,
            heartbeat_interval_ms=o.heartbeat_interval_ms, max_poll_interval_ms=300000,
            fetch_max_bytes=o.fetch_max_bytes, max_partition_fetch_bytes=o.max_partition_fetch_bytes)
        if self.coordinator:
            await self.consumer.start()
            self.input_partitions = set(await topic_partitions(self.consumer, o.input_topic))
            n_fw = len(await topic_partitions(self.consumer, o.internal_topic))
            check_internal_topic(o.internal_topic, n_fw, o.input_topic, len(self.input_partitions))
        if o.use_group:
            self.consumer.subscribe([self.source_topic], listener=_listener(self))
            if not self.coordinator:
                await self.consumer.start()
                self.lean = o.lean_fetch and install_lean_fetch(self.consumer)
                # every input partition holds the watermark, owned or not: no window closes without its data
                self.input_partitions = set(await topic_partitions(self.consumer, o.input_topic))
        else:
            from aiokafka import TopicPartition

            if not self.coordinator:
                await self.consumer.start()
                self.lean = o.lean_fetch and install_lean_fetch(self.consumer)
            parts = await topic_partitions(self.consumer, self.source_topic)
            if not self.coordinator:
                self.input_partitions = set(parts)
            tps = [TopicPartition(self.source_topic, p) for p in parts]
            self.consumer.assign(tps)
            await self.on_assigned(tps)
        if self.exit_code != 0:  # a standalone start refused while restoring (exit 4, 6, 7): said already, not "started"
            return
        await self._warn_wide_output_topics()
        log.info("worker started", extra={"worker": self.worker_id, "input_topic": o.input_topic,
                                          "role": o.role, "source_topic": self.source_topic, "group": self.group,
                                          "queries": list(self.topic_of), "lean_fetch": self.lean,
                                          "test_mode": self.test_mode})

    async def _warn_wide_output_topics(self) -> None:
        """Output topics with more than one partition (created before 2026-12-07, or by hand): the worker publishes
        on their partition 0 only, so that a query's releases are read in window order; records published before
        stay where they are (docs/subscribers.md)."""
        from aiokafka.errors import KafkaError

        for topic in self.topic_of.values():
            try:
                parts = await asyncio.wait_for(self.producer.partitions_for(topic), 10.0)
            except (KafkaError, asyncio.TimeoutError):
                continue  # not known yet: nothing to warn about
            if parts and len(parts) > 1:
                log.warning("output topic %r has %d partitions: releases are published on its partition 0 only "
                            "(in window order); records published before this version may be on the others",
                            topic, len(parts), extra={"topic": topic, "partitions": len(parts)})

    async def stop(self) -> None:
        await stop_clients(self.consumer, self.producer)

    def request_stop(self) -> None:
        self.stopping.set()

    async def run(self) -> int:
        stop_on_signals(self.request_stop)
        if not await start_retrying(self.start, self.stop, self.stopping):
            log.error("stopping while Kafka is unreachable at start; nothing was consumed or published",
                      extra={"worker": self.worker_id})
            return EXIT_STOPPED_IN_OUTAGE
        if self.exit_code == 0:
            self.metrics.set_ready()
        try:
            await self._loop()
            async with self.lock:
                if self.engine is not None and self.exit_code == 0:
                    await self._safe(self._final_checkpoint)
                if self.exit_code == 0 and self.stopping.is_set() and self._commit_failed:
                    # OPERATIONS: a SIGTERM during an outage exits 5 (the checkpoint above is in the store: nothing
                    # is lost; only Kafka's copy of the offsets, for lag monitoring, could not be written — e.g. an
                    # input topic deleted under the worker, whose commit aiokafka would retry for ever)
                    log.error("stopping while Kafka is failing (the offset commit failed or took longer than "
                              f"{COMMIT_TIMEOUT:g} s); the checkpoint is written, the next start resumes from it",
                              extra={"worker": self.worker_id, "topic": self.source_topic})
                    self.exit_code = EXIT_STOPPED_IN_OUTAGE
        finally:
            self.metrics.set_ready("stopping")
            await self.stop()
            log.info("worker stopped", extra={"worker": self.worker_id, "exit_code": self.exit_code,
                                              "windows_closed": self.closed_windows})
        return self.exit_code

    async def _loop(self) -> None:
        """The processor; the fetcher runs beside it as a task (see the module doc)."""
        o = self.opts
        queue: asyncio.Queue = asyncio.Queue(maxsize=max(1, o.prefetch_batches))
        self._carry = None
        fetcher = asyncio.create_task(self._fetch_loop(queue), name="streamdp-fetcher")
        try:
            while not self.stopping.is_set():
                if fetcher.done():
                    fetcher.result()  # raises what stopped it
                    break
                items = await self._next_items(queue)
                now = time.monotonic()
                async with self.lock:
                    if self.engine is not None:
                        items = [f for f in items if f.generation == self.generation]  # else: fetched before a seek
                        if items:
                            await self._safe(self._step, items)
                        elif now - self._last_ckpt >= o.checkpoint_seconds and self._dirty():
                            await self._safe(self._checkpoint_and_publish, [], now)
                if (o.drain_idle is not None and self.engine is not None  # standbys wait for a hand-over
                        and queue.empty() and self._carry is None
                        and not (self.align is not None and self.align.paused)  # paused input is not the end
                        and time.monotonic() - self._last_input >= o.drain_idle
                        and await self._input_at_end()
                        and await self._stage_a_done()):
                    async with self.lock:
                        # decided again after the awaits above (the probe may take seconds): a stop, a revoke or
                        # input that came meanwhile means no drain now
                        if (self.stopping.is_set() or self.engine is None or not queue.empty()
                                or self._carry is not None or time.monotonic() - self._last_input < o.drain_idle):
                            continue
                        drained = await self._safe(self._drain)
                    if not drained:  # the checkpoint was restored: read the input again from its offsets
                        continue
                    log.info("input idle: drained", extra={"idle_seconds": o.drain_idle})
                    break
        finally:
            fetcher.cancel()
            await asyncio.gather(fetcher, return_exceptions=True)

    async def _input_at_end(self) -> bool:
        """Whether every assigned partition of the source topic has answered a fetch and is read up to the high
        watermark that answer carried. Idleness alone is no end of input: draining while a partition's first fetch
        is still on its way, or while one is read in part, closes windows that its events belong to, and every
        later run dead-letters them as late (service review of 2026-11-23, finding 3). A read position — the
        consumer's or this worker's own next offset — PAST the high watermark is no end either: the topic was
        truncated or recreated under the worker (a drain then released windows from part of their events as final;
        fault campaign of 2026-12-06): the worker stops with exit code 4, nothing closed (:meth:`_refuse_past_end`)."""
        try:
            return await all_read_to_end(self.consumer, self.source_topic,
                                         self.src_offsets if self.coordinator else self.offsets)
        except ReadPastEnd as e:
            self._refuse_past_end(e)
            return False

    def _refuse_past_end(self, e: ReadPastEnd) -> None:
        log.error(f"{e}. The drain does not take that for the end of the input: the records this deployment read "
                  "are gone from the log, and events written to the new log below the old position would be skipped. "
                  "Nothing was closed. Restore the topic, or start a new deployment (new group id and query ids) "
                  "on the new topic", extra={"worker": self.worker_id, "topic": e.topic, "partition": e.partition,
                                             "position": e.position, "high_watermark": e.high_watermark})
        self.engine = self.stage = None
        self.exit_code = EXIT_INPUT_PAST_END
        self.stopping.set()

    async def _stage_a_done(self) -> bool:
        """The coordinator's drain needs more than its own topic read to its end: an idle internal topic may be a
        stage A that is down, frozen, rebalancing or behind, and draining then closes windows without its events
        (every later run dead-letters them as late; worker review of 2026-11-23, finding 2). So it looks at the
        input topic itself (:meth:`_unforwarded`) and drains only when no input partition holds a record at or past
        the coordinator's next input offset. Probed at most once per ``drain_idle`` (at least 1 s). Role ``all``:
        True."""
        if not self.coordinator:
            return True
        now = time.monotonic()
        if now < self._next_probe:
            return False
        self._next_probe = now + max(1.0, float(self.opts.drain_idle or 0.0))
        from aiokafka.errors import KafkaError

        try:
            pending = await self._unforwarded()
        except ReadPastEnd as e:
            self._refuse_past_end(e)
            return False
        except (KafkaError, OSError, asyncio.TimeoutError) as e:
            log.warning("input topic probe failed; not drained", extra={"error": str(e)})
            return False
        if pending == {}:
            return True
        if not self._waiting_logged and not self.stopping.is_set():
            self._waiting_logged = True
            if pending is None:
                log.info("input idle, not drained: the input topic probe got no answer in time; probing again",
                         extra={"timeout_seconds": PROBE_SECONDS})
            else:
                log.info("input idle, not drained: the input topic holds records this coordinator has not received "
                         "- waiting for stage A (ingest workers down, rebalancing or behind; or forward records "
                         "this coordinator refused: see streamdp_forward_dropped)",
                         extra={"partitions": {p: {"coordinator_offset": self.offsets.get(p), "first_record": o}
                                               for p, o in pending.items()}})
        return False

    async def _unforwarded(self, timeout: float | None = None) -> dict[int, int] | None:
        """Input partitions that hold a record at or past the coordinator's next input offset (the beginning of the
        partition where it has none): partition → the offset of the first such record. Read by a throw-away
        consumer of the input topic (no group, nothing committed). ``None`` when the probe did not finish within
        ``timeout`` s (``PROBE_SECONDS``; everything included: connecting, offsets, fetches) or a SIGTERM came. A
        partition is done once a fetch from that offset has answered and the probe's position has reached the high
        watermark of that answer with no record: offsets without records (transaction markers, compacted away) are
        passed over, and the high watermark comes from fetch responses (tansu's ``end_offsets`` are wrong after
        batched produce)."""
        from aiokafka import AIOKafkaConsumer

        timeout = PROBE_SECONDS if timeout is None else timeout
        probe = AIOKafkaConsumer(**self.client_kw, group_id=None, enable_auto_commit=False,
                                 auto_offset_reset="earliest", fetch_max_bytes=256 * 1024,
                                 max_partition_fetch_bytes=64 * 1024,
                                 request_timeout_ms=max(1000, int(timeout * 1000)))
        body = asyncio.ensure_future(self._probe(probe))
        stop = asyncio.ensure_future(self.stopping.wait())
        try:
            await asyncio.wait({body, stop}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            return body.result() if body.done() else None
        finally:
            for f in (body, stop):
                f.cancel()
            await asyncio.gather(body, stop, return_exceptions=True)
            try:
                await probe.stop()
            except Exception as e:  # a probe that never started: nothing held
                log.debug("probe consumer stop", extra={"error": str(e)})

    async def _probe(self, probe) -> dict[int, int]:
        """The body of :meth:`_unforwarded` (runs until every partition is decided; the caller bounds it)."""
        from aiokafka import TopicPartition

        await probe.start()
        tps = {p: TopicPartition(self.opts.input_topic, p) for p in sorted(self.input_partitions)}
        probe.assign(list(tps.values()))
        unknown = [tp for p, tp in tps.items() if p not in self.offsets]
        begin = await probe.beginning_offsets(unknown) if unknown else {}
        for p, tp in tps.items():
            probe.seek(tp, self.offsets[p] if p in self.offsets else begin[tp])
        pending: dict[int, int] = {}
        done: set[int] = set()
        while len(pending) + len(done) < len(tps):
            got = await probe.getmany(timeout_ms=200, max_records=len(tps))
            for tp, msgs in got.items():
                if msgs and tp.partition not in pending:
                    pending[tp.partition] = int(msgs[0].offset)
                    probe.pause(tp)
            for p, tp in tps.items():
                if p not in pending and p not in done and await read_to_end(probe, tp):
                    done.add(p)
        return dict(sorted(pending.items()))

    async def _fetch_loop(self, queue: asyncio.Queue) -> None:
        """The fetcher: ``getmany`` → :func:`parse_fetched` → queue (blocks while the queue is full)."""
        from aiokafka.errors import KafkaError

        o = self.opts
        while not self.stopping.is_set():
            try:
                batch = await self.consumer.getmany(timeout_ms=o.poll_ms, max_records=o.batch_max_records)
            except KafkaError as e:
                log.warning("fetch failed; retrying", extra={"error": str(e)})
                self.metrics.set_ready(f"outage: Kafka fetch failed ({type(e).__name__})")
                await asyncio.sleep(1.0)
                continue
            # no await since getmany drained its buffers: these records follow the positions of this generation
            gen = self.generation
            if self._failures == 0:
                self.metrics.set_ready()
            await self.metrics.export_lag(self.consumer, self.source_topic)  # the records keep gen, taken above
            if not any(batch.values()):
                if self.align is not None:
                    self._align([])  # idle partitions leave the frontier: the paused ones may resume
                continue
            self._last_input = time.monotonic()
            self._waiting_logged = False
            if self.coordinator:
                await queue.put(Fetched(gen, decode_fetched(batch, self.source_topic),
                                        sum(len(v) for v in batch.values())))
                continue
            chunks = [parse_fetched(chunk, self.source_topic) for chunk in split_runs(batch, o.batch_max_records)]
            if self.align is not None:
                self._align(chunks)
            for parts in chunks:  # lean runs: getmany's max_records counted runs, split_runs cut them back
                await queue.put(Fetched(gen, parts, sum(part.offsets.size for part in parts)))

    def _align(self, chunks: list[list[FetchedPartition]]) -> None:
        """Watermark alignment (``alignment.py``): note the fetched event times, pause/resume partitions."""
        from aiokafka import TopicPartition

        now = time.monotonic()
        for parts in chunks:
            for part in parts:
                self.align.observe(part.partition, part.parsed.ts, now)
        pause, resume = self.align.decide(now)
        assigned = {tp.partition for tp in self.consumer.assignment() if tp.topic == self.source_topic}
        if pause := [TopicPartition(self.source_topic, p) for p in pause if p in assigned]:
            self.consumer.pause(*pause)
        if resume := [TopicPartition(self.source_topic, p) for p in resume if p in assigned]:
            self.consumer.resume(*resume)
            self._last_input = now  # resumed input is coming: restart the drain-idle clock
        self._pin()
        self.metrics.paused_partitions.set(len(self.align.paused))

    def _pin(self) -> None:
        """Paused partitions keep holding the watermark: ``idle_timeout`` must not release them (alignment.py)."""
        if self.stage is not None:
            self.stage.wm.pinned = frozenset(self.align.paused) if self.align is not None else frozenset()

    def _unpause_all(self) -> None:
        if self.align is not None:
            self.align.reset()
            if self.consumer is not None and self.consumer.paused():
                self.consumer.resume(*self.consumer.paused())
            self._pin()
            self.metrics.paused_partitions.set(0)

    async def _next_items(self, queue: asyncio.Queue) -> list[Fetched]:
        """The next fetched batch (waits up to ``poll_ms``) and those queued behind it, up to ``step_max_records``
        records in all (a batch that does not fit is carried over to the next step)."""
        if self._carry is not None:
            first, self._carry = self._carry, None
        else:
            try:
                first = await asyncio.wait_for(queue.get(), self.opts.poll_ms / 1000)
            except asyncio.TimeoutError:
                return []
        items, n = [first], first.records
        limit = max(self.opts.step_max_records, self.opts.batch_max_records)
        while not queue.empty():
            f = queue.get_nowait()
            if n + f.records > limit:
                self._carry = f
                break
            items.append(f)
            n += f.records
        return items

    def _dirty(self) -> bool:
        return self._batches_since > 0

    async def _safe(self, fn, *args) -> bool:
        """Run one protocol step; on a Redis/Kafka failure restore the last checkpoint (nothing uncharged leaves).
        Returns whether the step completed (False: it failed and the last checkpoint was restored, or fenced)."""
        from aiokafka.errors import KafkaError

        try:
            try:
                await fn(*args)
                if self._failures:
                    self.metrics.set_ready()  # the counter itself is reset only once a checkpoint is published
                return True
            except DefaultBudgetMissing as e:  # no retry can help until an operator restores it: never a halt
                log.error(f"{e}; exiting", extra={"worker": self.worker_id})
                self.engine = self.stage = None
                self.exit_code = EXIT_DEFAULT_BUDGET_MISSING
                self.stopping.set()
                return False
            except (StoreError, KafkaError, ConnectionError, asyncio.TimeoutError) as e:
                log.error("step failed; restoring the last checkpoint", extra={"error": str(e),
                                                                               "error_type": type(e).__name__})
                self.metrics.set_ready(f"outage: {type(e).__name__}")
                self.metrics.recoveries.inc()
                await self._recover()
                # a failure that persists after the restore (e.g. a server-side error on one key, Redis out of
                # memory) must not spin: back off between failed steps, 0.2 s doubling to 10 s (a SIGTERM ends the
                # wait). The count is reset only by a checkpoint written and published (_checkpoint_and_publish):
                # steps that only read Redis succeed while it refuses writes, and used to reset it every time
                self._failures += 1
                delay = min(0.2 * 2 ** (self._failures - 1), 10.0)
                try:
                    await asyncio.wait_for(self.stopping.wait(), delay)
                except asyncio.TimeoutError:
                    pass
        except Fenced as e:
            log.error("fenced: another worker owns the checkpoint; exiting", extra={"error": str(e)})
            self.engine = self.stage = None
            self.exit_code = 3
            self.stopping.set()
        except StoreLost as e:  # the checkpoint or its fence is gone: flushed or restarted empty, not another owner
            log.error("the budget store lost its state (its checkpoint is gone: flushed, or restarted without "
                      "persistence); exiting — the restart refuses to start over unless --allow-empty-store "
                      "(see OPERATIONS, 'Redis comes back empty')", extra={"worker": self.worker_id,
                                                                          "error": str(e)})
            self.engine = self.stage = None
            self.exit_code = EXIT_STORE_LOST
            self.stopping.set()
        except ReleaseConflict as e:  # no retry can help: another deployment released these windows
            self._refuse_conflict(e)
        return False

    def _refuse_conflict(self, e: ReleaseConflict) -> None:
        log.error(f"the release log already holds a release for {e.key}, written by another deployment with the "
                  "same query ids on this store (this deployment's checkpoint never closed that window). Nothing "
                  "was charged or published for it. Give this deployment its own query ids (each deployment on a "
                  "shared store needs distinct ones), or restore the checkpoint that goes with those releases",
                  extra={"worker": self.worker_id, "group": self.group, "topic": self.source_topic, "key": e.key})
        self.engine = self.stage = None
        self.exit_code = EXIT_RELEASE_CONFLICT
        self.stopping.set()

    # ---- ownership -----------------------------------------------------------------------------------------
    async def on_assigned(self, assigned) -> None:
        parts = sorted(tp.partition for tp in assigned if tp.topic == self.source_topic)
        async with self.lock:
            self.generation += 1
            self.owned = set(parts)
            self._last_input = time.monotonic()
            if not parts:
                self.engine = self.stage = None
                self.metrics.owner.set(0)
                log.info("standby (no partitions assigned)", extra={"worker": self.worker_id})
                return
            await self._recover(first=True)

    async def on_revoked(self, revoked) -> None:
        async with self.lock:
            self.generation += 1
            self._unpause_all()
            if self.engine is not None:
                await self._safe(self._final_checkpoint)
            self.engine = self.stage = None
            self.owned = set()
            self.metrics.owner.set(0)

    async def _recover(self, first: bool = False) -> None:
        """Claim and restore the checkpoint, re-publish its pending records, seek to its offsets (with backoff)."""
        delay = 0.2
        while True:
            try:
                # the release parameters first, without claiming: a worker started with other ones must not fence
                # the owner that runs with the right ones (the restore checks them again, from the state itself)
                info = self.ckpt.stored_info()
                current = release_parameters(self.engine_config(), self.cfg.build_queries())
                before = set(info.get("removed_queries", []))
                check_unchanged(info.get("parameters"), current, before)
                gone = removed_queries(info.get("parameters"), current)
                if gone:
                    log.warning(f"queries {gone} are in the checkpoint but not configured: they are removed from "
                                "this deployment for good (their state is dropped at the next checkpoint, and "
                                "putting one back will be refused)", extra={"worker": self.worker_id})
                self._removed = sorted(before | set(gone))
                ck = self.ckpt.claim(self.worker_id)
                committed = {} if self.opts.allow_empty_store else await self._committed_elsewhere()
                if ck.state is None and committed:
                    self._refuse_empty_store()
                    return
                self._restore(ck)
                if committed and (behind := self._checkpoint_behind(ck, committed)):
                    self._refuse_rolled_back_store(behind)
                    return
                if ck.pending:
                    await self._publish(ck.pending)
                    self.faults.hit("after_republish")
                    self.ckpt.ack(ck.version)
                    log.info("re-published pending records", extra={"records": len(ck.pending),
                                                                    "version": ck.version})
                self._seek_all(await self._positions(ck))
                break
            except Fenced:
                raise
            except ParametersChanged as e:  # no retry can help: the configuration must change back
                self._refuse_parameters(e)
                return
            except Exception as e:  # Redis down, Kafka down: back off and retry
                if self.stopping.is_set():  # SIGTERM during an outage: nothing to save, nothing was published
                    log.error("stopping while the checkpoint cannot be restored; nothing is lost: the next start "
                              "restores it", extra={"worker": self.worker_id, "error": str(e)})
                    self.engine = self.stage = None
                    self.exit_code = EXIT_STOPPED_IN_OUTAGE
                    return
                log.warning("restore failed; retrying", extra={"error": str(e), "retry_in": delay})
                self.metrics.set_ready(f"outage: restore failed ({type(e).__name__})")
                try:  # a SIGTERM ends the wait
                    await asyncio.wait_for(self.stopping.wait(), delay)
                except asyncio.TimeoutError:
                    pass
                delay = min(delay * 2, 10.0)
        self.metrics.owner.set(1)
        if self._failures == 0:
            self.metrics.set_ready()
        log.info("owner: restored checkpoint", extra={"worker": self.worker_id, "version": ck.version,
                                                      "partitions": sorted(self.owned), "offsets": ck.offsets,
                                                      "last_closed": self.engine.windows.last_closed})

    async def _committed_elsewhere(self) -> dict[int, int]:
        """Offsets this group has committed in Kafka on the owned partitions (committed only after a checkpoint)."""
        from aiokafka import TopicPartition

        out = {}
        for p in sorted(self.owned):
            off = await self.consumer.committed(TopicPartition(self.source_topic, p))
            if off is not None and off > 0:
                out[p] = int(off)
        return out

    def _refuse_empty_store(self) -> None:
        log.error("the budget store holds no checkpoint, but Kafka holds offsets this group committed after "
                  "checkpointing: the store lost its state (restarted without persistence? flushed?). Starting over "
                  "would re-release every window with fresh noise and reset every budget. Restore the store from "
                  "a backup, or, if starting over is meant, run with --allow-empty-store (or a new group id)",
                  extra={"worker": self.worker_id, "group": self.group, "topic": self.source_topic})
        self.engine = self.stage = None
        self.exit_code = 4
        self.stopping.set()

    def _checkpoint_behind(self, ck: Checkpoint, committed: dict[int, int]) -> dict[int, tuple[int, int]]:
        """Partitions whose offset committed in Kafka is past the restored checkpoint's: {p: (checkpoint, committed)}.
        The worker commits only the offsets of a checkpoint it wrote, after its records were published
        (:meth:`_checkpoint_and_publish`), so a checkpoint behind them is one the store lost after acknowledging it
        (AOF ``everysec``, a failover to a lagging replica, a restored backup). Its release log rolled back with it,
        so nothing else would notice; resuming would publish the windows after it again with fresh noise (the noise
        key changes at every checkpoint): the averaging attack contract §3 forbids (store review of 2026-11-23, F1).
        Only partitions the checkpoint has an offset for are judged: one without (never read since an
        ``--allow-empty-store`` start, or a coordinator's internal partitions after an ``all`` period, whose
        checkpoints carry no internal offsets) says nothing about a loss, and the worker reads it as before."""
        known = self.src_offsets if self.coordinator else ck.offsets
        return {p: (int(known[p]), c) for p, c in committed.items() if p in known and c > int(known[p])}

    def _refuse_rolled_back_store(self, behind: dict[int, tuple[int, int]]) -> None:
        log.error("the budget store's checkpoint is behind the offsets this group committed to Kafka after "
                  "checkpointing (partition: (checkpoint, committed) %s): the store lost acknowledged writes "
                  "(Redis with appendfsync everysec after a crash, a failover to a lagging replica, an old backup). "
                  "Resuming would publish windows that were already released again, with fresh noise, and charge "
                  "their users again. Restore the store to its latest state, or, if releasing those windows again "
                  "is meant, run with --allow-empty-store (or a new group id)", behind,
                  extra={"worker": self.worker_id, "group": self.group, "topic": self.source_topic})
        self.engine = self.stage = None
        self.exit_code = 4
        self.stopping.set()

    def _refuse_parameters(self, e: ParametersChanged) -> None:
        log.error(str(e), extra={"worker": self.worker_id, "group": self.group, "topic": self.source_topic})
        self.engine = self.stage = None
        self.exit_code = EXIT_PARAMETERS_CHANGED
        self.stopping.set()

    def engine_config(self):
        """The engine's configuration, its admission scope naming this stream as the checkpoint key does (group and
        input topic; the coordinator shares the `all` worker's): another deployment on the same store, with other
        data under the same window numbers, must not find its admits answered as replays of ours (see
        :func:`streamdp.engine.engine.admission_scope`)."""
        ec = self.cfg.engine_config()
        return replace(ec, scope=f"{ec.scope}:{self.opts.group_id}:{self.opts.input_topic}")

    def _restore(self, ck: Checkpoint) -> None:
        self.dstore.discard()
        engine = ReleaseEngine(self.engine_config(), self.cfg.build_queries(), self.dstore)
        stage = CanonicalStage(engine)
        if ck.state is not None and "engine" not in ck.state and "coordinator" in ck.state:
            raise ParametersChanged(
                f"checkpoint {self.ckpt.key} was written by the staged split's coordinator ([kafka] stage_a = "
                "\"admit\"): this worker cannot take over its state; run the deployment with stage_a = \"admit\" "
                "again (a deployment cannot switch between the split and the other shapes)")
        if ck.state is not None:
            eng_state = ck.state["engine"]
            if isinstance(eng_state, (bytes, bytearray)):  # checkpoint format 1: the engine snapshot's bytes
                engine.restore(eng_state)
            else:
                engine.restore_tree(eng_state)
            stage.load_state(ck.state.get("stage") or {})  # a checkpoint of before 2026-12-07 (its events move in)
            engine.rng.bit_generator.state = ck.state["rng"]
        # every partition of the input topic holds the watermark (a partition that has not delivered yet at −∞, until
        # idle_timeout): a window closes only when all of them passed it, whoever owns them
        engine.register_partitions(self.input_partitions | (set() if self.coordinator else self.owned))
        self.engine, self.stage = engine, stage
        self.offsets = {p: o for p, o in ck.offsets.items()}
        src = (ck.state or {}).get("source") or {}
        self.src_offsets = {int(p): int(o) for p, o in src.items()}
        self._batches_since = 0
        self._last_ckpt = time.monotonic()
        self.metrics.baseline(engine.counters)
        self._state_gauges()

    async def _positions(self, ck: Checkpoint) -> dict:
        """Where to resume each owned partition: its checkpointed offset, else the beginning of the partition."""
        from aiokafka import TopicPartition

        tps = {p: TopicPartition(self.source_topic, p) for p in sorted(self.owned)}
        known = self.src_offsets if self.coordinator else ck.offsets
        pos = {tps[p]: known[p] for p in tps if p in known}
        missing = [tp for p, tp in tps.items() if p not in known]
        if missing:
            pos.update(await self.consumer.beginning_offsets(missing))
        return pos

    def _seek_all(self, positions: dict) -> None:
        """Seek and start a new generation in one synchronous block: a batch stamped with the new generation was
        fetched after every seek; batches of older generations (queued, or returned by an overlapping
        ``getmany``) are dropped by the processor and fetched again from these positions."""
        for tp, off in positions.items():
            self.consumer.seek(tp, int(off))
        self._unpause_all()  # alignment restarts from the new positions
        self.generation += 1
        self._last_input = time.monotonic()  # the input is read again from here: restart the drain-idle clock

    # ---- one batch -----------------------------------------------------------------------------------------
    async def _step(self, items: list[Fetched]) -> None:
        eng = self.engine
        t_batch = time.monotonic()
        dead_futs = []
        held = self.input_partitions if self.coordinator else self.owned
        for f in items:
            for part in f.parts:
                if part.src is not None:
                    self.src_offsets[part.src[0]] = part.src[1]
                if part.lo is not None and part.stream != self.stream:  # another deployment's (forward.refusal)
                    self._refuse_forward(part)
                    continue
                p = part.partition
                if p not in held:
                    continue
                start = self.offsets.get(p, -1)
                if part.lo is not None:  # a forward record: exactly-once by input offsets (forward.accept)
                    k = accept_forward(part.lo, part.next - 1, part.offsets, self.offsets.get(p))
                    if k is None:
                        why = "seen" if part.next <= start else "gap"
                        self.metrics.forward_dropped.labels(why=why).inc()
                        if why == "seen":
                            log.info("forward record already consumed (a re-send) skipped",
                                     extra={"partition": p, "lo": part.lo, "next": part.next})
                        else:
                            log.warning("forward record beyond the expected offset dropped (its re-send follows)",
                                        extra={"partition": p, "expected": start, "lo": part.lo})
                        continue
                    await self._hold(part, k, dead_futs)  # no dead letters in it: stage A sent them
                    self.offsets[p] = part.next
                    continue
                k = int(np.searchsorted(part.offsets, start))  # a batch fetched before a seek may repeat offsets
                if k == part.offsets.size:
                    continue
                if start >= 0 and part.offsets[k] > start:
                    log.warning("offset gap", extra={"partition": p, "expected": start, "got": int(part.offsets[k])})
                await self._hold(part, k, dead_futs)
                self.offsets[p] = int(part.offsets[-1]) + 1
        if dead_futs:
            await asyncio.gather(*dead_futs)
        self.faults.hit("after_stage")
        summaries = await self._release()
        self._batches_since += len(items)
        o = self.opts
        if (summaries or self._batches_since >= o.checkpoint_batches
                or time.monotonic() - self._last_ckpt >= o.checkpoint_seconds):
            await self._checkpoint_and_publish(summaries, t_batch)
        # a long advance of the watermark (a far-future event, a backlog after an outage) closes its windows in
        # steps of CLOSE_STEP_WINDOWS, each checkpointed and published before the next: memory stays bounded and a
        # restart resumes after the last step (a SIGTERM meanwhile stops between two steps)
        while summaries and not self.stopping.is_set() and self.stage.pending():
            summaries = await self._release()
            await self._checkpoint_and_publish(summaries, t_batch)
        self.metrics.update(eng.counters)
        self._state_gauges()

    def _refuse_forward(self, part: FetchedPartition) -> None:
        """A forward record not of this deployment's stream: never ingested, no input offset moves (forward.py).
        Counted per record; logged once per foreign stream."""
        why = refusal(part.stream, self.stream)
        self.metrics.forward_dropped.labels(why=why).inc()
        if (why, part.stream) in self._refused:
            return
        self._refused.add((why, part.stream))
        extra = {"worker": self.worker_id, "internal_topic": self.source_topic, "partition": part.partition,
                 "lo": part.lo, "group": self.opts.group_id, "topic": self.opts.input_topic}
        if why == "foreign":
            extra.update(foreign_group=part.stream.group, foreign_input_topic=part.stream.topic)
            log.warning("forward records of ANOTHER deployment (group %r, input topic %r) on internal topic %r are "
                        "dropped: two staged deployments share this internal topic. Give each deployment its own "
                        "[kafka] internal_prefix; until then this coordinator reads and drops the other's records "
                        "(counted in streamdp_forward_dropped{why=\"foreign\"}, not logged again)",
                        part.stream.group, part.stream.topic, self.source_topic, extra=extra)
        else:
            log.error("forward records of format version 1 (they name no deployment: written by an ingest worker of "
                      "an older streamdp) on internal topic %r are dropped: they cannot be attributed to this "
                      "deployment. Upgrade every ingest worker; the input offsets they covered are then a gap this "
                      "coordinator waits at: rewind the consumer group %r on input topic %r to at most this "
                      "coordinator's position so that stage A re-sends them (counted in "
                      "streamdp_forward_dropped{why=\"unattributed\"}, not logged again)",
                      self.source_topic, f"{self.opts.group_id}.ingest", self.opts.input_topic, extra=extra)

    def _state_gauges(self) -> None:
        """The gauges that describe the current state: after each step, and after a restore (else a restarted
        worker reads as window 0 until input arrives)."""
        stage = self.stage
        self.metrics.held_events.set(stage.held_events)
        self.metrics.last_window.set(self.engine.windows.last_closed)
        self.metrics.checkpoint_bytes.set(self.ckpt.last_bytes)
        wm = stage.wm.watermark_at()
        if np.isfinite(wm):
            self.metrics.watermark.set(wm)

    async def _hold(self, part: FetchedPartition, k: int, dead_futs: list) -> None:
        """Records ``k…`` of ``part``: dead letters out, valid events into the canonical stage (whose rejections —
        late, before the origin, too far in the future — are dead-lettered too)."""
        p, eng = part.partition, self.engine
        parsed, dead = part.parsed, part.dead
        if k:
            parsed = take_rows(parsed, np.flatnonzero(parsed.source_rows >= k))
            dead = [(i, d) for i, d in dead if i >= k]
        self.metrics.events_in.inc(part.offsets.size - k)
        for i, d in dead:
            eng.counters.dead(d.reason)
            dead_futs.append(await self._dead_letter(d.payload, d.reason, d.detail, p, int(part.offsets[i])))
        W, max_future = eng.windows, eng.config.max_future_seconds
        for row, reason in self.stage.add(p, parsed):
            src = int(parsed.source_rows[row])
            detail = rejection_detail(reason, float(parsed.ts[row]), W, max_future)
            dead_futs.append(await self._dead_letter(part.payloads[src], reason, detail, p, int(part.offsets[src])))

    async def _release(self, flush: bool = False) -> list[WindowSummary]:
        """Close the next due windows, at most CLOSE_STEP_WINDOWS of them (``flush``: the open ones too, as
        ``end_of_input``), in a worker thread: the admit/settle calls block on Redis."""
        stage = self.stage
        if not stage.pending(None, flush):
            return []
        return await self._blocking(stage.release, None, flush, CLOSE_STEP_WINDOWS)

    async def _dead_letter(self, payload: bytes, reason: str, detail: str, partition: int, offset: int):
        # logs carry the reason and position only, never the payload
        log.debug("dead letter", extra={"reason": reason, "partition": partition, "offset": offset})
        v = dead_letter_value(payload, reason, detail, self.opts.input_topic, partition, offset)
        return await self.producer.send(self.opts.dead_letter_topic, value=v, key=f"{partition}/{offset}".encode())

    async def _drain(self) -> None:
        """The end of a bounded input: close what the watermark has passed; with ``close_open_windows`` also the
        windows it has not (their records say ``closed_by: end_of_input``) — without it they stay open in the
        checkpoint, for a later run to complete. In bounded steps, each checkpointed and published."""
        flush = self.opts.close_open_windows
        while True:
            summaries = await self._release(flush=flush)
            await self._checkpoint_and_publish(summaries, time.monotonic())
            if not summaries or self.stopping.is_set() or not self.stage.pending(None, flush):
                break
        left = self.stage.held
        if left and not flush:
            log.info("drained: windows the watermark has not passed are left open (--close-open-windows closes "
                     "them, marked end_of_input)", extra={"open_windows": sorted(left)[:20],
                                                          "held_events": self.stage.held_events})

    async def _final_checkpoint(self) -> None:
        await self._checkpoint_and_publish([], time.monotonic())

    async def _checkpoint_and_publish(self, summaries: list[WindowSummary], t_due: float) -> None:
        eng = self.engine
        records = [PendingRecord(self.topic_of[r.query], r.key, r.to_bytes()) for s in summaries for r in s.records]
        info = {"worker": self.worker_id, "last_closed": eng.windows.last_closed,
                "events_in": eng.counters.events_in, "held_events": self.stage.held_events,
                "records": len(records), "parameters": canonical(eng.parameters),
                "removed_queries": self._removed}
        t0 = time.perf_counter()
        version = await self._blocking(self._write_checkpoint, records, info)
        self.metrics.checkpoint_seconds.observe(time.perf_counter() - t0)
        self.metrics.checkpoints.inc()
        self.metrics.checkpoint_bytes.set(self.ckpt.last_bytes)
        self._batches_since = 0
        self._last_ckpt = time.monotonic()
        self.faults.hit("after_checkpoint")
        if records:
            await self._publish(records)
            self.faults.hit("after_publish")
            self.ckpt.ack(version)
        self._failures = 0  # written to the store and published: the backoff of failed steps starts over
        await self._commit_offsets()
        done = time.monotonic()
        for s in summaries:
            self.closed_windows += 1
            self.metrics.close_latency.observe(done - t_due)
            self.metrics.close_compute.observe(s.seconds)
            for r in s.records:
                self.metrics.release(r)
            log.info("window released", extra={"seq": s.seq, "epoch": s.epoch, "t": s.t, "events": s.events,
                                               "users": s.users, "admitted": s.admitted, "halted": s.refused,
                                               "records": len(s.records), "close_ms": round(s.seconds * 1e3, 2)})
        if summaries:
            self.metrics.last_window.set(summaries[-1].seq)

    async def _blocking(self, fn, *args):
        """``fn(*args)`` in a worker thread (``offload``), so that the event loop goes on fetching meanwhile."""
        if self.opts.offload:
            return await asyncio.to_thread(fn, *args)
        return fn(*args)

    def _write_checkpoint(self, records: list[PendingRecord], info: dict) -> int:
        """Snapshot + encode + the atomic Lua call (a worker thread: the processor awaits it, nothing else touches
        the engine meanwhile)."""
        eng = self.engine
        releases, ledger = self.dstore.take()
        if not self.test_mode:
            eng.rng = secure_generator()  # a fresh key per checkpoint interval (see checkpoint.py)
        # the engine as a tree: its append logs (names, bounder commit logs) are appended to, not rewritten
        # the engine holds the events of open windows and the per-partition watermarks (checkpoints of before
        # 2026-12-07 also have a "stage": CanonicalStage.load_state)
        state = {"engine": eng.state_tree(), "rng": eng.rng.bit_generator.state}
        if self.coordinator:
            state["source"] = {str(p): o for p, o in self.src_offsets.items()}
        return self.ckpt.write(state, self.offsets, records, releases, ledger, info)

    async def _publish(self, records: list[PendingRecord]) -> None:
        if not records:
            return
        # test mode is marked on the record (test_mode: true) and, for readers that look at headers only, here
        headers = TEST_MODE_HEADERS if self.test_mode else None
        if "mid_publish" in self.faults.points:  # test-only: a fault with exactly the first record published
            first = await self.producer.send(records[0].topic, value=records[0].value, key=records[0].key.encode(),
                                             partition=OUTPUT_PARTITION, headers=headers)
            await first
            self.faults.hit("mid_publish")
            records = records[1:]
        # every record of a query on partition 0 of its topic, in window order (the producer keeps the order of
        # sends to one partition: one request in flight per connection — see docs/subscribers.md)
        futs = [await self.producer.send(r.topic, value=r.value, key=r.key.encode(), partition=OUTPUT_PARTITION, headers=headers)
                for r in records]
        if futs:
            await asyncio.gather(*futs)

    async def _commit_offsets(self) -> None:
        from aiokafka import TopicPartition
        from aiokafka.errors import KafkaError
        from aiokafka.structs import OffsetAndMetadata

        done = self.src_offsets if self.coordinator else self.offsets
        offs = {TopicPartition(self.source_topic, p): OffsetAndMetadata(o, "")
                for p, o in done.items() if p in self.owned}
        if not offs:
            return
        try:
            # bounded: aiokafka retries a commit for as long as the group coordinator answers with a retriable
            # error (an input topic deleted under the worker: for ever), and a SIGTERM must not wait for it
            await asyncio.wait_for(self.consumer.commit(offs), COMMIT_TIMEOUT)
            self._commit_failed = False
        except (KafkaError, asyncio.TimeoutError) as e:  # lag monitoring only: the checkpoint is the truth
            self._commit_failed = True
            self._said.warn("commit", "offset commit failed (lag monitoring only: the checkpoint holds the "
                            "offsets)", error=str(e) or type(e).__name__)


def _listener(worker: KafkaWorker):
    from aiokafka.abc import ConsumerRebalanceListener

    class Listener(ConsumerRebalanceListener):
        """Rebalance → hand-over: checkpoint on revoke, claim + restore on assign."""

        async def on_partitions_revoked(self, revoked) -> None:
            await worker.on_revoked(revoked)

        async def on_partitions_assigned(self, assigned) -> None:
            await worker.on_assigned(assigned)

    return Listener()
