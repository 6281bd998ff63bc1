"""``streamdp queries kinds`` (``streamdp config check``: :mod:`streamdp.cli.config_check`)."""

from __future__ import annotations

import json


#: one line per kind for ``streamdp queries kinds`` (a kind not listed shows the start of its own description)
SUMMARIES = {
    "continual_counts": "running count of every item past a threshold (items not listed in advance)",
    "top_k": "ranked list of up to k items per window, no counts; stops after k* items",
    "window_histogram": "this window's count of users per item, for the items above a threshold",
    "grid_means": "user-level mean of a value per (grid cell or item, window)",
    "range_counts": "users inside registered rectangles, each at its window; savings reused",
    "kde_point": "density of users' locations at registered points (Gaussian kernel)",
    "knn_point": "distances of the k users nearest to registered points",
    "threshold_count": "is the number of users with an item below a threshold? (yes/no)",
    "geo_locations": "every located user's noisy location, without ids (a point cloud)",
    "geo_knn": "noisy mean location and distance of the k users nearest to each point",
    "geo_convex_hull": "private convex hull of the users' locations",
    "emd_linear": "mean feature vector of the users' items (metric DP on item histograms)",
    "emd_frequency": "the average user's item distribution over a clustered item domain",
}

#: output width of the text listings
WIDTH = 100


def register(sub) -> None:
    q = sub.add_parser("queries", help="query kinds and their privacy costs",
                       description="What streamdp can release: the query kinds, the accounting notion each is "
                                   "charged in (zcdp, cgp, emd), its cost formula and its parameters.")
    qs = q.add_subparsers(dest="queries_cmd", metavar="CMD")
    qs.required = True
    k = qs.add_parser("kinds", help="list the query kinds; `queries kinds KIND` for one kind's parameters and cost",
                      description="Without KIND: one line per query kind. With KIND: its description, source, "
                                  "cost formula, the event fields it reads and every parameter with its default.")
    k.add_argument("kind", nargs="?", metavar="KIND", help="show this kind in full")
    k.add_argument("--json", action="store_true",
                   help="machine-readable: every kind in full (a list), or KIND's object")
    k.set_defaults(func=_kinds)


def _summary(k) -> str:
    s = SUMMARIES.get(k.kind)
    if s is None:
        s = k.doc.split(";")[0].split(". ")[0]
    return s


def _clip(line: str, width: int = WIDTH) -> str:
    return line if len(line) <= width else line[: width - 1] + "…"


def _wrapped(label: str, text: str, indent: int = 10) -> list[str]:
    import textwrap

    return textwrap.wrap(text, WIDTH, initial_indent=f"{label:<{indent}}", subsequent_indent=" " * indent,
                         break_on_hyphens=False) or [label]


def _kinds(args) -> int:
    from streamdp.cli.main import CLIError
    from streamdp.config.kinds import kinds

    ks = kinds()
    if args.kind is not None and args.kind not in ks:
        raise CLIError(f"unknown query kind {args.kind!r}; the kinds are: {', '.join(ks)}")
    if args.json:
        if args.kind is not None:
            print(json.dumps(ks[args.kind].describe(), indent=1))
        else:
            print(json.dumps([k.describe() for k in ks.values()], indent=1))
        return 0
    if args.kind is None:
        print(f"{'KIND':<18} {'NOTION':<6} RELEASES")
        for k in ks.values():
            print(_clip(f"{k.kind:<18} {k.notion:<6} {_summary(k)}"))
        print()
        print("notions (each user has a budget in each):")
        print("  zcdp  zero-concentrated differential privacy: rho and delta")
        print("  cgp   concentrated geo-privacy: rho per m² of distance between two locations")
        print("  emd   metric differential privacy over the users' item histograms: alpha and delta")
        print("details: streamdp queries kinds KIND    (all of it as JSON: streamdp queries kinds --json)")
        return 0
    _print_kind(ks[args.kind])
    return 0


def _print_kind(k) -> None:
    import textwrap

    out = [f"{k.kind}  [{k.notion}]", ""]
    out += _wrapped("releases", k.doc)
    out += _wrapped("source", k.source)
    out += _wrapped("cost", k.cost)
    if k.needs:
        out += _wrapped("reads", ", ".join(k.needs))
    out += ["", "parameters (a [[query]] table: id, kind and these):"]
    for p in k.params:
        req = "required" if p.required else f"default {p.default!r}"
        head = f"  {p.name} ({p.type}, {req})"
        out.append(head)
        extra = f" One of: {', '.join(map(str, p.choices))}." if p.choices else ""
        out += textwrap.wrap(f"{p.doc}{extra}", WIDTH, initial_indent="      ", subsequent_indent="      ",
                             break_on_hyphens=False)
    print("\n".join(out))
