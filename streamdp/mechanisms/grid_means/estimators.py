"""The five user-level mean estimators of Rameshwar–Tandon (IoT means) for one grid (a (cell, window) pair), each pure ε-DP.

=====================  ==========================================================================================
``Baseline``           μ + Lap(Δ/ε), Δ = U·m*/Σ_ℓ m_ℓ (Rameshwar–Tandon (IoT means) §III-B)
``ArrayAveraging``     (1/K)·Σ Ā_i + Lap(Δ/ε), Δ = U/K̄ (BestFit, eq. (6)) or 2U/K (WrapAround) (Rameshwar–Tandon (IoT means) §III-C)
``Levy``               [a, b] ← PrivateInterval at ε/2 (Alg. 3); (1/K̄)·Σ Π_[a,b](Ā_i) + Lap(2(b−a)/(K̄ε))
                       (Rameshwar–Tandon (IoT means) §III-D, eq. (7))
``FixedQuantile``      [a', b'] ← Smith's (1/10, 9/10) interquantile interval, ε/4 per end; then as Levy with
                       Lap(2(b'−a')/(K̄ε)) (Rameshwar–Tandon (IoT means) §III-E, §III-E1)
``OptimizedQuantile``  as FixedQuantile with the (t/K̄, 1 − t/K̄) interval, t = ⌈2/ε⌉ (Rameshwar–Tandon (IoT means) §III-E2)
=====================  ==========================================================================================

The clipping estimators take ``grouping="bestfit"`` (default, Rameshwar–Tandon (IoT means)'s choice) or ``"wraparound"``; under
WrapAround K replaces K̄, a user can touch two arrays, so the Laplace sensitivity doubles and the exponential
mechanisms use utility sensitivity 2 (see :mod:`.private_interval`, :mod:`.interquantile`).

Common interface: ``estimate(values_by_user, rng) -> float``, ``release(values_by_user, rng) ->``
:class:`GridMeanRelease` (the value plus the public by-products: m_UB, K or K̄, the private interval, the noise
scale — all safe to publish, see below), ``cost(epsilon=None) -> Cost`` and ``users_charged(values_by_user)``.

Privacy model (implementation notes on Rameshwar–Tandon (IoT means)): neighbouring grids have the same users with the same counts ^g m_ℓ (bounded DP;
counts public); one user's values change. Values are clipped to [0, U] (U from the configuration). Under this
model every estimator is pure ε-DP for the users in the grid:

* Baseline and ArrayAveraging: Laplace mechanism (Rameshwar–Tandon (IoT means) Thm II.1) with the sensitivities above;
* Levy / Quantile: the interval step is ε/2-DP (exponential mechanism; Alg. 3 or Smith ×2 at ε/4), the noisy
  projected mean is ε/2-DP given the interval (sensitivity (b − a)/K̄, Laplace scale (b − a)/(K̄·ε/2)), and basic
  composition (Rameshwar–Tandon (IoT means) Thm II.2) gives ε. The interval, K̄ and m_UB may be published: the interval is the first
  output of the ε-DP composition and K̄, m_UB are functions of the public counts.

Cost (zCDP, per estimator, :meth:`GridMeanEstimator.cost`): Baseline and ArrayAveraging are one Laplace release,
pure ε-DP ⇒ ε²/2 (Bun–Steinke 2016 Prop. 1.4; ``Cost.pure_dp``, Rogers (unknown-domain) Thm 3). Levy and Quantile compose their two
steps in zCDP (Rogers (unknown-domain) Thm 6) instead of composing ε first: the interval is an exponential mechanism (Alg. 3 at ε/2,
or two Smith quantiles at ε/4), ε′-DP with range ε′ and so ε′²/8-zCDP (Rogers (unknown-domain) Thm 5), and the projected mean is a
Laplace release at ε/2, (ε/2)²/2 — Levy 5ε²/32, Quantile 9ε²/64, both below ε²/2 and both still implying the
pure ε-DP above. Charged **only to the
users present in the grid** (Rameshwar–Tandon (IoT means) Thm II.3: a user pays Σ_{g ∈ G_ℓ} ^gε over the grids they appear in). The
caller charges ``users_charged(values_by_user)`` — every user with at least one value in the grid, including
users whose samples a clipping strategy happened to drop — before it publishes the release.

The released value is not clamped to [0, U], so that the noise stays unbiased for subscribers who aggregate
releases; clamping is free post-processing for those who want it.

Caveat: the guarantee is for bounded neighbours. m_UB, K̄, m* and Σm are computed from the counts; if a user's
presence or count in a grid must itself be protected (add/remove-user neighbours), these estimators do not
provide it as written.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Hashable

import numpy as np

from streamdp.accounting.cost import Cost
from streamdp.mechanisms.grid_means.array_averaging import (
    Grouping,
    GroupingPlan,
    array_averaging_sensitivity,
    array_means,
    make_plan,
)
from streamdp.mechanisms.grid_means.clipping import MUBRule, check_m_ub, resolve_m_ub
from streamdp.mechanisms.grid_means.data import GridValues, as_grid_values, check_epsilon, check_upper
from streamdp.mechanisms.grid_means.interquantile import (private_interquantile_interval,
                                                           private_interquantile_interval_cost)
from streamdp.mechanisms.grid_means.private_interval import levy_tau, private_interval, private_interval_cost
from streamdp.mechanisms.granular_laplace import granular_laplace

__all__ = [
    "GridMeanRelease",
    "GridMeanEstimator",
    "Baseline",
    "ArrayAveraging",
    "Levy",
    "FixedQuantile",
    "OptimizedQuantile",
]


@dataclass(frozen=True)
class GridMeanRelease:
    """One grid's release. ``value`` is the private mean; the other fields are public by-products (see the
    module docstring) useful to subscribers and the ledger."""

    estimator: str
    value: float
    epsilon: float
    sensitivity: float  # of the statistic the final Laplace noise protects
    noise_scale: float  # b of that Laplace noise (0 when the statistic is a constant of the interval)
    grouping: str | None = None
    m_ub: int | None = None
    n_arrays: int | None = None  # K (WrapAround) or K̄ (BestFit)
    interval: tuple[float, float] | None = None


class GridMeanEstimator(ABC):
    """A pure ε-DP user-level mean of one grid's values in [0, U]."""

    name: ClassVar[str]

    def __init__(self, epsilon: float, upper: float) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.upper = check_upper(upper)

    # ------------------------------------------------------------------------------------------ interface
    def estimate(self, values_by_user: Any, rng: np.random.Generator) -> float:
        """The private mean of one grid (see :meth:`release`)."""
        return self.release(values_by_user, rng).value

    def release(self, values_by_user: Any, rng: np.random.Generator) -> GridMeanRelease:
        """``values_by_user``: a mapping user → values, a sequence of per-user values or a :class:`GridValues`."""
        return self._release(as_grid_values(values_by_user, self.upper), rng)

    def cost(self, epsilon: float | None = None) -> Cost:
        """Per-user cost of one release at ε (default: this estimator's ε), for users present in the grid only.

        One Laplace release, pure ε-DP (Rameshwar–Tandon (IoT means) Thm II.1) ⇒ ε²/2-zCDP (Bun–Steinke Prop. 1.4, Rogers (unknown-domain) Thm 3), charged per
        grid to the grid's users (Rameshwar–Tandon (IoT means) Thm II.3). The two-step estimators override it (module docstring)."""
        eps = self.epsilon if epsilon is None else check_epsilon(epsilon)
        return Cost.pure_dp(eps)

    @classmethod
    def cost_at(cls, epsilon: float) -> Cost:
        """:meth:`cost` of this estimator class at ε (the cost depends on ε only)."""
        return cls.cost(cls.__new__(cls), check_epsilon(epsilon))

    def users_charged(self, values_by_user: Any) -> tuple[Hashable, ...]:
        """The users who pay :meth:`cost` for this grid: all users with ≥ 1 value (Rameshwar–Tandon (IoT means) Thm II.3)."""
        return as_grid_values(values_by_user, self.upper).user_ids

    @abstractmethod
    def _release(self, grid: GridValues, rng: np.random.Generator) -> GridMeanRelease: ...

    def __repr__(self) -> str:
        return f"{type(self).__name__}(epsilon={self.epsilon!r}, upper={self.upper!r})"


