"""The lean fetch (``adapters/kafka/lean_fetch.py``) against aiokafka's own iterator as the oracle, on record batches
built with aiokafka's batch builder: plain, gzip-compressed, control batches, null values, offset gaps, a fetch
position inside a batch, a corrupt CRC. Plus ``split_runs`` / ``offsets_and_values`` on hand-built runs."""

from __future__ import annotations

import struct

import aiokafka.errors as errors
import numpy as np
import pytest
from aiokafka import TopicPartition
from aiokafka.consumer import fetcher
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.record.util import calc_crc32c

from streamdp.adapters.kafka.lean_fetch import (RecordRun, _lean_classes, install_lean_fetch, offsets_and_values,
                                                record_count, split_runs)

TP = TopicPartition("events", 3)
GZIP, CONTROL = 0x01, 0x20
ATTRIBUTES_AT = struct.calcsize(">qiibI")
CRC_AT = struct.calcsize(">qiib")


def batch_bytes(base: int, deltas: list[int], values: list, *, codec: int = 0, control: bool = False) -> bytes:
    """One v2 record batch at ``base`` with records at ``base + delta`` (deltas increasing: gaps as compaction
    leaves them)."""
    b = DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, 10**7)
    for d, v in zip(deltas, values):
        b.append(d, timestamp=1_700_000_000_000 + d, key=b"k%d" % d, value=v, headers=[])
    buf = bytearray(b.build())
    struct.pack_into(">q", buf, 0, base)
    if control:
        attrs = struct.unpack_from(">h", buf, ATTRIBUTES_AT)[0] | CONTROL
        struct.pack_into(">h", buf, ATTRIBUTES_AT, attrs)
        struct.pack_into(">I", buf, CRC_AT, calc_crc32c(bytes(buf[ATTRIBUTES_AT:])))
    return bytes(buf)


def both(data: bytes, fetch_offset: int, check_crcs: bool = True):
    """(aiokafka's (offset, value) list and final position, the lean one's)."""
    args = (TP, None, None, fetch_offset, None, None, check_crcs, fetcher.READ_UNCOMMITTED)
    ref = fetcher.PartitionRecords(*args[:1], MemoryRecords(data), *args[2:])
    ref_out = [(r.offset, r.value) for r in ref]
    lean = _lean_classes()(*args[:1], MemoryRecords(data), *args[2:])
    runs = list(lean)
    assert all(type(r) is RecordRun and len(r) for r in runs)
    lean_out = [(o, v) for r in runs for o, v in zip(r.offsets, r.values)]
    return (ref_out, ref.next_fetch_offset), (lean_out, lean.next_fetch_offset), runs


SAMPLE = [  # (first offset, last offset, batch): what a broker returns from a fetch offset in [first, last] on
    (100, 103, batch_bytes(100, [0, 1, 2, 3], [b"a", b"b", None, b"d"])),
    (104, 109, batch_bytes(104, [0, 2, 5], [b"e", b"f", b"g"])),  # gaps: compaction removed 105, 107, 108
    (110, 115, batch_bytes(110, [0, 1, 2, 3, 4, 5], [b"h%d" % i for i in range(6)], codec=GZIP)),
    (116, 116, batch_bytes(116, [0], [b""], control=True)),  # a transaction marker: skipped
    (117, 119, batch_bytes(117, [0, 1, 2], [b"x", b"y", b"z"], codec=GZIP)),
    (120, 120, batch_bytes(120, [0], [b"last"])),
]


def fetched_from(batches: list, fetch_offset: int) -> bytes:
    """A fetch response from ``fetch_offset``: the batch holding it and those after (a broker never sends a batch
    wholly below the fetch offset)."""
    return b"".join(b for _, hi, b in batches if hi >= fetch_offset)


def sample_stream() -> bytes:
    return fetched_from(SAMPLE, 0)


@pytest.mark.parametrize("fetch_offset", [100, 101, 104, 106, 111, 113, 116, 117, 118, 120])
def test_lean_iterator_equals_aiokafka(fetch_offset):
    (ref, ref_pos), (lean, lean_pos), runs = both(fetched_from(SAMPLE, fetch_offset), fetch_offset)
    assert lean == ref and lean
    assert lean_pos == ref_pos == 121
    assert all(o >= fetch_offset for o, _ in lean)
    # one run per batch with records at or after the fetch position (the control batch at 116 yields none)
    ranges = [(lo, hi) for lo, hi, _ in SAMPLE if hi >= fetch_offset and lo != 116]
    assert len(runs) == len(ranges)
    for run, (lo, hi) in zip(runs, ranges):
        assert lo <= run.offsets[0] and run.offsets[-1] <= hi


