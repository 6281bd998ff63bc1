"""Window close of the unknown-domain binary-mechanism tree: time and bytes per item (docs/contract.md §7).

Setting: L = 4096 (13 levels), 10⁶ live items, σ = 5, δ_item = 1e-9. The items are registered at window t0 − 1
(their past nodes noised), then window t0 is closed with (a) every item touched and (b) 1% of items touched.
t0 = 2047 has 11 alive levels (popcount 11: the widest sum); t0 = 4096 completes the 13-level root (the optimal
estimator refines the whole right spine there). 10% of the items carry a count far above T, so ~10⁵ items are
released per window. Targets: ≤ 1 s per window close, ≤ 256 B of state per item.

Reported: median step time over repeats, state bytes/item (``tree.nbytes``: allocated arrays incl. the id
lookup), peak transient bytes/item during the step (tracemalloc sees numpy's buffers), snapshot bytes/item and
snapshot write/read times.

    .venv/bin/python benchmarks/bench_window_close.py [--items 1000000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import tracemalloc
import warnings

import numpy as np

from streamdp.mechanisms.binary_tree import UnknownDomainBinaryTree
from streamdp.noise.generator import UnsafeSeedWarning, unsafe_seeded_generator

warnings.simplefilter("ignore", UnsafeSeedWarning)

L, SIGMA, DELTA = 4096, 5.0, 1e-9
CONFIGS = [("gaussian", "plain"), ("gaussian", "optimal"), ("discrete_gaussian", "plain")]


def build(noise, estimator, n, t0, rng):
    """A tree at window t0 − 1 with n live items registered at t0 − 1."""
    tr = UnknownDomainBinaryTree(L, SIGMA, DELTA, noise=noise, estimator=estimator)
    empty = np.zeros(0, dtype=np.int64)
    for _ in range(t0 - 2):
        tr.step(empty, empty, rng)
    ids = np.arange(n, dtype=np.int64)
    inc = np.ones(n, dtype=np.int64)
    inc[::10] = 200  # 10% of the items are far above T and get released
    t = time.perf_counter()
    tr.step(ids, inc, rng)
    register = time.perf_counter() - t
    return tr, register


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    n = args.items
    rng = unsafe_seeded_generator(1)
    print(f"# window close, L={L}, n={n:,} items, sigma={SIGMA}, cpus={os.cpu_count()}")
    header = ("noise", "estimator", "t0", "touched", "step_s", "register_s", "state_B/item", "peak_B/item",
              "snap_B/item", "to_bytes_s", "from_bytes_s", "released")
    print(" | ".join(header))
    for noise, estimator in CONFIGS:
        for t0 in (2047, 4096):
            for frac in (1.0, 0.01):
                times, regs, peaks = [], [], []
                for _ in range(args.repeats):
                    tr, reg = build(noise, estimator, n, t0, rng)
                    touched = np.arange(0, n, int(round(1 / frac)), dtype=np.int64)
                    inc = np.ones(touched.size, dtype=np.int64)
                    tracemalloc.start()
                    t = time.perf_counter()
                    rel = tr.step(touched, inc, rng)
                    times.append(time.perf_counter() - t)
                    _, peak = tracemalloc.get_traced_memory()
                    tracemalloc.stop()
                    regs.append(reg)
                    peaks.append(peak)
                t = time.perf_counter()
                blob = tr.to_bytes()
                tw = time.perf_counter() - t
                t = time.perf_counter()
                UnknownDomainBinaryTree.from_bytes(blob)
                tr_ = time.perf_counter() - t
                print(" | ".join(str(x) for x in (
                    noise, estimator, t0, touched.size, f"{statistics.median(times):.3f}",
                    f"{statistics.median(regs):.3f}", f"{tr.nbytes / n:.0f}", f"{max(peaks) / n:.0f}",
                    f"{len(blob) / n:.0f}", f"{tw:.3f}", f"{tr_:.3f}", rel.selected_ids.size)))


if __name__ == "__main__":
    main()
