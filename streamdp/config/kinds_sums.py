"""The ``continual_sums`` kind: running event counts and value sums per key, user level (registered on import)."""

from __future__ import annotations

import math

from streamdp.config.kinds import ConfigError, Param, QueryKind, public_window_cost, register, shown


def _check(where: str, a: dict) -> None:
    C = a["max_contributions"]
    for name in ("max_keys_per_window", "max_per_key"):
        v = a[name]
        if v is not None and v > C:
            raise ConfigError(f"{where}.{name}: must be ≤ max_contributions = {C} (a larger bound never binds), "
                              f"got {v}")
    vr, vs = a["value_range"], a["value_sigma"]
    if vr is not None:
        if (len(vr) != 2 or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in vr)
                or not all(math.isfinite(float(x)) for x in vr)):
            raise ConfigError(f"{where}.value_range: must be two finite numbers [lo, hi], got {shown(vr)}")
        if float(vr[0]) > float(vr[1]):
            raise ConfigError(f"{where}.value_range: lo must be ≤ hi, got {shown(vr)}")
        if vs is None:
            raise ConfigError(f"{where}.value_sigma: is required with value_range (the sums' noise std)")
    elif vs is not None:
        raise ConfigError(f"{where}.value_range: is required with value_sigma ([lo, hi]: values are clamped to it)")


def _unused(a: dict) -> dict[str, str]:
    out = {}
    if a["noise"] == "blt":
        out["estimator"] = "only used by noise = 'tree' (the BLT's estimate is its own)"
    else:
        out["blt_buffers"] = "only used by noise = 'blt'"
    return out


def _build(qid, *, horizon, **kw):
    from streamdp.accounting.cost import LOSS_SCALE, cost_to_fixed
    from streamdp.engine.queries.continual_sums import ContinualSums
    from streamdp.mechanisms.blt_noise import MAX_BLT_HORIZON

    if kw["noise"] == "blt" and horizon > MAX_BLT_HORIZON:
        raise ConfigError(f"noise: 'blt' supports a service horizon up to {MAX_BLT_HORIZON}, got {horizon}; use "
                          "noise = 'tree'")
    p = kw["delta_key"] / horizon
    if not p < 0.5:
        raise ConfigError(f"delta_key: delta_key/horizon must be < 1/2, got {kw['delta_key']!r} with horizon "
                          f"{horizon}")
    try:
        q = ContinualSums(qid, horizon=horizon, **kw)
    except ValueError as e:
        if "BLT fit" in str(e):
            raise ConfigError(f"noise: {e}") from None
        raise
    try:  # the most one window can charge must fit the fixed-point ledger (σ tiny against C·m)
        cost_to_fixed(q.public_cost(None).zcdp_rho, LOSS_SCALE)
    except (ArithmeticError, ValueError):
        raise ConfigError(f"sigma: {kw['sigma']!r} (or value_sigma) is too small: one window's charge does not fit "
                          "the fixed-point ledger (ρ < 9.2e6)") from None
    return q


register(QueryKind(
    kind="continual_sums",
    source="Rogers, Unknown-Domain Algorithms, §4.3 / Lemma 3.1 (selection); binary tree or square-root "
           "factorization (Henzinger-Upadhyay-Upadhyay; BLT form, Dvijotham et al. 2024); individual accounting "
           "(Feldman-Zrnic filter)",
    notion="zcdp",
    cost="per user, per window: what their kept records add to the squared norm of the strategy vector, exactly: "
         "per (user, key) with j new records of total value a and earlier records at windows s with values x_s: "
         "rho = (2*j*sum_s G[s,t] + j^2*G[t,t])/(2*sigma^2) + (2*a*sum_s x_s*G[s,t] + a^2*G[t,t])/(2*value_sigma^2) "
         "(G = C^T C of the factorization), and delta = delta_key per key first touched while unselected",
    doc="noisy running count of records (and sum of a clamped value) per selected key (keys not known in advance, "
        "sticky selection at T_t = m + sigma*sqrt(v_t)*Phi^-1(1 - delta_key/L)), with a 95% interval per value; "
        "user-level bounds: <= max_contributions records per user per epoch (their first ones), <= "
        "max_keys_per_window keys per user per window, <= max_per_key records per (user, key)",
    needs=("items", "value"),
    params=(
        Param("sigma", "float", "σ: noise std of the counts per unit of the factorization's noise", required=True,
              gt=0),
        Param("delta_key", "float", "δ_key: probability that a key held by one user is ever selected",
              default=1e-6, gt=0, lt=1),
        Param("max_contributions", "int", "C: records per user per epoch, across keys (the first C in event order)",
              default=32, min=1, max=1 << 20),
        Param("max_keys_per_window", "int", "Δ0: keys per user per window (the first Δ0; default C)", default=None,
              min=1),
        Param("max_per_key", "int", "m: records per (user, key) per epoch (default C); the threshold's offset",
              default=None, min=1),
        Param("noise", "str", "'blt': near-square-root factorization, O(1) state per key; 'tree': binary tree",
              default="blt", choices=("blt", "tree")),
        Param("estimator", "str", "tree only: 'plain' or 'optimal' (Honaker; it reads every completed node, so a record "
              "can cost more)", default="plain",
              choices=("plain", "optimal")),
        Param("blt_buffers", "int", "blt only: buffers d of the BLT factorization", default=4, min=1, max=8),
        Param("value_range", "list", "[lo, hi]: sum the events' value clamped to it (absent: counts only)",
              default=None),
        Param("value_sigma", "float", "σ_s: noise std of the sums (required with value_range)", default=None, gt=0),
    ),
    build=_build,
    validate=_check,
    unused=_unused,
    window_cost=public_window_cost,
))
