"""Sinks for the embedded pipeline: JSONL files (one per query, plus dead letters) and an in-memory list."""

from __future__ import annotations

import os

import orjson

from streamdp.input.events import DeadLetter
from streamdp.outputs.records import ReleaseRecord


class JsonlSink:
    """Writes every release to ``DIR/releases/<query>.jsonl`` and dead letters to ``DIR/dead_letters.jsonl``."""

    def __init__(self, out_dir: str) -> None:
        self.dir = out_dir
        os.makedirs(os.path.join(out_dir, "releases"), exist_ok=True)
        self._files: dict[str, object] = {}
        self._dead = open(os.path.join(out_dir, "dead_letters.jsonl"), "wb")

    def write(self, rec: ReleaseRecord) -> None:
        f = self._files.get(rec.query)
        if f is None:
            f = self._files[rec.query] = open(os.path.join(self.dir, "releases", f"{rec.query}.jsonl"), "wb")
        f.write(rec.to_bytes() + b"\n")

    def dead_letter(self, d: DeadLetter) -> None:
        self._dead.write(orjson.dumps({"reason": d.reason, "detail": d.detail,
                                       "payload": d.payload.decode("utf-8", "replace")}) + b"\n")

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._dead.close()


class ListSink:
    def __init__(self) -> None:
        self.records: list[ReleaseRecord] = []
        self.dead: list[DeadLetter] = []

    def write(self, rec: ReleaseRecord) -> None:
        self.records.append(rec)

    def dead_letter(self, d: DeadLetter) -> None:
        self.dead.append(d)

    def close(self) -> None:
        pass
