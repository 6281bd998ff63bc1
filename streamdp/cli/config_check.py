"""``streamdp config check FILE [FILE …] [--strict] [--explain] [--json]``: validate service configurations.

Each file is checked in full: every problem is reported, one line each naming its field (``FILE: field: …`` on
stderr). A valid file prints ``FILE: OK — …`` and its warnings: the budget warnings (users the default budget halts
for good at their first event or window) and test mode (``unsafe_test_seed``). Exit status 0 when every file is
valid, 1 otherwise; with ``--strict`` a warning is a failure too (test mode, a default budget that halts a user
active in every window in the first window, a budget component that is 0 while a query charges it).

``--explain`` adds, per query and in all, the worst-case charge per window of a user active in every window (ρ or
α and δ, and the (ε, δ) it converts to) and how many windows such a user lasts under the default budget
(:mod:`streamdp.config.explain`). ``--json``: one object per file — the object itself for one file,
``{"ok": …, "files": [...]}`` for several.
"""

from __future__ import annotations

import json
import sys
import textwrap

from streamdp.accounting.report import DEFAULT_DELTA_PRIME


def register(sub) -> None:
    c = sub.add_parser("config", help="configuration files", description="Validate service configuration files.")
    cs = c.add_subparsers(dest="config_cmd", metavar="CMD")
    cs.required = True
    chk = cs.add_parser(
        "check", help="validate TOML configurations (every problem, each naming its field)",
        description="Validate TOML service configurations: every problem of each file is reported, each naming its "
                    "field. Exit status 0 when every file is valid, 1 otherwise (with --strict: also when a file has "
                    "a warning).")
    chk.add_argument("files", nargs="+", metavar="FILE", help="TOML service configuration(s)")
    chk.add_argument("--json", action="store_true", help="machine-readable result on stdout")
    chk.add_argument("--strict", action="store_true",
                     help="fail on warnings too: test mode (unsafe_test_seed), a default budget under which a user "
                          "active in every window is halted in the first window, a budget component that is 0 "
                          "while a query charges it")
    chk.add_argument("--explain", action="store_true",
                     help="per query and in all: the worst-case charge per window of a user active in every window, "
                          "the (ε, δ) it converts to, and how many windows such a user lasts under the default budget")
    chk.add_argument("--delta-prime", type=_delta_prime, default=DEFAULT_DELTA_PRIME, metavar="D",
                     help="δ′ of the (ε, δ + δ′) conversions of --explain (default %(default)g)")
    chk.set_defaults(func=_check)


def _delta_prime(text: str) -> float:
    import argparse

    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not 0.0 < v < 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}")
    return v


def check_file(path: str, *, strict: bool = False, explain: bool = False,
               delta_prime: float = DEFAULT_DELTA_PRIME) -> dict:
    """The result of checking one file (the ``--json`` object): ``ok`` (valid, and under ``strict`` without
    warnings), ``errors`` (every problem; ``error`` the first), ``queries``, ``warnings``, ``test_mode``,
    ``strict_findings`` (what ``--strict`` refuses) and ``explain`` (or None)."""
    from streamdp.config.explain import explain as explain_cfg
    from streamdp.config.explain import strict_findings, test_mode_warning
    from streamdp.config.kinds import ConfigError, error_list
    from streamdp.config.loader import ConfigFileError, load_config

    out = {"file": path, "ok": False, "error": None, "errors": [], "queries": [], "warnings": [], "test_mode": None,
           "strict": strict, "strict_findings": [], "explain": None}
    try:
        cfg = load_config(path, log_warnings=False)  # printed by the caller
    except ConfigError as e:
        # a ConfigFileError's message starts with the path already; the others name a field
        errors = [str(e)] if isinstance(e, ConfigFileError) else [f"{path}: {m}" for m in error_list(e)]
        return {**out, "error": errors[0], "errors": errors}
    info = explain_cfg(cfg, delta_prime) if (explain or strict) else None
    findings = strict_findings(cfg, info)
    tm = test_mode_warning(cfg)
    return {**out, "ok": not (strict and findings), "queries": [q.describe() for q in cfg.build_queries()],
            "warnings": ([tm] if tm else []) + list(cfg.warnings), "test_mode": tm is not None,
            "strict_findings": findings, "explain": info if explain else None}


