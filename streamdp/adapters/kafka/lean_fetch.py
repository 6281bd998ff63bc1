"""Lean fetch: a consumer's fetched records as one run of (offsets, values) per Kafka record batch.

aiokafka's ``getmany`` builds one ``ConsumerRecord`` per record in Python (key and value sizes, headers tuple,
deserializer hooks): measured here at about 1.3–1.6 µs per record, most of a raw consumer's time and more than
half of what one worker spends per event outside the engine. The worker needs only each record's offset and value.
:func:`install_lean_fetch` swaps, in ONE consumer, the iterator behind each fetched partition for one that yields a
:class:`RecordRun` per record batch — the offsets and values read straight from aiokafka's C record reader
(``_crecords``), with their keys (the worker checks each event's key against its user) — so ``getmany`` returns
``{TopicPartition: [RecordRun, …]}``. Measured on the benchmark topic:
2.35M records/s against 0.5–0.65M for ``getmany`` with ``ConsumerRecord`` s, same run.

What stays aiokafka's: fetch requests, the buffered responses, positions (``next_fetch_offset`` advances exactly
as in aiokafka's iterator: past every record returned, then to the batch's ``next_offset``), assignment checks,
rebalances, seeks, errors. What the lean iterator does itself, as aiokafka's does:

* checks each batch's CRC when the consumer's ``check_crcs`` is on (``CorruptRecordException`` otherwise);
* skips control batches;
* skips records below the fetch position (a compressed batch is returned whole after a seek into it).

It is installed only for ``isolation_level="read_uncommitted"`` (the worker's): read_committed consumers need
aiokafka's aborted-transaction filter and keep the library's iterator. ``max_records`` of ``getmany`` counts runs
under the lean iterator; :func:`split_runs` cuts a result back to batches of at most N records.

The hook touches aiokafka internals (``consumer._fetcher._records``, ``PartitionRecords``, ``FetchResult``):
:func:`install_lean_fetch` checks that they are what it expects and otherwise leaves the consumer as it is and
returns False (a warning is logged; the worker then reads ``ConsumerRecord`` s, slower but the same records).
``tests/adapters/test_lean_fetch.py`` asserts that it installs on the pinned aiokafka, so an upgrade that breaks
the hook fails CI instead of silently slowing the worker.
"""

from __future__ import annotations

import logging
from typing import Iterator

import numpy as np

log = logging.getLogger("streamdp.kafka")

__all__ = ["RecordRun", "install_lean_fetch", "offsets_and_values", "keys_of", "split_runs", "record_count"]


class RecordRun:
    """The records of one Kafka record batch at or after the fetch position, in offset order."""

    __slots__ = ("offsets", "values", "keys")

    def __init__(self, offsets: list[int], values: list, keys: list | None = None) -> None:
        self.offsets = offsets
        self.values = values  # bytes, or None for a null value (a tombstone)
        self.keys = keys if keys is not None else [None] * len(offsets)  # bytes, or None for a record without key

    def __len__(self) -> int:
        return len(self.offsets)

    def __repr__(self) -> str:
        return f"RecordRun({self.offsets[0]}…{self.offsets[-1]}, {len(self.offsets)} records)"


def _lean_classes():
    """The lean ``PartitionRecords`` subclass (built lazily: aiokafka is an optional dependency)."""
    import aiokafka.errors as errors
    from aiokafka.consumer import fetcher

    class LeanPartitionRecords(fetcher.PartitionRecords):
        def _unpack_records(self):
            records, check = self._records, self._check_crcs
            while True:
                batch = records.next_batch()
                if batch is None:
                    return
                if check and not batch.validate_crc():
                    raise errors.CorruptRecordException(
                        f"invalid CRC of a record batch of {self._tp} (base offset {batch.base_offset})")
                if batch.is_control_batch:
                    self.next_fetch_offset = batch.next_offset
                    continue
                start = self.next_fetch_offset
                offsets, values, keys = [], [], []
                add_offset, add_value, add_key = offsets.append, values.append, keys.append
                for r in batch:
                    add_offset(r.offset)
                    add_value(r.value)
                    add_key(r.key)
                if offsets and offsets[0] < start:  # a compressed batch returned whole after a seek into it
                    keep = [i for i, o in enumerate(offsets) if o >= start]
                    offsets = [offsets[i] for i in keep]
                    values = [values[i] for i in keep]
                    keys = [keys[i] for i in keep]
                if offsets:
                    self.next_fetch_offset = offsets[-1] + 1
                    yield RecordRun(offsets, values, keys)
                # as aiokafka: past the batch's last offset even if compaction removed its last records
                self.next_fetch_offset = batch.next_offset

    return LeanPartitionRecords


