"""Location releases per window under concentrated geo-privacy (Liang–Yi (CGP); docs/contract.md §1 "location releases", §3 ``cgp``).

Three query kinds, each a :class:`~streamdp.engine.query.WindowQuery` in the ``cgp`` notion:

* :class:`GeoLocations` (``geo_locations``) — the identity query (Liang–Yi (CGP) Thm 4.8 / 4.6): every located user's
  window location plus Gaussian (ρ-CGP) or planar-Laplace (ε-GP) noise, published **without user ids, in random
  order** (a noisy point cloud: keyed by user id it would say who was present).
* :class:`GeoKNN` (``geo_knn``) — Liang–Yi (CGP) Alg. 3 (k-PNN) at each public query point, followed by a Gaussian release of
  two aggregates of the k selected users: their mean location and their mean distance to the point. k-PNN returns
  user *indices*; publishing them (or the users' ids) would disclose who is near the point, so the indices are
  only used to select whose locations enter the aggregates (module notes below).
* :class:`GeoConvexHull` (``geo_convex_hull``) — Liang–Yi (CGP) Alg. 4 (PCH) with its anchor release.

**A user's window location.** Events whose ``loc`` is absent are ignored. A ``loc`` outside the configured
``region`` is brought into it (:meth:`PlanarFrame.locate`: fold the sphere onto the smallest cap around the region,
project, clamp to the region's rectangle — never lengthening a distance, :mod:`streamdp.bounding.region_fold`):
dropping it would reveal that the user is outside the region. The rule ``location = "last" | "first" | "mean"``
summarises the rest (last/first by event time, ties in arrival order; mean in the planar coordinates). Users without a usable location in the window pay nothing. The guarantee
protects this window location: for any two values x, x' of it the release's Rényi divergence is ≤ α·ρ·(dist(x, x') + a)² for x ≠ x', a the grid distance of docs/query_geo_emd.md (micrometres).

**Planar coordinates and units** (:class:`PlanarFrame`). ``loc`` is [lat, lon] in degrees. The mechanisms work in
a plane:

* ``units = "degrees"`` — (x, y) = (lon, lat) in degrees: raw lat/lon used as planar. Distorted: one degree of
  longitude is cos(lat)·111.2 km, one of latitude 111.2 km, so east–west distances are overstated by 1/cos(lat).
* ``units = "metres"`` — the equirectangular projection around ``ref_lat``: (x, y) = (R·cos(ref_lat)·λ, R·φ) in
  metres (λ, φ in radians, R = 6 371 008.8 m, the IUGG mean Earth radius). Exact east–west at ``ref_lat``; at
  latitude φ it overstates east–west distances by cos(ref_lat)/cos(φ) (understates them equatorward of ref_lat).

``rho`` (and ``epsilon``) are per configured unit² (per unit). **The ledger's canonical CGP unit is the metre of
great-circle distance on the sphere of radius R** (:data:`CANONICAL_CGP_UNIT`): every ``cgp`` cost the service
records, and the per-user ``cgp_rho`` budget, are per m², so costs of different queries add. The conversion must
bound the planar distance by the true one: inside the (closed) region [lat_min, lat_max] × [lon_min, lon_max],

    d_true ≥ chord = 2R·√(sin²(Δφ/2) + cos φ1·cos φ2·sin²(Δλ/2)) ≥ R·√(s_φ²Δφ² + C²·s_λ²·Δλ²),

with C = cos(max |lat|), s_φ = sinc(Φ/2), s_λ = sinc(Λ/2) (sinc t = sin t / t, decreasing on [0, π]; Φ, Λ the
region's latitude and longitude spans in radians) because sin(t) ≥ t·sinc(T) for 0 ≤ t ≤ T ≤ π. The planar
distance is d_u = √(a²Δλ² + b²Δφ²) (a = b = 180/π for degrees; a = R·cos(ref_lat), b = R for metres). Hence
d_u ≤ d_true / c with c = R·min(s_φ/b, C·s_λ/a) metres per unit. Every location is first folded into the
smallest cap around the region, so the bound is taken over the cap's lat/lon bounding box, not the region
(:meth:`PlanarFrame.metres_per_unit`; :meth:`PlanarFrame.region_metres_per_unit` is the region's own, larger c),
and the loss ρ·d_u² ≤ (ρ/c²)·d_true² holds for any two locations on the sphere: the recorded cost is
``convert_cgp_rho(ρ, c, "m")`` = ρ/c² per m². The cap's box must exclude the poles and the antimeridian wrap; it
is what makes a finite c possible (raw longitudes ±179.99° are 0.02° apart on the ground and 359.98° apart in the
plane).

**Neighbouring data.** Liang–Yi (CGP) analyses tuples of n points under dist_∞(x, x') = max_i ‖x_i − x'_i‖ (every point may
move); n, the number of located users admitted in the window, is public (it is published). ``neighbourhood =
"dist_inf"`` (the paper's notion) calibrates to that. ``neighbourhood = "user"`` (default) calibrates to contract §3's
unit, one user's location moving, which is all the per-user filter needs: the identity query then adds
N(0, 1/(2ρ)) (or planar Laplace ε) per point instead of N(0, n/(2ρ)) (ε/n) — the same noise that the dist_∞ split
gives at a per-user charge of ρ/n — and the k-PNN aggregates (means over k users) have sensitivity 1/k instead of
1. k-PNN and PCH themselves are calibrated to dist_∞, which implies the per-user guarantee.

Not protected (as in Liang–Yi (CGP)): whether a user has a usable location in the window (n is published).
"""

