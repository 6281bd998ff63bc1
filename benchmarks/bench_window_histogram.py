"""Accuracy of the window histogram (Rogers (unknown-domain) Alg. 1 / Thm 7, Alg. 2 / Thm 8) against its analytic values (docs/contract.md §7).

Three measures, each with the analytic value beside the empirical one:

1. release rate of an item of true count c (Alg. 1): P[c + Z > T] with Z ~ N(0, 1/ε²) or Lap(1/ε) — the closed
   forms Φ̄(ε(T − c)) and (c < T) ½·exp(−ε(T − c)), (c ≥ T) 1 − ½·exp(−ε(c − T));
2. error of released counts far above T: mean ≈ 0, std ≈ √(Var Z + 1/12) (rounding to integers adds ≈ 1/12);
3. Alg. 2: release rate of the top item as a function of its lead over c_(k̄+1):
   P[c + Z1 > T + c_(k̄+1) + Z0] = Φ̄((T + c_(k̄+1) − c)·ε/√2);
and one end-to-end run through the engine (the WindowHistogram query, memory store) for the error's std and the
events/s of the close.

    python benchmarks/bench_window_histogram.py [--trials 20000] [--seed 1]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np
from scipy import stats

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import warnings  # noqa: E402

warnings.filterwarnings("ignore")

from streamdp.mechanisms.unknown_domain_histogram import (  # noqa: E402
    TopKbarGaussianHistogram,
    UnknownDomainHistogram,
)
from streamdp.noise.generator import unsafe_seeded_generator  # noqa: E402


def rate_alg1(noise: str, eps: float, delta: float, d0: int, trials: int, rng) -> list[tuple]:
    m = UnknownDomainHistogram(eps, delta, d0, 1.0, noise=noise, integer_output=False)
    T = m.threshold
    rows = []
    for c in (1, round(T / 2), math.floor(T) - 2, math.floor(T), math.ceil(T) + 1, math.ceil(T) + 4):
        c = max(int(c), 1)
        ids, _ = m.release(rng, np.arange(trials), np.full(trials, float(c)))
        emp = ids.size / trials
        if noise == "gaussian":
            ana = float(stats.norm.sf(eps * (T - c)))
        else:
            ana = 0.5 * math.exp(-eps * (T - c)) if c < T else 1 - 0.5 * math.exp(-eps * (c - T))
        rows.append((c, emp, ana))
    return rows


def error_far_above(noise: str, eps: float, delta: float, d0: int, trials: int, rng) -> tuple[float, float, float]:
    m = UnknownDomainHistogram(eps, delta, d0, 1.0, noise=noise)
    c = int(m.threshold + 20 / eps)
    ids, noisy = m.release(rng, np.arange(trials), np.full(trials, float(c)))
    err = noisy.astype(float) - c
    var_z = 1 / eps**2 if noise == "gaussian" else 2 / eps**2
    return float(err.mean()), float(err.std()), math.sqrt(var_z + 1 / 12)


def rate_alg2(eps: float, delta: float, d0: int, kbar: int, trials: int, rng) -> list[tuple]:
    m = TopKbarGaussianHistogram(eps, delta, kbar, d0, 1.0, integer_output=False)
    T, c_next = m.threshold, 20.0
    rows = []
    for lead in (0.0, T - 4 / eps, T, T + 4 / eps):
        c_top = c_next + lead
        counts = np.array([c_top] + [c_next] * kbar, dtype=float)  # c_(k̄+1) = c_next; only the top can pass
        hits = 0
        for _ in range(trials):
            ids, _ = m.release(rng, np.arange(kbar + 1), counts)
            hits += int(0 in ids.tolist())
        ana = float(stats.norm.sf((T + c_next - c_top) * eps / math.sqrt(2)))
        rows.append((lead, hits / trials, ana))
    return rows


def engine_run(eps: float, delta: float, d0: int, users: int, items: int, windows: int, seed: int):
    import orjson

    from streamdp.accounting.cost import Cost, budget_vector
    from streamdp.engine.engine import EngineConfig, ReleaseEngine
    from streamdp.engine.pipeline import EmbeddedPipeline
    from streamdp.engine.queries.window_histogram import WindowHistogram
    from streamdp.filter.memory import MemoryBudgetStore
    from streamdp.outputs.sinks import ListSink

    g = np.random.Generator(np.random.PCG64(seed))  # synthetic DATA (not noise)
    truth, payloads = [], []
    for w in range(windows):
        it = g.zipf(1.3, users) % items  # one item per user per window
        truth.append(np.bincount(it, minlength=items))
        payloads += [orjson.dumps({"user": f"u{u}", "ts": w * 10.0 + 1 + u * 1e-6, "items": [f"i{int(it[u])}"]})
                     for u in range(users)]
    payloads.append(orjson.dumps({"user": "end", "ts": windows * 10.0 + 5, "items": ["z"]}))
    q = WindowHistogram("h", epsilon=eps, delta=delta, max_items_per_window=d0)
    store = MemoryBudgetStore(budget_vector(Cost.zcdp(1e9, 0.5)))
    e = ReleaseEngine(EngineConfig(window_seconds=10.0, horizon=8, origin=0.0, unsafe_test_seed=seed), [q], store)
    sink = ListSink()
    t0 = time.perf_counter()
    EmbeddedPipeline(e, [sink]).run([payloads[i:i + 20000] for i in range(0, len(payloads), 20000)])
    dt = time.perf_counter() - t0
    errs = []
    for r, tr in zip(sink.records[:windows], truth):
        for name, v in r.values["counts"].items():
            c = int(tr[int(name[1:])])
            if c > q.threshold + 20 / eps:
                errs.append(v - c)
    errs = np.asarray(errs, dtype=float)
    return len(payloads) / dt, errs.size, float(errs.mean()), float(errs.std()), math.sqrt(1 / eps**2 + 1 / 12)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = unsafe_seeded_generator(a.seed)  # benchmark only: reproducible noise
    eps, delta, d0, kbar = 0.5, 1e-6, 4, 10
    print(f"# window histogram accuracy — ε = {eps}, δ = {delta}, Δ0 = {d0}, Δ∞ = 1; {a.trials} trials per row")
    for noise in ("gaussian", "laplace"):
        T = UnknownDomainHistogram(eps, delta, d0, 1.0, noise=noise).threshold
        print(f"\n## Alg. 1, {noise} noise: T = {T:.3f}; release rate of an item of true count c")
        print(f"{'c':>6} {'empirical':>10} {'analytic':>10}")
        for c, emp, ana in rate_alg1(noise, eps, delta, d0, a.trials, rng):
            print(f"{c:>6} {emp:>10.4f} {ana:>10.4f}")
        mean, sd, sd_ana = error_far_above(noise, eps, delta, d0, a.trials, rng)
        print(f"released − true, counts 20/ε above T: mean {mean:+.4f}, std {sd:.4f} (analytic √(Var Z + 1/12) "
              f"= {sd_ana:.4f})")
    T2 = TopKbarGaussianHistogram(eps, delta, kbar, d0, 1.0).threshold
    print(f"\n## Alg. 2 (k̄ = {kbar}): T = {T2:.3f}; release rate of the top item by its lead over c_(k̄+1)")
    print(f"{'lead':>8} {'empirical':>10} {'analytic':>10}")
    for lead, emp, ana in rate_alg2(eps, delta, d0, kbar, max(a.trials // 4, 1000), rng):
        print(f"{lead:>8.2f} {emp:>10.4f} {ana:>10.4f}")
    eps_s, n_err, mean, sd, sd_ana = engine_run(eps, delta, d0, users=20000, items=2000, windows=20, seed=a.seed)
    print("\n## through the engine (WindowHistogram, memory store): 20 windows × 20k users, Zipf items")
    print(f"{eps_s:,.0f} events/s end to end; {n_err} released counts 20/ε above T: error mean {mean:+.4f}, "
          f"std {sd:.4f} (analytic {sd_ana:.4f})")


if __name__ == "__main__":
    main()
