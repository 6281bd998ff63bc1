"""The earth mover's distance d_EM between users' multisets (Imola et al. (EMD) §2.2, Def. 2.4; implementation notes on Imola et al. (EMD)).

A user's data is a multiset D over a finite metric domain (X, d_X) with d_X ≤ 1; h(D) is its normalised
histogram and d_EM(D, D') is the optimal-transport cost between h(D) and h(D') under the ground cost d_X:

    d_EM(h, h') = min_{π ∈ Π(h, h')} Σ_{x,y} π(x, y)·d_X(x, y).

For equal sizes the optimum moves every item to one partner (Birkhoff–von Neumann, Imola et al. (EMD) Lemma 2.1), so
d_EM = (1/m)·min_σ Σ_i d_X(x_i, x'_σ(i)) — an assignment problem (scipy ``linear_sum_assignment``). In general it is
a transport linear programme (scipy ``linprog``/HiGHS). Because d_X is a metric, an optimal plan leaves the
common mass min(h, h') in place, so only the excess (h − h')₊ has to be moved to (h' − h)₊; we solve that smaller
programme.

Also here: the clustered metric of Imola et al. (EMD) §6.2 and the Euclidean projection onto the probability simplex (used to
turn an unbiased but possibly negative frequency estimate ĥ into a distribution before measuring d_EM).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment, linprog

__all__ = [
    "clustered_metric",
    "emd_histograms",
    "emd_items",
    "emd_points",
    "histogram",
    "project_to_simplex",
]


def _distance_matrix(dist) -> np.ndarray:
    d = np.asarray(dist, dtype=np.float64)
    if d.ndim != 2 or d.shape[0] != d.shape[1]:
        raise ValueError(f"dist must be a square matrix, got shape {d.shape}")
    if not np.all(np.isfinite(d)) or np.any(d < 0):
        raise ValueError("dist must have finite, non-negative entries")
    # a metric (the common-mass cancellation below relies on it): zero diagonal and symmetric, checked here in
    # O(k²); the triangle inequality (O(k³)) is the caller's promise
    if np.any(np.diag(d) != 0) or not np.array_equal(d, d.T):
        raise ValueError("dist must be a metric: zero on the diagonal and symmetric")
    return d


def clustered_metric(c: int, g: int, gamma: float) -> np.ndarray:
    """The clustered metric of Imola et al. (EMD) §6.2 on k = c·g items: 0 on the diagonal, γ within a cluster, 1 across.

    Item i belongs to cluster i // g. Requires 0 < γ ≤ 1 (then it is a metric with diameter ≤ 1).
    """
    c, g = int(c), int(g)
    if c < 1:
        raise ValueError(f"c (number of clusters) must be ≥ 1, got {c}")
    if g < 1:
        raise ValueError(f"g (cluster size) must be ≥ 1, got {g}")
    gamma = float(gamma)
    if not (0.0 < gamma <= 1.0):
        raise ValueError(f"gamma must lie in (0, 1], got {gamma}")
    k = c * g
    cluster = np.arange(k) // g
    d = np.where(cluster[:, None] == cluster[None, :], gamma, 1.0)
    np.fill_diagonal(d, 0.0)
    return d


def histogram(items, k: int) -> np.ndarray:
    """Normalised histogram h(D) ∈ Δ_k of a multiset of item indices in [0, k)."""
    items = np.asarray(items)
    if items.ndim != 1 or items.size == 0:
        raise ValueError("items must be a non-empty 1-D array of item indices")
    if not np.issubdtype(items.dtype, np.integer):
        raise ValueError("items must be integer item indices")
    if items.min() < 0 or items.max() >= k:
        raise ValueError(f"items must lie in [0, {k})")
    return np.bincount(items, minlength=k).astype(np.float64) / items.size


def emd_histograms(h1, h2, dist) -> float:
    """d_EM between two distributions on a finite metric space (transport LP, HiGHS).

    ``h1``, ``h2``: non-negative vectors of equal total mass (normalised histograms); ``dist``: k×k ground metric.
    """
    d = _distance_matrix(dist)
    h1 = np.asarray(h1, dtype=np.float64)
    h2 = np.asarray(h2, dtype=np.float64)
    k = d.shape[0]
    if h1.shape != (k,) or h2.shape != (k,):
        raise ValueError(f"h1 and h2 must have shape ({k},), got {h1.shape} and {h2.shape}")
    if np.any(h1 < -1e-12) or np.any(h2 < -1e-12):
        raise ValueError("h1 and h2 must be non-negative (project onto the simplex first)")
    if abs(h1.sum() - h2.sum()) > 1e-9 * max(1.0, h1.sum()):
        raise ValueError(f"h1 and h2 must have equal mass, got {h1.sum()} and {h2.sum()}")
    diff = h1 - h2
    src = np.flatnonzero(diff > 0)
    dst = np.flatnonzero(diff < 0)
    if src.size == 0 or dst.size == 0:
        return 0.0
    supply = diff[src]
    demand = -diff[dst]
    if src.size == 1 or dst.size == 1:  # a single source or sink: the plan is forced
        return float(np.sum(np.outer(supply, demand) / supply.sum() * d[np.ix_(src, dst)]))
    ns, nd = src.size, dst.size
    cost = d[np.ix_(src, dst)].ravel()
    # row sums = supply (ns equalities), column sums = demand (nd equalities); one is redundant, HiGHS copes.
    a_rows = np.kron(np.eye(ns), np.ones((1, nd)))
    a_cols = np.kron(np.ones((1, ns)), np.eye(nd))
    res = linprog(
        cost,
        A_eq=np.vstack([a_rows, a_cols]),
        b_eq=np.concatenate([supply, demand * (supply.sum() / demand.sum())]),
        bounds=(0, None),
        method="highs",
    )
    if not res.success:  # pragma: no cover - a feasible bounded LP always solves
        raise RuntimeError(f"transport LP failed: {res.message}")
    return float(res.fun)


def emd_items(a, b, dist) -> float:
    """d_EM between two multisets of item indices over the finite metric ``dist`` (sizes may differ)."""
    d = _distance_matrix(dist)
    k = d.shape[0]
    ha, hb = histogram(a, k), histogram(b, k)  # validates both multisets
    a = np.asarray(a)
    b = np.asarray(b)
    if a.size == b.size and a.size <= 2000:  # Birkhoff–von Neumann: an assignment problem
        r, c = linear_sum_assignment(d[np.ix_(a, b)])
        return float(d[a[r], b[c]].sum() / a.size)
    return emd_histograms(ha, hb, d)


def emd_points(a, b) -> float:
    """d_EM between two multisets of points in ℝ^d under the Euclidean ground metric (sizes may differ).

    Equal sizes: assignment problem; otherwise the transport LP with weights 1/|a| and 1/|b|.
    """
    a = np.asarray(a, dtype=np.float64)  # no atleast_2d: a flat [0, 1] would be ONE point in ℝ², not two in ℝ
    b = np.asarray(b, dtype=np.float64)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"a and b must be (m, d) arrays of the same d (1-D points as [[x], …]), got {a.shape} "
                         f"and {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("a and b must be finite")
    if a.shape[0] == 0 or b.shape[0] == 0:
        raise ValueError("a and b must be non-empty")
    cost = np.sqrt(((a[:, None, :] - b[None, :, :]) ** 2).sum(-1))
    if a.shape[0] == b.shape[0]:
        r, c = linear_sum_assignment(cost)
        return float(cost[r, c].sum() / a.shape[0])
    na, nb = a.shape[0], b.shape[0]
    a_rows = np.kron(np.eye(na), np.ones((1, nb)))
    a_cols = np.kron(np.ones((1, na)), np.eye(nb))
    res = linprog(
        cost.ravel(),
        A_eq=np.vstack([a_rows, a_cols]),
        b_eq=np.concatenate([np.full(na, 1.0 / na), np.full(nb, 1.0 / nb)]),
        bounds=(0, None),
        method="highs",
    )
    if not res.success:  # pragma: no cover
        raise RuntimeError(f"transport LP failed: {res.message}")
    return float(res.fun)


def project_to_simplex(v) -> np.ndarray:
    """Euclidean projection of a vector onto the probability simplex {h ≥ 0, Σh = 1} (sort-based, O(k log k)).

    The projection is h_i = max(v_i − θ, 0) with θ chosen so that Σh = 1.
    """
    v = np.asarray(v, dtype=np.float64)
    if v.ndim != 1 or v.size == 0:
        raise ValueError("v must be a non-empty 1-D vector")
    if not np.all(np.isfinite(v)):
        raise ValueError("v must be finite")
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - 1.0
    idx = np.arange(1, v.size + 1)
    rho = np.flatnonzero(u - css / idx > 0)[-1]
    theta = css[rho] / (rho + 1.0)
    return np.maximum(v - theta, 0.0)