from __future__ import annotations

import math

import numpy as np

from streamdp.accounting.cgp import convert_cgp_rho, gp_to_cgp
from streamdp.accounting.cost import Cost
from streamdp.bounding.region_fold import CapFold
from streamdp.engine.queries.locations import locate_users
from streamdp.engine.query import Names, QueryRelease, Reservation, WindowData, WindowQuery
from streamdp.mechanisms.geo.convex_hull import private_convex_hull
from streamdp.mechanisms.geo.gaussian_cgp import GaussianCGP, IdentityQueryCGP
from streamdp.mechanisms.geo.planar_laplace import IdentityQueryGP, PlanarLaplaceGP
from streamdp.mechanisms.geo.pnn import k_pnn

__all__ = [
    "EARTH_RADIUS_M",
    "CANONICAL_CGP_UNIT",
    "PlanarFrame",
    "user_locations",
    "GeoLocations",
    "GeoKNN",
    "GeoConvexHull",
    "MAX_HULL_K",
    "MAX_PNN_CYCLES",
]

#: IUGG mean Earth radius R1 (metres): the sphere on which the canonical great-circle metre is measured.
EARTH_RADIUS_M = 6_371_008.8
#: The unit of every ``cgp`` cost in the ledger and of the per-user ``cgp_rho`` budget: ρ per m².
CANONICAL_CGP_UNIT = "m"

UNITS = ("metres", "degrees")
LOCATION_RULES = ("last", "first", "mean")
NEIGHBOURHOODS = ("dist_inf", "user")

#: Largest ``k``, ``k_min`` and ``k_max`` of ``geo_convex_hull`` (config review 11, F3). k is the number of anchor
#: directions of Liang–Yi (CGP) Alg. 4: the release allocates O(k) and runs k PNNs over all n located users, AFTER the users
#: were charged, so an unbounded k (10**9: 7.45 GiB) crashes the window close and a Kafka worker crash-loops.
#: Liang–Yi (CGP)'s automatic k, (R̃·√ρ/log(n/β))^{2/3}, is clipped to [16, 128] in the paper (implementation notes on Liang–Yi (CGP)) and by default
#: here; 4096 = 32 × 128 anchors, one per 0.09° of direction, is far past the point where more anchors help (each
#: PNN gets ρ1 = (ρ_A − ρ0)/k, so extra anchors only add noise) and still takes O(k·n) work, seconds per window.
MAX_HULL_K = 4096
#: Largest ``max_cycles`` of ``geo_knn`` / ``geo_convex_hull`` (config review 11, F10): PNN's SVT runs up to
#: max_cycles·m steps per PNN call (k calls per point, or per hull), so a window close is linear in max_cycles·n·k
#: and 2**62 never ends. With γ0 ≥ 0 (Liang–Yi (CGP) Thm 4.10 / 4.11) PNN halts in the first cycle or in expected O(1) cycles;
#: only a negative ``gamma0_factor`` needs more (Liang–Yi (CGP)'s experiments use −6: halting per visit of the nearest point
#: has probability about e^{-1}/2, so tens of cycles). The default 1000 already covers that; 10**6 = 1000 × the
#: default leaves room for factors down to about −70 (~2·10**5 expected cycles) and bounds a runaway window at
#: 10**6·n·k SVT steps.
MAX_PNN_CYCLES = 1_000_000


