"""Input review of 2026-11-23 (twelfth session): non-UTF-8 bytes where msgspec does not look, reasons an operator
can act on, and `streamdp replay` keying and byte-order marks."""

from __future__ import annotations

import pytest

from streamdp.adapters.kafka.replay import JsonlFile, user_key
from streamdp.input.events import FAST_MIN_BATCH, BadEvent, parse_batch, parse_event
from streamdp.input.sources import jsonl_events

GOOD = b'{"user":"u%d","ts":1700000000,"items":["i"]}'
NOT_UTF8 = [
    b'{"user":"u1","ts":1700000000,"\xaetems":["insulin"]}',  # a flipped byte in a key: was accepted WITHOUT items
    b'{"user":"u1","ts":1700000000,"note":"\xff\xfe"}',  # in an ignored field
    b'{"user":"u1","ts":1700000000,"x\xed\xa0\x80":1}',  # an encoded surrogate in an unknown key
]


@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("bad", NOT_UTF8)
def test_a_payload_that_is_not_utf8_anywhere_is_dead_lettered(bad, fast):
    with pytest.raises(BadEvent, match="not_utf8"):
        parse_event(bad)
    raws = [GOOD % i for i in range(FAST_MIN_BATCH + 10 if fast else 10)]
    raws[5] = bad
    batch, dead = parse_batch(raws, fast=fast)
    assert [(d.reason, d.payload) for d in dead] == [("not_utf8", bad)]
    assert len(batch) == len(raws) - 1 and 5 not in batch.source_rows.tolist()


@pytest.mark.parametrize("raw,reason,detail", [
    (b"", "empty_payload", "empty or blank"),
    (b"  \r\n", "empty_payload", "empty or blank"),
    (b'\xef\xbb\xbf{"user":"a","ts":1700000000}', "malformed_json", "byte-order mark"),
    (b'{"user":"\\ud800","ts":1700000000}', "malformed_json", "surrogate pair"),
    (b'{"user":"a","ts":1700000000,"note":"\\ud83d"}', "malformed_json", "surrogate pair"),
])
def test_reasons_name_the_problem(raw, reason, detail):
    with pytest.raises(BadEvent) as e:
        parse_event(raw)
    assert e.value.reason == reason and detail in e.value.detail
    _, dead = parse_batch([GOOD % 1, raw])
    assert dead[0].reason == reason and detail in dead[0].detail


def test_a_payload_that_is_not_bytes_keeps_no_made_up_text():
    _, dead = parse_batch([None, 17])
    assert [(d.reason, d.payload) for d in dead] == [("not_bytes", b""), ("not_bytes", b"17")]
    assert "NoneType" in dead[0].detail and "int" in dead[1].detail


@pytest.mark.parametrize("payload,user", [
    (b'{"user":"N4","ts":1700000000,"x":1e400}', b"N4"),  # orjson refused the number in an ignored field
    (b'{"user":18446744073709551616,"ts":1700000000}', b"18446744073709551616"),  # past 64 bits
    (b'{"user":"N4","ts":-5}', b"N4"),  # a bad event keeps its user as key where it has one
    (b'not json', None),
])
def test_replay_keys_an_event_by_the_user_the_worker_reads(payload, user):
    assert user_key(payload) == user
    try:
        assert parse_event(payload)[0].encode() == user
    except BadEvent:
        pass


def test_a_files_byte_order_mark_is_not_part_of_its_first_event(tmp_path):
    p = tmp_path / "events.jsonl"
    p.write_bytes(b'\xef\xbb\xbf{"user":"a","ts":1700000000}\n{"user":"b","ts":1700000001}\n')
    for lines in (list(JsonlFile(str(p))), list(jsonl_events(str(p)))):
        assert lines[0] == b'{"user":"a","ts":1700000000}'
        assert parse_batch(lines)[1] == []
