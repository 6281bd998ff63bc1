"""Adaptive privacy budgeting (Liang–Yi (adaptive budgeting)): iterative elimination and savings reuse, local model.

* :mod:`~streamdp.mechanisms.adaptive.pie` — PIE-NI (Alg. 4), PIE-k (Alg. 5), round splits, λ(d, β),
  inverse-variance combination (Fact 6.2), executed-cost accounting;
* :mod:`~streamdp.mechanisms.adaptive.range_count` — range counting (Alg. 6): Proj_Γ (App. A), PM0/PM1 with the
  App. B shift, baselines BM0/BM1;
* :mod:`~streamdp.mechanisms.adaptive.sequential` — m sequential queries reusing savings (Alg. 3);
* :mod:`~streamdp.mechanisms.adaptive.kde` (Alg. 7), :mod:`~streamdp.mechanisms.adaptive.knn` (Alg. 8),
  :mod:`~streamdp.mechanisms.adaptive.threshold` (App. C, Alg. 9);
* :mod:`~streamdp.mechanisms.adaptive.synthetic` — synthetic trajectories for tests and benchmarks.

Costs are per user, in the ``cgp`` notion (ρ per distance unit²), except the central-model threshold query
(``zcdp``). PIE users are reserved their full r_i and settled to ``executed_rho`` (docs/contract.md §3).
"""

from streamdp.mechanisms.adaptive.kde import KDEResult, kde_baseline, kde_pie, kde_value
from streamdp.mechanisms.adaptive.knn import KNNResult, dist_error, knn_baseline, knn_pie, true_knn
from streamdp.mechanisms.adaptive.pie import (
    MAX_ROUNDS,
    PIEResult,
    Triple,
    confidence_lambda,
    distance_triple,
    executed_rho,
    gaussian_mechanism,
    gaussian_mechanism_cost,
    pie_cost,
    pie_k,
    pie_ni,
    point_triple,
    privacy_savings,
    split_rounds,
)
from streamdp.mechanisms.adaptive.range_count import (
    RangeCountResult,
    Rectangle,
    count_error,
    eta_threshold,
    range_count_baseline,
    range_count_pie,
    shift_coefficient,
    true_range_count,
)
from streamdp.mechanisms.adaptive.sequential import (
    SequentialBudgeting,
    SequentialResult,
    gamma_l,
    invariant_holds,
    reservation_to_rho,
    run_sequential,
    savings_allocation,
    savings_allocation_fixed,
    uniform_allocation,
)
from streamdp.mechanisms.adaptive.threshold import ThresholdResult, threshold_query_baseline, threshold_query_pie

__all__ = [
    "MAX_ROUNDS",
    "PIEResult",
    "Triple",
    "confidence_lambda",
    "distance_triple",
    "executed_rho",
    "gaussian_mechanism",
    "gaussian_mechanism_cost",
    "pie_cost",
    "pie_k",
    "pie_ni",
    "point_triple",
    "privacy_savings",
    "split_rounds",
    "RangeCountResult",
    "Rectangle",
    "count_error",
    "eta_threshold",
    "range_count_baseline",
    "range_count_pie",
    "shift_coefficient",
    "true_range_count",
    "SequentialBudgeting",
    "SequentialResult",
    "gamma_l",
    "invariant_holds",
    "reservation_to_rho",
    "run_sequential",
    "savings_allocation",
    "savings_allocation_fixed",
    "uniform_allocation",
    "KDEResult",
    "kde_baseline",
    "kde_pie",
    "kde_value",
    "KNNResult",
    "dist_error",
    "knn_baseline",
    "knn_pie",
    "true_knn",
    "ThresholdResult",
    "threshold_query_baseline",
    "threshold_query_pie",
]
