"""Unknown-domain histograms: Rogers (unknown-domain) Alg. 1 (Thm 7) and Alg. 2, top-(k̄+1) with a noisy threshold (Thm 8).

Inputs are (Δ0, Δ∞)-sensitive histograms given as two aligned arrays, item ids and counts: adding or removing one
user changes at most Δ0 counts, each by at most Δ∞ (Rogers (unknown-domain) §4). Only items with a positive count are considered
(a GROUP BY never returns the others); the domain of possible items is never enumerated.

* :class:`UnknownDomainHistogram` (Alg. 1): every positive count gets independent noise — Lap(Δ∞/ε) or
  N(0, (Δ∞/ε)²) — and the items whose noisy count exceeds T are released with their noisy counts.
  Thm 7: T = Δ∞ + (Δ∞/ε)·log(Δ0/(2δ)) (Laplace) or T = Δ∞ + (Δ∞/ε)·Φ⁻¹(1 − δ/Δ0) (Gaussian); either way the
  release is δ-approximate Δ0·ε²/2-zCDP.
* :class:`TopKbarGaussianHistogram` (Alg. 2): only the top-(k̄+1) of the histogram is looked at; the k̄ largest
  get N(0, σ²) noise, σ = Δ∞/ε, and are released when above T̃ = T + c_(k̄+1) + N(0, σ²), with
  T = Δ∞ + (√2·Δ∞/ε)·Φ⁻¹(1 − δ/Δ0) (Thm 8): δ-approximate Δ0·ε²/2-zCDP. c_(k̄+1) = 0 when the histogram has
  at most k̄ positive items. The ⊥_j padding items of Alg. 2 only matter to the analysis: a released ⊥_j carries
  no item and is dropped (post-processing), and its noise is independent of everything else, so it is not drawn.

Conventions shared with :mod:`streamdp.mechanisms.unknown_domain_gumbel`: ties in the top-k̄ selection are broken
by ascending item id (a fixed total order on items, as the analysis of [Durfee–Rogers 2019, Lemma 5.2] assumes),
so ids must be mutually comparable; noise is drawn in input order (Alg. 1) or in (count desc, id asc) order (Alg. 2),
so that test-mode output is reproducible for a canonical input. Released noisy counts are listed by decreasing noisy
value — a function of the noisy output only, never of the input order — and rounded to integers by default
(post-processing; docs/contract.md §3 "Noise": no floating-point low-order bits are published).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import special

from streamdp.accounting.cost import Cost
from streamdp.mechanisms.gaussian import gaussian_cost
from streamdp.mechanisms.laplace import laplace_cost
from streamdp.noise import samplers

__all__ = [
    "laplace_histogram_threshold",
    "gaussian_histogram_threshold",
    "unknown_domain_histogram_cost",
    "topkbar_gaussian_threshold",
    "UnknownDomainHistogram",
    "TopKbarGaussianHistogram",
]


# ------------------------------------------------------------------------------------------------ validation
def check_epsilon(x) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"epsilon must be a real number, got {x!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"epsilon must be finite and > 0, got {x!r}")
    return v


def check_delta(x) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"delta must be a real number, got {x!r}") from None
    if not 0 < v < 1:
        raise ValueError(f"delta must lie in the open interval (0, 1), got {x!r}")
    return v


def check_positive(x, name: str) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number, got {x!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be finite and > 0, got {x!r}")
    return v


def check_int(x, name: str, minimum: int = 1) -> int:
    try:
        ok = not isinstance(x, bool) and float(x).is_integer() and int(x) >= minimum
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise ValueError(f"{name} must be an integer ≥ {minimum}, got {x!r}")
    return int(x)


def histogram_arrays(ids, counts) -> tuple[np.ndarray, np.ndarray]:
    """Validated 1-D (ids, float64 counts) restricted to the positive counts."""
    ids = np.asarray(ids)
    c = np.asarray(counts)
    if ids.ndim != 1 or c.ndim != 1:
        raise ValueError("ids and counts must be 1-D arrays")
    if ids.shape != c.shape:
        raise ValueError(f"ids and counts must have the same length, got {ids.size} and {c.size}")
    try:
        c = c.astype(np.float64, copy=False)
    except (TypeError, ValueError):
        raise ValueError("counts must be numeric") from None
    if not np.isfinite(c).all():
        raise ValueError("counts must be finite")
    if (c < 0).any():
        raise ValueError("counts must be ≥ 0")
    pos = c > 0
    if not pos.all():
        ids, c = ids[pos], c[pos]
    return ids, c


def _argsort_ids(ids: np.ndarray) -> np.ndarray:
    try:
        return np.argsort(ids, kind="stable")
    except TypeError:
        raise ValueError("item ids must be mutually comparable (ties are broken by ascending id)") from None


def canonical_order(ids: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Permutation sorting by count descending, ties by id ascending (the engine passes item names as ids: Names.name_array)."""
    by_id = _argsort_ids(ids)
    return by_id[np.argsort(-counts[by_id], kind="stable")]


