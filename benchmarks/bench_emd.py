"""Accuracy of the d_EM-DP releases (Imola et al. (EMD)) — prints tables; run with the project's Python.

1. PrivEMDLinear: error of a 2-D linear query (the mean of f(x) = x over a user's items, L = 1) vs α, local
   (each of n users releases; the server averages) and central (one release of the global mean); analytic
   E‖noise‖ = d·L·ω for one release.
2. Frequency estimation on the clustered metric (c clusters × g items, γ within a cluster): FreqEstLocal (clustered
   k-RR + PrivEMDItemWise, α0 calibrated; shuffle bound when it allows a larger α0) vs the Laplace histogram
   baseline at ε = α (user-level ε-DP, a different guarantee; Imola et al. (EMD) Lemma 6.7). Error: d_EM(projected ĥ, h) and ℓ1.
   Central model: the curator shuffles all n·m items. Local model: each user's m items (composition bound —
   the shuffle bound needs N = m ≥ 16·log(2/δ)·e^{α0}) vs per-user Laplace on the user's own histogram (the
   paper's local baseline is the Hadamard response, not implemented here).
   Privacy parameters are matched as α = ε/γ: both give ε for any change of a user's data inside clusters.

    .venv/bin/python benchmarks/bench_emd.py [--quick]
"""

from __future__ import annotations

import argparse
import math
import platform
import time
import warnings

import numpy as np

from streamdp.mechanisms.emd import (
    FreqEstLocal,
    LaplaceHistogram,
    PrivEMDLinear,
    clustered_metric,
    emd_histograms,
    histogram,
    project_to_simplex,
)
from streamdp.noise import samplers
from streamdp.noise.generator import UnsafeSeedWarning, unsafe_seeded_generator

warnings.simplefilter("ignore", UnsafeSeedWarning)


def linear_table(quick: bool) -> None:
    rng = unsafe_seeded_generator(9101)
    n, m, d = 1000, 20, 2
    reps = 50 if quick else 200
    x = rng.uniform(0, 1, (n, m, d)) / math.sqrt(2)  # items in a region of diameter ≤ 1
    means = x.mean(axis=1)
    truth = means.mean(axis=0)
    print(f"## PrivEMDLinear, d = 2, f = identity (L = 1), n = {n} users × m = {m} items; mean ‖error‖ over {reps}")
    print(f"{'alpha':>6} {'local 1 user':>13} {'(analytic)':>11} {'local mean':>11} {'central':>10} {'(analytic)':>11}")
    for alpha in (0.5, 1.0, 2.0, 5.0, 10.0):
        loc = PrivEMDLinear(alpha, 1.0, d)
        cen = PrivEMDLinear(alpha, 1.0, d, model="central", n_users=n)
        one = np.mean([np.linalg.norm(loc.release(rng, x[0]) - means[0]) for _ in range(reps)])
        agg = np.mean([np.linalg.norm(loc.release_means(rng, means).mean(0) - truth) for _ in range(reps)])
        ce = np.mean([np.linalg.norm(cen.release(rng, x) - truth) for _ in range(reps)])
        print(f"{alpha:>6.1f} {one:>13.4f} {loc.expected_noise_norm():>11.4f} {agg:>11.5f} {ce:>10.6f} "
              f"{cen.expected_noise_norm():>11.6f}")
    print()


def sample_data(rng, n, m, c, g, conc=0.5):
    """Users draw m items i.i.d. from a common distribution concentrated on a few clusters."""
    k = c * g
    p = rng.dirichlet(np.full(k, conc))
    return rng.choice(k, size=(n, m), p=p)


def freq_table(quick: bool) -> None:
    rng = unsafe_seeded_generator(9102)
    c, g, gamma = 10, 10, 0.1
    k = c * g
    dist = clustered_metric(c, g, gamma)
    reps = 3 if quick else 10
    print(f"## Frequency estimation, clustered metric c = {c}, g = {g}, γ = {gamma}; δ = 1e-6; mean over {reps}")
    print("   Laplace: ε-user-level DP. FreqEst: α-d_EM-DP with α = ε/γ, i.e. the same ε for any change of a user's")
    print("   data inside clusters (d_EM ≤ γ), weaker (α·d_EM) for moves across clusters (Imola et al. (EMD) §1.1.3).")
    print(f"{'model':>7} {'n':>6} {'m':>4} {'eps':>5} {'alpha':>6} {'bound':>11} {'alpha0':>8} "
          f"{'dEM FE':>8} {'dEM Lap':>8} {'l1 FE':>7} {'l1 Lap':>7} {'ms FE':>7}")
    for model, n, m in (("central", 2000, 20), ("central", 10000, 20), ("local", 5000, 1), ("local", 5000, 5),
                        ("local", 5000, 20)):
        data = sample_data(rng, n, m, c, g)
        h = histogram(data.ravel(), k)
        per_user = np.stack([histogram(data[i], k) for i in range(n)])
        for eps in (0.5, 1.0, 2.0, 5.0):
            alpha = eps / gamma
            fe = FreqEstLocal.calibrated(c, g, gamma, alpha, m, 1e-6, model, n if model == "central" else None)
            de, dl, le, ll, tt = [], [], [], [], 0.0
            for _ in range(reps):
                t0 = time.perf_counter()
                reports = fe.release(rng, data) if model == "central" else fe.itemwise.release_users(rng, data)
                hf = fe.estimate_distribution(reports)
                tt += time.perf_counter() - t0
                if model == "central":
                    hl = LaplaceHistogram(eps, n, k).release(rng, h)
                else:
                    hl = _local_laplace(rng, per_user, eps)
                de.append(emd_histograms(hf, h, dist))
                dl.append(emd_histograms(hl, h, dist))
                le.append(np.abs(hf - h).sum())
                ll.append(np.abs(hl - h).sum())
            gte = fe.itemwise.guarantee
            print(f"{model:>7} {n:>6} {m:>4} {eps:>5.1f} {alpha:>6.1f} {gte.bound:>11} {gte.alpha0:>8.4f} "
                  f"{np.mean(de):>8.4f} {np.mean(dl):>8.4f} {np.mean(le):>7.3f} {np.mean(ll):>7.3f} "
                  f"{1e3 * tt / reps:>7.1f}")
    print()


def _local_laplace(rng, per_user, eps):
    """Local baseline: every user adds Lap(2/ε) to each bin of their own normalised histogram (ε-user-level local
    DP); the server averages and projects onto the simplex."""
    noisy = per_user + samplers.laplace(rng, 2.0 / eps, per_user.shape)
    return project_to_simplex(noisy.mean(axis=0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = ap.parse_args()
    print(f"# bench_emd — {platform.machine()}, {platform.python_version()}, numpy {np.__version__}")
    t0 = time.perf_counter()
    linear_table(args.quick)
    freq_table(args.quick)
    print(f"total {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
