"""Events held for their window until it closes, per (window, input partition), in offset order.

The engine judges each event on arrival against its own partition's watermark and holds the accepted ones here;
a window is handed to the mechanisms only when it closes, with its events in (partition, offset) order — a function
of each partition's record sequence alone, whatever batches, fetches or interleavings delivered them. Names are
interned at the close, in that order, so the engine numbers new users and items the same way however the input was
cut (the noise draws follow those numbers).

State: each (window, partition)'s held batches are one :class:`~streamdp.engine.append_log.AppendLog` of
length-prefixed encoded batches. Batches only ever join the end of their list until the window closes, so a
checkpoint appends the new arrivals (and drops the logs of closed windows) instead of rewriting every held event;
each batch is encoded once.
"""

from __future__ import annotations

import struct

import numpy as np
import orjson

from streamdp.engine import state_codec
from streamdp.engine.append_log import AppendLog
from streamdp.input.events import EventBatch

__all__ = ["HeldEvents", "take_rows", "concat_batches", "batch_state", "batch_from_state"]


def take_rows(b: EventBatch, rows: np.ndarray) -> EventBatch:
    """The sub-batch of rows ``rows`` (sorted row indices) of ``b``. The parser's interning help (per-batch
    dictionaries and codes, :class:`EventBatch`) is carried: the sub-batch keeps the dictionaries and takes the
    codes of its rows."""
    rows = np.asarray(rows, dtype=np.int64)
    if rows.size == len(b):
        return b
    offs = b.item_offsets
    starts = offs[rows]
    lens = offs[rows + 1] - starts
    new_offs = np.zeros(rows.size + 1, dtype=np.int64)
    np.cumsum(lens, out=new_offs[1:])
    idx = np.repeat(starts - new_offs[:-1], lens) + np.arange(int(new_offs[-1]), dtype=np.int64)
    items = b.items
    users = b.users
    out = EventBatch(users=[users[i] for i in rows.tolist()], ts=b.ts[rows], item_offsets=new_offs,
                     items=[items[i] for i in idx.tolist()], value=b.value[rows], loc=b.loc[rows],
                     source_rows=b.source_rows[rows])
    if b.user_codes is not None and b.item_codes is not None:
        out.user_dict, out.user_codes = b.user_dict, b.user_codes[rows]
        out.item_dict, out.item_codes = b.item_dict, b.item_codes[idx]
    return out


def _concat_codes(bs: list[EventBatch], names: str) -> tuple[list, np.ndarray]:
    """One dictionary and the codes into it for the ``names`` ("user" or "item") of the batches ``bs``, in order.

    Batches cut from one parsed batch share its dictionary (the same list object): it is included once, and only
    with the entries its batches here use when that is fewer than their codes (the engine looks up every entry of
    the dictionary, so a window would otherwise pay for the names of a whole fetched batch). A batch without codes
    contributes its names as entries of their own (repeated entries are allowed, see
    :meth:`streamdp.engine.query.Names.ids_coded`)."""
    groups: dict[int, list[int]] = {}  # dictionary object → positions in bs
    for k, b in enumerate(bs):
        if getattr(b, f"{names}_codes") is not None:
            groups.setdefault(id(getattr(b, f"{names}_dict")), []).append(k)
    dictionary: list = []
    codes: list = [None] * len(bs)
    for ks in groups.values():
        d = getattr(bs[ks[0]], f"{names}_dict")
        cs = [np.asarray(getattr(bs[k], f"{names}_codes"), dtype=np.int64) for k in ks]
        base = len(dictionary)
        if len(d) > sum(c.size for c in cs):  # compact: only the entries used here, codes renumbered
            used = np.zeros(len(d), dtype=bool)
            for c in cs:
                used[c] = True
            renumber = np.cumsum(used) - 1 + base
            dictionary.extend([d[i] for i in np.flatnonzero(used).tolist()])
            for k, c in zip(ks, cs):
                codes[k] = renumber[c]
        else:
            dictionary.extend(d)
            for k, c in zip(ks, cs):
                codes[k] = c + base
    for k, b in enumerate(bs):
        if codes[k] is None:
            own = b.users if names == "user" else b.items
            codes[k] = len(dictionary) + np.arange(len(own), dtype=np.int64)
            dictionary.extend(own)
    return dictionary, np.concatenate(codes) if codes else np.zeros(0, dtype=np.int64)


def concat_batches(bs: list[EventBatch], *, codes: bool = True) -> EventBatch:
    """The batches ``bs`` one after the other. With ``codes`` and when one of them carries the parser's interning
    help, so does the result (dictionaries concatenated, codes offset; see :func:`_concat_codes`)."""
    if len(bs) == 1:
        b = bs[0]
        if not codes or b.user_codes is None or b.item_codes is None or (
                len(b.user_dict) <= len(b) and len(b.item_dict) <= len(b.items)):
            return b
    users: list[str] = []
    items: list[str] = []
    offs = [np.zeros(1, dtype=np.int64)]
    base = 0
    for b in bs:
        users.extend(b.users)
        items.extend(b.items)
        offs.append(b.item_offsets[1:] + base)
        base += int(b.item_offsets[-1])
    out = EventBatch(users=users, ts=np.concatenate([b.ts for b in bs]), item_offsets=np.concatenate(offs),
                     items=items, value=np.concatenate([b.value for b in bs]),
                     loc=np.concatenate([b.loc for b in bs]).reshape(-1, 2),
                     source_rows=np.concatenate([b.source_rows for b in bs]))
    if codes and any(b.user_codes is not None and b.item_codes is not None for b in bs):
        out.user_dict, out.user_codes = _concat_codes(bs, "user")
        out.item_dict, out.item_codes = _concat_codes(bs, "item")
    return out


