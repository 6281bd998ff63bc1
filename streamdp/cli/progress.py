"""A progress bar on a terminal, nothing elsewhere: a log file or a pipe gets no progress frames (tqdm redraws its
bar on every update, ~1,200 frames in one demo log). Per-window lines go to standard output either way."""

from __future__ import annotations

import sys


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def write(self, line: str) -> None:
        print(line, flush=False)

    def close(self) -> None:
        pass


def progress_bar(total: int | None, desc: str, quiet: bool = False):
    """tqdm on stderr when it is a terminal, not ``quiet`` and tqdm is installed; else a stand-in with the same
    ``update`` / ``write`` / ``close``."""
    isatty = getattr(sys.stderr, "isatty", None)
    if quiet or not (isatty and isatty()):
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(total=total, unit="ev", unit_scale=True, file=sys.stderr, desc=desc)
