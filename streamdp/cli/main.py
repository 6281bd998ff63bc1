"""The ``streamdp`` command. Each sub-command lives in its own module exposing ``register(subparsers)``."""

from __future__ import annotations

import argparse
import importlib
import sys

# module name -> registers one top-level sub-command group
_COMMAND_MODULES = (
    "streamdp.cli.privacy",  # streamdp privacy convert|cost
    "streamdp.cli.budget",  # streamdp budget show|list|stats|ledger|grant|set-default|export
    "streamdp.cli.demo",  # streamdp demo
    "streamdp.cli.queries",  # streamdp queries kinds
    "streamdp.cli.config_check",  # streamdp config check
    "streamdp.cli.service",  # streamdp run ; streamdp replay
    "streamdp.cli.tail",  # streamdp tail QUERY
)

DESCRIPTION = """\
Differentially private statistics from event streams, released as each event-time window closes. Every user's
privacy loss is tracked by a per-user filter; a user whose next charge does not fit their budget is halted and
their data is dropped before any mechanism reads it.

start here:
  streamdp demo                      the embedded pipeline on real data (no Kafka, no Redis)
  streamdp demo --data events.jsonl --origin 2024-01-01    … on your own events
  streamdp queries kinds             what can be released, at what privacy cost
  streamdp config check FILE         validate a service configuration
  streamdp run --config FILE         the Kafka worker (needs the 'kafka' extra)
  streamdp tail QUERY                print the releases of a query from its output topic"""


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("streamdp")
    except Exception:  # noqa: BLE001 - running from a source tree that is not installed
        return "unknown (not installed)"



class CLIError(Exception):
    """A user-facing error: printed as one line, exit code 2 (or .code)."""

    def __init__(self, msg: str, code: int = 2) -> None:
        super().__init__(msg)
        self.code = code


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="streamdp", description=DESCRIPTION,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"streamdp {_version()}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in _COMMAND_MODULES:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as e:  # a command group not built yet
            if e.name == name:
                continue
            raise
        mod.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        rc = args.func(args)
    except CLIError as e:
        print(f"streamdp: error: {e}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        print("streamdp: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `streamdp queries kinds | head`
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return int(rc or 0)


if __name__ == "__main__":  # pragma: no cover
    # `python -m streamdp.cli.main`: run the package's module, whose CLIError the commands raise (this file, run as
    # __main__, is a second module object with a second CLIError class that their errors would slip past)
    from streamdp.cli.main import main as _main

    sys.exit(_main())
