"""Private threshold query via iterative elimination, central model (Liang–Yi (adaptive budgeting) App. C, Alg. 9), zCDP.

One curator holds N records; H(x_1) is the subset satisfying a predicate. Question: is |H(x_1)| < qN?
φ = |H(·)| has sensitivity 1 under the Hamming metric, so M(·, ρ) = |H(·)| + Z/√(2ρ) is ρ-zCDP (Bun–Steinke
2016 Prop. 1.6; Liang–Yi (adaptive budgeting) App. C works in ρ-CDP). PIE-NI on the single "user" (G_0 = {1}) with ν_low = ν_high = qN
and triple (M(·;|H|), g1, h1) of Liang–Yi (adaptive budgeting) Cor. 6.2:

* eliminated (G_ĵ = ∅): answer Yes iff 1 ∈ S1, i.e. the count is confidently below qN — the paper's Alg. 9
  swaps S0/S1 (implementation notes on Liang–Yi (adaptive budgeting)); correct w.p. 1 − β0 (Cor. C.1);
* otherwise, after all c rounds: Yes iff ȳ < qN with ȳ ~ N(|H(x_1)|, 1/(2ρ_1)) (Fact 6.2) — the baseline BM1.

Cost: the executed rounds Σ_{s ≤ ĵ} r_{1,s} in zCDP (:func:`threshold_cost`), at most ρ_1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from streamdp.accounting.cost import Cost
from streamdp.mechanisms.adaptive.pie import (
    check_probability,
    check_rho,
    distance_triple,
    gaussian_mechanism,
    pie_ni,
    split_rounds,
)

__all__ = ["ThresholdResult", "threshold_query_pie", "threshold_query_baseline", "threshold_cost"]


@dataclass
class ThresholdResult:
    """``answer`` is True for Yes (|H| < qN). ``executed_rho`` is the zCDP cost to settle, ``allocated_rho``
    the reservation ρ_1; ``eliminated`` is True when PIE-NI categorised the curator (S0 or S1), possibly before
    round c."""

    answer: bool
    method: str
    executed_rho: float
    allocated_rho: float
    rounds: int = 1
    eliminated: bool = False

    @property
    def privacy_savings(self) -> float:
        return (self.allocated_rho - self.executed_rho) / self.allocated_rho


def threshold_cost(executed_rho: float) -> Cost:
    """Gaussian mechanism on a sensitivity-1 count, noise N(0, 1/(2ρ)) per round: ρ-zCDP per round
    (Bun–Steinke Prop. 1.6), composed over the executed rounds inside the filter (Liang–Yi (adaptive budgeting) App. C, Thm 4.4)."""
    return Cost.zcdp(float(executed_rho))


def _check(count, n_records, q):
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
        raise ValueError(f"count must be an integer ≥ 0, got {count!r}")
    if isinstance(n_records, bool) or not isinstance(n_records, (int, np.integer)) or n_records < 1:
        raise ValueError(f"n_records must be an integer ≥ 1, got {n_records!r}")
    if count > n_records:
        raise ValueError(f"count must be ≤ n_records, got {count} > {n_records}")
    q = check_probability(q, "q")
    return int(count), int(n_records), q


def threshold_query_baseline(
    rng: np.random.Generator, count: int, n_records: int, q: float, rho: float
) -> ThresholdResult:
    """BM1: ỹ = |H| + Z/√(2ρ); Yes iff ỹ < qN (Liang–Yi (adaptive budgeting) App. C). Costs ρ (zCDP)."""
    count, n_records, q = _check(count, n_records, q)
    rho = float(check_rho(rho, "rho"))
    y = float(gaussian_mechanism(rng, np.array([float(count)]), rho)[0])
    return ThresholdResult(bool(y < q * n_records), "BM1", rho, rho)


def threshold_query_pie(
    rng: np.random.Generator,
    count: int,
    n_records: int,
    q: float,
    rho: float,
    *,
    c: int = 4,
    split: str = "even",
    beta0: float = 0.025,
) -> ThresholdResult:
    """Liang–Yi (adaptive budgeting) Alg. 9 (with the S0/S1 fix of implementation notes on Liang–Yi (adaptive budgeting))."""
    count, n_records, q = _check(count, n_records, q)
    rho = float(check_rho(rho, "rho"))
    beta0 = check_probability(beta0, "beta0")
    nu = q * n_records
    if not math.isfinite(nu):  # pragma: no cover - q ∈ (0, 1), N finite
        raise ValueError("q·N must be finite")
    res = pie_ni(
        rng,
        distance_triple(np.array([float(count)])),
        split_rounds(np.array([rho]), c, split),
        beta0=beta0,
        nu_low=nu,
        nu_high=nu,
    )
    if not res.survivors[0]:
        answer = bool(res.s1[0])  # confidently |H| < qN
        elim = True
    else:
        answer = bool(res.mean[0, 0] < nu)  # ȳ = (1/ρ_1) Σ_s r_{1,s} ṽ(s)
        elim = False
    return ThresholdResult(
        answer=answer,
        method="PM1",
        executed_rho=float(res.executed_rho[0]),
        allocated_rho=float(res.allocated_rho[0]),
        rounds=res.rounds,
        eliminated=elim,
    )
