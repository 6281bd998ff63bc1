"""The library entry point: the release engine fed with events as Python dicts, JSON strings or bytes.

``streamdp.Pipeline(config)`` builds what ``streamdp demo`` builds — the service configuration (the same TOML
structure, as a dict or a file), its queries, an in-memory budget store (or the store given) and the release
engine — and hands back every window's release records as dicts. Nothing here talks to Kafka.

Bad input (decided for library callers): the default ``on_bad_event="raise"`` raises instead of dead-lettering
silently.

* A malformed event (not JSON, missing ``user``/``ts``, wrong types, NaN/inf, oversized, …) raises
  :class:`InvalidEvent` before anything of the call is used: fix or drop it and call again.
* An event the windows reject (``late``, ``before_origin``, ``too_far_in_future``) is known only once the call's
  other events have been ingested (the watermark moves with them): those are used, the windows they close are
  released, and :class:`RejectedEvents` is raised with the releases (``.records``) and the rejected events
  (``.rejected``), so nothing is lost.

``on_bad_event="dead_letter"`` keeps the service's behaviour: such events are collected in
:attr:`Pipeline.dead_letters` (each with its reason) and the call returns normally.
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterable

from streamdp.accounting.cost import budget_vector, fixed_to_cost
from streamdp.config.kinds import ConfigError
from streamdp.config.loader import ServiceConfig, load_config, parse_config
from streamdp.engine.engine import ReleaseEngine
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.filter.store import BudgetStore
from streamdp.input.events import DeadLetter, parse_batch
from streamdp.windows.tumbling import rejection_detail

__all__ = ["Pipeline", "InvalidEvent", "RejectedEvents"]


class InvalidEvent(ValueError):
    """A malformed event; nothing of the call was used. ``reason`` is the dead-letter reason code, ``index`` the
    event's position in the call, ``detail`` a sentence."""

    def __init__(self, reason: str, detail: str, index: int) -> None:
        super().__init__(f"event {index}: {reason}" + (f": {detail}" if detail else ""))
        self.reason, self.detail, self.index = reason, detail, index


class RejectedEvents(ValueError):
    """Events the windows rejected (late, before the origin, too far in the future). The call's other events were
    used; ``records`` holds the releases the call produced and ``rejected`` the (index, reason, detail) of each
    rejected event."""

    def __init__(self, rejected: list[tuple[int, str, str]], records: list[dict]) -> None:
        i, reason, detail = rejected[0]
        more = f" (and {len(rejected) - 1} more)" if len(rejected) > 1 else ""
        super().__init__(f"event {i}: {reason}: {detail}{more}; the other events were used and the releases of "
                         "this call are in .records")
        self.rejected, self.records = rejected, records


def _config(config) -> ServiceConfig:
    if isinstance(config, ServiceConfig):
        return config
    if isinstance(config, dict):
        return parse_config(config, log_warnings=False)
    if isinstance(config, (str, os.PathLike)):
        return load_config(os.fspath(config), log_warnings=False)
    raise ConfigError(f"config must be a dict (the TOML structure), a path to a TOML file or a ServiceConfig, got "
                      f"{type(config).__name__}")


def _payload(event: Any, index: int) -> bytes:
    if isinstance(event, bytes):
        return event
    if isinstance(event, str):
        return event.encode("utf-8", "surrogatepass")
    if isinstance(event, dict):
        try:  # NaN/inf are written as JSON's NaN/Infinity tokens, which the parser refuses (not silently null)
            return json.dumps(event, allow_nan=True, separators=(",", ":")).encode("utf-8", "surrogatepass")
        except (TypeError, ValueError) as e:
            raise InvalidEvent("not_json", f"the event cannot be written as JSON: {e}", index) from None
    raise InvalidEvent("not_json", f"an event is a dict, a JSON str or bytes, got {type(event).__name__}", index)


class Pipeline:
    """The release engine of a service configuration, in process (module docstring).

    ``config``: the configuration as a dict (``{"service": {...}, "budget": {...}, "query": [{...}, ...]}``), a
    path to a TOML file, or a parsed ``ServiceConfig``; invalid configuration raises ``ConfigError`` naming the
    field. ``store``: a budget store (default: in memory, with the configuration's ``[budget]``)."""

    def __init__(self, config, *, store: BudgetStore | None = None, on_bad_event: str = "raise") -> None:
        if on_bad_event not in ("raise", "dead_letter"):
            raise ValueError(f"on_bad_event must be 'raise' or 'dead_letter', got {on_bad_event!r}")
        self.config = _config(config)
        self.store = store if store is not None else MemoryBudgetStore(budget_vector(self.config.budget))
        self.engine = ReleaseEngine(self.config.engine_config(), self.config.build_queries(), self.store)
        self.on_bad_event = on_bad_event
        self.dead_letters: list[DeadLetter] = []
        self._seen = 0

    @property
    def queries(self) -> list:
        return list(self.engine.queries)

    def feed(self, events: Iterable[Any]) -> list[dict]:
        """Use ``events`` (dicts, JSON strs or bytes) and return the release records of every window they close,
        as dicts in window order (each record's ``values``, ``cost`` and ``meta`` as the service publishes them)."""
        payloads = [_payload(e, i) for i, e in enumerate(events)]
        base = self._seen
        batch, dead = parse_batch(payloads)
        if dead and self.on_bad_event == "raise":
            d = min(dead, key=lambda x: x.index or 0)
            raise InvalidEvent(d.reason, d.detail, d.index or 0)
        self._seen += len(payloads)
        for d in dead:
            self.engine.counters.dead(d.reason)
            self.dead_letters.append(DeadLetter(d.payload, d.reason, d.detail, base + (d.index or 0)))
        e = self.engine
        rejected = []
        for row, reason in e.ingest(batch):
            src = int(batch.source_rows[row])
            detail = rejection_detail(reason, float(batch.ts[row]), e.windows, e.config.max_future_seconds)
            rejected.append((src, reason, detail))
            if self.on_bad_event == "dead_letter":
                self.dead_letters.append(DeadLetter(payloads[src], reason, detail, base + src))
        records = [r.to_dict() for s in e.close_due() for r in s.records]
        if rejected and self.on_bad_event == "raise":
            raise RejectedEvents(sorted(rejected), records)
        return records

    def close(self) -> list[dict]:
        """End of the input: close every window up to the last event's and return their records."""
        return [r.to_dict() for s in self.engine.flush() for r in s.records]

    def spent(self, user: str) -> dict:
        """What ``user`` has spent and may spend, per notion component (``zcdp_rho``, ``zcdp_delta``, …), and
        whether they are halted. An unseen user has spent nothing."""
        u = self.store.get_user(user)
        budget = fixed_to_cost(self.store.default_budget() if u is None else u.budget).as_dict()
        spent = fixed_to_cost([0] * len(budget) if u is None else u.spent).as_dict()
        return {"spent": spent, "budget": budget, "halted": bool(u.halted) if u is not None else False}

    def snapshot(self) -> bytes:
        """The engine's whole state (no pickles); :meth:`restore` it into a Pipeline of the same configuration."""
        return self.engine.snapshot()

    def restore(self, data: bytes) -> None:
        self.engine.restore(data)