def test_lean_iterator_on_many_random_batches():
    rng = np.random.default_rng(7)
    batches, base = [], 0
    for _ in range(60):
        n = int(rng.integers(1, 40))
        deltas = np.sort(rng.choice(np.arange(3 * n), size=n, replace=False)).tolist()
        vals = [None if rng.random() < 0.05 else rng.bytes(int(rng.integers(0, 30))) for _ in deltas]
        batches.append((base, base + deltas[-1], batch_bytes(base, deltas, vals, codec=GZIP if rng.random() < 0.3
                                                              else 0, control=rng.random() < 0.05)))
        base += deltas[-1] + 1 + int(rng.integers(0, 3))
    for fetch_offset in rng.integers(0, base, size=40).tolist():
        (ref, ref_pos), (lean, lean_pos), _ = both(fetched_from(batches, fetch_offset), int(fetch_offset))
        assert lean == ref and lean_pos == ref_pos
        assert all(o >= fetch_offset for o, _ in lean)


def test_corrupt_crc_raises_like_aiokafka():
    data = bytearray(sample_stream())
    at = bytes(data).rindex(b"last")
    data[at] ^= 0x20  # "last" → "Last" in the last batch: still parses, only the CRC tells
    for kind in (fetcher.PartitionRecords, _lean_classes()):
        it = kind(TP, MemoryRecords(bytes(data)), None, 100, None, None, True, fetcher.READ_UNCOMMITTED)
        with pytest.raises(errors.CorruptRecordException):
            list(it)
    (ref, _), (lean, _), _ = both(bytes(data), 100, check_crcs=False)  # not checked: both read what is there
    assert lean == ref and lean[-1] == (120, b"Last")


def test_partial_reads_keep_aiokafka_positions():
    """``getall(max_records)`` stops between runs: the position then is past the last record handed out."""
    data = sample_stream()
    lean = _lean_classes()(TP, MemoryRecords(data), None, 101, None, None, True, fetcher.READ_UNCOMMITTED)
    first = next(lean)
    assert first.offsets == [101, 102, 103] and first.values == [b"b", None, b"d"]
    assert lean.next_fetch_offset == 104
    second = next(lean)
    assert second.offsets == [104, 106, 109] and lean.next_fetch_offset == 110


def test_install_refuses_what_it_cannot_handle():
    class NotStarted:
        pass

    assert install_lean_fetch(NotStarted()) is False

    class Committed:
        class _fetcher:  # noqa: N801 - mimics the attribute
            _records: dict = {}
            _isolation_level = fetcher.READ_COMMITTED

    assert install_lean_fetch(Committed()) is False


def test_install_swaps_the_fetchers_records_mapping():
    """On the pinned aiokafka the hook installs (an upgrade that breaks it fails here, not silently in prod), keeps
    what was buffered, and wraps each new FetchResult's records."""
    import collections

    class Consumer:
        class _fetcher:  # noqa: N801
            _records = collections.OrderedDict()
            _isolation_level = fetcher.READ_UNCOMMITTED

    c = Consumer()
    old = fetcher.FetchError(error=errors.KafkaError("x"), backoff=0)
    c._fetcher._records[TP] = old
    assert install_lean_fetch(c) is True
    assert install_lean_fetch(c) is True  # twice: no-op
    recs = c._fetcher._records
    assert recs[TP] is old and isinstance(recs, collections.OrderedDict)
    pr = fetcher.PartitionRecords(TP, MemoryRecords(sample_stream()), None, 100, None, None, True,
                                  fetcher.READ_UNCOMMITTED)

    class Assignment:
        active = True

    recs[TP] = fetcher.FetchResult(TP, assignment=Assignment(), partition_records=pr, backoff=0)
    got = list(recs[TP]._partition_records)
    assert [type(r) for r in got] == [RecordRun] * 5


def test_split_runs_caps_records_and_keeps_order():
    a, b = TopicPartition("t", 0), TopicPartition("t", 1)
    batch = {b: [RecordRun([10, 11, 12], [b"p", b"q", b"r"])],
             a: [RecordRun(list(range(5)), [bytes([i]) for i in range(5)]), RecordRun([7, 9], [b"s", None])]}
    chunks = list(split_runs(batch, 4))
    assert [sum(record_count(v) for v in c.values()) for c in chunks] == [4, 4, 2]
    flat = [(tp.partition, o, v) for c in chunks for tp, runs in c.items() for r in runs
            for o, v in zip(r.offsets, r.values)]
    assert flat == ([(0, i, bytes([i])) for i in range(5)] + [(0, 7, b"s"), (0, 9, None)]
                    + [(1, 10, b"p"), (1, 11, b"q"), (1, 12, b"r")])
    assert list(split_runs(batch, 100)) == [{a: batch[a], b: batch[b]}]
    plain = {a: ["not runs"]}
    assert list(split_runs(plain, 1)) == [plain]  # ConsumerRecord lists are already capped by getmany


def test_offsets_and_values_of_runs_and_records():
    from collections import namedtuple

    runs = [RecordRun([3, 4], [b"x", None]), RecordRun([8], [b"y"])]
    offs, vals = offsets_and_values(runs)
    assert offs.dtype == np.int64 and offs.tolist() == [3, 4, 8] and vals == [b"x", b"", b"y"]
    Rec = namedtuple("Rec", "offset value")
    offs2, vals2 = offsets_and_values([Rec(3, b"x"), Rec(4, None), Rec(8, b"y")])
    assert offs2.tolist() == offs.tolist() and vals2 == vals
    assert record_count(runs) == 3 and record_count([Rec(1, b"")]) == 1 and record_count([]) == 0
