"""User-level means that protect presence: a noisy clipped sum and a noisy clipped count per cell, with private
cell selection — the add/remove-neighbour estimator of ``grid_means`` (the default).

Neighbours: two streams differ by ALL the events of one user (add/remove), as in every other kind of the
service. The bounded estimators of the IoT paper (Mean Estimation with User-Level Privacy on Multi-Dimensional
IoT Datasets: Baseline, array averaging, Levy, Quantile) treat each cell's numbers of users and samples as public;
here nothing about them is.

Per (cell, window) and user ℓ with m_ℓ values in the cell:

1. **Clipping.** The user keeps a_ℓ = min(m_ℓ, m_UB) values (m_UB public, from the configuration: values per
   user per cell); each value v is clipped to [0, U] and **quantised** to the public grid of Q + 1 points
   k = rint(v·Q/U) ∈ {0, …, Q} (Q = 2^j, chosen below), then centred in half-steps: c = 2k − Q ∈ [−Q, Q]
   (so c·U/(2Q) = k·U/Q − U/2). Clipping and quantising are functions of the user's own data.
2. **Statistics.** S = Σ c over the kept values of all users (an integer), N = Σ_ℓ a_ℓ (an integer).
3. **Noise.** S̃ = S + Z_S, Ñ = N + Z_N with Z_S ~ N_Z(0, σ_S²), Z_N ~ N_Z(0, σ_N²), independent discrete
   Gaussians (Canonne–Kamath–Steinke 2020): integers plus integer noise, so no floating-point bits of the data
   are published (the contract's "public grid": every published number is a function of (S̃, Ñ)).
4. **Release** (post-processing of S̃, Ñ): mean = U/2 + (U/(2Q))·S̃/Ñ clamped to [0, U] when Ñ ≥ 1 (else null),
   sum = (U/(2Q))·(S̃ + Q·Ñ) (the noisy sum of the kept values), count = Ñ.

**Cost** (Rogers, Unknown-Domain Algorithms, Thm 4 for one Gaussian mechanism; CKS Thm 4 for the discrete one).
Removing user ℓ changes cell i's S by at most a_i·Q and its N by a_i, so the pair (S, N) of all cells is a
Gaussian mechanism whose squared ℓ2 sensitivity, in units of the two σ's, is

    Σ_i [ (a_i·Q)²/σ_S² + a_i²/σ_N² ]   ⇒   ρ_ℓ = Σ_i a_i²·( Q²/(2σ_S²) + 1/(2σ_N²) ).

σ_S and σ_N are calibrated so that a user with the full m_UB values in one cell costs the configured ρ, split
ρ_S = f·ρ to the sum and ρ_N = (1 − f)·ρ to the count (f = ``sum_share``):

    σ_S = m_UB·Q/√(2ρ_S),   σ_N = m_UB/√(2ρ_N),   so that   ρ_ℓ = ρ·Σ_i (a_i/m_UB)²  ≤ ρ·(#cells of ℓ).

This is tighter than the per-cell ℓ2 bound U·m_UB charged cell by cell only in that a user with few values in a
cell pays less (a_i²/m_UB² of ρ): the sensitivity vector of user ℓ across cells is exactly (a_i·Q, a_i)_i, so
Σ_i a_i² is its squared norm, no looser bound is used. (A per-window cap M on a user's values over all cells would
give Σ a_i² ≤ M·m_UB; not configured here: the filter bounds the total.) The individual cost depends only on the
public configuration and the user's own numbers of values — never on other users or on the noise. The σ's are
computed in floats and then checked (and nudged up) in exact rational arithmetic so that the true cost never
exceeds ρ·(a/m_UB)², and the ledger's fixed-point cost of a is ⌈ρ·a²/m_UB²⌉ computed exactly from the decimal
of ρ (:meth:`ClippedSumCount.cost_table`).

**Private cell selection** (``threshold``; Rogers' unknown-domain histogram, Alg. 1 / Thm 7, with the user's own
cells as its Δ0). A cell is released iff Ñ > T with

    T = m_UB + σ_N·√(2·ln(1/δ_cell)).

Under the neighbour without ℓ, a cell that only ℓ fills does not exist; with ℓ, its count is a_ℓ ≤ m_UB and
Pr[a_ℓ + Z_N > T] ≤ Pr[Z_N ≥ σ_N√(2 ln(1/δ_cell))] ≤ exp(−ln(1/δ_cell)) = δ_cell (N_Z(0, σ²) is σ²-sub-Gaussian,
CKS). Outside that event the output is a post-processing of the Gaussian mechanism on the cells both neighbours
have, so (Rogers Lemma 3.1) user ℓ's release is δ-approximate ρ-zCDP with ρ_ℓ as above and δ_ℓ = δ_cell·(number of
cells ℓ has values in) — the union bound over the cells ℓ might hold alone. Unselected cells still cost their
users ρ (their counts were noised; selection is post-processing).

**Public cell list** (``listed``): every listed cell is released at every window (noise on zeros where no one has
data), data in other cells is ignored and charges nothing, and δ_ℓ = 0.

**Q.** Q = 2^j with j = ⌊log2(2³⁰·√(2ρ_S)/m_UB)⌋ clamped to [0, 31], so σ_S ∈ [2²⁹, 2³⁰) in half-steps unless
clamped: the quantisation error of a value (≤ U/(2Q)) is then below 2⁻²⁹ of the sum's noise standard deviation
σ_S·U/(2Q). σ_S and σ_N must not exceed the discrete sampler's 2⁴⁰ (a ρ so small that the noise is 2⁴⁰ times the
value range is refused).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from streamdp.accounting.cost import DELTA_SCALE, LOSS_SCALE, N_COMPONENTS, Cost, cost_to_fixed
from streamdp.noise import samplers
from streamdp.noise.discrete import MAX_SCALE

__all__ = ["ClippedSumCount", "MAX_M_UB", "selection_threshold"]

#: largest m_UB (the per-user fixed-point cost table has m_UB + 1 rows)
MAX_M_UB = 100_000

_SUM_BITS = 30  # σ_S in half-steps lies in [2^29, 2^30) unless Q is clamped


def _check_m_ub(m_ub) -> int:
    if isinstance(m_ub, bool) or not isinstance(m_ub, (int, np.integer)) or not 1 <= int(m_ub) <= MAX_M_UB:
        raise ValueError(f"m_ub must be an integer in [1, {MAX_M_UB}], got {m_ub!r}")
    return int(m_ub)


def _check_positive(x, name: str) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a finite number > 0, got {x!r}") from None
    if isinstance(x, bool) or not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {x!r}")
    return v


def _sigma_for(numerator: int, rho: Fraction) -> float:
    """The smallest float σ (≈ numerator/√(2ρ)) with numerator²/(2σ²) ≤ ρ exactly (checked in rationals)."""
    s = numerator / math.sqrt(2.0 * float(rho))
    while Fraction(numerator) ** 2 / (2 * Fraction(s) ** 2) > rho:
        s = math.nextafter(s, math.inf)
    return s


def selection_threshold(m_ub: int, sigma_count: float, delta_cell: float) -> float:
    """T = m_UB + σ_N·√(2·ln(1/δ_cell)): a cell is released iff its noisy count exceeds T (module docstring)."""
    m_ub = _check_m_ub(m_ub)
    d = float(delta_cell)
    if not 0.0 < d < 1.0:
        raise ValueError(f"delta_cell must lie in the open interval (0, 1), got {delta_cell!r}")
    return m_ub + _check_positive(sigma_count, "sigma_count") * math.sqrt(2.0 * math.log(1.0 / d))


@dataclass(frozen=True)
class _Calibration:
    q: int
    sigma_sum: float  # in half-steps U/(2Q)
    sigma_count: float


class ClippedSumCount:
    """Noisy clipped sum and count per cell under add/remove neighbours (module docstring).

    ``upper`` U, ``m_ub`` values per user per cell, ``rho`` the zCDP cost of one cell for a user with m_UB values
    there, ``sum_share`` the part of ρ spent on the sum (the rest on the count)."""

    def __init__(self, upper: float, m_ub: int, rho: float, sum_share: float = 0.5) -> None:
        self.upper = _check_positive(upper, "upper")
        self.m_ub = _check_m_ub(m_ub)
        self.rho = _check_positive(rho, "rho")
        f = _check_positive(sum_share, "sum_share")
        if not f < 1.0:
            raise ValueError(f"sum_share must lie in the open interval (0, 1), got {sum_share!r}")
        self.sum_share = f
        rho_q = Fraction(repr(self.rho))  # what the operator wrote (accounting.cost: costs from decimals)
        rho_s = Fraction(repr(f)) * rho_q
        rho_n = rho_q - rho_s
        j = math.floor(math.log2(2.0**_SUM_BITS * math.sqrt(2.0 * float(rho_s)) / self.m_ub))
        q = 1 << min(max(j, 0), 31)
        sigma_s = _sigma_for(self.m_ub * q, rho_s)
        sigma_n = _sigma_for(self.m_ub, rho_n)
        for s, what in ((sigma_s, "sum"), (sigma_n, "count")):
            if s > MAX_SCALE:
                raise ValueError(f"rho = {rho!r} is too small for m_ub = {self.m_ub}: the {what}'s noise would exceed "
                                 "2**40 steps (a release that is pure noise); raise rho or lower m_ub")
        self._cal = _Calibration(q, sigma_s, sigma_n)
        self._tables: dict[float, np.ndarray] = {}

    # ------------------------------------------------------------------------------------------ parameters
    @property
    def q(self) -> int:
        """Q: values are quantised to k·U/Q, k ∈ {0, …, Q}."""
        return self._cal.q

    @property
    def sum_step(self) -> float:
        """U/(2Q): the value of one half-step of the centred sum."""
        return self.upper / (2 * self._cal.q)

    @property
    def sigma_sum(self) -> float:
        """σ_S in half-steps (the discrete Gaussian of the sum)."""
        return self._cal.sigma_sum

    @property
    def sigma_count(self) -> float:
        """σ_N (the discrete Gaussian of the count)."""
        return self._cal.sigma_count

    @property
    def sum_sd(self) -> float:
        """The standard deviation of the released sum's noise from Z_S, in value units: σ_S·U/(2Q)."""
        return self.sigma_sum * self.sum_step

    def threshold(self, delta_cell: float) -> float:
        """The private selection threshold T for δ_cell (:func:`selection_threshold`)."""
        return selection_threshold(self.m_ub, self.sigma_count, delta_cell)

    # ------------------------------------------------------------------------------------------------ costs
    def cell_cost(self, kept: int, delta_cell: float = 0.0) -> Cost:
        """A user's cost for one cell where they keep ``kept`` = a ≤ m_UB values: ρ·(a/m_UB)² and δ_cell
        (0 without private selection). An upper bound of the exact a²·(Q²/(2σ_S²) + 1/(2σ_N²))."""
        a = int(kept)
        if not 0 <= a <= self.m_ub:
            raise ValueError(f"kept must be in [0, m_ub = {self.m_ub}], got {kept!r}")
        if a == 0:
            return Cost()
        return Cost.zcdp(self.rho * a * a / (self.m_ub * self.m_ub), float(delta_cell))

    def cost_table(self, delta_cell: float = 0.0) -> np.ndarray:
        """int64 (m_UB + 1, N_COMPONENTS): row a is the fixed-point cost of a cell where the user keeps a values —
        ⌈ρ·a²/m_UB²⌉ at 10⁻¹² computed exactly from ρ's decimal, and δ_cell rounded up; row 0 is zero."""
        key = float(delta_cell)
        t = self._tables.get(key)
        if t is None:
            t = np.zeros((self.m_ub + 1, N_COMPONENTS), dtype=np.int64)
            r = Fraction(repr(self.rho))
            num, den = r.numerator * LOSS_SCALE, r.denominator * self.m_ub * self.m_ub
            t[1:, 0] = [-(-(num * a * a) // den) for a in range(1, self.m_ub + 1)]  # exact ceiling
            t[1:, 1] = cost_to_fixed(key, DELTA_SCALE) if key else 0
            t.setflags(write=False)
            self._tables[key] = t
        return t

    # ---------------------------------------------------------------------------------------------- release
    def quantize(self, values) -> np.ndarray:
        """c = 2·rint(clip(v, 0, U)·Q/U) − Q ∈ [−Q, Q] (int64), the centred half-steps of each value."""
        v = np.asarray(values, dtype=np.float64)
        if not np.all(np.isfinite(v)):
            raise ValueError("values must be finite")
        q = self._cal.q
        k = np.clip(np.rint(np.clip(v, 0.0, self.upper) * q / self.upper), 0, q).astype(np.int64)
        return 2 * k - q

    def noise(self, rng: np.random.Generator, sums, counts) -> tuple[np.ndarray, np.ndarray]:
        """(S̃, Ñ) = (S + Z_S, N + Z_N) for arrays of integer sums (half-steps) and counts, one independent pair of
        discrete Gaussians per cell; all the sums' noises are drawn first, then all the counts'."""
        s = np.asarray(sums, dtype=np.int64)
        n = np.asarray(counts, dtype=np.int64)
        if s.shape != n.shape or s.ndim != 1:
            raise ValueError("sums and counts must be 1-d arrays of one shape")
        zs = np.asarray(samplers.discrete_gaussian(rng, self.sigma_sum, s.size), dtype=np.int64)
        zn = np.asarray(samplers.discrete_gaussian(rng, self.sigma_count, n.size), dtype=np.int64)
        return s + zs, n + zn

    def publish(self, noisy_sums, noisy_counts) -> list[dict]:
        """Post-processing of (S̃, Ñ): per cell ``{"mean": float | None, "sum": float, "count": int}`` (module
        docstring, step 4); the mean is null when Ñ < 1 and clamped to [0, U] otherwise."""
        out = []
        half, q, u = self.sum_step, self._cal.q, self.upper
        for s, n in zip(np.asarray(noisy_sums).tolist(), np.asarray(noisy_counts).tolist()):
            mean = None if n < 1 else min(max(u / 2 + half * (s / n), 0.0), u)
            out.append({"mean": mean, "sum": half * (s + q * n), "count": int(n)})
        return out

    def release_cells(self, rng: np.random.Generator, values_by_cell) -> list[dict]:
        """A library convenience for one window: ``values_by_cell`` is a list of cells, each a list of per-user
        value lists (already one user's values in the order to keep). Returns :meth:`publish` of every cell (no
        selection: the caller's cells are its public list)."""
        sums, counts = [], []
        for users in values_by_cell:
            s = n = 0
            for vals in users:
                kept = np.asarray(vals, dtype=np.float64).ravel()[: self.m_ub]
                s += int(self.quantize(kept).sum())
                n += int(kept.size)
            sums.append(s)
            counts.append(n)
        return self.publish(*self.noise(rng, sums, counts))

    def __repr__(self) -> str:
        return (f"ClippedSumCount(upper={self.upper!r}, m_ub={self.m_ub}, rho={self.rho!r}, "
                f"sum_share={self.sum_share!r})")