def _num(x, name: str) -> float:
    if isinstance(x, bool):
        raise ValueError(f"{name}: must be a number, got {x!r}")
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: must be a number, got {x!r}") from None
    if not math.isfinite(v):
        raise ValueError(f"{name}: must be finite, got {x!r}")
    return v


def _pos(x, name: str) -> float:
    v = _num(x, name)
    if v <= 0:
        raise ValueError(f"{name}: must be > 0, got {x!r}")
    return v


def _choice(x, name: str, choices: tuple) -> str:
    if x not in choices:
        raise ValueError(f"{name}: must be one of {list(choices)}, got {x!r}")
    return x


def _posint(x, name: str, lo: int = 1, hi: int | None = None) -> int:
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer)) or int(x) != x or int(x) < lo:
        bound = f"≥ {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ValueError(f"{name}: must be an integer {bound}, got {x!r}")
    if hi is not None and int(x) > hi:
        raise ValueError(f"{name}: must be an integer in [{lo}, {hi}], got {x!r}")
    return int(x)


def _point(p, where: str, frame: "PlanarFrame") -> list[float]:
    """A public query point [lat, lon] (degrees) on the sphere and inside ``frame.region`` (config review 11, F5;
    as ``knn_point``'s ``queries[j].point``): a point outside spends every located user's ρ on a place nobody meant
    (an impossible latitude, or [lon, lat] swapped, is nowhere near the region)."""
    if not isinstance(p, (list, tuple)) or len(p) != 2:
        raise ValueError(f"{where}: must be [lat, lon], got {p!r}")
    lat, lon = _num(p[0], f"{where} (lat)"), _num(p[1], f"{where} (lon)")
    swapped = bool(frame.in_region(np.array([[lon, lat]]))[0])  # [lon, lat] given: the swap lies in the region
    if abs(lat) > 90.0 or abs(lon) > 180.0:
        raise ValueError(f"{where}: [lat, lon] = [{lat}, {lon}] is not a location: need |lat| ≤ 90 and |lon| ≤ 180"
                         + (" (lat and lon swapped?)" if swapped else ""))
    if not frame.in_region(np.array([[lat, lon]]))[0]:
        raise ValueError(f"{where}: [lat, lon] = [{lat}, {lon}] lies outside the region {list(frame.region)}"
                         + (" (lat and lon swapped?)" if swapped else ""))
    return [lat, lon]


def _sinc_half(span_rad: float) -> float:
    """sin(X/2)/(X/2) (1 at X = 0)."""
    h = 0.5 * span_rad
    return 1.0 if h == 0.0 else math.sin(h) / h