def _laplace_release(rng: np.random.Generator, statistic: float, sensitivity: float,
                     epsilon: float) -> tuple[float, float]:
    """(release, noise scale): statistic + Lap(Δ/ε) on a power-of-two grid, pure ε-DP without the floating-point
    leak of a float Laplace sum (:mod:`streamdp.mechanisms.granular_laplace`); the scale is the one actually used,
    at most (1 + 2⁻³⁰)·Δ/ε (for ε ≥ 2⁻⁹; (1 + 2⁻³⁸/ε)·Δ/ε below). A zero sensitivity means the statistic is already a function of public or private
    outputs (an interval of zero width): released as it is, scale 0."""
    if sensitivity <= 0:
        return float(statistic), 0.0
    return granular_laplace(rng, statistic, sensitivity, epsilon)


# ------------------------------------------------------------------------------------------------- Baseline
class Baseline(GridMeanEstimator):
    """M_Baseline = μ + Lap(Δ_f/ε), Δ_f = U·m*/Σ_ℓ m_ℓ (Rameshwar–Tandon (IoT means) §III-B). Pure ε-DP (Rameshwar–Tandon (IoT means) Thm II.1)."""

    name = "Baseline"

    @staticmethod
    def sensitivity(upper: float, counts) -> float:
        """Δ_f = U·m*/Σ_ℓ m_ℓ (Rameshwar–Tandon (IoT means) §III-B): one user moves at most m* of the Σm values, each by ≤ U."""
        c = np.asarray(counts, dtype=np.int64)
        return float(upper) * int(c.max()) / int(c.sum())

    def _release(self, grid: GridValues, rng: np.random.Generator) -> GridMeanRelease:
        delta = self.sensitivity(self.upper, grid.counts)
        value, scale = _laplace_release(rng, grid.true_mean(), delta, self.epsilon)  # Lap(Δ/ε) ⇒ ε-DP; Cost.pure_dp(ε)
        return GridMeanRelease(self.name, value, self.epsilon, delta, scale)


