"""PrivateInterval — the private "high-probability" interval of Levy (Rameshwar–Tandon (IoT means) §III-D1, Alg. 3; after Algorithm 6 of
Levy et al., "Learning with user-level privacy").

Given K̄ array means Ā_i ∈ [0, U], a concentration radius τ and a budget ε_I:

1. τ = U·√(log(2K̄/γ) / (2 m_UB)) (Rameshwar–Tandon (IoT means) eq. (8); natural log; γ = 0.2 in Rameshwar–Tandon (IoT means) §IV) — :func:`levy_tau`;
2. (0, U] is cut into ⌈U/τ⌉ bins of width τ, T = their midpoints (j + ½)τ, j = 0 … ⌈U/τ⌉ − 1 (the last bin may
   reach past U) — :func:`interval_midpoints`;
3. μ_i = the midpoint nearest to Ā_i (the draft writes "min", it means argmin — implementation notes on Rameshwar–Tandon (IoT means)), i.e. the midpoint
   of bin ⌊Ā_i/τ⌋ (clamped to the last bin; a value on a bin edge goes to the upper bin);
4. cost c(x) = max(#{i : μ_i < x}, #{i : μ_i > x}) for x ∈ T — :func:`interval_costs`;
5. x̂ ∈ T is drawn with Q(x) ∝ exp(−ε_I·c(x) / (2Δc)) — the exponential mechanism (McSherry–Talwar) with
   utility −c and utility sensitivity Δc;
6. [a, b] = [max(0, x̂ − 3τ/2), min(x̂ + 3τ/2, U)].

Privacy (ε_I-DP): moving one array mean changes each of the two counts in c(x) by at most 1, so Δc = 1 when a
user touches one array (BestFit); under WrapAround a user touches two arrays and Δc = 2
(``utility_sensitivity``). Levy spends ε_I = ε/2 here (Rameshwar–Tandon (IoT means) §III-D): the weights are then exp(−ε·c(x)/4),
exactly Alg. 3 line 5 with the *total* ε. Steps 1–3 and 6 use only public quantities (τ, U) or the output.

Erratum (noted): Rameshwar–Tandon (IoT means) applies Alg. 3 unchanged to WrapAround arrays, which is only ε_I-DP for Δc = 1; with
WrapAround a user can move two array means, so we use Δc = 2.
"""

from __future__ import annotations

import math

import numpy as np

from streamdp.accounting.cost import Cost
from streamdp.mechanisms.exponential import exponential_mechanism_cost
from streamdp.mechanisms.grid_means.data import check_epsilon, check_upper

__all__ = [
    "levy_tau",
    "interval_midpoints",
    "nearest_midpoint_index",
    "interval_costs",
    "private_interval_probabilities",
    "private_interval",
    "private_interval_cost",
    "sample_log_weights",
]


def levy_tau(upper: float, n_arrays: int, m_ub: int, gamma: float = 0.2) -> float:
    """τ = U·√(log(2K̄/γ) / (2 m_UB)) (Rameshwar–Tandon (IoT means) eq. (8))."""
    upper = check_upper(upper)
    if not (0 < gamma < 1):
        raise ValueError(f"gamma must lie in (0, 1), got {gamma!r}")
    if n_arrays < 1 or m_ub < 1:
        raise ValueError(f"n_arrays and m_ub must be ≥ 1, got {n_arrays!r}, {m_ub!r}")
    return upper * math.sqrt(math.log(2 * n_arrays / gamma) / (2 * m_ub))


def interval_midpoints(upper: float, tau: float) -> np.ndarray:
    """Midpoints (j + ½)τ of the ⌈U/τ⌉ bins of width τ covering (0, U] (Rameshwar–Tandon (IoT means) Alg. 3 line 2)."""
    upper = check_upper(upper)
    tau = check_epsilon(tau, "tau")
    n_bins = max(1, math.ceil(upper / tau))
    return (np.arange(n_bins, dtype=np.float64) + 0.5) * tau


def nearest_midpoint_index(array_means: np.ndarray, tau: float, n_bins: int) -> np.ndarray:
    """Index of the midpoint nearest to each Ā_i (Rameshwar–Tandon (IoT means) Alg. 3 line 3)."""
    j = np.floor(np.asarray(array_means, dtype=np.float64) / tau).astype(np.int64)
    return np.clip(j, 0, n_bins - 1)


def interval_costs(array_means, upper: float, tau: float) -> tuple[np.ndarray, np.ndarray]:
    """(T, c): the midpoints and c(x) = max(#{μ_i < x}, #{μ_i > x}) for each x ∈ T (Rameshwar–Tandon (IoT means) Alg. 3 line 4)."""
    mid = interval_midpoints(upper, tau)
    j = nearest_midpoint_index(array_means, tau, mid.size)
    per_bin = np.bincount(j, minlength=mid.size)
    below = np.cumsum(per_bin) - per_bin  # #{μ_i < T_k}
    above = per_bin.sum() - np.cumsum(per_bin)  # #{μ_i > T_k}
    return mid, np.maximum(below, above)


def private_interval_probabilities(array_means, epsilon: float, tau: float, upper: float,
                                   utility_sensitivity: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(T, Q): the exponential mechanism's law over the midpoints, Q(x) ∝ exp(−ε·c(x) / (2Δc))."""
    epsilon = check_epsilon(epsilon)
    mid, c = interval_costs(array_means, upper, tau)
    logw = -epsilon * (c - c.min()) / (2.0 * utility_sensitivity)
    w = np.exp(logw)
    return mid, w / w.sum()


def sample_log_weights(rng: np.random.Generator, logw: np.ndarray) -> int:
    """Index k drawn with probability ∝ exp(logw[k]) (inverse CDF on one uniform; −inf weights never drawn)."""
    w = np.exp(logw - np.max(logw))
    cdf = np.cumsum(w)
    k = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
    k = min(k, w.size - 1)
    while w[k] == 0.0:  # only reachable through float rounding at the top of the CDF
        k -= 1
    return k


def private_interval(array_means, epsilon: float, tau: float, upper: float, rng: np.random.Generator,
                     utility_sensitivity: int = 1) -> tuple[float, float]:
    """[a, b] by Rameshwar–Tandon (IoT means) Alg. 3 at budget ε (pure ε-DP for utility sensitivity Δc; see the module docstring)."""
    epsilon = check_epsilon(epsilon)
    upper = check_upper(upper)
    mid, c = interval_costs(array_means, upper, tau)
    k = sample_log_weights(rng, -epsilon * c / (2.0 * utility_sensitivity))
    x = float(mid[k])
    return max(0.0, x - 1.5 * tau), min(x + 1.5 * tau, upper)


def private_interval_cost(epsilon: float) -> Cost:
    """Alg. 3 at budget ε: the exponential mechanism with utility −c(x) of sensitivity Δc and weights
    exp(−ε·c(x)/(2Δc)) — ε-DP with range ε, so ε²/8-zCDP (Rogers (unknown-domain) Thm 5)."""
    return exponential_mechanism_cost(check_epsilon(epsilon))
