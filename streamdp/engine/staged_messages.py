"""The messages between stage A and the coordinator of the staged split (docs/DECISIONS.md, "Scale-out: stage A
admits"): bytes only, versioned, compact (numpy arrays as little-endian bytes, names as one JSON list).

* :class:`PartContribution` — stage A → coordinator, one per (window t, input partition p) whose partition held
  events in t, sent once p's watermark passed t's end and t − 1's outcome was applied: the partition's window item
  dictionary, per query the per-item counts of ADMITTED contributions (codes into the dictionary) — with
  continual_sums' per-key sum increments, the geo and adaptive kinds' bounded points of admitted users, the grid
  kinds' admitted rows, emd_linear's per-user means and emd_frequency's featured item rows — and the
  sufficient statistics of the ledger's realised cost (users admitted, users charged, component-wise max and min
  of the admitted users' reservations), and counts of events, users admitted and refused. User names never cross.
* :class:`PartitionMarker` — stage A → coordinator: "p is closed through window ``through``" (every part of p for
  a window ≤ ``through`` was sent before it), p's watermark's last ended window, and ``final`` (end of input: p
  sends nothing more, so it holds no window back).
* :class:`WindowOutcome` — coordinator → every stage A, once per closed window: how it closed, whether the
  reserve-and-settle kinds settle, and per query what stage A needs to settle its own users and to prepare t + 1.

The item dictionary lists ALL items of p's events in window t — refused users' and items dropped by bounding
included — in order of first appearance (offset order, then position in the event): the single engine interns a
window's items in (partition, offset) order over all held events, and the tree's rows and the noise draws follow
the interned ids; the coordinator interns the parts' dictionaries in partition order and so gives every item the
id the single engine gives it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np
import orjson

from streamdp.accounting.cost import N_COMPONENTS

__all__ = ["PartContribution", "QueryPart", "PartitionMarker", "WindowOutcome", "decode", "PART", "MARKER",
           "OUTCOME"]

PART, MARKER, OUTCOME = b"SDPC", b"SDPM", b"SDPO"
_HEAD = struct.Struct("<HI")  # version, JSON header length
_MARK = struct.Struct("<Hqqq?")  # version, partition, through, watermark_through, final

_U32 = np.iinfo(np.uint32).max


def _check_version(data: bytes, magic: bytes, version: int, what: str) -> None:
    if bytes(data[:4]) != magic:
        raise ValueError(f"not a {what} message")
    (v,) = struct.unpack_from("<H", data, 4)
    if v != version:
        raise ValueError(f"{what} message version {v}, this build reads {version}")


@dataclass
class QueryPart:
    """One query's share of a part: per item of the dictionary (``codes``) the count of admitted contributions,
    and the realised-cost statistics over the partition's admitted users with a reservation in this query."""

    query: str
    codes: np.ndarray  # int64 codes into the part's item dictionary (distinct)
    counts: np.ndarray  # int64 ≥ 1
    admitted: int = 0  # admitted users with a reservation in this query
    charged: int = 0  # of which with a positive cost component (cost_summary's users charged)
    max_cost: np.ndarray = field(default_factory=lambda: np.zeros(N_COMPONENTS, dtype=np.int64))
    min_cost: np.ndarray = field(default_factory=lambda: np.zeros(N_COMPONENTS, dtype=np.int64))
    sums: np.ndarray | None = None  # int64 per code: continual_sums' admitted sum increments (grid units)
    points: np.ndarray | None = None  # float64 (n, 2): the geo kinds' bounded points of admitted users, no ids …
    order: np.ndarray | None = None  # … and each point's order key (uint64, a keyed hash: geo.canonical_points)
    point_ints: np.ndarray | None = None  # int64 (n, k) per point: the adaptive kinds' allocation r_i, cap P − C_i
    info: dict | None = None  # small JSON-able per-query facts (grid_means_bounded: users halted by its own filter)


