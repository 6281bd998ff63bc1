"""Parsing and validating raw events (DESIGN.md §1, §6) into columnar batches.

An event is a JSON object keyed by user, e.g.
``{"user": "u17", "ts": 1700000123.5, "items": ["ibuprofen", "insulin"], "value": 61.2, "loc": [37.77, -122.42]}``.
``user`` and ``ts`` are required; every other field is optional. A bad event is never fatal: it is returned with a
reason (for the dead-letter topic) and counted; the batch goes on.

The hot path parses a whole batch with one ``orjson.loads`` of the joined payloads, falling back to per-event
parsing only when the batch contains a malformed payload.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import orjson

MAX_PAYLOAD_BYTES = 64 * 1024
MAX_ITEMS = 1000
MAX_ITEM_LEN = 256
MAX_USER_LEN = 256
# event time must lie in [1970-01-01, 2200-01-01): anything else is an absurd timestamp
MIN_TS = 0.0
MAX_TS = 7258118400.0


class BadEvent(ValueError):
    """An event that cannot be used; ``reason`` is a short machine-readable code, ``detail`` a human sentence."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclass
class DeadLetter:
    payload: bytes
    reason: str
    detail: str = ""


@dataclass
class EventBatch:
    """Columnar events: one row per event; items flattened with offsets (CSR layout)."""

    users: list[str] = field(default_factory=list)
    ts: np.ndarray = field(default_factory=lambda: np.zeros(0))
    item_offsets: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    items: list[str] = field(default_factory=list)
    value: np.ndarray = field(default_factory=lambda: np.zeros(0))  # NaN where absent
    loc: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))  # NaN where absent
    source_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # index into the payloads

    def __len__(self) -> int:
        return len(self.users)


def _validate(obj) -> tuple[str, float, list[str] | None, float, tuple[float, float] | None]:
    if not isinstance(obj, dict):
        raise BadEvent("not_an_object", f"expected a JSON object, got {type(obj).__name__}")
    user = obj.get("user")
    if user is None:
        raise BadEvent("missing_user", "field 'user' is required")
    if isinstance(user, bool) or not isinstance(user, (str, int)):
        raise BadEvent("bad_user", f"'user' must be a string, got {type(user).__name__}")
    user = str(user)
    if not user or len(user) > MAX_USER_LEN:
        raise BadEvent("bad_user", f"'user' must have 1..{MAX_USER_LEN} characters")
    ts = obj.get("ts")
    if ts is None:
        raise BadEvent("missing_ts", "field 'ts' is required")
    if isinstance(ts, bool) or not isinstance(ts, (int, float)):
        raise BadEvent("bad_ts", f"'ts' must be a number (seconds since the epoch), got {type(ts).__name__}")
    ts = float(ts)
    if not math.isfinite(ts):
        raise BadEvent("bad_ts", "'ts' must be finite")
    if not (MIN_TS <= ts < MAX_TS):
        raise BadEvent("absurd_ts", f"'ts'={ts} outside [1970, 2200)")
    items = obj.get("items")
    if items is not None:
        if not isinstance(items, list):
            raise BadEvent("bad_items", f"'items' must be a list of strings, got {type(items).__name__}")
        if len(items) > MAX_ITEMS:
            raise BadEvent("too_many_items", f"{len(items)} items > {MAX_ITEMS}")
        for it in items:
            if not isinstance(it, str):
                raise BadEvent("bad_items", f"every item must be a string, got {type(it).__name__}")
            if not it or len(it) > MAX_ITEM_LEN:
                raise BadEvent("bad_items", f"every item must have 1..{MAX_ITEM_LEN} characters")
    value = obj.get("value")
    if value is None:
        value = math.nan
    else:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise BadEvent("bad_value", f"'value' must be a number, got {type(value).__name__}")
        value = float(value)
        if not math.isfinite(value):
            raise BadEvent("bad_value", "'value' must be finite")
    loc = obj.get("loc")
    if loc is not None:
        if (not isinstance(loc, list) or len(loc) != 2
                or any(isinstance(c, bool) or not isinstance(c, (int, float)) for c in loc)):
            raise BadEvent("bad_loc", "'loc' must be a list of two numbers")
        loc = (float(loc[0]), float(loc[1]))
        if not (math.isfinite(loc[0]) and math.isfinite(loc[1])):
            raise BadEvent("bad_loc", "'loc' must be finite")
    return user, ts, items, value, loc


def parse_event(raw: bytes) -> tuple[str, float, list[str] | None, float, tuple[float, float] | None]:
    """Parse and validate one payload; raises :class:`BadEvent`."""
    if not isinstance(raw, (bytes, bytearray, memoryview)):
        raise BadEvent("not_bytes", "payload must be bytes")
    if len(raw) > MAX_PAYLOAD_BYTES:
        raise BadEvent("oversized", f"{len(raw)} bytes > {MAX_PAYLOAD_BYTES}")
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        msg = str(e)
        if "utf-8" in msg.lower() or "surrogates" in msg.lower():
            raise BadEvent("not_utf8", "payload is not valid UTF-8") from None
        raise BadEvent("malformed_json", msg[:120]) from None
    return _validate(obj)


def parse_batch(raws: list[bytes]) -> tuple[EventBatch, list[DeadLetter]]:
    """Parse many payloads into an :class:`EventBatch`; bad ones come back as dead letters (order kept)."""
    objs = None
    if raws and all(isinstance(r, (bytes, bytearray)) and len(r) <= MAX_PAYLOAD_BYTES for r in raws):
        try:
            objs = orjson.loads(b"[" + b",".join(raws) + b"]")
            if len(objs) != len(raws):  # a payload like b'1,2' would smuggle two values in
                objs = None
        except orjson.JSONDecodeError:
            objs = None
    users: list[str] = []
    ts: list[float] = []
    offsets = [0]
    items: list[str] = []
    values: list[float] = []
    locs: list[tuple[float, float]] = []
    rows: list[int] = []
    dead: list[DeadLetter] = []
    nan2 = (math.nan, math.nan)
    for i, raw in enumerate(raws):
        try:
            if objs is not None:
                u, t, its, v, loc = _validate(objs[i])
            else:
                u, t, its, v, loc = parse_event(raw)
        except BadEvent as e:
            dead.append(DeadLetter(bytes(raw) if isinstance(raw, (bytes, bytearray)) else b"", e.reason, e.detail))
            continue
        users.append(u)
        ts.append(t)
        if its:
            items.extend(its)
        offsets.append(len(items))
        values.append(v)
        locs.append(loc if loc is not None else nan2)
        rows.append(i)
    batch = EventBatch(
        users=users,
        ts=np.asarray(ts, dtype=np.float64),
        item_offsets=np.asarray(offsets, dtype=np.int64),
        items=items,
        value=np.asarray(values, dtype=np.float64),
        loc=np.asarray(locs, dtype=np.float64).reshape(-1, 2),
        source_rows=np.asarray(rows, dtype=np.int64),
    )
    return batch, dead
