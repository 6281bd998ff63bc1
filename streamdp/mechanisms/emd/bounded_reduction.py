"""BoundedEMDReduction: unbounded → bounded d_EM-DP by resampling (Imola et al. (EMD) Alg. 3, Lemma 5.2, Thm 5.3; implementation notes on Imola et al. (EMD)).

Each user's multiset D (any size) is replaced by m0 items drawn from D uniformly *with replacement*; a bounded
d_EM-DP mechanism (sizes fixed and public: m0) then runs on the resamples.

Lemma 5.2 (smoothness of the projection), re-derived: couple the two resamples through an optimal coupling π of
h(D), h(D'), drawing m0 i.i.d. pairs (X_j, Y_j) ~ π. Z_j = d_X(X_j, Y_j) ∈ [0, 1] has mean τ = d_EM(D, D') and
variance ≤ E Z² ≤ τ. Bernstein: Pr[Σ(Z_j − τ) ≥ t] ≤ exp(−t²/(2(m0τ + t/3))) ≤ δ_s for
t = L/3 + √(L²/9 + 2m0τL), L = log(1/δ_s); and t ≤ 2L/3 + √(2m0τL) ≤ m0τ + (7/6)L (AM–GM). Since the pairs give a
transport plan between the resamples, with probability ≥ 1 − δ_s

    d_EM(resample, resample') ≤ (1/m0)·Σ_j Z_j ≤ b(τ) = 2τ + (7/6)·log(1/δ_s)/m0.

Theorem 5.3: if the inner mechanism is (α, δ)-bounded d_EM-DP, the whole is (τ, α·b(τ), δ + δ_s)-discrete
d_EM-DP (Imola et al. (EMD) Def. 5.1): for all D, D' with d_EM(D, D') ≤ τ, Pr[M(D) ∈ S] ≤ e^{α·b(τ)}·Pr[M(D') ∈ S] + δ + δ_s.

There is deliberately no :class:`~streamdp.accounting.cost.Cost` for it. The ``emd`` notion of the filters is
(α, δ) per unit of d_EM: ε = α·d for every pair at distance d. The reduction's ε = α·b(d) keeps the additive
(7/6)·α·log(1/δ_s)/m0 as d → 0, so no α per unit d holds for close pairs; and reaching farther pairs by group
privacy in steps of τ multiplies δ as well. (A ``cost(τ)`` recording α·b(τ)/τ per unit existed and under-stated
ε below τ; no query used it; it was removed.) Charging the reduction needs a discrete-d_EM notion in the filter.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["bernstein_b", "BoundedEMDReduction"]


def bernstein_b(tau: float, m0: int, delta_s: float) -> float:
    """b(τ) = 2τ + (7/6)·log(1/δ_s)/m0 (Imola et al. (EMD) Lemma 5.2; derivation in the module docstring)."""
    tau = float(tau)
    if not math.isfinite(tau) or tau < 0:
        raise ValueError(f"tau must be finite and ≥ 0, got {tau!r}")
    if isinstance(m0, bool) or int(m0) != m0 or int(m0) < 1:
        raise ValueError(f"m0 must be a positive integer, got {m0!r}")
    delta_s = float(delta_s)
    if not (0.0 < delta_s < 1.0):
        raise ValueError(f"delta_s must lie in (0, 1), got {delta_s!r}")
    return 2.0 * tau + (7.0 / 6.0) * math.log(1.0 / delta_s) / int(m0)


class BoundedEMDReduction:
    """Resample m0 items with replacement, then hand them to an (α, δ)-bounded d_EM-DP mechanism.

    ``inner_alpha``, ``inner_delta``: the bounded guarantee of the mechanism run on the m0 resampled items
    (e.g. ``PrivEMDItemWise(..., m=m0).guarantee``).
    """

    def __init__(self, m0: int, delta_s: float, inner_alpha: float, inner_delta: float = 0.0):
        if isinstance(m0, bool) or int(m0) != m0 or int(m0) < 1:
            raise ValueError(f"m0 must be a positive integer, got {m0!r}")
        self.m0 = int(m0)
        self.delta_s = float(delta_s)
        if not (0.0 < self.delta_s < 1.0):
            raise ValueError(f"delta_s must lie in (0, 1), got {delta_s!r}")
        self.inner_alpha = float(inner_alpha)
        if not math.isfinite(self.inner_alpha) or self.inner_alpha <= 0:
            raise ValueError(f"inner_alpha must be finite and > 0, got {inner_alpha!r}")
        self.inner_delta = float(inner_delta)
        if not (0.0 <= self.inner_delta < 1.0):
            raise ValueError(f"inner_delta must lie in [0, 1), got {inner_delta!r}")

    def b(self, tau: float) -> float:
        return bernstein_b(tau, self.m0, self.delta_s)

    def project(self, rng: np.random.Generator, items) -> np.ndarray:
        """m0 items drawn uniformly with replacement from the user's multiset (any non-empty size)."""
        items = np.asarray(items)
        if items.ndim < 1 or items.shape[0] == 0:
            raise ValueError("items must be a non-empty multiset (a user with no items contributes nothing)")
        return items[rng.integers(0, items.shape[0], self.m0)]

    def discrete_guarantee(self, tau: float) -> tuple[float, float]:
        """(ε, δ) for every pair with d_EM ≤ τ: (α·b(τ), δ + δ_s) — Imola et al. (EMD) Thm 5.3."""
        return self.inner_alpha * self.b(tau), self.inner_delta + self.delta_s
