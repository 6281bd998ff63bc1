"""Private nearest neighbours under geo-privacy: PNN (Liang–Yi (CGP) Alg. 2), k-PNN (Liang–Yi (CGP) Alg. 3) and the "Basic" baseline.

Input: a tuple x = (x_1, …, x_n) of points (dist_∞ between tuples, Liang–Yi (CGP) §4), a public query point p.
g_i(x; p) = ‖x_i − p‖ is 1-Lipschitz and so is h(x_I; p) = min_{i∈I} g_i (Liang–Yi (CGP) Lemma 4.9).

**PNN(x, p, I, ε; γ0)** (Liang–Yi (CGP) Alg. 2): T = h(x_I; p) + Z + γ0 with Z ~ Lap(3/ε) (ε/3-GP), then
SVT(2ε/3, T, K = 1) over g_{I[0]}, g_{I[1]}, …, cycling through I with fresh query noise at each visit
(2ε/3-GP, Liang–Yi (CGP) Thm D.1); return I[t mod m]. Total ε-GP (basic composition, Liang–Yi (CGP) Lemma 2.7) ⇒ ε²/2-CGP.
γ0 ≥ 0 trades error for running time: γ0 = γ (Liang–Yi (CGP) Thm 4.10) halts within the first cycle w.p. ≥ 1 − β;
γ0 = 0 (Thm 4.11) runs in expected O(m); γ0 < 0 (the paper's experiments) can take exponentially long, so the
SVT is capped at ``max_cycles``·m steps and, if it never halts, PNN returns a uniformly random index of I — the SVT
output ⊥^cap is covered by its privacy proof and the fallback is data-independent post-processing.

**k-PNN** (Liang–Yi (CGP) Alg. 3): k PNN calls at ε_j = √(2ρ/k) (ρ/k-CGP each) removing each found index: ρ-CGP
(Liang–Yi (CGP) Thm 3.2). The ε-GP variant uses ε/k per call. Returns indices only.

**Basic** (Liang–Yi (CGP) §5): privatise all n points with the identity query (ρ-CGP or ε-GP) and take the exact kNN of the
noisy points.

Units: ε per coordinate unit, ρ per coordinate unit².

Float noise (review 12). PNN publishes no float: its Laplace threshold noise and the SVT's query noise are float64
(x + Lap in floating point) but only the outcomes of the comparisons g_i + V ≤ T + W are used — an index, and in
the engine not even that (:mod:`streamdp.engine.queries.geo`). Float rounding can move a comparison's outcome
only when the two sides are within a few ulp of each other, an event of probability about ulp(|values|)/b per
comparison (b the Laplace scale): a δ-level distance from the exact-real mechanism, like the samplers' own
53-bit resolution (:mod:`streamdp.noise.samplers`), not a published low-bit channel (Mironov 2012 needs the noisy
float itself). The Basic baseline's identity query is released on the grid
(:class:`~streamdp.mechanisms.geo.gaussian_cgp.IdentityQueryCGP`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from streamdp.mechanisms.geo._checks import _pos, _points
from streamdp.accounting.cost import Cost
from streamdp.mechanisms.geo.gaussian_cgp import IdentityQueryCGP
from streamdp.mechanisms.geo.planar_laplace import IdentityQueryGP, gp_cost
from streamdp.mechanisms.geo.svt import SparseVectorGP
from streamdp.noise import samplers

__all__ = [
    "PNNResult",
    "pnn",
    "pnn_cost",
    "theorem_4_10_gamma",
    "k_pnn",
    "k_pnn_cost",
    "k_pnn_epsilon",
    "basic_knn",
    "knn_distance_ratio",
]


@dataclass(frozen=True)
class PNNResult:
    """``index``: the chosen index into the tuple; ``steps``: SVT queries answered; ``fell_back``: the SVT hit its
    cap and the index is the data-independent fallback."""

    index: int
    steps: int
    fell_back: bool


def _query_point(p, d: int) -> np.ndarray:
    q = np.asarray(p, dtype=np.float64)
    if q.shape != (d,) or not np.all(np.isfinite(q)):
        raise ValueError(f"p must be a finite point of dimension {d}")
    return q


def theorem_4_10_gamma(epsilon: float, m: int, beta: float) -> float:
    """γ = γ1 + γ2 of Liang–Yi (CGP) Thm 4.10: γ1 = (3/ε)(√(2 log((m+1)/β)) + log((m+1)/β)), γ2 = (6/ε) log((m+1)/β)."""
    epsilon = _pos(epsilon, "epsilon")
    if not (0.0 < float(beta) < 1.0):
        raise ValueError(f"beta must lie in (0, 1), got {beta!r}")
    lg = math.log((int(m) + 1) / float(beta))
    return (3.0 / epsilon) * (math.sqrt(2.0 * lg) + lg) + (6.0 / epsilon) * lg


def pnn_cost(epsilon: float) -> Cost:
    """PNN is ε-GP (ε/3 for T, 2ε/3 for the SVT; Liang–Yi (CGP) §4.3) ⇒ Cost.cgp(ε²/2) (Liang–Yi (CGP) Lemma 3.6)."""
    return gp_cost(epsilon)


def _pnn_on_distances(
    rng: np.random.Generator, dist: np.ndarray, epsilon: float, gamma0: float, max_cycles: int
) -> tuple[int, int, bool]:
    """PNN on the distances of the candidate set; returns (position in the candidate set, steps, fell_back)."""
    m = dist.size
    # Float noise on purpose: T is never published, only compared inside the SVT, whose sole output is the index
    # of the first g_i + V ≤ T + W. A rounding can flip a comparison only within a few ulp of equality
    # (probability ~ ulp/b per comparison): a δ-level effect, not the published-float leak of Mironov 2012 that
    # the granular releases (granular_gaussian) close (module docstring, "Float noise").
    t = float(dist.min()) + float(samplers.laplace(rng, 3.0 / epsilon)) + gamma0  # ε/3-GP (h is 1-Lipschitz)
    res = SparseVectorGP(2.0 * epsilon / 3.0, 1.0).run(rng, dist, t, cycle=True, max_steps=max_cycles * m)
    if res.index is None:
        return int(rng.integers(0, m)), res.steps, True  # data-independent fallback
    return res.index % m, res.steps, False


def pnn(
    rng: np.random.Generator,
    points,
    p,
    epsilon: float,
    indices=None,
    gamma0: float | str = 0.0,
    beta: float = 0.05,
    max_cycles: int = 1000,
) -> PNNResult:
    """Liang–Yi (CGP) Alg. 2: ε-GP private nearest neighbour of ``p`` among ``points[indices]`` (all points by default).

    ``gamma0``: a distance (may be negative) or ``"thm4.10"`` for γ of Liang–Yi (CGP) Thm 4.10 at failure probability β.
    """
    x = _points(points)
    q = _query_point(p, x.shape[1])
    epsilon = _pos(epsilon, "epsilon")
    idx = np.arange(x.shape[0]) if indices is None else np.asarray(indices, dtype=np.int64).ravel()
    if idx.size == 0:
        raise ValueError("indices must be non-empty")
    if idx.min() < 0 or idx.max() >= x.shape[0]:
        raise ValueError("indices out of range")
    if isinstance(max_cycles, bool) or int(max_cycles) < 1:
        raise ValueError(f"max_cycles must be a positive integer, got {max_cycles!r}")
    if isinstance(gamma0, str):
        if gamma0 != "thm4.10":
            raise ValueError(f"gamma0 must be a number or 'thm4.10', got {gamma0!r}")
        g0 = theorem_4_10_gamma(epsilon, idx.size, beta)
    else:
        g0 = float(gamma0)
        if not math.isfinite(g0):
            raise ValueError(f"gamma0 must be finite, got {gamma0!r}")
    dist = np.sqrt(((x[idx] - q) ** 2).sum(axis=1))
    pos, steps, fb = _pnn_on_distances(rng, dist, epsilon, g0, int(max_cycles))
    return PNNResult(index=int(idx[pos]), steps=steps, fell_back=fb)


def k_pnn_epsilon(k: int, rho: float | None = None, epsilon: float | None = None) -> float:
    """Per-call PNN budget: √(2ρ/k) (CGP version, Liang–Yi (CGP) Alg. 3) or ε/k (GP version)."""
    if (rho is None) == (epsilon is None):
        raise ValueError("give exactly one of rho (CGP) or epsilon (GP)")
    if isinstance(k, bool) or int(k) != k or int(k) < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    if rho is not None:
        return math.sqrt(2.0 * _pos(rho, "rho") / int(k))
    return _pos(epsilon, "epsilon") / int(k)


def k_pnn_cost(k: int, rho: float | None = None, epsilon: float | None = None) -> Cost:
    """k calls of PNN at ε_j: Σ ε_j²/2 CGP = ρ (CGP version) or ε-GP ⇒ ε²/2 (GP version) — Liang–Yi (CGP) Alg. 3, Thm 3.2."""
    k_pnn_epsilon(k, rho, epsilon)  # validation
    if rho is not None:
        return Cost.cgp(float(rho))
    return gp_cost(float(epsilon))


def k_pnn(
    rng: np.random.Generator,
    points,
    p,
    k: int,
    rho: float | None = None,
    epsilon: float | None = None,
    gamma0_factor: float = 0.0,
    max_cycles: int = 1000,
) -> np.ndarray:
    """Liang–Yi (CGP) Alg. 3: indices (in the order found) of k private nearest neighbours of ``p``.

    Exactly one of ``rho`` (ρ-CGP; per call √(2ρ/k)-GP) or ``epsilon`` (ε-GP; per call ε/k).
    ``gamma0_factor`` c sets γ0 = c/ε_j in every call (0: Thm 4.11; the paper's experiments use c = −6).
    """
    x = _points(points)
    q = _query_point(p, x.shape[1])
    eps_j = k_pnn_epsilon(k, rho, epsilon)
    k = int(k)
    if k > x.shape[0]:
        raise ValueError(f"k={k} exceeds the number of points n={x.shape[0]}")
    g0 = float(gamma0_factor) / eps_j
    if isinstance(max_cycles, bool) or int(max_cycles) < 1:
        raise ValueError(f"max_cycles must be a positive integer, got {max_cycles!r}")
    remaining = np.arange(x.shape[0])
    dist_all = np.sqrt(((x - q) ** 2).sum(axis=1))
    found = np.empty(k, dtype=np.int64)
    for j in range(k):
        pos, _, _ = _pnn_on_distances(rng, dist_all[remaining], eps_j, g0, int(max_cycles))
        found[j] = remaining[pos]
        remaining = np.delete(remaining, pos)
    return found


def basic_knn(
    rng: np.random.Generator, points, p, k: int, rho: float | None = None, epsilon: float | None = None
) -> np.ndarray:
    """Baseline (Liang–Yi (CGP) §5 "Basic"): noisy copy of all points (ρ-CGP Gaussian or ε-GP planar Laplace identity
    query), then the exact k nearest noisy points. Cost: Cost.cgp(ρ) or gp_cost(ε)."""
    x = _points(points)
    q = _query_point(p, x.shape[1])
    if (rho is None) == (epsilon is None):
        raise ValueError("give exactly one of rho (CGP) or epsilon (GP)")
    if isinstance(k, bool) or int(k) != k or not (1 <= int(k) <= x.shape[0]):
        raise ValueError(f"k must be an integer in [1, n], got {k!r}")
    noisy = IdentityQueryCGP(rho).release(rng, x) if rho is not None else IdentityQueryGP(epsilon).release(rng, x)
    d = ((noisy - q) ** 2).sum(axis=1)
    k = int(k)
    part = np.argpartition(d, k - 1)[:k]
    return part[np.argsort(d[part])]


def knn_distance_ratio(points, p, found) -> float:
    """Quality of a kNN answer (Liang–Yi (CGP) §5): Σ distances of the returned points / Σ distances of the true kNN (≥ 1)."""
    x = _points(points)
    q = _query_point(p, x.shape[1])
    found = np.asarray(found, dtype=np.int64)
    d = np.sqrt(((x - q) ** 2).sum(axis=1))
    k = found.size
    true = np.partition(d, k - 1)[:k].sum()
    got = d[found].sum()
    if true == 0:
        return 1.0 if got == 0 else math.inf
    return float(got / true)
