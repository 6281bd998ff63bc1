"""Neighbouring streams through the whole engine: ``continual_sums`` on D and on D′ = D + one user, compared with
the (ε, δ) the filter charged that user — the long version of tests/mechanisms/test_continual_sums_laws.py.

n independent universes share one stream (disjoint users and keys; every key's noise is its own, so each universe
is an independent trial of the same neighbouring pair). In universe r: ``--background`` users put one record each on key
b_r in window 1; in D′ a user u_r adds, in windows 1–2, one record on b_r and ``--own`` records on keys nobody else
has. For events S of one universe's releases — b_r selected at window 1, b_r's count at the last window above or
below c, any of u_r's own keys ever released — the frequencies over the n universes must satisfy
Pr[D′ ∈ S] ≤ e^ε·Pr[D ∈ S] + δ and the converse, (ε, δ) from what the store charged u_r (ρ and δ spent, converted
with CKS at δ′), up to 4 binomial standard errors. Test-mode noise (seeded), engine and in-memory filter as in the
service.

    python benchmarks/bench_sums_neighbours.py [--universes 50000] [--noise blt|tree] [--own 3] [--sigma 4.0]
"""

from __future__ import annotations

import argparse
import math
import time
import warnings

import numpy as np
import orjson


def run(universes: int, with_user: bool, noise: str, own: int, sigma: float, seed: int, background: int):
    from streamdp.accounting.cost import Cost, budget_vector
    from streamdp.engine.engine import EngineConfig, ReleaseEngine
    from streamdp.engine.pipeline import EmbeddedPipeline
    from streamdp.engine.queries.continual_sums import ContinualSums
    from streamdp.filter.memory import MemoryBudgetStore
    from streamdp.outputs.sinks import ListSink

    L = 8
    q = ContinualSums("s", sigma=sigma, horizon=L, delta_key=1e-3, max_contributions=own + 1, max_per_key=1,
                      noise=noise)
    store = MemoryBudgetStore(budget_vector(Cost.zcdp(1e6, 0.5)))
    eng = ReleaseEngine(EngineConfig(window_seconds=10.0, horizon=L, origin=0.0, unsafe_test_seed=seed), [q], store)
    evs = []
    for r in range(universes):
        for i in range(background):
            evs.append((1.0, orjson.dumps({"user": f"b{r}_{i}", "ts": 1.0, "items": [f"b{r}"]})))
        if with_user:
            evs.append((2.0, orjson.dumps({"user": f"u{r}", "ts": 2.0, "items": [f"b{r}"]})))
            for j in range(own):
                evs.append((11.0 + j, orjson.dumps({"user": f"u{r}", "ts": 11.0 + j, "items": [f"o{r}_{j}"]})))
    evs.append((10.0 * L - 1, orjson.dumps({"user": "end", "ts": 10.0 * L - 1, "items": []})))
    evs.sort(key=lambda x: x[0])
    sink = ListSink()
    EmbeddedPipeline(eng, [sink]).run([[e for _, e in evs]])
    recs = sorted(sink.records, key=lambda r: r.t)
    sel1 = np.array([f"b{r}" in recs[0].values["counts"] for r in range(universes)])
    last = recs[-1].values["counts"]
    final = np.array([last.get(f"b{r}", np.nan) for r in range(universes)], dtype=float)
    ever = set()
    for rec in recs:
        ever.update(k for k in rec.values["counts"] if k.startswith("o"))
    own_rel = np.array([any(f"o{r}_{j}" in ever for j in range(own)) for r in range(universes)])
    spent = None
    if with_user:
        u = store.get_user("u0")
        spent = (u.spent[0] / 1e12, u.spent[1] / 1e18)
    return sel1, final, own_rel, spent


def main() -> None:
    warnings.simplefilter("ignore")
    from streamdp.accounting.zcdp import cks_epsilon

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--universes", type=int, default=50000)
    ap.add_argument("--noise", choices=("blt", "tree"), default="blt")
    ap.add_argument("--own", type=int, default=3)
    ap.add_argument("--sigma", type=float, default=4.0)
    ap.add_argument("--delta-prime", type=float, default=1e-3)
    ap.add_argument("--background", type=int, default=15, help="users on key b (near T₁ = 1 + 3.66·σ at σ = 4)")
    a = ap.parse_args()
    n = a.universes
    t0 = time.perf_counter()
    s0, c0, o0, _ = run(n, False, a.noise, a.own, a.sigma, 101, a.background)
    s1, c1, o1, (rho, delta_u) = run(n, True, a.noise, a.own, a.sigma, 202, a.background)
    eps = float(cks_epsilon(rho, a.delta_prime))
    delta = delta_u + a.delta_prime
    print(f"# neighbouring streams, {n:,} universes, noise {a.noise}, σ = {a.sigma}, {a.background} users on b, "
          f"the user: 1 record on b and "
          f"{a.own} of their own ({time.perf_counter() - t0:.1f} s)")
    print(f"charged to the user: ρ = {rho:.4f}, δ = {delta_u:.3g} → claimed (ε, δ) = ({eps:.3f}, {delta:.3g}) "
          f"(CKS at δ′ = {a.delta_prime:g})")
    events = {"b selected at window 1": (s0, s1), "an own key ever released": (o0, o1)}
    for c in range(a.background - 9, a.background + 13, 3):
        events[f"b's last count ≥ {c}"] = (np.nan_to_num(c0, nan=-1e9) >= c, np.nan_to_num(c1, nan=-1e9) >= c)
        events[f"b's last count ≤ {c}"] = (np.nan_to_num(c0, nan=1e9) <= c, np.nan_to_num(c1, nan=1e9) <= c)
    print(f"| event | Pr[D] | Pr[D′] | max ratio allowed e^ε | within (ε, δ) |\n|---|---|---|---|---|")
    bad = 0
    for name, (a0, a1) in events.items():
        p0, p1 = a0.mean(), a1.mean()
        margin = 4 * math.sqrt((p0 * (1 - p0) + p1 * (1 - p1)) / n + 1e-12)
        ok = p1 <= math.exp(eps) * p0 + delta + margin and p0 <= math.exp(eps) * p1 + delta + margin
        bad += not ok
        print(f"| {name} | {p0:.5f} | {p1:.5f} | {math.exp(eps):.3f} | {'yes' if ok else 'NO'} |")
    print(f"violations: {bad}")


if __name__ == "__main__":
    main()
