"""The forward record: stage A's parsed events of one input partition, as the coordinator consumes them.

docs/contract.md §4's staged topology: stage A (``streamdp run --role ingest``, any number of workers in one consumer
group, user-keyed input partitions) fetches, parses and validates — malformed events go to the dead-letter topic
there — and forwards each fetched run of one input partition as ONE record of the internal topic
``<internal_prefix>parsed``, on the partition with the input partition's number. The coordinator (stage C) consumes
those records instead of raw JSON: no parsing, one Kafka record per few thousand events.

A record **vouches for a range** ``[lo, hi]`` of input offsets: it carries every valid event of that range (with
its input offset and raw payload — the coordinator dead-letters late events with their payload) and says that
every other offset of the range was dead-lettered or does not exist (compaction, transaction markers). ``lo`` is
the ingest consumer's position when the run was fetched, so consecutive records of one ingest worker are
contiguous. The coordinator accepts a record of its own stream (below) iff ``lo ≤ expected`` (its next input
offset of that partition), skips the events it already has (a re-send after an ingest crash or a rebalance, or a
stale owner's late record) and drops a record with ``lo > expected``. The latter cannot happen while each owner
writes in order and commits a run only after the broker acknowledged it (a new owner starts at the last commit,
which the coordinator has passed by then); it is a safety net that never skips events — the coordinator logs it
and waits for the re-send. See :func:`accept` and ``tests/adapters/test_forward_record.py`` (a model of owners,
crashes and stale records).

A record **names its stream** (format version 2): the deployment's ``group_id`` and input topic — the pair that
keys its checkpoint (``sdp:ckpt:<group>:<topic>``) and its engine state, so "this deployment's stage A output"
whatever the internal topic is called. Two staged deployments sharing an internal topic (the default
``internal_prefix`` is the same for all) would otherwise read each other's records: input offsets of different
inputs collide, so a coordinator would ingest and charge the other deployment's users and skip its own events at
colliding offsets as "seen" (operator review 12). The coordinator compares the record's stream with its own
(:func:`refusal`; one tuple compare per record, before :func:`accept`) and drops a foreign record without
ingesting it or moving any of its input offsets.

Records of **format version 1** (before the stream was named) still decode (the layout is otherwise identical),
with ``stream = None``, and the coordinator refuses them as "unattributed": it cannot tell whose they are, and
accepting one that is not its own is the defect above — silent and irreversible (budgets charged, releases
published), while refusing is loud and recoverable. The cost falls on an upgrade that leaves version-1 records
unconsumed on the internal topic: their input offsets then become a gap the coordinator waits at (one with no
position yet for that partition starts at the first version-2 record instead, as it starts at any first record:
the refused events are then not ingested, which the error log and the metric say). Drain before upgrading (stop
the ingest workers, let the coordinator consume the internal topic to the end, upgrade both), or afterwards rewind
the ingest group ``<group_id>.ingest`` on the input topic to at most the coordinator's position so that stage A
re-sends them as version 2 (the coordinator skips what it already has). A coordinator of version 1 rejects
version-2 records as undecodable, so neither order of upgrade accepts a record unattributed.

Layout (little-endian): ``b"SDPF"``, u32 header length, the header (JSON: version, the stream's ``group`` and
``topic``, partition, lo, hi, counts, the user and item name dictionaries), then the arrays ``offsets`` i64[n],
``ts`` f64[n], ``value`` f64[n], ``loc`` f64[n×2], ``item_offsets`` i64[n+1], ``user_codes`` i32[n],
``item_codes`` i32[m], ``payload_ends`` i64[n] and the concatenated payloads. Pure: no I/O.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import orjson

from streamdp.input.events import EventBatch

MAGIC = b"SDPF"
VERSION = 2
LEGACY_VERSION = 1  # decoded with ``stream = None``: never accepted (see the module doc)
_HEAD = struct.Struct("<4sI")


class Payloads:
    """The raw payloads of a decoded record, sliced on demand (the coordinator needs only those it dead-letters)."""

    __slots__ = ("_blob", "_ends")

    def __init__(self, blob: bytes, ends: np.ndarray) -> None:
        self._blob, self._ends = blob, ends

    def __len__(self) -> int:
        return int(self._ends.size)

    def __getitem__(self, i: int) -> bytes:
        i = range(len(self))[i]  # bounds and negative indices as for a list
        return bytes(self._blob[(int(self._ends[i - 1]) if i else 0):int(self._ends[i])])

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __eq__(self, other) -> bool:
        return list(self) == list(other)


class Stream(NamedTuple):
    """The stream a forward record belongs to: the deployment's ``group_id`` and input topic (its checkpoint key)."""

    group: str
    topic: str


class ForwardError(ValueError):
    """A forward record that cannot be decoded (not written by a compatible stage A)."""


@dataclass
class ForwardRecord:
    """Valid events of input offsets ``[lo, hi]`` of input partition ``partition`` (see the module doc)."""

    partition: int
    lo: int
    hi: int  # the last input offset vouched for (≥ lo − 1: ``hi = lo − 1`` is an empty range)
    offsets: np.ndarray  # int64, input offsets of the valid events (increasing, within [lo, hi])
    payloads: "list[bytes] | Payloads"  # their raw payloads
    batch: EventBatch  # the parsed events; ``source_rows`` = 0..n−1 (index ``payloads``)
    # the deployment whose stage A wrote it (required to encode; ``None`` only for a decoded version-1 record)
    stream: Stream | None = None

    @property
    def next_offset(self) -> int:
        return self.hi + 1


def _codes(names: list, codes, dict_) -> tuple[list, np.ndarray]:
    if dict_ is not None and codes is not None:
        return list(dict_), np.asarray(codes, dtype=np.int32)
    uniq: dict = {}
    c = np.fromiter((uniq.setdefault(x, len(uniq)) for x in names), dtype=np.int32, count=len(names))
    return list(uniq), c


