"""Accuracy of the binary-mechanism running counts: plain vs Honaker's streaming variance-optimal estimator.

At C = 1 (measured here) both estimators have equal privacy cost ρ at equal σ (binary_tree_cost: Δ2² = levels);
for C > 1 Honaker's costs more (it reads every completed node, release rule 3). For each horizon L, n items with random per-window counts are run through one tree per
estimator; the error of the unrounded running count is measured at every t = 1..L. Printed per L: the empirical
MSE averaged over t (and its analytic value σ²·mean popcount(t) or mean Σ_{j∈bits(t)} V_j), the worst-t empirical
error std against its analytic value, and the ratio optimal/plain. Also a few single-t rows (docs/contract.md §7
"running count error std ≈ σ√popcount(t)").

    .venv/bin/python benchmarks/bench_tree_variance.py [--items 2000] [--sigma 1.0]
"""

from __future__ import annotations

import argparse
import math
import os
import time
import warnings

import numpy as np

from streamdp.mechanisms.binary_tree import UnknownDomainBinaryTree, binary_tree_cost
from streamdp.mechanisms.tree_estimators import running_count_variance
from streamdp.noise.generator import UnsafeSeedWarning, unsafe_seeded_generator

warnings.simplefilter("ignore", UnsafeSeedWarning)


def run(L: int, n: int, sigma: float, estimator: str, seed: int, data_seed: int):
    data_rng = unsafe_seeded_generator(data_seed)
    tr = UnknownDomainBinaryTree(L, sigma, 1e-9, estimator=estimator)
    rng = unsafe_seeded_generator(seed)
    ids = np.arange(n)
    truth = np.zeros(n, dtype=np.int64)
    mse = np.empty(L)
    for t in range(1, L + 1):
        inc = data_rng.poisson(1.0, size=n)
        truth += inc
        tr.step(ids, inc, rng)
        err = tr.noisy_running_counts(ids) - truth
        mse[t - 1] = float(np.mean(err * err))
    return mse


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=2000)
    ap.add_argument("--sigma", type=float, default=1.0)
    args = ap.parse_args()
    n, sigma = args.items, args.sigma
    print(f"# running-count error, n={n} items per tree, sigma={sigma}, cpus={os.cpu_count()}")
    print("L | levels | rho/item | plain MSE (analytic) | optimal MSE (analytic) | opt/plain | "
          "plain worst-t std (analytic) | optimal worst-t std (analytic) | seconds")
    for L in (16, 64, 256, 1024, 4096):
        t0 = time.perf_counter()
        res = {e: run(L, n, sigma, e, 11 + i, 7) for i, e in enumerate(("plain", "optimal"))}
        secs = time.perf_counter() - t0
        ts = np.arange(1, L + 1)
        ana = {e: np.array([running_count_variance(sigma, int(t), e) for t in ts]) for e in res}
        worst = {e: int(np.argmax(ana[e])) for e in res}
        cells = [str(L), str(math.ceil(math.log2(L + 1))), f"{binary_tree_cost(sigma, L, 1e-9).zcdp_rho:.3g}"]
        for e in ("plain", "optimal"):
            cells.append(f"{res[e].mean():.4f} ({ana[e].mean():.4f})")
        cells.append(f"{res['optimal'].mean() / res['plain'].mean():.3f}")
        for e in ("plain", "optimal"):
            w = worst[e]
            cells.append(f"{math.sqrt(res[e][w]):.3f} ({math.sqrt(ana[e][w]):.3f}) @t={w + 1}")
        cells.append(f"{secs:.1f}")
        print(" | ".join(cells))
    L = 64
    res = {e: run(L, 20_000, sigma, e, 21 + i, 8) for i, e in enumerate(("plain", "optimal"))}
    print(f"\n# single windows, L={L}, n=20000: error std, empirical (analytic)")
    print("t | popcount | plain | optimal")
    for t in (1, 2, 3, 7, 8, 31, 32, 63, 64):
        row = [str(t), str(bin(t).count("1"))]
        for e in ("plain", "optimal"):
            row.append(f"{math.sqrt(res[e][t - 1]):.4f} ({math.sqrt(running_count_variance(sigma, t, e)):.4f})")
        print(" | ".join(row))


if __name__ == "__main__":
    main()
