"""Query kind ``grid_means``: user-level means per (cell, window), registered on import.

Two neighbour models (``neighbours``): ``"add_remove"`` (default: presence protected, costs in ``zcdp``;
:class:`streamdp.engine.queries.grid_means.GridMeans`) and ``"bounded_unsafe_presence"`` (the IoT-means paper's
bounded estimators, presence NOT protected, costs in their own notion;
:class:`streamdp.engine.queries.grid_means_bounded.BoundedGridMeans`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from streamdp.config.kinds import ConfigError, Param, QueryKind, public_window_cost, register

ESTIMATORS = ("baseline", "array_averaging", "levy", "fixed_quantile", "optimized_quantile")
NEIGHBOURS = ("add_remove", "bounded_unsafe_presence")

PRESENCE_CAVEAT = (
    "neighbours = 'bounded_unsafe_presence' selects the bounded estimators of the IoT-means paper, which treat "
    "per-cell user and sample counts as public: a user's presence in a cell (and their number of values) is NOT "
    "protected; their cost is kept in the separate notion bounded_unsafe_presence with a per-query budget, never in "
    "zcdp"
)

_ADD_REMOVE_ONLY = ("rho", "sum_share", "cell_selection", "delta_cell", "cell_list")
_BOUNDED_ONLY = ("epsilon", "estimator", "grouping", "min_users", "publish_counts", "bounded_budget_rho")


@dataclass(frozen=True)
class _MUBParam(Param):
    """m_UB: "auto", "median", "eq10" (bounded estimators only) or an integer ≥ 1."""

    def check(self, where: str, value: Any) -> Any:
        if isinstance(value, str):
            if value not in ("auto", "median", "eq10"):
                raise ConfigError(f"{where}.{self.name}: must be 'auto', 'median', 'eq10' or an integer ≥ 1, "
                                  f"got {value!r}")
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (
                isinstance(value, float) and not value.is_integer()) or value < 1:
            raise ConfigError(f"{where}.{self.name}: must be 'auto', 'median', 'eq10' or an integer ≥ 1, "
                              f"got {value!r}")
        return int(value)


def _grid_means(qid, *, horizon, **kw):
    if kw.pop("neighbours") == "bounded_unsafe_presence":
        from streamdp.engine.queries.grid_means_bounded import BoundedGridMeans

        for k in _ADD_REMOVE_ONLY:
            kw.pop(k)
        if kw.get("grouping") == "auto":
            kw["grouping"] = None
        if kw.get("m_ub") == "auto":
            kw["m_ub"] = None
        return BoundedGridMeans(qid, **kw)
    from streamdp.engine.queries.grid_means import GridMeans

    for k in _BOUNDED_ONLY:
        kw.pop(k)
    kw["m_ub"] = 1 if kw["m_ub"] == "auto" else kw["m_ub"]
    if kw["cell_selection"] == "listed":
        kw["delta_cell"] = None
    return GridMeans(qid, **kw)


def _unused(a: dict) -> dict[str, str]:
    if a["neighbours"] == "bounded_unsafe_presence":
        return {k: "a parameter of the default neighbours = 'add_remove' (presence protected), not of the bounded "
                   "estimators" for k in _ADD_REMOVE_ONLY}
    out = {k: "a parameter of the bounded estimators, which do not protect presence: set neighbours = "
              "'bounded_unsafe_presence' to use them (their cost goes to a separate notion), or configure the "
              "default add/remove estimator with rho, m_ub and cell_selection (docs/query_grid_means.md)"
           for k in _BOUNDED_ONLY}
    if a["cell_selection"] == "listed":
        out["delta_cell"] = "the private selection's δ per cell; a public cell_list selects nothing privately"
    return out


def _check(where: str, a: dict) -> None:
    if a["cells"] == "grid":
        if a["cell_size"] is None:
            raise ConfigError(f"{where}.cell_size: is required when cells = 'grid'")
        origin = a["origin"]
        if origin is not None and (len(origin) != 2 or not all(
                isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in origin)):
            raise ConfigError(f"{where}.origin: must be two finite numbers [loc0, loc1], got {origin!r}")
    else:
        if a["cell_size"] is not None:
            raise ConfigError(f"{where}.cell_size: only used when cells = 'grid' (cells = {a['cells']!r})")
        if a["origin"] is not None:
            raise ConfigError(f"{where}.origin: only used when cells = 'grid' (cells = {a['cells']!r})")
    if a["neighbours"] == "bounded_unsafe_presence":
        from streamdp.mechanisms.granular_laplace import MIN_EPSILON

        if a["epsilon"] is None:
            raise ConfigError(f"{where}.epsilon: is required with neighbours = 'bounded_unsafe_presence'")
        if a["epsilon"] < MIN_EPSILON:  # the granular Laplace's discrete parameter k/ε would pass its sampler's range
            raise ConfigError(f"{where}.epsilon: must be ≥ 2**-38 (≈ 3.6e-12), got {a['epsilon']!r}")
        if a["bounded_budget_rho"] is None:
            raise ConfigError(f"{where}.bounded_budget_rho: is required with neighbours = "
                              "'bounded_unsafe_presence' (each user's budget in that separate notion, for this "
                              "query)")
        from streamdp.accounting.cost import LOSS_SCALE, check_budget_range

        try:
            check_budget_range(a["bounded_budget_rho"], LOSS_SCALE, "bounded_budget_rho")
        except ValueError as e:
            raise ConfigError(f"{where}.bounded_budget_rho: {e}") from None
        if a["bounded_budget_rho"] == math.inf:
            raise ConfigError(f"{where}.bounded_budget_rho: must be finite")
        if a["estimator"] == "baseline":
            if a["grouping"] != "auto":
                raise ConfigError(f"{where}.grouping: not used by estimator 'baseline'")
            if a["m_ub"] != "auto":
                raise ConfigError(f"{where}.m_ub: not used by estimator 'baseline'")
        return
    if a["rho"] is None:
        raise ConfigError(f"{where}.rho: is required (the zCDP cost of one (cell, window) for a user with m_ub "
                          "values there)")
    if isinstance(a["m_ub"], str) and a["m_ub"] != "auto":
        raise ConfigError(f"{where}.m_ub: must be an integer ≥ 1 with neighbours = 'add_remove' (the rules "
                          f"'median' and 'eq10' read the per-cell counts, which are private), got {a['m_ub']!r}")
    from streamdp.mechanisms.grid_means.sum_count import MAX_M_UB

    if not isinstance(a["m_ub"], str) and a["m_ub"] > MAX_M_UB:
        raise ConfigError(f"{where}.m_ub: must be ≤ {MAX_M_UB}, got {a['m_ub']!r}")
    if a["cell_selection"] == "listed":
        cl = a["cell_list"]
        if not cl or not all(isinstance(k, str) and k for k in cl):
            raise ConfigError(f"{where}.cell_list: a non-empty list of cell keys (strings: 'ix,iy' for cells = "
                              "'grid', item names for cells = 'item') is required when cell_selection = 'listed'")
        if len(set(cl)) != len(cl):
            raise ConfigError(f"{where}.cell_list: cell keys must be distinct")
    elif a["cell_list"] is not None:
        raise ConfigError(f"{where}.cell_list: only used when cell_selection = 'listed'")


register(QueryKind(
    kind="grid_means",
    source="add_remove: noisy clipped sum and count (discrete Gaussian), private cell selection by Rogers' "
           "unknown-domain threshold (Alg. 1, Thm 7) or a public cell list; bounded_unsafe_presence: the IoT-means "
           "paper's Baseline, array averaging (WrapAround/BestFit), Levy, Fixed/Optimized Quantile, per-grid "
           "accounting (Thm II.3)",
    notion="zcdp",
    cost="add_remove (default): per user, per (cell, window) with >= 1 of their values: rho*(a/m_ub)^2 for a = "
         "min(values, m_ub) kept values, plus delta_cell with cell_selection = 'threshold'; reserve = actual. "
         "bounded_unsafe_presence: NOT in zcdp — in the separate notion bounded_unsafe_presence, per user per "
         "released (cell, window): epsilon^2/2 (baseline, array_averaging), 5*epsilon^2/32 (levy), 9*epsilon^2/64 "
         "(quantile estimators), against the per-query budget bounded_budget_rho",
    doc="user-level mean of the event's value (clipped to [0, upper]) per (cell, window); cells from a square grid "
        "over loc (cells = 'grid') or the event's FIRST item (cells = 'item'); events without value (or without "
        "loc / item) are ignored and charge nothing. Default neighbours = 'add_remove': presence protected (noisy "
        "clipped sum and count, private or listed cells). " + PRESENCE_CAVEAT,
    needs=("value", "loc", "items"),
    params=(
        Param("neighbours", "str", "'add_remove' (default: a user's presence and values are protected) or "
              "'bounded_unsafe_presence' (the bounded estimators: presence NOT protected, separate notion)",
              default="add_remove", choices=NEIGHBOURS),
        Param("upper", "float", "U: values are clipped to [0, U]", required=True, gt=0),
        Param("cells", "str", "'grid': square grid over loc; 'item': the event's first item is its category",
              default="grid", choices=("grid", "item")),
        Param("cell_size", "float", "grid cell side in loc's units (e.g. degrees); required for cells = 'grid'",
              default=None, gt=0, min=1e-9),
        Param("origin", "list", "grid origin [loc0, loc1] (default [0, 0]); cell (ix, iy) = "
              "floor((loc - origin) / cell_size)", default=None),
        _MUBParam("m_ub", "str|int", "m_UB: values kept per user per cell. add_remove: an integer ('auto' = 1); "
                  "bounded: 'auto' (median for array_averaging, eq10 otherwise), 'median', 'eq10' or an integer",
                  default="auto"),
        # add_remove
        Param("rho", "float", "add_remove: zCDP cost of one (cell, window) for a user with m_ub values there "
              "(required)", default=None, gt=0),
        Param("sum_share", "float", "add_remove: the part of rho spent on the noisy sum (the rest on the noisy "
              "count)", default=0.5, gt=0, lt=1),
        Param("cell_selection", "str", "add_remove: 'threshold' (cells released iff their noisy count passes T, "
              "delta_cell each) or 'listed' (the public cell_list, every window)", default="threshold",
              choices=("threshold", "listed")),
        Param("delta_cell", "float", "add_remove, threshold: δ per cell a user has values in (a cell only they "
              "fill is released with probability ≤ delta_cell)", default=1e-6, gt=0, lt=1),
        Param("cell_list", "list", "add_remove, listed: the public cells ('ix,iy' or item names), released every "
              "window", default=None),
        # bounded_unsafe_presence
        Param("epsilon", "float", "bounded: ε of each (cell, window) release (pure ε-DP for bounded neighbours)",
              default=None, gt=0),
        Param("estimator", "str", "bounded: the IoT-means paper's estimator", default="baseline", choices=ESTIMATORS),
        Param("grouping", "str", "bounded: array grouping of the clipping estimators ('auto' = bestfit)",
              default="auto", choices=("auto", "bestfit", "wraparound")),
        Param("min_users", "int", "bounded: cells with fewer admitted users are not released (counts are public "
              "under the bounded model)", default=1, min=1),
        Param("publish_counts", "bool", "bounded: publish per-cell users, samples and noise scale", default=True),
        Param("bounded_budget_rho", "float", "bounded: each user's budget in the notion bounded_unsafe_presence, "
              "for this query (required)", default=None, min=0),
    ),
    build=_grid_means,
    validate=_check,
    window_cost=public_window_cost,
    unused=_unused,
))