class PlanarFrame:
    """Planar coordinates for ``loc`` = [lat, lon] inside a region, and the metres-per-unit bound (module notes).

    ``region`` = [lat_min, lat_max, lon_min, lon_max] (degrees; −90 < lat_min < lat_max < 90,
    −180 ≤ lon_min < lon_max ≤ 180); ``ref_lat`` (units = "metres") defaults to the region's middle latitude.
    """

    def __init__(self, units: str = "metres", region=None, ref_lat: float | None = None) -> None:
        self.units = _choice(units, "units", UNITS)
        if region is None or isinstance(region, (str, bytes)) or len(region) != 4:
            raise ValueError(f"region: must be [lat_min, lat_max, lon_min, lon_max], got {region!r}")
        lat0, lat1, lon0, lon1 = (_num(v, "region") for v in region)
        if not (-90.0 < lat0 < lat1 < 90.0):
            raise ValueError(f"region: need −90 < lat_min < lat_max < 90 (the poles are excluded), got {region!r}")
        if not (-180.0 <= lon0 < lon1 <= 180.0):
            raise ValueError(f"region: need −180 ≤ lon_min < lon_max ≤ 180 (no antimeridian wrap), got {region!r}")
        self.region = (lat0, lat1, lon0, lon1)
        if ref_lat is None:
            ref_lat = 0.5 * (lat0 + lat1)
        self.ref_lat = _num(ref_lat, "ref_lat")
        if not (-90.0 < self.ref_lat < 90.0):
            raise ValueError(f"ref_lat: must lie in (−90, 90), got {ref_lat!r}")
        self._cos_ref = math.cos(math.radians(self.ref_lat))
        self.fold = CapFold(self.region)  # raises ValueError("region: …") for a region that cannot be folded
        x0, y0 = self.to_planar([[lat0, lon0]])[0]
        x1, y1 = self.to_planar([[lat1, lon1]])[0]
        self._clip = (np.array([x0, y0]), np.array([x1, y1]))  # P(region): an axis-parallel rectangle

    # per radian of longitude (a) and latitude (b), in planar units
    def _ab(self) -> tuple[float, float]:
        if self.units == "degrees":
            return 180.0 / math.pi, 180.0 / math.pi
        return EARTH_RADIUS_M * self._cos_ref, EARTH_RADIUS_M

    @property
    def distance_unit(self) -> str:
        return "deg" if self.units == "degrees" else "m"

    def _box_metres_per_unit(self, box) -> float:
        """c = R·min(s_φ/b, C·s_λ/a) of a lat/lon box: every planar distance d_u between two points of the box is
        ≤ d_true/c, d_true their great-circle distance in metres (module notes)."""
        lat0, lat1, lon0, lon1 = box
        big_c = math.cos(math.radians(max(abs(lat0), abs(lat1))))
        s_phi = _sinc_half(math.radians(lat1 - lat0))
        s_lam = _sinc_half(math.radians(lon1 - lon0))
        a, b = self._ab()
        return EARTH_RADIUS_M * min(s_phi / b, big_c * s_lam / a)

    def metres_per_unit(self) -> float:
        """c of the cap's bounding box: d_u(locate x, locate x′) ≤ d_true(x, x′)/c for ANY two locations
        (:mod:`streamdp.bounding.region_fold`); the recorded costs use it."""
        return self._box_metres_per_unit(self.fold.box)

    def region_metres_per_unit(self) -> float:
        """c of the region itself (≥ :meth:`metres_per_unit`): the bound for two points inside the region."""
        return self._box_metres_per_unit(self.region)

    def canonical_rho(self, rho: float) -> float:
        """ρ per unit² → ρ per canonical m² (great-circle): ρ/c² (``convert_cgp_rho`` from a unit of c metres)."""
        return float(convert_cgp_rho(rho, self.metres_per_unit(), CANONICAL_CGP_UNIT))

    def in_region(self, latlon: np.ndarray) -> np.ndarray:
        lat0, lat1, lon0, lon1 = self.region
        la, lo = latlon[:, 0], latlon[:, 1]
        return (la >= lat0) & (la <= lat1) & (lo >= lon0) & (lo <= lon1)

    def locate(self, latlon) -> np.ndarray:
        """[lat, lon] rows → planar (x, y) rows inside P(region), for any finite location: fold the sphere onto the
        cap around the region, project, clamp to the region's rectangle (1-Lipschitz end to end: region_fold.py).
        Locations inside the region map exactly as :meth:`to_planar`."""
        xy = self.to_planar(self.fold.fold(latlon))
        return np.clip(xy, self._clip[0], self._clip[1])

    def to_planar(self, latlon) -> np.ndarray:
        """[lat, lon] rows → (x, y) rows."""
        ll = np.asarray(latlon, dtype=np.float64).reshape(-1, 2)
        if self.units == "degrees":
            return np.column_stack([ll[:, 1], ll[:, 0]])
        k = EARTH_RADIUS_M * math.pi / 180.0
        return np.column_stack([ll[:, 1] * (k * self._cos_ref), ll[:, 0] * k])

    def to_latlon(self, xy) -> np.ndarray:
        """(x, y) rows → [lat, lon] rows (the inverse of :meth:`to_planar`; released points may leave the region)."""
        p = np.asarray(xy, dtype=np.float64).reshape(-1, 2)
        if self.units == "degrees":
            return np.column_stack([p[:, 1], p[:, 0]])
        k = EARTH_RADIUS_M * math.pi / 180.0
        return np.column_stack([p[:, 1] / k, p[:, 0] / (k * self._cos_ref)])

    def describe(self) -> dict:
        return {"units": self.units, "region": list(self.region), "ref_lat": self.ref_lat,
                "metres_per_unit": self.metres_per_unit(), "region_metres_per_unit": self.region_metres_per_unit(),
                "fold_cap": self.fold.describe(), "canonical_unit": CANONICAL_CGP_UNIT}


