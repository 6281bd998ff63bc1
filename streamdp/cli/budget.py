"""``streamdp budget``: inspect and manage the per-user privacy filters (Liang–Yi (adaptive budgeting) Alg. 1–2; docs/contract.md §3).

    streamdp budget show USER [--delta-prime D] [--gp-within-km KM]
    streamdp budget list [--exhausted] [--top N] [--notion zcdp|cgp|emd]
    streamdp budget stats [--notion zcdp|cgp|emd]
    streamdp budget ledger [--query Q] [--since T] [--totals]
    streamdp budget grant USER --rho R [--delta D] [--notion zcdp|cgp|emd] --yes [--force] [--create]
                                 [--reason TEXT] [--actor NAME]
    streamdp budget set-default --rho R [--delta D] [--notion zcdp|cgp|emd] --yes [--force] [--create]
                                [--reason TEXT] [--actor NAME]
    streamdp budget export [--format csv|jsonl]

Every command takes ``--store URL`` (``redis://``, ``rediss://``, ``unix://``, ``redis+cluster://`` or
``rediss+cluster://`` for a Redis Cluster, or the path of an embedded store file; default: the environment variable
``STREAMDP_STORE``) and ``--json``. A store file must exist — ``grant`` and
``set-default`` create a missing one only with ``--create`` (a mistyped path is refused, not a new empty store) —
and ``host:port`` without a scheme is refused: write ``redis://host:port``.

A user as JSON (one entry per notion in use, i.e. with a non-zero budget or spend; ``spent``/``budget`` are ρ for
``zcdp`` and ``cgp`` and α for ``emd``; an unlimited budget — the fixed-point INT64_MAX sentinel — is ``null``)::

    {"user": "u17", "halted": false,
     "zcdp": {"spent": 0.25, "budget": 1.0, "delta_spent": 1e-08, "delta_budget": 1e-06}}

``show`` also gives what the spend and the budget mean (docs/contract.md §3, :mod:`streamdp.accounting.report`):
``zcdp`` as (ε, δ + δ′)-DP (CKS conversion) and ``cgp`` as (ε per km, δ + δ′)-geo-privacy for locations at most
``--gp-within-km`` apart (Liang–Yi (CGP) Lemma 3.7); δ′ is ``--delta-prime`` (default 1e-6). In JSON under ``converted``::

    "converted": {"zcdp": {"spent": {"epsilon": 3.54, "delta": 1.01e-06}, "budget": {"epsilon": 7.77, "delta": 2e-06}}}

The *used fraction* of a notion is the largest spent/budget over its components with a non-zero budget; the
*remaining fraction* is one minus it. ``grant`` and ``set-default`` replace the budget of ONE notion (``--rho``
is ρ, or α for ``emd``, below 9223372.036854775807 — INT64_MAX at the 10⁻¹² fixed point; ``--delta`` is δ, below 1,
and the current δ budget stays when it is omitted; ``inf`` or ``infinity`` — nothing else, not an overflowing
``1e400`` — means unlimited; values are decimal numbers, and a non-zero one must be at least the grid's 10⁻¹², δ
10⁻¹⁸); they are administrative, refuse to run without ``--yes``, write an audit entry to the ledger and name the
store in their confirmation. ``set-default --rho`` needs ``--delta`` while the notion's current default δ is 0 (a
new store): a default of ρ > 0 with δ = 0 halts every user of a query that charges δ. Only that notion's values are
changed, atomically against the store's current ones (a concurrent change of another notion stands). A ``grant``
gives the user an override of their WHOLE budget: the other notions keep the values they have at that moment and no
longer follow ``set-default``. A budget below what a user has already spent halts that user for good at their next
charged window (a halt is permanent: no later grant resumes them), so ``grant`` below the user's spend, and
``set-default`` below the spend of users who follow the default, are refused unless ``--force`` (``set-default``
says how many users it would halt).

``export`` writes the amounts as exact decimals of the fixed-point integers (a spend one grid unit above a budget
reads above it; multiplying by 10¹² — 10¹⁸ for δ — gives the stored integers back), ``inf`` for unlimited. In CSV a
user id that starts with ``=``, ``+``, ``-``, ``@``, a tab, a carriage return or ``'`` is written with a ``'`` in
front (OWASP's defence against formula injection when the file is opened in a spreadsheet; remove one leading
``'`` to get the id back); every cell is quoted. Text output escapes control and formatting characters in user ids (``\x1b``,
``\u202e``; a backslash as ``\\``), so that a producer-chosen id cannot drive the terminal.
Errors (unreachable store, unknown user, bad URL) print one line on stderr and exit non-zero: 1 for a failed
operation, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import getpass
import json
import math
import os
import re
import sys
from fractions import Fraction
from typing import Iterable

import numpy as np

from streamdp.accounting.cost import (DELTA_SCALE, INT64_MAX, LOSS_SCALE, NOTIONS, SCALES, budget_to_fixed,
                                      check_budget_range, from_fixed, max_budget_text)
from streamdp.accounting.report import DEFAULT_DELTA_PRIME, DEFAULT_GP_WITHIN_KM, as_dp, as_gp
from streamdp.cli.arguments import plain_help, positive_int
from streamdp.cli.main import CLIError
from streamdp.filter.store import BudgetStore, DefaultBudgetMissing, StoreError, UserBudget
from streamdp.input.events import MAX_USER_LEN
from streamdp.outputs.ledger_totals import ledger_totals

__all__ = ["register", "user_json", "used_fraction"]

_REDIS_SCHEMES = ("redis://", "rediss://", "unix://", "redis+cluster://", "rediss+cluster://")
#: ``localhost:6379``, ``10.0.0.5:6379/0``, ``[::1]:6379``: a Redis address without its scheme, not a file name
_HOST_PORT = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):\d{1,5}(?:/\d*)?")
_BINS = 10


# --------------------------------------------------------------------------------------------- formatting
def _amount(v: int, scale: int) -> float | None:
    """A fixed-point amount as a real number; the INT64_MAX sentinel (unlimited) as None."""
    return None if int(v) == INT64_MAX else from_fixed(int(v), scale)


def _in_use(spent: np.ndarray, budget: np.ndarray, k: int) -> bool:
    return bool(spent[2 * k] or spent[2 * k + 1] or budget[2 * k] or budget[2 * k + 1])


def _notion_json(spent: np.ndarray | None, budget: np.ndarray, k: int) -> dict:
    i, j = 2 * k, 2 * k + 1
    d = {}
    if spent is not None:
        d["spent"] = from_fixed(int(spent[i]), SCALES[i])
    d["budget"] = _amount(budget[i], SCALES[i])
    if spent is not None:
        d["delta_spent"] = from_fixed(int(spent[j]), SCALES[j])
    d["delta_budget"] = _amount(budget[j], SCALES[j])
    return d


def user_json(rec: UserBudget) -> dict:
    """The JSON object of a user (see the module doc)."""
    out: dict = {"user": rec.user, "halted": bool(rec.halted)}
    for k, notion in enumerate(NOTIONS):
        if _in_use(rec.spent, rec.budget, k):
            out[notion] = _notion_json(rec.spent, rec.budget, k)
    return out


def _default_json(budget: np.ndarray) -> dict:
    return {notion: _notion_json(None, budget, k) for k, notion in enumerate(NOTIONS)
            if budget[2 * k] or budget[2 * k + 1]}


def _used(rec: UserBudget, notion: str | None) -> Fraction | None:
    ks = range(len(NOTIONS)) if notion is None else [NOTIONS.index(notion)]
    best = None
    for k in ks:
        for i in (2 * k, 2 * k + 1):
            s, b = int(rec.spent[i]), int(rec.budget[i])
            if b == 0:
                f = Fraction(1) if s > 0 else None
            elif b == INT64_MAX:
                f = Fraction(0)
            else:
                f = min(Fraction(1), Fraction(s, b))
            if f is not None and (best is None or f > best):
                best = f
    return best


def used_fraction(rec: UserBudget, notion: str | None = None) -> float | None:
    """Largest spent/budget over the components (of ``notion``, or of every notion) with a non-zero budget;
    1 when something was spent against a zero budget; None when no component is in use."""
    f = _used(rec, notion)
    return None if f is None else float(f)


def _num(x: float | None) -> str:
    if x is None:
        return "inf"
    return f"{x:.6g}"


def exact_decimal(v: int, scale: int) -> str:
    """A fixed-point amount as its exact decimal (integer arithmetic, no float): 250000000000 at 10¹² → ``0.25``."""
    v = int(v)
    sign = "-" if v < 0 else ""
    whole, frac = divmod(abs(v), scale)
    digits = len(str(scale)) - 1
    text = f"{whole}.{frac:0{digits}d}".rstrip("0").rstrip(".")
    return sign + text


def _exact_budget(v: int, scale: int) -> str:
    return "inf" if int(v) == INT64_MAX else exact_decimal(v, scale)


#: control characters (C0, DEL, C1), format characters (bidi overrides, zero-width) and line/paragraph separators:
#: printed raw they move the cursor, recolour or reorder the terminal's text
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064"
                          r"\u2066-\u206f\ufeff\ufff9-\ufffb\\]")


def printable(text: str) -> str:
    """``text`` for a terminal: control and formatting characters escaped (``\x1b``, ``\u202e``), and the backslash
    doubled so that the escape is unambiguous."""
    def esc(m: re.Match) -> str:
        c = m.group(0)
        if c == "\\":
            return "\\\\"
        return f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"

    return _UNPRINTABLE.sub(esc, text)


#: a CSV cell starting with one of these is read as a formula by spreadsheets (OWASP, "CSV Injection"); ``'`` too, so
#: that the escape (a leading ``'``) is unambiguous
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "'")


def csv_cell(text: str) -> str:
    """A producer-chosen text as a CSV cell that no spreadsheet evaluates: prefixed with ``'`` when it starts with a
    formula character."""
    return "'" + text if text.startswith(_FORMULA_START) else text


def _table(headers: list[str], rows: Iterable[list[str]]) -> str:
    rows = [list(map(str, r)) for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines)


def _print_json(obj) -> None:
    print(json.dumps(obj, indent=None if isinstance(obj, list) else 2, allow_nan=False))


# ------------------------------------------------------------------------------------------------ the store
def _open_store(args, *, write: bool = False) -> BudgetStore:
    from streamdp.config.kinds import ConfigError
    from streamdp.config.secrets import secret

    try:
        url = args.store or secret("STREAMDP_STORE")  # or the file named by $STREAMDP_STORE_FILE
    except ConfigError as e:
        raise CLIError(str(e), code=1) from None
    if not url:
        raise CLIError("no budget store: pass --store URL (redis://…, rediss://…, unix://… or a file path) "
                       "or set STREAMDP_STORE")
    if url.startswith(_REDIS_SCHEMES):
        from streamdp.filter.redis_store import RedisBudgetStore

        try:
            st = RedisBudgetStore.from_url(url)
            st.ping()
        except ValueError as e:
            raise CLIError(str(e)) from None
        except StoreError as e:
            raise CLIError(str(e), code=1) from None
        return st
    if "://" in url:
        raise CLIError(f"unsupported store URL {url!r}: use redis://, rediss://, unix:// or a file path")
    if _HOST_PORT.fullmatch(url):  # it would be a file of that name (and a write created one, review 12 F5)
        raise CLIError(f"store {url!r} looks like a Redis address without its scheme: write redis://{url} (a file "
                       f"with that name: ./{url})")
    from streamdp.filter.file_lock import StoreBusy, StoreFileLock
    from streamdp.filter.memory import MemoryBudgetStore

    create = write and getattr(args, "create", False)
    from streamdp.filter.memory import check_store_file

    try:  # a device or FIFO (--store /dev/zero) is refused before its lock file is made or a byte is read
        check_store_file(url)
    except ValueError as e:
        raise CLIError(str(e), code=1) from None
    if not os.path.exists(url) and not create:
        # a write to a mistyped path created a new, empty store (default budget 0) and reported success while the
        # real store stayed unchanged (review 12 F5): a new store file is made only on request
        hint = (" — nothing was changed; check the path, or give --create to start a new store file there (its "
                "default budget is 0 in every notion until `set-default`)") if write else ""
        raise CLIError(f"budget store file {url!r} does not exist{hint}", code=1)
    try:  # a write holds the file's lock from before the load to the save (file_lock.py): no lost update
        held = StoreFileLock(url).acquire() if write else None
    except StoreBusy as e:
        raise CLIError(str(e), code=1) from None
    except OSError as e:
        raise CLIError(f"cannot lock budget store file {url!r}: {e}", code=1) from None
    if held is not None and not create and not os.path.exists(url):  # removed while the lock was being taken
        held.release()
        raise CLIError(f"budget store file {url!r} does not exist — nothing was changed", code=1)
    try:
        st = MemoryBudgetStore.load(url) if os.path.exists(url) else MemoryBudgetStore(path=url)
    except ValueError as e:  # load names the file and the problem
        if held is not None:
            held.release()
        raise CLIError(str(e), code=1) from None
    except (OSError, KeyError, TypeError) as e:
        if held is not None:
            held.release()
        raise CLIError(f"cannot read budget store file {url!r}: {e}", code=1) from None
    st.file_lock = held
    return st


def _store_name(st: BudgetStore) -> str:
    """The store a write went to, for its confirmation: the file's path, or the Redis URL without credentials."""
    path = getattr(st, "path", None)
    if path:
        return str(path)
    from streamdp.filter.redis_store import redact_url

    return redact_url(getattr(st, "url", "") or "") or "Redis"


