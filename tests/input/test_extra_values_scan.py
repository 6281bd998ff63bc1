"""The bracket-depth scan that names a payload holding more than one JSON value (``arrow_decode._extra_values``).

Arrow reports ``{…}} {…}`` ("The document is empty") without a row number, and ``{…} {…}`` only as one row too
many. Before the scan, the fast decoder bisected the range; on a 2,100-payload batch its read budget ran out and
about half of the batch went to the exact path for one bad payload. Now the scan names the payload in one pass and
bisection is left for what it cannot explain. Known answers are by hand: where the top-level value of each payload
closes (strings, escaped quotes and escaped backslashes taken into account).
"""

import numpy as np
import orjson
import pytest

from streamdp.input import arrow_decode
from streamdp.input.arrow_decode import _extra_values, _layout
from streamdp.input.events import parse_batch

from test_arrow_decode import assert_same  # noqa: E402 (same folder, rootdir-relative import)


def flagged(payloads):
    joined, starts, lens = _layout(payloads)
    return _extra_values(np.frombuffer(joined, dtype=np.uint8), starts, lens).tolist()


CLEAN = [
    b'{"a":1}',
    b'{"a":"}"}',  # a closing brace inside a string
    b'{"a":"} {"}',  # a whole "} {" inside a string
    b'{"a":"\\"}"}',  # an escaped quote: the string is \"}
    b'{"a":"\\\\"}',  # an escaped backslash, then the closing quote
    b'{"a":[1,{"b":[2,3]}],"c":{}}',
    b'{"a":"[[[{{{"}',
    b'{"a":"\\\\\\"}"}',  # three backslashes: \\ then \" — still inside the string
]
EXTRA = [
    b'{"a":1}}',  # one closing brace too many: depth ends at -1
    b'{"a":1} {"b":2}',  # two values: depth 0 before the last bracket
    b'{"a":1}{"b":2}',
    b'{"a":"\\\\"} {"b":1}',  # the string is one escaped backslash; the object closes at byte 10
    b'{"a":"}',  # the quote never closes
    b'{"a":[1]]}',  # a bracket closes the top level early
    b'{"a":1} 5 {}',
]


def test_hand_cases_one_at_a_time():
    for p in CLEAN:
        assert flagged([p]) == [], p
    for p in EXTRA:
        assert flagged([p]) == [0], p


def test_hand_cases_mixed_in_one_range():
    """Rows are judged on their own: a neighbour's open string or unbalanced depth does not leak across the
    newline separator (depth and quote counts are relative to each row's start)."""
    payloads, want = [], []
    for i in range(40):
        p = (EXTRA if i % 3 == 0 else CLEAN)[i % 7]
        payloads.append(p)
        if i % 3 == 0:
            want.append(i)
    assert flagged(payloads) == want


def good(n):
    return [orjson.dumps({"user": f"u{i % 97}", "ts": 1_700_000_000 + i, "items": ["x", f"i{i % 13}"],
                          "note": "a } b { c \\" if i % 5 == 0 else "n"}) for i in range(n)]


@pytest.mark.parametrize("bad", [b'{"user":"b","ts":1700000000}} {"user":"c","ts":1700000000}',
                                 b'{"user":"b","ts":1700000000} {"user":"c","ts":1700000000}',
                                 b'{"user":"b","ts":1700000000}}'])
def test_one_extra_value_payload_sends_only_itself_slow(monkeypatch, bad):
    """One bad payload among 2,100: Arrow takes every other payload (before the scan: about 1,100 went slow),
    and the fast path's verdict equals the exact path's."""
    calls = []
    orig = arrow_decode.decode

    def spy(payloads, **kw):
        ac = orig(payloads, **kw)
        calls.append(ac)
        return ac

    monkeypatch.setattr(arrow_decode, "decode", spy)
    payloads = good(2100)
    payloads[1000] = bad
    b, dead = assert_same(payloads)
    assert [(d.payload, d.reason) for d in dead] == [(bad, "malformed_json")]
    assert "b" not in b.users and "c" not in b.users and len(b) == 2099
    (ac,) = [c for c in calls if len(c.rows) + len(c.slow) == 2100]
    assert ac.slow.tolist() == [1000]


def test_without_the_scan_bisection_still_finds_the_payload(monkeypatch):
    """When the scan names nothing (here forced), the decoder bisects as before: same verdict, rows still taken
    by Arrow (positive control for the fallback)."""
    monkeypatch.setattr(arrow_decode, "_extra_values", lambda buf, starts, lens: np.zeros(0, dtype=np.int64))
    payloads = good(300)
    payloads[150] = b'{"user":"b","ts":1700000000}} {"user":"c","ts":1700000000}'
    b, dead = assert_same(payloads)
    assert [d.reason for d in dead] == ["malformed_json"] and len(b) == 299
    batch, _ = parse_batch(payloads)
    assert 150 not in batch.source_rows.tolist()


def test_user_and_item_length_limits_are_separate():
    """``decode`` takes the two limits separately (both 256 in the service, so a swap would be latent): with a
    user limit of 3 and an item limit of 5, a 4-character user goes slow and a 4-character item does not, and a
    6-character item goes slow while a 3-character user does not."""
    from streamdp.input.events import MAX_ITEMS, MAX_TS, MIN_TS

    payloads = [orjson.dumps({"user": u, "ts": 1_700_000_000, "items": [it]})
                for u, it in [("abc", "wxyz"), ("abcd", "w"), ("abc", "uvwxyz"), ("ab", "uvwxy")]]
    ac = arrow_decode.decode(payloads, max_user_len=3, max_items=MAX_ITEMS, max_item_len=5, min_ts=MIN_TS,
                             max_ts=MAX_TS)
    assert ac.rows.tolist() == [0, 3] and ac.slow.tolist() == [1, 2]
