"""DP-SQLP's synthetic benchmark (Zhang et al., "Differentially Private Stream Processing at Scale", VLDB 2024, §5.1),
as confidential-storm's ``UtilityBenchmarkTest`` runs it, side by side with streamdp's ``continual_sums`` and
``continual_counts``; and a repeat-heavy workload where users hit the same keys many times.

Workload "dpsqlp" (exactly storm's): U = 10⁷ users; user u has min(X_u, 32) records, X_u ~ Zipf–Mandelbrot(N = 10⁵,
q = 26, s = 6.738); each record's key ~ Zipf–Mandelbrot(N = 10⁶, q = 1000, s = 1.4), p(k) ∝ (k + q)^−s; each record in a
uniformly random tick of T. Value 1 per record. Metrics at the last tick against the histogram of ALL records, over
the union of released and true keys (a key missing on either side counts 0): keys released (l0), L∞, L1, L2.
Privacy: (ε, δ) = (6, 10⁻⁹) per user, through the real filter (``MemoryBudgetStore``): every user's budget is
(ρ_B, δ_B) with ε_CKS(ρ_B, δ_conv) ≤ ε and δ_B + δ_conv ≤ δ. (storm splits ε 3/3 and δ 2/3 / 1/3 between key
selection — a distinct-user tree per key, threshold μ + τ_t — and the histogram trees, whose σ it calibrates to the
ℓ1 sensitivity C; streamdp's ``continual_sums`` selects on the same noisy counts it releases, so it needs no split.)

Calibration of ``continual_sums`` (docs/query_continual_sums.md): δ_B = C·δ_key (one δ_key per key first touched),
δ_conv = δ − δ_B; with m = ``--m`` records per (user, key) the most a user can be charged over the epoch is
m·C·G_max/(2σ²), so σ = √(m·C·G_max/(2ρ_B)) admits every user (nobody is halted). ``continual_counts`` as the issue
measured it: K = C first contributions per user, ρ_item = levels/(2σ²), σ = √(levels·K/(2ρ_B)), δ_item = δ_B/K.

Workload "repeat": 10⁵ users with Poisson(20) records each over 10⁵ Zipf(1.1) keys, 100 ticks, C = 32 and m = C
(no per-key cap, the threshold's offset is C): users who repeat keys pay their cross terms (a user's ΔᵀGΔ is at
most G_max·Σ_k n_k², n_k their records on key k), and σ is calibrated to a budget of Σ_k n_k² ≤ 4·C = 128 (measured
on this workload: median 28, 99.9th percentile 103, max 216), so only the heaviest repeaters are halted, once their
own charges exceed it. Reported over the released keys: L2 against the raw histogram and the noise-only L2
(released minus the admitted, bounded counts); the target is a ratio ≤ 2.

Times per run: "mechanism" — the query fed (user, key) arrays in memory, as storm's benchmark feeds its mechanism,
per window prepare (bounds, charges) → the filter's admission → release (noise, selection, the record's values) →
the record's bytes into the release log; "json" — the whole embedded pipeline from JSON event bytes (parse,
intern, windows, the engine, the release log). Data generation is never timed. Each run is a subprocess (its peak
RSS is the run's memory).

    python benchmarks/bench_dp_sqlp.py [--workload dpsqlp|repeat] [--users 10000000] [--ticks 100] [--seeds 3]
        [--modes mechanism,json] [--kinds continual_sums,continual_counts] [--noises blt,tree,tree_optimal]
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import multiprocessing as mp
import os
import resource
import sys
import time
import warnings

import numpy as np

STORM = {100: dict(keys=32146, linf=1093.8, l1=1.689e7, l2=44538, seconds=698),
         1000: dict(keys=24407, linf=1610.8, l1=1.968e7, l2=59033, seconds=29716)}


# --------------------------------------------------------------------------------------------------- workloads
def _zm_cdf(N: int, q: float, s: float) -> np.ndarray:
    k = np.arange(1, N + 1, dtype=np.float64)
    c = np.cumsum((k + q) ** -s)
    return c / c[-1]


def _sample(g, cdf: np.ndarray, n: int, chunk: int = 1 << 23) -> np.ndarray:
    """Ranks 1..N by inverse transform (in chunks: bounded temporaries)."""
    out = np.empty(n, dtype=np.int32)
    for a in range(0, n, chunk):
        b = min(n, a + chunk)
        out[a:b] = np.searchsorted(cdf, g.random(b - a)) + 1
    return out


def workload(kind: str, users: int, ticks: int, seed: int, C: int = 32):
    """(user, key, tick-bounds): records grouped by tick (user order within a tick), keys as ranks ≥ 1."""
    from streamdp.noise.generator import synthetic_data_generator

    g = synthetic_data_generator(seed)
    if kind == "dpsqlp":
        per = np.minimum(_sample(g, _zm_cdf(10 ** 5, 26.0, 6.738), users), C)
        key_cdf = _zm_cdf(10 ** 6, 1000.0, 1.4)
    else:
        per = g.poisson(20.0, users).astype(np.int32)
        k = np.arange(1, 10 ** 5 + 1, dtype=np.float64)
        key_cdf = np.cumsum(k ** -1.1)
        key_cdf /= key_cdf[-1]
    n = int(per.sum())
    user = np.repeat(np.arange(users, dtype=np.int32), per)
    key = _sample(g, key_cdf, n)
    tick = g.integers(0, ticks, n).astype(np.int16)
    o = np.argsort(tick, kind="stable")
    user, key, tick = user[o], key[o], tick[o]
    del o
    bounds = np.searchsorted(tick, np.arange(ticks + 1))
    return user, key, bounds


# ------------------------------------------------------------------------------------------------- calibration
def rho_for_epsilon(eps: float, delta: float) -> float:
    from streamdp.accounting.zcdp import cks_epsilon

    lo, hi = 1e-8, eps
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if cks_epsilon(mid, delta) <= eps:
            lo = mid
        else:
            hi = mid
    return lo


def calibrate(a, kind: str, noise: str) -> dict:
    """The query's parameters and the users' budget for (ε, δ) user level."""
    from streamdp.mechanisms.binary_tree import levels_for_horizon
    from streamdp.mechanisms.continual_sums import make_noise

    d_sel = a.delta * a.select_share
    d_conv = a.delta - d_sel
    rho_b = rho_for_epsilon(a.epsilon, d_conv)
    L, C = a.ticks, a.C
    if kind == "continual_counts":
        levels = levels_for_horizon(L)
        sigma = math.sqrt(levels * C / (2 * rho_b)) * (1 + 1e-9)
        params = dict(sigma=sigma, delta_item=d_sel / C, max_items_per_window=C, max_per_item=1)
        return dict(params=params, rho_b=rho_b, delta_b=d_sel, d_conv=d_conv, sigma=sigma)
    est = "optimal" if noise == "tree_optimal" else "plain"
    base = "tree" if noise.startswith("tree") else "blt"
    gmax = make_noise(base, L, 1.0, est).gram_max()
    units = a.budget_units if a.budget_units else (4 * C if a.workload == "repeat" else a.m * C)
    # the budget covers ΔᵀGΔ ≤ units·G_max/(2σ²) ≤ ρ_B (dpsqlp: the epoch bound m·C·G_max, nobody halted), with
    # room for the per-window rounding up (≤ 10⁻¹² per window)
    sigma = math.sqrt(units * gmax / (2 * (rho_b - L * 2e-12)))
    m = C if a.workload == "repeat" else a.m
    params = dict(sigma=sigma, delta_key=d_sel / C, max_contributions=C, max_per_key=m, noise=base)
    if base == "tree":
        params["estimator"] = est
    return dict(params=params, rho_b=rho_b, delta_b=d_sel, d_conv=d_conv, sigma=sigma, gram_max=gmax)


# ---------------------------------------------------------------------------------------------------- one run
class _Names:
    """A name table over precomputed names (what the engine's interning would have produced)."""

    def __init__(self, names: list[str]) -> None:
        self._l = names

    def __len__(self) -> int:
        return len(self._l)

    def names(self, ids) -> list[str]:
        from operator import itemgetter

        ids = np.asarray(ids, dtype=np.int64)
        if ids.size == 0:
            return []
        if ids.size == 1:
            return [self._l[int(ids[0])]]
        return list(itemgetter(*ids.tolist())(self._l))


def _metrics(released: dict, truth: np.ndarray) -> dict:
    ids = np.fromiter((int(k) for k in released), dtype=np.int64, count=len(released))
    vals = np.fromiter(released.values(), dtype=np.float64, count=len(released))
    est = np.zeros(truth.size)
    est[ids] = vals
    err = est - truth
    return dict(keys=len(released), linf=float(np.abs(err).max()), l1=float(np.abs(err).sum()),
                l2=float(np.sqrt(np.sum(err * err))))


def run_once(a, kind: str, noise: str, mode: str, seed: int, out) -> None:
    warnings.simplefilter("ignore")
    from streamdp.accounting.cost import Cost, budget_vector
    from streamdp.filter.memory import MemoryBudgetStore

    t_gen = time.perf_counter()
    user, key, bounds = workload(a.workload, a.users, a.ticks, seed, a.C)
    n_keys = 10 ** 6 if a.workload == "dpsqlp" else 10 ** 5
    truth = np.bincount(key, minlength=n_keys + 1).astype(np.float64)
    n_records = int(user.size)
    # one array pair per tick, each freed once fed (as storm frees its batches)
    ticks = [(user[int(bounds[t]):int(bounds[t + 1])].copy(), key[int(bounds[t]):int(bounds[t + 1])].copy())
             for t in range(a.ticks)]
    del user, key
    cal = calibrate(a, kind, noise)
    store = MemoryBudgetStore(budget_vector(Cost.zcdp(cal["rho_b"], cal["delta_b"])))
    gen_s = time.perf_counter() - t_gen
    res = dict(kind=kind, noise=noise if kind == "continual_sums" else "tree", mode=mode, seed=seed,
               records=n_records, sigma=cal["sigma"], rho_b=cal["rho_b"], delta_b=cal["delta_b"],
               gen_s=gen_s)
    if mode == "mechanism":
        res.update(_run_mechanism(a, kind, cal, store, ticks, n_keys, seed))
    else:
        res.update(_run_json(a, kind, cal, store, ticks, seed))
    released, exact = res.pop("released"), res.pop("exact", None)
    res.update(_metrics(released, truth))
    if exact is not None:  # over the released keys: against the raw histogram, and noise only (the bounded counts)
        raw = np.array([v - truth[int(k)] for k, v in released.items()], dtype=np.float64)
        noise = np.array([v - exact[k] for k, v in released.items()], dtype=np.float64)
        res["released_raw_l2"] = float(np.sqrt(np.sum(raw * raw)))
        res["noise_l2"] = float(np.sqrt(np.sum(noise * noise)))
    res["halted"] = int(np.count_nonzero(store._halted[: len(store._names)]))
    res["peak_rss_gb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20
    out.put(res)


def _build_query(kind: str, cal: dict, L: int):
    if kind == "continual_counts":
        from streamdp.engine.queries.continual_counts import ContinualCounts

        return ContinualCounts("q", horizon=L, **cal["params"])
    from streamdp.engine.queries.continual_sums import ContinualSums

    return ContinualSums("q", horizon=L, **cal["params"])


def _run_mechanism(a, kind, cal, store, ticks, n_keys, seed) -> dict:
    from streamdp.engine.query import WindowData
    from streamdp.noise.generator import make_generator
    from streamdp.outputs.records import ReleaseRecord

    L = a.ticks
    q = _build_query(kind, cal, L)
    users_tab = _Names([f"u{i}" for i in range(a.users)])
    items = _Names([str(i) for i in range(n_keys + 1)])
    rng = make_generator(1000 + seed)  # test mode: reproducible noise for a benchmark run
    admitted = np.zeros(a.users, dtype=bool)
    t_prep = t_admit = t_rel = t_rec = 0.0
    rel = None
    for t in range(1, L + 1):
        tu, tk = ticks[t - 1]
        ticks[t - 1] = None
        n = tu.size
        w = WindowData(seq=t, epoch=0, t=t, start=60.0 * (t - 1), end=60.0 * t,
                       user_ids=tu.astype(np.int64), ts=np.full(n, 60.0 * (t - 1)),
                       item_offsets=np.arange(n + 1, dtype=np.int64), item_ids=tk.astype(np.int64),
                       value=np.full(n, np.nan), loc=np.full((n, 2), np.nan))
        del tu, tk
        c0 = time.perf_counter()
        r = q.prepare(w, rng)
        c1 = time.perf_counter()
        mask = store.admit_ids("bench", t, r.users, r.costs, users_tab)
        admitted[r.users[mask]] = True
        c2 = time.perf_counter()
        rel = q.release(w, r, admitted, rng, items)
        c3 = time.perf_counter()
        rec = ReleaseRecord.build(q, w, rel, r.costs[mask])
        store.put_release(rec.key, rec.to_bytes())
        c4 = time.perf_counter()
        admitted[r.users] = False
        t_prep += c1 - c0
        t_admit += c2 - c1
        t_rel += c3 - c2
        t_rec += c4 - c3
        del w
    out = dict(seconds=t_prep + t_admit + t_rel + t_rec, prepare_s=t_prep, admit_s=t_admit, release_s=t_rel,
               record_s=t_rec, released=rel.values["counts"])
    if kind == "continual_sums":
        ids, exact, _ = q.mech.exact()
        out["exact"] = dict(zip((str(i) for i in ids.tolist()), exact.tolist()))
    return out


def _run_json(a, kind, cal, store, ticks, seed) -> dict:
    import orjson

    from streamdp.engine.engine import EngineConfig, ReleaseEngine
    from streamdp.engine.pipeline import EmbeddedPipeline
    from streamdp.noise.generator import synthetic_data_generator

    L = a.ticks
    q = _build_query(kind, cal, L)
    eng = ReleaseEngine(EngineConfig(window_seconds=60.0, horizon=L, origin=0.0, unsafe_test_seed=1000 + seed),
                        [q], store)
    last = {}

    class Last:
        def write(self, rec):
            last["values"] = rec.values

        def dead_letter(self, d):
            raise AssertionError(f"dead letter: {d.reason}")

        def close(self):
            pass

    pipe = EmbeddedPipeline(eng, [Last()])
    g = synthetic_data_generator(seed + 7)
    seconds = 0.0
    batch = a.batch
    for t in range(1, L + 1):
        tu, tk = ticks[t - 1]
        ticks[t - 1] = None
        n = tu.size
        ts = np.sort(60.0 * (t - 1) + g.random(n) * 59.0)
        us, ks = tu.tolist(), tk.tolist()
        del tu, tk
        payloads = [orjson.dumps({"user": f"u{u}", "ts": s, "items": [str(k)]}) for u, s, k in zip(us, ts.tolist(), ks)]
        del us, ks
        c0 = time.perf_counter()
        for i in range(0, n, batch):
            pipe.feed(payloads[i:i + batch])
        seconds += time.perf_counter() - c0
        del payloads
    c0 = time.perf_counter()
    pipe._emit(eng.flush())
    seconds += time.perf_counter() - c0
    out = dict(seconds=seconds, released=last["values"]["counts"])
    if kind == "continual_sums":
        ids, exact, _ = q.mech.exact()
        out["exact"] = dict(zip(eng.items.names(ids), exact.tolist()))
    return out


# ------------------------------------------------------------------------------------------------------ report
def _ratio(r: dict) -> str:
    return f"{r['released_raw_l2'] / r['noise_l2']:.2f}" if r["noise_l2"] > 0 else "n/a (no key released)"


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", choices=("dpsqlp", "repeat"), default="dpsqlp")
    ap.add_argument("--users", type=int, default=None, help="default: 10⁷ (dpsqlp), 10⁵ (repeat)")
    ap.add_argument("--ticks", type=int, default=100)
    ap.add_argument("--seeds", type=int, default=3, help="runs per configuration (seeds 42, 43, …)")
    ap.add_argument("--modes", default="mechanism,json")
    ap.add_argument("--kinds", default="continual_sums,continual_counts")
    ap.add_argument("--noises", default="blt", help="continual_sums noise: blt, tree, tree_optimal (comma list)")
    ap.add_argument("--epsilon", type=float, default=6.0)
    ap.add_argument("--delta", type=float, default=1e-9)
    ap.add_argument("--select-share", type=float, default=0.5, help="share of δ for key selection (C·δ_key)")
    ap.add_argument("--C", type=int, default=32, help="records per user per epoch")
    ap.add_argument("--m", type=int, default=1, help="records per (user, key) (dpsqlp; repeat uses m = C)")
    ap.add_argument("--batch", type=int, default=100_000, help="json mode: events per ingest batch")
    ap.add_argument("--budget-units", type=float, default=None,
                    help="continual_sums: the ΔᵀGΔ/G_max each user's budget covers (default m·C; repeat: 4·C)")
    a = ap.parse_args()
    if a.users is None:
        a.users = 10 ** 7 if a.workload == "dpsqlp" else 10 ** 5
    ctx = mp.get_context("fork")
    rows = []
    print(f"=== bench_dp_sqlp {dt.datetime.now(dt.timezone.utc):%Y-%m-%dT%H:%M:%SZ} — {os.cpu_count()} cores, "
          f"Python {sys.version.split()[0]}, load {os.getloadavg()[0]:.2f}")
    print(f"DP-SQLP workload: {a.ticks} ticks, {a.users:,} users, workload {a.workload!r}, (ε, δ) = "
          f"({a.epsilon}, {a.delta}) user level, C = {a.C}" + (f", m = {a.m}" if a.workload == "dpsqlp" else ""))
    for kind in a.kinds.split(","):
        for noise in (a.noises.split(",") if kind == "continual_sums" else ["-"]):
            for mode in a.modes.split(","):
                runs = []
                for s in range(a.seeds):
                    out = ctx.Queue()
                    p = ctx.Process(target=run_once, args=(a, kind, noise, mode, 42 + s, out))
                    p.start()
                    r = out.get()
                    p.join()
                    runs.append(r)
                    print(f"  {kind:16s} {r['noise']:12s} {mode:9s} seed {42 + s}: keys {r['keys']:,}  "
                          f"L∞ {_fmt(r['linf'])}  L1 {r['l1']:.4g}  L2 {_fmt(r['l2'])}  {r['seconds']:.1f} s  "
                          f"peak {r['peak_rss_gb']:.2f} GB  halted {r['halted']:,}  σ {r['sigma']:.3f}"
                          + (f"  [prepare {r['prepare_s']:.1f}  admit {r['admit_s']:.1f}  release "
                             f"{r['release_s']:.1f}  record {r['record_s']:.1f}]" if mode == "mechanism" else "")
                          + (f"  released keys: L2 vs raw {r['released_raw_l2']:,.1f}, noise-only "
                             f"{r['noise_l2']:,.1f} (ratio {_ratio(r)})"
                             if "noise_l2" in r else ""), flush=True)
                mean = {k: float(np.mean([r[k] for r in runs])) for k in
                        ("keys", "linf", "l1", "l2", "seconds", "peak_rss_gb")}
                if "noise_l2" in runs[0]:
                    for k in ("noise_l2", "released_raw_l2"):
                        mean[k] = float(np.mean([r[k] for r in runs]))
                rows.append((kind, runs[0]["noise"], mode, mean, runs[0]))
    print(f"\n| line | keys | L∞ | L1 | L2 | s/run | peak GB |\n|---|---|---|---|---|---|---|")
    for kind, noise, mode, m, r0 in rows:
        print(f"| streamdp {kind} ({noise}, {mode}), mean of {a.seeds} | {m['keys']:,.0f} | {m['linf']:,.1f} | "
              f"{m['l1']:.4g} | {m['l2']:,.0f} | {m['seconds']:.1f} | {m['peak_rss_gb']:.2f} |")
    if a.workload == "dpsqlp" and a.ticks in STORM and a.users == 10 ** 7:
        s = STORM[a.ticks]
        print(f"| confidential-storm (published, mean of 10) | {s['keys']:,} | {s['linf']:,} | {s['l1']:.4g} | "
              f"{s['l2']:,} | {s['seconds']:,} | – |")
    for kind, noise, mode, m, r0 in rows:
        if "noise_l2" in m:
            print(f"{a.workload}: {kind} ({noise}, {mode}) over the released keys: L2 vs the raw histogram "
                  f"{m['released_raw_l2']:,.1f}, noise-only L2 {m['noise_l2']:,.1f}, ratio "
                  f"{_ratio(m)} (repeat-heavy target ≤ 2); over all keys L2 "
                  f"{m['l2']:,.1f}")
    r0 = rows[0][4]
    print(f"calibration: ρ_B = {r0['rho_b']:.4f} (CKS at δ_conv), δ_B = {r0['delta_b']:.3g}, σ = {r0['sigma']:.3f}")


if __name__ == "__main__":
    main()