def install_lean_fetch(consumer) -> bool:
    """Make ``consumer.getmany`` return :class:`RecordRun` lists (see the module doc). Call after
    ``consumer.start()`` (which creates the fetcher). Returns whether the hook is installed."""
    try:
        from aiokafka.consumer import fetcher
    except ImportError:  # pragma: no cover - the kafka extra is installed wherever a consumer exists
        return False
    f = getattr(consumer, "_fetcher", None)
    records = getattr(f, "_records", None)
    problem = None
    if f is None or not isinstance(records, dict):
        problem = "consumer._fetcher._records is not a dict (aiokafka changed, or the consumer is not started)"
    elif getattr(f, "_isolation_level", None) != getattr(fetcher, "READ_UNCOMMITTED", object()):
        problem = "isolation_level is not read_uncommitted (aborted transactions need aiokafka's own iterator)"
    elif not all(hasattr(fetcher, n) for n in ("PartitionRecords", "FetchResult")):
        problem = "aiokafka.consumer.fetcher has no PartitionRecords/FetchResult"
    if problem is None:
        import inspect

        params = list(inspect.signature(fetcher.PartitionRecords.__init__).parameters)
        if params != ["self", "tp", "records", "aborted_transactions", "fetch_offset", "key_deserializer",
                      "value_deserializer", "check_crcs", "isolation_level"]:
            problem = f"PartitionRecords({', '.join(params[1:])}) is not the signature the hook was written for"
    if problem is not None:
        log.warning("lean fetch not installed; reading ConsumerRecords", extra={"reason": problem})
        return False
    if isinstance(records, _LeanRecords):
        return True
    lean = _lean_classes()
    result_type = fetcher.FetchResult

    class LeanRecords(_LeanRecords, type(records)):
        """``Fetcher._records`` whose fetched partitions iterate :class:`RecordRun` s."""

        def __setitem__(self, tp, res) -> None:
            if type(res) is result_type:
                pr = res._partition_records
                if pr is not None and type(pr) is not lean:
                    # fresh from the response: nothing read from it yet (aiokafka builds it just before this)
                    res._partition_records = lean(pr._tp, pr._records, None, pr.next_fetch_offset, None, None,
                                                  pr._check_crcs, pr._isolation_level)
            super().__setitem__(tp, res)

    swapped = LeanRecords()
    for tp, res in records.items():
        swapped[tp] = res
    f._records = swapped
    return True


class _LeanRecords:
    """Marker base of the swapped ``_records`` mapping (installing twice is a no-op)."""


def record_count(msgs: list) -> int:
    """Records in one partition's ``getmany`` list, lean (runs) or not (``ConsumerRecord`` s)."""
    if msgs and type(msgs[0]) is RecordRun:
        return sum(len(r.offsets) for r in msgs)
    return len(msgs)


def offsets_and_values(msgs: list) -> tuple[np.ndarray, list[bytes]]:
    """One partition's ``getmany`` list as (offsets int64, values with None as b"")."""
    if msgs and type(msgs[0]) is RecordRun:
        if len(msgs) == 1:
            offs, vals = msgs[0].offsets, msgs[0].values
        else:
            offs = [o for r in msgs for o in r.offsets]
            vals = [v for r in msgs for v in r.values]
        if None in vals:
            vals = [b"" if v is None else v for v in vals]
        return np.asarray(offs, dtype=np.int64), vals
    return (np.fromiter([m.offset for m in msgs], dtype=np.int64, count=len(msgs)),
            [m.value if m.value is not None else b"" for m in msgs])


def keys_of(msgs: list) -> list:
    """One partition's ``getmany`` list's record keys (bytes, or None), in the order of
    :func:`offsets_and_values`."""
    if msgs and type(msgs[0]) is RecordRun:
        return msgs[0].keys if len(msgs) == 1 else [k for r in msgs for k in r.keys]
    return [m.key for m in msgs]


def split_runs(batch: dict, limit: int) -> Iterator[dict]:
    """A ``getmany`` result cut into consecutive results of at most ``limit`` records each (runs are sliced where
    needed), in partition order then offset order; a non-lean result (``ConsumerRecord`` lists, already capped by
    ``max_records``) is yielded whole."""
    if not any(msgs and type(msgs[0]) is RecordRun for msgs in batch.values()):
        yield batch
        return
    limit = max(1, int(limit))
    out: dict = {}
    room = limit
    for tp in sorted(batch, key=lambda tp: (tp.topic, tp.partition)):
        for run in batch[tp]:
            at = 0
            while at < len(run.offsets):
                take = min(room, len(run.offsets) - at)
                piece = run if (at == 0 and take == len(run.offsets)) else \
                    RecordRun(run.offsets[at:at + take], run.values[at:at + take], run.keys[at:at + take])
                out.setdefault(tp, []).append(piece)
                at += take
                room -= take
                if room == 0:
                    yield out
                    out, room = {}, limit
    if out:
        yield out
