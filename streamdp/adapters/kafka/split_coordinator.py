"""The coordinator of the staged split (``[kafka] stage_a = "admit"``): ``streamdp run --role coordinator``
(docs/DECISIONS.md, "Scale-out: stage A admits" and "… as processes").

It reads every partition of ``<internal_prefix>parts`` — as the one owner of the consumer group
``<group_id>.split-coordinator`` (:class:`~streamdp.adapters.kafka.assignor.SingleOwnerAssignor`: the other members
wait as standbys; a hand-over goes through the checkpoint: the old owner checkpoints on revoke, the new one claims,
which fences the old one, and restores), or with ``--standalone`` by manual assignment (exactly one coordinator;
restarts do not wait for a dead member's session) — and feeds each record of its
own stream (:mod:`~streamdp.adapters.kafka.split_stream`; another stream's is refused: logged once, counted in
``streamdp_forward_dropped``) to a :class:`~streamdp.engine.coordinator_worker.Coordinator` whose registered
partitions are the input topic's. The windows that close go through the same protocol as ``--role all``
(``worker.py``):

1. ONE atomic checkpoint in the store's Redis (:class:`~streamdp.adapters.kafka.checkpoint.RedisCheckpoint`, the
   ``--role all`` key ``<ns>:ckpt:<group_id>:<input topic>``, so the two shapes fence each other and a checkpoint of
   the other shape is refused, not misread): ``Coordinator.snapshot()``, the parts-topic offsets, the release-log
   entries and ledger entries of the closed windows (:class:`~streamdp.adapters.kafka.checkpoint.DeferredReleaseLog`)
   and the records to publish;
2. publish each record on partition 0 of ``<output_prefix><query id>`` (test-mode headers as ``--role all``), ack;
3. THEN produce each closed window's :class:`~streamdp.engine.staged_messages.WindowOutcome` to
   ``<internal_prefix>outcomes``: a window closed but not checkpointed is never announced (a restore closes it
   again, the same way in test mode, and the first run's outcome was never seen). The checkpoint records the last
   outcome announced before it; a restore announces the kept outcomes after that one again (stage A ignores
   repeats).

Failures (store or Kafka) restore the last checkpoint (claim again, re-publish its pending records, re-announce,
seek the parts topic to its offsets) with backoff. ``--drain-idle``: exits once every input partition sent its final
marker, every window is closed, checkpointed, published and announced.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time

from streamdp.adapters.kafka.admit_ingest import check_split_topics, split_engine_config
from streamdp.adapters.kafka.assignor import SingleOwnerAssignor
from streamdp.adapters.kafka.checkpoint import DeferredReleaseLog, Fenced, PendingRecord, RedisCheckpoint
from streamdp.adapters.kafka.faults import FaultInjector
from streamdp.adapters.kafka.forward import Stream
from streamdp.adapters.kafka.logs import Throttle
from streamdp.adapters.kafka.split_stream import refusal, stream_of
from streamdp.adapters.kafka.topics import (EXIT_PARAMETERS_CHANGED, EXIT_STOPPED_IN_OUTAGE, EXIT_STORE_LOST, OUTPUT_TOPIC_CONFIGS,
                                            ensure_topics, output_topic, start_retrying, stop_clients,
                                            stop_on_signals, topic_partitions)
from streamdp.adapters.metrics import WorkerMetrics
from streamdp.engine.coordinator_worker import Coordinator, PartConflict
from streamdp.engine.engine import EngineFailed, ReleaseConflict
from streamdp.engine.release_parameters import ParametersChanged, canonical
from streamdp.engine.staged_messages import WindowOutcome
from streamdp.filter.store import StoreError, StoreLost
from streamdp.outputs.records import TEST_MODE_HEADERS

log = logging.getLogger("streamdp.kafka")

OUTPUT_PARTITION = 0
EXIT_FENCED = 3
EXIT_RELEASE_CONFLICT = 7
EXIT_PART_CONFLICT = 9  # `streamdp run` exit code: a stage A sent two different parts for one (window, partition)


class WrongShape(RuntimeError):
    """The checkpoint under this deployment's key was written by another shape (``--role all``, or the forwarding
    coordinator of ``stage_a = "forward"``): its engine state is not a Coordinator's."""


