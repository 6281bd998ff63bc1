"""Append-only parts of a state tree, so that checkpoints can write what was appended instead of everything.

An :class:`AppendLog` is ``bytes`` with a promise: until the structure that produced it is reset, its next value
starts with this one. The interned-name lists and the contribution bounder's commit log grow like that; they are
most of a long epoch's state. The snapshot codec stores an ``AppendLog`` as ordinary bytes (so snapshots are
unchanged); :func:`split_logs` takes them out of a state tree (leaving placeholders) for a checkpoint writer that
appends the new suffix of each log and rewrites only the rest (``adapters/kafka/checkpoint.py``), and
:func:`join_logs` puts them back. Writers must not rely on the promise: they check the prefix and write the whole
log when it does not hold (a reset, a restore).
"""

from __future__ import annotations

import json

__all__ = ["AppendLog", "split_logs", "join_logs", "LOG_MARK"]

LOG_MARK = "__log__"  # placeholder: {"__log__": name}


class AppendLog(bytes):
    """Bytes that the next snapshot of the same structure extends (until a reset)."""

    __slots__ = ()


def split_logs(tree):
    """(``tree`` with every :class:`AppendLog` in its dicts/lists replaced by ``{"__log__": name}``, {name: bytes}).
    ``name`` is the JSON list of the keys/indices on the path to it (stable across snapshots)."""
    logs: dict[str, bytes] = {}

    def walk(x, path):
        if isinstance(x, AppendLog):
            name = json.dumps(path, separators=(",", ":"))
            logs[name] = x
            return {LOG_MARK: name}
        if isinstance(x, dict):
            if LOG_MARK in x:
                raise ValueError(f"a state dict may not use the key {LOG_MARK!r}")
            return {k: walk(v, path + [k]) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [walk(v, path + [i]) for i, v in enumerate(x)]
        return x

    return walk(tree, []), logs


def join_logs(tree, logs: dict[str, bytes]):
    """Inverse of :func:`split_logs` (the logs come back as plain bytes, as the snapshot codec returns them)."""

    def walk(x):
        if isinstance(x, dict):
            if LOG_MARK in x:
                name = x[LOG_MARK]
                if name not in logs:
                    raise ValueError(f"state refers to a missing append log {name}")
                return bytes(logs[name])
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v) for v in x]
        return x

    return walk(tree)
