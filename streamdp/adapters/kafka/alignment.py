"""Watermark alignment: pause the input partitions that run ahead in event time.

The canonical stage (``ordering.py``) holds every event until the watermark — the minimum over partitions —
passes its window, so a partition fetched far ahead of the others (a backlog after a restart, a broker that fills
each fetch response from one partition, as tansu does) makes the worker hold its events in memory and in every
checkpoint. :class:`PartitionAlignment` decides, from the event times the fetcher has seen, which partitions to
pause (``consumer.pause``) and resume: a partition whose newest fetched event is more than ``max_skew`` seconds
ahead of the *frontier* — the least newest-event time over the partitions still delivering — is paused until the
frontier catches up. Releases do not change (the canonical stage makes them independent of the interleaving);
memory and checkpoints stay bounded by about ``max_skew`` (plus one fetch) of events per partition.

Progress: the partition at the frontier is never paused. A partition that delivered nothing for ``idle`` seconds
(its end, or a quiet producer) leaves the frontier, so the others resume; if none delivers, every partition is
resumed. Positions are untouched: aiokafka drops what it had buffered for a paused partition and fetches it again
after the resume.
"""

from __future__ import annotations

import math

__all__ = ["PartitionAlignment"]


class PartitionAlignment:
    def __init__(self, max_skew: float, idle: float = 1.0) -> None:
        if not (max_skew > 0 and math.isfinite(max_skew)):
            raise ValueError("max_skew must be a positive number of seconds")
        if not idle > 0:
            raise ValueError("idle must be > 0 seconds")
        self.max_skew = float(max_skew)
        self.idle = float(idle)
        self.newest: dict[int, float] = {}  # partition → newest event time fetched
        self.last_seen: dict[int, float] = {}  # partition → wall clock of its last delivery
        self.paused: set[int] = set()

    def reset(self) -> None:
        """Forget everything (a seek or a new assignment: fetching restarts from other positions). The caller
        resumes the partitions that were paused."""
        self.newest.clear()
        self.last_seen.clear()
        self.paused.clear()

    def observe(self, partition: int, newest_ts: float, now: float) -> None:
        """The fetcher got events of ``partition`` whose latest event time is ``newest_ts``."""
        if math.isfinite(newest_ts):
            self.newest[partition] = max(self.newest.get(partition, -math.inf), float(newest_ts))
        self.last_seen[partition] = now

    def frontier(self, now: float) -> float:
        """The least newest-event time over the partitions that delivered within ``idle`` seconds (+∞: none)."""
        live = [ts for p, ts in self.newest.items() if now - self.last_seen.get(p, -math.inf) < self.idle]
        return min(live) if live else math.inf

    def decide(self, now: float) -> tuple[list[int], list[int]]:
        """(partitions to pause, partitions to resume) now; records them as paused/resumed."""
        f = self.frontier(now)
        limit = f + self.max_skew
        ahead = {p for p, ts in self.newest.items() if ts > limit}
        pause = sorted(ahead - self.paused)
        resume = sorted(self.paused - ahead)
        self.paused = ahead
        return pause, resume
