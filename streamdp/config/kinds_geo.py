"""Query kinds ``geo_locations``, ``geo_knn`` and ``geo_convex_hull`` (Liang–Yi (CGP)), registered on import.

Costs are recorded in the ``cgp`` notion per canonical m² of great-circle distance (``streamdp/engine/queries/
geo.py``: ρ per configured unit² divided by c², c = the region's metres-per-unit lower bound).
"""

from __future__ import annotations

from streamdp.config.kinds import ConfigError, Param, QueryKind, public_window_cost, register

# Upper bounds (config review 11, F3 / F10). They equal streamdp.engine.queries.geo.MAX_HULL_K and MAX_PNN_CYCLES,
# which the query classes enforce too (literals here: this module does not import the engine at registration;
# tests/config/test_geo_bounds_review11.py checks that they agree). Why these values: the notes at those constants.
# k (geo_convex_hull anchor directions): Liang–Yi (CGP) clips its automatic k to [16, 128]; the release allocates O(k) and runs
# k PNNs after the users were charged, so k = 10**9 crashed the window close. 4096 = 32 x 128 is generous.
_MAX_HULL_K = 4096
# max_cycles (PNN's SVT cap): a window close is linear in max_cycles*n*k; gamma0 >= 0 halts within a few cycles and
# Liang–Yi (CGP)'s gamma0 = -6/eps within tens, so 10**6 (1000 x the default) is generous and 2**62 (never ends) is refused.
_MAX_PNN_CYCLES = 1_000_000

_CONVERSION = ("; converted from per unit^2 to the canonical per m^2 of great-circle distance as rho/c^2, "
               "c = R*min(sinc(dlat/2)/b, cos(max|lat|)*sinc(dlon/2)/a) metres per unit over the region "
               "(a = b = 180/pi for degrees; a = R*cos(ref_lat), b = R for metres)")

_FRAME = (
    Param("region", "list", "[lat_min, lat_max, lon_min, lon_max] in degrees: bounds the metres-per-unit conversion of "
          "the cost; a loc outside is folded onto the region's edge (it still counts and pays), not dropped", required=True),
    Param("units", "str", "planar unit of the mechanisms and of rho/epsilon: 'metres' (equirectangular projection "
          "around ref_lat) or 'degrees' (raw lon/lat as planar)", default="metres", choices=("metres", "degrees")),
    Param("ref_lat", "float", "reference latitude of the equirectangular projection (default: the region's middle)",
          default=None, gt=-90, lt=90),
    Param("location", "str", "a user's window location from their events with a loc in the region",
          default="last", choices=("last", "first", "mean")),
)


def _check_region(where: str, a: dict) -> None:
    reg = a["region"]
    if len(reg) != 4 or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in reg):
        raise ConfigError(f"{where}.region: must be four numbers [lat_min, lat_max, lon_min, lon_max], got {reg!r}")
    if a["units"] == "degrees" and a["ref_lat"] is not None:
        raise ConfigError(f"{where}.ref_lat: only used with units = 'metres'")


def _validate(cls):
    def check(where: str, a: dict) -> None:
        _check_region(where, a)
        try:
            cls(where, **a)
        except ValueError as e:  # messages start with the parameter's name
            raise ConfigError(f"{where}.{e}") from None
    return check


def _build(name):
    def build(qid, *, horizon, **kw):
        from streamdp.engine.queries import geo

        return getattr(geo, name)(qid, **kw)
    return build


def _lazy(name):
    def cls(where, **kw):
        from streamdp.engine.queries import geo

        return getattr(geo, name)("check", **kw)
    return cls


register(QueryKind(
    kind="geo_locations",
    source="Liang–Yi (CGP) Thm 4.8 (CGP identity query, dist_inf split), Thm 3.1; Thm 4.6 / Lemma 2.6 (planar Laplace), "
           "Lemma 3.6 (GP -> CGP)",
    notion="cgp",
    cost="per user with a loc in the region: rho (mechanism cgp) or epsilon^2/2 (mechanism gp) per unit^2"
         + _CONVERSION,
    doc="noisy location of every located user, published WITHOUT user ids in random order (a noisy point cloud "
        "as [lat, lon]); noise per coordinate N(0, n/(2 rho)) under dist_inf or N(0, 1/(2 rho)) under 'user' "
        "neighbourhood (planar Laplace eps/n or eps for mechanism gp); n (located users) is published",
    needs=("loc",),
    params=(
        Param("rho", "float", "rho-CGP per unit^2 of the whole release (mechanism cgp)", default=None, gt=0),
        Param("epsilon", "float", "eps-GP per unit of the whole release (mechanism gp)", default=None, gt=0),
        Param("mechanism", "str", "'cgp' (Gaussian) or 'gp' (planar Laplace)", default="cgp",
              choices=("cgp", "gp")),
        Param("neighbourhood", "str", "'dist_inf' (Liang–Yi (CGP): all points may move; noise grows with sqrt(n) or n) or "
              "'user' (one user's location moves: the contract's unit)", default="user",
              choices=("dist_inf", "user")),
    ) + _FRAME,
    build=_build("GeoLocations"),
    validate=_validate(_lazy("GeoLocations")),
    window_cost=public_window_cost,
))