class SplitCoordinator:
    def __init__(self, cfg, store, client_kw: dict, opts, *, metrics: WorkerMetrics | None = None,
                 worker_id: str | None = None) -> None:
        self.cfg = cfg
        self.store = store
        self.client_kw = client_kw
        self.opts = opts
        self.metrics = metrics or WorkerMetrics()
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        self.stream = Stream(opts.group_id, opts.input_topic)
        self.ckpt = RedisCheckpoint(store, opts.group_id, opts.input_topic)
        self.dstore = DeferredReleaseLog(store, fence=lambda: self.ckpt.fence)
        self.config = split_engine_config(cfg, opts)
        self.test_mode = cfg.service.get("unsafe_test_seed") is not None
        self.topic_of = {t["id"]: output_topic(cfg.kafka | {"output_prefix": opts.output_prefix}, t["id"])
                         for t in cfg.query_tables}
        self.coord: Coordinator | None = None
        self.src: dict[int, int] = {}  # parts-topic partition → next offset
        self.announced = 0  # the last window whose outcome was produced (acknowledged)
        self.input_partitions: list[int] = []
        self.stopping = asyncio.Event()
        self.exit_code = 0
        self.consumer = self.producer = None
        self.closed_windows = 0
        self._dirty = False
        self._last_ckpt = time.monotonic()
        self._refused: set = set()
        self._assignor = SingleOwnerAssignor()
        self.lock = asyncio.Lock()
        self.generation = 0  # bumped at every restore: a batch fetched before its seek is dropped
        self._said = Throttle(log)
        self.faults = FaultInjector.from_env()

    # ---- lifecycle -----------------------------------------------------------------------------------------
    async def start(self) -> None:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

        o = self.opts
        if o.create_topics:
            await ensure_topics(self.client_kw, [o.input_topic, o.dead_letter_topic], o.partitions)
            await ensure_topics(self.client_kw, list(self.topic_of.values()), 1,
                                configs={**OUTPUT_TOPIC_CONFIGS, "max.message.bytes": str(o.max_request_bytes)})
        group = dict(group_id=f"{o.group_id}.split-coordinator", partition_assignment_strategy=(self._assignor,),
                     session_timeout_ms=o.session_timeout_ms, heartbeat_interval_ms=o.heartbeat_interval_ms,
                     max_poll_interval_ms=300000) if o.use_group else dict(group_id=None)
        # a short fetch wait (internal_fetch_wait_ms): while stage A catches up, each window waits for this read
        self.consumer = AIOKafkaConsumer(**self.client_kw, **group, enable_auto_commit=False,
                                         auto_offset_reset="earliest", fetch_max_bytes=o.fetch_max_bytes,
                                         fetch_max_wait_ms=o.internal_fetch_wait_ms,
                                         max_partition_fetch_bytes=o.max_partition_fetch_bytes)
        await self.consumer.start()
        self.input_partitions = await topic_partitions(self.consumer, o.input_topic)
        if o.create_topics:
            await ensure_topics(self.client_kw, [o.parts_topic], len(self.input_partitions))
            await ensure_topics(self.client_kw, [o.outcomes_topic], 1)
        parts = await topic_partitions(self.consumer, o.parts_topic)
        check_split_topics(o.parts_topic, len(parts), o.input_topic, len(self.input_partitions))
        await topic_partitions(self.consumer, o.outcomes_topic)
        self.producer = AIOKafkaProducer(**self.client_kw, acks="all", linger_ms=0, enable_idempotence=False,
                                         max_request_size=o.max_request_bytes)
        await self.producer.start()
        self.tps = {p: TopicPartition(o.parts_topic, p) for p in parts}
        if o.use_group:
            self.consumer.subscribe([o.parts_topic], listener=_listener(self))
        else:
            self.consumer.assign(list(self.tps.values()))
        log.info("coordinator started (stage A admits)",
                 extra={"worker": self.worker_id, "parts_topic": o.parts_topic, "outcomes_topic": o.outcomes_topic,
                        "input_partitions": self.input_partitions, "queries": list(self.topic_of),
                        "test_mode": self.test_mode})

    async def stop(self) -> None:
        await stop_clients(self.consumer, self.producer)

    def request_stop(self) -> None:
        self.stopping.set()

    async def run(self) -> int:
        stop_on_signals(self.request_stop)
        if not await start_retrying(self.start, self.stop, self.stopping):
            log.error("stopping while Kafka is unreachable at start; nothing was released",
                      extra={"worker": self.worker_id})
            return EXIT_STOPPED_IN_OUTAGE
        try:
            if not self.opts.use_group:
                async with self.lock:
                    await self._recover()
            if self.exit_code == 0:
                self.metrics.set_ready()
                await self._loop()
                async with self.lock:
                    if self.exit_code == 0 and self.coord is not None:
                        await self._safe(self._checkpoint_and_publish, [])
        finally:
            self.metrics.set_ready("stopping")
            await self.stop()
            log.info("coordinator stopped", extra={"worker": self.worker_id, "exit_code": self.exit_code,
                                                   "windows_closed": self.closed_windows})
        return self.exit_code

    # ---- restore -------------------------------------------------------------------------------------------
    async def _recover(self) -> None:
        """Claim and restore the checkpoint, re-publish its pending records, announce the outcomes after the last
        one announced, seek the parts topic (with backoff while the store or Kafka fail)."""
        from aiokafka.errors import KafkaError

        delay = 0.2
        while not self.stopping.is_set():
            try:
                self.coord = None
                self.dstore.discard()
                ck = self.ckpt.claim(self.worker_id)
                coord = Coordinator(self.config, self.cfg.build_queries(), self.dstore)
                coord.register_partitions(self.input_partitions)
                announced = 0
                if ck.state is not None:
                    if "coordinator" not in ck.state:
                        raise WrongShape(f"checkpoint {self.ckpt.key} was written by another shape of this "
                                         "deployment (--role all, or stage_a = \"forward\"): the split's coordinator "
                                         "cannot take over its engine state")
                    coord.restore(bytes(ck.state["coordinator"]))
                    announced = int(ck.state["announced"])
                if ck.pending:
                    await self._publish(ck.pending)
                    self.ckpt.ack(ck.version)
                self.coord, self.src, self.announced = coord, dict(ck.offsets), announced
                await self._announce(coord.outcomes_since(announced))
                for p, tp in self.tps.items():
                    self.consumer.seek(tp, self.src.get(p, 0))
                self.generation += 1
                self.metrics.owner.set(1)
                log.info("owner: restored checkpoint", extra={"worker": self.worker_id, "version": ck.version,
                                                              "last_closed": coord.last_closed,
                                                              "offsets": self.src})
                return
            except Fenced as e:
                return self._exit(EXIT_FENCED, f"fenced: another coordinator owns the checkpoint ({e}); exiting")
            except StoreLost as e:
                return self._exit(EXIT_STORE_LOST, f"the budget store lost its state ({e}); exiting")
            except WrongShape as e:
                return self._exit(2, str(e))
            except ParametersChanged as e:  # no retry can help: the configuration must change back
                return self._exit(EXIT_PARAMETERS_CHANGED, str(e))
            except (StoreError, KafkaError, OSError, asyncio.TimeoutError) as e:
                log.warning("restore failed; retrying", extra={"error": str(e), "retry_in": delay})
                self.metrics.set_ready(f"outage: restore failed ({type(e).__name__})")
                try:
                    await asyncio.wait_for(self.stopping.wait(), delay)
                except asyncio.TimeoutError:
                    pass
                delay = min(2 * delay, 10.0)
        if self.coord is None and self.exit_code == 0:
            log.error("stopping while the checkpoint cannot be restored; the next start restores it")
            self.exit_code = EXIT_STOPPED_IN_OUTAGE

    # ---- ownership (group mode) -----------------------------------------------------------------------------
    async def on_assigned(self, assigned) -> None:
        async with self.lock:
            if any(tp.topic == self.opts.parts_topic for tp in assigned):
                await self._recover()
            else:
                self.coord = None
                self.metrics.owner.set(0)
                log.info("standby (no partitions assigned)", extra={"worker": self.worker_id})

    async def on_revoked(self, revoked) -> None:
        async with self.lock:
            if self.coord is not None and self.exit_code == 0:
                await self._safe(self._checkpoint_and_publish, [])
            self.coord = None
            self.generation += 1
            self.metrics.owner.set(0)

    def _exit(self, code: int, msg: str) -> None:
        log.error(msg, extra={"worker": self.worker_id})
        self.coord = None
        self.exit_code = code
        self.stopping.set()

    # ---- the loop ------------------------------------------------------------------------------------------
    async def _loop(self) -> None:
        from aiokafka.errors import KafkaError

        o = self.opts
        while not self.stopping.is_set():
            try:
                batch = await self.consumer.getmany(timeout_ms=min(o.poll_ms, 50), max_records=o.batch_max_records)
            except KafkaError as e:
                log.warning("fetch failed; retrying", extra={"error": str(e)})
                await asyncio.sleep(1.0)
                continue
            gen = self.generation  # no await since getmany returned
            # the parts topic's lag: the coordinator saturating (OPERATIONS.md, "Sizing the split"); it commits no
            # group offsets, so Kafka's own lag tools do not show it
            await self.metrics.export_lag(self.consumer, o.parts_topic)
            async with self.lock:
                if self.coord is None or gen != self.generation:
                    continue  # a standby, or fetched before a restore's seek
                if not await self._safe(self._step, batch):
                    continue
                if o.drain_idle is not None and self._done():
                    log.info("drained: every input partition sent its final marker; every window is released",
                             extra={"last_closed": self.coord.last_closed})
                    break

    def _done(self) -> bool:
        c = self.coord
        return (all(m[2] for m in c.markers.values()) and c.last_closed >= c.close_target()
                and self.announced >= c.last_closed and not self._dirty)

    async def _safe(self, fn, *args) -> bool:
        from aiokafka.errors import KafkaError

        try:
            await fn(*args)
            return True
        except Fenced as e:
            self._exit(EXIT_FENCED, f"fenced: another coordinator owns the checkpoint ({e}); exiting")
        except StoreLost as e:
            self._exit(EXIT_STORE_LOST, f"the budget store lost its state ({e}); exiting")
        except ReleaseConflict as e:
            self._exit(EXIT_RELEASE_CONFLICT, f"the release log already holds a release for {e}, written by another "
                       "deployment with the same query ids on this store; nothing was published for it")
        except PartConflict as e:
            self._exit(EXIT_PART_CONFLICT, f"{e}: a stage A's replay differs from its first run (restore its "
                       "matching checkpoint); nothing was published for that window")
        except (StoreError, KafkaError, EngineFailed, ConnectionError, asyncio.TimeoutError) as e:
            log.error("step failed; restoring the last checkpoint", extra={"error": str(e),
                                                                           "error_type": type(e).__name__})
            self.metrics.recoveries.inc()
            await asyncio.sleep(0.2)
            await self._recover()
        return False

    async def _step(self, batch: dict) -> None:
        summaries = []
        for tp in sorted(batch, key=lambda tp: tp.partition):
            for m in batch[tp]:
                p = tp.partition
                if m.offset < self.src.get(p, 0):
                    continue  # fetched before a seek
                self.src[p] = m.offset + 1
                self._dirty = True
                why = refusal(stream_of(m.headers), self.stream)
                if why is not None:
                    self._refuse(why, p, m)
                    continue
                summaries += self.coord.receive(m.value)
        now = time.monotonic()
        if summaries or (self._dirty and now - self._last_ckpt >= self.opts.checkpoint_seconds):
            await self._checkpoint_and_publish(summaries)

    def _refuse(self, why: str, p: int, m) -> None:
        self.metrics.forward_dropped.labels(why=why).inc()
        got = stream_of(m.headers)
        if (why, got) in self._refused:
            return
        self._refused.add((why, got))
        log.warning("a parts-topic record of %s is refused (not fed to the coordinator): give each deployment its "
                    "own [kafka] internal_prefix", "another deployment" if why == "foreign" else "no named stream",
                    extra={"worker": self.worker_id, "parts_topic": self.opts.parts_topic, "partition": p,
                           "offset": m.offset, "why": why,
                           "foreign": list(got) if got is not None else None})

    async def _checkpoint_and_publish(self, summaries: list) -> None:
        c = self.coord
        records = [PendingRecord(self.topic_of[r.query], r.key, r.to_bytes()) for s in summaries for r in s.records]
        releases, ledger = self.dstore.take()
        info = {"worker": self.worker_id, "last_closed": c.last_closed, "records": len(records),
                "parameters": canonical(c.parameters), "shape": "split"}
        state = {"coordinator": c.snapshot(), "announced": self.announced}
        version = self.ckpt.write(state, self.src, records, releases, ledger, info)
        self._dirty = False
        self._last_ckpt = time.monotonic()
        self.faults.hit("split_after_checkpoint")
        if records:
            await self._publish(records)
            self.ckpt.ack(version)
        await self._announce(c.poll())
        for s in summaries:
            self.closed_windows += 1
            for r in s.records:
                self.metrics.release(r)
            log.info("window released", extra={"seq": s.seq, "epoch": s.epoch, "t": s.t, "events": s.events,
                                               "admitted": s.admitted, "halted": s.refused,
                                               "records": len(s.records)})

    async def _announce(self, outcomes: list[bytes]) -> None:
        """Produce window outcomes (all checkpointed) to the outcomes topic, in window order."""
        if not outcomes:
            return
        futs = [await self.producer.send(self.opts.outcomes_topic, value=o, partition=0) for o in outcomes]
        await asyncio.gather(*futs)
        self.announced = max(self.announced, WindowOutcome.from_bytes(outcomes[-1]).seq)

    async def _publish(self, records: list[PendingRecord]) -> None:
        headers = TEST_MODE_HEADERS if self.test_mode else None
        futs = [await self.producer.send(r.topic, value=r.value, key=r.key.encode(), partition=OUTPUT_PARTITION,
                                         headers=headers) for r in records]
        if futs:
            await asyncio.gather(*futs)


def _listener(worker: SplitCoordinator):
    from aiokafka.abc import ConsumerRebalanceListener

    class Listener(ConsumerRebalanceListener):
        """Rebalance → hand-over: checkpoint on revoke, claim + restore on assign."""

        async def on_partitions_revoked(self, revoked) -> None:
            await worker.on_revoked(revoked)

        async def on_partitions_assigned(self, assigned) -> None:
            await worker.on_assigned(assigned)

    return Listener()
