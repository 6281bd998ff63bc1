"""Accuracy of the per-grid mean estimators on the ITMS-profile synthetic data: the default add/remove estimator of
``grid_means`` (noisy clipped sum and count, presence protected) next to the bounded estimators of the IoT-means
paper (Baseline, array averaging, Levy, Quantile; presence NOT protected), at equal zCDP cost ρ per (cell, window).

For each ε of the paper's estimators, ρ = ε²/2 (what Baseline and array averaging cost; Levy and the quantile
estimators cost less, 5ε²/32 and 9ε²/64, so they are shown at a slight advantage). The add/remove rows spend that
ρ on the sum and count (``sum_share`` f) with the configured m_UB (values per user per cell: 1, 10 and the ITMS
median 46 — a public configuration, not read from the data); their private cell selection also costs δ_cell per
cell (10⁻⁶ here; the cell is released with probability ≈ 1 on this profile, shown as "P(rel)"). The add/remove
MAE is over the releases (a cell whose noisy count misses T publishes nothing).

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
from streamdp.mechanisms.grid_means.sum_count import ClippedSumCount
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
                         errs.mean(), errs.std(ddof=1) / np.sqrt(runs), scales.mean(), analytic, dt * 1e6, "1"))
        rows += add_remove_rows(grid, upper, eps, runs, seed + 100 * i + 50, analytic)
    return rows


def add_remove_rows(grid: GridValues, upper: float, eps: float, runs: int, seed: int, analytic: float) -> list:
    """The default add/remove estimator at ρ = ε²/2 per cell: one noisy (S, N) pair per run, all runs in one
    vectorised draw; MAE of the released (selected) means against the true sample mean."""
    mu = grid.true_mean()
    out = []
    for m_ub in (1, 10, 46):
        for share in (0.5, 0.75):
            mech = ClippedSumCount(upper, m_ub, eps * eps / 2, share)
            kept = np.concatenate([grid.values[grid.offsets[k]:grid.offsets[k] + m_ub]
                                   for k in range(grid.n_users)])
            S, N = int(mech.quantize(kept).sum()), int(kept.size)
            rng = unsafe_seeded_generator(seed + m_ub + int(100 * share))
            t0 = time.perf_counter()
            s_t, n_t = mech.noise(rng, np.full(runs, S), np.full(runs, N))
            sel = n_t > mech.threshold(1e-6)
            means = np.array([c["mean"] for c in mech.publish(s_t[sel], n_t[sel])], dtype=float)
            dt = (time.perf_counter() - t0) / runs
            errs = np.abs(means - mu)
            # the noise of the mean, to first order: √(σ_S² + (μ_c·σ_N)²)/N in value units (μ_c: the centred mean)
            mu_c = float(np.clip(kept, 0, upper).mean()) - upper / 2
            b = float(np.sqrt(mech.sum_sd**2 + (mu_c * mech.sigma_count) ** 2) / N / np.sqrt(2))
            out.append((f"AddRemove f={share:g}", "-", m_ub, N, eps, errs.mean(),
                        errs.std(ddof=1) / np.sqrt(max(errs.size, 2)), b, analytic, dt * 1e6,
                        f"{sel.mean():.3f}"))
    return out


def print_table(title: str, grid: GridValues, rows) -> None:
    c = grid.counts
    print(f"\n## {title}: L = {c.size}, m* = {c.max()}, m_* = {c.min()}, Σm = {c.sum()}, "
          f"median = {median_m_ub(c)}, eq.(10) m_UB = {eq10_m_ub(c)}, true mean = {grid.true_mean():.5f}")
    hdr = (f"{'estimator':<20}{'grouping':<11}{'m_UB':>5}{'K|K̄|N':>7}{'ε':>5}{'MAE':>9}{'± s.e.':>8}"
           f"{'mean b':>9}{'Baseline b':>11}{'MAE/Base':>9}{'µs/rel':>8}{'P(rel)':>7}")
    print(hdr)
    print("-" * len(hdr))
    for name, grp, m_ub, k, eps, mae, se, scale, analytic, us, prel in rows:
        print(f"{name:<20}{grp:<11}{m_ub!s:>5}{k!s:>7}{eps:>5.1f}{mae:>9.4f}{se:>8.4f}{scale:>9.4f}"
              f"{analytic:>11.4f}{mae / analytic:>9.3f}{us:>8.0f}{prel:>7}")


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

    print(f"# bench_grid_means: {args.runs} runs per (estimator, ε), U = {args.upper}, seed {args.seed}; "
          "equal zCDP ρ = ε²/2 per (cell, window); 'mean b' = the Laplace scale of the bounded estimators' final noise "
          "or, for AddRemove, the equivalent scale sd/√2 of its mean's noise to first order")
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
