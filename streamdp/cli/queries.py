"""``streamdp queries kinds`` and ``streamdp config check FILE``."""

from __future__ import annotations

import json
import sys


def register(sub) -> None:
    q = sub.add_parser("queries", help="query kinds and their privacy costs")
    qs = q.add_subparsers(dest="queries_cmd", metavar="CMD")
    qs.required = True
    k = qs.add_parser("kinds", help="list every query kind with its parameters, notion and cost formula")
    k.add_argument("--json", action="store_true")
    k.set_defaults(func=_kinds)

    c = sub.add_parser("config", help="configuration files")
    cs = c.add_subparsers(dest="config_cmd", metavar="CMD")
    cs.required = True
    chk = cs.add_parser("check", help="validate a TOML configuration")
    chk.add_argument("file")
    chk.add_argument("--json", action="store_true")
    chk.set_defaults(func=_check)


def _kinds(args) -> int:
    from streamdp.config.kinds import kinds

    ks = kinds()
    if args.json:
        print(json.dumps([k.describe() for k in ks.values()], indent=1))
        return 0
    for k in ks.values():
        print(f"{k.kind}  [{k.notion}]  — {k.doc}")
        print(f"  source: {k.source}")
        print(f"  cost:   {k.cost}")
        if k.needs:
            print(f"  reads:  {', '.join(k.needs)}")
        for p in k.params:
            req = "required" if p.required else f"default {p.default!r}"
            extra = f" one of {list(p.choices)}" if p.choices else ""
            print(f"    {p.name:<24} {p.type:<6} {req:<22} {p.doc}{extra}")
        print()
    return 0


def _check(args) -> int:
    from streamdp.cli.main import CLIError
    from streamdp.config.kinds import ConfigError
    from streamdp.config.loader import ConfigFileError, load_config

    try:
        cfg = load_config(args.file, log_warnings=False)  # printed below
    except (ConfigFileError, ConfigError) as e:
        # a ConfigFileError's message starts with the path already
        msg = str(e) if isinstance(e, ConfigFileError) else f"{args.file}: {e}"
        if args.json:  # a machine reader gets its answer on stdout either way
            print(json.dumps({"ok": False, "error": msg}, indent=1))
        raise CLIError(msg, code=1) from None
    qs = cfg.build_queries()
    if args.json:
        print(json.dumps({"ok": True, "queries": [q.describe() for q in qs], "warnings": cfg.warnings}, indent=1,
                         default=float))
    else:
        n = len(cfg.warnings)
        print(f"{args.file}: OK — {len(qs)} quer{'y' if len(qs) == 1 else 'ies'}: "
              + ", ".join(f"{q.id} ({q.kind})" for q in qs)
              + (f" — {n} warning{'s' if n != 1 else ''} (stderr)" if n else ""))
    for w in cfg.warnings:  # valid, so exit status 0; but users would be halted
        print(f"streamdp: warning: {args.file}: {w}", file=sys.stderr)
    return 0
