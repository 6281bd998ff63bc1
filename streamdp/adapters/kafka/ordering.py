"""Canonical ingestion order: the worker's releases do not depend on how Kafka interleaves partitions.

The release engine interns user and item names in the order it first sees them, and its random choices (the Δ0
subset of contribution bounding, the noise of new tree nodes) follow those ids. A worker consuming several
partitions sees them interleaved by fetch timing, so feeding the engine straight from ``getmany`` would make the
(deterministic-test-mode) releases depend on timing, on the number of workers and on where a crash happened —
and "results with two workers must equal results with one" (DESIGN.md §4) would not hold.

:class:`CanonicalStage` therefore holds parsed events back, per window and per Kafka partition, and hands a window
to the engine only when it is due, in the order (window, partition, offset): a function of the topic's contents
alone. The watermark (DESIGN.md §2) is computed here from the Kafka partitions (max event time per partition minus
the allowed lateness, minimum over the partitions the worker holds; a partition that has not delivered an event
yet holds it back, like a silent one, until ``idle_timeout``); the engine is then stepped window by window:
its watermark is advanced to the window's end and :meth:`ReleaseEngine.close_due` closes exactly that window.

Rejections happen on arrival with the engine's own rules and reason codes: ``late`` (the window is closed),
``before_origin`` and ``too_far_in_future`` (more than ``max_future_seconds`` after the newest time accepted
before it: the partition's own newest event time, else the watermark, else the batch's upper median — see
:func:`~streamdp.windows.tumbling.stream_position` — or an earlier accepted event of the same batch, see
:func:`~streamdp.windows.tumbling.absurd_times`; or more than ``max_future_seconds`` past the wall clock); they are
counted in the engine's counters. Determinism holds when each partition's disorder stays within
``allowed_lateness`` (then no event is late, whatever the timing), no idle timeout fires, no event is stamped
more than ``max_future_seconds`` ahead of the clock (such an event can be judged differently by a later replay),
and no event is more than ``max_future_seconds`` after the events a partition delivered before it while it had no
accepted event and no watermark existed: that judgement follows the first batch's median, so where the first
fetch cut the records decides it (a jump of 49 days inside a partition's first 13 records was accepted read as
one batch and dead-lettered read as two: review of 2026-11-23, left as a documented condition).
"""

from __future__ import annotations

import math
import struct
import time

import numpy as np
import orjson

from streamdp.engine import state_codec
from streamdp.engine.append_log import AppendLog
from streamdp.engine.engine import ReleaseEngine, WindowSummary
from streamdp.input.events import EventBatch
from streamdp.windows.tumbling import absurd_times, stream_position

ENGINE_PARTITION = 0  # the engine sees one (already ordered) stream; watermarks per Kafka partition live here


def take_rows(b: EventBatch, rows: np.ndarray) -> EventBatch:
    """The sub-batch of rows ``rows`` (sorted row indices) of ``b``. The parser's interning help (per-batch
    dictionaries and codes, :class:`EventBatch`) is carried: the sub-batch keeps the dictionaries and takes the
    codes of its rows."""
    rows = np.asarray(rows, dtype=np.int64)
    if rows.size == len(b):
        return b
    offs = b.item_offsets
    starts = offs[rows]
    lens = offs[rows + 1] - starts
    new_offs = np.zeros(rows.size + 1, dtype=np.int64)
    np.cumsum(lens, out=new_offs[1:])
    idx = np.repeat(starts - new_offs[:-1], lens) + np.arange(int(new_offs[-1]), dtype=np.int64)
    items = b.items
    users = b.users
    out = EventBatch(users=[users[i] for i in rows.tolist()], ts=b.ts[rows], item_offsets=new_offs,
                     items=[items[i] for i in idx.tolist()], value=b.value[rows], loc=b.loc[rows],
                     source_rows=b.source_rows[rows])
    if b.user_codes is not None and b.item_codes is not None:
        out.user_dict, out.user_codes = b.user_dict, b.user_codes[rows]
        out.item_dict, out.item_codes = b.item_dict, b.item_codes[idx]
    return out