# --------------------------------------------------------------------------------------- clipped estimators
class _ClippedEstimator(GridMeanEstimator):
    """Shared steps of the estimators that clip the number of samples per user (Rameshwar–Tandon (IoT means) §III-C…E)."""

    default_m_ub: ClassVar[MUBRule]

    def __init__(self, epsilon: float, upper: float, grouping: Grouping = "bestfit",
                 m_ub: MUBRule | None = None) -> None:
        super().__init__(epsilon, upper)
        if grouping not in ("bestfit", "wraparound"):
            raise ValueError(f"grouping must be 'bestfit' or 'wraparound', got {grouping!r}")
        self.grouping: Grouping = grouping
        self.m_ub_rule: MUBRule = check_m_ub(self.default_m_ub if m_ub is None else m_ub)
        self._cache: tuple[bytes, GroupingPlan] | None = None

    def plan(self, counts) -> GroupingPlan:
        """The grouping of these (public) counts. The last plan is cached: it depends on the counts only."""
        counts = np.asarray(counts, dtype=np.int64)
        key = counts.tobytes()
        cached = self._cache
        if cached is not None and cached[0] == key:
            return cached[1]
        plan = make_plan(counts, resolve_m_ub(counts, self.m_ub_rule), self.grouping)
        self._cache = (key, plan)
        return plan

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(epsilon={self.epsilon!r}, upper={self.upper!r}, "
                f"grouping={self.grouping!r}, m_ub={self.m_ub_rule!r})")


