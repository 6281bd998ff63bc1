"""The input events' JSON Schema (``streamdp/schemas/event.schema.json``, for producers) says what the parser
accepts: on a corpus of good and bad payloads — every field's type, range and length rule at and past its limit —
the schema and ``parse_event`` give the same verdict. (Rules the schema cannot state are listed in its description
and left out here: UTF-8 and the payload's size, the record key, judgements by time and by the configured queries.)"""

from __future__ import annotations

import json

import pytest

from streamdp.adapters.kafka.schemas import validator
from streamdp.input.events import MAX_ITEM_LEN, MAX_ITEMS, MAX_TS, MAX_USER_LEN, BadEvent, parse_event

GOOD = [
    {"user": "u17", "ts": 1700000123.5},
    {"user": "u17", "ts": 1700000123.5, "items": ["ibuprofen", "insulin"], "value": 61.2, "loc": [37.77, -122.42]},
    {"user": 42, "ts": 0},
    {"user": "x" * MAX_USER_LEN, "ts": MAX_TS - 1},
    {"user": "u", "ts": 1, "items": []},
    {"user": "u", "ts": 1, "items": ["i"] * MAX_ITEMS},
    {"user": "u", "ts": 1, "items": ["i" * MAX_ITEM_LEN] * 3},
    {"user": "u", "ts": 1, "items": None, "value": None, "loc": None},
    {"user": "u", "ts": 1, "value": -1e300, "loc": [0, 0]},
    {"user": "u", "ts": 1, "unknown": {"nested": [1, 2]}},
]

BAD = [
    {"ts": 1},
    {"user": "u"},
    {"user": "", "ts": 1},
    {"user": "x" * (MAX_USER_LEN + 1), "ts": 1},
    {"user": True, "ts": 1},
    {"user": 1.5, "ts": 1},
    {"user": ["u"], "ts": 1},
    {"user": "u", "ts": "1700000000"},
    {"user": "u", "ts": -1},
    {"user": "u", "ts": MAX_TS},
    {"user": "u", "ts": 1, "items": "ibuprofen"},
    {"user": "u", "ts": 1, "items": [""]},
    {"user": "u", "ts": 1, "items": ["i" * (MAX_ITEM_LEN + 1)]},
    {"user": "u", "ts": 1, "items": ["i"] * (MAX_ITEMS + 1)},
    {"user": "u", "ts": 1, "items": [1]},
    {"user": "u", "ts": 1, "value": "61.2"},
    {"user": "u", "ts": 1, "loc": [1.0]},
    {"user": "u", "ts": 1, "loc": [1.0, 2.0, 3.0]},
    {"user": "u", "ts": 1, "loc": ["1", "2"]},
    [{"user": "u", "ts": 1}],
    "u",
]


def _parser_accepts(event) -> bool:
    try:
        parse_event(json.dumps(event).encode())
        return True
    except BadEvent:
        return False


@pytest.mark.parametrize("event", GOOD + BAD, ids=[f"good{i}" for i in range(len(GOOD))] +
                         [f"bad{i}" for i in range(len(BAD))])
def test_the_schema_and_the_parser_agree(event):
    v = validator("event.schema.json")
    expected = any(event is g for g in GOOD)
    assert _parser_accepts(event) is expected, event
    assert v.is_valid(event) is expected, event


def test_the_contract_example_is_valid():
    v = validator("event.schema.json")
    v.validate({"user": "u17", "ts": 1700000123.5, "items": ["ibuprofen", "insulin"], "value": 61.2,
                "loc": [37.77, -122.42]})