def _check(args) -> int:
    results = [check_file(f, strict=args.strict, explain=args.explain, delta_prime=args.delta_prime)
               for f in args.files]
    if args.json:
        doc = results[0] if len(results) == 1 else {"ok": all(r["ok"] for r in results), "files": results}
        print(json.dumps(doc, indent=1, default=float))
    for r in results:
        for e in r["errors"]:
            print(f"streamdp: error: {e}", file=sys.stderr)
        if r["errors"]:
            continue
        if not args.json:
            qs = r["queries"]
            n = len(r["warnings"])
            status = "REFUSED (--strict)" if not r["ok"] else "OK"
            print(f"{r['file']}: {status} — {len(qs)} quer{'y' if len(qs) == 1 else 'ies'}: "
                  + ", ".join(f"{q['id']} ({q['kind']})" for q in qs)
                  + (f" — {n} warning{'s' if n != 1 else ''} (stderr)" if n else ""))
            if r["explain"] is not None:
                print(explain_text(r["explain"]))
        for w in r["warnings"]:  # valid, so exit status 0 unless --strict; but users would be halted, or test mode
            print(f"streamdp: warning: {r['file']}: {w}", file=sys.stderr)
        for f in r["strict_findings"]:
            if f not in r["warnings"]:
                print(f"streamdp: warning: {r['file']}: {f}", file=sys.stderr)
    return 0 if all(r["ok"] for r in results) else 1


def _g(x) -> str:
    return f"{x:.6g}"


def _amount_text(notion: str, v: dict) -> str:
    main = "α" if notion == "emd" else "ρ"
    unit = " per m²" if notion == "cgp" else ""
    return f"{notion} {main} {_g(v['alpha' if notion == 'emd' else 'rho'])}{unit}, δ {_g(v['delta'])}"


def _converted_text(conv: dict) -> str:
    parts = []
    for k, c in conv.items():
        if c is None:
            parts.append(f"{k}: no finite guarantee")
        elif k == "dp":
            parts.append(f"(ε {_g(c['epsilon'])}, δ {_g(c['delta'])})-DP")
        elif k == "gp":
            parts.append(f"(ε {_g(c['epsilon_per_km'])} per km within {_g(c['within_km'])} km, δ {_g(c['delta'])})-GP")
    return "; ".join(parts)


def _charge_text(amounts: dict, conv: dict) -> str:
    if not amounts:
        return "nothing"
    text = "; ".join(_amount_text(n, v) for n, v in amounts.items())
    c = _converted_text(conv)
    return f"{text} → {c}" if c else text


def explain_text(e: dict) -> str:
    """``--explain`` as text (the same content as its JSON)."""
    lines = ["  worst case per window for one user (active in every window, charged the most each query can charge):"]
    for q in e["queries"]:
        if not q["bounded"]:
            lines.append(f"    {q['id']} ({q['kind']}, {q['notion']}): {q['basis']} — left out of the totals")
            continue
        lines.append(f"    {q['id']} ({q['kind']}, {q['notion']}), {q['when']}: "
                     f"{_charge_text(q['per_window'], q['converted'])}")
        lines.extend(textwrap.wrap(q["basis"], 116, initial_indent="        ", subsequent_indent="        "))
    a = e["all"]
    lines.append(f"    all queries, the most in one window: {_charge_text(a['per_window_max'], a['converted'])}")
    budget = "; ".join(_amount_text(n, v) for n, v in e["budget"].items()) or "nothing charged"
    lines.append(f"  default budget [budget]: {budget}")
    if e["halted_in_window"] is None:
        lines.append("  a user active in every window is never halted: the queries stop charging before any budget "
                     "component runs out")
    elif e["halted_in_window"] == 1:
        lines.append(f"  a user active in every window is halted in window 1, their first ({e['limited_by']} runs "
                     "out): the default budget does not cover one window")
    else:
        n = e["lasts_windows"]
        lines.append(f"  a user active in every window lasts {n} window{'s' if n != 1 else ''}: halted (for good) in "
                     f"window {e['halted_in_window']} ({e['limited_by']} runs out)")
    lines.append(f"  conversions: zCDP (ρ, δ) → (ε, δ + δ′)-DP and CGP → GP with δ′ = {e['delta_prime']:g}; EMD is "
                 "already (α, δ)-d_EM-DP")
    return "\n".join(lines)
