"""Stage A of the staged topology (docs/contract.md §4): ``streamdp run --role ingest``.

Any number of ingest workers share the input topic's partitions in the consumer group ``<group_id>.ingest``
(Kafka's ordinary assignment: the load is spread). Each one loops:

1. ``getmany`` with the lean fetch (:mod:`~streamdp.adapters.kafka.lean_fetch`), cut into batches of at most
   ``batch_max_records`` (records fetched before the last rebalance are dropped: the new positions re-fetch them);
2. parse and validate every payload of the batch at once (:func:`~streamdp.adapters.kafka.worker.parse_fetched`);
3. dead-letter the malformed events (keyed ``<partition>/<offset>``, as the single worker does) and forward each
   partition's run as ONE :class:`~streamdp.adapters.kafka.forward.ForwardRecord` to the internal topic, on the
   partition with the input partition's number, keyed ``<partition>/<lo>``, naming this deployment's stream
   (``group_id``, input topic: :class:`~streamdp.adapters.kafka.forward.Stream`) so that a coordinator of another
   deployment sharing the internal topic refuses it;
4. wait for the broker's acknowledgements, then commit the input offsets.

With ``--drain-idle`` an ingest worker stops once its input has been idle that long AND every assigned partition
has answered a fetch and is read up to the high watermark that answer carried (idleness alone may be a partition
whose first fetch is still on its way). The coordinator's own drain does not rely on stage A stopping: it checks
the input topic itself (``KafkaWorker._unforwarded``).

Stage A holds no privacy state and touches no budget: it is at-least-once, and the coordinator
(``--role coordinator``, :class:`~streamdp.adapters.kafka.worker.KafkaWorker`) makes it exactly-once by input
offsets (:func:`~streamdp.adapters.kafka.forward.accept`). A crash or a rebalance re-sends from the last commit;
dead letters may then appear twice with the same key (as after a crash of the single worker).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from dataclasses import replace

import numpy as np

from streamdp.adapters.kafka.faults import FaultInjector
from streamdp.adapters.kafka.forward import ForwardRecord, Stream, encode
from streamdp.adapters.kafka.lean_fetch import install_lean_fetch, split_runs
from streamdp.adapters.kafka.logs import Throttle
from streamdp.adapters.kafka.topics import (EXIT_STOPPED_IN_OUTAGE, ReadPastEnd, all_read_to_end, check_internal_topic,
                                            start_retrying, stop_clients, stop_on_signals, topic_partitions)
from streamdp.adapters.metrics import WorkerMetrics

log = logging.getLogger("streamdp.kafka")
COMMIT_TIMEOUT = 2.0  # seconds an input-offset commit may take (as the worker's)


class IngestWorker:
    def __init__(self, client_kw: dict, opts, *, metrics: WorkerMetrics | None = None,
                 worker_id: str | None = None) -> None:
        self.client_kw = client_kw
        self.opts = opts
        self.metrics = metrics or WorkerMetrics()
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}"
        self.group = f"{opts.group_id}.ingest"
        self.stream = Stream(opts.group_id, opts.input_topic)  # named in every forward record (forward.py)
        self.next: dict[int, int] = {}  # input partition → the position after the last forwarded run
        self.generation = 0
        self.faults = FaultInjector.from_env()
        self.stopping = asyncio.Event()
        self.consumer = None
        self.producer = None
        self.forwarded_events = 0
        self.lean = False  # the lean fetch is installed in the consumer
        self._last_input = time.monotonic()
        self._said = Throttle(log)

    async def start(self) -> None:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
        from aiokafka.abc import ConsumerRebalanceListener

        from streamdp.adapters.kafka.topics import ensure_topics
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
            await ensure_topics(self.client_kw, [o.internal_topic], n_in)
        n_fw = len(await topic_partitions(self.consumer, o.internal_topic))
        check_internal_topic(o.internal_topic, n_fw, o.input_topic, n_in)
        # the producer starts after every topic it writes to exists (one it learns of later may stall its sends)
        self.producer = AIOKafkaProducer(**self.client_kw, acks="all", linger_ms=5, enable_idempotence=False,
                                         max_request_size=o.max_request_bytes)
        await self.producer.start()
        worker = self

        class Listener(ConsumerRebalanceListener):
            async def on_partitions_revoked(self, revoked) -> None:
                worker.generation += 1
                worker.next.clear()

            async def on_partitions_assigned(self, assigned) -> None:
                worker.generation += 1
                worker.next.clear()
                log.info("ingest: partitions assigned", extra={"worker": worker.worker_id,
                                                               "partitions": sorted(tp.partition for tp in assigned)})

        self.consumer.subscribe([o.input_topic], listener=Listener())
        log.info("ingest worker started", extra={"worker": self.worker_id, "input_topic": o.input_topic,
                                                 "internal_topic": o.internal_topic, "group": self.group})

    async def stop(self) -> None:
        await stop_clients(self.consumer, self.producer)

    def request_stop(self) -> None:
        self.stopping.set()

    async def run(self) -> int:
        stop_on_signals(self.request_stop)
        if not await start_retrying(self.start, self.stop, self.stopping):
            log.error("stopping while Kafka is unreachable at start; nothing was forwarded",
                      extra={"worker": self.worker_id})
            return EXIT_STOPPED_IN_OUTAGE
        self.metrics.set_ready()
        try:
            await self._loop()
        finally:
            self.metrics.set_ready("stopping")
            await self.stop()
            log.info("ingest worker stopped", extra={"worker": self.worker_id, "forwarded": self.forwarded_events})
        return 0

    async def _loop(self) -> None:
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
            gen = self.generation  # no await since getmany returned
            self.metrics.set_ready()
            await self.metrics.export_lag(self.consumer, o.input_topic)  # a rebalance meanwhile: gen says so
            if not any(batch.values()):
                if o.drain_idle is not None and time.monotonic() - self._last_input >= o.drain_idle:
                    try:
                        at_end = await all_read_to_end(self.consumer, o.input_topic)
                    except ReadPastEnd as e:  # truncated or recreated: no end of input (the coordinator stops)
                        self._said.error("past_end", f"{e}: not stopping on it",
                                         partition=e.partition, position=e.position, high_watermark=e.high_watermark)
                        at_end = False
                    if at_end:
                        log.info("input idle and read to its end: stopping", extra={"idle_seconds": o.drain_idle})
                        break
                continue
            self._last_input = time.monotonic()
            for chunk in split_runs(batch, o.batch_max_records):  # lean runs: max_records counted runs
                if gen != self.generation:
                    break  # rewound or rebalanced meanwhile: the rest is fetched again from the new positions
                try:
                    await self.forward(chunk, gen)
                except KafkaError as e:  # nothing committed: the runs are fetched and forwarded again
                    log.warning("forward failed; re-fetching from the last commit", extra={"error": str(e)})
                    await self._rewind()

    async def forward(self, batch: dict, gen: int) -> None:
        """Steps 2–4 of the module doc for one ``getmany`` result."""
        from aiokafka import TopicPartition
        from aiokafka.errors import CommitFailedError, KafkaError
        from aiokafka.structs import OffsetAndMetadata

        from streamdp.adapters.kafka.worker import dead_letter_value, parse_fetched

        o = self.opts
        futs, commits = [], {}
        for part in parse_fetched(batch, o.input_topic):
            p = part.partition
            tp = TopicPartition(o.input_topic, p)
            first, last = int(part.offsets[0]), int(part.offsets[-1])
            lo = self.next.get(p)
            if lo is None:  # first run since an assignment: the consumer started at the committed offset
                lo = await self._committed(tp)
                if gen != self.generation:
                    return  # a rebalance meanwhile: these records are fetched again by their owner
            lo = min(lo, first)
            self.metrics.events_in.inc(part.offsets.size)
            for i, d in part.dead:
                self.metrics.dead_letters.labels(reason=d.reason).inc()
                v = dead_letter_value(d.payload, d.reason, d.detail, o.input_topic, p, int(part.offsets[i]))
                futs.append(await self.producer.send(o.dead_letter_topic, value=v,
                                                     key=f"{p}/{int(part.offsets[i])}".encode()))
            rows = part.parsed.source_rows
            rec = ForwardRecord(p, lo, last, part.offsets[rows], [part.payloads[i] for i in rows.tolist()],
                                replace(part.parsed, source_rows=np.arange(rows.size, dtype=np.int64)), self.stream)
            futs.append(await self.producer.send(o.internal_topic, value=encode(rec), key=f"{p}/{lo}".encode(),
                                                 partition=p))
            self.forwarded_events += len(rows)
            self.metrics.forwarded.inc()
            self.next[p] = last + 1
            commits[tp] = OffsetAndMetadata(last + 1, "")
        if futs:
            await asyncio.gather(*futs)
        self.faults.hit("ingest_after_forward")  # forwarded, not committed: the next owner re-sends
        if commits:
            try:
                # bounded (a deleted input topic's commit is retried for ever by aiokafka): not committed, the runs
                # are forwarded again by the next owner, which the coordinator skips by input offset
                await asyncio.wait_for(self.consumer.commit(commits), COMMIT_TIMEOUT)
            except (CommitFailedError, KafkaError) as e:  # a rebalance took them: the new owner re-sends
                log.info("ingest commit refused (rebalance); the new owner re-sends", extra={"error": str(e)})
            except asyncio.TimeoutError:
                self._said.warn("commit", "ingest commit took too long; not committed (the runs are sent again "
                                "after a restart, and skipped by the coordinator)", timeout_seconds=COMMIT_TIMEOUT)

    async def _committed(self, tp) -> int:
        off = await self.consumer.committed(tp)
        if off is None or off < 0:
            off = (await self.consumer.beginning_offsets([tp]))[tp]
        return int(off)

    async def _rewind(self) -> None:
        from aiokafka import TopicPartition

        self.generation += 1
        self.next.clear()
        self._last_input = time.monotonic()  # the runs are read again from here: restart the drain-idle clock
        for p in sorted(tp.partition for tp in self.consumer.assignment()):
            tp = TopicPartition(self.opts.input_topic, p)
            self.consumer.seek(tp, await self._committed(tp))
        await asyncio.sleep(1.0)
