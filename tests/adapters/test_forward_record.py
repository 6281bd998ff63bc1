"""The forward record of the staged topology (stage A → coordinator, ``streamdp/adapters/kafka/forward.py``):
a lossless codec of parsed events, and the coordinator's exactly-once rule over re-sends and stale owners."""

from __future__ import annotations

import random

import numpy as np
import orjson
import pytest

from streamdp.adapters.kafka.forward import ForwardError, ForwardRecord, Stream, accept, decode, encode
from streamdp.input.events import FAST_MIN_BATCH, parse_batch


S = Stream("g", "events")  # the record's stream (tests/adapters/test_forward_identity_review12.py)


def _payloads(n: int, seed: int = 1) -> list[bytes]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        e = {"user": f"u{rng.randrange(n // 3 + 1)}", "ts": 1.7e9 + i * 0.5}
        if rng.random() < 0.7:
            e["items"] = [f"item-{rng.randrange(50)}" for _ in range(rng.randrange(0, 4))]
        if rng.random() < 0.5:
            e["value"] = rng.uniform(-5, 5)
        if rng.random() < 0.3:
            e["loc"] = [rng.uniform(-80, 80), rng.uniform(-170, 170)]
        out.append(orjson.dumps(e))
    return out


@pytest.mark.parametrize("n", [0, 1, 37, FAST_MIN_BATCH + 100])  # empty, exact path, columnar fast path
def test_round_trip_is_lossless(n):
    payloads = _payloads(n)
    parsed, dead = parse_batch(payloads)
    assert not dead
    offsets = np.arange(100, 100 + 2 * n, 2, dtype=np.int64)  # gaps: offsets need not be contiguous
    hi = int(offsets[-1]) + 3 if n else 99
    rec = decode(encode(ForwardRecord(5, 100, hi, offsets, payloads, parsed, S)))
    assert (rec.partition, rec.lo, rec.hi, rec.next_offset, rec.stream) == (5, 100, hi, hi + 1, S)
    assert rec.offsets.tolist() == offsets.tolist() and rec.payloads == payloads
    assert len(rec.payloads) == n and [rec.payloads[i] for i in range(n)] == payloads
    if n:
        assert rec.payloads[-1] == payloads[-1]
    with pytest.raises(IndexError):
        rec.payloads[n]
    b = rec.batch
    assert b.users == parsed.users and b.items == parsed.items
    assert b.item_offsets.tolist() == parsed.item_offsets.tolist()
    np.testing.assert_array_equal(b.ts, parsed.ts)  # bit-exact, NaN where absent
    np.testing.assert_array_equal(b.value, parsed.value)
    np.testing.assert_array_equal(b.loc, parsed.loc)
    assert b.source_rows.tolist() == list(range(n))
    # the interning help is consistent with the names
    assert [b.user_dict[c] for c in b.user_codes] == b.users
    assert [b.item_dict[c] for c in b.item_codes] == b.items


def test_encode_refuses_events_outside_the_vouched_range():
    payloads = _payloads(3)
    parsed, _ = parse_batch(payloads)
    with pytest.raises(ValueError, match="outside the vouched range"):
        encode(ForwardRecord(0, 10, 11, np.array([10, 11, 12]), payloads, parsed, S))
    with pytest.raises(ValueError, match="outside the vouched range"):
        encode(ForwardRecord(0, 11, 20, np.array([10, 11, 12]), payloads, parsed, S))
    with pytest.raises(ValueError, match="one entry per event"):
        encode(ForwardRecord(0, 10, 20, np.array([10, 11]), payloads, parsed, S))


def test_undecodable_records_raise_forward_error():
    payloads = _payloads(40)
    parsed, _ = parse_batch(payloads)
    good = encode(ForwardRecord(1, 0, 39, np.arange(40), payloads, parsed, S))
    for bad in (b"", b"SDPF", b"XXXX" + good[4:], good[:-1], good[:len(good) // 2], good + b"x",
                good.replace(b'"v":2', b'"v":9', 1)):
        with pytest.raises(ForwardError):
            decode(bad)


def test_accept_rule_known_answers():
    offs = np.array([10, 12, 15])  # offsets 11, 13, 14, 16 were dead letters (or compacted away)
    assert accept(8, 16, offs, None) == 0
    assert accept(8, 16, offs, 8) == 0
    assert accept(8, 16, offs, 11) == 1
    assert accept(8, 16, offs, 13) == 2
    assert accept(8, 16, offs, 16) == 3  # nothing new, but the range reaches 16: accepted, the position advances
    assert accept(8, 16, offs, 17) is None  # all seen
    assert accept(9, 16, offs, 8) is None  # a gap [8, 9): its re-send is still to come


def _runs(valid: list[int], start: int, end: int, rng: random.Random) -> list[tuple[int, int, list[int]]]:
    """What one ingest owner forwards reading offsets [start, end) sequentially in random-sized runs."""
    out, pos = [], start
    while pos < end:
        hi = min(end - 1, pos + rng.randrange(1, 12))
        out.append((pos, hi, [o for o in valid if pos <= o <= hi]))
        pos = hi + 1
    return out


@pytest.mark.parametrize("seed", range(200))
def test_exactly_once_over_crashes_and_stale_owners(seed):
    """Model of the protocol: owners read sequentially from the committed offset, forward runs, commit a run's
    end only after it is acknowledged; a rebalance hands the partition to a new owner that starts at the last
    commit while the stale owner's un-committed runs still land, interleaved at random with the new owner's.
    The coordinator applying :func:`accept` must take every valid offset exactly once, in order."""
    rng = random.Random(seed)
    n = rng.randrange(20, 120)
    valid = sorted(rng.sample(range(n), rng.randrange(0, n)))  # the rest: dead letters / missing offsets
    stream: list[tuple[int, int, list[int]]] = []
    committed = 0
    for _ in range(rng.randrange(1, 4)):  # owners one after the other
        runs = _runs(valid, committed, n, rng)
        k = rng.randrange(0, len(runs) + 1) if runs else 0  # runs acknowledged and committed before the hand-over
        stream.extend(runs[:k])
        committed = runs[k - 1][1] + 1 if k else committed
        stale = runs[k:k + rng.randrange(0, 4)]  # sent but not committed: they land later, anywhere
        tail = []
        if committed < n and rng.random() < 0.8:
            continue_with = _runs(valid, committed, n, rng)
            tail = continue_with
        merged = []
        a, b = list(stale), list(tail)
        while a or b:
            src = a if (a and (not b or rng.random() < 0.5)) else b
            merged.append(src.pop(0))
        stream.extend(merged)
        if tail:
            committed = n
            break
    if committed < n:  # the last owner reads to the end
        stream.extend(_runs(valid, committed, n, rng))
    expected, taken = None, []
    for lo, hi, offs in stream:
        a = np.asarray(offs, dtype=np.int64)
        k = accept(lo, hi, a, expected)
        if k is None:
            continue
        taken.extend(offs[k:])
        expected = hi + 1
    assert taken == valid
