"""Bad input (docs/contract.md §6): every malformed event is rejected with a reason; good ones in the same batch go on."""

import math

import numpy as np
import orjson
import pytest

from streamdp.input.events import FAST_MIN_BATCH, MAX_ITEMS, MAX_PAYLOAD_BYTES, BadEvent, parse_batch, parse_event

GOOD = b'{"user": "u1", "ts": 1700000000.5, "items": ["a", "b"], "value": 3.5, "loc": [37.7, -122.4]}'

MALFORMED = [
    (b"", "empty_payload"),
    (b"  \n", "empty_payload"),
    (b"\xef\xbb\xbf{}", "malformed_json"),  # a byte-order mark (the detail names it)
    (b'{"user": "\\ud800", "ts": 1700000000}', "malformed_json"),  # a lone surrogate escape (valid UTF-8)
    (b'{"user": "u1", "ts": 1700000000, "\xaetems": ["a"]}', "not_utf8"),  # in a key msgspec skips
    (b'{"user": "u1", "ts": 1700000000, "note": "\xff"}', "not_utf8"),  # in an ignored field
    (b"{", "malformed_json"),
    (b"not json", "malformed_json"),
    (b'{"user": "u1", "ts": 1700000000,}', "malformed_json"),
    (b"\xff\xfe{}", "not_utf8"),
    (b'{"user": "u\xff", "ts": 1700000000}', "not_utf8"),
    (b"[1, 2]", "not_an_object"),
    (b'"just a string"', "not_an_object"),
    (b"null", "not_an_object"),
    (b'{"ts": 1700000000}', "missing_user"),
    (b'{"user": null, "ts": 1700000000}', "missing_user"),
    (b'{"user": ["u1"], "ts": 1700000000}', "bad_user"),
    (b'{"user": true, "ts": 1700000000}', "bad_user"),
    (b'{"user": "", "ts": 1700000000}', "bad_user"),
    (b'{"user": "u1"}', "missing_ts"),
    (b'{"user": "u1", "ts": "yesterday"}', "bad_ts"),
    (b'{"user": "u1", "ts": true}', "bad_ts"),
    (b'{"user": "u1", "ts": -5}', "absurd_ts"),
    (b'{"user": "u1", "ts": 1e15}', "absurd_ts"),
    (b'{"user": "u1", "ts": 1700000000, "items": "a"}', "bad_items"),
    (b'{"user": "u1", "ts": 1700000000, "items": [1, 2]}', "bad_items"),
    (b'{"user": "u1", "ts": 1700000000, "items": [""]}', "bad_items"),
    (b'{"user": "u1", "ts": 1700000000, "value": "high"}', "bad_value"),
    (b'{"user": "u1", "ts": 1700000000, "value": NaN}', "malformed_json"),
    (b'{"user": "u1", "ts": 1700000000, "value": Infinity}', "malformed_json"),
    (b'{"user": "u1", "ts": 1700000000, "value": 1e999}', "bad_value"),  # out of float range
    (b'{"user": "u1", "ts": 1700000000, "loc": [1]}', "bad_loc"),
    (b'{"user": "u1", "ts": 1700000000, "loc": ["a", "b"]}', "bad_loc"),
    (b'{"user": "u1", "ts": 1700000000, "loc": {"lat": 1, "lon": 2}}', "bad_loc"),
    (orjson.dumps({"user": "u1", "ts": 1700000000, "items": ["x"] * (MAX_ITEMS + 1)}), "too_many_items"),
    (b'{"user": "u1", "ts": 1700000000, "pad": "' + b"x" * MAX_PAYLOAD_BYTES + b'"}', "oversized"),
    (b'{"user": "' + b"u" * 300 + b'", "ts": 1700000000}', "bad_user"),
    (b'{"user": ' + b"9" * 300 + b', "ts": 1700000000}', "bad_user"),  # an integer user of 300 digits
]


def test_good_event_parses():
    user, ts, items, value, loc = parse_event(GOOD)
    assert (user, ts, items, value, loc) == ("u1", 1700000000.5, ["a", "b"], 3.5, (37.7, -122.4))


def test_optional_fields_absent():
    user, ts, items, value, loc = parse_event(b'{"user": 17, "ts": 1700000000}')
    assert user == "17" and items is None and math.isnan(value) and loc is None


@pytest.mark.parametrize("payload,reason", MALFORMED)
def test_malformed_event_is_rejected_with_reason(payload, reason):
    with pytest.raises(BadEvent) as e:
        parse_event(payload)
    assert e.value.reason == reason


