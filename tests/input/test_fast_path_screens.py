"""The fast path's screens, one payload at a time (closes the gaps of the event-parsing mutation audit).

test_arrow_decode.py interleaves many bad payloads; there a screen can fail silently because a neighbour (or the
read budget) already sent the whole region to the exact path. Here every tricky payload sits ALONE among good
ones in a batch of at least ``FAST_MIN_BATCH`` payloads (the real threshold, not patched), so Arrow really sees
it, and we demand:

* the fast and the exact path give identical batches (bitwise) and dead letters (``assert_same``);
* the hand-known verdict (dead-letter reason, or the accepted values);
* the fast path really ran: ``arrow_decode.decode`` was called by ``parse_batch`` and handed exactly the tricky
  payload to the exact path, taking every good one itself.
"""

import math

import numpy as np
import orjson
import pytest

from streamdp.input import arrow_decode
from streamdp.input.events import FAST_MIN_BATCH, MAX_PAYLOAD_BYTES, BadEvent, parse_batch, parse_event

from test_arrow_decode import assert_same  # noqa: E402 (same folder, rootdir-relative import)
from test_events import MALFORMED  # noqa: E402

K = 1000  # where the tricky payload sits (well inside the batch)


def _pad(n):
    """Good payloads, deterministic: string users (one stretch of integer users: two schema switches), raw UTF-8
    items, optional value and loc, integer and fractional ts. No user is named "a", "b" or "c"."""
    out = []
    for i in range(n):
        d = {"user": (10_000 + i % 31) if 300 <= i < 340 else f"p{i % 97}",
             "ts": 1_700_000_000 + i if i % 3 == 0 else 1.7e9 + i * 0.5}
        if i % 4:
            d["items"] = ["é-crème", f"i{i % 13}", "日本"][: i % 4]
        if i % 2:
            d["value"] = i / 4
        if i % 5 == 0:
            d["loc"] = [1.5, -2.25]
        out.append(orjson.dumps(d))
    return out


PAD = _pad(FAST_MIN_BATCH + 52)  # ≥ FAST_MIN_BATCH good payloads even without the tricky one


@pytest.fixture
def arrow_calls(monkeypatch):
    """Records every call parse_batch makes to the fast decoder: (payloads passed, ArrowColumns returned)."""
    calls = []
    orig = arrow_decode.decode

    def spy(payloads, **kw):
        ac = orig(payloads, **kw)
        calls.append((list(payloads), ac))
        return ac

    monkeypatch.setattr(arrow_decode, "decode", spy)
    return calls


def run_alone(bad, calls):
    """``bad`` alone at index K among PAD; both paths must agree; the fast path must have sent only ``bad`` slow."""
    payloads = PAD[:K] + [bad] + PAD[K:]
    fb, fd = assert_same(payloads)
    assert len(calls) == 1, "parse_batch did not take the fast path"
    seen, ac = calls[0]
    if len(bad) > MAX_PAYLOAD_BYTES:  # dead-lettered before decoding: Arrow saw only the good ones, took them all
        assert seen == PAD and ac.slow.tolist() == [] and ac.rows.tolist() == list(range(len(PAD)))
    else:
        assert seen == payloads
        assert ac.slow.tolist() == [K]
        assert ac.rows.tolist() == [i for i in range(len(payloads)) if i != K]
    return fb, fd


def check_rejected(fb, fd, bad, reason):
    assert [(d.payload, d.reason) for d in fd] == [(bad, reason)]
    assert len(fb) == len(PAD) and K not in fb.source_rows.tolist()


NAN_IN_ARRAY = b'{"user":"a","ts":1700000000,"x":[NaN]}'
NAN_AFTER_TAB = b'{"user":"a","ts":1700000000,"x":\tNaN}'
DEEP_OBJECTS = b'{"user":"a","ts":1700000000,"x":' + b'{"a":' * 1500 + b"1" + b"}" * 1500 + b"}"
BYTE_0X80 = b'{"user":"a\x80","ts":1700000000}'
TS_2200 = b'{"user":"a","ts":7258118400}'
TOO_MANY_ITEMS = b'{"user":"a","ts":1700000000,"items":[' + b",".join([b'"x"'] * 1001) + b"]}"
VALUE_OVERFLOW = b'{"user":"a","ts":1700000000,"value":1.8e308}'


