"""Whose records are on the split's internal topics (``[kafka] stage_a = "admit"``): every record stage A writes to
``<internal_prefix>parts`` names the deployment's stream — its ``group_id`` and input topic, the pair that keys its
checkpoints — in the Kafka header ``streamdp-stream`` (JSON ``[group, topic]``), as the forward records of
``stage_a = "forward"`` name it in their body (``forward.py``, "names its stream"). The message bytes themselves stay
the pure core's (:mod:`streamdp.engine.staged_messages`). The coordinator drops a record of another stream (or one
naming none) without feeding it to its :class:`~streamdp.engine.coordinator_worker.Coordinator` or moving anything
but its own read position: two split deployments sharing an internal prefix would otherwise mix their partitions'
parts (a PartConflict at best, another deployment's counts in this one's releases at worst). Pure: no I/O."""

from __future__ import annotations

import orjson

from streamdp.adapters.kafka.forward import Stream

HEADER = "streamdp-stream"


def stream_headers(stream: Stream) -> list[tuple[str, bytes]]:
    """The Kafka headers of a record of ``stream`` on the parts topic."""
    return [(HEADER, orjson.dumps([stream.group, stream.topic]))]


def stream_of(headers) -> Stream | None:
    """The stream a parts-topic record names (None: none, or an unreadable header)."""
    for k, v in headers or ():
        if k == HEADER:
            try:
                group, topic = orjson.loads(v)
            except (orjson.JSONDecodeError, TypeError, ValueError):
                return None
            if isinstance(group, str) and isinstance(topic, str):
                return Stream(group, topic)
            return None
    return None


def refusal(got: Stream | None, own: Stream) -> str | None:
    """Why a parts-topic record is refused (``"foreign"``: another deployment's; ``"unattributed"``: it names no
    stream), or None when it is this deployment's."""
    if got is None:
        return "unattributed"
    return None if got == own else "foreign"
