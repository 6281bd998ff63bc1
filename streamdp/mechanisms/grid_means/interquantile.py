"""Smith's private quantile and the private interquantile interval used by Quantile (Rameshwar–Tandon (IoT means) §III-E; Algorithm 2 of
A. Smith, "Privacy-preserving statistical estimation with optimal convergence rates", STOC 2011).

For n values clipped to [lo, hi], sorted and padded x_(0) = lo ≤ x_(1) ≤ … ≤ x_(n) ≤ x_(n+1) = hi, a point of
the gap (x_(i), x_(i+1)) has exactly i values below it. The q-quantile is released with the exponential
mechanism over [lo, hi] with utility −|i − q·n|: gap i (i = 0 … n) is chosen with probability

    P(i) ∝ (x_(i+1) − x_(i)) · exp(−ε·|i − q·n| / (2Δu))                       (implementation notes on Rameshwar–Tandon (IoT means))

and the output is uniform inside the chosen gap (zero-width gaps are never chosen).

On a public grid (no floating-point leak). A point drawn uniformly from a gap in floating point
(``x_(i) + U·(x_(i+1) − x_(i))``) can reach floats that depend on the data values at the gap's ends (Mironov
2012; found by the 2026-11-23 noise review). The mechanism is therefore the same exponential mechanism over the
public grid G = {lo + j·h : j = 0 … J}, h = 2^{⌊log2(hi − lo)⌋ − QUANTILE_GRID_BITS}, J = ⌊(hi − lo)/h⌋ (about
2²⁰ to 2²¹ points): a value v is below the grid points j ≥ idx(v) = ⌊(v − lo)/h⌋ + 1, the rank of point j is
r(j) = #{v : idx(v) ≤ j}, and

    P(j) ∝ exp(−ε·|r(j) − q·n| / (2Δu)),

drawn as a gap i with probability ∝ c_i·exp(−ε·|i − q·n|/(2Δu)) (c_i = the number of grid points of rank i) and
then a uniform integer among those points. idx is a function of one value, so one changed value moves every
r(j) by at most 1 (Δu = 1; 2 under WrapAround): exactly the ε-DP exponential mechanism over a finite public set
(range ε, so ε²/8-zCDP, Rogers (unknown-domain) Thm 5), and the published point lo + j·h is a function of the index j alone.

Privacy (ε-DP): replacing one value changes the rank of any point by at most 1 (Δu = 1, BestFit arrays); a user
who touches two arrays (WrapAround) changes it by at most 2, so Δu = 2 there (``utility_sensitivity``; the draft
does not make this distinction — erratum in notes). The density ratio between neighbours is ≤ e^{ε/2} at every
point and the normaliser moves by the same factor at most, hence ε.

FixedQuantile (Rameshwar–Tandon (IoT means) §III-E1) estimates the (1/10, 9/10) interquantile interval; OptimizedQuantile (§III-E2,
after Amin et al.) the (t/K̄, 1 − t/K̄) one with t = ⌈2/ε⌉. Each end is one run of the mechanism at ε/4, so the
interval costs ε/2 (basic composition).
"""

from __future__ import annotations

import math

import numpy as np

from streamdp.accounting.cost import Cost
from streamdp.mechanisms.exponential import exponential_mechanism_cost
from streamdp.mechanisms.grid_means.data import check_epsilon
from streamdp.mechanisms.grid_means.private_interval import sample_log_weights

__all__ = [
    "QUANTILE_GRID_BITS",
    "quantile_grid",
    "quantile_gaps",
    "smith_quantile_probabilities",
    "smith_quantile",
    "smith_quantile_cost",
    "private_interquantile_interval",
    "private_interquantile_interval_cost",
]


#: the quantiles' grid has 2^QUANTILE_GRID_BITS to 2^(QUANTILE_GRID_BITS+1) points over [lo, hi]
QUANTILE_GRID_BITS = 20


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


