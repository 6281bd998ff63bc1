"""Event-time tumbling windows and the per-partition watermarks (contract §2).

Windows are ``[origin + (t−1)·length, origin + t·length)`` for t = 1, 2, …. Each input partition has its own
watermark: the newest event time accepted so far in that partition, in offset order, minus the allowed lateness.
An event is judged on arrival against its own partition's watermark AT THAT EVENT (:meth:`TumblingWindows.judge`,
vectorised over a batch: a running maximum), so which events are late is a function of each partition's record
sequence alone — never of where a batch, fetch or step was cut, of the interleaving of partitions, or of crashes.
An event is ``late`` when its window has ended at or before its partition's watermark at that event (Kafka Streams'
stream time and grace: window end + allowed lateness ≤ the newest time seen), or when its window was closed already.

Window t closes when every partition's watermark has passed its end (:meth:`TumblingWindows.due_until`: the
minimum over the partitions that hold it), exactly once and in order; a closed window never reopens. Two things
can close a window before every partition's watermark passed it, and then events of that partition for it are
late although their own partition had not passed it: a partition that delivered nothing for ``idle_timeout``
seconds of wall clock stops holding the watermark (the one wall-clock rule), and an end of input closes every
open window when asked (the records say ``closed_by: end_of_input``).

The per-partition state — one newest event time per partition — is what a staged topology can carry across an
internal topic as watermark markers: a stage that receives (partition, newest time) pairs can merge them with
:meth:`TumblingWindows.observe` and close exactly the same windows.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

#: the default ``max_future_seconds`` is this many windows, within [MIN_FUTURE, MAX_FUTURE] seconds
FUTURE_WINDOWS = 1000
MIN_FUTURE = 7 * 86400.0
MAX_FUTURE = 30 * 86400.0


def default_max_future(window_seconds: float) -> float:
    """The default ``max_future_seconds`` for windows of ``window_seconds``: 1,000 windows, at least 7 days (a
    partition silent for longer than this in event time has its next events refused, so the limit must exceed the
    quiet spells of ordinary streams: nights, weekends) and at most 30 days. One accepted event can move its
    partition's watermark at most this far ahead of the newest event before it, or of the wall clock."""
    return float(min(MAX_FUTURE, max(MIN_FUTURE, FUTURE_WINDOWS * float(window_seconds))))


def absurd_times(ts: np.ndarray, position: float, max_future: float | None,
                 now: float | None = None) -> np.ndarray:
    """The too-far-in-the-future mask of one partition's events ``ts`` (in offset order) that follow the newest
    time accepted before them, ``position`` (−∞: none yet), against the wall clock ``now``.

    Absolute: more than ``max_future`` seconds after ``now`` (Unix time; None: not checked). Whatever the
    partition's position, such a time has not happened yet; it is the only judgement a partition's first event
    gets. A crash replay re-judges an event against a later clock, so an event that was in the future by just over
    ``max_future`` can be accepted on the replay: only events stamped ahead of the clock are ever judged
    differently (docs/DECISIONS.md, "Event time").

    Relative: more than ``max_future`` seconds after the newest time accepted before it in its partition — the
    position, or an earlier event of the same batch that was itself accepted. A partition's own in-order progress
    therefore counts: a backfill whose one fetch spans months is accepted event by event, while one absurd time is
    refused (it is not within ``max_future`` of anything accepted before it, and a refused time does not become the
    reference). The rule reads the partition's events in order, so it does not depend on how they were batched.
    ``max_future = None`` disables it. NaN entries (the caller's rows to skip) are never flagged nor references."""
    ts = np.asarray(ts, dtype=np.float64)
    if max_future is None or ts.size == 0:
        return np.zeros(ts.size, dtype=bool)
    cap = math.inf if now is None else now + max_future
    prior = np.empty(ts.size)  # the newest time before each event, accepted or not: an upper bound of the reference
    prior[0] = position
    if ts.size > 1:
        np.fmax.accumulate(np.concatenate(([position], ts[:-1])), out=prior)
    with np.errstate(invalid="ignore"):
        future = (ts > cap) | (np.isfinite(prior) & (ts > prior + max_future))
    if future.any():
        future = _chained(ts, future, position, max_future, cap)
    return future


