"""The per-record verdict on one input partition's batch and the holding of its accepted events — shared by the
single engine (:meth:`streamdp.engine.engine.ReleaseEngine.ingest`) and stage A
(:class:`streamdp.engine.stage_a_worker.StageA`), so both dead-letter exactly alike (same rows, same reasons)."""

from __future__ import annotations

import time

import numpy as np

from streamdp.input.events import EventBatch
from streamdp.windows.held import HeldEvents
from streamdp.windows.held import take_rows as take_events
from streamdp.windows.tumbling import OK, REASONS, TumblingWindows


def judge_and_hold(windows: TumblingWindows, held: HeldEvents, counters, batch: EventBatch, partition: int,
                   max_future_seconds, now: float | None) -> list[tuple[int, str]]:
    """Judge every event of ``batch`` (one partition, offset order) against its partition's watermark at that event
    (:meth:`TumblingWindows.judge`), count the rejections in ``counters`` (``dead``/``late``) and hold the accepted
    events per (window, partition) in offset order. Returns (row, reason) of the rejected rows."""
    n = len(batch)
    t, code = windows.judge(batch.ts, partition, max_future_seconds, time.time(), now)
    ok = code == OK
    rejected: list[tuple[int, str]] = []
    if not ok.all():
        bad = np.flatnonzero(~ok)
        rejected = [(int(i), REASONS[int(k)]) for i, k in zip(bad.tolist(), code[bad].tolist())]
        for k, m in zip(*np.unique(code[bad], return_counts=True)):
            reason = REASONS[int(k)]
            counters.dead(reason, int(m))
            if reason == "late":
                counters.late += int(m)
        if bad.size == n:
            return rejected
    rows = None if ok.all() else np.flatnonzero(ok)
    tw = t if rows is None else t[rows]
    lo, hi = int(tw.min()), int(tw.max())
    if lo == hi:  # the common case: the whole batch in one window
        held.add(lo, partition, batch if rows is None else take_events(batch, rows))
    else:
        order = np.argsort(tw, kind="stable")
        cuts = np.flatnonzero(np.diff(tw[order])) + 1
        for grp in np.split(order, cuts):
            sel = np.sort(grp) if rows is None else rows[np.sort(grp)]
            held.add(int(tw[grp[0]]), partition, take_events(batch, sel))
    return rejected