class ArrayAveraging(_ClippedEstimator):
    """M_ArrayAvg = (1/K̄)·Σ_i Ā_i + Lap(Δ/ε), Δ = U/K̄ (BestFit) or 2U/K (WrapAround) (Rameshwar–Tandon (IoT means) §III-C).
    m_UB defaults to the median of the counts (Rameshwar–Tandon (IoT means) Lemma III.2, §IV)."""

    name = "ArrayAveraging"
    default_m_ub = "median"

    def _release(self, grid: GridValues, rng: np.random.Generator) -> GridMeanRelease:
        plan = self.plan(grid.counts)
        f_arr = float(array_means(grid.values, plan).mean())
        delta = array_averaging_sensitivity(self.upper, plan)  # U/K̄ or 2U/K (Rameshwar–Tandon (IoT means) eq. (6), §III-C)
        value, scale = _laplace_release(rng, f_arr, delta, self.epsilon)  # Lap(Δ/ε) ⇒ ε-DP (Rameshwar–Tandon (IoT means) Thm II.1)
        return GridMeanRelease(self.name, value, self.epsilon, delta, scale, plan.grouping, plan.m_ub,
                               plan.n_arrays)


class _ProjectedEstimator(_ClippedEstimator):
    """Noisy mean of projections (Rameshwar–Tandon (IoT means) §III-D, §III-E): interval at ε/2, projected mean at ε/2."""

    default_m_ub = "eq10"

    @abstractmethod
    def _interval(self, means: np.ndarray, plan: GroupingPlan, rng: np.random.Generator) -> tuple[float, float]:
        """The private interval, ε/2-DP."""

    def _release(self, grid: GridValues, rng: np.random.Generator) -> GridMeanRelease:
        plan = self.plan(grid.counts)
        means = array_means(grid.values, plan)
        a, b = self._interval(means, plan, rng)  # ε/2-DP
        f = float(np.clip(means, a, b).mean())
        # Sensitivity of (1/K̄)·Σ Π_[a,b](Ā_i): (b − a)/K̄ (eq. (7)); ×2 under WrapAround (two arrays per user).
        delta = plan.arrays_per_user * (b - a) / plan.n_arrays
        # Lap(2Δ/ε): the mean's share ε/2 (Rameshwar–Tandon (IoT means) §III-D); total ε (Thm II.2)
        value, scale = _laplace_release(rng, f, delta, self.epsilon / 2)
        return GridMeanRelease(self.name, value, self.epsilon, delta, scale, plan.grouping, plan.m_ub,
                               plan.n_arrays, (float(a), float(b)))


class Levy(_ProjectedEstimator):
    """Levy (Rameshwar–Tandon (IoT means) §III-D): PrivateInterval (Alg. 3) at ε/2 with τ = U·√(log(2K̄/γ)/(2 m_UB)) (eq. (8)), then the
    projected mean + Lap(2(b − a)/(K̄ε)). m_UB by eq. (10); γ = 0.2 (Rameshwar–Tandon (IoT means) §IV)."""

    name = "Levy"

    def __init__(self, epsilon: float, upper: float, grouping: Grouping = "bestfit",
                 m_ub: MUBRule | None = None, gamma: float = 0.2) -> None:
        super().__init__(epsilon, upper, grouping, m_ub)
        if not (0 < float(gamma) < 1):
            raise ValueError(f"gamma must lie in (0, 1), got {gamma!r}")
        self.gamma = float(gamma)

    def tau(self, plan: GroupingPlan) -> float:
        return levy_tau(self.upper, plan.n_arrays, plan.m_ub, self.gamma)  # eq. (8), public

    def cost(self, epsilon: float | None = None) -> Cost:
        """Alg. 3 at ε/2 (exponential mechanism: (ε/2)²/8, Rogers (unknown-domain) Thm 5) + Lap at ε/2 ((ε/2)²/2, Rogers (unknown-domain) Thm 3), composed
        (Rogers (unknown-domain) Thm 6): 5ε²/32, δ = 0."""
        eps = self.epsilon if epsilon is None else check_epsilon(epsilon)
        return private_interval_cost(eps / 2) + Cost.pure_dp(eps / 2)

    def _interval(self, means, plan, rng):
        # Exponential mechanism at ε/2 (weights exp(−ε·c/4) for Δc = 1) — Rameshwar–Tandon (IoT means) Alg. 3.
        return private_interval(means, self.epsilon / 2, self.tau(plan), self.upper, rng,
                                utility_sensitivity=plan.arrays_per_user)


