"""An input record whose Kafka key is not its event's user (or that has no key) is a dead letter ``key_mismatch``
(issue 26: the same user on all four partitions moved every partition's watermark and made 3,001 of 20,000
legitimate events late). Events are keyed by user — ``streamdp replay`` does it — so that one user's events stay in
one partition, in order. Checked in ``parse_fetched``, which the ``all`` worker and stage A share; for lean runs
and ConsumerRecords alike."""

from __future__ import annotations

from collections import namedtuple

import orjson
from aiokafka import TopicPartition

from streamdp.adapters.kafka.lean_fetch import RecordRun
from streamdp.adapters.kafka.worker import parse_fetched

Rec = namedtuple("Rec", "offset value key")
T = "in"


def ev(user, ts=1_700_000_000.0) -> bytes:
    return orjson.dumps({"user": user, "ts": ts, "items": ["x"]})


def test_a_record_keyed_otherwise_or_not_at_all_is_dead_lettered_in_its_partition():
    batch = {TopicPartition(T, 0): [Rec(5, ev("a"), b"a"), Rec(6, ev("b"), b"a"), Rec(7, ev("c"), None),
                                    Rec(8, ev(17), b"17"), Rec(9, b"{", None)],
             TopicPartition(T, 1): [RecordRun([3, 4], [ev("d"), ev("e")], [b"d", b"x"])]}
    p0, p1 = parse_fetched(batch, T)
    assert p0.parsed.users == ["a", "17"] and p1.parsed.users == ["d"]
    assert [(p0.offsets[i], d.reason) for i, d in p0.dead] == [(6, "key_mismatch"), (7, "key_mismatch"),
                                                                (9, "malformed_json")]
    assert [(p1.offsets[i], d.reason) for i, d in p1.dead] == [(4, "key_mismatch")]
    assert "no key" in p0.dead[1][1].detail and "is not the event's user" in p0.dead[0][1].detail
    assert p0.dead[0][1].payload == ev("b")  # the payload goes to the dead-letter topic, as for any bad event


def test_the_fast_parse_path_checks_keys_too():
    """Big batches take the parser's columnar path (per-batch name dictionaries): the same verdicts."""
    events = [ev(f"u{i % 50}") for i in range(3000)]
    keys = [f"u{i % 50}".encode() for i in range(3000)]
    keys[10], keys[2999] = b"u1", None
    (p,) = parse_fetched({TopicPartition(T, 2): [RecordRun(list(range(3000)), events, keys)]}, T)
    assert p.parsed.user_codes is not None and len(p.parsed) == 2998
    assert [(int(p.offsets[i]), d.reason) for i, d in p.dead] == [(10, "key_mismatch"), (2999, "key_mismatch")]
