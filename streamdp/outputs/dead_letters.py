"""The dead-letter record: one rejected input event (schema ``streamdp/schemas/dead_letter.schema.json``).

The same record on the worker's dead-letter topic and in the demo's ``dead_letters.jsonl`` (where ``topic`` names
the demo's input and ``offset`` is the event's 0-based position in it, partition 0).
"""

from __future__ import annotations

import base64

import orjson

from streamdp.input.events import MAX_PAYLOAD_BYTES

__all__ = ["DEAD_LETTER_VERSION", "MAX_DEAD_PAYLOAD", "dead_letter_value"]

DEAD_LETTER_VERSION = 1
MAX_DEAD_PAYLOAD = MAX_PAYLOAD_BYTES  # dead letters carry at most this many bytes of the payload


def dead_letter_value(payload: bytes, reason: str, detail: str, topic: str, partition: int, offset: int) -> bytes:
    """The dead-letter record as JSON bytes: the payload verbatim as UTF-8 text, or base64 when it is not UTF-8,
    cut to :data:`MAX_DEAD_PAYLOAD` bytes (``truncated``)."""
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