register(QueryKind(
    kind="geo_knn",
    source="Liang–Yi (CGP) Alg. 2/3 (PNN, k-PNN), Thm 3.1 (Gaussian), Thm 3.2 (composition)",
    notion="cgp",
    cost="per user with a loc in the region: rho per unit^2 (per query point: k-PNN at select_share*rho/m, "
         "Gaussian release at (1-select_share)*rho/m)" + _CONVERSION,
    doc="for each public query point: k-PNN selects k users (never published); released are the noisy mean "
        "location and noisy mean distance to the point of those k users (Gaussian, K = sqrt(2) under dist_inf, "
        "sqrt(2)/k under 'user'); k = n when fewer users are located",
    needs=("loc",),
    params=(
        Param("k", "int", "neighbours per query point", required=True, min=1),
        Param("rho", "float", "rho-CGP per unit^2 of the whole release (all query points)", required=True, gt=0),
        Param("points", "list", "public query points [[lat, lon], ...] in degrees, each inside region (a point "
              "outside, e.g. with lat and lon swapped, is refused)", required=True),
        Param("select_share", "float", "share of rho spent on the k-PNN selection", default=0.5, gt=0, lt=1),
        Param("neighbourhood", "str", "sensitivity of the released means: 'dist_inf' (1) or 'user' (1/k)",
              default="user", choices=("dist_inf", "user")),
        Param("gamma0_factor", "float", "PNN threshold shift gamma0 = c/eps_j (0: Liang–Yi (CGP) Thm 4.11)", default=0.0),
        Param("max_cycles", "int", "PNN's SVT cap in cycles through the users (then a data-independent "
              "fallback); a window close is linear in max_cycles*n*k", default=1000, min=1, max=_MAX_PNN_CYCLES),
    ) + _FRAME,
    build=_build("GeoKNN"),
    validate=_validate(_lazy("GeoKNN")),
    window_cost=public_window_cost,
))

register(QueryKind(
    kind="geo_convex_hull",
    source="Liang–Yi (CGP) Alg. 4 (private convex hull), Thm 4.16, Lemma F.1",
    notion="cgp",
    cost="per user with a loc in the region: rho per unit^2 (anchor_share*rho for the anchor release, the rest "
         "for Alg. 4)" + _CONVERSION,
    doc="private convex hull of the users' window locations ([lat, lon] vertices, counter-clockwise in the plane), "
        "with the noisy enclosing circle and k; anchor indices are never published",
    needs=("loc",),
    params=(
        Param("rho", "float", "rho-CGP per unit^2 of the whole release", required=True, gt=0),
        Param("beta", "float", "failure probability of the enclosing circle (and of choose_k)", default=0.05,
              gt=0, lt=1),
        Param("anchor_share", "float", "share of rho for releasing the anchor points", default=0.5, gt=0, lt=1),
        Param("k", "int", "anchor directions (0 = auto: (R*sqrt(rho)/log(n/beta))^(2/3) clipped to "
              "[k_min, k_max])", default=0, min=0, max=_MAX_HULL_K),
        Param("k_min", "int", "smallest automatic k (k = 0 only)", default=16, min=1, max=_MAX_HULL_K),
        Param("k_max", "int", "largest automatic k (k = 0 only)", default=128, min=1, max=_MAX_HULL_K),
        Param("gamma0_factor", "float", "PNN threshold shift gamma0 = c/eps_1 (0: Liang–Yi (CGP) Thm 4.11)", default=0.0),
        Param("max_cycles", "int", "PNN's SVT cap in cycles through the users; a window close is linear in "
              "max_cycles*n*k", default=1000, min=1, max=_MAX_PNN_CYCLES),
    ) + _FRAME,
    build=_build("GeoConvexHull"),
    validate=_validate(_lazy("GeoConvexHull")),
    unused=lambda a: ({n: f"only used to choose k automatically (k = 0), but k = {a['k']}"
                       for n in ("k_min", "k_max")} if a["k"] > 0 else {}),
    window_cost=public_window_cost,
))
