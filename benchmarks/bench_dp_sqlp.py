"""The DP-SQLP workload (docs/contract.md §7): Zipf items over 10⁵ keys, 10⁵ users, 20k records per tick, 100 ticks,
user-level (ε = 6, δ = 1e-9). Prints wall time and the L∞ / L2 error of the continual counts at the last window.

Calibration (user level, docs/contract.md §3): every user may contribute to at most K distinct items over the horizon
(enforced by the per-user filter: budget ρ_B = K·ρ_item, δ_B = K·δ_item + nothing else). The total δ = 1e-9 is
split half for the zCDP→DP conversion and half for the K items' thresholds; ρ_B is the largest ρ whose tight (CKS)
conversion at δ/2 gives ε ≤ 6; σ = √(levels·K / (2ρ_B)).

    python benchmarks/bench_dp_sqlp.py [--ticks 100] [--records 20000] [--users 100000] [--keys 100000] [--K 20]
"""

from __future__ import annotations

import argparse
import math
import os
import time
import warnings

import numpy as np
import orjson

from streamdp.accounting.cost import Cost, budget_vector
from streamdp.accounting.zcdp import cks_epsilon
from streamdp.engine.engine import EngineConfig, ReleaseEngine
from streamdp.engine.pipeline import EmbeddedPipeline
from streamdp.engine.queries.continual_counts import ContinualCounts
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.mechanisms.binary_tree import levels_for_horizon
from streamdp.noise.generator import synthetic_data_generator
from streamdp.outputs.sinks import ListSink


def rho_for_epsilon(eps: float, delta: float) -> float:
    lo, hi = 1e-8, eps
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if cks_epsilon(mid, delta) <= eps:
            lo = mid
        else:
            hi = mid
    return lo


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ticks", type=int, default=100)
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--users", type=int, default=100_000)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--zipf", type=float, default=1.1)
    ap.add_argument("--K", type=int, default=20, help="distinct items a user may contribute to over the horizon")
    ap.add_argument("--epsilon", type=float, default=6.0)
    ap.add_argument("--delta", type=float, default=1e-9)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    warnings.simplefilter("ignore")

    L = a.ticks
    levels = levels_for_horizon(L)
    rho_b = rho_for_epsilon(a.epsilon, a.delta / 2)
    delta_item = (a.delta / 2) / a.K
    sigma = math.sqrt(levels * a.K / (2 * rho_b))

    g = synthetic_data_generator(a.seed)
    p = np.arange(1, a.keys + 1, dtype=float) ** (-a.zipf)
    p /= p.sum()
    t_gen = time.perf_counter()
    ticks = []
    for t in range(L):
        users = g.integers(0, a.users, a.records)
        items = g.choice(a.keys, size=a.records, p=p)
        ts = t * 60.0 + g.random(a.records) * 59.0
        order = np.argsort(ts)
        ticks.append([orjson.dumps({"user": f"u{users[i]}", "ts": float(ts[i]), "items": [f"k{items[i]}"]})
                      for i in order])
    gen_s = time.perf_counter() - t_gen

    q = ContinualCounts("counts", sigma=sigma, horizon=L, delta_item=delta_item, max_items_per_window=1,
                        max_per_item=1)
    store = MemoryBudgetStore(budget_vector(Cost.zcdp(a.K * q.item_cost.zcdp_rho * (1 + 1e-9),
                                                      a.K * delta_item * (1 + 1e-9))))
    eng = ReleaseEngine(EngineConfig(window_seconds=60.0, horizon=L, origin=0.0, unsafe_test_seed=a.seed), [q], store)
    sink = ListSink()
    pipe = EmbeddedPipeline(eng, [sink])
    t0 = time.perf_counter()
    for batch in ticks:
        pipe.feed(batch)
    for s in eng.flush():
        sink.records.extend(s.records)
    wall = time.perf_counter() - t0
    n_events = L * a.records

    # ground truth the mechanism targets: distinct ADMITTED (user, item) pairs under the same bounding — recompute
    # from the bounder's committed pairs (exact, non-private, for evaluation only)
    keys = eng.queries[0].bounder._keys
    item_ids = keys & np.int64(0xFFFFFFFF)
    true_counts = np.bincount(item_ids, minlength=len(eng.items))
    last = [r for r in sink.records if r.query == "counts"][-1]
    released = last.values["counts"]
    ids = np.array([eng.items.index[k] for k in released], dtype=np.int64)
    est = np.array(list(released.values()), dtype=float)
    err = est - true_counts[ids]
    # error over ALL items: unselected items are released as 0 (not published) — the error a subscriber sees
    full = np.zeros(len(eng.items))
    full[ids] = est
    err_all = full - true_counts
    halted = sum(1 for u in store.iter_users() if u.halted)
    print(f"DP-SQLP workload: {L} ticks × {a.records} records, {a.users} users, {a.keys} Zipf({a.zipf}) keys, "
          f"(ε, δ) = ({a.epsilon}, {a.delta}) user level, K = {a.K}")
    print(f"  calibration: ρ_user = {rho_b:.4f} (CKS at δ/2), δ_item = {delta_item:.3g}, levels = {levels}, "
          f"σ = {sigma:.3f}, threshold T = {q.threshold:.1f}")
    print(f"  machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}; data generation {gen_s:.1f} s (not timed)")
    print(f"  wall time {wall:.2f} s for {n_events:,} events → {n_events / wall:,.0f} events/s; "
          f"halted users {halted:,}")
    print(f"  last window: {len(released):,} items selected of {len(eng.items):,} seen")
    print(f"  selected items:  L∞ error {np.abs(err).max():.1f}, L2 error {np.sqrt((err ** 2).sum()):.1f}, "
          f"RMSE {np.sqrt((err ** 2).mean()):.2f} (σ√popcount(L) = {sigma * math.sqrt(bin(L).count('1')):.2f})")
    print(f"  all items:       L∞ error {np.abs(err_all).max():.1f}, L2 error {np.sqrt((err_all ** 2).sum()):.1f}")


if __name__ == "__main__":
    main()