def test_at_least_20_kinds_of_bad_input():
    """#5: at least 20 kinds of malformed events, each dead-lettered — asked of the parser, not of this list."""
    assert len(MALFORMED) >= 20
    for fast in (True, False):
        batch, dead = parse_batch([b for b, _ in MALFORMED] * (FAST_MIN_BATCH // len(MALFORMED) + 1), fast=fast)
        assert len(batch) == 0
        assert len({d.reason for d in dead}) >= 12


def test_payloads_that_are_not_bytes():
    """A memoryview is bytes (as for parse_event); anything else is dead-lettered not_bytes, keeping its text."""
    good = orjson.dumps({"user": "m", "ts": 1700000000, "items": ["a"]})
    batch, dead = parse_batch([memoryview(good), "a str", 12])
    assert batch.users == ["m"]
    assert [(d.reason, d.payload) for d in dead] == [("not_bytes", b"a str"), ("not_bytes", b"12")]


def test_batch_keeps_good_events_and_dead_letters_bad_ones_in_order():
    payloads = []
    for i, (bad, _) in enumerate(MALFORMED):
        payloads.append(orjson.dumps({"user": f"u{i}", "ts": 1700000000 + i, "items": [f"i{i}"]}))
        payloads.append(bad)
    batch, dead = parse_batch(payloads)
    assert len(batch) == len(MALFORMED)
    assert [d.reason for d in dead] == [r for _, r in MALFORMED]
    assert batch.users == [f"u{i}" for i in range(len(MALFORMED))]
    assert batch.items == [f"i{i}" for i in range(len(MALFORMED))]
    np.testing.assert_array_equal(batch.source_rows, np.arange(0, 2 * len(MALFORMED), 2))
    np.testing.assert_array_equal(np.diff(batch.item_offsets), np.ones(len(MALFORMED)))


def test_a_bad_payload_does_not_change_the_good_ones_columns():
    good = [orjson.dumps({"user": f"u{i}", "ts": 1.7e9 + i, "items": ["a"] * (i % 3), "value": i})
            for i in range(50)]
    b1, d1 = parse_batch(good)
    b2, d2 = parse_batch(good + [b"{"])
    assert not d1 and len(d2) == 1
    assert b1.users == b2.users and b1.items == b2.items
    np.testing.assert_array_equal(b1.ts, b2.ts)
    np.testing.assert_array_equal(b1.item_offsets, b2.item_offsets)


def test_batch_fast_path_equals_exact_path_with_hand_written_values():
    """A batch large enough for the Arrow fast path against the exact (msgspec) path and against values written
    here: users (an integer user becomes its decimal string), items, ts, value (absent = NaN), loc."""
    n = FAST_MIN_BATCH + 5
    good = [orjson.dumps({"user": i if i % 7 == 0 else f"u{i}", "ts": 1.7e9 + i, "items": ["a"] * (i % 3),
                          **({"value": i / 2} if i % 2 else {}), **({"loc": [1.0, -2.0]} if i % 5 == 0 else {})})
            for i in range(n)]
    for fast in (True, False):
        b, d = parse_batch(good + [b"{"], fast=fast)
        assert [x.reason for x in d] == ["malformed_json"]
        assert b.users == [str(i) if i % 7 == 0 else f"u{i}" for i in range(n)]
        assert b.items == ["a"] * sum(i % 3 for i in range(n))
        np.testing.assert_array_equal(b.item_offsets, np.concatenate([[0], np.cumsum([i % 3 for i in range(n)])]))
        np.testing.assert_array_equal(b.ts, 1.7e9 + np.arange(n))
        np.testing.assert_array_equal(b.value, [i / 2 if i % 2 else np.nan for i in range(n)])
        np.testing.assert_array_equal(b.loc, [[1.0, -2.0] if i % 5 == 0 else [np.nan, np.nan] for i in range(n)])


def test_smuggled_two_values_in_one_payload_is_rejected():
    batch, dead = parse_batch([b'{"user":"a","ts":1700000000},{"user":"b","ts":1700000000}', GOOD])
    assert len(batch) == 1 and len(dead) == 1 and dead[0].reason == "malformed_json"


def test_large_batch_with_scattered_bad_events_matches_per_event_parsing():
    payloads = []
    bad_rows = {}
    for i in range(10_000):
        if i % 97 == 13:
            bad, reason = MALFORMED[i % len(MALFORMED)]
            payloads.append(bad)
            bad_rows[i] = reason
        else:
            payloads.append(orjson.dumps({"user": f"u{i % 300}", "ts": 1.7e9 + i, "items": ["a", f"b{i % 7}"]}))
    batch, dead = parse_batch(payloads)
    assert len(batch) == 10_000 - len(bad_rows)
    assert [d.reason for d in dead] == [bad_rows[i] for i in sorted(bad_rows)]
    assert set(batch.source_rows.tolist()).isdisjoint(bad_rows)
    for k in (0, 500, len(batch) - 1):
        row = int(batch.source_rows[k])
        u, ts, items, _, _ = parse_event(payloads[row])
        assert batch.users[k] == u and batch.ts[k] == ts
        assert batch.items[batch.item_offsets[k]:batch.item_offsets[k + 1]] == items
