"""Built-in query kinds (registered on import)."""

from __future__ import annotations

from streamdp.config.kinds import Param, QueryKind, register


def _continual_counts(qid, *, horizon, **kw):
    from streamdp.engine.queries.continual_counts import ContinualCounts

    return ContinualCounts(qid, horizon=horizon, **kw)


register(QueryKind(
    kind="continual_counts",
    source="001 §4.3 Thm 11 (unknown-domain binary mechanism), DESIGN §3",
    notion="zcdp",
    cost="per user, per item first contributed to in the epoch: rho = C^2*ceil(log2(L+1))/(2*sigma^2), delta = delta_item",
    doc="noisy running count of every selected item (items not known in advance), sticky selection",
    needs=("items",),
    params=(
        Param("sigma", "float", "noise std of every tree node", required=True, gt=0),
        Param("delta_item", "float", "per-item failure probability δ_item", default=1e-6, gt=0, lt=1),
        Param("max_items_per_window", "int", "Δ0: distinct items a user may add per window", default=4, min=1),
        Param("max_per_item", "int", "C: contributions per (user, item) over the horizon", default=1, min=1,
              max=65535),
        Param("noise", "str", "node noise", default="gaussian", choices=("gaussian", "discrete_gaussian")),
        Param("estimator", "str", "running-count estimator", default="plain", choices=("plain", "optimal")),
    ),
    build=_continual_counts,
))
