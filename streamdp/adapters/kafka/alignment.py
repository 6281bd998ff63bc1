"""Watermark alignment: pause the input partitions that run ahead in event time.

The canonical stage (``ordering.py``) holds every event until the watermark — the minimum over partitions —
passes its window, so a partition fetched far ahead of the others (a backlog after a restart, a broker that fills
each fetch response from one partition, as tansu does) makes the worker hold its events in memory and in every
checkpoint. :class:`PartitionAlignment` decides, from the event times the fetcher has seen, which partitions to
pause (``consumer.pause``) and resume; memory and checkpoints then stay bounded by about ``max_skew`` (plus one
fetch) of events per partition. Releases do not change: the canonical stage makes them independent of the
interleaving.

What a pause changes: nothing the releases show. An event is judged against its own partition's watermark, in that
partition's offset order, whenever it is read (``TumblingWindows.judge``), and a paused partition keeps holding the
watermark over partitions — its newest event time stays in the minimum, and the worker pins it so that
``idle_timeout`` does not release it (``TumblingWindows.pinned``) — so no window closes without its unread events.

Where a partition is: the 5 % quantile of the event times of its last :data:`RECENT` events delivered in the last
``idle`` seconds — recent consumption, not its newest event time, which one far-future outlier would move (and a pause on the strength of
an outlier would delay that partition's ordinary events behind the others). A partition is paused only on the
evidence of at least :data:`MIN_EVIDENCE` such events (never in a trickle, where partitions do not drift apart),
and only when it is more than ``max_skew`` ahead of the *frontier*: the least position over the partitions still
delivering. The frontier partition is never paused. A partition that delivered nothing for ``idle`` seconds (its
end, a quiet producer, or paused) leaves the frontier, so the others resume; if none delivers, every partition is
resumed. Positions are untouched: aiokafka drops what it had buffered for a paused partition and fetches it again
after the resume.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

__all__ = ["PartitionAlignment", "MIN_EVIDENCE", "QUANTILE", "RECENT"]

RECENT = 512  # a partition's position is taken over at most its last RECENT events (of the last ``idle`` seconds)
MIN_EVIDENCE = 100  # events delivered within ``idle`` seconds before a partition may be paused
QUANTILE = 5.0  # percent: where a partition is


class PartitionAlignment:
    def __init__(self, max_skew: float, idle: float = 1.0) -> None:
        if not (max_skew > 0 and math.isfinite(max_skew)):
            raise ValueError("max_skew must be a positive number of seconds")
        if not idle > 0:
            raise ValueError("idle must be > 0 seconds")
        self.max_skew = float(max_skew)
        self.idle = float(idle)
        self._recent: dict[int, deque] = {}  # partition → (wall clock, event times) of its recent deliveries
        self.last_seen: dict[int, float] = {}  # partition → wall clock of its last delivery
        self._last_where: dict[int, float] = {}  # partition → its position when it last delivered
        self.paused: set[int] = set()

    def reset(self) -> None:
        """Forget everything (a seek or a new assignment: fetching restarts from other positions). The caller
        resumes the partitions that were paused."""
        self._recent.clear()
        self.last_seen.clear()
        self._last_where.clear()
        self.paused.clear()

    def observe(self, partition: int, ts: np.ndarray, now: float) -> None:
        """The fetcher got events of ``partition`` with event times ``ts`` (possibly none: dead letters only)."""
        self.last_seen[partition] = now
        ts = np.asarray(ts, dtype=np.float64)
        ts = ts[np.isfinite(ts)]
        if ts.size:
            self._recent.setdefault(partition, deque()).append((now, ts))

    def _positions(self, now: float) -> dict[int, tuple[float, int]]:
        """partition → (its position, events behind it) over the deliveries of the last ``idle`` seconds."""
        out = {}
        for p, q in self._recent.items():
            while q and now - q[0][0] >= self.idle:
                q.popleft()
            total = sum(t.size for _, t in q)
            while len(q) > 1 and total - q[0][1].size >= RECENT:  # older deliveries no longer among the last RECENT
                total -= q.popleft()[1].size
            if q:
                ts = (np.concatenate([t for _, t in q]) if len(q) > 1 else q[0][1])[-RECENT:]
                out[p] = (float(np.percentile(ts, QUANTILE)), int(ts.size))
        return out

    def frontier(self, now: float) -> float:
        """The least position over the partitions that delivered within ``idle`` seconds (+∞: none)."""
        pos = self._positions(now)
        return min((w for w, _ in pos.values()), default=math.inf)

    def decide(self, now: float) -> tuple[list[int], list[int]]:
        """(partitions to pause, partitions to resume) now; records them as paused/resumed. A paused partition
        stays paused while it was last seen ahead and the frontier has not caught up."""
        pos = self._positions(now)
        front = min((w for w, _ in pos.values()), default=math.inf)
        limit = front + self.max_skew
        ahead = {p for p, (w, n) in pos.items() if w > limit and n >= MIN_EVIDENCE}
        # a paused partition delivers nothing, so it has no recent position: it stays paused while its last known
        # position is still beyond the limit (and the frontier is finite: someone still delivers)
        for p in self.paused:
            if p not in pos and self._last_where.get(p, -math.inf) > limit:
                ahead.add(p)
        for p, (w, _) in pos.items():
            self._last_where[p] = w
        pause = sorted(ahead - self.paused)
        resume = sorted(self.paused - ahead)
        self.paused = ahead
        return pause, resume