@dataclass
class PartContribution:
    #: 3 (2026-12-07): the per-point float64 columns are any number k ≥ 0 (the header says how many: grid_means'
    #: (value, time) rows, emd_linear's d-dimensional per-user means, emd_frequency's integer-only rows) and a
    #: query may carry a small JSON object (``info``); 2: an optional int64 array of sum increments and an optional
    #: (n, 2) float64 array of points with their uint64 order keys and optional int64 columns per point
    #: (continual_sums, the geo kinds, the adaptive kinds); 1: codes and counts only
    VERSION = 3

    seq: int
    partition: int
    events: int
    admitted: int
    refused: int
    dropped_events: int  # events of refused users
    items: list[str]
    queries: list[QueryPart]

    def to_bytes(self) -> bytes:
        """``b"SDPC"``, version, JSON header length, the JSON header (scalars, the item dictionary as one list, per
        query its id, item count, statistics, whether sums follow, the number of points (−1 for none), the number of
        integer and of float columns per point and its ``info`` object or null), then per query its codes and counts
        as uint32 little-endian, its sums (if any) as int64 little-endian and its points (if any) as float64
        little-endian rows (k columns each) followed by their order keys as uint64 little-endian and their integer
        columns (if any) as int64 little-endian, row by row."""
        qs = []
        arrays = []
        for q in self.queries:
            codes, counts = np.asarray(q.codes, dtype=np.int64), np.asarray(q.counts, dtype=np.int64)
            if codes.size and (codes.max() > _U32 or counts.max() > _U32 or codes.min() < 0 or counts.min() < 0):
                raise ValueError("part codes and counts must fit in uint32")
            blob = codes.astype("<u4").tobytes() + counts.astype("<u4").tobytes()
            if q.sums is not None:
                sums = np.asarray(q.sums, dtype=np.int64)
                if sums.shape != codes.shape:
                    raise ValueError("part sums must have one entry per code")
                blob += sums.astype("<i8").tobytes()
            n_points = n_cols = 0
            if q.points is not None:
                pts = np.asarray(q.points, dtype=np.float64)
                if pts.ndim != 2:
                    raise ValueError("part points must be a 2-d array (one row per point)")
                n_points, n_cols = int(pts.shape[0]), int(pts.shape[1])
                order = np.zeros(n_points, dtype=np.uint64) if q.order is None else np.asarray(q.order)
                if order.shape != (n_points,):
                    raise ValueError("part points need one order key each")
                blob += np.ascontiguousarray(pts, dtype="<f8").tobytes() + order.astype("<u8").tobytes()
            n_ints = 0
            if q.point_ints is not None:
                ints = np.asarray(q.point_ints, dtype=np.int64)
                if q.points is None or ints.ndim != 2 or ints.shape[0] != n_points or ints.shape[1] == 0:
                    raise ValueError("part point_ints need points and one row of ≥ 1 columns per point")
                n_ints = int(ints.shape[1])
                blob += np.ascontiguousarray(ints, dtype="<i8").tobytes()
            qs.append([q.query, int(codes.size), int(q.admitted), int(q.charged),
                       [int(x) for x in q.max_cost], [int(x) for x in q.min_cost], q.sums is not None,
                       -1 if q.points is None else n_points, n_ints, n_cols, q.info])
            arrays.append(blob)
        head = orjson.dumps({"seq": int(self.seq), "partition": int(self.partition), "events": int(self.events),
                             "admitted": int(self.admitted), "refused": int(self.refused),
                             "dropped_events": int(self.dropped_events), "items": list(self.items),
                             "queries": qs})
        return PART + _HEAD.pack(self.VERSION, len(head)) + head + b"".join(arrays)

    @classmethod
    def from_bytes(cls, data: bytes) -> "PartContribution":
        _check_version(data, PART, cls.VERSION, "part-contribution")
        _, n_head = _HEAD.unpack_from(data, 4)
        at = 4 + _HEAD.size
        head = orjson.loads(data[at:at + n_head])
        at += n_head
        queries = []
        for qid, n, admitted, charged, mx, mn, has_sums, n_points, n_ints, n_cols, info in head["queries"]:
            codes = np.frombuffer(data, dtype="<u4", count=n, offset=at).astype(np.int64)
            at += 4 * n
            counts = np.frombuffer(data, dtype="<u4", count=n, offset=at).astype(np.int64)
            at += 4 * n
            sums = points = order = None
            if has_sums:
                sums = np.frombuffer(data, dtype="<i8", count=n, offset=at).astype(np.int64)
                at += 8 * n
            if n_points >= 0:
                points = np.frombuffer(data, dtype="<f8", count=n_cols * n_points, offset=at).astype(np.float64)
                points = points.reshape(n_points, n_cols)
                at += 8 * n_cols * n_points
                order = np.frombuffer(data, dtype="<u8", count=n_points, offset=at).astype(np.uint64)
                at += 8 * n_points
            ints = None
            if n_ints:
                ints = np.frombuffer(data, dtype="<i8", count=n_ints * n_points, offset=at).astype(np.int64)
                ints = ints.reshape(n_points, n_ints)
                at += 8 * n_ints * n_points
            queries.append(QueryPart(qid, codes, counts, admitted, charged, np.asarray(mx, dtype=np.int64),
                                     np.asarray(mn, dtype=np.int64), sums, points,
                                     order if n_points >= 0 else None, ints, info))
        if at != len(data):
            raise ValueError("part-contribution message has trailing bytes")
        if any(q.codes.size and q.codes.max() >= len(head["items"]) for q in queries):
            raise ValueError("part-contribution codes outside its item dictionary")
        return cls(seq=head["seq"], partition=head["partition"], events=head["events"], admitted=head["admitted"],
                   refused=head["refused"], dropped_events=head["dropped_events"], items=head["items"],
                   queries=queries)


