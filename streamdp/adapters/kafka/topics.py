"""Topic names of the service, their creation with the admin client, and the client lifecycle shared by the
workers (partition discovery, stop signals, shutdown)."""

from __future__ import annotations

import asyncio
import logging
import signal
import time

log = logging.getLogger("streamdp.kafka")

TOPIC_EXISTS = 36  # Kafka error code TOPIC_ALREADY_EXISTS
OUTPUT_TOPIC_CONFIGS = {"cleanup.policy": "compact"}  # output topics the worker creates (one record per release key)


class TopicSetupError(RuntimeError):
    """The topics do not allow the worker to start (a topic that cannot be created, is missing, or has too few
    partitions): ``streamdp run`` refuses the start with this one line (exit 2), like a configuration error."""


def check_internal_topic(internal_topic: str, n_internal: int, input_topic: str, n_input: int) -> None:
    """The staged topology's internal topic needs one partition per input partition (``forward.py``)."""
    if n_internal < n_input:
        raise TopicSetupError(
            f"internal topic {internal_topic!r} has {n_internal} partition{'s' if n_internal != 1 else ''}, the "
            f"input topic {input_topic!r} {n_input}: it needs at least {n_input}, one per input partition "
            "(kafka.internal_prefix names it)")


def _setup_error(error: Exception) -> TopicSetupError | None:
    """``error`` (raised while a worker starts) when it is a :class:`TopicSetupError`."""
    return error if isinstance(error, TopicSetupError) else None


def output_topic(kafka: dict, query_id: str) -> str:
    """The output topic of one query: ``<output_prefix><query id>``."""
    return f"{kafka['output_prefix']}{query_id}"


def service_topics(kafka: dict, query_ids: list[str]) -> list[str]:
    """Every topic ``streamdp run`` writes to: one per query, then the dead-letter topic."""
    return [output_topic(kafka, q) for q in query_ids] + [kafka["dead_letter_topic"]]


def forward_topic(kafka: dict) -> str:
    """The staged topology's internal topic (stage A → coordinator, ``forward.py``): ``<internal_prefix>parsed``;
    one partition per input partition."""
    return f"{kafka.get('internal_prefix', 'streamdp.internal.')}parsed"


def parts_topic(kafka: dict) -> str:
    """``stage_a = "admit"``: stage A → coordinator, the parts and markers of input partition p on partition p
    (``admit_ingest.py``): ``<internal_prefix>parts``; one partition per input partition."""
    return f"{kafka.get('internal_prefix', 'streamdp.internal.')}parts"


def outcomes_topic(kafka: dict) -> str:
    """``stage_a = "admit"``: coordinator → every stage A, the window outcomes (``split_coordinator.py``):
    ``<internal_prefix>outcomes``; one partition."""
    return f"{kafka.get('internal_prefix', 'streamdp.internal.')}outcomes"


async def topic_partitions(consumer, topic: str, timeout: float = 30.0) -> list[int]:
    """The partition numbers of ``topic`` as ``consumer``'s metadata knows them (refreshing it until they appear)."""
    t0 = time.monotonic()
    while True:
        parts = consumer.partitions_for_topic(topic)
        if parts:
            return sorted(parts)
        if time.monotonic() - t0 > timeout:
            raise TopicSetupError(f"topic {topic!r} has no partitions after {timeout:g} s (does it exist?)")
        await consumer._client.force_metadata_update()
        await asyncio.sleep(0.2)


class ReadPastEnd(RuntimeError):
    """A partition's read position is past the end of its log (the high watermark a fetch answered with): the topic
    was truncated or deleted and recreated under the reader. That is no end of input — events written to the new
    log below the old position would be skipped — but an error to report (drains refuse to close on it)."""

    def __init__(self, topic: str, partition: int, position: int, high_watermark: int) -> None:
        self.topic, self.partition, self.position, self.high_watermark = topic, partition, position, high_watermark
        super().__init__(f"partition {partition} of topic {topic!r}: read position {position} is past the end of "
                         f"the log (high watermark {high_watermark}): the topic was truncated or recreated")


async def read_to_end(consumer, tp, position: int | None = None) -> bool:
    """``tp`` has answered a fetch and ``consumer`` is positioned exactly at the high watermark that answer carried
    (from fetch responses: tansu's ``end_offsets`` are wrong after batched produce). Idleness alone is no end of
    input: a partition whose first fetch is still on its way, or one read in part, is not at its end. A position
    PAST the high watermark (``position``, the caller's own next offset, is judged too) raises
    :class:`ReadPastEnd`: the log was truncated or recreated, which is not "read to the end"."""
    hw = consumer.highwater(tp)
    if hw is None:
        return False
    pos = await consumer.position(tp)
    for at in (pos, position):
        if at is not None and at > hw:
            raise ReadPastEnd(tp.topic, tp.partition, int(at), int(hw))
    return pos == hw