def rejection_detail(reason: str, ts: float, windows: "TumblingWindows", max_future: float | None) -> str:
    """The ``detail`` of a dead letter rejected for its time (``late``, ``before_origin``, ``too_far_in_future``):
    the event time and the rule it broke, for operators (never the payload's contents beyond its time)."""
    if reason == "late":
        t = int(windows.window_of(np.array([ts]))[0])
        if t <= windows.last_closed:
            return (f"event time {ts!r} falls in window {t}, already closed (last closed window "
                    f"{windows.last_closed})")
        return (f"event time {ts!r} falls in window {t}, which had ended at or before its partition's watermark "
                f"when the event was read (the newest event time read before it in its partition, minus "
                f"allowed_lateness = {windows.allowed_lateness!r})")
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
    """``future`` refined in order: an event counts as too far ahead only if it is more than ``max_future`` after
    the newest time accepted before it (the position, or an accepted earlier event), or past ``cap`` (the wall
    clock's limit, never credited). Runs only for a batch with a flagged event; the events before the first flagged
    one are accepted as they were (NaN: skipped)."""
    first = int(np.argmax(future))
    ref = position
    if first:
        head = ts[:first]
        head = head[~np.isnan(head)]
        if head.size:
            ref = max(ref, float(head.max()))
    out = future.copy()
    for i, x in enumerate(ts[first:].tolist(), first):  # sequential: each decision moves the reference
        if x != x:  # NaN: a row the caller skips
            out[i] = False
        elif x > cap or (ref != -math.inf and x > ref + max_future):
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
    max_ts: dict = field(default_factory=dict)  # partition → newest accepted event time (−∞: none yet)
    _last_seen: dict = field(default_factory=dict)  # partition → wall clock (monotonic) of its last delivery
    # partitions the worker has paused (watermark alignment): silent because paused, never idle — they keep
    # holding the watermark, so their unread events cannot turn late while they wait (replaced, not mutated)
    pinned: frozenset = frozenset()

    def __post_init__(self) -> None:
        if not (self.length > 0 and math.isfinite(self.length)):
            raise ValueError(f"window length must be > 0, got {self.length}")
        if isinstance(self.origin, bool) or not isinstance(self.origin, (int, float)) or not math.isfinite(self.origin):
            raise ValueError(f"origin must be a finite event time (the start of window 1), got {self.origin!r}: "
                             "windows are numbered from a configured, public time (docs/contract.md §2)")
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

    # ---- per-partition watermarks --------------------------------------------------------------------------
    def register(self, partitions, now: float | None = None) -> None:
        """Partitions that hold the watermark from now on, even before they deliver an event (a partition that has
        not spoken yet holds it at −∞, like a silent one, until ``idle_timeout``)."""
        now = time.monotonic() if now is None else now
        for p in partitions:
            self.max_ts.setdefault(int(p), -math.inf)
            self._last_seen.setdefault(int(p), now)

    def touch(self, partition: int = 0, now: float | None = None) -> None:
        """The partition delivered events (accepted or not): it is not idle. A partition whose events are all
        rejected — late ones after it was silent — used to stay idle, so windows kept closing past it and its whole
        backlog became late (review of 2026-11-23)."""
        self._last_seen[int(partition)] = time.monotonic() if now is None else now

    def observe(self, max_ts: float, partition: int = 0, now: float | None = None) -> None:
        """Partition ``partition`` has read up to event time ``max_ts`` (a watermark marker: only ever moves up)."""
        p = int(partition)
        if max_ts > self.max_ts.get(p, -math.inf):
            self.max_ts[p] = float(max_ts)
        self._last_seen[p] = time.monotonic() if now is None else now

    def partition_watermark(self, partition: int) -> float:
        return self.max_ts.get(int(partition), -math.inf) - self.allowed_lateness

    def judge(self, ts: np.ndarray, partition: int = 0, max_future: float | None = None,
              clock: float | None = None, now: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Judge one partition's events ``ts`` (in offset order) and move that partition's watermark past them.

        Returns (window numbers, reason codes: :data:`OK`, :data:`BEFORE_ORIGIN`, :data:`TOO_FAR_IN_FUTURE`,
        :data:`LATE`). Per event, in order: ``before_origin`` (window < 1); ``too_far_in_future``
        (:func:`absurd_times` against the partition's newest accepted time and the wall clock ``clock``; such an
        event never moves the watermark); ``late`` — its window has ended at or before the partition's watermark at
        that event (the newest event time read before it, and up to it, in the partition, minus the allowed
        lateness), or is closed already. Vectorised: a running maximum over the batch, so the verdicts are those of
        reading the events one by one, however the partition's sequence is cut into batches."""
        ts = np.asarray(ts, dtype=np.float64)
        p = int(partition)
        t = self.window_of(ts)
        code = np.zeros(ts.size, dtype=np.int8)
        self.touch(p, now)  # delivering, even if nothing is accepted: not idle
        if ts.size == 0:
            return t, code
        before = t < 1
        code[before] = BEFORE_ORIGIN
        ref = self.max_ts.get(p, -math.inf)
        cand = np.where(before, np.nan, ts) if before.any() else ts
        future = absurd_times(cand, ref, max_future, clock)
        code[future] = TOO_FAR_IN_FUTURE
        ok = code == OK
        acc = np.where(ok, ts, -math.inf)
        run = np.maximum.accumulate(acc)  # the newest accepted time up to each event (incl.: its own is in its window)
        if ref > -math.inf:
            np.maximum(run, ref, out=run)
        wm = run - self.allowed_lateness
        late = ok & (t <= self.last_closed)
        fin = ok & np.isfinite(wm)
        if fin.any():
            late[fin] |= t[fin] < self.window_of(wm[fin])  # window t ended at or before wm: t ≤ last_ended(wm)
        code[late] = LATE
        newest = float(run[-1])
        if newest > ref:
            self.max_ts[p] = newest
        return t, code

    @property
    def watermark(self) -> float:
        return self.watermark_at()

    def watermark_at(self, now: float | None = None) -> float:
        """The minimum over the partitions that hold the watermark of their newest event time − lateness. With
        ``idle_timeout``, a partition that delivered nothing for that long (wall clock) and is not pinned stops
        holding it — unless every partition is idle."""
        if not self.max_ts:
            return -math.inf
        parts = list(self.max_ts)
        if self.idle_timeout is not None and len(parts) > 1:
            now = time.monotonic() if now is None else now
            pinned = self.pinned
            active = [p for p in parts if p in pinned or now - self._last_seen.get(p, now) <= self.idle_timeout]
            parts = active or parts
        return min(self.max_ts[p] for p in parts) - self.allowed_lateness

    def time_for_watermark(self, wm: float) -> float:
        """An event time whose watermark (time − allowed lateness, in floats) is ≥ ``wm``: the first float from
        ``wm + lateness`` upward that qualifies (a float below it may qualify too; its watermark is the same).
        Adding the lateness and subtracting it again can land one ulp below ``wm`` (0.7·5 + 1.1 − 1.1 < 3.5), which
        would leave the window ending at ``wm`` open."""
        x = wm + self.allowed_lateness
        while x - self.allowed_lateness < wm:
            x = math.nextafter(x, math.inf)
        return x

    def due_until(self, now: float | None = None) -> int:
        """The last window the watermark has passed (never below :attr:`last_closed`)."""
        wm = self.watermark_at(now)
        if not math.isfinite(wm):
            return self.last_closed
        return max(self.last_closed, self.last_ended(wm))

    def due(self, now: float | None = None) -> list[int]:
        """Window numbers that the watermark has passed and that were not closed yet (each returned once: they are
        marked closed)."""
        last = self.due_until(now)
        out = list(range(self.last_closed + 1, last + 1))
        if out:
            self.last_closed = out[-1]
        return out

    # ---- state ---------------------------------------------------------------------------------------------
    def state(self) -> dict:
        return {"length": self.length, "origin": self.origin, "allowed_lateness": self.allowed_lateness,
                "idle_timeout": self.idle_timeout, "last_closed": self.last_closed,
                "max_ts": {str(k): v for k, v in self.max_ts.items()}}

    @classmethod
    def from_state(cls, d: dict, now: float | None = None) -> "TumblingWindows":
        w = cls(d["length"], d["origin"], d["allowed_lateness"], d["idle_timeout"], d["last_closed"])
        now = time.monotonic() if now is None else now
        w.max_ts = {int(k): float(v) for k, v in d["max_ts"].items()}
        w._last_seen = {p: now for p in w.max_ts}
        return w


#: reason codes of :meth:`TumblingWindows.judge`, and their dead-letter reasons
OK, BEFORE_ORIGIN, TOO_FAR_IN_FUTURE, LATE = 0, 1, 2, 3
REASONS = {BEFORE_ORIGIN: "before_origin", TOO_FAR_IN_FUTURE: "too_far_in_future", LATE: "late"}
