"""Query kinds ``range_counts``, ``kde_point``, ``knn_point`` (Liang–Yi (adaptive budgeting) Alg. 3 + PIE, CGP) and ``threshold_count``
(Liang–Yi (adaptive budgeting) App. C, zCDP), registered on import. See docs/query_range.md.

CGP costs are recorded per canonical m² (the unit of the geo kinds): ρ per configured unit² divided by c², c the
metres per unit (exactly 10^3 for km, 1 for m; the region's lower bound for lat/lon input).
"""

from __future__ import annotations

from streamdp.config.kinds import ConfigError, Param, QueryKind, register

_UNITS = ("km", "m", "degrees")
_ESTIMATORS = ("pm1", "pm0", "bm1", "bm0")

_ALG3_COST = (
    "per user located in the query's window: reserve r_i = gamma_l*(B_i - (m-l+1)/m*B) + B/m (Liang–Yi (adaptive budgeting) Alg. 3, exact "
    "integers rounded down; uniform B/m with reuse_savings = false), settle to the executed PIE rounds (all of "
    "r_i for bm0/bm1); B_i -= executed. Recorded per m^2: rho/c^2 (c = metres per unit: 1000 for km, exact; "
    "region bound for lat/lon), rounded up, capped at P - C_i (P = B/c^2 rounded up, the published cost.cgp.rho; "
    "C_i = what the sequence has charged user i): no user pays more than P over the sequence, and never less "
    "than ceil((B - B_i)/c^2) >= their executed total. Users without a location pay nothing and keep B_i; windows "
    "without a registered query release {query_index: null} at no cost"
)

_FRAME = (
    Param("budget_rho", "float", "B: each user's CGP budget for the whole sequence of m queries, rho per unit^2; "
          "converted to m^2 and rounded down it must give each query >= rounds grid units of 1e-12 per m^2",
          required=True, gt=0),
    Param("units", "str", "distance unit of coordinates, sides and rho: 'km' / 'm' (planar [x, y] input, or "
          "[lat, lon] with projection = 'equirectangular') or 'degrees' ([lat, lon] used as planar (lon, lat))",
          default="km", choices=_UNITS),
    Param("projection", "str", "'none': loc is already planar in `units` (or lat/lon degrees for units = "
          "'degrees'); 'equirectangular': loc = [lat, lon] projected around ref_lat", default="none",
          choices=("none", "equirectangular")),
    Param("ref_lat", "float", "reference latitude of the equirectangular projection (default: the region's "
          "middle)", default=None, gt=-90, lt=90),
    Param("region", "list", "[lat_min, lat_max, lon_min, lon_max] (degrees), required for lat/lon input: bounds "
          "the metres-per-unit conversion; a location outside is folded onto the region's edge, not dropped", default=None),
    Param("location", "str", "a user's window location from their events with a usable loc",
          default="last", choices=("last", "first", "mean")),
    Param("reuse_savings", "bool", "Liang–Yi (adaptive budgeting) Alg. 3 reallocation of savings (false: uniform B/m per query)",
          default=True),
    Param("rounds", "int", "c: PIE rounds per query (pm0 / pm1 only)", default=4, min=1, max=64),
    Param("split", "str", "round budgets (pm0 / pm1 only): 'even' (r/c each) or 'doubling' (2^(j-1)/(2^c-1)*r)", default="even",
          choices=("even", "doubling")),
    Param("beta", "float", "failure probability beta (beta0 = beta/4 drives the elimination, Liang–Yi (adaptive budgeting) Remark 6; "
          "pm0 / pm1 only)",
          default=0.1, gt=0, lt=1),
)


def _unused(a: dict) -> dict[str, str]:
    """Parameters the estimator does not read: the baselines (Liang–Yi (adaptive budgeting) §6.2.1) are one Gaussian release, no PIE rounds
    and no elimination; App. B's shift is of the distance privatisation's threshold."""
    out = {}
    if a["estimator"] in ("bm0", "bm1"):
        why = f"only used by the PIE estimators pm0 / pm1; the baseline {a['estimator']!r} is one release (Liang–Yi (adaptive budgeting) §6.2.1)"
        out.update({"rounds": why, "split": why, "beta": why})
    if "shift" in a and a["estimator"] in ("pm0", "bm0"):
        out["shift"] = (f"App. B's shift is of the distance privatisation's threshold (pm1 / bm1), not used by "
                        f"{a['estimator']!r}")
    return out


def _validate(name):
    def check(where: str, a: dict) -> None:
        try:
            _cls(name)("check", **a)
        except ValueError as e:  # messages start with the parameter's name
            raise ConfigError(f"{where}.{e}") from None
    return check


def _cls(name):
    if name == "RangeCounts":
        from streamdp.engine.queries.range_counts import RangeCounts

        return RangeCounts
    from streamdp.engine.queries import adaptive_point

    return getattr(adaptive_point, name)


