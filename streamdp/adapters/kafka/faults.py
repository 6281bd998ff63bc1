"""TEST-ONLY fault injection at named points of the batch protocol: kill the worker with SIGKILL, or make the step
fail as a Redis failure would.

Set ``STREAMDP_CRASH_POINT`` to one of :data:`POINTS` (or several, comma-separated, each optionally ``point:N``)
and ``STREAMDP_CRASH_COUNT`` to N (default 1): the N-th time the worker reaches a named point it acts, once per
point. ``STREAMDP_FAULT_MODE`` chooses how:

* ``sigkill`` (default): the worker sends itself SIGKILL (no cleanup, like ``kill -9`` or an OOM kill);
* ``store_error``: the point raises :class:`~streamdp.filter.store.StoreError`, as the next Redis call would if
  Redis failed there — the worker must restore its checkpoint in process and go on.

The integration tests use it to check that a restarted (or recovering) worker loses no event, charges no budget
twice and never publishes a release with fresh noise. Never set these variables in production; the worker logs a
warning at start when they are set.
"""

from __future__ import annotations

import logging
import os
import signal

from streamdp.filter.store import StoreError

log = logging.getLogger("streamdp.kafka")

ENV_POINT = "STREAMDP_CRASH_POINT"
ENV_COUNT = "STREAMDP_CRASH_COUNT"
ENV_MODE = "STREAMDP_FAULT_MODE"
MODES = ("sigkill", "store_error")
POINTS = (
    "after_stage",  # events consumed and staged, nothing closed/checkpointed yet (mid-batch)
    "after_admit",  # the filter charged the users of a closing window; nothing checkpointed or published
    "after_checkpoint",  # checkpoint written; nothing published
    "mid_publish",  # the first record of a checkpoint published, the others not
    "after_publish",  # all records published; not acknowledged in the checkpoint
    "after_republish",  # recovery: the checkpoint's pending records published again, not acknowledged
    "ingest_after_forward",  # stage A (--role ingest): a run forwarded and acknowledged, its offsets not committed
    "split_after_send",  # stage A that admits: parts and markers acknowledged, the partitions not checkpointed
    "split_after_checkpoint",  # the split's coordinator: checkpoint written; nothing published nor announced
)


class FaultInjector:
    def __init__(self, point: str | None = None, count: int = 1, mode: str = "sigkill") -> None:
        if count < 1:
            raise ValueError(f"{ENV_COUNT}: must be ≥ 1, got {count}")
        self.counts: dict[str, int] = {}  # point → the occurrence at which it acts
        for item in (x for x in (point or "").split(",") if x):
            name, _, n = item.partition(":")
            if name not in POINTS:
                raise ValueError(f"{ENV_POINT}: unknown crash point {name!r} (known: {list(POINTS)})")
            if n and not (n.isdigit() and int(n) >= 1):
                raise ValueError(f"{ENV_POINT}: {item!r}: the count after ':' must be an integer ≥ 1")
            self.counts[name] = int(n) if n else count
        if mode not in MODES:
            raise ValueError(f"{ENV_MODE}: must be one of {list(MODES)}, got {mode!r}")
        self.points = frozenset(self.counts)
        self.count = count
        self.mode = mode
        self.seen: dict[str, int] = {}

    @classmethod
    def from_env(cls) -> "FaultInjector":
        point = os.environ.get(ENV_POINT) or None
        count = int(os.environ.get(ENV_COUNT, "1"))
        mode = os.environ.get(ENV_MODE) or "sigkill"
        fi = cls(point, count, mode)
        if point:
            log.warning("TEST-ONLY fault injection armed", extra={"crash_point": point, "crash_count": count,
                                                                   "fault_mode": mode})
        return fi

    def hit(self, point: str) -> None:
        if point not in self.points:
            return
        self.seen[point] = n = self.seen.get(point, 0) + 1
        if n != self.counts[point]:
            return
        if self.mode == "store_error":
            log.warning("fault injection: store error", extra={"crash_point": point})
            raise StoreError(f"TEST-ONLY injected store failure at {point}")
        log.warning("fault injection: SIGKILL", extra={"crash_point": point})
        for h in logging.getLogger().handlers + logging.getLogger("streamdp").handlers:
            try:
                h.flush()
            except Exception:  # pragma: no cover
                pass
        os.kill(os.getpid(), signal.SIGKILL)
