"""The worker's fetch side without a broker: one ``getmany`` result parsed in one call and split back per partition
(``parse_fetched``) equals parsing each partition on its own — events, dead letters and their offsets."""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest
from aiokafka import TopicPartition

from streamdp.adapters.kafka.lean_fetch import RecordRun
from streamdp.adapters.kafka.worker import parse_fetched
from streamdp.filter.redis_store import _unique_rows
from streamdp.input.events import parse_batch
from streamdp.input.sources import synthetic_events
from streamdp.noise.generator import synthetic_data_generator

from kafka_helpers import malformed_events

pytestmark = pytest.mark.integration

_Record = namedtuple("Record", "offset value key")


def Record(offset, value):
    """A fetched record keyed as producers key events: by their user (``streamdp replay``'s key)."""
    from streamdp.adapters.kafka.replay import user_key

    return _Record(offset, value, user_key(value) if value is not None else None)
TOPIC = "events"


def _fetched(sizes: list[int], bad_every: int, seed: int) -> dict:
    evs = list(synthetic_events(n_users=700, n_items=90, windows=4, events_per_window=sum(sizes) // 4 + 1,
                                seed=seed))
    bad = [p for p, _ in malformed_events()]
    out, k = {}, 0
    for part, n in enumerate(sizes):
        recs, off = [], 1000 * (part + 1)  # offsets need not start at 0
        for i in range(n):
            v = bad[(k // bad_every) % len(bad)] if bad_every and i % bad_every == bad_every - 1 else evs[k]
            recs.append(Record(off, v if part != 2 or i != 5 else None))  # a null value (tombstone) too
            off += 1 + (i % 7 == 0)  # gaps (compaction, transaction markers)
            k += 1
        out[TopicPartition(TOPIC, part)] = recs
    out[TopicPartition("other", 0)] = [Record(0, evs[0])]  # another topic's records are ignored
    return out


@pytest.mark.parametrize("sizes,bad_every", [([1500, 900, 700, 400], 37), ([3000], 0), ([2500, 0, 2600], 101)])
def test_parse_fetched_equals_parsing_each_partition(sizes, bad_every):
    batch = _fetched(sizes, bad_every, seed=sum(sizes))
    got = parse_fetched(batch, TOPIC)
    assert [g.partition for g in got] == [p for p, n in enumerate(sizes) if n]
    for g in got:
        recs = batch[TopicPartition(TOPIC, g.partition)]
        payloads = [r.value if r.value is not None else b"" for r in recs]
        ref, ref_dead = parse_batch(payloads)
        assert g.payloads == payloads
        assert np.array_equal(g.offsets, [r.offset for r in recs])
        b = g.parsed
        assert b.users == ref.users and b.items == ref.items
        assert np.array_equal(b.source_rows, ref.source_rows) and np.array_equal(b.item_offsets, ref.item_offsets)
        assert np.array_equal(b.ts, ref.ts) and np.array_equal(b.value, ref.value, equal_nan=True)
        assert np.array_equal(b.loc, ref.loc, equal_nan=True)
        if b.user_codes is not None:
            assert [b.user_dict[c] for c in b.user_codes.tolist()] == b.users
            assert [b.item_dict[c] for c in b.item_codes.tolist()] == b.items
        assert [(d.reason, d.payload) for _, d in g.dead] == [(d.reason, d.payload) for d in ref_dead]
        dead_rows = sorted(set(range(len(payloads))) - set(ref.source_rows.tolist()))
        assert [i for i, _ in g.dead] == dead_rows
        assert all(payloads[i] == d.payload for i, d in g.dead)
    assert sum(len(g.dead) for g in got) >= (sum(sizes) // bad_every - 1 if bad_every else 0)


def as_runs(batch: dict, seed: int) -> dict:
    """The same records as the lean fetch returns them: one :class:`RecordRun` per (randomly cut) record batch."""
    g = np.random.default_rng(seed)
    out = {}
    for tp, recs in batch.items():
        runs, at = [], 0
        while at < len(recs):
            n = int(g.integers(1, 400))
            runs.append(RecordRun([r.offset for r in recs[at:at + n]], [r.value for r in recs[at:at + n]],
                                  [r.key for r in recs[at:at + n]]))
            at += n
        out[tp] = runs
    return out


@pytest.mark.parametrize("sizes,bad_every", [([1500, 900, 700, 400], 37), ([2500, 0, 2600], 101)])
def test_parse_fetched_of_lean_runs_equals_consumer_records(sizes, bad_every):
    batch = _fetched(sizes, bad_every, seed=sum(sizes))
    ref, got = parse_fetched(batch, TOPIC), parse_fetched(as_runs(batch, 5), TOPIC)
    assert [g.partition for g in got] == [r.partition for r in ref]
    for g, r in zip(got, ref):
        assert g.payloads == r.payloads and np.array_equal(g.offsets, r.offsets)
        assert g.parsed.users == r.parsed.users and g.parsed.items == r.parsed.items
        assert np.array_equal(g.parsed.source_rows, r.parsed.source_rows)
        assert [(i, d.reason) for i, d in g.dead] == [(i, d.reason) for i, d in r.dead]


def test_parse_fetched_of_nothing():
    assert parse_fetched({}, TOPIC) == []
    assert parse_fetched({TopicPartition(TOPIC, 0): []}, TOPIC) == []


def test_unique_rows_equals_numpy_row_unique():
    """The admit path's cost-vector dedup (``redis_store._unique_rows``) against ``np.unique(axis=0)``."""
    g = synthetic_data_generator(3)
    for trial in range(200):
        n = int(g.integers(1, 2000))
        a = (g.integers(0, int(g.integers(1, 5)), size=(n, 6)) * g.integers(1, 10**15, size=6)).astype(np.int64)
        if trial % 3 == 0:
            a[:, 2] = 7
        u1, i1 = np.unique(a, axis=0, return_inverse=True)
        u2, i2 = _unique_rows(a)
        assert np.array_equal(u1, u2) and np.array_equal(i1.ravel(), i2)
    wide = g.integers(0, 2**40, size=(3000, 6)).astype(np.int64)  # the mixed-radix key would overflow: fallback
    u1, i1 = np.unique(wide, axis=0, return_inverse=True)
    u2, i2 = _unique_rows(wide)
    assert np.array_equal(u1, u2) and np.array_equal(i1.ravel(), i2)
