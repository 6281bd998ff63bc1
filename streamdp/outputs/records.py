"""The output contract: one record per (query, epoch, window) (docs/contract.md §1 "Subscribers").

Every record carries the schema version, query id and kind, epoch, window [start, end), the released values and the
privacy cost of this release as a bound from PUBLIC information only (per notion the most any single user can be
charged, and its basis). The realised costs — the maximum individual charge and the number of users charged — depend
on private data and are kept in the ledger only.
Records are keyed by ``query/epoch/window`` (the idempotency key of the release log and the Kafka record key).
JSON Schemas for every kind live in ``streamdp/schemas/``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import orjson

from streamdp.accounting.cost import COMPONENTS, NOTIONS, SCALES

SCHEMA_VERSION = 1


def release_key(query_id: str, epoch: int, t: int) -> str:
    return f"{query_id}/{epoch}/{t}"


def public_cost_dict(cost, basis: str) -> dict:
    """The published cost of a release: a bound from public information only (see WindowQuery.public_cost)."""
    if cost is None:
        return {"basis": "see the query kind's cost formula (streamdp queries kinds)"}
    out: dict = {}
    for i, notion in enumerate(NOTIONS):
        a, d = cost.as_tuple()[2 * i], cost.as_tuple()[2 * i + 1]
        if a or d:
            out[notion] = {("alpha" if notion == "emd" else "rho"): a, "delta": d}
    out["basis"] = basis
    return out


def cost_summary(costs: np.ndarray) -> dict:
    """REALISED cost (ledger only, never published: it depends on private data): max individual cost per notion
    and the number of users charged, from fixed-point rows."""
    out: dict = {}
    n_charged = int((costs > 0).any(axis=1).sum()) if costs.size else 0
    mx = costs.max(axis=0) if costs.size else np.zeros(len(COMPONENTS), dtype=np.int64)
    for i, notion in enumerate(NOTIONS):
        a, d = int(mx[2 * i]), int(mx[2 * i + 1])
        if a or d:
            key = "alpha" if notion == "emd" else "rho"
            out[notion] = {key: a / SCALES[2 * i], "delta": d / SCALES[2 * i + 1]}
    out["users_charged"] = n_charged
    return out


@dataclass
class ReleaseRecord:
    query: str
    kind: str
    epoch: int
    t: int
    seq: int
    start: float
    end: float
    values: dict
    cost: dict  # published: a bound from public information
    meta: dict
    realized: dict = None  # ledger only: max individual cost and users charged (private)
    # how the window closed: "watermark" (every input partition's watermark passed its end: complete) or
    # "end_of_input" (closed at the end of a bounded input before that: it may be incomplete) — docs/subscribers.md
    closed_by: str = "watermark"

    @property
    def key(self) -> str:
        return release_key(self.query, self.epoch, self.t)

    @classmethod
    def build(cls, q, w, rel, costs: np.ndarray) -> "ReleaseRecord":
        cost = public_cost_dict(q.public_cost(rel), q.public_cost_basis)
        extra = getattr(q, "public_cost_extra", None)  # a cost in a notion the budget store does not hold
        if extra is not None:
            cost.update(extra(rel))
        return cls(query=q.id, kind=q.kind, epoch=w.epoch, t=w.t, seq=w.seq, start=w.start, end=w.end,
                   values=rel.values, cost=cost, meta=dict(rel.meta), realized=cost_summary(costs),
                   closed_by=getattr(w, "closed_by", "watermark"))

    def to_dict(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "key": self.key,
            "query": self.query,
            "kind": self.kind,
            "epoch": self.epoch,
            "window": {"t": self.t, "seq": self.seq, "start": self.start, "end": self.end},
            "closed_by": self.closed_by,
            "values": self.values,
            "cost": self.cost,
            **({"meta": self.meta} if self.meta else {}),
        }

    def to_bytes(self) -> bytes:
        return orjson.dumps(self.to_dict(), option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY)

    @classmethod
    def from_bytes(cls, b: bytes) -> "ReleaseRecord":
        d = orjson.loads(b)
        w = d["window"]
        return cls(query=d["query"], kind=d["kind"], epoch=d["epoch"], t=w["t"], seq=w["seq"], start=w["start"],
                   end=w["end"], values=d["values"], cost=d["cost"], meta=d.get("meta", {}), realized={},
                   closed_by=d.get("closed_by", "watermark"))

    def ledger_entry(self) -> dict:
        e = {"type": "release", "key": self.key, "query": self.query, "kind": self.kind, "epoch": self.epoch,
             "window": self.t, "seq": self.seq, "closed_by": self.closed_by}
        realized = self.realized or {}
        for notion in NOTIONS:
            if notion in realized:
                for k, v in realized[notion].items():
                    e[f"{notion}_{k}_max"] = v
        e["users_charged"] = realized.get("users_charged", 0)
        for k, v in self.meta.items():
            if isinstance(v, (int, float, str, bool)):
                e[k] = v
        return e