def top_kbar(ids: np.ndarray, counts: np.ndarray, kbar: int) -> tuple[np.ndarray, float]:
    """Indices of h_(k̄) (the k̄ largest counts, ties by ascending id) in canonical order, and c_(k̄+1).

    ``counts`` are the positive counts; c_(k̄+1) is 0 when there are at most k̄ of them (Rogers (unknown-domain) Alg. 2/3). O(n) for the
    selection (np.partition), O(k̄ log k̄) for the ordering.
    """
    n = counts.size
    if n <= kbar:
        idx = np.arange(n)
        c_next = 0.0
    else:
        part = np.partition(counts, (n - kbar - 1, n - kbar))
        c_next = float(part[n - kbar - 1])  # (k̄+1)-th largest
        v_k = part[n - kbar]  # k̄-th largest
        above = np.flatnonzero(counts > v_k)
        tied = np.flatnonzero(counts == v_k)
        tied = tied[_argsort_ids(ids[tied])][: kbar - above.size]
        idx = np.concatenate([above, tied])
    order = canonical_order(ids[idx], counts[idx])
    return idx[order], c_next


def _phi_inv_upper(p: float) -> float:
    """Φ⁻¹(1 − p), accurate for tiny p (computed as −Φ⁻¹(p))."""
    return float(-special.ndtri(p))


def _finish(ids: np.ndarray, noisy: np.ndarray, integer_output: bool) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(-noisy, kind="stable")
    ids, noisy = ids[order], noisy[order]
    if integer_output:
        return ids, np.rint(noisy).astype(np.int64)
    return ids, noisy


# --------------------------------------------------------------------------------------------- thresholds/costs
def laplace_histogram_threshold(epsilon: float, delta: float, l0_sensitivity: int, linf_sensitivity: float) -> float:
    """T = Δ∞ + (Δ∞/ε)·log(Δ0/(2δ)) — Rogers (unknown-domain) Thm 7 (Laplace). Needs δ ≤ Δ0/2 (the tail bound used is for T ≥ Δ∞)."""
    e, d = check_epsilon(epsilon), check_delta(delta)
    l0, linf = check_int(l0_sensitivity, "l0_sensitivity"), check_positive(linf_sensitivity, "linf_sensitivity")
    if 2 * d > l0:
        raise ValueError(f"delta must be ≤ l0_sensitivity/2 for the Laplace threshold, got delta={delta!r}")
    return linf + (linf / e) * math.log(l0 / (2.0 * d))


def gaussian_histogram_threshold(epsilon: float, delta: float, l0_sensitivity: int, linf_sensitivity: float) -> float:
    """T = Δ∞ + (Δ∞/ε)·Φ⁻¹(1 − δ/Δ0) — Rogers (unknown-domain) Thm 7 (Gaussian)."""
    e, d = check_epsilon(epsilon), check_delta(delta)
    l0, linf = check_int(l0_sensitivity, "l0_sensitivity"), check_positive(linf_sensitivity, "linf_sensitivity")
    return linf + (linf / e) * _phi_inv_upper(d / l0)


def topkbar_gaussian_threshold(epsilon: float, delta: float, l0_sensitivity: int, linf_sensitivity: float) -> float:
    """T = Δ∞ + (√2·Δ∞/ε)·Φ⁻¹(1 − δ/Δ0) — Rogers (unknown-domain) Thm 8 (the noisy threshold adds a second N(0, σ²))."""
    e, d = check_epsilon(epsilon), check_delta(delta)
    l0, linf = check_int(l0_sensitivity, "l0_sensitivity"), check_positive(linf_sensitivity, "linf_sensitivity")
    return linf + (math.sqrt(2.0) * linf / e) * _phi_inv_upper(d / l0)


def unknown_domain_histogram_cost(epsilon: float, delta: float, l0_sensitivity: int) -> Cost:
    """δ-approximate Δ0·ε²/2-zCDP — Rogers (unknown-domain) Thm 7 (both noises) and Thm 8.

    The ρ part is the noise's own cost with scale Δ∞/ε: Laplace per differing count Δ0·(Δ∞/b)²/2 and Gaussian
    Δ0·Δ∞²/(2σ²) (ℓ2 sensitivity Δ∞√Δ0) — both equal Δ0·ε²/2; δ bounds the chance that a count present in only
    one of two neighbouring histograms crosses the threshold.
    """
    e, d = check_epsilon(epsilon), check_delta(delta)
    l0 = check_int(l0_sensitivity, "l0_sensitivity")
    return Cost.zcdp(rho=l0 * e * e / 2.0, delta=d)


