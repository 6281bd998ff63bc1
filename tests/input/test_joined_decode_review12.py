"""A payload's verdict is its own, whatever its neighbours (twelfth-session input review).

The exact path decodes ``[p0,p1,…]`` in one call and used to map the decoded values to payloads by position once
their number matched. A payload cut in two (``A`` + ``B``, each invalid alone) and a payload holding two values
(``C``) cancel out in that count: all three were ingested, ``B`` as carol and ``C`` as dave, and nothing was
dead-lettered (reproduced through a real broker by the reviewer). On the fast path the slow payloads of a batch
are joined the same way, so the pieces did not even have to be adjacent.
"""

from __future__ import annotations

import random

import pytest

from streamdp.input.events import FAST_MIN_BATCH, BadEvent, parse_batch, parse_event

A = b'{"user":"alice","ts":1700000000,"items":["x"'
B = b'"y"]}'
C = b'{"user":"carol","ts":1700000001},{"user":"dave","ts":1700000002}'


def _verdicts(raws, fast):
    batch, dead = parse_batch(raws, fast=fast)
    out = {i: ("ok", batch.users[k], float(batch.ts[k])) for k, i in enumerate(batch.source_rows.tolist())}
    missing = [i for i in range(len(raws)) if i not in out]  # dead letters come back in payload order
    assert len(missing) == len(dead)
    for i, d in zip(missing, dead):
        assert d.payload == raws[i]
        out[i] = ("dead", d.reason)
    assert len(out) == len(raws)  # every payload is either an event or a dead letter
    return out


def _alone(raw):
    try:
        user, ts, *_ = parse_event(raw)
        return ("ok", user, ts)
    except BadEvent as e:
        return ("dead", e.reason)


@pytest.mark.parametrize("fast", [False, True])
def test_a_split_payload_and_a_two_value_payload_do_not_cancel_out(fast):
    good = [b'{"user":"u%d","ts":1700000000,"items":["i"]}' % i for i in range(3000 if fast else 10)]
    for raws in ([A, B, C], [A, B, C] + good, good[:5] + [A, B] + good[5:] + [C]):
        if fast and len(raws) < FAST_MIN_BATCH:
            continue
        got = _verdicts(raws, fast)
        for i, raw in enumerate(raws):
            assert got[i] == _alone(raw), (i, raw)
        assert [got[raws.index(p)][0] for p in (A, B, C)] == ["dead"] * 3


@pytest.mark.parametrize("fast", [False, True])
def test_random_cuts_and_merges_get_the_per_event_verdict(fast):
    rng = random.Random(12)
    for _ in range(20):
        n = FAST_MIN_BATCH + 200 if fast else 300
        raws = [b'{"user":"u%d","ts":%d,"items":["i%d"],"value":%d.5}' % (rng.randrange(50), 1700000000 + i,
                                                                          rng.randrange(9), i) for i in range(n)]
        for _ in range(rng.randrange(1, 6)):  # cut a payload in two, merge two others into one
            i = rng.randrange(len(raws) - 1)
            p = raws[i]
            cut = rng.randrange(1, len(p))
            raws[i:i + 1] = [p[:cut], p[cut:]]
            j = rng.randrange(len(raws) - 1)
            raws[j:j + 2] = [raws[j] + rng.choice([b",", b" ", b"\n", b""]) + raws[j + 1]]
        got = _verdicts(raws, fast)
        for i, raw in enumerate(raws):
            assert got[i] == _alone(raw), (i, raw)
