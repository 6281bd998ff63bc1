"""Bounding a location to a lat/lon region without a cliff: fold the sphere onto a cap (docs/contract.md §3 ``cgp``).

The geo and range kinds need every location inside a region R = [lat_min, lat_max] × [lon_min, lon_max]: there a
planar distance is bounded by the great-circle one, d_u ≤ d_true/c (``PlanarFrame.metres_per_unit``). Dropping the
locations outside R would make *whether* a user is inside R visible (the count of located users, their noise):
two locations 1 m apart on either side of R's edge would be told apart, which no ρ·d² bound allows. Instead every
location is mapped into R by a map that never lengthens a distance, so the CGP guarantee holds for ANY two
locations on the sphere.

**The fold.** Let C be the smallest spherical cap (centre ĉ, angular radius θ0 < π/2) containing R. In geodesic
polar coordinates (θ, ψ) around ĉ, a point goes to (g(θ), ψ) with

    g(θ) = min(θ, θ0, π − θ):

the cap stays; a point farther than θ0 goes to the cap's edge on its own bearing ψ; only the points within θ0 of
the antipode −ĉ come back inside (at their distance from −ĉ), and −ĉ goes to ĉ. The map is 1-Lipschitz for the
great-circle distance: the sphere's metric is dθ² + sin²θ dψ², the image's is g′² dθ² + sin²g dψ², and

* |g′| ∈ {1, 0, 1} on the three pieces;
* sin g ≤ sin θ: equal for θ ≤ θ0 and for θ ≥ π − θ0; for θ0 ≤ θ ≤ π − θ0, sin θ ≥ sin θ0 (θ0 ≤ π/2);

so no tangent vector is lengthened, and (the map being continuous, also at −ĉ where g → 0) no path and no
distance either. It is the identity on C ⊇ R. (A fold that brought every far point back inside, e.g.
θ ↦ θ0·(π − θ)/(π − θ0), is 1-Lipschitz too, but it would count Honolulu in California.)

**Then the planar clamp.** The folded point lies in C, hence in C's lat/lon bounding box B; the equirectangular
(or raw degrees) projection P maps B's points with d_u ≤ d_true/c_B (the same bound, computed over B), and
clamping P's coordinates to the rectangle P(R) is the Euclidean projection onto a convex set, 1-Lipschitz in the
plane. For any two locations x, x′:  d_u(clamp P fold x, clamp P fold x′) ≤ d_u(P fold x, P fold x′)
≤ d_true(fold x, fold x′)/c_B ≤ d_true(x, x′)/c_B. The cost is therefore recorded with c_B (≤ c_R): for a city the
two agree to < 1 %, for the contiguous US c_B/c_R ≈ 0.75, i.e. ≈ 1.8× the ρ per m² for the same planar ρ — the
price of a guarantee without a cliff. Inside R nothing moves; a location outside R lands on R's edge (releases near
the edge count it there), unless it lies within θ0 of the antipode of R's cap (the other side of the Earth), which
lands inside.

The cap must leave room: θ0 < 90°, and B must not reach a pole or cross the antimeridian (the bound needs both);
a region that fails is refused with a message.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["CapFold", "enclosing_cap", "latlon_to_unit", "normalize_latlon", "unit_to_latlon"]

_MARGIN = 1e-9  # radians added to θ0 so that R's corners are inside the cap despite rounding


def latlon_to_unit(latlon: np.ndarray) -> np.ndarray:
    """[lat, lon] rows in degrees → unit vectors (n, 3)."""
    ll = np.radians(np.asarray(latlon, dtype=np.float64).reshape(-1, 2))
    cl = np.cos(ll[:, 0])
    return np.column_stack([cl * np.cos(ll[:, 1]), cl * np.sin(ll[:, 1]), np.sin(ll[:, 0])])


def unit_to_latlon(v: np.ndarray) -> np.ndarray:
    """Unit vectors (n, 3) → [lat, lon] rows in degrees (lon in (−180, 180])."""
    v = np.asarray(v, dtype=np.float64).reshape(-1, 3)
    lat = np.degrees(np.arctan2(v[:, 2], np.hypot(v[:, 0], v[:, 1])))
    return np.column_stack([lat, np.degrees(np.arctan2(v[:, 1], v[:, 0]))])


def normalize_latlon(ll: np.ndarray) -> np.ndarray:
    """[lat, lon] rows with |lat| ≤ 90 and |lon| ≤ 180 unchanged; others reduced to the point they name, exactly in
    degrees (``np.fmod`` is exact, so 40 and 40 + 360·k are the same value whatever k; reducing after the conversion to
    radians would not be): the latitude modulo 360 folded over the poles (lat > 90 → 180 − lat, lon + 180), then
    the longitude into [−180, 180)."""
    out = np.array(ll, dtype=np.float64, copy=True).reshape(-1, 2)
    bad = (np.abs(out[:, 0]) > 90.0) | (np.abs(out[:, 1]) > 180.0)
    if bad.any():
        lat, lon = out[bad, 0], out[bad, 1]
        lat = np.fmod(np.fmod(lat + 90.0, 360.0) + 360.0, 360.0) - 90.0  # [−90, 270)
        over = lat > 90.0
        lat = np.where(over, 180.0 - lat, lat)
        lon = np.where(over, lon + 180.0, lon)
        lon = np.fmod(np.fmod(lon + 180.0, 360.0) + 360.0, 360.0) - 180.0  # [−180, 180)
        out[bad, 0], out[bad, 1] = lat, lon
    return out


def _arc(a: tuple[float, float], b: tuple[float, float]) -> float:
    """Great-circle angle between two [lat, lon] points (radians; haversine form, accurate for small angles)."""
    p1, l1, p2, l2 = map(math.radians, (a[0], a[1], b[0], b[1]))
    h = math.sin((p2 - p1) / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin((l2 - l1) / 2) ** 2
    return 2 * math.asin(min(1.0, math.sqrt(h)))


def enclosing_cap(region) -> tuple[float, float, float]:
    """(centre lat, centre lon, θ0 in radians) of the smallest cap containing the lat/lon box ``region`` (its
    longitude span at most 180°).

    By the box's symmetry the centre is on its middle meridian. From such a centre the farthest point of the box is
    a corner: along a parallel the distance grows with the longitude gap h ≤ 90°; along a meridian
    cos d = sin φ sin φc + cos φ cos φc cos h = R·cos(φc − φ*) is smallest at an end. For a corner at latitude φ1 the
    distance from (φc, middle meridian) is therefore V-shaped in φc with its minimum at φ1* = atan2(sin φ1,
    cos φ1 cos h). On [φ0*, φ1*] the distance to the bottom corners increases and to the top corners decreases, so the
    smallest largest distance is where they cross — found by bisection on that interval (outside it both move the
    same way)."""
    lat0, lat1, lon0, lon1 = region
    lon_c = 0.5 * (lon0 + lon1)
    h = math.radians(0.5 * (lon1 - lon0))
    top, bottom = (lat1, lon0), (lat0, lon0)

    def nearest(lat: float) -> float:  # φ* of a corner at this latitude, in degrees
        p = math.radians(lat)
        return math.degrees(math.atan2(math.sin(p), math.cos(p) * math.cos(h)))

    lo, hi = nearest(lat0), nearest(lat1)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if _arc((mid, lon_c), top) > _arc((mid, lon_c), bottom):
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-13:
            break
    lat_c = 0.5 * (lo + hi)
    theta0 = max(_arc((lat_c, lon_c), top), _arc((lat_c, lon_c), bottom)) + _MARGIN
    return lat_c, lon_c, theta0


class CapFold:
    """The 1-Lipschitz fold of the sphere onto the smallest cap around a lat/lon ``region`` (module doc)."""

    def __init__(self, region) -> None:
        self.region = tuple(float(v) for v in region)
        if self.region[3] - self.region[2] > 180.0:
            raise ValueError(f"region: {list(self.region)} is too large to fold onto (it spans more than 180° of "
                             "longitude); split it")
        self.lat_c, self.lon_c, self.theta0 = enclosing_cap(self.region)
        if not self.theta0 < math.pi / 2:
            raise ValueError(f"region: {list(self.region)} is too large to fold onto (its smallest enclosing cap has "
                             f"radius {math.degrees(self.theta0):.2f}° ≥ 90°); split it")
        half_lat = math.degrees(self.theta0)
        b_lat0, b_lat1 = self.lat_c - half_lat, self.lat_c + half_lat
        if not (-90.0 < b_lat0 and b_lat1 < 90.0):
            raise ValueError(f"region: {list(self.region)} is too close to a pole: the cap that bounds it "
                             f"(centre {self.lat_c:.3f}°, radius {half_lat:.3f}°) would contain the pole")
        half_lon = math.degrees(math.asin(min(1.0, math.sin(self.theta0) / math.cos(math.radians(self.lat_c)))))
        b_lon0, b_lon1 = self.lon_c - half_lon, self.lon_c + half_lon
        if not (-180.0 < b_lon0 and b_lon1 < 180.0):
            raise ValueError(f"region: {list(self.region)} is too close to the antimeridian: the cap that bounds it "
                             f"spans longitudes {b_lon0:.3f}° … {b_lon1:.3f}°")
        #: the lat/lon bounding box of the cap: where folded points lie (the metres-per-unit bound is taken over it)
        self.box = (b_lat0, b_lat1, b_lon0, b_lon1)
        self._c = latlon_to_unit(np.array([[self.lat_c, self.lon_c]]))[0]

    def _angle(self, v: np.ndarray, cos_t: np.ndarray) -> np.ndarray:
        """Angle to ĉ as atan2(|v × ĉ|, v·ĉ): accurate near ĉ and near −ĉ (arccos is not)."""
        return np.arctan2(np.linalg.norm(np.cross(v, self._c), axis=1), cos_t)

    def fold_unit(self, v: np.ndarray) -> np.ndarray:
        """Fold unit vectors (n, 3) onto the cap."""
        v = np.asarray(v, dtype=np.float64).reshape(-1, 3)
        cos_t = v @ self._c
        theta = self._angle(v, cos_t)
        out = v.copy()
        far = theta > self.theta0
        if far.any():
            t = theta[far]
            tangent = v[far] - cos_t[far, None] * self._c[None, :]  # direction from ĉ towards the point
            norm = np.linalg.norm(tangent, axis=1)
            g = np.minimum(self.theta0, math.pi - t)  # g(θ) = min(θ, θ0, π − θ), θ > θ0 here
            safe = norm > 0  # at the antipode the direction is undefined, and g = 0 anyway
            u = np.zeros_like(tangent)
            u[safe] = tangent[safe] / norm[safe, None]
            out[far] = np.cos(g)[:, None] * self._c[None, :] + np.sin(g)[:, None] * u
        return out

    def fold(self, latlon) -> np.ndarray:
        """Fold [lat, lon] rows (degrees) onto the cap, as [lat, lon] with lon in (−180, 180).

        Rows within the cap with a latitude in [−90, 90] and a longitude in [−180, 180] are returned unchanged (bit
        for bit); any other finite row is read as the point of the sphere it names (:func:`normalize_latlon`: a
        longitude modulo 360, a latitude past a pole continuing over it, reduced exactly in degrees) and folded."""
        ll = normalize_latlon(np.asarray(latlon, dtype=np.float64).reshape(-1, 2))
        v = latlon_to_unit(ll)
        move = (self._angle(v, v @ self._c) > self.theta0) | (np.abs(ll[:, 0]) > 90.0) | (np.abs(ll[:, 1]) > 180.0)
        out = ll.copy()
        if move.any():
            out[move] = unit_to_latlon(self.fold_unit(v[move]))
        return out

    def describe(self) -> dict:
        return {"centre": [self.lat_c, self.lon_c], "radius_deg": math.degrees(self.theta0), "box": list(self.box)}