def encode(rec: ForwardRecord) -> bytes:
    b = rec.batch
    n = len(b)
    if rec.offsets.size != n or len(rec.payloads) != n:
        raise ValueError("offsets, payloads and batch must have one entry per event")
    if rec.hi < rec.lo - 1 or (n and (int(rec.offsets[0]) < rec.lo or int(rec.offsets[-1]) > rec.hi)):
        raise ValueError(f"event offsets outside the vouched range [{rec.lo}, {rec.hi}]")
    if rec.stream is None or not all(isinstance(x, str) for x in rec.stream) or len(rec.stream) != 2:
        raise ValueError("a forward record must name its stream (group id, input topic)")
    udict, ucodes = _codes(b.users, b.user_codes, b.user_dict)
    idict, icodes = _codes(b.items, b.item_codes, b.item_dict)
    head = orjson.dumps({"v": VERSION, "group": rec.stream[0], "topic": rec.stream[1],
                         "partition": int(rec.partition), "lo": int(rec.lo), "hi": int(rec.hi),
                         "n": n, "m": int(icodes.size), "users": udict, "items": idict})
    ends = np.cumsum(np.fromiter((len(p) for p in rec.payloads), dtype=np.int64, count=n))
    parts = [_HEAD.pack(MAGIC, len(head)), head,
             np.ascontiguousarray(rec.offsets, dtype="<i8").tobytes(),
             np.ascontiguousarray(b.ts, dtype="<f8").tobytes(),
             np.ascontiguousarray(b.value, dtype="<f8").tobytes(),
             np.ascontiguousarray(b.loc, dtype="<f8").reshape(n, 2).tobytes(),
             np.ascontiguousarray(b.item_offsets, dtype="<i8").tobytes(),
             ucodes.astype("<i4").tobytes(), icodes.astype("<i4").tobytes(),
             ends.astype("<i8").tobytes(), b"".join(bytes(p) for p in rec.payloads)]
    return b"".join(parts)


def decode(data: bytes) -> ForwardRecord:
    try:
        magic, hlen = _HEAD.unpack_from(data, 0)
        if magic != MAGIC:
            raise ForwardError("not a forward record (bad magic)")
        h = orjson.loads(data[_HEAD.size:_HEAD.size + hlen])
        v = h.get("v")
        if v == VERSION:
            stream = Stream(h["group"], h["topic"])
            if not (isinstance(stream.group, str) and isinstance(stream.topic, str)):
                raise ForwardError("forward record names no valid stream (group, topic)")
        elif v == LEGACY_VERSION:
            stream = None  # unattributable: refused by the coordinator (module doc)
        else:
            raise ForwardError(f"forward record version {v!r}, expected {VERSION}")
        n, m = int(h["n"]), int(h["m"])
        pos = _HEAD.size + hlen

        def take(dtype: str, count: int) -> np.ndarray:
            nonlocal pos
            a = np.frombuffer(data, dtype=dtype, count=count, offset=pos)
            pos += a.nbytes
            return a.astype(dtype[1:], copy=True)

        offsets, ts, value = take("<i8", n), take("<f8", n), take("<f8", n)
        loc = take("<f8", 2 * n).reshape(n, 2)
        item_offsets = take("<i8", n + 1)
        ucodes, icodes = take("<i4", n), take("<i4", m)
        ends = take("<i8", n)
        blob = data[pos:]
        if (ends[-1] if n else 0) != len(blob) or int(item_offsets[-1]) != m:
            raise ForwardError("forward record is truncated or inconsistent")
        udict, idict = h["users"], h["items"]
        ua, ia = np.asarray(udict, dtype=object), np.asarray(idict, dtype=object)
        payloads = Payloads(blob, ends)
        batch = EventBatch(users=ua[ucodes].tolist() if n else [], ts=ts, item_offsets=item_offsets,
                           items=ia[icodes].tolist() if m else [], value=value, loc=loc,
                           source_rows=np.arange(n, dtype=np.int64))
        batch.user_dict, batch.user_codes = udict, ucodes.astype(np.int64)
        batch.item_dict, batch.item_codes = idict, icodes.astype(np.int64)
        return ForwardRecord(int(h["partition"]), int(h["lo"]), int(h["hi"]), offsets, payloads, batch, stream)
    except ForwardError:
        raise
    except (struct.error, ValueError, KeyError, TypeError, IndexError, orjson.JSONDecodeError) as e:
        raise ForwardError(f"undecodable forward record: {e}") from None


def accept(lo: int, hi: int, offsets: np.ndarray, expected: int | None) -> int | None:
    """How many leading events of a forward record vouching for ``[lo, hi]`` (its events at input ``offsets``)
    the coordinator skips, or ``None`` to drop the record.

    ``expected``: the coordinator's next input offset of the record's partition (``None``: nothing consumed yet
    — accept from the record's start: the first record of an internal partition starts where the first ingest
    owner started). ``lo > expected``: drop (a gap: the owner's re-send is still to come); ``hi < expected``:
    drop (all seen); else skip the events below ``expected``."""
    if expected is None:
        return 0
    if lo > expected or hi < expected:
        return None
    return int(np.searchsorted(offsets, expected))


def refusal(stream: Stream | None, own: Stream) -> str | None:
    """Why the coordinator of stream ``own`` refuses a record of ``stream`` — ``"foreign"`` (another deployment's:
    the internal topic is shared), ``"unattributed"`` (format version 1: names no stream) — or ``None``: its own,
    judged by :func:`accept` next. A refused record is never ingested and moves none of ``own``'s input offsets."""
    if stream == own:
        return None
    return "unattributed" if stream is None else "foreign"
