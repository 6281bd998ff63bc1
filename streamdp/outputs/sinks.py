"""Sinks for the embedded pipeline: JSONL files (one per query, plus dead letters) and an in-memory list."""

from __future__ import annotations

import os

from streamdp.input.events import DeadLetter
from streamdp.outputs.dead_letters import dead_letter_value
from streamdp.outputs.records import ReleaseRecord


class JsonlSink:
    """Writes every release to ``DIR/releases/<query>.jsonl`` and dead letters to ``DIR/dead_letters.jsonl`` —
    the worker's dead-letter record (:mod:`streamdp.outputs.dead_letters`) with ``topic`` = ``input_name``,
    partition 0 and ``offset`` = the event's position in the input (DeadLetter.index)."""

    def __init__(self, out_dir: str, input_name: str = "input") -> None:
        self.dir = out_dir
        self.input_name = input_name
        os.makedirs(os.path.join(out_dir, "releases"), exist_ok=True)
        self._files: dict[str, object] = {}
        self._dead = open(os.path.join(out_dir, "dead_letters.jsonl"), "wb")

    def write(self, rec: ReleaseRecord) -> None:
        f = self._files.get(rec.query)
        if f is None:
            f = self._files[rec.query] = open(os.path.join(self.dir, "releases", f"{rec.query}.jsonl"), "wb")
        f.write(rec.to_bytes() + b"\n")

    def dead_letter(self, d: DeadLetter) -> None:
        self._dead.write(dead_letter_value(d.payload, d.reason, d.detail, self.input_name, 0, d.index or 0) + b"\n")

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
