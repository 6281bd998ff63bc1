"""Query kind ``grid_means``: user-level means per (cell, window) (Rameshwar–Tandon (IoT means)), registered on import."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from streamdp.config.kinds import ConfigError, Param, QueryKind, public_window_cost, register

ESTIMATORS = ("baseline", "array_averaging", "levy", "fixed_quantile", "optimized_quantile")

PRESENCE_CAVEAT = (
    "Inherits Rameshwar–Tandon (IoT means)'s bounded-DP assumption: per-cell user and sample counts are treated as public, which is WEAKER "
    "than contract §3's user-level guarantee for presence (a user's presence in a cell and their number of values "
    "there are not protected; only the values are)."
)


@dataclass(frozen=True)
class _MUBParam(Param):
    """m_UB: "auto" (the estimator's default), "median", "eq10" or an integer ≥ 1."""

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
    from streamdp.engine.queries.grid_means import GridMeans

    if kw.get("grouping") == "auto":
        kw["grouping"] = None
    if kw.get("m_ub") == "auto":
        kw["m_ub"] = None
    return GridMeans(qid, **kw)


def _check(where: str, a: dict) -> None:
    from streamdp.mechanisms.granular_laplace import MIN_EPSILON

    if a["epsilon"] < MIN_EPSILON:  # the granular Laplace's discrete parameter k/ε would pass its sampler's range
        raise ConfigError(f"{where}.epsilon: must be ≥ 2**-38 (≈ 3.6e-12), got {a['epsilon']!r}")
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
    if a["estimator"] == "baseline":
        if a["grouping"] != "auto":
            raise ConfigError(f"{where}.grouping: not used by estimator 'baseline'")
        if a["m_ub"] != "auto":
            raise ConfigError(f"{where}.m_ub: not used by estimator 'baseline'")


register(QueryKind(
    kind="grid_means",
    source="Rameshwar–Tandon (IoT means) §III (Baseline, array averaging WrapAround/BestFit, Levy, Fixed/Optimized Quantile), "
           "Thm II.3 (per-grid accounting)",
    notion="zcdp",
    cost="per user, per (cell, window) with >= 1 of their values that is released: rho_cell = epsilon^2/2 "
         "for baseline / array_averaging (one Laplace release), 5*epsilon^2/32 for levy, 9*epsilon^2/64 for the "
         "quantile estimators (exponential-mechanism interval, Rogers (unknown-domain) Thm 5, + Laplace at epsilon/2, composed in "
         "zCDP), delta = 0; a user in k released cells of a window pays k*rho_cell; users without values pay "
         "nothing (reserve = actual when min_users = 1)",
    doc="pure eps-DP user-level mean of the event's value (clipped to [0, upper]) per (cell, window); cells from a "
        "square grid over loc (cells = 'grid') or the event's FIRST item (cells = 'item'); events without value "
        "(or without loc / item) are ignored and charge nothing. " + PRESENCE_CAVEAT,
    needs=("value", "loc", "items"),
    params=(
        Param("epsilon", "float", "ε of each (cell, window) release (pure ε-DP; zCDP per cell: ε²/2, levy 5ε²/32, "
              "quantile 9ε²/64)",
              required=True, gt=0),
        Param("upper", "float", "U: values are clipped to [0, U]", required=True, gt=0),
        Param("estimator", "str", "Rameshwar–Tandon (IoT means) estimator", default="baseline", choices=ESTIMATORS),
        Param("cells", "str", "'grid': square grid over loc; 'item': the event's first item is its category",
              default="grid", choices=("grid", "item")),
        Param("cell_size", "float", "grid cell side in loc's units (e.g. degrees); required for cells = 'grid'",
              default=None, gt=0, min=1e-9),
        Param("origin", "list", "grid origin [loc0, loc1] (default [0, 0]); cell (ix, iy) = "
              "floor((loc - origin) / cell_size)", default=None),
        Param("grouping", "str", "array grouping of the clipping estimators ('auto' = bestfit)", default="auto",
              choices=("auto", "bestfit", "wraparound")),
        _MUBParam("m_ub", "str|int", "m_UB: 'auto' (median for array_averaging, eq10 otherwise), 'median', "
                  "'eq10' or an integer", default="auto"),
        Param("min_users", "int", "cells with fewer admitted users are not released (nobody pays for them); "
              "counts are public under the Rameshwar–Tandon (IoT means) assumption", default=1, min=1),
        Param("publish_counts", "bool", "publish per-cell users, samples and noise scale (public under the Rameshwar–Tandon (IoT means) "
              "assumption)", default=True),
    ),
    build=_grid_means,
    validate=_check,
    window_cost=public_window_cost,
))
