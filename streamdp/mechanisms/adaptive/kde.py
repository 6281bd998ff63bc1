"""Private Gaussian KDE at a point via iterative elimination (Liang–Yi (adaptive budgeting) §6.3, Alg. 7), local model, CGP.

f(x_1..x_n; p, b) = (1/n) Σ_i exp(−‖x_i − p‖²/(2b²)). φ = len_p(u) = ‖u − p‖ is 1-Lipschitz (the paper's Alg. 7
passes Proj_Γ by mistake; implementation notes on Liang–Yi (adaptive budgeting)). PIE-NI with ν_low = −∞, ν_high = 6b moves users confidently farther
than 6b into S0 (each contributes at most e^{−18}/n) and stops charging them. If every user is eliminated the
estimate is 0 (Alg. 7 line 3, error ≤ e^{−18} w.p. 1 − β0, Cor. 6.4); otherwise

* PM0 (point privatisation):   (1/n) Σ_{G_c} exp(−len_p(x̄_i)²/(2b²)) + |S0|·e^{−18}/n;
* PM1 (distance privatisation): (1/n) Σ_{G_c} exp(−ȳ_i²/(2b²)) + |S0|·e^{−18}/n.

Baselines BM0 / BM1 release x̃_i or ỹ_i once with the whole ρ_i. Costs as in range counting: ρ_i for a
baseline user (:func:`kde_baseline_cost`), the executed rounds for PIE (:func:`kde_pie_cost`).
"""

from __future__ import annotations

import math
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
    pie_ni,
    point_triple,
    privacy_savings,
    split_rounds,
)

__all__ = ["KDEResult", "kde_value", "kde_pie", "kde_baseline", "kde_pie_cost", "kde_baseline_cost", "KDE_CUTOFF"]

#: ν_high = 6b (Liang–Yi (adaptive budgeting) §6.3.2): a user farther than 6b contributes at most e^{−18}/n.
KDE_CUTOFF = 6.0
_TAIL = math.exp(-0.5 * KDE_CUTOFF**2)  # e^{−18}


@dataclass
class KDEResult:
    estimate: float
    method: str
    executed_rho: np.ndarray
    allocated_rho: np.ndarray
    n_eliminated_early: int = 0
    s0_count: int = 0
    survivors: int = 0
    rounds: int = 1

    @property
    def privacy_savings(self) -> float:
        return privacy_savings(self.allocated_rho, self.executed_rho)


def _setup(x, p, b, rho):
    x = check_points(x, "x")
    pt = check_query_point(p, x.shape[1])
    b = float(b)
    if not (math.isfinite(b) and b > 0):
        raise ValueError(f"b (bandwidth) must be finite and > 0, got {b!r}")
    return x, pt, b, per_user_rho(rho, x.shape[0])


def _kernel(dist, b: float) -> np.ndarray:
    return np.exp(-np.square(dist) / (2.0 * b * b))


def kde_value(x, p, b: float) -> float:
    """The exact f(x_1..x_n; p, b) (Liang–Yi (adaptive budgeting) §6.3)."""
    x, pt, b, _ = _setup(x, p, b, 1.0)
    if x.shape[0] == 0:
        return 0.0
    return float(np.mean(_kernel(distance_to(pt)(x), b)))


def kde_baseline_cost(rho_i: float) -> Cost:
    """BM0/BM1: one Gaussian release of x_i or len_p(x_i) (1-Lipschitz) is ρ_i-CGP (Liang–Yi (adaptive budgeting) Lemma 3.4)."""
    return Cost.cgp(float(rho_i))


def kde_pie_cost(executed_rho_i: float) -> Cost:
    """PM0/PM1: the executed PIE-NI rounds, in CGP (Liang–Yi (adaptive budgeting) Alg. 4, Thm 4.4)."""
    return pie_cost(executed_rho_i)


def kde_baseline(rng: np.random.Generator, x, p, b: float, rho, *, privatization: str = "point") -> KDEResult:
    """BM0: (1/n) Σ exp(−len_p(x̃_i)²/(2b²)); BM1: (1/n) Σ exp(−ỹ_i²/(2b²)) (Liang–Yi (adaptive budgeting) §6.3.1)."""
    x, pt, b, r = _setup(x, p, b, rho)
    privatization = check_privatization(privatization)
    n = x.shape[0]
    len_p = distance_to(pt)
    if n == 0:
        est = 0.0
    elif privatization == "point":
        est = float(np.sum(_kernel(len_p(gaussian_mechanism(rng, x, r)), b)) / n)
    else:
        est = float(np.sum(_kernel(gaussian_mechanism(rng, len_p(x), r), b)) / n)
    return KDEResult(est, "BM0" if privatization == "point" else "BM1", r.copy(), r)


def kde_pie(
    rng: np.random.Generator,
    x,
    p,
    b: float,
    rho,
    *,
    privatization: str = "point",
    c: int = 4,
    split: str = "even",
    beta0: float = 0.025,
) -> KDEResult:
    """Liang–Yi (adaptive budgeting) Alg. 7 with φ = len_p, ν_low = −∞, ν_high = 6b; PM0 / PM1 on the survivors G_c."""
    x, pt, b, r = _setup(x, p, b, rho)
    privatization = check_privatization(privatization)
    beta0 = check_probability(beta0, "beta0")
    n = x.shape[0]
    len_p = distance_to(pt)
    triple = point_triple(x, len_p) if privatization == "point" else distance_triple(len_p(x))
    round_rho = split_rounds(r, c, split) if n else np.zeros((0, c))
    res = pie_ni(rng, triple, round_rho, beta0=beta0, nu_low=-math.inf, nu_high=KDE_CUTOFF * b)
    surv = np.flatnonzero(res.survivors)
    s0 = int(np.count_nonzero(res.s0))
    if surv.size == 0:
        est = 0.0  # Alg. 7 line 3
    else:
        if privatization == "point":
            k = _kernel(len_p(res.mean[surv]), b)  # x̄_i ~ N(x_i, I/(2ρ_i)) (Fact 6.2)
        else:
            k = _kernel(res.mean[surv, 0], b)  # ȳ_i ~ N(len_p(x_i), 1/(2ρ_i))
        est = float((np.sum(k) + s0 * _TAIL) / n)
    return KDEResult(
        estimate=est,
        method="PM0" if privatization == "point" else "PM1",
        executed_rho=res.executed_rho,
        allocated_rho=res.allocated_rho,
        n_eliminated_early=res.n_eliminated_early,
        s0_count=s0,
        survivors=int(surv.size),
        rounds=res.rounds,
    )
