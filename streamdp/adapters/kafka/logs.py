"""Structured logs: one JSON object per line. Messages never carry raw event contents (only counts, reasons,
partitions and offsets)."""

from __future__ import annotations

import json
import logging
import sys
import time

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        d = {"ts": round(record.created, 3), "level": record.levelname.lower(), "logger": record.name,
             "msg": record.getMessage()}
        for k, v in record.__dict__.items():
            if k not in _STANDARD and not k.startswith("_"):
                d[k] = v
        if record.exc_info:
            d["exc"] = self.formatException(record.exc_info)
        return json.dumps(d, default=str, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        extra = {k: v for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")}
        t = time.strftime("%H:%M:%S", time.localtime(record.created))
        tail = " ".join(f"{k}={v}" for k, v in extra.items())
        s = f"{t} {record.levelname.lower():7s} {record.name}: {record.getMessage()}" + (f"  {tail}" if tail else "")
        if record.exc_info:
            s += "\n" + self.formatException(record.exc_info)
        return s


def setup_logging(fmt: str = "json", level: str = "INFO") -> None:
    """Configure the ``streamdp`` logger (and aiokafka's warnings) to write ``fmt`` lines to stderr. ``level`` is a
    standard level name in any case (``--log-level`` offers them as choices); another name is a ValueError that
    names the choices."""
    if not isinstance(level, str) or level.upper() not in LEVELS:
        raise ValueError(f"unknown log level {level!r}: use one of {', '.join(LEVELS)}")
    level = level.upper()
    h = logging.StreamHandler(sys.stderr)
    h.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    quiet = logging.StreamHandler(sys.stderr)  # aiokafka's: every retry of a failing request is logged
    quiet.setFormatter(h.formatter)
    quiet.addFilter(RepeatFilter())
    for name in ("streamdp", "aiokafka"):
        lg = logging.getLogger(name)
        lg.handlers[:] = [h if name == "streamdp" else quiet]
        lg.propagate = False
        lg.setLevel(level if name == "streamdp" else "WARNING")


class Throttle:
    """Logs a repeated condition at most once per ``interval`` seconds per key (a broker or store that keeps
    failing must not flood the log: an input topic deleted under the worker logged ~40 lines a second); the next
    line that gets through says how many were held back (``suppressed``)."""

    def __init__(self, logger: logging.Logger, interval: float = 10.0) -> None:
        self.log = logger
        self.interval = float(interval)
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def _say(self, level: int, key: str, msg: str, extra: dict) -> None:
        now = time.monotonic()
        if now - self._last.get(key, -float("inf")) < self.interval:
            self._held[key] = self._held.get(key, 0) + 1
            return
        self._last[key] = now
        held = self._held.pop(key, 0)
        if held:
            extra = {**extra, "suppressed": held}
        self.log.log(level, msg, extra=extra)

    def warn(self, key: str, msg: str, **extra) -> None:
        self._say(logging.WARNING, key, msg, extra)

    def error(self, key: str, msg: str, **extra) -> None:
        self._say(logging.ERROR, key, msg, extra)


class RepeatFilter(logging.Filter):
    """Drops a record whose (logger, level, message template) was let through less than ``interval`` seconds ago
    (aiokafka logs every retry of a failing request); the next one through carries ``suppressed``."""

    def __init__(self, interval: float = 10.0) -> None:
        super().__init__()
        self.interval = float(interval)
        self._last: dict[tuple, float] = {}
        self._held: dict[tuple, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.levelno, str(record.msg))
        now = time.monotonic()
        if now - self._last.get(key, -float("inf")) < self.interval:
            self._held[key] = self._held.get(key, 0) + 1
            return False
        self._last[key] = now
        held = self._held.pop(key, 0)
        if held:
            record.suppressed = held
        return True
