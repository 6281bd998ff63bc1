"""``streamdp queries kinds`` (``streamdp config check``: :mod:`streamdp.cli.config_check`)."""

from __future__ import annotations

import json


def register(sub) -> None:
    q = sub.add_parser("queries", help="query kinds and their privacy costs")
    qs = q.add_subparsers(dest="queries_cmd", metavar="CMD")
    qs.required = True
    k = qs.add_parser("kinds", help="list every query kind with its parameters, notion and cost formula")
    k.add_argument("--json", action="store_true")
    k.set_defaults(func=_kinds)


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

