"""The Redis checkpoint's append logs (``adapters/kafka/checkpoint.py``, real redis-server): a log that extends what
was written is appended (only the new bytes travel), anything else is set whole; a claim reads back exactly the
state written; a lost reply, a fenced writer, a shrinking or vanished log and a format-1 checkpoint are handled."""

from __future__ import annotations

import numpy as np
import pytest
import redis

from streamdp.adapters.kafka.checkpoint import CHECKPOINT_FORMAT, Fenced, RedisCheckpoint
from streamdp.engine import state_codec
from streamdp.engine.append_log import AppendLog
from streamdp.filter.store import StoreError


def state(users: bytes, log: bytes, n: int) -> dict:
    return {"engine": {"users": AppendLog(users), "queries": {"q": {"log": AppendLog(log), "tree": b"t" * n}}},
            "stage": {"held": np.arange(n, dtype=np.int64)}}


def write(c, st, offsets=None):
    return c.write(st, offsets or {0: 5}, [], {}, [], {"worker": "w"})


def log_keys(c: RedisCheckpoint) -> list[bytes]:
    """The checkpoint's append-log keys (on a cluster: on the primary of the store's hash slot, where they all are)."""
    node = c.store._client_of_slot(c.store._meta_slot if c.store.cluster else None)
    return node.keys(f"{c.key}:log:*")


def read_back(c: RedisCheckpoint, worker="reader"):
    other = RedisCheckpoint(c.store, "g", "events")
    return other, other.claim(worker)


def test_appends_send_only_the_new_bytes_and_read_back_exactly(ckpt):
    big = bytes(range(256)) * 4000  # ~1 MB of log
    write(ckpt, state(b'["a"', big, 3))
    first = ckpt.last_written
    assert first > len(big) and ckpt.last_bytes == first
    write(ckpt, state(b'["a","b"', big + b"tail", 4))
    assert ckpt.last_written < first - len(big) + 100  # the 1 MB log was not sent again
    assert ckpt.last_bytes > len(big)
    r = ckpt.r
    keys = sorted(k.decode() for k in log_keys(ckpt))
    assert len(keys) == 2 and r.strlen(keys[0]) + r.strlen(keys[1]) == len(big) + 4 + len(b'["a","b"')
    _, ck = read_back(ckpt)
    assert ck.version == 2 and ck.offsets == {0: 5}
    assert ck.state["format"] == CHECKPOINT_FORMAT
    assert ck.state["engine"]["users"] == b'["a","b"'
    assert ck.state["engine"]["queries"]["q"]["log"] == big + b"tail"
    assert ck.state["engine"]["queries"]["q"]["tree"] == b"tttt"
    np.testing.assert_array_equal(ck.state["stage"]["held"], np.arange(4))


def test_a_log_that_does_not_extend_is_set_whole(ckpt):
    write(ckpt, state(b"abcdef", b"0123456789", 1))
    write(ckpt, state(b"abc", b"01234567xx", 1))  # shorter (a reset), and changed (a restore elsewhere)
    _, ck = read_back(ckpt)
    assert ck.state["engine"]["users"] == b"abc" and ck.state["engine"]["queries"]["q"]["log"] == b"01234567xx"


def test_a_lost_reply_is_recovered_by_a_whole_write(ckpt):
    """The script ran but the writer did not hear it (its cache is stale): Redis holds more than the writer thinks.
    The next append would land at the wrong place; the length guard refuses it and the writer sets the logs whole."""
    write(ckpt, state(b"u1", b"L1", 1))
    writer_view = dict(ckpt._logs)
    write(ckpt, state(b"u1u2", b"L1L2", 1))  # applied ...
    ckpt._logs = writer_view  # ... but (as after a timeout) the writer still believes the older lengths
    write(ckpt, state(b"u1u2u3", b"L1L2L3", 1))
    _, ck = read_back(ckpt)
    assert ck.state["engine"]["users"] == b"u1u2u3" and ck.state["engine"]["queries"]["q"]["log"] == b"L1L2L3"


def test_failed_call_forgets_what_it_knew(ckpt, monkeypatch):
    write(ckpt, state(b"u1", b"L1", 1))

    def boom(*a, **k):
        raise redis.exceptions.ConnectionError("gone")

    real = ckpt._script("ckpt", "")
    monkeypatch.setattr(ckpt, "_script", lambda name, src: boom)
    with pytest.raises(StoreError):
        write(ckpt, state(b"u1u2", b"L1L2", 1))
    assert ckpt._logs == {}
    monkeypatch.setattr(ckpt, "_script", lambda name, src: real)
    write(ckpt, state(b"u1u2", b"L1L2", 1))
    assert ckpt.last_written >= len(b"u1u2L1L2")  # whole, since the outcome of the failed call was unknown
    _, ck = read_back(ckpt)
    assert ck.state["engine"]["users"] == b"u1u2"


def test_fenced_writer_writes_nothing(ckpt):
    write(ckpt, state(b"u1", b"L1", 1))
    _, ck = read_back(ckpt, "successor")  # claims: ckpt is fenced out
    with pytest.raises(Fenced):
        write(ckpt, state(b"u1XX", b"L1XX", 1))
    _, ck2 = read_back(ckpt, "third")
    assert ck2.version == ck.version and ck2.state["engine"]["users"] == b"u1"


def test_dropped_logs_are_deleted_and_a_vanished_log_is_an_error(ckpt):
    write(ckpt, state(b"u", b"L", 1))
    write(ckpt, {"engine": {"users": AppendLog(b"uv")}})  # the query (and its log) is gone
    assert len(log_keys(ckpt)) == 1
    ckpt.r.delete(*log_keys(ckpt))
    with pytest.raises(StoreError, match="LOGMISSING"):
        read_back(ckpt)


def test_format_1_checkpoint_still_claims(ckpt):
    """A checkpoint written before append logs: the whole state in one field, no manifest."""
    old = state_codec.encode({"format": 1, "engine": b"snapshot-bytes", "stage": {}, "rng": None})
    ckpt.r.hset(ckpt.key, mapping={"version": 7, "state": old, "offsets": '{"0": 3}', "pending": b""})
    _, ck = read_back(ckpt)
    assert ck.version == 7 and ck.state["engine"] == b"snapshot-bytes" and ck.offsets == {0: 3}
