"""Stage A that admits (``[kafka] stage_a = "admit"``): ``streamdp run --role ingest`` of the staged split
(docs/DECISIONS.md, "Scale-out: stage A admits" and "… as processes").

Any number of these workers share the input topic's partitions in the consumer group ``<group_id>.ingest``. Each
assigned input partition p gets its own :class:`~streamdp.engine.stage_a_worker.StageA` (owning p only) whose
admits and settles go to the budget store under p's fence, and its own checkpoint in the store's Redis,
``<ns>:ckpt:<group_id>:<input topic>:p<p>`` (:class:`~streamdp.adapters.kafka.checkpoint.RedisCheckpoint`): p's
state (what ``StageA.partition_snapshot`` encodes, kept as a tree so that its append logs — p's user and item names,
its held events — are appended to in Redis, not rewritten: :func:`partition_tree`), p's next input offset and the
outcomes-topic offset to resume from. One loop:

1. the window outcomes of ``<internal_prefix>outcomes`` (one partition, read without a group from the least resume
   offset of the owned partitions) go to every owned StageA (``on_outcome``: settles, repeats ignored);
2. ``getmany`` of the input (lean fetch), parsed and validated as ``--role all`` does
   (:func:`~streamdp.adapters.kafka.worker.parse_fetched`); malformed events are dead-lettered keyed
   ``<partition>/<offset>``; the valid ones go to p's StageA (``ingest``), whose rejections (late, before the
   origin, too far in the future, a missing value) are dead-lettered too;
3. every message the StageAs polled (parts, markers) is produced to ``<internal_prefix>parts``, partition p,
   in order, with the stream's header (:mod:`~streamdp.adapters.kafka.split_stream`);
4. once the broker acknowledged them (and the dead letters), p's checkpoint is written — never before: a checkpoint
   covers only messages the coordinator can read. A crash before it replays p from the previous checkpoint: the
   admits are copies (same replay digests, no charge) and the parts re-sent are equal (the coordinator drops them).

Ownership: on assignment, p's checkpoint is claimed (its fence: a stale owner's admits, settles and checkpoints
are refused from then on, :class:`~streamdp.filter.store.Fenced`), adopted (or p starts fresh and is checkpointed at
once, so that a production Kb drawn from the OS is never drawn twice) and the consumer seeks to its offset; on
revoke, p is checkpointed and released. A failure of one partition's step (store unreachable, a reply lost) restores
that partition from its checkpoint; a Kafka failure restores every owned partition.

``--drain-idle``: once the input is idle that long and every owned partition is read to its end, each StageA is
flushed (its held windows go out, one after the other's outcome, then a final marker); the worker exits once every
owned partition sent its final marker and settled its last window. The split has no "open windows left for a later
run" (ingest after a flush is not supported yet): its drain is the end of the input.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from dataclasses import dataclass, replace

import numpy as np

from streamdp.adapters.kafka.checkpoint import RedisCheckpoint
from streamdp.adapters.kafka.checkpoint import DeferredReleaseLog
from streamdp.adapters.kafka.faults import FaultInjector
from streamdp.adapters.kafka.forward import Stream
from streamdp.adapters.kafka.lean_fetch import install_lean_fetch, split_runs
from streamdp.adapters.kafka.logs import Throttle
from streamdp.adapters.kafka.split_stream import stream_headers
from streamdp.adapters.kafka.topics import (EXIT_PARAMETERS_CHANGED, EXIT_STOPPED_IN_OUTAGE, ReadPastEnd, TopicSetupError, read_to_end,
                                            ensure_topics, start_retrying, stop_clients,
                                            stop_on_signals, topic_partitions)
from streamdp.adapters.metrics import WorkerMetrics
from streamdp.engine.engine import EngineFailed
from streamdp.engine import state_codec
from streamdp.engine.release_parameters import ParametersChanged, canonical
from streamdp.engine.stage_a_worker import StageA
from streamdp.engine.staged_messages import WindowOutcome
from streamdp.filter.store import Fenced, StoreError, StoreLost
from streamdp.outputs.dead_letters import dead_letter_value
from streamdp.windows.held import take_rows
from streamdp.windows.tumbling import rejection_detail

log = logging.getLogger("streamdp.kafka")
COMMIT_TIMEOUT = 2.0  # seconds an input-offset commit (lag monitoring only) may take


@dataclass
class Owned:
    """One owned input partition: its StageA, its checkpoint (and fence), its next input offset."""

    stage: StageA
    ckpt: RedisCheckpoint
    next: int
    dirty: bool = False  # state changed since its last checkpoint
    sent: bool = False  # messages acknowledged since its last checkpoint


def split_engine_config(cfg, opts):
    """The engine configuration of the split, its admission scope naming the stream as ``--role all`` does
    (``KafkaWorker.engine_config``): the same scope, so the same admits whichever shape the deployment runs."""
    ec = cfg.engine_config()
    return replace(ec, scope=f"{ec.scope}:{opts.group_id}:{opts.input_topic}")


def partition_tree(stage: StageA, p: int) -> dict:
    """``stage.partition_snapshot(p)`` before encoding (its state_codec bytes are this tree encoded, which
    :meth:`StageA.adopt` takes back): the :class:`~streamdp.engine.append_log.AppendLog` s inside stay visible to
    :meth:`RedisCheckpoint.write`, which appends to them (a partition's held events grow batch by batch; the whole
    snapshot at every checkpoint would send them all again)."""
    if stage._failed is not None:
        raise EngineFailed(f"a stage-A step failed ({stage._failed}): its state is mid-close, not a checkpoint")
    return {"parameters": canonical(stage.parameters), "partition": stage.parts[int(p)].state()}


def partition_checkpoint(store, opts, p: int) -> RedisCheckpoint:
    """Input partition p's stage-A checkpoint: ``<ns>:ckpt:<group_id>:<input topic>:p<p>`` (its own fence)."""
    return RedisCheckpoint(store, opts.group_id, f"{opts.input_topic}:p{int(p)}")


