"""Query kinds ``emd_linear`` and ``emd_frequency`` (Imola et al. (EMD): metric DP under the earth mover's distance), registered on
import."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streamdp.config.kinds import ConfigError, Param, QueryKind, public_window_cost, register


@dataclass(frozen=True)
class _TableParam(Param):
    """A TOML table (inline ``{a = …, b = …}`` or ``[query.name]``)."""

    def check(self, where: str, value: Any) -> Any:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}.{self.name}: must be a table {{name = …}}, got {value!r}")
        return value


def _validate(name):
    def check(where: str, a: dict) -> None:
        from streamdp.engine.queries import emd

        try:
            getattr(emd, name)("check", **a)
        except ValueError as e:  # messages start with the parameter's name
            raise ConfigError(f"{where}.{e}") from None
    return check


def _build(name):
    def build(qid, *, horizon, **kw):
        from streamdp.engine.queries import emd

        return getattr(emd, name)(qid, **kw)
    return build


register(QueryKind(
    kind="emd_linear",
    source="Imola et al. (EMD) Alg. 1 (PrivEMDLinear), Thm 4.1, Lemma 4.2 (central model, omega = 1/(n*alpha))",
    notion="emd",
    cost="per user with >= 1 featured item in the window: alpha (delta = 0), per unit of d_EM under "
         "d_X(x, y) = ||f(x) - f(y)||_2 / lipschitz",
    doc="mean over users of the mean feature vector of their window's items (items without a feature are "
        "ignored), plus K-norm noise L*R*U, R ~ Gamma(d+1, 1/(n*alpha)), U uniform in the unit ball; n published",
    needs=("items",),
    params=(
        Param("alpha", "float", "alpha of (alpha, 0)-d_EM-DP per window", required=True, gt=0),
        _TableParam("features", "table", "item -> feature vector f(item) (all of the same length d)",
                    required=True),
        Param("lipschitz", "float", "L: f is L-Lipschitz w.r.t. d_X = ||f(x)-f(y)||/L; must be >= the diameter "
              "of the feature vectors (d_X <= 1)", required=True, gt=0),
        Param("dimensions", "list", "optional names of the d released coordinates", default=None),
    ),
    build=_build("EMDLinear"),
    validate=_validate("EMDLinear"),
    window_cost=public_window_cost,
))

register(QueryKind(
    kind="emd_frequency",
    source="Imola et al. (EMD) Alg. 2/4 (PrivEMDItemWise + FreqEstLocal), §6.2 clustered k-RR, Thm 4.4 (composition / FMT22 "
           "shuffle bound, local model)",
    notion="emd",
    cost="per user with m items of the domain in the window (1 <= m <= max_items): alpha = m*alpha0, delta = 0 "
         "(composition) or, when delta > 0 and it is smaller, the local shuffle bound alpha = "
         "4*alpha0*(sqrt(m*e^alpha0*log(4/d)) + e^alpha0), charged delta = d*sum_{j<m} e^(j*alpha/m) <= delta "
         "(per-step d chosen on a grid); users with m > max_items are left out and pay nothing",
    doc="unbiased estimate (projected onto the simplex) of the average user's item distribution over the "
        "clustered domain, from each item randomised by the clustered k-RR (d_X = 0 / gamma / 1); items outside "
        "the domain are ignored; per-cluster totals and n are published",
    needs=("items",),
    params=(
        Param("alpha0", "float", "alpha0 of the per-item alpha0-d_X-DP clustered k-RR", required=True, gt=0),
        _TableParam("clusters", "table", "cluster name -> list of items (all clusters of equal size g)",
                    required=True),
        Param("gamma", "float", "d_X between distinct items of one cluster (across clusters: 1)", required=True,
              gt=0, max=1),
        Param("max_items", "int", "users with more domain items in a window are left out of it", default=32,
              min=1, max=10_000),
        Param("delta", "float", "largest delta charged per user per window (0 = composition bound only; > 0 "
              "allows the FMT22 shuffle bound when it gives a smaller alpha)", default=0.0, min=0, lt=1),
    ),
    build=_build("EMDFrequency"),
    validate=_validate("EMDFrequency"),
    window_cost=public_window_cost,
))
