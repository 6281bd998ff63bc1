"""Built-in query kinds (registered on import)."""

from __future__ import annotations

from streamdp.config.kinds import Param, QueryKind, public_window_cost, register


def _check_continual_counts(where, a):
    from streamdp.config.kinds import ConfigError

    if a["estimator"] == "optimal" and a["noise"] != "gaussian":
        raise ConfigError(f"{where}.estimator: 'optimal' needs noise = 'gaussian' (discrete nodes would need every "
                          "past node drawn for each new item)")


def _continual_counts(qid, *, horizon, **kw):
    from streamdp.accounting.cost import LOSS_SCALE, cost_to_fixed
    from streamdp.engine.queries.continual_counts import ContinualCounts
    from streamdp.mechanisms.binary_tree import charged_sensitivity_sq

    # The per-item cost ρ = Δ2²(C, L)/(2σ²) (binary_tree.charged_sensitivity_sq) must be a finite cost on the fixed-point
    # ledger: a σ too small gave "float division by zero" or "zcdp_rho must be finite" without the field (config
    # review, F7).
    sigma, c = kw["sigma"], kw["max_per_item"]
    try:
        rho = charged_sensitivity_sq(horizon, c, kw.get("estimator", "plain")) / (2.0 * sigma * sigma)
        cost_to_fixed(rho, LOSS_SCALE)
    except (ArithmeticError, ValueError):
        raise ValueError(f"sigma: {sigma!r} is too small: the per-item cost Δ2²(C, L)/(2σ²) with C = {c}, "
                         f"L = {horizon} does not fit the fixed-point ledger (ρ < 9.2e6)") from None
    return ContinualCounts(qid, horizon=horizon, **kw)


register(QueryKind(
    kind="continual_counts",
    source="Rogers (unknown-domain) §4.3 Thm 11 (unknown-domain binary mechanism), contract §3",
    notion="zcdp",
    cost="per user, per item first contributed to in the epoch: rho = D2(C, L)/(2*sigma^2), delta = delta_item, "
         "D2 the exact worst case of a user's contributions to the tree nodes the estimator reads (= ceil(log2(L+1)) "
         "for C = 1; plain: the prefix nodes, <= C^2*ceil(log2(L+1)); optimal: every completed node)",
    doc="noisy running count of every selected item (items not known in advance), sticky selection; node noise "
        "'gaussian' (default) is the analysed one, 'discrete_gaussian' is outside the analysis of items a single "
        "user introduces (docs/query_counts_top_k.md)",
    needs=("items",),
    params=(
        Param("sigma", "float", "noise std of every tree node", required=True, gt=0),
        Param("delta_item", "float", "per-item failure probability δ_item", default=1e-6, gt=0, lt=1),
        Param("max_items_per_window", "int", "Δ0: distinct items a user may add per window", default=4, min=1),
        Param("max_per_item", "int", "C: contributions per (user, item) over the horizon", default=1, min=1,
              max=65535),
        Param("noise", "str", "node noise ('gaussian' is the analysed default; 'discrete_gaussian' lacks a proof for "
              "items one user introduces first)", default="gaussian", choices=("gaussian", "discrete_gaussian")),
        Param("estimator", "str", "running-count estimator: 'plain' (sum of the prefix nodes) or 'optimal' "
              "(Honaker; reads every completed node, so it costs more for max_per_item > 1)", default="plain",
              choices=("plain", "optimal")),
        Param("keep_history", "bool", "keep every prefix node so that counts over window ranges s..t can be "
              "answered (free post-processing; 16 B per item per window)", default=False),
    ),
    build=_continual_counts,
    validate=_check_continual_counts,
    window_cost=public_window_cost,
))


def _top_k(qid, *, horizon, **kw):
    from streamdp.engine.queries.top_k import TopK

    return TopK(qid, **kw)


def _check_top_k(where, a):
    from streamdp.config.kinds import ConfigError

    if a["kbar"] < a["k"]:
        raise ConfigError(f"{where}.kbar: must be ≥ k={a['k']}, got {a['kbar']}")
    if a["k_star"] < a["k"]:
        raise ConfigError(f"{where}.k_star: must be ≥ k={a['k']}, got {a['k_star']}")


