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
    for name in ("streamdp", "aiokafka"):
        lg = logging.getLogger(name)
        lg.handlers[:] = [h]
        lg.propagate = False
        lg.setLevel(level if name == "streamdp" else "WARNING")