def _concat_codes(bs: list[EventBatch], names: str) -> tuple[list, np.ndarray]:
    """One dictionary and the codes into it for the ``names`` ("user" or "item") of the batches ``bs``, in order.

    Batches cut from one parsed batch share its dictionary (the same list object): it is included once, and only
    with the entries its batches here use when that is fewer than their codes (the engine looks up every entry of
    the dictionary, so a window would otherwise pay for the names of a whole fetched batch). A batch without codes
    contributes its names as entries of their own (repeated entries are allowed, see
    :meth:`streamdp.engine.query.Names.ids_coded`)."""
    groups: dict[int, list[int]] = {}  # dictionary object → positions in bs
    for k, b in enumerate(bs):
        if getattr(b, f"{names}_codes") is not None:
            groups.setdefault(id(getattr(b, f"{names}_dict")), []).append(k)
    dictionary: list = []
    codes: list = [None] * len(bs)
    for ks in groups.values():
        d = getattr(bs[ks[0]], f"{names}_dict")
        cs = [np.asarray(getattr(bs[k], f"{names}_codes"), dtype=np.int64) for k in ks]
        base = len(dictionary)
        if len(d) > sum(c.size for c in cs):  # compact: only the entries used here, codes renumbered
            used = np.zeros(len(d), dtype=bool)
            for c in cs:
                used[c] = True
            renumber = np.cumsum(used) - 1 + base
            dictionary.extend([d[i] for i in np.flatnonzero(used).tolist()])
            for k, c in zip(ks, cs):
                codes[k] = renumber[c]
        else:
            dictionary.extend(d)
            for k, c in zip(ks, cs):
                codes[k] = c + base
    for k, b in enumerate(bs):
        if codes[k] is None:
            own = b.users if names == "user" else b.items
            codes[k] = len(dictionary) + np.arange(len(own), dtype=np.int64)
            dictionary.extend(own)
    return dictionary, np.concatenate(codes) if codes else np.zeros(0, dtype=np.int64)


def concat_batches(bs: list[EventBatch], *, codes: bool = True) -> EventBatch:
    """The batches ``bs`` one after the other. With ``codes`` and when one of them carries the parser's interning
    help, so does the result (dictionaries concatenated, codes offset; see :func:`_concat_codes`)."""
    if len(bs) == 1:
        b = bs[0]
        if not codes or b.user_codes is None or b.item_codes is None or (
                len(b.user_dict) <= len(b) and len(b.item_dict) <= len(b.items)):
            return b
    users: list[str] = []
    items: list[str] = []
    offs = [np.zeros(1, dtype=np.int64)]
    base = 0
    for b in bs:
        users.extend(b.users)
        items.extend(b.items)
        offs.append(b.item_offsets[1:] + base)
        base += int(b.item_offsets[-1])
    out = EventBatch(users=users, ts=np.concatenate([b.ts for b in bs]), item_offsets=np.concatenate(offs),
                     items=items, value=np.concatenate([b.value for b in bs]),
                     loc=np.concatenate([b.loc for b in bs]).reshape(-1, 2),
                     source_rows=np.concatenate([b.source_rows for b in bs]))
    if codes and any(b.user_codes is not None and b.item_codes is not None for b in bs):
        out.user_dict, out.user_codes = _concat_codes(bs, "user")
        out.item_dict, out.item_codes = _concat_codes(bs, "item")
    return out


def batch_state(b: EventBatch) -> dict:
    # name lists as one JSON blob each: the snapshot codec would otherwise walk every string
    return {"users": orjson.dumps(b.users), "ts": b.ts, "item_offsets": b.item_offsets,
            "items": orjson.dumps(b.items), "value": b.value, "loc": b.loc}


def batch_from_state(d: dict) -> EventBatch:
    users = orjson.loads(d["users"])
    n = len(users)
    return EventBatch(users=users, ts=np.asarray(d["ts"], dtype=np.float64),
                      item_offsets=np.asarray(d["item_offsets"], dtype=np.int64), items=orjson.loads(d["items"]),
                      value=np.asarray(d["value"], dtype=np.float64),
                      loc=np.asarray(d["loc"], dtype=np.float64).reshape(-1, 2),
                      source_rows=np.arange(n, dtype=np.int64))