class AdmitIngestWorker:
    def __init__(self, cfg, store, client_kw: dict, opts, *, metrics: WorkerMetrics | None = None,
                 worker_id: str | None = None) -> None:
        self.cfg = cfg
        self.store = store
        self.client_kw = client_kw
        self.opts = opts
        self.metrics = metrics or WorkerMetrics()
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        self.group = f"{opts.group_id}.ingest"
        self.stream = Stream(opts.group_id, opts.input_topic)
        self.parts_topic, self.outcomes_topic = opts.parts_topic, opts.outcomes_topic
        self.config = split_engine_config(cfg, opts)
        self.owned: dict[int, Owned] = {}
        self.seen: dict[int, int] = {}  # outcomes offset → window seq (those some owned partition may still need)
        self.out_pos = 0  # the outcomes offset after the last one processed
        self.out_read = False  # an outcome was processed (else the reader may still move forward to a resume offset)
        self.generation = 0
        self.lock = asyncio.Lock()
        self.stopping = asyncio.Event()
        self.exit_code = 0
        self.consumer = self.out_consumer = self.producer = None
        self.lean = False
        self.flushed = False
        self._last_input = time.monotonic()
        self._last_ckpt = time.monotonic()
        self._said = Throttle(log)
        self.faults = FaultInjector.from_env()

    # ---- lifecycle -----------------------------------------------------------------------------------------
    async def start(self) -> None:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
        from aiokafka.abc import ConsumerRebalanceListener

        from streamdp.adapters.kafka.worker import warm_up_parser

        o = self.opts
        warm_up_parser()
        if o.create_topics:
            await ensure_topics(self.client_kw, [o.input_topic, o.dead_letter_topic], o.partitions)
        self.consumer = AIOKafkaConsumer(
            **self.client_kw, group_id=self.group, enable_auto_commit=False, auto_offset_reset="earliest",
            session_timeout_ms=o.session_timeout_ms, heartbeat_interval_ms=o.heartbeat_interval_ms,
            max_poll_interval_ms=300000, fetch_max_bytes=o.fetch_max_bytes,
            max_partition_fetch_bytes=o.max_partition_fetch_bytes)
        await self.consumer.start()
        self.lean = o.lean_fetch and install_lean_fetch(self.consumer)
        n_in = len(await topic_partitions(self.consumer, o.input_topic))
        if o.create_topics:
            await ensure_topics(self.client_kw, [self.parts_topic], n_in)
            await ensure_topics(self.client_kw, [self.outcomes_topic], 1)
        check_split_topics(self.parts_topic, len(await topic_partitions(self.consumer, self.parts_topic)),
                           o.input_topic, n_in)
        # a short fetch wait: the broker may hold a fetch for its whole max wait although an outcome arrived (tansu
        # does), and while catching up every window waits for the previous one's outcome (internal_fetch_wait_ms)
        self.out_consumer = AIOKafkaConsumer(**self.client_kw, group_id=None, enable_auto_commit=False,
                                             auto_offset_reset="earliest", fetch_max_wait_ms=o.internal_fetch_wait_ms)
        await self.out_consumer.start()
        await topic_partitions(self.out_consumer, self.outcomes_topic)
        self.out_tp = TopicPartition(self.outcomes_topic, 0)
        self.out_consumer.assign([self.out_tp])
        self.out_consumer.seek(self.out_tp, 0)
        self.producer = AIOKafkaProducer(**self.client_kw, acks="all", linger_ms=5, enable_idempotence=False,
                                         max_request_size=o.max_request_bytes)
        await self.producer.start()
        worker = self

        class Listener(ConsumerRebalanceListener):
            async def on_partitions_revoked(self, revoked) -> None:
                await worker.on_revoked(revoked)

            async def on_partitions_assigned(self, assigned) -> None:
                await worker.on_assigned(assigned)

        self.consumer.subscribe([o.input_topic], listener=Listener())
        log.info("ingest worker started (stage A admits)",
                 extra={"worker": self.worker_id, "input_topic": o.input_topic, "parts_topic": self.parts_topic,
                        "outcomes_topic": self.outcomes_topic, "group": self.group})

    async def stop(self) -> None:
        await stop_clients(self.consumer, self.out_consumer, self.producer)

    def request_stop(self) -> None:
        self.stopping.set()

    async def run(self) -> int:
        stop_on_signals(self.request_stop)
        if not await start_retrying(self.start, self.stop, self.stopping):
            log.error("stopping while Kafka is unreachable at start; nothing was admitted",
                      extra={"worker": self.worker_id})
            return EXIT_STOPPED_IN_OUTAGE
        self.metrics.set_ready()
        try:
            await self._loop()
            if self.exit_code == 0:
                async with self.lock:
                    for p in sorted(self.owned):
                        if self.owned[p].stage._failed is None:
                            self._guarded(p, self._checkpoint, p, True)
        finally:
            self.metrics.set_ready("stopping")
            await self.stop()
            log.info("ingest worker stopped", extra={"worker": self.worker_id, "exit_code": self.exit_code})
        return self.exit_code

    # ---- ownership -----------------------------------------------------------------------------------------
    async def on_assigned(self, assigned) -> None:
        parts = sorted(tp.partition for tp in assigned if tp.topic == self.opts.input_topic)
        async with self.lock:
            self.generation += 1
            self._last_input = time.monotonic()
            for p in parts:
                if p not in self.owned:
                    await self._take(p)
            log.info("ingest: partitions assigned", extra={"worker": self.worker_id, "partitions": parts})

    async def on_revoked(self, revoked) -> None:
        async with self.lock:
            self.generation += 1
            for tp in revoked:
                p = tp.partition
                if p in self.owned:
                    try:
                        self._checkpoint(p, force=True)
                    except (StoreError, Fenced, StoreLost, EngineFailed) as e:  # the next owner replays from before
                        log.warning("checkpoint on revoke failed", extra={"partition": p, "error": str(e)})
                    del self.owned[p]

    async def _take(self, p: int) -> None:
        """Claim p's checkpoint (fencing any earlier owner), adopt its state or start p fresh, seek the input (and
        the outcome reader, when p needs older outcomes). Retried with backoff while the store fails."""
        from aiokafka import TopicPartition

        tp = TopicPartition(self.opts.input_topic, p)
        delay = 0.2
        while True:
            try:
                ckpt = partition_checkpoint(self.store, self.opts, p)
                dstore = DeferredReleaseLog(self.store, after_admit=lambda: self.faults.hit("after_admit"),
                                            fence=lambda c=ckpt: c.fence)
                ck = ckpt.claim(self.worker_id)
                stage = StageA(self.config, self.cfg.build_queries(), dstore)
                if ck.state is None:
                    stage.assign([p])
                    nxt = int((await self.consumer.beginning_offsets([tp]))[tp])
                    floor = 0
                    self.owned[p] = Owned(stage, ckpt, nxt)
                    self._checkpoint(p, force=True)  # a fresh Kb is drawn once
                else:
                    stage.adopt(state_codec.encode(ck.state["stage_a"]))
                    nxt, floor = int(ck.offsets[p]), int(ck.state["outcomes_from"])
                    self.owned[p] = Owned(stage, ckpt, nxt, dirty=True)
                break
            except Fenced:
                raise
            except ParametersChanged as e:  # no retry can help: the configuration must change back
                log.error(str(e), extra={"worker": self.worker_id, "partition": p})
                self.exit_code = EXIT_PARAMETERS_CHANGED
                self.stopping.set()
                return
            except (StoreError, StoreLost, OSError) as e:
                if self.stopping.is_set():
                    raise
                log.warning("partition restore failed; retrying", extra={"partition": p, "error": str(e)})
                await asyncio.sleep(delay)
                delay = min(2 * delay, 5.0)
        self.consumer.seek(tp, nxt)
        if floor < self.out_pos or not self.out_read:
            # p needs outcomes the reader has passed: read them again (repeats are ignored); before the first
            # outcome is read, the reader starts at the least resume offset
            if not self.out_read and len(self.owned) > 1:
                floor = min(floor, self.out_pos)
            self.out_consumer.seek(self.out_tp, floor)
            self.out_pos = floor
        log.info("ingest: partition adopted", extra={"worker": self.worker_id, "partition": p, "offset": nxt,
                                                    "outcomes_from": floor, "applied": stage.applied(p)})

    def _resume(self, p: int) -> int:
        """The outcomes offset p resumes from: the first kept outcome after the last one p applied (else where the
        reader is)."""
        applied = self.owned[p].stage.applied(p)
        return min([self.out_pos] + [off for off, seq in self.seen.items() if seq > applied])

    def _checkpoint(self, p: int, force: bool = False) -> int | None:
        own = self.owned[p]
        if not (force or own.dirty):
            return None
        state = {"stage_a": partition_tree(own.stage, p), "outcomes_from": self._resume(p)}
        st = own.stage.parts[p]
        info = {"worker": self.worker_id, "partition": p, "through": st.through, "applied": st.applied,
                "parameters": None}
        own.ckpt.write(state, {p: own.next}, [], {}, [], info)
        own.dirty = own.sent = False
        return own.next

    async def _commit(self, offsets: dict[int, int]) -> None:
        """The checkpointed input offsets, committed to the group for lag monitoring only (the checkpoints are the
        truth; bounded, failures ignored: a rebalance, an outage)."""
        from aiokafka import TopicPartition
        from aiokafka.errors import KafkaError
        from aiokafka.structs import OffsetAndMetadata

        try:
            tps = {TopicPartition(self.opts.input_topic, p): OffsetAndMetadata(o, "") for p, o in offsets.items()}
            await asyncio.wait_for(self.consumer.commit(tps), COMMIT_TIMEOUT)
        except (KafkaError, asyncio.TimeoutError) as e:
            self._said.warn("commit", "offset commit failed (lag monitoring only: the checkpoints hold the offsets)",
                            error=str(e) or type(e).__name__)

    # ---- the loop ------------------------------------------------------------------------------------------
    async def _loop(self) -> None:
        from aiokafka.errors import KafkaError

        o = self.opts
        while not self.stopping.is_set():
            try:
                # short polls: a partition admits window t only after t − 1's outcome came back; while one waits
                # for an outcome and the input is idle, the wait is on the outcomes (it goes on as soon as one comes)
                waiting = self._waiting()
                batch = await self.consumer.getmany(timeout_ms=0 if waiting else min(o.poll_ms, 50),
                                                    max_records=o.batch_max_records)
                gen = self.generation
                wait_out = min(o.poll_ms, 50) if waiting and not any(batch.values()) else 0
                outs = await self.out_consumer.getmany(self.out_tp, timeout_ms=wait_out, max_records=1000)
            except KafkaError as e:
                log.warning("fetch failed; retrying", extra={"error": str(e)})
                self.metrics.set_ready(f"outage: Kafka fetch failed ({type(e).__name__})")
                await asyncio.sleep(1.0)
                continue
            self.metrics.set_ready()
            await self.metrics.export_lag(self.consumer, o.input_topic)
            async with self.lock:
                if gen != self.generation:
                    batch = {}  # fetched before a seek: fetched again from the new positions
                try:
                    await self._step(batch, outs.get(self.out_tp, []))
                except (KafkaError, StoreError, ConnectionError, asyncio.TimeoutError) as e:
                    # a produce or a checkpoint failed: nothing is checkpointed past what the broker acknowledged, so
                    # every owned partition replays from its checkpoint (admits: copies; parts: equal repeats)
                    log.warning("step failed; restoring every owned partition from its checkpoint",
                                extra={"error": str(e) or type(e).__name__, "error_type": type(e).__name__})
                    self.metrics.recoveries.inc()
                    await self._restore_all()
                    continue
            if self.exit_code:
                break
            if o.drain_idle is not None and await self._drained():
                break

    def _waiting(self) -> bool:
        """Some owned partition admitted a window whose outcome has not come back yet."""
        return any(own.stage._failed is None and p in own.stage.parts and own.stage.parts[p].pending
                   for p, own in self.owned.items())

    async def _step(self, batch: dict, outs: list) -> None:
        from streamdp.adapters.kafka.worker import parse_fetched

        o = self.opts
        for m in outs:  # 1. outcomes
            seq = WindowOutcome.from_bytes(m.value).seq
            self.seen[m.offset] = seq
            self.out_pos, self.out_read = m.offset + 1, True
            for p in sorted(self.owned):
                own = self.owned.get(p)
                if own is not None and own.stage._failed is None:
                    self._guarded(p, own.stage.on_outcome, m.value)
        if outs and self.owned:
            low = min(own.stage.parts[p].applied for p, own in self.owned.items())
            self.seen = {off: s for off, s in self.seen.items() if s > low}
        futs = []
        if any(batch.values()):  # 2. input
            self._last_input = time.monotonic()
            for chunk in split_runs(batch, o.batch_max_records):
                for part in parse_fetched(chunk, o.input_topic):
                    own = self.owned.get(part.partition)
                    if own is None:
                        continue
                    futs += await self._ingest(part, own)
        for p in sorted(self.owned):  # 3. messages to the coordinator, in order per partition
            own = self.owned[p]
            if own.stage._failed is not None:
                continue  # restored below: its messages come again
            msgs = own.stage.poll()
            for m in msgs:
                futs.append(await self.producer.send(self.parts_topic, value=m, key=b"%d" % p, partition=p,
                                                     headers=stream_headers(self.stream)))
            if msgs:
                own.sent = own.dirty = True
        if futs:
            await asyncio.gather(*futs)  # 4. acknowledged: now checkpoint
            self.faults.hit("split_after_send")
        now = time.monotonic()
        periodic = now - self._last_ckpt >= o.checkpoint_seconds
        written = {}
        for p in sorted(self.owned):
            own = self.owned.get(p)
            if own is not None and own.stage._failed is None and (own.sent or (periodic and own.dirty)):
                if self._guarded(p, self._checkpoint, p) is not None:
                    written[p] = own.next
        if periodic:
            self._last_ckpt = now
        if written:
            await self._commit(written)
        for p in [p for p, own in self.owned.items() if own.stage._failed is not None]:
            await self._restore(p)

    async def _ingest(self, part, own: Owned) -> list:
        """One partition's parsed run: dead letters out, valid events into its StageA (from its next offset on)."""
        p, o = part.partition, self.opts
        k = int(np.searchsorted(part.offsets, own.next))  # a batch fetched before a seek may repeat offsets
        if k == part.offsets.size:
            return []
        parsed, dead = part.parsed, part.dead
        if k:
            parsed = take_rows(parsed, np.flatnonzero(parsed.source_rows >= k))
            dead = [(i, d) for i, d in dead if i >= k]
        self.metrics.events_in.inc(part.offsets.size - k)
        futs = []
        for i, d in dead:
            futs.append(await self._dead_letter(part.payloads[i], d.reason, d.detail, p, int(part.offsets[i])))
        if len(parsed):
            if p in own.stage.parts and own.stage.parts[p].flushing:
                log.error("events after the drain's flush of partition %d: the split takes no input after its end "
                          "of input yet; stopping (start a new deployment for new input)", p,
                          extra={"partition": p, "offset": int(part.offsets[k])})
                self.exit_code = 1
                self.stopping.set()
                return futs
            rejected = self._guarded(p, own.stage.ingest, parsed, p)
            if rejected is None:
                return futs  # failed: restored from its checkpoint
            st = own.stage.parts[p]
            for row, reason in rejected:
                src = int(parsed.source_rows[row])
                detail = rejection_detail(reason, float(parsed.ts[row]), st.windows, self.config.max_future_seconds)
                futs.append(await self._dead_letter(part.payloads[src], reason, detail, p, int(part.offsets[src])))
        own.next = int(part.offsets[-1]) + 1
        own.dirty = True
        return futs

    async def _dead_letter(self, payload: bytes, reason: str, detail: str, p: int, offset: int):
        self.metrics.dead_letters.labels(reason=reason).inc()
        v = dead_letter_value(payload, reason, detail, self.opts.input_topic, p, offset)
        return await self.producer.send(self.opts.dead_letter_topic, value=v, key=f"{p}/{offset}".encode())

    def _guarded(self, p: int, fn, *args):
        """One partition's step; a store failure marks the partition for a restore (its StageA refuses further work
        until then), a fence lost drops it (another worker owns it now)."""
        try:
            return fn(*args)
        except Fenced as e:
            log.warning("partition fenced: another worker owns it now; dropped here",
                        extra={"partition": p, "error": str(e)})
            self.owned.pop(p, None)
        except (StoreError, StoreLost, EngineFailed, ConnectionError) as e:
            self._said.warn(f"fail{p}", "partition step failed; restoring it from its checkpoint", partition=p,
                            error=str(e) or type(e).__name__)
            own = self.owned.get(p)
            if own is not None and own.stage._failed is None:
                own.stage._failed = f"{type(e).__name__}: {e}"
        return None

    async def _restore(self, p: int) -> None:
        self.owned.pop(p, None)
        self.generation += 1
        await asyncio.sleep(0.2)
        assigned = {tp.partition for tp in self.consumer.assignment()}
        if p in assigned:
            await self._take(p)

    async def _restore_all(self) -> None:
        for p in sorted(self.owned):
            await self._restore(p)

    async def _drained(self) -> bool:
        """``--drain-idle``: once the input is idle that long, flush each owned partition read to its end (and,
        after that first flush, each partition adopted later as soon as it is read to its end: a rebalance may bring
        partitions of a worker that left); done once every owned partition sent its final marker and applied the
        outcomes of the windows it admitted."""
        from aiokafka import TopicPartition

        if not self.owned:
            return False
        todo = [p for p, own in self.owned.items() if p in own.stage.parts and not own.stage.parts[p].flushing]
        if todo:
            if not self.flushed and time.monotonic() - self._last_input < self.opts.drain_idle:
                return False
            ready = []
            for p in todo:
                try:
                    if await read_to_end(self.consumer, TopicPartition(self.opts.input_topic, p),
                                         self.owned[p].next if p in self.owned else None):
                        ready.append(p)
                except ReadPastEnd as e:
                    self._said.error("past_end", f"{e}: not draining on it", partition=e.partition)
            if not self.flushed and len(ready) < len(todo):
                return False  # the first flush: every owned partition at its end
            async with self.lock:
                for p in ready:
                    own = self.owned.get(p)
                    if own is not None and own.stage._failed is None and not own.stage.parts[p].flushing:
                        self._guarded(p, own.stage.flush)
                if ready:
                    self.flushed = True
                    log.info("input idle and read to its end: flushing (end of input)", extra={"partitions": ready})
            return False
        for p, own in list(self.owned.items()):
            st = own.stage.parts.get(p)
            if st is None or not (st.sent and st.sent[2]) or st.pending:
                return False
        log.info("drained: every owned partition sent its final marker and settled",
                 extra={"partitions": sorted(self.owned)})
        return True


def check_split_topics(parts_topic_name: str, n_parts: int, input_topic: str, n_input: int) -> None:
    if n_parts < n_input:
        raise TopicSetupError(
            f"internal topic {parts_topic_name!r} has {n_parts} partition{'s' if n_parts != 1 else ''}, the input "
            f"topic {input_topic!r} {n_input}: it needs at least {n_input}, one per input partition "
            "(kafka.internal_prefix names it)")
