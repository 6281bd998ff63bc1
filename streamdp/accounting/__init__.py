"""Privacy accounting: fixed-point cost vectors (:mod:`.cost`), δ-approximate ρ-zCDP composition and (ε, δ)
conversions (:mod:`.zcdp`), concentrated geo-privacy units, conversions and the approximate-GP filter (:mod:`.cgp`).
"""

from streamdp.accounting.cgp import (
    DISTANCE_UNITS,
    approx_gp_budget,
    approx_gp_filter_continue,
    approx_gp_filter_value,
    cgp_to_gp_epsilon,
    cgp_to_gp_epsilon_at,
    cgp_to_gp_epsilon_simple,
    convert_cgp_rho,
    convert_distance,
    convert_gp_epsilon,
    g_delta,
    gp_to_cgp,
    metres_per_unit,
)
from streamdp.accounting.cost import (
    COMPONENTS,
    NOTIONS,
    Cost,
    budget_to_fixed,
    budget_vector,
    cost_to_fixed,
    fixed_to_cost,
)
from streamdp.accounting.zcdp import (
    bun_steinke_epsilon,
    cks_delta,
    cks_epsilon,
    cks_epsilon_at,
    compose,
    gaussian_exact_delta,
    gaussian_exact_epsilon,
    pure_dp_to_zcdp,
    zcdp_to_dp,
)

__all__ = [
    # cost vectors
    "COMPONENTS",
    "NOTIONS",
    "Cost",
    "budget_to_fixed",
    "budget_vector",
    "cost_to_fixed",
    "fixed_to_cost",
    # zCDP
    "compose",
    "pure_dp_to_zcdp",
    "bun_steinke_epsilon",
    "cks_epsilon",
    "cks_epsilon_at",
    "cks_delta",
    "gaussian_exact_epsilon",
    "gaussian_exact_delta",
    "zcdp_to_dp",
    # CGP
    "DISTANCE_UNITS",
    "metres_per_unit",
    "convert_cgp_rho",
    "convert_gp_epsilon",
    "convert_distance",
    "gp_to_cgp",
    "g_delta",
    "cgp_to_gp_epsilon_at",
    "cgp_to_gp_epsilon",
    "cgp_to_gp_epsilon_simple",
    "approx_gp_filter_value",
    "approx_gp_filter_continue",
    "approx_gp_budget",
]
