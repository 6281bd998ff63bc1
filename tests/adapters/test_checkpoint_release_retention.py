"""The release log's retention through the Kafka worker's checkpoint (real redis-server and Redis Cluster): the
checkpoint script keeps a digest of every released record and the records of the latest windows only; a window
whose record was dropped is still refused a different record (CONFLICT), and the worker's view
(DeferredReleaseLog.refuse_logged, the engine's check before a window's admit) still sees it as released."""

from __future__ import annotations

import pytest

from streamdp.adapters.kafka.checkpoint import CheckpointConflict, DeferredReleaseLog
from streamdp.engine.engine import ReleaseConflict


def test_the_checkpoint_keeps_digests_for_good_and_the_latest_records(ckpt):
    store = ckpt.store
    store.release_bodies_kept = 2
    recs = {f"counts/0/{t}": b'{"t":%d}' % t for t in range(1, 6)}
    for k, v in recs.items():
        ckpt.write({"x": 1}, {0: 1}, [], {k: v}, [{"query": "counts"}], {})
    assert store.get_release("counts/0/5") == recs["counts/0/5"]
    assert store.get_release("counts/0/4") == recs["counts/0/4"]
    for t in (1, 2, 3):
        assert store.get_release(f"counts/0/{t}").startswith(b"\x00")  # dropped, digest kept
    # the same record again (a retried checkpoint whose reply was lost): accepted, not resurrected
    ckpt.write({"x": 1}, {0: 1}, [], {"counts/0/2": recs["counts/0/2"]}, [], {})
    assert store.get_release("counts/0/2").startswith(b"\x00")
    with pytest.raises(CheckpointConflict):  # a different record for a released window: refused, nothing written
        ckpt.write({"x": 2}, {0: 2}, [], {"counts/0/1": b'{"t":1,"fresh noise":true}'}, [], {})
    view = DeferredReleaseLog(store)
    with pytest.raises(ReleaseConflict):
        view.refuse_logged(["counts/0/1"])
    view.refuse_logged(["counts/0/6"])  # not released yet: fine
    assert view.put_release("counts/0/3", b"other") != b"other"  # the engine compares and raises ReleaseConflict