def quantile_grid(lo: float, hi: float) -> tuple[float, int]:
    """(h, J): the public grid lo + j·h, j = 0 … J, of the quantiles (module docstring)."""
    lo, hi = float(lo), float(hi)
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi and np.isfinite(hi - lo)):
        raise ValueError(f"need finite lo < hi, got lo={lo!r}, hi={hi!r}")
    _, e = math.frexp(hi - lo)  # hi − lo ∈ [2^(e−1), 2^e)
    h = math.ldexp(1.0, e - 1 - QUANTILE_GRID_BITS)
    return h, int((hi - lo) // h)


def _grid_gaps(values, lo: float, hi: float) -> tuple[float, np.ndarray]:
    """(h, edges): edges[i] = the first grid index of rank i (edges[0] = 0, edges[n+1] = J + 1), so the points of
    rank i are edges[i] … edges[i+1] − 1."""
    x = quantile_gaps(values, lo, hi)[1:-1]
    h, J = quantile_grid(lo, hi)
    idx = np.minimum(np.floor((x - float(lo)) / h), J) + 1  # idx(v): the grid points above v are j ≥ idx(v)
    return h, np.concatenate([[0], idx.astype(np.int64), [J + 1]])


def _log_weights(counts: np.ndarray, q: float, epsilon: float, utility_sensitivity: int) -> np.ndarray:
    n = counts.size - 1
    i = np.arange(n + 1, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return np.log(counts.astype(np.float64)) - epsilon * np.abs(i - q * n) / (2.0 * utility_sensitivity)


def smith_quantile_probabilities(values, q: float, epsilon: float, lo: float, hi: float,
                                 utility_sensitivity: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(edges, P): the gaps' ends on the grid (lo + edges_index·h; the last one past hi by less than h) and the
    probability P(i) of each gap i = 0 … n (the grid points in it share it evenly)."""
    q, epsilon = _check_q(q), check_epsilon(epsilon)
    h, edges = _grid_gaps(values, lo, hi)
    logw = _log_weights(np.diff(edges), q, epsilon, utility_sensitivity)
    w = np.exp(logw - np.max(logw))
    return float(lo) + edges * h, w / w.sum()


def smith_quantile(values, q: float, epsilon: float, lo: float, hi: float, rng: np.random.Generator,
                   utility_sensitivity: int = 1) -> float:
    """One ε-DP draw of the q-quantile of ``values`` in [lo, hi] (Smith 2011, Alg. 2), on the public grid."""
    q, epsilon = _check_q(q), check_epsilon(epsilon)
    h, edges = _grid_gaps(values, lo, hi)
    counts = np.diff(edges)
    i = sample_log_weights(rng, _log_weights(counts, q, epsilon, utility_sensitivity))
    j = int(edges[i]) + int(rng.integers(int(counts[i])))  # uniform among the grid points of rank i
    return float(lo) + j * h


def private_interquantile_interval(values, q_lo: float, q_hi: float, epsilon_each: float, lo: float, hi: float,
                                   rng: np.random.Generator, utility_sensitivity: int = 1) -> tuple[float, float]:
    """[a', b'] = the private q_lo- and q_hi-quantiles, each at ``epsilon_each`` (total 2·epsilon_each).
    The two draws are independent; if a' > b' the ends are swapped (post-processing)."""
    a = smith_quantile(values, q_lo, epsilon_each, lo, hi, rng, utility_sensitivity)
    b = smith_quantile(values, q_hi, epsilon_each, lo, hi, rng, utility_sensitivity)
    return (a, b) if a <= b else (b, a)


def smith_quantile_cost(epsilon: float) -> Cost:
    """One private quantile at budget ε: the exponential mechanism over [lo, hi] with utility −|rank(x) − qn| of
    sensitivity Δu and weights exp(−ε·|…|/(2Δu)) (Smith 2011) — ε-DP with range ε, so ε²/8-zCDP (Rogers (unknown-domain) Thm 5)."""
    return exponential_mechanism_cost(check_epsilon(epsilon))


def private_interquantile_interval_cost(epsilon_each: float) -> Cost:
    """Two private quantiles at ε_each: 2·ε_each²/8-zCDP (Rogers (unknown-domain) Thm 5 each, composed: Rogers (unknown-domain) Thm 6)."""
    return exponential_mechanism_cost(check_epsilon(epsilon_each, "epsilon_each"), 2)
