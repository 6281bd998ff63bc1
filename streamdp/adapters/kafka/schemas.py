"""The output contract's JSON Schemas (draft 2020-12) shipped in ``streamdp/schemas/``: one envelope for every
release (``release.schema.json``), one per query kind (``<kind>.schema.json``) and the dead letter."""

from __future__ import annotations

import json
import os

SCHEMA_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "schemas")


def load_schemas() -> dict[str, dict]:
    """File name → schema."""
    out = {}
    for name in sorted(os.listdir(SCHEMA_DIR)):
        if name.endswith(".schema.json"):
            with open(os.path.join(SCHEMA_DIR, name)) as f:
                out[name] = json.load(f)
    return out


def validator(name: str):
    """A ``jsonschema`` validator for ``name`` (e.g. ``"top_k.schema.json"``), resolving references between the
    shipped schemas offline."""
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource

    schemas = load_schemas()
    reg = Registry().with_resources((s["$id"], Resource.from_contents(s)) for s in schemas.values())
    return Draft202012Validator(schemas[name], registry=reg)


def release_validator(kind: str):
    """The kind's validator (every registered kind has a schema; a missing one is an error, not a fallback)."""
    name = f"{kind}.schema.json"
    if not os.path.exists(os.path.join(SCHEMA_DIR, name)):
        raise KeyError(f"no JSON Schema for query kind {kind!r} in {SCHEMA_DIR}")
    return validator(name)