class PartitionWatermarks:
    """Watermark over Kafka partitions: min over held partitions of (max event time − allowed lateness).

    A registered partition that has not delivered an event holds the watermark at −∞; a partition silent for more
    than ``idle_timeout`` seconds of wall clock stops holding it (DESIGN.md §2).
    """

    def __init__(self, allowed_lateness: float = 0.0, idle_timeout: float | None = None) -> None:
        self.lateness = float(allowed_lateness)
        self.idle_timeout = idle_timeout
        self.max_ts: dict[int, float] = {}
        self._last_seen: dict[int, float] = {}
        # partitions the worker has paused (watermark alignment): silent because paused, never idle — they keep
        # holding the watermark, so their unread events cannot turn late while they wait (replaced, not mutated)
        self.pinned: frozenset[int] = frozenset()

    def register(self, partitions, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        for p in partitions:
            self.max_ts.setdefault(int(p), -math.inf)
            self._last_seen.setdefault(int(p), now)

    def touch(self, partition: int, now: float | None = None) -> None:
        """The partition delivered events, accepted or not: it is not idle (TumblingWindows.touch)."""
        self._last_seen[int(partition)] = time.monotonic() if now is None else now

    def observe(self, partition: int, max_ts: float, now: float | None = None) -> None:
        p = int(partition)
        if max_ts > self.max_ts.get(p, -math.inf):
            self.max_ts[p] = float(max_ts)
        self._last_seen[p] = time.monotonic() if now is None else now

    def watermark(self, now: float | None = None) -> float:
        if not self.max_ts:
            return -math.inf
        parts = list(self.max_ts)
        if self.idle_timeout is not None and len(parts) > 1:
            now = time.monotonic() if now is None else now
            pinned = self.pinned
            active = [p for p in parts if p in pinned or now - self._last_seen.get(p, now) <= self.idle_timeout]
            parts = active or parts
        return min(self.max_ts[p] for p in parts) - self.lateness

    def state(self) -> dict:
        return {"max_ts": {str(p): v for p, v in self.max_ts.items()}}

    def load_state(self, d: dict, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self.max_ts = {int(p): float(v) for p, v in d["max_ts"].items()}
        self._last_seen = {p: now for p in self.max_ts}


class CanonicalStage:
    """Holds parsed events per (window, partition) and steps the engine window by window (see module doc)."""

    def __init__(self, engine: ReleaseEngine) -> None:
        self.engine = engine
        c = engine.config
        self.wm = PartitionWatermarks(c.allowed_lateness, c.idle_timeout)
        self.held: dict[int, dict[int, list[EventBatch]]] = {}
        self.held_events = 0
        # (window, partition) → the encoded frames of its first held batches (see state(): append logs)
        self._frames: dict[tuple[int, int], list[bytes]] = {}
        self._framed: dict[tuple[int, int], int] = {}  # … and how many held batches they cover

    # ---- arrival -------------------------------------------------------------------------------------------
    def _reject(self, reason: str, k: int) -> None:
        c = self.engine.counters
        c.events_in += k
        c.dead(reason, k)
        if reason == "late":
            c.late += k

    def add(self, partition: int, batch: EventBatch, now: float | None = None) -> list[tuple[int, str]]:
        """Hold a parsed batch of one partition. Returns (row, reason) for rows rejected on arrival."""
        n = len(batch)
        if n == 0:
            return []
        W, c = self.engine.windows, self.engine.config
        # where the stream is: this partition's own newest accepted time (never behind the watermark over the
        # partitions), else the watermark, else the batch's upper median; absurd_times then credits the batch's own
        # in-order progress
        wm = self.wm.watermark(now)
        own = self.wm.max_ts.get(int(partition), -math.inf)
        pos = stream_position(batch.ts, max(wm, own - c.allowed_lateness), c.allowed_lateness)
        future = absurd_times(batch.ts, pos, c.max_future_seconds, time.time())
        t = W.window_of(batch.ts)
        reasons = np.full(n, None, dtype=object)
        reasons[t <= W.last_closed] = "late"
        reasons[t < 1] = "before_origin"
        reasons[future & (reasons == None)] = "too_far_in_future"  # noqa: E711
        no_value = self.engine.missing_value(batch)  # the engine's own content rule, applied on arrival
        if no_value is not None:
            reasons[no_value & (reasons == None)] = "missing_value"  # noqa: E711
        ok = reasons == None  # noqa: E711
        rejected = [(int(i), str(reasons[i])) for i in np.flatnonzero(~ok)]
        for r in set(r for _, r in rejected):
            self._reject(r, sum(1 for _, x in rejected if x == r))
        self.wm.touch(partition, now)  # delivering, even if nothing is accepted: not idle
        rows = np.flatnonzero(ok)
        if rows.size == 0:
            return rejected
        tw = t[rows]
        for w in np.unique(tw).tolist():
            sel = rows[tw == w]
            self.held.setdefault(int(w), {}).setdefault(int(partition), []).append(take_rows(batch, sel))
        self.held_events += int(rows.size)
        self.wm.observe(partition, float(batch.ts[rows].max()), now)
        return rejected

    # ---- release -------------------------------------------------------------------------------------------
    def due_until(self, now: float | None = None, flush: bool = False) -> int:
        """The last window that may close now (``flush``: every window holding events)."""
        W = self.engine.windows
        if flush:
            return max([W.last_closed] + list(self.held))
        wm = self.wm.watermark(now)
        if not math.isfinite(wm):
            return W.last_closed
        return max(W.last_closed, W.last_ended(wm))

    def release(self, now: float | None = None, flush: bool = False) -> list[WindowSummary]:
        """Feed and close every due window in order; each window's events go in (partition, offset) order."""
        eng = self.engine
        W = eng.windows
        last = self.due_until(now, flush)
        out: list[WindowSummary] = []
        for t in range(W.last_closed + 1, last + 1):
            end = W.bounds(t)[1]
            # the engine's watermark reaches exactly the end of window t
            W.observe(W.time_for_watermark(end), ENGINE_PARTITION, now)
            # one ingest per window: the held batches in (partition, offset) order, concatenated — the engine
            # interns names in order of first appearance, so this equals ingesting them one by one, with one
            # dictionary lookup per window instead of one per held batch
            bs = [b for _, pbs in sorted(self.held.get(t, {}).items()) for b in pbs]
            if bs:
                b = concat_batches(bs)
                rej = eng.ingest(b, ENGINE_PARTITION, now)
                if rej:  # cannot happen: the window is open and its events lie before its end
                    raise AssertionError(f"engine rejected held events of window {t}: {rej[:3]}")
                self.held_events -= len(b)
            for p in self.held.pop(t, {}):
                self._frames.pop((t, p), None)
                self._framed.pop((t, p), None)
            out.extend(eng.close_due(now))
        return out

    # ---- state ---------------------------------------------------------------------------------------------
    def state(self) -> dict:
        """Watermarks and held events. Each (window, partition)'s held batches are one
        :class:`~streamdp.engine.append_log.AppendLog` of length-prefixed encoded batches: batches only ever join
        the end of their list until the window closes, so a checkpoint appends the new arrivals (and drops the logs
        of closed windows) instead of rewriting every held event. Each batch is encoded once."""
        held: dict[str, dict[str, AppendLog]] = {}
        for t, parts in self.held.items():
            held[str(t)] = {}
            for p, bs in parts.items():
                frames = self._frames.setdefault((t, p), [])
                done = self._framed.get((t, p), 0)
                for b in bs[done:]:
                    blob = state_codec.encode(batch_state(b))
                    frames.append(_FRAME.pack(len(blob)) + blob)
                self._framed[(t, p)] = len(bs)
                if len(frames) > 1:
                    frames[:] = [b"".join(frames)]
                held[str(t)][str(p)] = AppendLog(frames[0] if frames else b"")
        return {"wm": self.wm.state(), "held": held}

    def load_state(self, d: dict, now: float | None = None) -> None:
        self.wm.load_state(d["wm"], now)
        self.held, self._frames, self._framed = {}, {}, {}
        for t, parts in d["held"].items():
            for p, blob in parts.items():
                key = (int(t), int(p))
                if isinstance(blob, dict):  # checkpoint format 1: one batch_state per (window, partition)
                    bs = [batch_from_state(blob)]
                else:
                    bs = _unframe(bytes(blob))
                    self._frames[key], self._framed[key] = [bytes(blob)], len(bs)
                self.held.setdefault(key[0], {})[key[1]] = bs
        self.held_events = sum(len(b) for parts in self.held.values() for bs in parts.values() for b in bs)


_FRAME = struct.Struct("<Q")


def _unframe(blob: bytes) -> list[EventBatch]:
    out, at = [], 0
    while at < len(blob):
        if at + _FRAME.size > len(blob):
            raise ValueError("held-events log ends inside a frame header")
        (n,) = _FRAME.unpack_from(blob, at)
        at += _FRAME.size
        if at + n > len(blob):
            raise ValueError("held-events log ends inside a frame")
        out.append(batch_from_state(state_codec.decode(blob[at:at + n])))
        at += n
    return out