@pytest.mark.parametrize("bad,reason", [
    (NAN_IN_ARRAY, "malformed_json"),  # NaN after '[' (not JSON; RapidJSON takes it)
    (NAN_AFTER_TAB, "malformed_json"),  # NaN after ':' and a TAB
    (DEEP_OBJECTS, "malformed_json"),  # 1500 nested objects: msgspec refuses, Arrow would not
    (BYTE_0X80, "not_utf8"),  # a lone continuation byte 0x80 (the smallest non-ASCII byte)
    (TS_2200, "absurd_ts"),  # ts == MAX_TS exactly (2200-01-01 is excluded)
    (TOO_MANY_ITEMS, "too_many_items"),  # MAX_ITEMS + 1 items
    (VALUE_OVERFLOW, "bad_value"),  # past the largest double: msgspec refuses, Arrow gives inf
], ids=["nan_in_array", "nan_after_tab", "deep_objects", "byte_0x80", "ts_2200", "1001_items", "value_1.8e308"])
def test_tricky_payload_alone_gets_the_exact_verdict(arrow_calls, bad, reason):
    assert len(TOO_MANY_ITEMS) < MAX_PAYLOAD_BYTES and DEEP_OBJECTS.count(b"{") == 1501
    with pytest.raises(BadEvent) as e:  # the verdict written by hand, from the single-payload parser too
        parse_event(bad)
    assert e.value.reason == reason
    fb, fd = run_alone(bad, arrow_calls)
    check_rejected(fb, fd, bad, reason)


def _bits(x):
    return np.float64(x).tobytes()


def test_integer_minus_zero_ts_is_plus_zero_on_both_paths(arrow_calls):
    """``"ts": -0`` is the integer 0: msgspec gives +0.0, Arrow −0.0; the batch must hold +0.0 (bitwise)."""
    bad = b'{"user":"a","ts":-0}'
    user, ts, *_ = parse_event(bad)
    assert user == "a" and _bits(ts) == _bits(0.0) and math.copysign(1.0, ts) == 1.0
    fb, fd = run_alone(bad, arrow_calls)
    assert fd == [] and len(fb) == len(PAD) + 1
    assert fb.users[K] == "a" and int(fb.source_rows[K]) == K
    assert _bits(fb.ts[K]) == _bits(0.0) and not np.signbit(fb.ts[K])


def test_integer_minus_zero_loc_alone_is_plus_zero_on_both_paths(arrow_calls):
    """``"loc": [-0, 0]`` alone (no ``value: -0`` beside it to trip another screen): loc must be (+0.0, +0.0)."""
    bad = b'{"user":"a","ts":1700000000,"loc":[-0,0]}'
    assert parse_event(bad)[4] == (0.0, 0.0) and not np.signbit(parse_event(bad)[4][0])
    fb, fd = run_alone(bad, arrow_calls)
    assert fd == [] and fb.users[K] == "a"
    assert fb.loc[K].tobytes() == np.zeros(2).tobytes() and not np.signbit(fb.loc[K]).any()
    assert math.isnan(fb.value[K]) and fb.ts[K] == 1.7e9


def test_adjacent_unterminated_payload_and_trailing_values_make_no_phantom_events(arrow_calls):
    """P1 is cut off after ``"x":``; P2 closes an object and carries a second value. Joined with a newline they
    form two valid JSON values (user "a" with x = P2's first object, and user "c") — as many values as payloads, so
    a row count cannot see it. Each payload alone is malformed: both dead-lettered, no event of a, b or c."""
    p1 = b'{"user":"a","ts":1700000000,"x":'
    p2 = b'{"user":"b","ts":1700000000}} {"user":"c","ts":1700000000}'
    payloads = PAD[:K] + [p1, p2] + PAD[K:]
    for fast in (True, False):
        b, dead = parse_batch(payloads, fast=fast)
        assert [(d.payload, d.reason) for d in dead] == [(p1, "malformed_json"), (p2, "malformed_json")]
        assert not {"a", "b", "c"} & set(b.users)
        assert len(b) == len(PAD) and not {K, K + 1} & set(b.source_rows.tolist())
    arrow_calls.clear()
    assert_same(payloads)
    assert len(arrow_calls) == 1
    _, ac = arrow_calls[0]
    rows, slow = ac.rows.tolist(), ac.slow.tolist()
    # the pair went to the exact path and nothing else: P1 fails the layout screen, P2's read error has no row
    # number and the bracket-depth scan names it (before that scan, bisection spent the read budget and about
    # half of the batch went slow)
    assert slow == [K, K + 1]
    assert sorted(rows + slow) == list(range(len(payloads)))


@pytest.mark.parametrize("bad,reason", MALFORMED, ids=[f"{i}-{r}" for i, (_, r) in enumerate(MALFORMED)])
def test_every_malformed_payload_alone_reaches_arrow_and_gets_the_exact_verdict(arrow_calls, bad, reason):
    fb, fd = run_alone(bad, arrow_calls)
    check_rejected(fb, fd, bad, reason)
