"""Smith's private quantile and the private interquantile interval used by Quantile (002 §III-E; Algorithm 2 of
A. Smith, "Privacy-preserving statistical estimation with optimal convergence rates", STOC 2011).

For n values clipped to [lo, hi], sorted and padded x_(0) = lo ≤ x_(1) ≤ … ≤ x_(n) ≤ x_(n+1) = hi, a point of
the gap (x_(i), x_(i+1)) has exactly i values below it. The q-quantile is released with the exponential
mechanism over [lo, hi] with utility −|i − q·n|: gap i (i = 0 … n) is chosen with probability

    P(i) ∝ (x_(i+1) − x_(i)) · exp(−ε·|i − q·n| / (2Δu))                       (notes/002.md)

and the output is uniform inside the chosen gap (zero-width gaps are never chosen).

Privacy (ε-DP): replacing one value changes the rank of any point by at most 1 (Δu = 1, BestFit arrays); a user
who touches two arrays (WrapAround) changes it by at most 2, so Δu = 2 there (``utility_sensitivity``; the draft
does not make this distinction — erratum in notes). The density ratio between neighbours is ≤ e^{ε/2} at every
point and the normaliser moves by the same factor at most, hence ε.

FixedQuantile (002 §III-E1) estimates the (1/10, 9/10) interquantile interval; OptimizedQuantile (§III-E2,
after Amin et al.) the (t/K̄, 1 − t/K̄) one with t = ⌈2/ε⌉. Each end is one run of the mechanism at ε/4, so the
interval costs ε/2 (basic composition).
"""

from __future__ import annotations

import numpy as np

from streamdp.accounting.cost import Cost
from streamdp.mechanisms.exponential import exponential_mechanism_cost
from streamdp.mechanisms.grid_means.data import check_epsilon
from streamdp.mechanisms.grid_means.private_interval import sample_log_weights

__all__ = [
    "quantile_gaps",
    "smith_quantile_probabilities",
    "smith_quantile",
    "smith_quantile_cost",
    "private_interquantile_interval",
    "private_interquantile_interval_cost",
]


def _check_q(q: float) -> float:
    q = float(q)
    if not (0.0 <= q <= 1.0):
        raise ValueError(f"q must lie in [0, 1], got {q!r}")
    return q


def quantile_gaps(values, lo: float, hi: float) -> np.ndarray:
    """The padded sorted values x_(0) = lo, x_(1) … x_(n), x_(n+1) = hi (values clipped to [lo, hi])."""
    lo, hi = float(lo), float(hi)
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        raise ValueError(f"need finite lo < hi, got lo={lo!r}, hi={hi!r}")
    x = np.sort(np.clip(np.asarray(values, dtype=np.float64).ravel(), lo, hi))
    if not np.all(np.isfinite(x)):
        raise ValueError("values must be finite")
    return np.concatenate([[lo], x, [hi]])


def _log_weights(edges: np.ndarray, q: float, epsilon: float, utility_sensitivity: int) -> np.ndarray:
    n = edges.size - 2
    width = np.diff(edges)
    i = np.arange(n + 1, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return np.log(width) - epsilon * np.abs(i - q * n) / (2.0 * utility_sensitivity)


def smith_quantile_probabilities(values, q: float, epsilon: float, lo: float, hi: float,
                                 utility_sensitivity: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(edges, P): the padded sorted values and the probability P(i) of each gap i = 0 … n."""
    q, epsilon = _check_q(q), check_epsilon(epsilon)
    edges = quantile_gaps(values, lo, hi)
    logw = _log_weights(edges, q, epsilon, utility_sensitivity)
    w = np.exp(logw - np.max(logw))
    return edges, w / w.sum()


def smith_quantile(values, q: float, epsilon: float, lo: float, hi: float, rng: np.random.Generator,
                   utility_sensitivity: int = 1) -> float:
    """One ε-DP draw of the q-quantile of ``values`` in [lo, hi] (Smith 2011, Alg. 2)."""
    q, epsilon = _check_q(q), check_epsilon(epsilon)
    edges = quantile_gaps(values, lo, hi)
    i = sample_log_weights(rng, _log_weights(edges, q, epsilon, utility_sensitivity))
    left, right = edges[i], edges[i + 1]
    return float(min(left + rng.random() * (right - left), right))


def private_interquantile_interval(values, q_lo: float, q_hi: float, epsilon_each: float, lo: float, hi: float,
                                   rng: np.random.Generator, utility_sensitivity: int = 1) -> tuple[float, float]:
    """[a', b'] = the private q_lo- and q_hi-quantiles, each at ``epsilon_each`` (total 2·epsilon_each).
    The two draws are independent; if a' > b' the ends are swapped (post-processing)."""
    a = smith_quantile(values, q_lo, epsilon_each, lo, hi, rng, utility_sensitivity)
    b = smith_quantile(values, q_hi, epsilon_each, lo, hi, rng, utility_sensitivity)
    return (a, b) if a <= b else (b, a)


def smith_quantile_cost(epsilon: float) -> Cost:
    """One private quantile at budget ε: the exponential mechanism over [lo, hi] with utility −|rank(x) − qn| of
    sensitivity Δu and weights exp(−ε·|…|/(2Δu)) (Smith 2011) — ε-DP with range ε, so ε²/8-zCDP (001 Thm 5)."""
    return exponential_mechanism_cost(check_epsilon(epsilon))


def private_interquantile_interval_cost(epsilon_each: float) -> Cost:
    """Two private quantiles at ε_each: 2·ε_each²/8-zCDP (001 Thm 5 each, composed: 001 Thm 6)."""
    return exponential_mechanism_cost(check_epsilon(epsilon_each, "epsilon_each"), 2)
