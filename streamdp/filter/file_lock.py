"""One writer at a time for a budget-store FILE (the embedded store of ``demo --store FILE`` and ``streamdp budget
--store FILE``).

A file store is loaded whole, changed in memory and saved whole (an atomic replace). Two processes writing the same
file therefore undo each other: a running demo's next save dropped an operator's ``budget grant`` (and its audit
entry), and a grant saved after a demo's save rolled back the demo's charges, halts and release log (store review
of 2026-11-23, F2). Every writer holds an exclusive advisory lock (``flock``) on ``<file>.lock`` from before it
loads the file until it is done; a second writer is refused at once with a message, not made to wait (a demo can
run for minutes). Readers take no lock: the replace is atomic, so they see one whole saved state. The lock is
taken on the file's real path (a symlink to the store locks the same file), and the empty ``.lock`` file is left
in place (removing it while another process waits on it would let two writers in).
"""

from __future__ import annotations

import fcntl
import os

__all__ = ["StoreBusy", "StoreFileLock"]


class StoreBusy(Exception):
    """Another process holds the store file's lock."""


class StoreFileLock:
    def __init__(self, path: str) -> None:
        self.path = os.path.realpath(path) + ".lock"  # one lock per file, however it is named (symlinks)
        self._fd: int | None = None

    def acquire(self) -> "StoreFileLock":
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreBusy(f"the budget store file {self.path[:-5]!r} is being written by another streamdp process "
                            f"(a running demo or budget command holds {self.path!r}); try again when it is done")
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None
