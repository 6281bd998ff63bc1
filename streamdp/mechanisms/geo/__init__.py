"""Location releases under (concentrated) geo-privacy (Liang–Yi (CGP); implementation notes on Liang–Yi (CGP)).

Costs are charged in the ``cgp`` notion as ``Cost.cgp(rho)``, ρ per (coordinate unit)² — the unit of the
coordinates handed in; convert with :func:`streamdp.accounting.cgp.convert_cgp_rho` before adding costs of
different units.
ε-GP pieces are charged ε²/2 (Liang–Yi (CGP) Lemma 3.6).
"""

from streamdp.mechanisms.geo.convex_hull import (
    PCHResult,
    basic_convex_hull,
    choose_k,
    convex_hull_vertices,
    convex_intersection,
    hull_jaccard,
    midpoint_center,
    pch_cost,
    polygon_area,
    private_convex_hull,
)
from streamdp.mechanisms.geo.gaussian_cgp import GaussianCGP, IdentityQueryCGP, cgp_sigma
from streamdp.mechanisms.geo.planar_laplace import IdentityQueryGP, PlanarLaplaceGP, gp_cost
from streamdp.mechanisms.geo.pnn import (
    PNNResult,
    basic_knn,
    k_pnn,
    k_pnn_cost,
    k_pnn_epsilon,
    knn_distance_ratio,
    pnn,
    pnn_cost,
    theorem_4_10_gamma,
)
from streamdp.mechanisms.geo.svt import SparseVectorGP, SVTResult

__all__ = [
    "PCHResult",
    "basic_convex_hull",
    "choose_k",
    "convex_hull_vertices",
    "convex_intersection",
    "hull_jaccard",
    "midpoint_center",
    "pch_cost",
    "polygon_area",
    "private_convex_hull",
    "GaussianCGP",
    "IdentityQueryCGP",
    "cgp_sigma",
    "IdentityQueryGP",
    "PlanarLaplaceGP",
    "gp_cost",
    "PNNResult",
    "basic_knn",
    "k_pnn",
    "k_pnn_cost",
    "k_pnn_epsilon",
    "knn_distance_ratio",
    "pnn",
    "pnn_cost",
    "theorem_4_10_gamma",
    "SparseVectorGP",
    "SVTResult",
]
