"""Embedded ingest: events/s per core from JSON bytes to releases (docs/contract.md §7, target ≥ 500k/s).

Workload: N synthetic events as JSON bytes (default 10⁶): 10⁵ users (uniform), items Zipf(1.1) over 10⁵ keys, 1–3
items per event, a ``value`` on every event and a ``loc`` on 30% of them, 20k events per 10 s window (50 windows for
10⁶ events, inside one L = 64 epoch); ``--bad-rate`` replaces a fraction of the payloads with malformed ones. The
whole :class:`EmbeddedPipeline` runs — parse → engine ingest → window close (bounding, one atomic admit in the
in-memory filter, the unknown-domain tree, pay-what-you-get top-k) → release records into a ``ListSink`` — with the
secure noise generator, in batches of ``--batch`` payloads.

Reported per repeat (and the median of ``--repeats``): events/s of wall time and events per CPU-second of the
process (``time.process_time`` counts every thread, so it is the per-core figure even when other jobs share the
machine), the 1-minute load average, and the stage breakdown in CPU ns per event: parse = ``parse_batch``; intern =
``Names`` lookups (at each window's close since 2026-12-07, inside ingest before); ingest = the rest of
``ReleaseEngine.ingest`` (judging each event, holding it for its window); close = window closes, records and
sinks, but for intern and digest = the closes' replay digests (:mod:`streamdp.engine.replay_digest`). Path ``default`` is
``parse_batch`` as shipped (the Arrow fast path where available); ``exact`` is the same pipeline with
``parse_batch(fast=False)`` (msgspec only). Baselines in the same run, on the same clean batches: just decoding —
msgspec with the typed schema (one joined decode per batch), untyped ``msgspec.json.decode`` per payload, and
Arrow's JSON reader alone (the floor of the fast path).

    .venv/bin/python benchmarks/bench_ingest.py [--events 1000000] [--batch 20000] [--repeats 3] [--bad-rate 0.001]

Run against a tree without ``streamdp.input.arrow_decode`` (PYTHONPATH) it measures that tree's parser only.
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import statistics
import time

import msgspec
import numpy as np
import orjson

import streamdp.engine.engine as engine_mod
import streamdp.engine.pipeline as pipeline_mod
from streamdp.accounting.cost import Cost, budget_vector
from streamdp.engine.engine import EngineConfig, ReleaseEngine
from streamdp.engine.pipeline import EmbeddedPipeline
from streamdp.engine.queries.continual_counts import ContinualCounts
from streamdp.engine.queries.top_k import TopK
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.input import events as events_mod
from streamdp.noise.generator import synthetic_data_generator
from streamdp.outputs.sinks import ListSink

try:
    from streamdp.input import arrow_decode
except ImportError:  # a tree without the fast path (to measure the "before" in the same session)
    arrow_decode = None

T0 = 1_700_000_000.0
WINDOW = 10.0
PER_WINDOW = 20_000


def make_payloads(n: int, seed: int = 1, n_users: int = 100_000, n_keys: int = 100_000) -> list[bytes]:
    rng = synthetic_data_generator(seed)
    p = 1.0 / np.arange(1, n_keys + 1) ** 1.1
    p /= p.sum()
    n_items = rng.integers(1, 4, size=n)
    items = rng.choice(n_keys, size=int(n_items.sum()), p=p).tolist()
    users = rng.integers(0, n_users, size=n).tolist()
    ts = (T0 + np.arange(n) * (WINDOW / PER_WINDOW) + rng.random(n) * 0.01).tolist()
    value = np.round(rng.normal(50.0, 10.0, size=n), 3).tolist()
    has_loc = (rng.random(n) < 0.3).tolist()
    lat = np.round(rng.uniform(-90, 90, n), 5).tolist()
    lon = np.round(rng.uniform(-180, 180, n), 5).tolist()
    offs = np.concatenate([[0], np.cumsum(n_items)]).tolist()
    out = []
    for i in range(n):
        d = {"user": f"user{users[i]}", "ts": ts[i], "items": [f"sku-{k}" for k in items[offs[i]:offs[i + 1]]],
             "value": value[i]}
        if has_loc[i]:
            d["loc"] = [lat[i], lon[i]]
        out.append(orjson.dumps(d))
    return out


BAD = [b'{"user": "u1", "ts": 1700000000,}', b'{"user": "u1", "ts": "yesterday"}', b'{"ts": 1700000000}',
       b'{"user": "u1", "ts": 1700000000, "value": NaN}', b"\xff\xfe{}", b"not json"]


def dirty(payloads: list[bytes], rate: float, seed: int = 2) -> tuple[list[bytes], int]:
    """Replace a fraction ``rate`` of the payloads with malformed ones (dead letters with reasons)."""
    if rate <= 0:
        return payloads, 0
    rng = synthetic_data_generator(seed)
    at = np.flatnonzero(rng.random(len(payloads)) < rate)
    out = list(payloads)
    for k, i in enumerate(at.tolist()):
        out[i] = BAD[k % len(BAD)]
    return out, int(at.size)


def batches(payloads: list[bytes], size: int) -> list[list[bytes]]:
    return [payloads[i:i + size] for i in range(0, len(payloads), size)]


class Clock:
    """Accumulates CPU seconds of this thread per stage (``time.thread_time``: other jobs on the machine do not
    inflate it; the pipeline is single-threaded — Arrow is called with ``use_threads=False``)."""

    def __init__(self) -> None:
        self.t: dict[str, float] = {"parse": 0.0, "intern": 0.0, "ingest": 0.0, "close": 0.0, "digest": 0.0}

    def wrap(self, stage: str, fn, inner: tuple = ()):
        """``fn`` timed as ``stage``, less the time of the ``inner`` stages timed inside it."""
        def timed(*a, **kw):
            t0 = time.thread_time()
            before = sum(self.t[s] for s in inner)
            try:
                return fn(*a, **kw)
            finally:
                dt = time.thread_time() - t0
                self.t[stage] += dt - (sum(self.t[s] for s in inner) - before)
        return timed


def build_engine() -> ReleaseEngine:
    horizon = 64
    queries = [
        ContinualCounts("counts", sigma=5.0, horizon=horizon, delta_item=1e-9, max_items_per_window=4,
                        max_per_item=1),
        TopK("top", epsilon=1.0, delta=1e-9, k=10, kbar=20, k_star=10**6),
    ]
    store = MemoryBudgetStore(budget_vector(Cost.zcdp(1e4, 1.0)))
    # the payloads' times carry 10 ms of jitter, so events near a window's end arrive out of order: lateness is
    # judged per event (since 2026-12-07), and 1 s of allowed lateness keeps them all
    conf = EngineConfig(window_seconds=WINDOW, horizon=horizon, origin=T0, allowed_lateness=1.0)
    return ReleaseEngine(conf, queries, store)


def run_pipeline(bs: list[list[bytes]], fast: bool = True, n_bad: int = 0) -> dict:
    engine = build_engine()
    clock = Clock()
    sink = ListSink()
    pipe = EmbeddedPipeline(engine, [sink])
    for names in (engine.users, engine.items):
        for meth in ("ids", "ids_coded"):
            if hasattr(names, meth):
                setattr(names, meth, clock.wrap("intern", getattr(names, meth)))
    # names are interned when their window closes (since 2026-12-07; before, in ingest)
    engine.ingest = clock.wrap("ingest", engine.ingest, inner=("intern",))
    engine.close_due = clock.wrap("close", engine.close_due, inner=("digest", "intern"))
    engine.flush = clock.wrap("close", engine.flush, inner=("digest", "intern"))
    orig_digest = getattr(engine_mod, "window_digest", None)  # a tree from before replay digests has none
    if orig_digest is not None:
        engine_mod.window_digest = clock.wrap("digest", orig_digest)
    orig_parse = pipeline_mod.parse_batch
    pipeline_mod.parse_batch = clock.wrap("parse", orig_parse if fast else functools.partial(orig_parse, fast=False))
    try:
        gc.collect()
        w0, c0 = time.perf_counter(), time.process_time()
        pipe.run(bs)
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    finally:
        pipeline_mod.parse_batch = orig_parse
        if orig_digest is not None:
            engine_mod.window_digest = orig_digest
    n = sum(map(len, bs))
    assert engine.counters.events_in == n - n_bad and pipe.dead_letters == n_bad, "unexpected dead letters"
    return {"wall": wall, "cpu": cpu, "n": n, "load": os.getloadavg()[0], "records": len(sink.records),
            "windows": engine.counters.windows_closed, **clock.t}


def msgspec_baseline(bs: list[list[bytes]]) -> dict:
    typed = msgspec.json.Decoder(list[events_mod._Event])
    out = {}
    with pipeline_mod.gc_paused():
        w0, c0 = time.perf_counter(), time.process_time()
        for b in bs:
            typed.decode(b"[" + b",".join(b) + b"]")
        out["typed_wall"], out["typed_cpu"] = time.perf_counter() - w0, time.process_time() - c0
        dec = msgspec.json.decode
        w0, c0 = time.perf_counter(), time.process_time()
        for b in bs:
            for p in b:
                dec(p)
        out["untyped_wall"], out["untyped_cpu"] = time.perf_counter() - w0, time.process_time() - c0
    if arrow_decode is not None and arrow_decode.AVAILABLE:  # Arrow's reader alone (the floor of the fast path)
        w0, c0 = time.perf_counter(), time.process_time()
        for b in bs:
            j = b"\n".join(b)
            arrow_decode._read(arrow_decode.pa.py_buffer(j), 0, len(j), 0)
        out["arrow_wall"], out["arrow_cpu"] = time.perf_counter() - w0, time.process_time() - c0
    out["load"] = os.getloadavg()[0]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=20_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-exact", action="store_true", help="skip the exact-path (msgspec) pipeline run")
    ap.add_argument("--bad-rate", type=float, default=0.0, help="fraction of payloads replaced by malformed ones")
    args = ap.parse_args()
    t = time.perf_counter()
    clean = make_payloads(args.events)
    payloads, n_bad = dirty(clean, args.bad_rate)
    clean_bs = batches(clean, args.batch)
    bs = batches(payloads, args.batch)
    mb = sum(map(len, payloads)) / 1e6
    aff = sorted(os.sched_getaffinity(0))
    print(f"# {args.events} events ({mb:.1f} MB JSON, {mb * 1e6 / args.events:.0f} B/event), batches of "
          f"{args.batch}, {n_bad} malformed; built in {time.perf_counter() - t:.1f} s; cpus allowed {aff} of "
          f"{os.cpu_count()}")
    fast_ok = arrow_decode is not None and arrow_decode.AVAILABLE
    args.no_exact |= not fast_ok
    print(f"# parse path: {'pyarrow ' + arrow_decode.VERSION + ' JSON reader' if fast_ok else 'msgspec only'}"
          f"{'' if args.no_exact else '; exact = the same pipeline with parse_batch(fast=False) (msgspec path)'}")
    stages = ("parse", "intern", "ingest", "close", "digest", "other")
    print(f"{'run':>4} {'path':>6} {'load1':>6} {'ev/s wall':>11} {'ev/CPU-s':>11} "
          + " ".join(f"{k:>7}" for k in stages))
    rows: dict[str, list[dict]] = {}
    base_rows = []
    for r in range(args.repeats):
        base = msgspec_baseline(clean_bs)  # decoders alone, on the clean payloads
        n = len(payloads)
        base_rows.append({k: n / v for k, v in base.items() if k.endswith("_cpu")} | {"load": base["load"]})
        for path in ("default",) + (() if args.no_exact else ("exact",)):
            res = run_pipeline(bs, fast=path == "default", n_bad=n_bad)
            row = {"load": res["load"], "wall_rate": n / res["wall"], "cpu_rate": n / res["cpu"],
                   **{k: res[k] / n * 1e9 for k in stages[:-1]},
                   "other": (res["cpu"] - sum(res[k] for k in stages[:-1])) / n * 1e9}
            rows.setdefault(path, []).append(row)
            _print_row(str(r + 1), path, row, stages)
    for path, rs in rows.items():
        _print_row("med", path, {k: statistics.median(x[k] for x in rs) for k in rs[0]}, stages)
    print("# stage columns: CPU ns per event; close = window closes but for digest = their replay digests "
          "(engine/replay_digest.py); 'other' = the rest of the run's CPU (pipeline loop, sinks, GC)")
    print(f"# {res['windows']} windows closed, {res['records']} release records per run")
    print("# decode-only baselines on the same (clean) batches (events per CPU-second; median of the repeats):")
    for k, label in (("typed_cpu", "msgspec, typed schema, one joined decode per batch"),
                     ("untyped_cpu", "msgspec.json.decode per payload (untyped)"),
                     ("arrow_cpu", "pyarrow JSON reader alone, explicit schema, one call per batch")):
        if k in base_rows[0]:
            print(f"#   {label:64s} {statistics.median(x[k] for x in base_rows):>12,.0f}  "
                  f"(load1 {statistics.median(x['load'] for x in base_rows):.2f})")


def _print_row(run: str, path: str, row: dict, stages: tuple) -> None:
    print(f"{run:>4} {path:>6} {row['load']:6.2f} {row['wall_rate']:11,.0f} {row['cpu_rate']:11,.0f} "
          + " ".join(f"{row[k]:7.0f}" for k in stages))


if __name__ == "__main__":
    main()
