"""The Kafka worker's view of the engine's canonical ingestion order: Kafka partitions in, windows out.

The release engine judges every event against its own Kafka partition's watermark at that event and holds the
accepted ones per (window, partition) until the window closes (:meth:`ReleaseEngine.ingest`,
:class:`~streamdp.windows.held.HeldEvents`); a window closes when every partition's watermark has passed its end
(:class:`~streamdp.windows.tumbling.TumblingWindows`), and its events reach the mechanisms in (partition, offset)
order, its new names numbered in that order. So the releases, dead letters and spend are a function of each
partition's record sequence and the configuration alone — not of fetch sizes, processing steps, the interleaving of
partitions, the number of workers or crashes (contract §2, §4). The embedded pipeline feeds the same engine with
one partition, so a file and the service on a one-partition topic of that file agree.

:class:`CanonicalStage` is the thin adapter the worker steps: it registers the partitions the worker holds, feeds
each fetched partition's events to the engine and closes the due windows in bounded steps. Its own checkpoint state
is empty since the engine holds the events (checkpoints of before carry ``{"wm", "held"}`` here:
:meth:`CanonicalStage.load_state` moves them into the engine).

The exceptions, documented in docs/DECISIONS.md ("Event time"): the idle timeout (wall clock) can close a window
before a silent partition's watermark passed it, and an event stamped more than ``max_future_seconds`` past the
wall clock is judged against the clock of the run that reads it.
"""

from __future__ import annotations

from streamdp.engine.engine import CLOSE_STEP_WINDOWS, ReleaseEngine, WindowSummary
from streamdp.input.events import EventBatch
from streamdp.windows.held import batch_from_state, batch_state, concat_batches, take_rows  # noqa: F401 (re-export)


class CanonicalStage:
    """The worker's adapter over the engine (see module doc)."""

    def __init__(self, engine: ReleaseEngine) -> None:
        self.engine = engine

    @property
    def wm(self):
        """The per-partition watermarks (the engine's :class:`~streamdp.windows.tumbling.TumblingWindows`)."""
        return self.engine.windows

    @property
    def held(self) -> dict:
        return self.engine.held.windows

    @property
    def held_events(self) -> int:
        return self.engine.held.events

    def add(self, partition: int, batch: EventBatch, now: float | None = None) -> list[tuple[int, str]]:
        """Judge and hold a parsed batch of one partition. Returns (row, reason) for rows rejected on arrival."""
        return self.engine.ingest(batch, partition, now)

    def due_until(self, now: float | None = None, flush: bool = False) -> int:
        """The last window that may close now (``flush``: every window holding events)."""
        return self.engine.windows.last_closed + self.engine.pending_windows(now, flush)

    def pending(self, now: float | None = None, flush: bool = False) -> int:
        return self.engine.pending_windows(now, flush)

    def release(self, now: float | None = None, flush: bool = False,
                max_windows: int | None = None) -> list[WindowSummary]:
        """Close the due windows in order (``flush``: also the open ones, as ``end_of_input``), at most
        ``max_windows`` of them (None: all)."""
        if flush:
            return self.engine.flush(now, max_windows)
        return self.engine.close_due(now, max_windows)

    def state(self) -> dict:
        return {}

    def load_state(self, d: dict, now: float | None = None) -> None:
        """A checkpoint written before the engine held the events (``{"wm": …, "held": …}``): its partition
        watermarks and held events move into the engine (a checkpoint of now has ``{}``)."""
        if not d:
            return
        eng = self.engine
        wm = d.get("wm") or {}
        eng.windows.max_ts = {int(p): float(v) for p, v in (wm.get("max_ts") or {}).items()}
        eng.windows.register(list(eng.windows.max_ts), now)
        if d.get("held"):
            eng.held.load_state(d["held"])


__all__ = ["CanonicalStage", "CLOSE_STEP_WINDOWS", "take_rows", "concat_batches", "batch_state", "batch_from_state"]