def _run(fn):
    """Open the store, run the command, map store failures to one-line errors, close."""

    def wrapped(args) -> int:
        st = _open_store(args, write=getattr(args, "writes", False))
        try:
            return fn(args, st) or 0
        except StoreError as e:
            raise CLIError(str(e), code=1) from None
        finally:
            if st.__class__.__name__ == "RedisBudgetStore":
                st.close()
            elif getattr(st, "file_lock", None) is not None:  # a file store written by this command: saved by it
                st.file_lock.release()

    return wrapped


# ------------------------------------------------------------------------------------------------- commands
def converted_json(rec: UserBudget, delta_prime: float, within_km: float) -> dict:
    """The spend and budget of each notion in use that has a conversion, as (ε, δ)-DP or as geo-privacy."""
    out: dict = {}
    for k, notion in enumerate(NOTIONS):
        if notion == "emd" or not _in_use(rec.spent, rec.budget, k):
            continue
        n = _notion_json(rec.spent, rec.budget, k)
        if notion == "zcdp":
            conv = lambda r, d: as_dp(r, d, delta_prime)  # noqa: E731
        else:
            conv = lambda r, d: as_gp(r, d, delta_prime, within_km)  # noqa: E731
        out[notion] = {"spent": conv(n["spent"], n["delta_spent"]), "budget": conv(n["budget"], n["delta_budget"])}
    return out


