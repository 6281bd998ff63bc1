"""The shipped JSON Schemas refuse what the output contract forbids OUTSIDE ``values`` too (the envelope, the
window, the published cost, the dead letter) — hand-made records, one defect each; the unbroken record validates,
so each refusal is due to its defect."""

from __future__ import annotations

import copy

import pytest

from streamdp.adapters.kafka.schemas import release_validator, validator

COUNTS = {"schema_version": 2, "key": "q/1/2", "query": "q", "kind": "continual_counts", "epoch": 1,
          "window": {"t": 2, "seq": 10, "start": 720.0, "end": 810.0}, "closed_by": "watermark",
          "values": {"counts": {"a": 12, "b": -1}, "new_items": ["b"], "threshold": 9.5},
          "cost": {"basis": "per user, this window", "zcdp": {"rho": 0.5, "delta": 1e-6}},
          "meta": {"selected": 2, "new_selected": 1}, "test_mode": False}

DEAD = {"schema_version": 1, "reason": "malformed_json", "detail": "eof", "payload": '{"user": 1',
        "payload_encoding": "utf-8", "truncated": False, "topic": "in", "partition": 2, "offset": 17}


def _with(rec: dict, path: tuple, value) -> dict:
    out = copy.deepcopy(rec)
    d = out
    for k in path[:-1]:
        d = d[k]
    if value is DELETE:
        del d[path[-1]]
    else:
        d[path[-1]] = value
    return out


DELETE = object()


def test_the_unbroken_records_validate():
    release_validator("continual_counts").validate(COUNTS)
    validator("release.schema.json").validate(COUNTS)
    validator("dead_letter.schema.json").validate(DEAD)


@pytest.mark.parametrize("path,value", [
    (("unexpected",), 1),                                   # the envelope is closed
    (("key",), "q/1/2/extra"),                              # key is exactly query/epoch/window
    (("key",), "q/1/2x"),
    (("query",), "a/b"),                                    # a query id cannot contain the key's separator
    (("epoch",), -1),
    (("window", "seq"), 0),                                 # seq counts from 1
    (("window", "extra"), 3),                               # the window object is closed
    (("cost", "zcdp", "delta"), 1.5),                       # δ is a probability
    (("cost", "dp"), {"rho": 0.1, "delta": 0.0}),           # only the defined notions
    (("cost", "cgp"), {"rho": 1e-9, "delta": 0.0}),         # continual counts are charged in zCDP only
    (("cost", "basis"), DELETE),                            # a bound without its basis cannot be read
])
def test_release_schema_refuses(path, value):
    bad = _with(COUNTS, path, value)
    assert not release_validator("continual_counts").is_valid(bad), (path, value)


@pytest.mark.parametrize("path,value", [
    (("partition",), -1),
    (("offset",), DELETE),
    (("reason",), "Not A Code!"),
    (("reason",), "late event"),
    (("payload_encoding",), "latin-1"),
    (("extra",), 1),
])
def test_dead_letter_schema_refuses(path, value):
    assert not validator("dead_letter.schema.json").is_valid(_with(DEAD, path, value)), (path, value)