# ------------------------------------------------------------------------------------------------------ Alg. 1
class UnknownDomainHistogram:
    """Rogers (unknown-domain) Alg. 1 with the Thm 7 calibration: noise scale Δ∞/ε, threshold T, cost (Δ0·ε²/2, δ)."""

    NOISES = ("laplace", "gaussian")

    def __init__(
        self,
        epsilon: float,
        delta: float,
        l0_sensitivity: int = 1,
        linf_sensitivity: float = 1.0,
        noise: str = "gaussian",
        integer_output: bool = True,
    ) -> None:
        if noise not in self.NOISES:
            raise ValueError(f"noise must be one of {self.NOISES}, got {noise!r}")
        self.epsilon = check_epsilon(epsilon)
        self.delta = check_delta(delta)
        self.l0_sensitivity = check_int(l0_sensitivity, "l0_sensitivity")
        self.linf_sensitivity = check_positive(linf_sensitivity, "linf_sensitivity")
        self.noise = noise
        self.integer_output = bool(integer_output)
        self.scale = self.linf_sensitivity / self.epsilon  # b (Laplace) or σ (Gaussian)
        if noise == "laplace":
            self.threshold = laplace_histogram_threshold(epsilon, delta, l0_sensitivity, linf_sensitivity)
        else:
            self.threshold = gaussian_histogram_threshold(epsilon, delta, l0_sensitivity, linf_sensitivity)

    def cost(self) -> Cost:
        """Rogers (unknown-domain) Thm 7: δ-approximate Δ0·ε²/2-zCDP (= :func:`noise_cost` ρ, plus δ)."""
        return unknown_domain_histogram_cost(self.epsilon, self.delta, self.l0_sensitivity)

    def noise_cost(self) -> Cost:
        """The ρ of the noise alone over the common items (Rogers (unknown-domain) Thm 7 proof, step 3): Laplace per differing count
        Δ0·(Δ∞/b)²/2 (:func:`laplace_cost`), Gaussian Δ2²/(2σ²) with Δ2 = Δ∞·√Δ0 (:func:`gaussian_cost`)."""
        if self.noise == "laplace":
            return laplace_cost(self.scale, self.linf_sensitivity, self.l0_sensitivity)
        return gaussian_cost(self.scale, self.linf_sensitivity * math.sqrt(self.l0_sensitivity))

    def release(self, rng: np.random.Generator, ids, counts) -> tuple[np.ndarray, np.ndarray]:
        """(released ids, noisy counts), by decreasing noisy count; only positive input counts are considered."""
        ids, c = histogram_arrays(ids, counts)
        if self.noise == "laplace":
            z = samplers.laplace(rng, self.scale, c.size)
        else:
            z = samplers.gaussian(rng, self.scale, c.size)
        noisy = c + z
        keep = noisy > self.threshold
        return _finish(ids[keep], noisy[keep], self.integer_output)


# ------------------------------------------------------------------------------------------------------ Alg. 2
class TopKbarGaussianHistogram:
    """Rogers (unknown-domain) Alg. 2 with the Thm 8 calibration: σ = Δ∞/ε, T̃ = T + c_(k̄+1) + N(0, σ²), cost (Δ0·ε²/2, δ)."""

    def __init__(
        self,
        epsilon: float,
        delta: float,
        kbar: int,
        l0_sensitivity: int = 1,
        linf_sensitivity: float = 1.0,
        integer_output: bool = True,
    ) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.delta = check_delta(delta)
        self.kbar = check_int(kbar, "kbar")
        self.l0_sensitivity = check_int(l0_sensitivity, "l0_sensitivity")
        self.linf_sensitivity = check_positive(linf_sensitivity, "linf_sensitivity")
        self.integer_output = bool(integer_output)
        self.sigma = self.linf_sensitivity / self.epsilon
        self.threshold = topkbar_gaussian_threshold(epsilon, delta, l0_sensitivity, linf_sensitivity)

    def cost(self) -> Cost:
        """Rogers (unknown-domain) Thm 8: δ-approximate Δ0·ε²/2-zCDP."""
        return unknown_domain_histogram_cost(self.epsilon, self.delta, self.l0_sensitivity)

    def release(self, rng: np.random.Generator, ids, counts) -> tuple[np.ndarray, np.ndarray]:
        """(released ids, noisy counts) — at most k̄ items, by decreasing noisy count."""
        ids, c = histogram_arrays(ids, counts)
        idx, c_next = top_kbar(ids, c, self.kbar)
        z = samplers.gaussian(rng, self.sigma, idx.size + 1)  # z[0] for T̃, then one per top-k̄ item
        t_noisy = self.threshold + c_next + z[0]
        noisy = c[idx] + z[1:]
        keep = noisy > t_noisy
        return _finish(ids[idx][keep], noisy[keep], self.integer_output)
