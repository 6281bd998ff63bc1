"""Event-time tumbling windows and the watermark (DESIGN.md §2).

Windows are ``[origin + (t−1)·length, origin + t·length)`` for t = 1, 2, …. The watermark is the maximum event
time seen minus the allowed lateness; with several partitions it is the minimum over partitions, ignoring a
partition that has been idle (no event) for longer than ``idle_timeout`` seconds of wall-clock time. Window t
closes when the watermark reaches its end, exactly once: :meth:`TumblingWindows.due` hands out each window number
once, in order, and a closed window never reopens (its late events are rejected by :meth:`assign`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np


def stream_position(ts: np.ndarray, watermark: float, allowed_lateness: float) -> float:
    """Where the stream is in event time, to judge a batch's timestamps against (DESIGN.md §6 "absurd
    timestamps"): the watermark plus the allowed lateness (the newest event time seen) once a watermark exists;
    before that, the batch's upper median — a time most of the batch agrees on, which one outlier cannot move."""
    if math.isfinite(watermark):
        return watermark + allowed_lateness
    ts = np.asarray(ts, dtype=np.float64)
    k = ts.size // 2
    return float(np.partition(ts, k)[k])


def absurd_times(ts: np.ndarray, position: float, max_future: float | None,
                 now: float | None = None) -> np.ndarray:
    """The too-far-in-the-future mask of a batch against the stream's ``position`` and the wall clock ``now``.

    Absolute: more than ``max_future`` seconds after ``now`` (Unix time; None: not checked). Whatever the
    position, such a time has not happened yet. Before any watermark exists the position is the batch's own median,
    so a first fetch of ONE record with a far-future time used to be its own reference: it closed every window up
    to it (11k one-day windows for a 2042 event in the 2026-11-23 input review) and made the rest of the stream
    late. A time refused this way is not a reference either. A crash replay re-judges an event against a later
    clock, so an event that was in the future by just over ``max_future`` can be accepted on the replay: only
    events stamped ahead of the clock are ever judged differently.

    Future: more than ``max_future`` seconds after the newest time accepted so far — the position, or an earlier
    event of the same batch (in batch order) that was itself accepted. A batch's own in-order progress therefore
    counts: a backfill whose one fetch spans months, or a partition whose backlog arrives in one fetch, is accepted
    event by event, while one absurd time is still refused (it is not within ``max_future`` of anything accepted
    before it, and a refused time does not become the reference). Without it, one absurd time in a first batch
    would set the watermark (every window up to it due at once, every later event late). ``max_future = None``
    disables it. (Times before the configured origin are refused as ``before_origin`` by their window number.)"""
    ts = np.asarray(ts, dtype=np.float64)
    if max_future is None:
        return np.zeros(ts.size, dtype=bool)
    cap = math.inf if now is None else now + max_future
    future = (ts > position + max_future) | (ts > cap)
    if future.any():
        future = _chained(ts, future, position, max_future, cap)
    return future


def rejection_detail(reason: str, ts: float, windows: "TumblingWindows", max_future: float | None) -> str:
    """The ``detail`` of a dead letter rejected for its time (``late``, ``before_origin``, ``too_far_in_future``):
    the event time and the rule it broke, for operators (never the payload's contents beyond its time)."""
    if reason == "late":
        t = windows.window_of(np.array([ts]))[0]
        return f"event time {ts!r} falls in window {t}, already closed (last closed window {windows.last_closed})"
    if reason == "before_origin":
        return f"event time {ts!r} is before the windows' origin {windows.origin!r}"
    if reason == "too_far_in_future":
        return (f"event time {ts!r} is more than max_future_seconds = {max_future!r} past the newest time accepted "
                "before it, or past the current time")
    if reason == "missing_value":
        return "the event has items but no 'value', which a continual_sums query with a value_range sums"
    return ""


def _chained(ts: np.ndarray, future: np.ndarray, position: float, max_future: float,
             cap: float = math.inf) -> np.ndarray:
    """``future`` refined in batch order: an event counts as too far ahead only if it is more than ``max_future``
    after the newest time accepted before it (the position, or an accepted earlier event of the batch), or past
    ``cap`` (the wall clock's limit, never credited). Runs only for a batch with a flagged event; the events before
    the first flagged one are accepted as they were."""
    first = int(np.argmax(future))
    ref = max(position, float(ts[:first].max())) if first else position
    out = future.copy()
    for i, x in enumerate(ts[first:].tolist(), first):  # sequential: each decision moves the reference
        if x > ref + max_future or x > cap:
            out[i] = True
        else:
            out[i] = False
            if x > ref:
                ref = x
    return out


