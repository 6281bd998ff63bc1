"""Argument types shared by the CLI's subcommands (argparse ``type=`` callables: a bad value is a usage error)."""

from __future__ import annotations

import argparse
import math


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


def nonempty(text: str) -> str:
    """A value that overrides a configuration setting (``--group``, ``--input-topic``, ``--store``, …): an empty
    (or blank) one was taken for "not given" and the configuration's value was used silently."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a non-empty value, got {text!r}")
    return text


def port_number(text: str) -> int:
    """A TCP port for ``--metrics-port``: an integer within the bounds of the config key it overrides
    (``kafka.metrics_port``, 0 = off): -1 and 70000 reached the socket layer (a ``gaierror`` / ``OverflowError``
    traceback)."""
    from streamdp.config.loader import KAFKA_PARAMS

    param = next(p for p in KAFKA_PARAMS if p.name == "metrics_port")
    lo, hi = int(param.min), int(param.max)
    try:
        v = int(text)
    except ValueError:
        v = lo - 1
    if not lo <= v <= hi:
        raise argparse.ArgumentTypeError(f"expected a port number {lo}–{hi} (0 = off), got {text!r}")
    return v


def nonneg_seconds(text: str) -> float:
    """A duration in seconds: a finite number ≥ 0 (``nan`` and ``inf`` are not durations: a wait of ``nan``
    seconds compared false with every elapsed time and retried forever)."""
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not (math.isfinite(v) and v >= 0):
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds ≥ 0, got {text!r}")
    return v


def positive_seconds(text: str) -> float:
    """A duration in seconds: a finite number > 0."""
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds > 0, got {text!r}")
    return v


#: ``--log-level`` choices (the standard ``logging`` levels; given in any case)
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def log_level(text: str) -> str:
    return text.upper()


def origin_time(text: str) -> float:
    """A public start time (``--origin``): Unix seconds, or an ISO 8601 date or date-time — UTC unless it carries
    an offset (``2024-01-01``, ``2024-01-01T06:00``, ``2024-01-01T06:00:00+02:00``, ``…Z``)."""
    import datetime as dt

    try:
        v = float(text)
    except ValueError:
        try:
            d = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected Unix seconds or an ISO date/time such as 2024-01-01 or 2024-01-01T00:00:00Z, got {text!r}"
            ) from None
        if d.tzinfo is None:
            d = d.replace(tzinfo=dt.timezone.utc)
        v = d.timestamp()
    if not (math.isfinite(v) and v >= 0):
        raise argparse.ArgumentTypeError(f"expected a time at or after 1970-01-01, got {text!r}")
    return v


def plain_help(doc: str | None) -> str:
    """A module docstring (reStructuredText) as plain text for ``--help``: ``code`` marks become `code`, roles
    such as :mod:`x` become x, a literal-block ``::`` becomes ``:``."""
    import re

    if not doc:
        return ""
    text = re.sub(r":(?:mod|func|class|meth|attr|data):`~?([^`]+)`", r"\1", doc)
    text = re.sub(r"``([^`]+)``", r"`\1`", text)
    text = re.sub(r"(\S)::$", r"\1:", text, flags=re.M)
    return text.strip()