async def all_read_to_end(consumer, topic: str, positions: dict | None = None) -> bool:
    """:func:`read_to_end` for every partition of ``topic`` assigned to ``consumer`` (``positions``: partition → the
    caller's own next offset, judged against the high watermark too). Raises :class:`ReadPastEnd`."""
    positions = positions or {}
    for tp in consumer.assignment():
        if tp.topic == topic and not await read_to_end(consumer, tp, positions.get(tp.partition)):
            return False
    return True


def stop_on_signals(request_stop) -> None:
    """SIGTERM / SIGINT → ``request_stop()`` (the worker finishes its step and exits cleanly)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, request_stop)
        except (NotImplementedError, RuntimeError):  # pragma: no cover - not the main thread
            pass


EXIT_STOPPED_IN_OUTAGE = 5  # `streamdp run` exit code: SIGTERM while a store or Kafka outage holds the worker
EXIT_PARAMETERS_CHANGED = 6  # `streamdp run` exit code: the checkpoint was written under other release parameters
EXIT_STORE_LOST = 4  # `streamdp run` exit code: the store lost its state (flushed, restarted without persistence)
EXIT_DEFAULT_BUDGET_MISSING = 8  # `streamdp run` exit code: the budget store holds no default budget (deleted, evicted)


async def start_retrying(start, stop, stopping: asyncio.Event, *, first_delay: float = 0.5,
                         max_delay: float = 10.0) -> bool:
    """``await start()``; while Kafka cannot be reached (any ``KafkaError`` or ``OSError``: no broker, a
    metadata timeout, a refused connection), ``await stop()`` the half-started clients and try again after a
    backoff (0.5 s doubling to 10 s) — docs/contract.md §6: an unreachable dependency is retried, not a crash.
    Returns False when ``stopping`` is set meanwhile (nothing was consumed, charged or published). Any other
    error stops the half-started clients too and is raised — a topic layout that refuses the start as a
    :class:`TopicSetupError` (one line, exit 2 in ``streamdp run``)."""
    from aiokafka.errors import KafkaError

    delay = first_delay
    while True:
        try:
            await start()
            return True
        except (KafkaError, OSError) as e:
            await stop()
            log.warning("Kafka unreachable at start; retrying", extra={"error": str(e) or type(e).__name__,
                                                                       "retry_in": delay})
        except Exception as e:
            await stop()  # no "Unclosed AIOKafkaConsumer" after the error
            setup = _setup_error(e)
            if setup is not None and setup is not e:
                raise setup from None
            raise
        try:
            await asyncio.wait_for(stopping.wait(), delay)
            return False
        except asyncio.TimeoutError:
            delay = min(2 * delay, max_delay)


STOP_TIMEOUT = 5.0  # seconds each client's stop may take on the shutdown path (a LeaveGroup to a dead broker…)


async def stop_clients(*clients) -> None:
    """Stop aiokafka clients, best effort and bounded (shutdown goes on if one fails or hangs: every broker call on
    the shutdown path is bounded)."""
    for c in clients:
        if c is not None:
            try:
                await asyncio.wait_for(c.stop(), STOP_TIMEOUT)
            except Exception as e:  # pragma: no cover - best effort on shutdown
                log.warning("client stop failed",
                            extra={"client": type(c).__name__, "error": str(e) or type(e).__name__})


async def ensure_topics(client_kw: dict, names: list[str], partitions: int, replication: int = 1,
                        configs: dict | None = None) -> list[str]:
    """Create the topics that do not exist yet (existing ones are left as they are). Returns the created ones."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(**client_kw)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        todo = [n for n in dict.fromkeys(names) if n not in existing]
        if not todo:
            return []
        resp = await admin.create_topics([NewTopic(n, partitions, replication, topic_configs=configs or {})
                                          for n in todo])
        created = []
        for err in getattr(resp, "topic_errors", []):
            name, code = err[0], err[1]
            if code == 0:
                created.append(name)
            elif code != TOPIC_EXISTS:  # a concurrent creator won the race: fine
                why = err[2] if len(err) > 2 else ""
                raise TopicSetupError(f"cannot create topic {name!r}: Kafka error {code} ({why})")
        if created:
            log.info("created topics", extra={"topics": created, "partitions": partitions})
        return created
    finally:
        await admin.close()