@dataclass
class TumblingWindows:
    length: float
    origin: float
    allowed_lateness: float = 0.0
    idle_timeout: float | None = None
    last_closed: int = 0
    _max_ts: dict = field(default_factory=dict)  # partition -> max event time seen
    _last_seen: dict = field(default_factory=dict)  # partition -> wall clock of the last event

    def __post_init__(self) -> None:
        if not (self.length > 0 and math.isfinite(self.length)):
            raise ValueError(f"window length must be > 0, got {self.length}")
        if isinstance(self.origin, bool) or not isinstance(self.origin, (int, float)) or not math.isfinite(self.origin):
            raise ValueError(f"origin must be a finite event time (the start of window 1), got {self.origin!r}: "
                             "windows are numbered from a configured, public time (DESIGN.md §2)")
        self.origin = float(self.origin)
        if self.allowed_lateness < 0:
            raise ValueError("allowed_lateness must be ≥ 0")

    # ---- numbering -----------------------------------------------------------------------------------------
    def _end(self, t):
        """The end of window t (t may be an array): THE definition of the boundaries, which :meth:`window_of` and
        :meth:`last_ended` agree with exactly, in floats (monotone in t)."""
        return self.origin + t * self.length

    def window_of(self, ts: np.ndarray) -> np.ndarray:
        """The window t with ``bounds(t)[0] ≤ ts < bounds(t)[1]``, in floats. The quotient (ts − origin)/length is
        only a first guess: for a length that is not a binary fraction (0.7 s, 86400/7 s) it can land one window off
        at a boundary, which would put an event at a window's end inside it (and a window due at its end not yet)."""
        ts = np.asarray(ts, dtype=np.float64)
        t = np.floor((ts - self.origin) / self.length).astype(np.int64) + 1
        t += ts >= self._end(t)
        t -= ts < self._end(t - 1)
        return t

    def last_ended(self, wm: float) -> int:
        """The last window t whose end ``bounds(t)[1]`` is ≤ ``wm`` (the same float boundaries as
        :meth:`window_of`)."""
        t = int(math.floor((wm - self.origin) / self.length))
        if self._end(t + 1) <= wm:
            t += 1
        elif self._end(t) > wm:
            t -= 1
        return t

    def bounds(self, t: int) -> tuple[float, float]:
        return self._end(t - 1), self._end(t)

    # ---- watermark -----------------------------------------------------------------------------------------
    def touch(self, partition: int = 0, now: float | None = None) -> None:
        """The partition delivered events (accepted or not): it is not idle. A partition whose events are all
        rejected — late ones after it was silent — used to stay idle, so windows kept closing past it and its whole
        backlog became late (review of 2026-11-23)."""
        self._last_seen[partition] = time.monotonic() if now is None else now

    def observe(self, max_ts: float, partition: int = 0, now: float | None = None) -> None:
        prev = self._max_ts.get(partition, -math.inf)
        if max_ts > prev:
            self._max_ts[partition] = max_ts
        self._last_seen[partition] = time.monotonic() if now is None else now

    @property
    def watermark(self) -> float:
        return self.watermark_at()

    def watermark_at(self, now: float | None = None) -> float:
        if not self._max_ts:
            return -math.inf
        parts = list(self._max_ts)
        if self.idle_timeout is not None and len(parts) > 1:
            now = time.monotonic() if now is None else now
            active = [p for p in parts if now - self._last_seen.get(p, now) <= self.idle_timeout]
            parts = active or parts
        return min(self._max_ts[p] for p in parts) - self.allowed_lateness

    def time_for_watermark(self, wm: float) -> float:
        """An event time whose watermark (time − allowed lateness, in floats) is ≥ ``wm``: the first float from
        ``wm + lateness`` upward that qualifies (a float below it may qualify too; its watermark is the same).
        Adding the lateness and subtracting it again can land one ulp below ``wm`` (0.7·5 + 1.1 − 1.1 < 3.5), which
        would leave the window ending at ``wm`` open."""
        x = wm + self.allowed_lateness
        while x - self.allowed_lateness < wm:
            x = math.nextafter(x, math.inf)
        return x

    def flush(self) -> None:
        """End of input (bounded source): let every window up to the one holding the newest event close."""
        if self._max_ts:
            top = max(self._max_ts.values())
            x = self.time_for_watermark(self._end(int(self.window_of(top))))
            for p in self._max_ts:
                self._max_ts[p] = max(self._max_ts[p], x)

    def due(self, now: float | None = None) -> list[int]:
        """Window numbers that the watermark has passed and that were not closed yet (each returned once)."""
        wm = self.watermark_at(now)
        if not math.isfinite(wm):
            return []
        last = self.last_ended(wm)  # window t closes when wm ≥ its end
        out = list(range(self.last_closed + 1, last + 1))
        if out:
            self.last_closed = out[-1]
        return out

    # ---- state ---------------------------------------------------------------------------------------------
    def state(self) -> dict:
        return {"length": self.length, "origin": self.origin, "allowed_lateness": self.allowed_lateness,
                "idle_timeout": self.idle_timeout, "last_closed": self.last_closed,
                "max_ts": {str(k): v for k, v in self._max_ts.items()}}

    @classmethod
    def from_state(cls, d: dict) -> "TumblingWindows":
        w = cls(d["length"], d["origin"], d["allowed_lateness"], d["idle_timeout"], d["last_closed"])
        w._max_ts = {int(k): v for k, v in d["max_ts"].items()}
        return w
