"""Independent geometry for the geo tests: haversine distances, the smallest cap around a lat/lon box found by a
generic optimiser over a dense sampling of the box's edge, its bounding box, and the sinc/chord metres-per-unit bound
written out from the formula. Nothing here calls the code under test."""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy import optimize

R = 6_371_008.8  # IUGG mean Earth radius (m)


def haversine_rad(p, q) -> np.ndarray:
    """Great-circle angles (radians) between [lat, lon] rows (degrees)."""
    p, q = np.radians(np.asarray(p, float).reshape(-1, 2)), np.radians(np.asarray(q, float).reshape(-1, 2))
    h = np.sin((q[:, 0] - p[:, 0]) / 2) ** 2 + np.cos(p[:, 0]) * np.cos(q[:, 0]) * np.sin((q[:, 1] - p[:, 1]) / 2) ** 2
    return 2 * np.arcsin(np.sqrt(np.clip(h, 0.0, 1.0)))


def haversine_m(p, q) -> np.ndarray:
    return R * haversine_rad(p, q)


def edge_points(region, n: int = 400) -> np.ndarray:
    lat0, lat1, lon0, lon1 = region
    t = np.linspace(0.0, 1.0, n)
    return np.vstack([np.column_stack([np.full(n, lat0), lon0 + t * (lon1 - lon0)]),
                      np.column_stack([np.full(n, lat1), lon0 + t * (lon1 - lon0)]),
                      np.column_stack([lat0 + t * (lat1 - lat0), np.full(n, lon0)]),
                      np.column_stack([lat0 + t * (lat1 - lat0), np.full(n, lon1)])])


def smallest_cap(region) -> tuple[float, float, float]:
    """(lat, lon, radius in radians) minimising the largest distance to the box's edge (Nelder–Mead)."""
    return _smallest_cap(tuple(float(v) for v in region))


@functools.lru_cache(maxsize=64)
def _smallest_cap(region: tuple) -> tuple[float, float, float]:
    pts = edge_points(region)

    def worst(c):
        return float(haversine_rad(np.array([c]), pts).max())

    c0 = [(region[0] + region[1]) / 2, (region[2] + region[3]) / 2]
    r = optimize.minimize(worst, c0, method="Nelder-Mead", options={"xatol": 1e-10, "fatol": 1e-14, "maxiter": 20000})
    return float(r.x[0]), float(r.x[1]), worst(r.x)


def cap_box(lat_c: float, lon_c: float, theta0: float) -> tuple[float, float, float, float]:
    """Lat/lon bounding box of a cap not holding a pole: latitudes ±θ0, longitudes ±asin(sin θ0 / cos φc)."""
    d = math.degrees(theta0)
    half_lon = math.degrees(math.asin(min(1.0, math.sin(theta0) / math.cos(math.radians(lat_c)))))
    return lat_c - d, lat_c + d, lon_c - half_lon, lon_c + half_lon


def sinc_half(x: float) -> float:
    return 1.0 if x == 0 else math.sin(x / 2) / (x / 2)


def c_of_box(units: str, box, ref_lat: float) -> float:
    """Metres per planar unit over a lat/lon box: R·min(sinc(Φ/2)/b, cos(max|lat|)·sinc(Λ/2)/a)."""
    lat0, lat1, lon0, lon1 = box
    s_phi, s_lam = sinc_half(math.radians(lat1 - lat0)), sinc_half(math.radians(lon1 - lon0))
    cc = math.cos(math.radians(max(abs(lat0), abs(lat1))))
    a, b = (180 / math.pi, 180 / math.pi) if units == "degrees" else (R * math.cos(math.radians(ref_lat)), R)
    return R * min(s_phi / b, cc * s_lam / a)


def folded_c(units: str, region, ref_lat: float | None = None) -> float:
    """c over the bounding box of the smallest cap around ``region`` (what the service must charge with)."""
    ref = (region[0] + region[1]) / 2 if ref_lat is None else ref_lat
    return c_of_box(units, cap_box(*smallest_cap(region)), ref)


def folded_point(region, lat: float, lon: float) -> tuple[float, float]:
    """The fold of one point, by spherical trigonometry (bearing and destination formulas): a point farther than θ0
    from the cap's centre goes to distance min(θ0, π − θ) from it, on the same bearing."""
    lat_c, lon_c, theta0 = smallest_cap(region)
    theta = float(haversine_rad([[lat_c, lon_c]], [[lat, lon]])[0])
    if theta <= theta0:
        return lat, lon
    p1, l1, p2, l2 = map(math.radians, (lat_c, lon_c, lat, lon))
    bearing = math.atan2(math.sin(l2 - l1) * math.cos(p2),
                         math.cos(p1) * math.sin(p2) - math.sin(p1) * math.cos(p2) * math.cos(l2 - l1))
    g = min(theta0, math.pi - theta)
    p3 = math.asin(math.sin(p1) * math.cos(g) + math.cos(p1) * math.sin(g) * math.cos(bearing))
    l3 = l1 + math.atan2(math.sin(bearing) * math.sin(g) * math.cos(p1), math.cos(g) - math.sin(p1) * math.sin(p3))
    return math.degrees(p3), math.degrees(l3)