def _conv_text(c: dict | None, per: str = "") -> str:
    """A conversion, or why there is none: an unlimited ρ or δ (a finite ρ with an unlimited δ bounds nothing
    either; the text said "unlimited" as if ρ were)."""
    return ("no bound (its ρ or its δ is unlimited)" if c is None
            else f"ε = {c[f'epsilon{per}']:.4g}, δ = {c['delta']:.3g}")


@_run
def _show(args, st: BudgetStore) -> int:
    rec = st.get_user(args.user)
    if rec is None:
        raise CLIError(f"unknown user {args.user!r} (the store has never seen it)", code=1)
    conv = converted_json(rec, args.delta_prime, args.gp_within_km)
    if args.json:
        _print_json({**user_json(rec), "converted": conv})
        return 0
    print(f"user {printable(rec.user)}: {'HALTED' if rec.halted else 'active'}")
    rows = []
    for k, notion in enumerate(NOTIONS):
        if not _in_use(rec.spent, rec.budget, k):
            continue
        n = _notion_json(rec.spent, rec.budget, k)
        rem = None if n["budget"] is None else n["budget"] - n["spent"]
        drem = None if n["delta_budget"] is None else n["delta_budget"] - n["delta_spent"]
        rows.append([notion, _num(n["spent"]), _num(n["budget"]), _num(rem), _num(n["delta_spent"]),
                     _num(n["delta_budget"]), _num(drem)])
    if rows:
        print(_table(["notion", "spent", "budget", "remaining", "δ spent", "δ budget", "δ remaining"], rows))
    else:
        print("(no budget and no spend in any notion)")
    if "zcdp" in conv:
        c = conv["zcdp"]
        print(f"zcdp as (ε, δ)-DP (CKS conversion, δ′ = {args.delta_prime:g}): spent {_conv_text(c['spent'])}; "
              f"budget {_conv_text(c['budget'])}")
    if "cgp" in conv:
        c = conv["cgp"]
        print(f"cgp as geo-privacy, ε per km for locations ≤ {args.gp_within_km:g} km apart (Liang–Yi (CGP) Lemma 3.7, "
              f"δ′ = {args.delta_prime:g}): spent {_conv_text(c['spent'], '_per_km')}; "
              f"budget {_conv_text(c['budget'], '_per_km')}")
    return 0


