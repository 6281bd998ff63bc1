"""Which optional extra a command needs, and the one line that says how to install it.

The base install is the library and the embedded pipeline; ``[kafka]`` adds the service (``run``, ``replay``,
``tail``), ``[demo]`` the demo's plot and real data (``pyproject.toml``). A command that needs a missing extra stops
before doing anything, with exit code 2 (a refused start, like an invalid configuration)."""

from __future__ import annotations

import importlib.util

#: extra → the modules it provides that the CLI imports
EXTRAS = {
    "kafka": ("aiokafka", "prometheus_client"),
    "demo": ("matplotlib",),
}


def missing(modules) -> list[str]:
    out = []
    for m in modules:
        try:
            if importlib.util.find_spec(m) is None:
                out.append(m)
        except (ImportError, ValueError):  # a parent package missing, a broken install
            out.append(m)
    return out


def install_hint(extra: str) -> str:
    return f"pip install 'streamdp[{extra}]'"


def require(extra: str, what: str, modules=None) -> None:
    """Raise the CLI's one-line error when a module of ``extra`` is not installed. ``what`` names the command."""
    from streamdp.cli.main import CLIError

    gone = missing(EXTRAS[extra] if modules is None else modules)
    if gone:
        raise CLIError(f"{what} needs the '{extra}' extra ({', '.join(gone)} not installed): "
                       f"{install_hint(extra)} (from a clone: pip install -e '.[{extra}]')", code=2)
