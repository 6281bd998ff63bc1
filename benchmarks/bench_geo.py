"""Accuracy of the geo-privacy releases (Liang–Yi (CGP)) — prints tables; run with the project's Python.

1. CGP identity query: mean per-point error vs the analytic (√π/2)·√(n/ρ) ≈ 0.8862·√(n/ρ); the GP identity query
   (planar Laplace, ε/n per point) at the same CGP cost (ε = √(2ρ), Liang–Yi (CGP) Lemma 3.6) for comparison.
2. kNN: distance ratio of k-PNN (Liang–Yi (CGP) Alg. 3) vs Basic (noisy points, exact kNN).
3. Convex hull: Jaccard of PCH (Liang–Yi (CGP) Alg. 4 + anchors) vs Basic (CONV of the noisy points).

Data for 2–3: synthetic clustered points in metres (5 Gaussian clusters, spread 100 m, centres uniform in a
2 km square); query points are jittered data points. ρ is per m². Deterministic seeds (test mode).

    .venv/bin/python benchmarks/bench_geo.py [--quick]
"""

from __future__ import annotations

import argparse
import math
import platform
import time
import warnings

import numpy as np

from streamdp.mechanisms.geo import (
    IdentityQueryCGP,
    IdentityQueryGP,
    basic_convex_hull,
    basic_knn,
    convex_hull_vertices,
    hull_jaccard,
    k_pnn,
    knn_distance_ratio,
    private_convex_hull,
)
from streamdp.noise.generator import UnsafeSeedWarning, unsafe_seeded_generator

warnings.simplefilter("ignore", UnsafeSeedWarning)


def clustered_points(rng, n, n_clusters=5, extent=2000.0, spread=100.0):
    centres = rng.uniform(0, extent, (n_clusters, 2))
    return centres[rng.integers(0, n_clusters, n)] + rng.normal(0, spread, (n, 2))


def identity_table(quick: bool) -> None:
    rng = unsafe_seeded_generator(9001)
    ns = (1000, 5000, 20000)
    rhos = (5e-5, 2.5e-4, 5e-4)
    reps = 5 if quick else 25
    print("## CGP identity query: mean per-point error (m) vs 0.8862·√(n/ρ); GP at equal CGP cost")
    print(f"{'n':>6} {'rho/m^2':>8} {'analytic':>10} {'measured':>10} {'rel.dev':>8} {'GP eps/n':>10} {'GP/CGP':>7}")
    for n in ns:
        x = clustered_points(rng, n)
        for rho in rhos:
            iq = IdentityQueryCGP(rho)
            err = np.mean([np.linalg.norm(iq.release(rng, x) - x, axis=1).mean() for _ in range(reps)])
            analytic = math.sqrt(math.pi) / 2 * math.sqrt(n / rho)
            gp = IdentityQueryGP(math.sqrt(2 * rho))
            gerr = np.mean([np.linalg.norm(gp.release(rng, x) - x, axis=1).mean() for _ in range(reps)])
            print(f"{n:>6} {rho:>8.1e} {analytic:>10.1f} {err:>10.1f} {err / analytic - 1:>+8.4f} "
                  f"{gerr:>10.1f} {gerr / err:>7.1f}")
    print()


def knn_table(quick: bool) -> None:
    rng = unsafe_seeded_generator(9002)
    reps = 10 if quick else 30
    print(f"## kNN distance ratio (median over {reps} instances; 1 = exact)")
    print(f"{'n':>6} {'k':>3} {'rho/m^2':>8} {'k-PNN':>8} {'Basic':>8} {'ms/PNN':>8}")
    for n in (2000, 20000):
        for k in (1, 5, 20):
            for rho in (1e-4, 1e-3, 1e-2):
                rp, rb, tp = [], [], 0.0
                for _ in range(reps):
                    x = clustered_points(rng, n)
                    p = x[rng.integers(n)] + rng.normal(0, 20, 2)
                    t0 = time.perf_counter()
                    found = k_pnn(rng, x, p, k, rho=rho)
                    tp += time.perf_counter() - t0
                    rp.append(knn_distance_ratio(x, p, found))
                    rb.append(knn_distance_ratio(x, p, basic_knn(rng, x, p, k, rho=rho)))
                print(f"{n:>6} {k:>3} {rho:>8.0e} {np.median(rp):>8.2f} {np.median(rb):>8.2f} "
                      f"{1e3 * tp / (reps * k):>8.2f}")
    print()


def hull_table(quick: bool) -> None:
    rng = unsafe_seeded_generator(9003)
    reps = 5 if quick else 20
    print(f"## Convex hull Jaccard with the true hull (mean over {reps} instances; 1 = exact)")
    print(f"{'n':>6} {'rho/m^2':>8} {'PCH':>7} {'Basic':>7} {'k':>4} {'ms/PCH':>8}")
    for n in (2000, 10000, 30000):
        for rho in (1e-4, 1e-3, 1e-2, 1e-1):
            jp, jb, tp, ks = [], [], 0.0, []
            for _ in range(reps):
                x = clustered_points(rng, n)
                true = convex_hull_vertices(x)
                t0 = time.perf_counter()
                res = private_convex_hull(rng, x, rho)
                tp += time.perf_counter() - t0
                ks.append(res.k)
                jp.append(hull_jaccard(res.hull, true))
                jb.append(hull_jaccard(basic_convex_hull(rng, x, rho=rho), true))
            print(f"{n:>6} {rho:>8.0e} {np.mean(jp):>7.3f} {np.mean(jb):>7.3f} {int(np.median(ks)):>4} "
                  f"{1e3 * tp / reps:>8.1f}")
    print()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = ap.parse_args()
    print(f"# bench_geo — {platform.machine()}, {platform.python_version()}, numpy {np.__version__}")
    t0 = time.perf_counter()
    identity_table(args.quick)
    knn_table(args.quick)
    hull_table(args.quick)
    print(f"total {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