def _is_exhausted(rec: UserBudget, notion: str | None) -> bool:
    f = _used(rec, notion)
    return rec.halted or (f is not None and f >= 1)


@_run
def _list(args, st: BudgetStore) -> int:
    recs = [r for r in st.iter_users()
            if args.notion is None or _in_use(r.spent, r.budget, NOTIONS.index(args.notion))]
    if args.exhausted:
        recs = [r for r in recs if _is_exhausted(r, args.notion)]
    recs.sort(key=lambda r: (-(_used(r, args.notion) or 0), r.user))
    if args.top is not None:
        recs = recs[: args.top]
    if args.json:
        _print_json([user_json(r) for r in recs])
        return 0
    notions = [args.notion] if args.notion else [
        n for k, n in enumerate(NOTIONS) if any(_in_use(r.spent, r.budget, k) for r in recs)]
    rows = []
    for r in recs:
        f = used_fraction(r, args.notion)
        row = [printable(r.user), "HALTED" if r.halted else "active", "-" if f is None else f"{100 * f:.1f}%"]
        for n in notions:
            k = NOTIONS.index(n)
            if _in_use(r.spent, r.budget, k):
                d = _notion_json(r.spent, r.budget, k)
                row.append(f"{_num(d['spent'])}/{_num(d['budget'])}")
            else:
                row.append("-")
        rows.append(row)
    heads = ["user", "status", "used"] + [f"{n} {'α' if n == 'emd' else 'ρ'} spent/budget" for n in notions]
    print(_table(heads, rows))
    print(f"({len(recs)} user{'s' if len(recs) != 1 else ''})")
    return 0


@_run
def _stats(args, st: BudgetStore) -> int:
    n = halted = not_in_use = 0
    counts = [0] * _BINS
    for r in st.iter_users():
        n += 1
        if r.halted:
            halted += 1
            continue
        f = _used(r, args.notion)
        if f is None:
            not_in_use += 1
            continue
        counts[min(_BINS - 1, math.floor((1 - f) * _BINS))] += 1  # exact: bins are [i/10, (i+1)/10)
    hist = [{"from": i / _BINS, "to": (i + 1) / _BINS, "count": c} for i, c in enumerate(counts)]
    if args.json:
        _print_json({"users": n, "active": n - halted, "halted": halted, "notion": args.notion,
                     "not_in_use": not_in_use, "remaining_fraction_histogram": hist})
        return 0
    print(_table(["users", "active", "halted"], [[n, n - halted, halted]]))
    what = f"notion {args.notion}" if args.notion else "most-used notion"
    print(f"\nremaining budget fraction of active users ({what}):")
    top = max(counts) if any(counts) else 1
    rows = [[f"[{h['from']:.1f}, {h['to']:.1f}{']' if i == _BINS - 1 else ')'}", h["count"],
             "#" * math.ceil(40 * h["count"] / top) if h["count"] else ""] for i, h in enumerate(hist)]
    print(_table(["remaining", "users", ""], rows))
    if not_in_use:
        print(f"({not_in_use} active user{'s' if not_in_use != 1 else ''} with no budget or spend in this notion)")
    return 0


_DURATION = re.compile(r"^-?(\d+(?:\.\d+)?)([smhd])$")  # "-1d" is "1d" ago too (there is no "1d from now")


