"""The output contract: one record per (query, epoch, window) (docs/contract.md §1 "Subscribers").

Every record carries the schema version, query id and kind, epoch, window [start, end), the released values and the
privacy cost of this release as a bound from PUBLIC information only (per notion the most any single user can be
charged, and its basis). The realised costs — the maximum individual charge and the number of users charged — depend
on private data and are kept in the ledger only.
Records are keyed by ``query/epoch/window`` (the idempotency key of the release log and the Kafka record key).
JSON Schemas for every kind live in ``streamdp/schemas/``.

Stable shapes (schema version 2): a kind's record has the same fields whether its window had data or not — what could
not be computed is ``null``, never a missing key; ``meta`` and ``test_mode`` are always present, and ``cost`` always
names the kind's notion (zero where nobody can be charged). Public floats: the published cost is printed on the
ledger's fixed-point grid (:func:`public_cost_dict`); a float a mechanism used or released (a threshold, a noise
scale, a value on its noise grid) is printed exactly; a float computed only to be shown (a savings share, a derived
standard deviation) at 12 significant digits (:func:`public_float`). See docs/DECISIONS.md, "Published records".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import orjson

from streamdp.accounting.cost import COMPONENTS, NOTIONS, SCALES

#: 2 (2026-12-07): stable shapes — every field present in every record of a kind, ``meta`` and ``test_mode`` always,
#: the kind's notion always in ``cost``, public floats on their grid (1: the first published form)
SCHEMA_VERSION = 2

#: the Kafka record header of every release published in test mode (``unsafe_test_seed``), besides the record's own
#: ``"test_mode": true``: a reader that routes on headers sees it without parsing the value
TEST_MODE_HEADERS = [("streamdp-test-mode", b"1")]

#: significant digits of a public float computed only to be shown (:func:`public_float`)
PUBLIC_FLOAT_DIGITS = 12


def public_float(x):
    """A public float computed only to be shown (a share of a budget not spent, the standard deviation behind an
    estimate), printed with the precision it carries: 12 significant digits, so that floating-point dust
    (``0.7500000000000001`` for 3/4) is not published as if it were information. ``None`` stays ``None``. Not for
    what a mechanism used or released (a threshold, a noise scale, a value on its noise grid): those are printed
    exactly, as used."""
    if x is None:
        return None
    return float(f"{float(x):.{PUBLIC_FLOAT_DIGITS}g}")


def release_key(query_id: str, epoch: int, t: int) -> str:
    return f"{query_id}/{epoch}/{t}"


def public_cost_dict(cost, basis: str, notions: tuple[str, ...] = ()) -> dict:
    """The published cost of a release: a bound from public information only (see WindowQuery.public_cost).

    Each component is printed on the ledger's fixed-point grid (10⁻¹² for ρ and α, 10⁻¹⁸ for δ), rounded up as the
    ledger rounds a charge: the number a subscriber reads is what a user can be charged, without float dust. The
    ``notions`` (the query's own) are always present, zero where nobody can be charged (a window without a
    registered query, a top-k that returned nothing), so that the record's shape does not depend on the window."""
    out: dict = {}
    fixed = cost.to_fixed() if cost is not None else np.zeros(len(COMPONENTS), dtype=np.int64)
    for i, notion in enumerate(NOTIONS):
        a, d = int(fixed[2 * i]), int(fixed[2 * i + 1])
        if a or d or notion in notions:
            out[notion] = {("alpha" if notion == "emd" else "rho"): a / SCALES[2 * i], "delta": d / SCALES[2 * i + 1]}
    out["basis"] = basis if cost is not None else "see the query kind's cost formula (streamdp queries kinds)"
    return out


def cost_summary(costs: np.ndarray) -> dict:
    """REALISED cost (ledger only, never published: it depends on private data): max individual cost per notion
    and the number of users charged, from fixed-point rows."""
    n_charged = int((costs > 0).any(axis=1).sum()) if costs.size else 0
    mx = costs.max(axis=0) if costs.size else np.zeros(len(COMPONENTS), dtype=np.int64)
    return realised_summary(n_charged, mx)


def realised_summary(n_charged: int, mx) -> dict:
    """:func:`cost_summary` from its two sufficient statistics: the number of users charged (rows with a positive
    component) and the component-wise maximum of the rows (zeros for none). Both merge over disjoint sets of users
    (a sum and a maximum), which is how the staged coordinator builds a window's ledger entry from the partitions'
    parts without seeing users."""
    out: dict = {}
    mx = np.asarray(mx, dtype=np.int64)
    for i, notion in enumerate(NOTIONS):
        a, d = int(mx[2 * i]), int(mx[2 * i + 1])
        if a or d:
            key = "alpha" if notion == "emd" else "rho"
            out[notion] = {key: a / SCALES[2 * i], "delta": d / SCALES[2 * i + 1]}
    out["users_charged"] = int(n_charged)
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
    test_mode: bool = False  # released with noise from a fixed seed (unsafe_test_seed): NOT private


    @property
    def key(self) -> str:
        return release_key(self.query, self.epoch, self.t)

    @classmethod
    def build(cls, q, w, rel, costs: np.ndarray, test_mode: bool = False) -> "ReleaseRecord":
        cost = public_cost_dict(q.public_cost(rel), q.public_cost_basis, (q.notion,))
        extra = getattr(q, "public_cost_extra", None)  # a cost in a notion the budget store does not hold
        if extra is not None:
            cost.update(extra(rel))
        return cls(query=q.id, kind=q.kind, epoch=w.epoch, t=w.t, seq=w.seq, start=w.start, end=w.end,
                   values=rel.values, cost=cost, meta=dict(rel.meta), realized=cost_summary(costs),
                   closed_by=getattr(w, "closed_by", "watermark"), test_mode=bool(test_mode))

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
            "meta": self.meta or {},
            "test_mode": self.test_mode,
        }

    def to_bytes(self) -> bytes:
        return orjson.dumps(self.to_dict(), option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY)

    @classmethod
    def from_bytes(cls, b: bytes) -> "ReleaseRecord":
        d = orjson.loads(b)
        w = d["window"]
        return cls(query=d["query"], kind=d["kind"], epoch=d["epoch"], t=w["t"], seq=w["seq"], start=w["start"],
                   end=w["end"], values=d["values"], cost=d["cost"], meta=d.get("meta", {}), realized={},
                   closed_by=d.get("closed_by", "watermark"), test_mode=bool(d.get("test_mode", False)))

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