@dataclass
class PartitionMarker:
    VERSION = 1

    partition: int
    through: int  # every part of this partition for a window ≤ through was sent before this marker
    watermark_through: int  # the last window the partition's watermark has passed (the records' closed_by)
    final: bool = False  # end of input: the partition sends nothing more

    def to_bytes(self) -> bytes:
        return MARKER + _MARK.pack(self.VERSION, self.partition, self.through, self.watermark_through, self.final)

    @classmethod
    def from_bytes(cls, data: bytes) -> "PartitionMarker":
        _check_version(data, MARKER, cls.VERSION, "partition-marker")
        if len(data) != 4 + _MARK.size:
            raise ValueError("partition-marker message of the wrong length")
        _, p, through, wm, final = _MARK.unpack_from(data, 4)
        return cls(partition=p, through=through, watermark_through=wm, final=bool(final))


@dataclass
class WindowOutcome:
    VERSION = 1

    seq: int
    closed_by: str
    settle: bool  # the admitted users of the window settle (some actual cost differs from its reservation)
    queries: dict  # query id → what stage A needs of its release (count_halves.outcome_info), for those with any

    def to_bytes(self) -> bytes:
        head = orjson.dumps({"seq": int(self.seq), "closed_by": self.closed_by, "settle": bool(self.settle),
                             "queries": self.queries})
        return OUTCOME + _HEAD.pack(self.VERSION, len(head)) + head

    @classmethod
    def from_bytes(cls, data: bytes) -> "WindowOutcome":
        _check_version(data, OUTCOME, cls.VERSION, "window-outcome")
        _, n_head = _HEAD.unpack_from(data, 4)
        head = orjson.loads(data[4 + _HEAD.size:4 + _HEAD.size + n_head])
        return cls(seq=head["seq"], closed_by=head["closed_by"], settle=head["settle"], queries=head["queries"])


def decode(data: bytes):
    """Any of the three messages from its bytes (by its magic)."""
    magic = bytes(data[:4])
    if magic == PART:
        return PartContribution.from_bytes(data)
    if magic == MARKER:
        return PartitionMarker.from_bytes(data)
    if magic == OUTCOME:
        return WindowOutcome.from_bytes(data)
    raise ValueError(f"unknown staged message {magic!r}")
