"""Metric DP at the user level via the earth mover's distance (Imola et al. (EMD); implementation notes on Imola et al. (EMD)).

Costs are charged in the ``emd`` notion as ``Cost.emd(alpha, delta)``: (α, δ)-d_EM-DP with α per unit of d_EM over
a domain metric d_X normalised to diameter ≤ 1.
"""

from streamdp.mechanisms.emd.bounded_reduction import BoundedEMDReduction, bernstein_b
from streamdp.mechanisms.emd.freq_est import (
    ClusteredKRR,
    FreqEstLocal,
    LaplaceHistogram,
    apply_clustered_inverse,
    clustered_krr_inverse,
    clustered_krr_matrix,
)
from streamdp.mechanisms.emd.itemwise import (
    ItemWiseGuarantee,
    PrivEMDItemWise,
    calibrate_alpha0,
    composition_alpha,
    group_delta_factor,
    shuffle_alpha,
    shuffle_alpha0_limit,
)
from streamdp.mechanisms.emd.linear import PrivEMDLinear
from streamdp.mechanisms.emd.metric import (
    clustered_metric,
    emd_histograms,
    emd_items,
    emd_points,
    histogram,
    project_to_simplex,
)

__all__ = [
    "BoundedEMDReduction",
    "bernstein_b",
    "ClusteredKRR",
    "FreqEstLocal",
    "LaplaceHistogram",
    "apply_clustered_inverse",
    "clustered_krr_inverse",
    "clustered_krr_matrix",
    "ItemWiseGuarantee",
    "PrivEMDItemWise",
    "calibrate_alpha0",
    "composition_alpha",
    "group_delta_factor",
    "shuffle_alpha",
    "shuffle_alpha0_limit",
    "PrivEMDLinear",
    "clustered_metric",
    "emd_histograms",
    "emd_items",
    "emd_points",
    "histogram",
    "project_to_simplex",
]