register(QueryKind(
    kind="top_k",
    source="Rogers (unknown-domain) Alg. 3/4, Thm 9/10 (unknown-domain Gumbel top-k, pay-what-you-get)",
    notion="zcdp",
    cost="per user present in window i: reserve k(i)*eps^2/8 and delta, settle |I(i)|*eps^2/8 and delta "
         "(I(i) = returned items incl. bottom); stops after k_star released items in total (bottom not counted)",
    doc="ranked list of at most k items (no counts) per window, bottom when fewer qualify",
    needs=("items",),
    params=(
        Param("epsilon", "float", "ε of each exponential-mechanism selection (β = 1/ε)", required=True, gt=0),
        Param("delta", "float", "δ per window (threshold T = 1 + log(k̄/δ)/ε)", default=1e-6, gt=0, lt=1),
        Param("k", "int", "items returned per window at most", default=5, min=1),
        Param("kbar", "int", "k̄: candidates considered per window (top-(k̄+1) histogram)", default=20, min=1),
        Param("k_star", "int", "k*: items released (bottom not counted) over the whole run before the query stops",
              default=500, min=1),
    ),
    build=_top_k,
    validate=_check_top_k,
    window_cost=lambda q: (q.pwyg.reserve_cost(q.k), "per user present in a window: the "
                           "reservation k(i)·ε²/8 and δ of Rogers (unknown-domain) Alg. 4, admitted before the release"),
))


def _window_histogram(qid, *, horizon, **kw):
    from streamdp.engine.queries.window_histogram import WindowHistogram

    return WindowHistogram(qid, **kw)


def _check_window_histogram(where, a):
    from streamdp.config.kinds import ConfigError

    if a["algorithm"] == "top_kbar" and a["noise"] != "gaussian":
        raise ConfigError(f"{where}.noise: algorithm 'top_kbar' (Rogers (unknown-domain) Alg. 2) is Gaussian only, got {a['noise']!r}")
    if a["algorithm"] == "threshold" and a["noise"] == "laplace" and 2 * a["delta"] > a["max_items_per_window"]:
        raise ConfigError(f"{where}.delta: the Laplace threshold needs delta ≤ max_items_per_window/2")


register(QueryKind(
    kind="window_histogram",
    source="Rogers (unknown-domain) Alg. 1 / Thm 7 (every positive count) and Alg. 2 / Thm 8 (top-(k̄+1), noisy threshold)",
    notion="zcdp",
    cost="per user present in the window: threshold: m*eps^2/2 and m*delta/D0 for the user's m <= D0 kept items; "
         "top_kbar: D0*eps^2/2 and delta (D0 = max_items_per_window)",
    doc="noisy count of distinct users per item of this window, for the items above a threshold (items not known "
        "in advance); windows are independent",
    needs=("items",),
    params=(
        Param("epsilon", "float", "noise scale σ = 1/ε per count (Δ∞ = 1)", required=True, gt=0),
        Param("delta", "float", "δ per window (T = 1 + Φ⁻¹(1 − δ/Δ0)/ε, Gaussian)", default=1e-6, gt=0, lt=1),
        Param("max_items_per_window", "int", "Δ0: distinct items a user may add per window", default=4, min=1),
        Param("algorithm", "str", "threshold: every positive count (Alg. 1); top_kbar: the k̄ largest, noisy "
              "threshold (Alg. 2)", default="threshold", choices=("threshold", "top_kbar")),
        Param("noise", "str", "count noise (top_kbar: gaussian only)", default="gaussian",
              choices=("gaussian", "laplace")),
        Param("kbar", "int", "k̄: counts looked at per window (top_kbar only)", default=20, min=1),
    ),
    build=_window_histogram,
    validate=_check_window_histogram,
    unused=lambda a: ({"kbar": "only used by algorithm 'top_kbar' (Rogers (unknown-domain) Alg. 2), not by 'threshold'"}
                      if a["algorithm"] == "threshold" else {}),
    window_cost=public_window_cost,
))