def _build(name):
    def build(qid, *, horizon, **kw):
        return _cls(name)(qid, **kw)
    return build


register(QueryKind(
    kind="range_counts",
    source="Liang–Yi (adaptive budgeting) Alg. 3 (sequential budgeting with savings), Alg. 4 (PIE-NI), Alg. 6 + App. A/B (range counting "
           "PM0/PM1, baselines BM0/BM1), Thm 4.4",
    notion="cgp",
    cost=_ALG3_COST,
    doc="m registered range queries, each a rectangle bound to a window: noisy count of users located in it, "
        "users eliminated early and PrivSav; per-user budget B for the sequence, savings reused by later queries",
    needs=("loc",),
    params=(
        Param("queries", "list", "the sequence: [{window = t, rect = [c0, c1, length, width], angle = deg}, ...]; "
              "windows strictly increasing; centre in loc's coordinates ([lat, lon] for lat/lon input), sides in "
              "units, angle counter-clockwise from east (default 0)", required=True),
        *_FRAME,
        Param("estimator", "str", "pm1 (distance privatisation), pm0 (point), bm1 / bm0 (baselines, no savings)",
              default="pm1", choices=_ESTIMATORS),
        Param("shift", "bool", "Liang–Yi (adaptive budgeting) App. B shift of the pm1/bm1 threshold (pm1 / bm1 only)", default=True),
    ),
    build=_build("RangeCounts"),
    validate=_validate("RangeCounts"),
    unused=_unused,
))

register(QueryKind(
    kind="kde_point",
    source="Liang–Yi (adaptive budgeting) Alg. 3, Alg. 4 (PIE-NI), Alg. 7 (Gaussian KDE with len_p, nu_high = 6b), Thm 4.4",
    notion="cgp",
    cost=_ALG3_COST,
    doc="m registered points bound to windows: private Gaussian KDE (1/n) sum exp(-|x_i - p|^2/(2b^2)) over the "
        "located users; users confidently farther than 6b stop paying",
    needs=("loc",),
    params=(
        Param("queries", "list", "the sequence: [{window = t, point = [c0, c1], bandwidth = b}, ...] (bandwidth "
              "optional per entry); windows strictly increasing", required=True),
        Param("bandwidth", "float", "b: kernel bandwidth in units (default of every entry)", required=True, gt=0),
        *_FRAME,
        Param("estimator", "str", "pm0 (point privatisation), pm1 (distance), bm0 / bm1 (baselines)",
              default="pm0", choices=_ESTIMATORS),
    ),
    build=_build("KDEPoint"),
    validate=_validate("KDEPoint"),
    unused=_unused,
))

register(QueryKind(
    kind="knn_point",
    source="Liang–Yi (adaptive budgeting) Alg. 3, Alg. 5 (PIE-k), Alg. 8 (k nearest users), Lemmas 6.6/6.7, Thm 4.4",
    notion="cgp",
    cost=_ALG3_COST + "; with n <= k located users nobody pays",
    doc="m registered points bound to windows: the private distances (ascending) of the k located users "
        "nearest to the point (identities are not published)",
    needs=("loc",),
    params=(
        Param("queries", "list", "the sequence: [{window = t, point = [c0, c1]}, ...]; windows strictly increasing",
              required=True),
        Param("k", "int", "number of nearest users", required=True, min=1),
        *_FRAME,
        Param("estimator", "str", "pm1 (distance privatisation), pm0 (point), bm1 / bm0 (baselines)",
              default="pm1", choices=_ESTIMATORS),
    ),
    build=_build("KNNPoint"),
    validate=_validate("KNNPoint"),
    unused=_unused,
))

register(QueryKind(
    kind="threshold_count",
    source="Liang–Yi (adaptive budgeting) App. C, Alg. 9 (threshold query by PIE-NI, central model; S0/S1 fixed), Bun-Steinke Prop. 1.6",
    notion="zcdp",
    cost="per user with an event in the query's window: reserve rho (zCDP, delta 0), settle to the executed rounds "
         "sum_{s<=j} rho_s (users without the item too: charging only the counted users would publish the count "
         "through cost.users_charged)",
    doc="per registered window: is the number of users with the item below the threshold T? (yes/no, eliminated "
        "early or not)",
    needs=("items",),
    params=(
        Param("queries", "list", "the sequence: [{window = t, threshold = T, item = \"name\"}, ...]; windows "
              "strictly increasing", required=True),
        Param("rho", "float", "zCDP rho of each query (split into rounds)", required=True, gt=0),
        Param("rounds", "int", "c: PIE rounds", default=4, min=1, max=64),
        Param("split", "str", "round budgets: 'even' or 'doubling'", default="even", choices=("even", "doubling")),
        Param("beta0", "float", "failure probability of the early elimination", default=0.025, gt=0, lt=1),
    ),
    build=_build("ThresholdCount"),
    validate=_validate("ThresholdCount"),
))
