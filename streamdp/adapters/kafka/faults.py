"""TEST-ONLY fault injection: kill the worker with SIGKILL at a named point of the batch protocol.

Set ``STREAMDP_CRASH_POINT`` to one of :data:`POINTS` and ``STREAMDP_CRASH_COUNT`` to N (default 1): the N-th time
the worker reaches that point it sends itself SIGKILL (no cleanup, like ``kill -9`` or an OOM kill). The
integration tests use it to check that a restarted worker loses no event, charges no budget twice and never
publishes a release with fresh noise. Never set these variables in production; the worker logs a warning at start
when they are set.
"""

from __future__ import annotations

import logging
import os
import signal

log = logging.getLogger("streamdp.kafka")

ENV_POINT = "STREAMDP_CRASH_POINT"
ENV_COUNT = "STREAMDP_CRASH_COUNT"
POINTS = (
    "after_stage",  # events consumed and staged, nothing closed/checkpointed yet (mid-batch)
    "after_admit",  # the filter charged the users of a closing window; nothing checkpointed or published
    "after_checkpoint",  # checkpoint written; nothing published
    "mid_publish",  # the first record of a checkpoint published, the others not
    "after_publish",  # all records published; not acknowledged in the checkpoint
    "ingest_after_forward",  # stage A (--role ingest): a run forwarded and acknowledged, its offsets not committed
)


class FaultInjector:
    def __init__(self, point: str | None = None, count: int = 1) -> None:
        if point is not None and point not in POINTS:
            raise ValueError(f"{ENV_POINT}: unknown crash point {point!r} (known: {list(POINTS)})")
        if count < 1:
            raise ValueError(f"{ENV_COUNT}: must be ≥ 1, got {count}")
        self.point = point
        self.count = count
        self.seen = 0

    @classmethod
    def from_env(cls) -> "FaultInjector":
        point = os.environ.get(ENV_POINT) or None
        count = int(os.environ.get(ENV_COUNT, "1"))
        fi = cls(point, count)
        if point:
            log.warning("TEST-ONLY fault injection armed", extra={"crash_point": point, "crash_count": count})
        return fi

    def hit(self, point: str) -> None:
        if point != self.point:
            return
        self.seen += 1
        if self.seen >= self.count:
            log.warning("fault injection: SIGKILL", extra={"crash_point": point})
            for h in logging.getLogger().handlers + logging.getLogger("streamdp").handlers:
                try:
                    h.flush()
                except Exception:  # pragma: no cover
                    pass
            os.kill(os.getpid(), signal.SIGKILL)
