"""The split's stage A checkpoints a partition as a state TREE (``admit_ingest.partition_tree``), so that the
checkpoint appends to its append logs (held events, names) instead of rewriting them; the tree must be exactly what
``StageA.partition_snapshot`` encodes — else a restored partition would differ from the one checkpointed."""

from __future__ import annotations

import os
import sys
import warnings

import pytest

from streamdp.accounting.cost import budget_vector
from streamdp.adapters.kafka.admit_ingest import partition_tree
from streamdp.engine import state_codec
from streamdp.engine.engine import EngineFailed
from streamdp.engine.stage_a_worker import StageA
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.filter.store import StoreError
from streamdp.input.events import parse_batch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "engine"))
from test_staged_split import config, stream  # noqa: E402


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def test_the_tree_encodes_to_the_partition_snapshot_and_adopts_back():
    cfg = config("mixed")
    a = StageA(cfg.engine_config(), cfg.build_queries(), MemoryBudgetStore(budget_vector(cfg.budget)))
    a.assign([1])
    parts = stream(3)
    for lo in range(0, len(parts[1]), 40):  # several windows admitted, some held
        b, bad = parse_batch(parts[1][lo:lo + 40])
        a.ingest(b, 1)
        assert state_codec.encode(partition_tree(a, 1)) == a.partition_snapshot(1)
    assert a.parts[1].through > 0 and a.parts[1].held.windows
    b2 = StageA(cfg.engine_config(), cfg.build_queries(), MemoryBudgetStore(budget_vector(cfg.budget)))
    b2.adopt(state_codec.encode(partition_tree(a, 1)))
    assert b2.partition_snapshot(1) == a.partition_snapshot(1)


def test_a_failed_stage_has_no_tree():
    cfg = config("mixed")

    class Down(MemoryBudgetStore):
        def admit_ids(self, *a, **k):
            raise StoreError("down")

    a = StageA(cfg.engine_config(), cfg.build_queries(), Down(budget_vector(cfg.budget)))
    a.assign([1])
    b, _ = parse_batch(stream(3)[1])
    with pytest.raises(StoreError):
        a.ingest(b, 1)
    with pytest.raises(EngineFailed):
        partition_tree(a, 1)
