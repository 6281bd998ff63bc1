"""Which partitions the rollback check judges (worker `_checkpoint_behind`, store review F1 and closing review of
2026-11-23): a committed offset past the restored checkpoint's offset is a lost checkpoint; a partition the
checkpoint has no offset for (never read since an --allow-empty-store start; a coordinator's internal partitions
after an `all` period) says nothing and must not stop the worker."""

from types import SimpleNamespace

from streamdp.adapters.kafka.checkpoint import Checkpoint
from streamdp.adapters.kafka.worker import KafkaWorker


def _behind(offsets, committed, coordinator=False, src=None):
    me = SimpleNamespace(coordinator=coordinator, src_offsets=src or {})
    return KafkaWorker._checkpoint_behind(me, Checkpoint(3, {}, offsets, []), committed)


def test_a_checkpoint_behind_a_committed_offset_is_reported():
    assert _behind({0: 100, 1: 50}, {0: 100, 1: 80}) == {1: (50, 80)}
    assert _behind({0: 100, 1: 50}, {0: 90, 1: 50}) == {}  # committed ≤ checkpoint: a crash before the commit


def test_partitions_without_a_checkpoint_offset_are_not_judged():
    assert _behind({0: 7200}, {0: 7200, 1: 9000}) == {}  # partition 1 not read since the start-over
    assert _behind({}, {0: 500, 1: 700}, coordinator=True, src={}) == {}  # after an `all` period
    assert _behind({}, {0: 500}, coordinator=True, src={0: 400}) == {0: (400, 500)}  # the coordinator's own offsets
