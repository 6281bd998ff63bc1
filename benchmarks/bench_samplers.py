"""Throughput of every noise sampler at 10⁶ samples, over the production CSPRNG generator (ChaCha20).

Baselines measured in the same run: numpy's own default bit generator (PCG64, not cryptographically secure —
never used for noise) drawing ``standard_normal``, and the raw ChaCha ``standard_normal``, so the CSPRNG overhead
and the sampler overhead are both visible. Vector samplers count one d-vector as one sample.

Usage: python benchmarks/bench_samplers.py [--n 1000000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

# Non-private baseline only (numpy's default PCG64); streamdp itself never draws noise from it.
from numpy.random import default_rng as numpy_default_rng

from streamdp.noise import samplers
from streamdp.noise.generator import secure_generator


def measure(fn, n: int, repeat: int) -> tuple[float, float]:
    """(median, best) samples per second over ``repeat`` timed calls after one warm-up call."""
    fn(n)
    rates = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(n)
        rates.append(n / (time.perf_counter() - t0))
    return statistics.median(rates), max(rates)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()

    pcg = numpy_default_rng()
    rng = secure_generator()
    cases = [
        ("baseline: numpy PCG64 standard_normal", lambda n: pcg.standard_normal(n)),
        ("baseline: ChaCha20 standard_normal", lambda n: rng.standard_normal(n)),
        ("gaussian(σ=3)", lambda n: samplers.gaussian(rng, 3.0, n)),
        ("laplace(b=2)", lambda n: samplers.laplace(rng, 2.0, n)),
        ("gumbel(β=2)", lambda n: samplers.gumbel(rng, 2.0, n)),
        ("exponential(scale=2)", lambda n: samplers.exponential(rng, 2.0, n)),
        ("discrete_laplace(t=0.5)", lambda n: samplers.discrete_laplace(rng, 0.5, n)),
        ("discrete_laplace(t=10)", lambda n: samplers.discrete_laplace(rng, 10.0, n)),
    ]
    for sigma in (0.3, 1.0, 3.0, 20.0, 1e4):
        cases.append((f"discrete_gaussian(σ={sigma:g})", lambda n, s=sigma: samplers.discrete_gaussian(rng, s, n)))
    cases += [
        ("planar_laplace(ε=1) [2-vectors]", lambda n: samplers.planar_laplace(rng, 1.0, n)),
        ("knorm_gamma_ball(d=2) [vectors]", lambda n: samplers.knorm_gamma_ball(rng, 2, 1.0, n)),
        ("knorm_gamma_ball(d=16) [vectors]", lambda n: samplers.knorm_gamma_ball(rng, 16, 1.0, n)),
        ("uniform_sphere(d=3) [vectors]", lambda n: samplers.uniform_sphere(rng, 3, n)),
        ("uniform_ball(d=3) [vectors]", lambda n: samplers.uniform_ball(rng, 3, n)),
    ]

    print(f"# noise samplers, n = {args.n:,} per call, median and best of {args.repeat}")
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    width = max(len(name) for name, _ in cases)
    base = None
    print(f"{'sampler':<{width}}  {'median M/s':>10}  {'best M/s':>9}  {'vs PCG64':>8}")
    for name, fn in cases:
        med, best = measure(fn, args.n, args.repeat)
        base = base or med
        print(f"{name:<{width}}  {med / 1e6:>10.2f}  {best / 1e6:>9.2f}  {med / base:>8.2f}")


if __name__ == "__main__":
    main()
