"""Topic names of the service, their creation with the admin client, and the client lifecycle shared by the
workers (partition discovery, stop signals, shutdown)."""

from __future__ import annotations

import asyncio
import logging
import signal
import time

log = logging.getLogger("streamdp.kafka")

TOPIC_EXISTS = 36  # Kafka error code TOPIC_ALREADY_EXISTS


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


async def topic_partitions(consumer, topic: str, timeout: float = 30.0) -> list[int]:
    """The partition numbers of ``topic`` as ``consumer``'s metadata knows them (refreshing it until they appear)."""
    t0 = time.monotonic()
    while True:
        parts = consumer.partitions_for_topic(topic)
        if parts:
            return sorted(parts)
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"topic {topic!r} has no partitions (does it exist?)")
        await consumer._client.force_metadata_update()
        await asyncio.sleep(0.2)


def stop_on_signals(request_stop) -> None:
    """SIGTERM / SIGINT → ``request_stop()`` (the worker finishes its step and exits cleanly)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, request_stop)
        except (NotImplementedError, RuntimeError):  # pragma: no cover - not the main thread
            pass


async def stop_clients(*clients) -> None:
    """Stop aiokafka clients, best effort (shutdown goes on if one fails)."""
    for c in clients:
        if c is not None:
            try:
                await c.stop()
            except Exception as e:  # pragma: no cover - best effort on shutdown
                log.warning("client stop failed", extra={"client": type(c).__name__, "error": str(e)})


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
                raise RuntimeError(f"cannot create topic {name!r}: Kafka error {code} ({err[2] if len(err) > 2 else ''})")
        if created:
            log.info("created topics", extra={"topics": created, "partitions": partitions})
        return created
    finally:
        await admin.close()
