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
)


class CLIError(Exception):
    """A user-facing error: printed as one line, exit code 2 (or .code)."""

    def __init__(self, msg: str, code: int = 2) -> None:
        super().__init__(msg)
        self.code = code


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="streamdp", description="Differentially private releases from event streams")
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