class _QuantileEstimator(_ProjectedEstimator):
    def quantile_levels(self, n_arrays: int) -> tuple[float, float]:
        raise NotImplementedError

    def cost(self, epsilon: float | None = None) -> Cost:
        """Two Smith quantiles at ε/4 (exponential mechanisms: 2·(ε/4)²/8, Rogers (unknown-domain) Thm 5) + Lap at ε/2 ((ε/2)²/2,
        Rogers (unknown-domain) Thm 3), composed (Rogers (unknown-domain) Thm 6): 9ε²/64, δ = 0."""
        eps = self.epsilon if epsilon is None else check_epsilon(epsilon)
        return private_interquantile_interval_cost(eps / 4) + Cost.pure_dp(eps / 2)

    def _interval(self, means, plan, rng):
        q_lo, q_hi = self.quantile_levels(plan.n_arrays)
        # Smith's exponential mechanism, ε/4 per end ⇒ ε/2 for the interval (Rameshwar–Tandon (IoT means) §III-E1).
        return private_interquantile_interval(means, q_lo, q_hi, self.epsilon / 4, 0.0, self.upper, rng,
                                              utility_sensitivity=plan.arrays_per_user)


class FixedQuantile(_QuantileEstimator):
    """Quantile with the FixedQuantile subroutine (Rameshwar–Tandon (IoT means) §III-E1): Smith's private (1/10, 9/10) interquantile
    interval of the array means (ε/4 per end), then the projected mean + Lap(2(b' − a')/(K̄ε))."""

    name = "FixedQuantile"

    def __init__(self, epsilon: float, upper: float, grouping: Grouping = "bestfit",
                 m_ub: MUBRule | None = None, quantiles: tuple[float, float] = (0.1, 0.9)) -> None:
        super().__init__(epsilon, upper, grouping, m_ub)
        q_lo, q_hi = (float(q) for q in quantiles)
        if not (0.0 <= q_lo <= q_hi <= 1.0):
            raise ValueError(f"quantiles must satisfy 0 ≤ q_lo ≤ q_hi ≤ 1, got {quantiles!r}")
        self.quantiles = (q_lo, q_hi)

    def quantile_levels(self, n_arrays: int) -> tuple[float, float]:
        return self.quantiles


class OptimizedQuantile(_QuantileEstimator):
    """Quantile with the OptimizedQuantile subroutine (Rameshwar–Tandon (IoT means) §III-E2, after Amin et al.): the (t/K̄, 1 − t/K̄)
    interquantile interval with t = ⌈2/ε⌉ (ε the estimator's total budget), both levels clamped to 1/2 when
    t/K̄ > 1/2. (The draft also writes ⌊2/ε⌋ for the lower end; we follow its interval statement, ⌈2/ε⌉ both.)"""

    name = "OptimizedQuantile"

    def quantile_levels(self, n_arrays: int) -> tuple[float, float]:
        t = math.ceil(2.0 / self.epsilon)
        q = min(t / n_arrays, 0.5)
        return q, 1.0 - q