def batch_state(b: EventBatch) -> dict:
    # name lists as one JSON blob each: the snapshot codec would otherwise walk every string
    return {"users": orjson.dumps(b.users), "ts": b.ts, "item_offsets": b.item_offsets,
            "items": orjson.dumps(b.items), "value": b.value, "loc": b.loc}


def batch_from_state(d: dict) -> EventBatch:
    users = orjson.loads(d["users"])
    n = len(users)
    return EventBatch(users=users, ts=np.asarray(d["ts"], dtype=np.float64),
                      item_offsets=np.asarray(d["item_offsets"], dtype=np.int64), items=orjson.loads(d["items"]),
                      value=np.asarray(d["value"], dtype=np.float64),
                      loc=np.asarray(d["loc"], dtype=np.float64).reshape(-1, 2),
                      source_rows=np.arange(n, dtype=np.int64))



class HeldEvents:
    """Parsed events per (window, partition), each list in arrival (= offset) order."""

    def __init__(self) -> None:
        self.windows: dict[int, dict[int, list[EventBatch]]] = {}
        self.events = 0
        # (window, partition) → the encoded frames of its first held batches, and how many held batches they cover
        self._frames: dict[tuple[int, int], list[bytes]] = {}
        self._framed: dict[tuple[int, int], int] = {}

    def __bool__(self) -> bool:
        return bool(self.windows)

    def add(self, t: int, partition: int, batch: EventBatch) -> None:
        self.windows.setdefault(int(t), {}).setdefault(int(partition), []).append(batch)
        self.events += len(batch)

    def last(self) -> int | None:
        """The newest window holding events (None: nothing held)."""
        return max(self.windows) if self.windows else None

    def peek(self, t: int) -> EventBatch | None:
        """Window ``t``'s events in (partition, offset) order as one batch (None: none held); kept until
        :meth:`drop`."""
        parts = self.windows.get(int(t))
        if not parts:
            return None
        return concat_batches([b for _, bs in sorted(parts.items()) for b in bs])

    def partition_rows(self, t: int) -> list[tuple[int, int]]:
        """(partition, number of events) of window ``t``'s held events, in partition order: the row ranges of
        :meth:`peek`'s batch, one partition after the other."""
        parts = self.windows.get(int(t)) or {}
        return [(p, sum(len(b) for b in bs)) for p, bs in sorted(parts.items())]

    def drop(self, t: int) -> None:
        parts = self.windows.pop(int(t), {})
        for p, bs in parts.items():
            self.events -= sum(len(b) for b in bs)
            self._frames.pop((int(t), p), None)
            self._framed.pop((int(t), p), None)

    def state(self) -> dict:
        held: dict[str, dict[str, AppendLog]] = {}
        for t, parts in self.windows.items():
            held[str(t)] = {}
            for p, bs in parts.items():
                frames = self._frames.setdefault((t, p), [])
                done = self._framed.get((t, p), 0)
                for b in bs[done:]:
                    blob = state_codec.encode(batch_state(b))
                    frames.append(_FRAME.pack(len(blob)) + blob)
                self._framed[(t, p)] = len(bs)
                if len(frames) > 1:
                    frames[:] = [b"".join(frames)]
                held[str(t)][str(p)] = AppendLog(frames[0] if frames else b"")
        return held

    def load_state(self, d: dict) -> None:
        self.windows, self._frames, self._framed = {}, {}, {}
        for t, parts in d.items():
            for p, blob in parts.items():
                key = (int(t), int(p))
                if isinstance(blob, dict):  # checkpoint format 1: one batch_state per (window, partition)
                    bs = [batch_from_state(blob)]
                else:
                    bs = _unframe(bytes(blob))
                    self._frames[key], self._framed[key] = [bytes(blob)], len(bs)
                self.windows.setdefault(key[0], {})[key[1]] = bs
        self.events = sum(len(b) for parts in self.windows.values() for bs in parts.values() for b in bs)



_FRAME = struct.Struct("<Q")


def _unframe(blob: bytes) -> list[EventBatch]:
    out, at = [], 0
    while at < len(blob):
        if at + _FRAME.size > len(blob):
            raise ValueError("held-events log ends inside a frame header")
        (n,) = _FRAME.unpack_from(blob, at)
        at += _FRAME.size
        if at + n > len(blob):
            raise ValueError("held-events log ends inside a frame")
        out.append(batch_from_state(state_codec.decode(blob[at:at + n])))
        at += n
    return out
