"""Private k nearest users to a point via interactive elimination (Liang–Yi (adaptive budgeting) §6.4, Alg. 8), local model, CGP.

φ = len_p(u) = ‖u − p‖ (1-Lipschitz). PIE-k (Liang–Yi (adaptive budgeting) Alg. 5, β0 = β/4) keeps the users whose confidence interval
overlaps the k-th smallest; eliminated users stop paying. If exactly k remain they are the answer (correct
w.p. 1 − β0, Cor. 6.5); otherwise the k smallest among G_c of

* PM0 (point privatisation): ‖x̄_i − p‖ (Lemma 6.6);   * PM1 (distance privatisation): ȳ_i (Lemma 6.7).

Baselines BM0 / BM1 rank ‖x̃_i − p‖ or ỹ_i from one release with the whole ρ_i (Liang–Yi (adaptive budgeting) §6.4.1).
Costs: ρ_i for a baseline user (:func:`knn_baseline_cost`), the executed rounds for PIE (:func:`knn_pie_cost`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streamdp.accounting.cost import Cost
from streamdp.mechanisms.adaptive.pie import (
    check_points,
    check_privatization,
    check_query_point,
    distance_to,
    per_user_rho,
    check_probability,
    distance_triple,
    gaussian_mechanism,
    pie_cost,
    pie_k,
    point_triple,
    privacy_savings,
    split_rounds,
)

__all__ = ["KNNResult", "knn_pie", "knn_baseline", "knn_pie_cost", "knn_baseline_cost", "true_knn", "dist_error"]

#: Liang–Yi (adaptive budgeting) §6.4.2: β0 = 0.25β, β1 = 0.75β.
BETA0_FRACTION = 0.25


@dataclass
class KNNResult:
    """``indices``: the k selected users, nearest first by their private estimate."""

    indices: np.ndarray
    method: str
    executed_rho: np.ndarray
    allocated_rho: np.ndarray
    n_eliminated_early: int = 0
    survivors: int = 0
    rounds: int = 1

    @property
    def privacy_savings(self) -> float:
        return privacy_savings(self.allocated_rho, self.executed_rho)


def _setup(x, p, k, rho):
    x = check_points(x, "x")
    pt = check_query_point(p, x.shape[1])
    n = x.shape[0]
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not (1 <= k < n):
        raise ValueError(f"k must be an integer with 1 ≤ k < n = {n}, got {k!r}")
    return x, pt, int(k), per_user_rho(rho, n)


def _k_smallest(score: np.ndarray, k: int) -> np.ndarray:
    idx = np.argpartition(score, k - 1)[:k]
    return idx[np.argsort(score[idx], kind="stable")]


def true_knn(x, p, k: int) -> np.ndarray:
    """argmin_{|S| = k} Σ_{i∈S} ‖x_i − p‖ (Liang–Yi (adaptive budgeting) §6.4), nearest first."""
    x, pt, k, _ = _setup(x, p, k, 1.0)
    return _k_smallest(distance_to(pt)(x), k)


def dist_error(x, p, indices, k: int) -> float:
    """DistErr = (Dist(J̃, p) − Dist(J*, p)) / Dist(J*, p) (Liang–Yi (adaptive budgeting) §7.1); requires Dist(J*, p) > 0."""
    x, pt, k, _ = _setup(x, p, k, 1.0)
    d = distance_to(pt)(x)
    best = float(np.sum(np.sort(d)[:k]))
    if best <= 0:
        raise ValueError("Dist(J*, p) = 0: the relative error is undefined")
    return (float(np.sum(d[np.asarray(indices)])) - best) / best


def knn_baseline_cost(rho_i: float) -> Cost:
    """BM0/BM1: one Gaussian release of x_i or len_p(x_i) is ρ_i-CGP (Liang–Yi (adaptive budgeting) Lemma 3.4)."""
    return Cost.cgp(float(rho_i))


def knn_pie_cost(executed_rho_i: float) -> Cost:
    """PM0/PM1: the executed PIE-k rounds, in CGP (Liang–Yi (adaptive budgeting) Alg. 5, Thm 4.4)."""
    return pie_cost(executed_rho_i)


def knn_baseline(rng: np.random.Generator, x, p, k: int, rho, *, privatization: str = "distance") -> KNNResult:
    """BM0: k smallest ‖x̃_i − p‖; BM1: k smallest ỹ_i = len_p(x_i) + Z/√(2ρ_i) (Liang–Yi (adaptive budgeting) §6.4.1)."""
    x, pt, k, r = _setup(x, p, k, rho)
    privatization = check_privatization(privatization)
    len_p = distance_to(pt)
    if privatization == "point":
        score = len_p(gaussian_mechanism(rng, x, r))
    else:
        score = gaussian_mechanism(rng, len_p(x), r)
    return KNNResult(_k_smallest(score, k), "BM0" if privatization == "point" else "BM1", r.copy(), r)


def knn_pie(
    rng: np.random.Generator,
    x,
    p,
    k: int,
    rho,
    *,
    privatization: str = "distance",
    c: int = 4,
    split: str = "even",
    beta: float = 0.1,
) -> KNNResult:
    """Liang–Yi (adaptive budgeting) Alg. 8: PIE-k(len_p, β0 = β/4); G_ĵ if |G_ĵ| = k, else PM0 / PM1 on G_c."""
    x, pt, k, r = _setup(x, p, k, rho)
    privatization = check_privatization(privatization)
    beta = check_probability(beta, "beta")
    len_p = distance_to(pt)
    triple = point_triple(x, len_p) if privatization == "point" else distance_triple(len_p(x))
    res = pie_k(rng, triple, split_rounds(r, c, split), k=k, beta0=BETA0_FRACTION * beta)
    surv = np.flatnonzero(res.survivors)
    if privatization == "point":
        score = len_p(res.mean[surv])  # ‖x̄_i − p‖, x̄_i ~ N(x_i, I/(2ρ̄_i))
    else:
        score = res.mean[surv, 0]  # ȳ_i ~ N(len_p(x_i), 1/(2ρ̄_i))
    # |G_ĵ| = k: the survivors themselves (line 3); otherwise the k smallest (line 5). Either way: rank by score.
    chosen = surv[_k_smallest(score, k)]
    return KNNResult(
        indices=chosen,
        method="PM0" if privatization == "point" else "PM1",
        executed_rho=res.executed_rho,
        allocated_rho=res.allocated_rho,
        n_eliminated_early=res.n_eliminated_early,
        survivors=int(surv.size),
        rounds=res.rounds,
    )
