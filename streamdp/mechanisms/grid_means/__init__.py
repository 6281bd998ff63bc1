"""User-level per-grid means (Rameshwar–Tandon (IoT means): "Mean estimation with user-level privacy on multi-dimensional IoT datasets").

A *grid* is a (cell, window) pair; the input is each present user's values in [0, U]. Five pure ε-DP
estimators share ``estimate(values_by_user, rng) -> float`` and ``cost(epsilon) -> Cost`` (ε²/2 zCDP, charged
only to ``users_charged(values_by_user)`` — Rameshwar–Tandon (IoT means) Thm II.3):

* :class:`Baseline` (§III-B), :class:`ArrayAveraging` (§III-C), :class:`Levy` (§III-D),
  :class:`FixedQuantile` and :class:`OptimizedQuantile` (§III-E);
* building blocks: m_UB rules (:mod:`.clipping`), WrapAround/BestFit grouping (:mod:`.array_averaging`),
  PrivateInterval (:mod:`.private_interval`), Smith's private quantiles (:mod:`.interquantile`);
* :mod:`.synthetic`: the ITMS-profile check data of Rameshwar–Tandon (IoT means) §IV.
"""

from streamdp.mechanisms.grid_means.array_averaging import (
    GroupingPlan,
    array_averaging_sensitivity,
    array_means,
    best_fit_assignment,
    best_fit_plan,
    wraparound_num_arrays,
    wraparound_plan,
)
from streamdp.mechanisms.grid_means.clipping import eq10_m_ub, median_m_ub, resolve_m_ub
from streamdp.mechanisms.grid_means.data import GridValues
from streamdp.mechanisms.grid_means.estimators import (
    ArrayAveraging,
    Baseline,
    FixedQuantile,
    GridMeanEstimator,
    GridMeanRelease,
    Levy,
    OptimizedQuantile,
)
from streamdp.mechanisms.grid_means.interquantile import private_interquantile_interval, smith_quantile
from streamdp.mechanisms.grid_means.private_interval import levy_tau, private_interval

ESTIMATORS = {cls.name: cls for cls in (Baseline, ArrayAveraging, Levy, FixedQuantile, OptimizedQuantile)}

__all__ = [
    "ESTIMATORS",
    "GridValues",
    "GridMeanEstimator",
    "GridMeanRelease",
    "Baseline",
    "ArrayAveraging",
    "Levy",
    "FixedQuantile",
    "OptimizedQuantile",
    "GroupingPlan",
    "wraparound_plan",
    "wraparound_num_arrays",
    "best_fit_plan",
    "best_fit_assignment",
    "array_means",
    "array_averaging_sensitivity",
    "median_m_ub",
    "eq10_m_ub",
    "resolve_m_ub",
    "levy_tau",
    "private_interval",
    "smith_quantile",
    "private_interquantile_interval",
]
