"""Event limits at their boundaries, with known answers written by hand (docs/contract.md §6; closes the gaps of the
event-parsing mutation audit).

Every case goes through the three ways a payload is parsed, and each must give the hand verdict:

* ``parse_event`` (one payload, the exact checks);
* ``parse_batch(..., fast=False)`` (the exact path's vectorised checks), the payload alone among good ones;
* ``parse_batch(...)`` on the same batch, which has at least ``FAST_MIN_BATCH`` payloads so the Arrow fast path
  runs (checked: ``arrow_decode.decode`` is called).

The limits, stated by hand (a changed constant must fail here, not silently move the boundary):

* ``MAX_PAYLOAD_BYTES`` = 64 KiB = 64 · 1024 = 65536 bytes;
* ``MAX_USER_LEN`` = ``MAX_ITEM_LEN`` = 256 characters; ``MAX_ITEMS`` = 1000;
* event time in [1970-01-01, 2200-01-01): ``MIN_TS`` = 0 and ``MAX_TS`` = 7258118400. Derivation: from 1970 to
  2200 there are 230 years; the leap years among 1970..2199 are 1972, 1976, …, 2196, that is
  (2196 − 1972)/4 + 1 = 57, less 2100 (a century not divisible by 400) = 56. Days: 230 · 365 + 56 = 84006;
  seconds: 84006 · 86400 = 7 258 118 400. (Checked again below with ``datetime``.)
"""

from datetime import datetime, timezone

import orjson
import pytest

from streamdp.input import arrow_decode
from streamdp.input import events as events_mod
from streamdp.input.events import FAST_MIN_BATCH, BadEvent, parse_batch, parse_event

K = 777  # where the payload under test sits in the batch


def _pad(n):
    """Good payloads, deterministic; no user is named like the ones under test."""
    return [orjson.dumps({"user": f"pad{i % 89}", "ts": 1.7e9 + i * 0.25, "items": [f"i{i % 7}"] * (i % 3),
                          **({"value": i / 8} if i % 2 else {})}) for i in range(n)]


PAD = _pad(FAST_MIN_BATCH + 16)


@pytest.fixture
def arrow_calls(monkeypatch):
    """Counts parse_batch's calls to the fast decoder (so a 'fast' run that silently skipped Arrow fails)."""
    calls = []
    orig = arrow_decode.decode

    def spy(payloads, **kw):
        calls.append(len(payloads))
        return orig(payloads, **kw)

    monkeypatch.setattr(arrow_decode, "decode", spy)
    return calls


def _batches(payload, calls):
    """(fast, batch, dead letters) for ``payload`` alone at K among PAD, exact path then fast path."""
    payloads = PAD[:K] + [payload] + PAD[K:]
    out = []
    for fast in (False, True):
        calls.clear()
        b, dead = parse_batch(payloads, fast=fast)
        assert len(calls) == (1 if fast else 0), "the fast path did not run" if fast else "exact path used Arrow"
        out.append((fast, b, dead))
    return out


def assert_rejected(payload, reason, calls):
    with pytest.raises(BadEvent) as e:
        parse_event(payload)
    assert e.value.reason == reason, "parse_event"
    for fast, b, dead in _batches(payload, calls):
        assert [(d.payload, d.reason) for d in dead] == [(payload, reason)], f"fast={fast}"
        assert len(b) == len(PAD) and K not in b.source_rows.tolist(), f"fast={fast}"


def assert_accepted(payload, user, ts, items, calls):
    got = parse_event(payload)
    assert (got[0], got[1], got[2] or []) == (user, ts, items), "parse_event"
    for fast, b, dead in _batches(payload, calls):
        assert dead == [], f"fast={fast}"
        assert len(b) == len(PAD) + 1 and int(b.source_rows[K]) == K, f"fast={fast}"
        assert b.users[K] == user and b.ts[K] == ts, f"fast={fast}"
        assert b.items[b.item_offsets[K]:b.item_offsets[K + 1]] == items, f"fast={fast}"
        # the rows around it are untouched
        assert b.users[K - 1] == f"pad{(K - 1) % 89}" and b.users[K + 1] == f"pad{K % 89}"


def test_limits_are_the_documented_values():
    assert events_mod.MAX_PAYLOAD_BYTES == 65536 == 64 * 1024
    assert events_mod.MAX_USER_LEN == 256 and events_mod.MAX_ITEM_LEN == 256 and events_mod.MAX_ITEMS == 1000
    assert events_mod.MIN_TS == 0.0
    assert events_mod.MAX_TS == 7258118400.0 == (230 * 365 + 56) * 86400
    assert datetime(2200, 1, 1, tzinfo=timezone.utc).timestamp() == 7258118400.0
    assert datetime(1970, 1, 1, tzinfo=timezone.utc).timestamp() == 0.0


