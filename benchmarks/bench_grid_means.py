"""Accuracy of the per-grid mean estimators of Rameshwar–Tandon (IoT means) on the ITMS-profile synthetic data (implementation notes on Rameshwar–Tandon (IoT means)).

One grid of i.i.d. Π_[0,U](N(μ, σ²)) values (μ = 20.66769, σ² = 115.135, U = 100) with the ITMS count profile
(L = 217, m* = 417, m_* = 1, Σm = 17166, median 46; eq. (10) → K = 160, K̄ = 164), drawn once; each estimator is
then run ``--runs`` times per ε and its MAE against the grid's true sample mean is reported (Rameshwar–Tandon (IoT means) §IV-A metric),
with its standard error, the mean Laplace scale of the final step, and the time per release (the grouping plan
is cached after the first call; it depends on the public counts only). The analytic Baseline MAE
0.0242922·U/ε (= E|Lap(U·m*/(Σm·ε))|) is printed beside the empirical one.

``--scaling`` adds the sample-scaling (m̂ = 10·m) and user-scaling (L̂ = 10·L) data sets of Rameshwar–Tandon (IoT means) §IV-C.

Usage: python benchmarks/bench_grid_means.py [--runs 2000] [--upper 100] [--scaling]
Deterministic (seeded, NOT private) noise: this is a measurement, not a release.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import warnings

import numpy as np

from streamdp.mechanisms.grid_means import (
    ArrayAveraging,
    Baseline,
    FixedQuantile,
    GridValues,
    Levy,
    OptimizedQuantile,
    best_fit_plan,
    eq10_m_ub,
    median_m_ub,
    wraparound_plan,
)
from streamdp.mechanisms.grid_means.synthetic import (
    clipped_gaussian_grid,
    itms_count_profile,
    sample_scaled,
    user_scaled,
)
from streamdp.noise.generator import UnsafeSeedWarning, unsafe_seeded_generator

EPSILONS = (0.5, 1.0, 2.0)


def estimators(eps: float, upper: float):
    yield Baseline(eps, upper)
    for cls in (ArrayAveraging, Levy, FixedQuantile, OptimizedQuantile):
        for grouping in ("bestfit", "wraparound"):
            yield cls(eps, upper, grouping=grouping)


def run(grid: GridValues, upper: float, runs: int, seed: int) -> list[tuple]:
    mu = grid.true_mean()
    counts = grid.counts
    rows = []
    for i, eps in enumerate(EPSILONS):
        analytic = upper * counts.max() / counts.sum() / eps
        for j, est in enumerate(estimators(eps, upper)):
            rng = unsafe_seeded_generator(seed + 100 * i + j)
            first = est.release(grid, rng)  # builds (and caches) the grouping plan
            errs = np.empty(runs)
            scales = np.empty(runs)
            t0 = time.perf_counter()
            for k in range(runs):
                r = est.release(grid, rng)
                errs[k] = abs(r.value - mu)
                scales[k] = r.noise_scale
            dt = (time.perf_counter() - t0) / runs
            rows.append((est.name, first.grouping or "-", first.m_ub or "-", first.n_arrays or "-", eps,
                         errs.mean(), errs.std(ddof=1) / np.sqrt(runs), scales.mean(), analytic, dt * 1e6))
    return rows


def print_table(title: str, grid: GridValues, rows) -> None:
    c = grid.counts
    print(f"\n## {title}: L = {c.size}, m* = {c.max()}, m_* = {c.min()}, Σm = {c.sum()}, "
          f"median = {median_m_ub(c)}, eq.(10) m_UB = {eq10_m_ub(c)}, true mean = {grid.true_mean():.5f}")
    hdr = (f"{'estimator':<18}{'grouping':<11}{'m_UB':>5}{'K|K̄':>6}{'ε':>5}{'MAE':>9}{'± s.e.':>8}"
           f"{'mean b':>9}{'Baseline b':>11}{'MAE/Base':>9}{'µs/rel':>8}")
    print(hdr)
    print("-" * len(hdr))
    for name, grp, m_ub, k, eps, mae, se, scale, analytic, us in rows:
        print(f"{name:<18}{grp:<11}{m_ub!s:>5}{k!s:>6}{eps:>5.1f}{mae:>9.4f}{se:>8.4f}{scale:>9.4f}"
              f"{analytic:>11.4f}{mae / analytic:>9.3f}{us:>8.0f}")


def plan_timings(counts) -> str:
    m = eq10_m_ub(counts)
    out = []
    for name, fn in (("BestFit", best_fit_plan), ("WrapAround", wraparound_plan)):
        t0 = time.perf_counter()
        reps = 5
        for _ in range(reps):
            fn(counts, m)
        out.append(f"{name} plan {1e3 * (time.perf_counter() - t0) / reps:.2f} ms")
    return ", ".join(out)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--upper", type=float, default=100.0)
    ap.add_argument("--seed", type=int, default=2002)
    ap.add_argument("--scaling", action="store_true", help="add the sample- and user-scaling data sets")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore", UnsafeSeedWarning)

    print(f"# bench_grid_means: {args.runs} runs per (estimator, ε), U = {args.upper}, seed {args.seed}")
    print(f"# machine: {platform.machine()}, {os.cpu_count()} cores, Python {sys.version.split()[0]}, "
          f"numpy {np.__version__}")
    base = itms_count_profile()
    sets = [("ITMS profile", base)]
    if args.scaling:
        sets += [("sample scaling ×10", sample_scaled(base, 10)), ("user scaling ×10", user_scaled(base, 10))]
    for title, counts in sets:
        grid = clipped_gaussian_grid(unsafe_seeded_generator(args.seed), counts, args.upper)
        t0 = time.perf_counter()
        rows = run(grid, args.upper, args.runs, args.seed + 1)
        print_table(title, grid, rows)
        print(f"# {plan_timings(counts)}; section wall time {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
