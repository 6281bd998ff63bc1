"""The Kafka worker: consume → parse → canonical stage → release engine → checkpoint → publish (DESIGN.md §4–6).

The Kafka twin of :class:`streamdp.engine.pipeline.EmbeddedPipeline`. One batch (aiokafka ``getmany``):

1. parse every partition's payloads (:func:`parse_batch`); bad events → dead-letter topic
   ``{"reason", "detail", "payload", "partition", "offset", …}`` keyed ``<partition>/<offset>``;
2. hold the parsed events in the :class:`~streamdp.adapters.kafka.ordering.CanonicalStage` (watermark over the
   Kafka partitions) and close every due window through the engine (one atomic admit per window);
3. if windows closed (or every N batches / T seconds): ONE atomic Redis checkpoint (state + offsets + release log +
   ledger + pending records, :mod:`~streamdp.adapters.kafka.checkpoint`); then publish each record to
   ``<output_prefix><query id>`` keyed by ``query/epoch/window``; then acknowledge; then commit Kafka offsets (for
   lag monitoring only).

Redis or Kafka failures never publish anything uncharged: the worker drops its in-memory state, restores the last
checkpoint (retrying with backoff until Redis answers), re-publishes the pending records and seeks back to the
checkpointed offsets. SIGTERM finishes the current batch, checkpoints and exits 0.

Scale-out: workers of one consumer group use :class:`~streamdp.adapters.kafka.assignor.SingleOwnerAssignor` —
one active owner of all input partitions, the others standby; hand-over through the checkpoint.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import signal
import socket
import time
from dataclasses import dataclass

import numpy as np
import orjson

from streamdp.adapters.kafka.assignor import SingleOwnerAssignor
from streamdp.adapters.kafka.checkpoint import (Checkpoint, DeferredReleaseLog, Fenced, PendingRecord,
                                                RedisCheckpoint)
from streamdp.adapters.kafka.faults import FaultInjector
from streamdp.adapters.kafka.ordering import CanonicalStage
from streamdp.adapters.kafka.topics import ensure_topics, output_topic
from streamdp.adapters.metrics import WorkerMetrics
from streamdp.engine.engine import ReleaseEngine, WindowSummary
from streamdp.filter.store import StoreError
from streamdp.input.events import MAX_PAYLOAD_BYTES, parse_batch
from streamdp.noise.generator import secure_generator

log = logging.getLogger("streamdp.kafka")

DEAD_LETTER_VERSION = 1
MAX_DEAD_PAYLOAD = MAX_PAYLOAD_BYTES  # dead letters carry at most this many bytes of the payload


@dataclass
class WorkerOptions:
    input_topic: str = "streamdp.events"
    output_prefix: str = "streamdp.out."
    dead_letter_topic: str = "streamdp.dead"
    group_id: str = "streamdp"
    partitions: int = 4  # of the topics created at start
    batch_max_records: int = 5000
    poll_ms: int = 200
    checkpoint_seconds: float = 5.0  # periodic checkpoint even without window closes
    checkpoint_batches: int = 100
    drain_idle: float | None = None  # exit after this long without input, closing every window (bounded inputs)
    session_timeout_ms: int = 10000
    heartbeat_interval_ms: int = 1000
    max_request_bytes: int = 16 * 1024 * 1024  # releases of many items can be large
    create_topics: bool = True
    use_group: bool = True  # False: "standalone" — own every partition without group coordination (ONE worker)

    @classmethod
    def from_config(cls, kafka: dict, **over) -> "WorkerOptions":
        o = cls(input_topic=kafka["input_topic"], output_prefix=kafka["output_prefix"],
                dead_letter_topic=kafka["dead_letter_topic"], group_id=kafka["group_id"],
                partitions=kafka["partitions"], batch_max_records=kafka["batch_max_records"])
        for k, v in over.items():
            if v is not None:
                setattr(o, k, v)
        return o


def dead_letter_value(payload: bytes, reason: str, detail: str, topic: str, partition: int, offset: int) -> bytes:
    """The dead-letter record (schema ``streamdp/schemas/dead_letter.schema.json``)."""
    raw = bytes(payload)
    truncated = len(raw) > MAX_DEAD_PAYLOAD
    raw = raw[:MAX_DEAD_PAYLOAD]
    try:
        text, enc = raw.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        text, enc = base64.b64encode(raw).decode("ascii"), "base64"
    return orjson.dumps({"schema_version": DEAD_LETTER_VERSION, "reason": reason, "detail": detail,
                         "payload": text, "payload_encoding": enc, "truncated": truncated,
                         "topic": topic, "partition": partition, "offset": offset})


class KafkaWorker:
    def __init__(self, cfg, store, client_kw: dict, opts: WorkerOptions, *, metrics: WorkerMetrics | None = None,
                 worker_id: str | None = None) -> None:
        self.cfg = cfg
        self.store = store
        self.client_kw = client_kw
        self.opts = opts
        self.metrics = metrics or WorkerMetrics()
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        self.ckpt = RedisCheckpoint(store, opts.group_id, opts.input_topic)
        self.faults = FaultInjector.from_env()
        self.dstore = DeferredReleaseLog(store, after_admit=lambda: self.faults.hit("after_admit"))
        self.test_mode = cfg.service.get("unsafe_test_seed") is not None
        self.topic_of = {t["id"]: output_topic(cfg.kafka | {"output_prefix": opts.output_prefix}, t["id"])
                         for t in cfg.query_tables}
        self.engine: ReleaseEngine | None = None
        self.stage: CanonicalStage | None = None
        self.offsets: dict[int, int] = {}
        self.owned: set[int] = set()
        self.generation = 0  # bumped at every (re)assignment and recovery (diagnostics)
        self.lock = asyncio.Lock()
        self.stopping = asyncio.Event()
        self.exit_code = 0
        self.consumer = None
        self.producer = None
        self._assignor = SingleOwnerAssignor()
        self._batches_since = 0
        self._last_ckpt = time.monotonic()
        self._last_input = time.monotonic()
        self.closed_windows = 0

    # ---- lifecycle -----------------------------------------------------------------------------------------
    async def start(self) -> None:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

        o = self.opts
        if o.create_topics:
            await ensure_topics(self.client_kw, [o.input_topic, *self.topic_of.values(), o.dead_letter_topic],
                                o.partitions)
        self.producer = AIOKafkaProducer(**self.client_kw, acks="all", linger_ms=5, enable_idempotence=False,
                                         max_request_size=o.max_request_bytes)
        await self.producer.start()
        self.consumer = AIOKafkaConsumer(
            **self.client_kw, group_id=o.group_id, enable_auto_commit=False, auto_offset_reset="earliest",
            partition_assignment_strategy=(self._assignor,), session_timeout_ms=o.session_timeout_ms,
            heartbeat_interval_ms=o.heartbeat_interval_ms, max_poll_interval_ms=300000,
            fetch_max_bytes=64 * 1024 * 1024, max_partition_fetch_bytes=8 * 1024 * 1024)
        if o.use_group:
            self.consumer.subscribe([o.input_topic], listener=_listener(self))
            await self.consumer.start()
        else:
            from aiokafka import TopicPartition

            await self.consumer.start()
            tps = [TopicPartition(o.input_topic, p) for p in await self._topic_partitions()]
            self.consumer.assign(tps)
            await self.on_assigned(tps)
        log.info("worker started", extra={"worker": self.worker_id, "input_topic": o.input_topic,
                                          "group": o.group_id, "queries": list(self.topic_of),
                                          "test_mode": self.test_mode})

    async def _topic_partitions(self, timeout: float = 30.0) -> list[int]:
        t0 = time.monotonic()
        while True:
            parts = self.consumer.partitions_for_topic(self.opts.input_topic)
            if parts:
                return sorted(parts)
            if time.monotonic() - t0 > timeout:
                raise RuntimeError(f"input topic {self.opts.input_topic!r} has no partitions (does it exist?)")
            await self.consumer._client.force_metadata_update()
            await asyncio.sleep(0.2)

    async def stop(self) -> None:
        if self.consumer is not None:
            try:
                await self.consumer.stop()
            except Exception as e:  # pragma: no cover - best effort on shutdown
                log.warning("consumer stop failed", extra={"error": str(e)})
        if self.producer is not None:
            try:
                await self.producer.stop()
            except Exception as e:  # pragma: no cover
                log.warning("producer stop failed", extra={"error": str(e)})

    def request_stop(self) -> None:
        self.stopping.set()

    async def run(self) -> int:
        await self.start()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, self.request_stop)
            except (NotImplementedError, RuntimeError):  # pragma: no cover - not the main thread
                pass
        try:
            await self._loop()
            async with self.lock:
                if self.engine is not None and self.exit_code == 0:
                    await self._safe(self._final_checkpoint)
        finally:
            await self.stop()
            log.info("worker stopped", extra={"worker": self.worker_id, "exit_code": self.exit_code,
                                              "windows_closed": self.closed_windows})
        return self.exit_code

    async def _loop(self) -> None:
        from aiokafka.errors import KafkaError

        o = self.opts
        while not self.stopping.is_set():
            try:
                batch = await self.consumer.getmany(timeout_ms=o.poll_ms, max_records=o.batch_max_records)
            except KafkaError as e:
                log.warning("fetch failed; retrying", extra={"error": str(e)})
                await asyncio.sleep(1.0)
                continue
            n = sum(len(v) for v in batch.values())
            now = time.monotonic()
            if n:
                self._last_input = now
            async with self.lock:
                if self.engine is not None:
                    if n:
                        await self._safe(self._step, batch)
                    elif now - self._last_ckpt >= o.checkpoint_seconds and self._dirty():
                        await self._safe(self._checkpoint_and_publish, [], now)
            if (o.drain_idle is not None and self.engine is not None  # standbys wait for a hand-over
                    and time.monotonic() - self._last_input >= o.drain_idle):
                async with self.lock:
                    if self.engine is not None:
                        await self._safe(self._drain)
                log.info("input idle: drained", extra={"idle_seconds": o.drain_idle})
                break

    def _dirty(self) -> bool:
        return self._batches_since > 0

    async def _safe(self, fn, *args) -> None:
        """Run one protocol step; on a Redis/Kafka failure restore the last checkpoint (nothing uncharged leaves)."""
        from aiokafka.errors import KafkaError

        try:
            try:
                await fn(*args)
            except (StoreError, KafkaError, ConnectionError, asyncio.TimeoutError) as e:
                log.error("step failed; restoring the last checkpoint", extra={"error": str(e),
                                                                               "error_type": type(e).__name__})
                self.metrics.recoveries.inc()
                await self._recover()
        except Fenced as e:
            log.error("fenced: another worker owns the checkpoint; exiting", extra={"error": str(e)})
            self.engine = self.stage = None
            self.exit_code = 3
            self.stopping.set()

    # ---- ownership -----------------------------------------------------------------------------------------
    async def on_assigned(self, assigned) -> None:
        parts = sorted(tp.partition for tp in assigned if tp.topic == self.opts.input_topic)
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
                ck = self.ckpt.claim(self.worker_id)
                self._restore(ck)
                if ck.pending:
                    await self._publish(ck.pending)
                    self.ckpt.ack(ck.version)
                    log.info("re-published pending records", extra={"records": len(ck.pending),
                                                                    "version": ck.version})
                await self._seek(ck)
                break
            except Fenced:
                raise
            except Exception as e:  # Redis down, Kafka down: back off and retry
                if self.stopping.is_set():
                    raise
                log.warning("restore failed; retrying", extra={"error": str(e), "retry_in": delay})
                await asyncio.sleep(delay)
                delay = min(delay * 2, 10.0)
        self.generation += 1
        self.metrics.owner.set(1)
        log.info("owner: restored checkpoint", extra={"worker": self.worker_id, "version": ck.version,
                                                      "partitions": sorted(self.owned), "offsets": ck.offsets,
                                                      "last_closed": self.engine.windows.last_closed})

    def _restore(self, ck: Checkpoint) -> None:
        self.dstore.discard()
        engine = ReleaseEngine(self.cfg.engine_config(), self.cfg.build_queries(), self.dstore)
        stage = CanonicalStage(engine)
        if ck.state is not None:
            engine.restore(ck.state["engine"])
            stage.load_state(ck.state["stage"])
            engine.rng.bit_generator.state = ck.state["rng"]
        stage.wm.register(self.owned)
        self.engine, self.stage = engine, stage
        self.offsets = {p: o for p, o in ck.offsets.items()}
        self._batches_since = 0
        self._last_ckpt = time.monotonic()
        self.metrics.baseline(engine.counters)

    async def _seek(self, ck: Checkpoint) -> None:
        from aiokafka import TopicPartition

        for p in sorted(self.owned):
            tp = TopicPartition(self.opts.input_topic, p)
            if p in ck.offsets:
                self.consumer.seek(tp, ck.offsets[p])
            else:
                await self.consumer.seek_to_beginning(tp)

    # ---- one batch -----------------------------------------------------------------------------------------
    async def _step(self, batch) -> None:
        eng, stage = self.engine, self.stage
        t_batch = time.monotonic()
        dead_futs = []
        for tp in sorted(batch, key=lambda tp: tp.partition):
            p = tp.partition
            if tp.topic != self.opts.input_topic or p not in self.owned:
                continue
            start = self.offsets.get(p, -1)
            msgs = [m for m in batch[tp] if m.offset >= start]  # a batch fetched before a seek may repeat offsets
            if not msgs:
                continue
            if start >= 0 and msgs[0].offset > start:
                log.warning("offset gap", extra={"partition": p, "expected": start, "got": msgs[0].offset})
            payloads = [m.value if m.value is not None else b"" for m in msgs]
            self.metrics.events_in.inc(len(msgs))
            parsed, dead = parse_batch(payloads)
            if dead:
                mask = np.ones(len(msgs), dtype=bool)
                mask[parsed.source_rows] = False
                for d, row in zip(dead, np.flatnonzero(mask).tolist()):
                    eng.counters.dead(d.reason)
                    dead_futs.append(await self._dead_letter(d.payload, d.reason, d.detail, p, msgs[row].offset))
            for row, reason in stage.add(p, parsed):
                src = int(parsed.source_rows[row])
                dead_futs.append(await self._dead_letter(payloads[src], reason, "", p, msgs[src].offset))
            self.offsets[p] = msgs[-1].offset + 1
        if dead_futs:
            await asyncio.gather(*dead_futs)
        self.faults.hit("after_stage")
        summaries = stage.release()
        self._batches_since += 1
        o = self.opts
        if (summaries or self._batches_since >= o.checkpoint_batches
                or time.monotonic() - self._last_ckpt >= o.checkpoint_seconds):
            await self._checkpoint_and_publish(summaries, t_batch)
        self.metrics.update(eng.counters)
        self.metrics.held_events.set(stage.held_events)
        wm = stage.wm.watermark()
        if np.isfinite(wm):
            self.metrics.watermark.set(wm)

    async def _dead_letter(self, payload: bytes, reason: str, detail: str, partition: int, offset: int):
        # logs carry the reason and position only, never the payload
        log.debug("dead letter", extra={"reason": reason, "partition": partition, "offset": offset})
        v = dead_letter_value(payload, reason, detail, self.opts.input_topic, partition, offset)
        return await self.producer.send(self.opts.dead_letter_topic, value=v, key=f"{partition}/{offset}".encode())

    async def _drain(self) -> None:
        summaries = self.stage.release(flush=True)
        await self._checkpoint_and_publish(summaries, time.monotonic())

    async def _final_checkpoint(self) -> None:
        await self._checkpoint_and_publish([], time.monotonic())

    async def _checkpoint_and_publish(self, summaries: list[WindowSummary], t_due: float) -> None:
        eng = self.engine
        records = [PendingRecord(self.topic_of[r.query], r.key, r.to_bytes()) for s in summaries for r in s.records]
        releases, ledger = self.dstore.take()
        if not self.test_mode:
            eng.rng = secure_generator()  # a fresh key per checkpoint interval (see checkpoint.py)
        state = {"engine": eng.snapshot(), "stage": self.stage.state(), "rng": eng.rng.bit_generator.state}
        t0 = time.perf_counter()
        info = {"worker": self.worker_id, "last_closed": eng.windows.last_closed,
                "events_in": eng.counters.events_in, "held_events": self.stage.held_events,
                "records": len(records)}
        version = self.ckpt.write(state, self.offsets, records, releases, ledger, info)
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

    async def _publish(self, records: list[PendingRecord]) -> None:
        if not records:
            return
        first = await self.producer.send(records[0].topic, value=records[0].value, key=records[0].key.encode())
        await first
        self.faults.hit("mid_publish")
        futs = [await self.producer.send(r.topic, value=r.value, key=r.key.encode()) for r in records[1:]]
        if futs:
            await asyncio.gather(*futs)

    async def _commit_offsets(self) -> None:
        from aiokafka import TopicPartition
        from aiokafka.errors import KafkaError
        from aiokafka.structs import OffsetAndMetadata

        offs = {TopicPartition(self.opts.input_topic, p): OffsetAndMetadata(o, "")
                for p, o in self.offsets.items() if p in self.owned}
        if not offs:
            return
        try:
            await self.consumer.commit(offs)
        except KafkaError as e:  # lag monitoring only: the Redis checkpoint is the source of truth
            log.debug("offset commit skipped", extra={"error": str(e)})


def _listener(worker: KafkaWorker):
    from aiokafka.abc import ConsumerRebalanceListener

    class Listener(ConsumerRebalanceListener):
        """Rebalance → hand-over: checkpoint on revoke, claim + restore on assign."""

        async def on_partitions_revoked(self, revoked) -> None:
            await worker.on_revoked(revoked)

        async def on_partitions_assigned(self, assigned) -> None:
            await worker.on_assigned(assigned)

    return Listener()
