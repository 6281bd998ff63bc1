"""Argument types shared by the CLI's subcommands (argparse ``type=`` callables: a bad value is a usage error)."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


#: ``--log-level`` choices (the standard ``logging`` levels; given in any case)
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def log_level(text: str) -> str:
    return text.upper()