def user_locations(w: WindowData, frame: PlanarFrame, rule: str) -> tuple[np.ndarray, np.ndarray]:
    """(sorted unique user ids, (n, 2) planar window locations) over the events with a loc, each brought into the
    region by :meth:`PlanarFrame.locate` (a location outside is not dropped: that would reveal it is outside)."""
    loc = w.loc
    if loc.shape[0] == 0:
        return np.zeros(0, np.int64), np.zeros((0, 2))
    ok = np.isfinite(loc).all(axis=1)
    return locate_users(w, ok, frame.locate, rule)


def canonical_points(xy: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """The points in ascending order of their users' order keys (ties — probability ~ n²/2⁶⁵ — by x, then y: equal
    points are interchangeable). The mechanisms consume points in order (one noise draw per point in turn, k-PNN's
    sparse-vector scan, the hull's anchors), so the order must not be the interned user ids (they follow other
    users' data) nor a partition order; and it must not follow the values either — the analyses of k-PNN and PCH
    (Liang–Yi (CGP)) index the tuple of points independently of where they lie. A keyed hash per user is both."""
    xy = np.asarray(xy, dtype=np.float64).reshape(-1, 2)
    keys = np.asarray(keys, dtype=np.uint64)
    if keys.shape[0] != xy.shape[0]:
        raise ValueError("one order key per point")
    return xy[np.lexsort((xy[:, 1], xy[:, 0], keys))]


class _GeoQuery(WindowQuery):
    """Shared prepare/release plumbing: every located user pays the same ``self.cost`` (canonical units)."""

    public_cost_basis = "per located user, this window (ρ per m² of great-circle distance)"

    def public_cost(self, rel):
        return self.cost

    notion = "cgp"

    def __init__(self, query_id: str, *, units: str, region, ref_lat: float | None, location: str) -> None:
        super().__init__(query_id)
        self.frame = PlanarFrame(units, region, ref_lat)
        self.location = _choice(location, "location", LOCATION_RULES)
        self.cost = Cost()  # set by subclasses (per canonical m²)

    def _set_cost(self, rho_per_unit2: float, given: str = "rho") -> None:
        """``given``: the parameter the cost comes from, for the error (``epsilon`` of mechanism 'gp' is charged as
        ε²/2 ρ; naming ``rho`` there sent the user to a key they did not set — config review of 2026-11-23, F7)."""
        self.rho_unit = float(rho_per_unit2)
        self.cost = Cost.cgp(self.frame.canonical_rho(self.rho_unit))
        try:
            self._cost_fixed = self.cost.to_fixed()
        except OverflowError:
            what = "" if given == "rho" else f" (charged as {self.rho_unit!r} ρ per unit²)"
            raise ValueError(f"{given}: {getattr(self, given, self.rho_unit)!r}{what} is {self.cost.cgp_rho!r} ρ per "
                             "m², too large for the fixed-point ledger") from None

    def prepare(self, w: WindowData, rng) -> Reservation:
        """Every located user reserves ``self.cost``. ``rng``: the close's :class:`~streamdp.engine.stage_a.
        BoundingDraws` for this query, which gives each located user an order key (a keyed hash of query, window
        and user name): the release hands the points to the mechanism in that order (:func:`canonical_points`)."""
        users, xy = user_locations(w, self.frame, self.location)
        if users.size == 0:
            return Reservation.empty()
        order_keys = getattr(rng, "user_order_keys", None)
        if order_keys is None:
            raise TypeError(f"{self.kind} {self.id}: prepare needs the close's BoundingDraws (its user order keys), "
                            f"got {type(rng).__name__}")
        return Reservation(users, np.tile(self._cost_fixed, (users.size, 1)), private=(xy, order_keys(users)))

    def admitted_points(self, res: Reservation, admitted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Stage A's share: the admitted users' bounded planar points and their order keys (no user ids)."""
        if not res.users.size:
            return np.zeros((0, 2)), np.zeros(0, dtype=np.uint64)
        xy, keys = res.private
        keep = admitted[res.users]
        return xy[keep], keys[keep]

    def release(self, w: WindowData, res: Reservation, admitted: np.ndarray, rng: np.random.Generator,
                items: Names) -> QueryRelease:
        users = res.users[admitted[res.users]] if res.users.size else res.users
        xy, keys = self.admitted_points(res, admitted)
        rel = self.release_points(xy, keys, rng)
        return QueryRelease(values=rel.values, users=users, actual=np.tile(self._cost_fixed, (users.size, 1)),
                            meta=rel.meta)

    def release_points(self, xy: np.ndarray, keys: np.ndarray, rng: np.random.Generator) -> QueryRelease:
        """The coordinator's share: the release from the admitted points (any order in: they are put in the
        canonical order first, :func:`canonical_points`). Every admitted user's cost is the reservation (nothing
        to settle)."""
        if xy.shape[0] == 0:
            return QueryRelease(values=self._empty_values(), meta={"users": 0})
        return QueryRelease(values=self._release(rng, canonical_points(xy, keys)), meta={"users": int(xy.shape[0])})

    def _empty_values(self) -> dict:
        """The values of a window without located users: the released shape, null where nothing was computed
        (a stable record shape)."""
        raise NotImplementedError

    def _release(self, rng: np.random.Generator, xy: np.ndarray) -> dict:
        raise NotImplementedError

    def _latlon_list(self, xy) -> list:
        return self.frame.to_latlon(xy).tolist()

    def state(self) -> dict:
        return {}  # no state across windows

    def load_state(self, d: dict) -> None:
        return None

    def describe(self) -> dict:
        return {**super().describe(), **self.frame.describe(), "location": self.location,
                "rho_per_unit2": self.rho_unit, "cgp_rho_per_m2": self.cost.cgp_rho}


class GeoLocations(_GeoQuery):
    """Noisy locations of the located users, as an unlabelled point cloud in random order.

    ``mechanism = "cgp"``: Gaussian, per coordinate σ = √(n/(2ρ)) (dist_inf; Liang–Yi (CGP) Thm 4.8) or 1/√(2ρ) (user; Liang–Yi (CGP)
    Thm 3.1) — ρ-CGP. ``mechanism = "gp"``: planar Laplace with ε/n (dist_inf; Liang–Yi (CGP) Thm 4.6) or ε (user; Liang–Yi (CGP) Lemma
    2.6) per point — ε-GP, recorded as ε²/2-CGP (Liang–Yi (CGP) Lemma 3.6). Cost per located user: ρ (or ε²/2) per unit²,
    converted to m².
    """

    kind = "geo_locations"

    def __init__(self, query_id: str, *, rho: float | None = None, epsilon: float | None = None,
                 mechanism: str = "cgp", neighbourhood: str = "user", units: str = "metres", region=None,
                 ref_lat: float | None = None, location: str = "last") -> None:
        super().__init__(query_id, units=units, region=region, ref_lat=ref_lat, location=location)
        self.mechanism = _choice(mechanism, "mechanism", ("cgp", "gp"))
        self.neighbourhood = _choice(neighbourhood, "neighbourhood", NEIGHBOURHOODS)
        if self.mechanism == "cgp":
            if epsilon is not None:
                raise ValueError("epsilon: only used with mechanism = 'gp' (give rho)")
            if rho is None:
                raise ValueError("rho: is required with mechanism = 'cgp'")
            self.rho = _pos(rho, "rho")
            self.epsilon = None
            self._set_cost(self.rho)  # ρ-CGP (Liang–Yi (CGP) Thm 4.8 / Thm 3.1)
        else:
            if rho is not None:
                raise ValueError("rho: only used with mechanism = 'cgp' (give epsilon)")
            if epsilon is None:
                raise ValueError("epsilon: is required with mechanism = 'gp'")
            self.epsilon = _pos(epsilon, "epsilon")
            self.rho = None
            self._set_cost(float(gp_to_cgp(self.epsilon)), "epsilon")  # ε-GP ⇒ ε²/2-CGP (Liang–Yi (CGP) Lemma 3.6)

    def _noise_params(self, n: int) -> dict:
        if self.mechanism == "cgp":
            split = n if self.neighbourhood == "dist_inf" else 1
            return {"sigma": math.sqrt(split / (2.0 * self.rho))}
        split = n if self.neighbourhood == "dist_inf" else 1
        return {"epsilon_per_point": self.epsilon / split}

    def _release(self, rng, xy):
        n = xy.shape[0]
        if self.mechanism == "cgp":
            mech = IdentityQueryCGP(self.rho) if self.neighbourhood == "dist_inf" else GaussianCGP(self.rho)
        else:
            mech = IdentityQueryGP(self.epsilon) if self.neighbourhood == "dist_inf" else PlanarLaplaceGP(self.epsilon)
        noisy = mech.release(rng, xy)
        noisy = noisy[rng.permutation(n)]  # no user ids, no user order
        return {"points": self._latlon_list(noisy), "users": n, "noise": self._noise_params(n),
                "distance_unit": self.frame.distance_unit}

    def _empty_values(self) -> dict:
        return {"points": [], "users": 0, "noise": {"sigma" if self.mechanism == "cgp" else "epsilon_per_point": None},
                "distance_unit": self.frame.distance_unit}

    def describe(self) -> dict:
        return {**super().describe(), "mechanism": self.mechanism, "neighbourhood": self.neighbourhood,
                "rho": self.rho, "epsilon": self.epsilon}


class GeoKNN(_GeoQuery):
    """Per public query point p_j (j = 1..m): k-PNN (Liang–Yi (CGP) Alg. 3) at ρ_sel/m selects k users I_j (never published);
    then f_j = (mean of x_I, mean of ‖x_i − p_j‖ over I) ∈ ℝ³ is released with the Gaussian mechanism (Liang–Yi (CGP) Thm 3.1)
    at ρ_rel/m: f_j is K-Lipschitz with K = √2 under dist_∞ (each part 1-Lipschitz) or K = √2/k for one user's move
    (``neighbourhood = "user"``: the user moves each mean by ≤ d/k), σ = K/√(2ρ_rel/m).
    ρ_sel = ``select_share``·ρ, ρ_rel = ρ − ρ_sel; adaptive composition (Liang–Yi (CGP) Thm 3.2) over the 2m steps gives ρ-CGP:
    cost per located user ρ per unit², converted to m². With n < k located users k = n is used (n is public).
    """

    kind = "geo_knn"

    def __init__(self, query_id: str, *, k: int, rho: float, points, select_share: float = 0.5,
                 neighbourhood: str = "user", gamma0_factor: float = 0.0, max_cycles: int = 1000,
                 units: str = "metres", region=None, ref_lat: float | None = None, location: str = "last") -> None:
        super().__init__(query_id, units=units, region=region, ref_lat=ref_lat, location=location)
        self.k = _posint(k, "k")
        self.rho = _pos(rho, "rho")
        if not isinstance(points, (list, tuple)) or len(points) == 0:
            raise ValueError(f"points: must be a non-empty list of [lat, lon], got {points!r}")
        self.points = [_point(p, f"points[{j}]", self.frame) for j, p in enumerate(points)]
        self.select_share = _num(select_share, "select_share")
        if not (0.0 < self.select_share < 1.0):
            raise ValueError(f"select_share: must lie in (0, 1), got {select_share!r}")
        self.neighbourhood = _choice(neighbourhood, "neighbourhood", NEIGHBOURHOODS)
        self.gamma0_factor = _num(gamma0_factor, "gamma0_factor")
        self.max_cycles = _posint(max_cycles, "max_cycles", hi=MAX_PNN_CYCLES)
        self._p = self.frame.to_planar(self.points)
        m = len(self.points)
        self.rho_select = self.select_share * self.rho / m  # per point: k-PNN is ρ_select-CGP (Liang–Yi (CGP) Alg. 3)
        self.rho_release = (1.0 - self.select_share) * self.rho / m  # per point: Gaussian on f_j
        self._set_cost(self.rho)  # m·(ρ_select + ρ_release) = ρ (Liang–Yi (CGP) Thm 3.2)

    def lipschitz(self, k_eff: int) -> float:
        """K of f_j = (mean location, mean distance) of k_eff selected users: √2 (dist_inf) or √2/k_eff (user)."""
        return math.sqrt(2.0) if self.neighbourhood == "dist_inf" else math.sqrt(2.0) / k_eff

    def _release(self, rng, xy):
        n = xy.shape[0]
        k_eff = min(self.k, n)
        gauss = GaussianCGP(self.rho_release, lipschitz=self.lipschitz(k_eff))  # σ = K/√(2ρ_rel) (Liang–Yi (CGP) Thm 3.1)
        out = []
        for j in range(self._p.shape[0]):
            p = self._p[j]
            idx = k_pnn(rng, xy, p, k_eff, rho=self.rho_select, gamma0_factor=self.gamma0_factor,
                        max_cycles=self.max_cycles)
            sel = xy[idx]
            f = np.concatenate([sel.mean(axis=0), [np.sqrt(((sel - p) ** 2).sum(axis=1)).mean()]])
            noisy = gauss.release(rng, f)
            out.append({"point": self.points[j], "mean_location": self._latlon_list(noisy[:2])[0],
                        "mean_distance": max(float(noisy[2]), 0.0)})
        return {"neighbours": out, "k": k_eff, "users": n, "noise": {"sigma": gauss.sigma},
                "distance_unit": self.frame.distance_unit}

    def _empty_values(self) -> dict:
        return {"neighbours": [{"point": p, "mean_location": None, "mean_distance": None} for p in self.points],
                "k": 0, "users": 0, "noise": {"sigma": None}, "distance_unit": self.frame.distance_unit}

    def describe(self) -> dict:
        return {**super().describe(), "k": self.k, "rho": self.rho, "points": self.points,
                "select_share": self.select_share, "neighbourhood": self.neighbourhood,
                "gamma0_factor": self.gamma0_factor}


class GeoConvexHull(_GeoQuery):
    """Private convex hull of the located users (Liang–Yi (CGP) Alg. 4 + anchor release, Thm 4.16): ρ-CGP under dist_∞.

    Published: the hull of the noisy anchors (counter-clockwise [lat, lon] vertices), the noisy enclosing circle
    (centre, radius — released by steps 1–2), k and n. The anchor indices are never published.
    Cost per located user: ρ per unit², converted to m².
    """

    kind = "geo_convex_hull"

    def __init__(self, query_id: str, *, rho: float, beta: float = 0.05, anchor_share: float = 0.5, k: int = 0,
                 k_min: int = 16, k_max: int = 128, gamma0_factor: float = 0.0, max_cycles: int = 1000,
                 units: str = "metres", region=None, ref_lat: float | None = None, location: str = "last") -> None:
        super().__init__(query_id, units=units, region=region, ref_lat=ref_lat, location=location)
        self.rho = _pos(rho, "rho")
        self.beta = _num(beta, "beta")
        if not (0.0 < self.beta < 1.0):
            raise ValueError(f"beta: must lie in (0, 1), got {beta!r}")
        self.anchor_share = _num(anchor_share, "anchor_share")
        if not (0.0 < self.anchor_share < 1.0):
            raise ValueError(f"anchor_share: must lie in (0, 1), got {anchor_share!r}")
        self.k = _posint(k, "k", lo=0, hi=MAX_HULL_K)
        self.k_min = _posint(k_min, "k_min", hi=MAX_HULL_K)
        self.k_max = _posint(k_max, "k_max", hi=MAX_HULL_K)
        if self.k_max < self.k_min:
            raise ValueError(f"k_max: must be ≥ k_min = {self.k_min}, got {k_max!r}")
        self.gamma0_factor = _num(gamma0_factor, "gamma0_factor")
        self.max_cycles = _posint(max_cycles, "max_cycles", hi=MAX_PNN_CYCLES)
        self._set_cost(self.rho)  # ρ-CGP (Liang–Yi (CGP) Thm 4.16; pch_cost)

    def _release(self, rng, xy):
        res = private_convex_hull(rng, xy, self.rho, beta=self.beta, k=self.k or None,
                                  anchor_share=self.anchor_share, k_range=(self.k_min, self.k_max),
                                  gamma0_factor=self.gamma0_factor, max_cycles=self.max_cycles)
        return {"hull": self._latlon_list(res.hull), "users": int(xy.shape[0]), "k": res.k,
                "circle": {"center": self._latlon_list(res.center)[0], "radius": res.radius},
                "distance_unit": self.frame.distance_unit}

    def _empty_values(self) -> dict:
        return {"hull": [], "users": 0, "k": None, "circle": {"center": None, "radius": None},
                "distance_unit": self.frame.distance_unit}

    def describe(self) -> dict:
        return {**super().describe(), "rho": self.rho, "beta": self.beta, "anchor_share": self.anchor_share,
                "k": self.k or "auto", "k_range": [self.k_min, self.k_max]}