def _parse_since(text: str) -> float:
    """Seconds since the epoch, an ISO-8601 time (UTC unless it names a zone), or a duration ago (30m, 2h, 7d; with
    a minus sign, -7d, the same)."""
    m = _DURATION.match(text)
    if m:
        mult = {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
        return dt.datetime.now(dt.timezone.utc).timestamp() - float(m.group(1)) * mult
    try:
        v = float(text)
        if math.isfinite(v):
            return v
    except ValueError:
        pass
    try:
        t = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected seconds since the epoch, an ISO-8601 time or a duration ago like 2h, got {text!r}") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return t.timestamp()


def _iso(ts) -> str:
    try:
        return dt.datetime.fromtimestamp(float(ts), dt.timezone.utc).isoformat(timespec="seconds")
    except (TypeError, ValueError, OverflowError, OSError):
        return str(ts)


@_run
def _ledger(args, st: BudgetStore) -> int:
    entries = st.ledger(query=args.query, since=args.since)
    if args.totals:
        return _ledger_totals(args, entries)
    if args.json:
        _print_json(entries)
        return 0
    rows = []
    for e in entries:
        rest = {k: (_readable_budget(v) if k in ("old", "new") and e.get("type") == "admin" else v)
                for k, v in e.items() if k not in ("ts", "type", "query", "action")}
        rows.append([_iso(e.get("ts")), printable(str(e.get("type", ""))),
                     printable(str(e.get("query") or e.get("action") or "")),
                     printable(json.dumps(rest, separators=(",", ":"), ensure_ascii=False))])
    print(_table(["time (UTC)", "type", "query/action", "details"], rows))
    print(f"({len(entries)} entr{'ies' if len(entries) != 1 else 'y'})")
    return 0


def _readable_budget(vec):
    """An audit entry's budget vector (fixed point, the store's layout) as {component: real} for the text table —
    the non-zero components, ``inf`` for unlimited (the raw vector stays in ``--json``)."""
    from streamdp.accounting.cost import COMPONENTS

    if not isinstance(vec, list) or len(vec) != len(COMPONENTS):
        return vec
    return {c: ("inf" if int(v) == INT64_MAX else from_fixed(v, SCALES[i]))
            for i, (c, v) in enumerate(zip(COMPONENTS, vec)) if int(v)}


def _ledger_totals(args, entries: list[dict]) -> int:
    totals = ledger_totals(entries)
    if args.json:
        _print_json(totals)
        return 0
    comps = sorted({c for t in totals for c in t["max_cost_sum"]})
    rows = [[t["query"], t["kind"] or "", t["releases"], f"{t['first_seq']}–{t['last_seq']}",
             *[_num(t["max_cost_sum"].get(c, 0.0)) for c in comps], t["user_windows_charged"],
             t.get("items_returned", ""), t.get("pwyg_used", "")] for t in totals]
    print(_table(["query", "kind", "releases", "windows", *[f"Σ max {c}" for c in comps], "user-windows charged",
                  "items returned", "pwyg used"], rows))
    print("(Σ max: the sum over releases of the largest charge of any one user — a bound on any user's total for "
          "the query)")
    return 0


def _new_budget(current: np.ndarray, args) -> tuple[np.ndarray, list[int]]:
    """(``current`` with the notion's ρ (α) and, if given, δ set; the indices set). The store applies only those
    indices, to the values it holds at that moment (a concurrent change of another notion is not undone)."""
    k = NOTIONS.index(args.notion)
    b = np.array(current, dtype=np.int64).copy()
    try:
        b[2 * k] = budget_to_fixed(args.rho, SCALES[2 * k])
        if args.delta is not None:
            b[2 * k + 1] = budget_to_fixed(args.delta, SCALES[2 * k + 1])
    except ValueError as e:
        raise CLIError(f"invalid budget: {e}") from None
    return b, [2 * k] + ([2 * k + 1] if args.delta is not None else [])


def _require_yes(args, what: str) -> None:
    if not args.yes:
        raise CLIError(f"{what} changes privacy budgets; re-run with --yes to confirm")


def _actor(args) -> str:
    if args.actor:
        return args.actor
    try:
        return getpass.getuser()
    except Exception:  # pragma: no cover - no login name
        return "operator"


def _save(st: BudgetStore) -> None:
    save = getattr(st, "save", None)
    if save is not None:
        try:
            save()
        except OSError as e:
            raise CLIError(f"cannot write budget store file: {e}", code=1) from None


def _below_spend(spent: np.ndarray, budget: np.ndarray, comps: list[int]) -> list[int]:
    """The components among ``comps`` where ``budget`` is below ``spent``."""
    return [i for i in comps if int(budget[i]) < int(spent[i])]


def _component_text(i: int) -> str:
    notion = NOTIONS[i // 2]
    what = "δ" if i % 2 else ("α" if notion == "emd" else "ρ")
    return f"{notion} {what}"


@_run
def _grant(args, st: BudgetStore) -> int:
    _require_yes(args, "grant")
    rec = st.get_user(args.user)
    current = st.default_budget() if rec is None else rec.budget
    b, comps = _new_budget(current, args)
    if rec is not None and not rec.halted and not args.force:
        below = _below_spend(rec.spent, b, comps)
        if below:
            what = "; ".join(f"{_component_text(i)} spent {exact_decimal(rec.spent[i], SCALES[i])} > new budget "
                             f"{_exact_budget(b[i], SCALES[i])}" for i in below)
            raise CLIError(f"refused: {printable(args.user)} has already spent more than this budget ({what}): their "
                           "next charged window would halt them for good — a halt is permanent, no later grant "
                           "resumes them. Nothing was changed; re-run with --force to lower the budget anyway")
    st.grant(args.user, b, actor=_actor(args), reason=args.reason, components=comps)
    _save(st)
    rec = st.get_user(args.user)
    if args.json:
        _print_json(user_json(rec))
    else:
        d = _notion_json(rec.spent, rec.budget, NOTIONS.index(args.notion))
        print(f"granted {printable(args.user)}: {args.notion} budget {_num(d['budget'])}, δ budget "
              f"{_num(d['delta_budget'])}{' (user is HALTED: a grant does not resume it)' if rec.halted else ''}"
              f" — store {_store_name(st)}")
    return 0


def _refuse_kept_zero_delta(args, current: np.ndarray) -> None:
    """``set-default --rho R`` without ``--delta`` keeps the current δ; where that δ is 0 (a new store, a Redis
    store with no default yet) the default became ρ > 0 with δ = 0, the store's default then overrode [budget], and
    every user of a query that charges δ (zcdp: continual counts, top-k) was halted for good at their first window
    (review 12 F4). Such a δ must be given explicitly (``--delta 0`` where this notion's queries charge no δ)."""
    if args.delta is not None or args.rho == 0 or args.notion == "cgp":  # no cgp kind charges δ (closing review)
        return
    k = NOTIONS.index(args.notion)
    if int(current[2 * k + 1]) == 0:
        raise CLIError(f"set-default --rho without --delta would leave the default {args.notion} δ budget at 0 (the "
                       f"store's current one): every user of a query charging δ in {args.notion} would be halted for "
                       "good at their first window; give --delta D (e.g. --delta 1e-5), or --delta 0 if no query "
                       f"charges δ in {args.notion}")


def _users_following_the_default(st: BudgetStore, lost: bool) -> Iterable[UserBudget]:
    """Every user without an override (those a new default applies to)."""
    users = st.iter_users(default=np.zeros(len(SCALES), dtype=np.int64)) if lost else st.iter_users()
    return (r for r in users if not r.extra.get("override", False))


@_run
def _set_default(args, st: BudgetStore) -> int:
    _require_yes(args, "set-default")
    lost = False
    try:
        current = st.default_budget()
    except DefaultBudgetMissing:  # restoring a lost default: the notions not given become 0 (said below)
        current, lost = np.zeros(len(SCALES), dtype=np.int64), True
    _refuse_kept_zero_delta(args, current)
    b, comps = _new_budget(current, args)
    if not args.force:
        hit = [r for r in _users_following_the_default(st, lost)
               if not r.halted and _below_spend(r.spent, b, comps)]
        if hit:
            names = ", ".join(printable(r.user) for r in sorted(hit, key=lambda r: r.user)[:5])
            more = f" and {len(hit) - 5} more" if len(hit) > 5 else ""
            comp = "/".join(_component_text(i) for i in comps)
            raise CLIError(f"refused: {len(hit)} user{'s' if len(hit) != 1 else ''} following the default "
                           f"({names}{more}) {'have' if len(hit) != 1 else 'has'} already spent more than the new "
                           f"default {comp}: they would be halted for good at their next charged window — a halt is "
                           "permanent, no later grant resumes them. Nothing was changed; re-run with --force to "
                           "lower the default anyway (or grant those users their own budget first)")
    st.set_default_budget(b, actor=_actor(args), reason=args.reason, components=comps)
    _save(st)
    b = st.default_budget()
    if args.json:
        _print_json(_default_json(st.default_budget()))
    else:
        d = _notion_json(None, b, NOTIONS.index(args.notion))
        print(f"default {args.notion} budget {_num(d['budget'])}, δ budget {_num(d['delta_budget'])} "
              f"(users with a per-user grant keep theirs) — store {_store_name(st)}")
        if lost:
            print("the store had lost its default budget: the other notions' defaults are now 0 — set each notion in "
                  "use (`streamdp budget ledger` shows the last values)")
    return 0


def _exact_user_json(rec: UserBudget) -> str:
    """:func:`user_json` as one line of JSON whose numbers are the exact decimals of the fixed-point amounts (an
    unlimited budget: null)."""
    parts = [f'"user":{json.dumps(rec.user)}', f'"halted":{"true" if rec.halted else "false"}']
    for k, notion in enumerate(NOTIONS):
        if not _in_use(rec.spent, rec.budget, k):
            continue
        i, j = 2 * k, 2 * k + 1
        b, db = _exact_budget(rec.budget[i], SCALES[i]), _exact_budget(rec.budget[j], SCALES[j])
        parts.append(f'"{notion}":{{"spent":{exact_decimal(rec.spent[i], SCALES[i])},'
                     f'"budget":{"null" if b == "inf" else b},'
                     f'"delta_spent":{exact_decimal(rec.spent[j], SCALES[j])},'
                     f'"delta_budget":{"null" if db == "inf" else db}}}')
    return "{" + ",".join(parts) + "}"


@_run
def _export(args, st: BudgetStore) -> int:
    fmt = "jsonl" if args.json else args.format
    recs = sorted(st.iter_users(), key=lambda r: r.user)
    out = sys.stdout
    if fmt == "jsonl":
        for r in recs:
            out.write(_exact_user_json(r) + "\n")
        return 0
    # every cell quoted: a user id holding a carriage return is one cell (the csv module quotes only the line
    # terminator's own characters), and OWASP's advice against formula injection (with csv_cell)
    w = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_ALL)
    cols = ["user", "halted"]
    for n in NOTIONS:
        cols += [f"{n}_spent", f"{n}_budget", f"{n}_delta_spent", f"{n}_delta_budget"]
    w.writerow(cols)
    for r in recs:
        row = [csv_cell(r.user), "true" if r.halted else "false"]
        for k in range(len(NOTIONS)):
            i, j = 2 * k, 2 * k + 1
            row += [exact_decimal(r.spent[i], SCALES[i]), _exact_budget(r.budget[i], SCALES[i]),
                    exact_decimal(r.spent[j], SCALES[j]), _exact_budget(r.budget[j], SCALES[j])]
        w.writerow(row)
    return 0


# ------------------------------------------------------------------------------------------------- argparse
#: a decimal number as an operator writes it: no ``_`` separators (``float("1_000")`` is 1000), no ``nan``, no hex
_DECIMAL = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
#: the only spellings of an unlimited value: ``inf`` / ``infinity`` in any case, with an optional ``+``
_INFINITY = re.compile(r"\+?(?:inf|infinity)", re.IGNORECASE)


class _TooLarge(argparse.ArgumentTypeError):
    """A finite number written out that a float cannot hold (``1e400``, ``1e309``): ``float()`` makes it ``inf``,
    which is *unlimited* to a budget — refused, never taken for ``inf``."""


def _nonneg_real(text: str) -> float:
    """A number ≥ 0 in decimal notation, or ``inf``/``infinity`` (any case, optional ``+``) for unlimited. Anything
    ``float()`` would also take — ``1_000``, ``nan``, ``infinity`` with a sign ``-`` — is refused; so is a finite
    number too large for a float (``1e400``): it is not ``inf`` (:class:`_TooLarge`)."""
    t = text.strip()
    if _INFINITY.fullmatch(t):
        return math.inf
    if not _DECIMAL.fullmatch(t):
        raise argparse.ArgumentTypeError(f"expected a number ≥ 0 in decimal notation (or inf), got {text!r}")
    v = float(t)
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected a number ≥ 0 (or inf), got {text!r}")
    if math.isinf(v):
        raise _TooLarge(f"{text!r} is a finite number too large to hold (it is not inf)")
    if v == 0 and re.search(r"[1-9]", re.split(r"[eE]", t)[0]):  # 1e-400: a non-zero number that underflows to 0
        raise argparse.ArgumentTypeError(f"{text!r} is a non-zero number too small to hold (it would be 0: no budget)")
    return v


def _user_id(text: str) -> str:
    """A user id that an event can carry: the event parser's rule (``streamdp/input/events.py``: 1..MAX_USER_LEN
    characters of valid UTF-8; any other user is dead-lettered as ``bad_user``), so ``grant`` never creates a budget
    for a user no event can name."""
    if not text or len(text) > MAX_USER_LEN:
        got = repr(text) if len(text) <= 40 else f"{text[:20]!r}… ({len(text)} characters)"
        raise argparse.ArgumentTypeError(f"a user id must have 1..{MAX_USER_LEN} characters (events with any other "
                                         f"user are dead-lettered as bad_user), got {got}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # bytes that are not UTF-8 in argv arrive as lone surrogates
        raise argparse.ArgumentTypeError(f"a user id must be valid UTF-8 (as in events), got {text!r}") from None
    return text


def _conversion_delta(text: str) -> float:
    v = _nonneg_real(text)
    if not 0.0 < v < 1.0:
        raise argparse.ArgumentTypeError(f"δ′ must lie in (0, 1), got {text!r}")
    return v


def _positive_real(text: str) -> float:
    v = _nonneg_real(text)
    if not (v > 0 and math.isfinite(v)):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text!r}")
    return v


def _budget_number(text: str, scale: int, what: str) -> float:
    """``text`` as a budget at ``scale``: literally ``inf`` (unlimited), or a finite number ≥ 0 that the fixed-point
    grid holds. A finite number written past the range — ``1e7``, and ``1e400`` too, which ``float()`` turns into
    ``inf`` — is refused with the maximum (it would become the unlimited sentinel); so is a non-zero number that
    rounds down to 0 on the grid (it would be "no budget", not the tiny budget asked for)."""
    too_large = argparse.ArgumentTypeError(f"a finite budget must be < {max_budget_text(scale)} (the fixed-point "
                                           f"range of budgets), got {text!r}; use inf for an unlimited budget")
    try:
        v = _nonneg_real(text)
    except _TooLarge:
        raise too_large from None
    try:
        v = check_budget_range(v, scale, what)
    except ValueError:
        raise too_large from None
    if v > 0 and budget_to_fixed(v, scale) == 0:
        raise argparse.ArgumentTypeError(
            f"{what} {text!r} rounds down to 0 (no budget) in the fixed-point ledger, whose smallest non-zero {what} "
            f"is {1 / scale:g}; give 0 for no budget or at least {1 / scale:g}")
    return v


def _rho_budget(text: str) -> float:
    """A ρ (or α) budget: a number ≥ 0 below the fixed-point range (INT64_MAX/10¹² ≈ 9.22e6), or inf (unlimited).
    A finite value past the range would become the unlimited sentinel: refused."""
    return _budget_number(text, LOSS_SCALE, "ρ (α) budget")


def _delta_budget(text: str) -> float:
    """A δ budget: in [0, 1), or inf (unlimited). A finite δ of 1 or more guarantees nothing."""
    try:
        v = _nonneg_real(text)
    except _TooLarge:
        v = 1.0  # a finite number (not inf), and ≥ 1: refused below
    if 1.0 <= v < math.inf:
        raise argparse.ArgumentTypeError(f"a finite δ budget must be < 1 (or inf for unlimited), got {text!r}")
    return _budget_number(text, DELTA_SCALE, "δ budget")


def _take_negative_durations(p: argparse.ArgumentParser) -> None:
    """``--since -1d`` was "expected one argument": argparse takes an argument that starts with ``-`` for an option
    unless it looks like a negative number. This parser has no option that looks like one, so a negative duration
    is let through as a value too (argparse's own hook; Python ≥ 3.13 takes ``-1d`` already). Should the hook be
    gone, the error names the way that always works: ``--since=-1d``."""
    matcher = getattr(p, "_negative_number_matcher", None)
    if matcher is not None and hasattr(matcher, "pattern"):
        p._negative_number_matcher = re.compile(f"(?:{matcher.pattern})|^-\\d+(?:\\.\\d+)?[smhd]$")
    error = p.error

    def hinted(message: str):  # noqa: ANN202 — argparse's signature
        if "--since" in message and "expected one argument" in message:
            message += " (a duration ago is written 2h or -2h; or --since=VALUE)"
        error(message)

    p.error = hinted  # type: ignore[method-assign]


def _one_line_errors(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    def error(message: str):  # noqa: ANN202 — argparse's signature
        p.exit(2, f"{p.prog}: error: {message}\n")

    p.error = error  # type: ignore[method-assign]
    return p


def register(subparsers) -> None:
    p = _one_line_errors(subparsers.add_parser(
        "budget", help="inspect and manage per-user privacy budgets",
        description=plain_help(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter))
    sub = p.add_subparsers(dest="budget_command", metavar="ACTION")
    sub.required = True

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--store", metavar="URL", help="redis://…, rediss://…, unix://…, redis+cluster://… or an "
                                                       "embedded store file (default: $STREAMDP_STORE)")
    common.add_argument("--json", action="store_true", help="machine-readable output")
    notion = argparse.ArgumentParser(add_help=False)
    notion.add_argument("--notion", choices=NOTIONS, default=None, help="restrict to one accounting notion")

    def add(name, func, help_, parents=(), writes=False):
        q = _one_line_errors(sub.add_parser(name, parents=[common, *parents], help=help_, description=help_))
        q.set_defaults(func=func, writes=writes)
        return q

    q = add("show", _show, "one user's spend, budget and status")
    q.add_argument("user")
    q.add_argument("--delta-prime", type=_conversion_delta, default=DEFAULT_DELTA_PRIME, metavar="D",
                   help="δ′ of the (ε, δ + δ′) conversions (default %(default)g)")
    q.add_argument("--gp-within-km", type=_positive_real, default=DEFAULT_GP_WITHIN_KM, metavar="KM",
                   help="cgp shown as ε per km for locations at most KM apart (default %(default)g)")
    q = add("list", _list, "users by used budget fraction (highest first)", [notion])
    q.add_argument("--exhausted", action="store_true", help="only halted users and users with nothing left")
    q.add_argument("--top", type=positive_int, metavar="N", help="only the N most-used users")
    add("stats", _stats, "active/halted counts and a histogram of the remaining budget fraction", [notion])
    q = add("ledger", _ledger, "release and audit entries")
    q.add_argument("--totals", action="store_true",
                   help="running totals per query instead of the entries (releases, Σ of per-release max costs, "
                        "user-windows charged, items returned, the PWYG counter)")
    q.add_argument("--query", metavar="Q", help="only entries of this query")
    q.add_argument("--since", metavar="T", type=_parse_since,
                   help="only entries at or after T (epoch seconds, ISO-8601, or a duration ago such as 2h or -2h)")
    _take_negative_durations(q)
    for name, func, help_ in (("grant", _grant, "set one user's budget in one notion (administrative; the user's other notions "
                                        "stop following the default)"),
                              ("set-default", _set_default, "set the default budget in one notion (administrative)")):
        q = add(name, func, help_, writes=True)
        if name == "grant":
            q.add_argument("user", type=_user_id, help=f"user id, 1..{MAX_USER_LEN} characters (as in events)")
        q.add_argument("--rho", type=_rho_budget, required=True, metavar="R",
                       help=f"ρ budget (α for emd), a decimal number: 0 or from 1e-12 to below "
                            f"{max_budget_text(LOSS_SCALE)}; inf for unlimited")
        q.add_argument("--delta", type=_delta_budget, metavar="D",
                       help="δ budget < 1, or inf (default: unchanged"
                            + ("" if name == "grant" else "; required while the current default δ is 0") + ")")
        q.add_argument("--notion", choices=NOTIONS, default="zcdp", help="accounting notion (default zcdp)")
        q.add_argument("--yes", action="store_true", help="confirm the change")
        q.add_argument("--force", action="store_true",
                       help="apply a budget below what the user has spent (halts them at their next charged window)"
                       if name == "grant" else "apply a default below what users following it have spent (halts "
                       "them at their next charged window)")
        q.add_argument("--create", action="store_true",
                       help="with a --store FILE that does not exist: create it (a new store, default budget 0); "
                            "without it a missing file is refused")
        q.add_argument("--reason", default="", help="recorded in the audit entry")
        q.add_argument("--actor", default=None, help="recorded in the audit entry (default: login name)")
    q = add("export", _export, "every user, as CSV (default) or JSON lines")
    q.add_argument("--format", choices=("csv", "jsonl"), default="csv")