def test_float_user_is_bad_user_while_int_and_string_17_are_one_user(arrow_calls):
    """A user is a string or an integer (its decimal text). A float is refused even when integral: 1.0 and 1
    would otherwise be two different users ("1.0" vs "1") for one person."""
    assert_rejected(b'{"user": 1.0, "ts": 1700000000}', "bad_user", arrow_calls)
    assert_rejected(b'{"user": 17.0, "ts": 1700000000}', "bad_user", arrow_calls)
    int_user, str_user = b'{"user": 17, "ts": 1700000000}', b'{"user": "17", "ts": 1700000000}'
    assert_accepted(int_user, "17", 1700000000.0, [], arrow_calls)
    assert_accepted(str_user, "17", 1700000000.0, [], arrow_calls)
    both = PAD[:K] + [int_user, str_user] + PAD[K:]
    for fast in (False, True):
        b, dead = parse_batch(both, fast=fast)
        assert dead == [] and b.users[K] == b.users[K + 1] == "17"
        if b.user_codes is not None:  # the fast path's interning help names the same user
            assert b.user_dict[b.user_codes[K]] == b.user_dict[b.user_codes[K + 1]] == "17"


@pytest.mark.parametrize("ts_text,reason,ts", [
    (b"7258118400", "absurd_ts", None),  # 2200-01-01T00:00:00Z itself: excluded
    (b"7258118400.0", "absurd_ts", None),
    (b"7258118399.5", None, 7258118399.5),  # half a second before: accepted
    (b"1700000000000", "absurd_ts", None),  # milliseconds by mistake (2023 in ms is year ~55800)
    (b"1e999", "absurd_ts", None),  # past the float range: absurd, not a type error
    (b"0", None, 0.0),  # 1970-01-01 itself: accepted
    (b"-0.5", "absurd_ts", None),
])
def test_event_time_bounds(arrow_calls, ts_text, reason, ts):
    payload = b'{"user": "t", "ts": ' + ts_text + b', "items": ["a"]}'
    if reason is None:
        assert_accepted(payload, "t", ts, ["a"], arrow_calls)
    else:
        assert_rejected(payload, reason, arrow_calls)


@pytest.mark.parametrize("ch", ["u", "é"])  # one byte or two bytes per character: the limit is in characters
def test_user_length_boundary(arrow_calls, ch):
    u256, u257 = ch * 256, ch * 257
    assert_accepted(orjson.dumps({"user": u256, "ts": 1700000000}), u256, 1700000000.0, [], arrow_calls)
    assert_rejected(orjson.dumps({"user": u257, "ts": 1700000000}), "bad_user", arrow_calls)


@pytest.mark.parametrize("ch", ["x", "日"])
def test_item_length_boundary(arrow_calls, ch):
    i256, i257 = ch * 256, ch * 257
    assert_accepted(orjson.dumps({"user": "i", "ts": 1700000000, "items": ["ok", i256]}), "i", 1700000000.0,
                    ["ok", i256], arrow_calls)
    assert_rejected(orjson.dumps({"user": "i", "ts": 1700000000, "items": ["ok", i257]}), "bad_items", arrow_calls)


def _sized(n, ts=b"1700000000"):
    """A valid event of exactly ``n`` bytes (a padding field fills it)."""
    head, tail = b'{"user": "big", "ts": ' + ts + b', "pad": "', b'"}'
    p = head + b"x" * (n - len(head) - len(tail)) + tail
    assert len(p) == n
    return p


def test_payload_size_boundary(arrow_calls):
    """65536 bytes is accepted, 65537 is oversized — on every path (the batch path checks sizes up front)."""
    assert_accepted(_sized(65536), "big", 1700000000.0, [], arrow_calls)
    assert_rejected(_sized(65537), "oversized", arrow_calls)


def test_dead_letters_keep_the_payload_bytes_exactly(arrow_calls):
    """A dead letter carries the payload as it came, byte for byte (docs/contract.md §6: nothing is lost) — not
    truncated, not stripped of surrounding whitespace."""
    bad = [
        (_sized(65536, ts=b"-5"), "absurd_ts"),  # 64 KiB, decoded then refused
        (_sized(65537), "oversized"),  # refused before decoding
        (_sized(65000)[:-1], "malformed_json"),  # ~64 KiB, unterminated
        (b'  {"user": "a", "ts": -5}  ', "absurd_ts"),
        (b'\t{"user": "a", "ts": 1700000000, "items": [""]}\n ', "bad_items"),
        (b' {"user": "a", "ts": ', "malformed_json"),
        (b"\n\n", "empty_payload"),
    ]
    payloads = list(PAD)
    where = []
    for j, (p, _) in enumerate(bad):
        where.append(100 + 250 * j)
        payloads.insert(where[-1], p)
    for fast in (False, True):
        arrow_calls.clear()
        b, dead = parse_batch(payloads, fast=fast)
        assert len(arrow_calls) == (1 if fast else 0)
        assert [d.reason for d in dead] == [r for _, r in bad]
        for d, (p, _) in zip(dead, bad):
            assert type(d.payload) is bytes and len(d.payload) == len(p) and d.payload == p
        assert len(b) == len(PAD) and not set(where) & set(b.source_rows.tolist())
    for p, reason in bad:  # the single-payload parser agrees on every reason
        with pytest.raises(BadEvent) as e:
            parse_event(p)
        assert e.value.reason == reason
