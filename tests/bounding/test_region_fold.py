"""Locations outside the region (streamdp/bounding/region_fold.py): no cliff at the region's edge.

The property the CGP cost needs is checked directly, with distances computed here (haversine): for ANY two locations
on the sphere, the planar distance between what the service uses for them is at most their true distance / c, c the
recorded metres per unit. Dropping out-of-region locations (the old behaviour) fails the no-cliff test below."""

import math

import numpy as np
import pytest

from streamdp.bounding.region_fold import CapFold, normalize_latlon
from streamdp.engine.queries.geo import PlanarFrame
from streamdp.noise.generator import synthetic_data_generator

from geo_reference import R, c_of_box, cap_box, folded_point, haversine_m, haversine_rad, smallest_cap

US = (24.0, 50.0, -125.0, -66.0)
NYC = (40.4, 41.0, -74.3, -73.6)
EUROPE = (-10.0, 60.0, -20.0, 40.0)


def sphere(g, n):
    v = g.normal(size=(n, 3))
    v /= np.linalg.norm(v, axis=1)[:, None]
    return np.column_stack([np.degrees(np.arcsin(v[:, 2])), np.degrees(np.arctan2(v[:, 1], v[:, 0]))])


def nudge(g, p, scale_deg):
    """Points within ~scale of p, kept valid ([−90, 90] × [−180, 180])."""
    q = p + g.normal(size=p.shape) * scale_deg
    q[:, 0] = np.clip(q[:, 0], -90, 90)
    q[:, 1] = (q[:, 1] + 180) % 360 - 180
    return q


def hard_pairs(g, region, n=4000):
    """Uniform pairs, close pairs everywhere, close pairs at the poles, around the cap's antipode and across the
    region's edges (the places where a fold or a clamp could stretch a distance)."""
    lat_c, lon_c, _ = smallest_cap(region)
    anti = np.array([[-lat_c, lon_c + 180 if lon_c < 0 else lon_c - 180]])
    lat0, lat1, lon0, lon1 = region
    edge = np.vstack([np.column_stack([np.full(n, lat0), lon0 + g.random(n) * (lon1 - lon0)]),
                      np.column_stack([np.full(n, lat1), lon0 + g.random(n) * (lon1 - lon0)]),
                      np.column_stack([lat0 + g.random(n) * (lat1 - lat0), np.full(n, lon1)])])
    a = [sphere(g, 4 * n), sphere(g, n), np.repeat([[89.9999, 0.0]], n, 0), np.repeat([[-89.9999, 0.0]], n, 0),
         np.repeat(anti, n, 0), edge]
    a = np.vstack(a)
    b = np.vstack([sphere(g, 4 * n), nudge(g, a[4 * n:], 1e-3)])
    return a, b


@pytest.mark.parametrize("region", [US, NYC, EUROPE])
def test_the_fold_never_lengthens_a_distance_and_keeps_the_cap(region):
    f = CapFold(region)
    g = synthetic_data_generator(3)  # test data, not privacy noise
    a, b = hard_pairs(g, region)
    d0 = haversine_rad(a, b)
    fa, fb = f.fold(a), f.fold(b)
    d1 = haversine_rad(fa, fb)
    assert np.all(d1 <= d0 * (1 + 1e-9) + 1e-12), (d1 - d0).max()
    assert (d1 < d0 * 0.999).mean() > 0.2  # it does fold (a test of an identity map would pass the line above)
    lat_c, lon_c, theta0 = smallest_cap(region)
    assert np.all(haversine_rad(fa, [[lat_c, lon_c]]) <= theta0 + 1e-8)  # the image lies in the cap
    inside = haversine_rad(a, [[lat_c, lon_c]]) < theta0 - 1e-8
    assert inside.sum() > 100 and np.array_equal(fa[inside], a[inside])  # the cap itself does not move


def test_the_fold_is_the_stated_map_by_spherical_trigonometry():
    """θ ↦ min(θ, θ0, π − θ) on the bearing from the cap's centre, computed with the bearing/destination formulas."""
    g = synthetic_data_generator(6)
    for region in (US, NYC):
        f = CapFold(region)
        pts = sphere(g, 300)
        got = f.fold(pts)
        want = np.array([folded_point(region, la, lo) for la, lo in pts])
        assert haversine_rad(got, want).max() < 1e-8


def test_the_cap_is_the_smallest_around_the_region():
    # wide in longitude at high latitude (Canada), and a 140°-wide band: the centre lies poleward of the box
    for region in (US, NYC, EUROPE, (30.0, 34.0, -120.0, -115.0), (41.0, 70.0, -141.0, -52.0),
                   (5.0, 25.0, -70.0, 70.0)):
        f = CapFold(region)
        lat_c, lon_c, theta0 = smallest_cap(region)  # a generic optimiser over 1600 edge points
        assert f.lat_c == pytest.approx(lat_c, abs=1e-6) and f.lon_c == pytest.approx(lon_c, abs=1e-6)
        assert f.theta0 == pytest.approx(theta0, abs=1e-8)
        assert f.box == pytest.approx(cap_box(lat_c, lon_c, theta0), abs=1e-6)


@pytest.mark.parametrize("units,region,ref", [("metres", US, 37.0), ("metres", NYC, None), ("degrees", US, None),
                                              ("degrees", EUROPE, None)])
def test_any_two_locations_are_charged_soundly(units, region, ref):
    """d_planar(locate x, locate x′) ≤ d_true(x, x′)/c for all x, x′ on the sphere — the converted cost is sound
    for users outside the region as well; and inside the region nothing changed."""
    f = PlanarFrame(units, region, ref)
    ref_ = (region[0] + region[1]) / 2 if ref is None else ref
    c = c_of_box(units, cap_box(*smallest_cap(region)), ref_)
    assert f.metres_per_unit() == pytest.approx(c, rel=1e-6)
    assert f.metres_per_unit() <= f.region_metres_per_unit()
    g = synthetic_data_generator(4)
    a, b = hard_pairs(g, region)
    d_u = np.linalg.norm(f.locate(a) - f.locate(b), axis=1)
    assert np.all(d_u * f.metres_per_unit() <= haversine_m(a, b) * (1 + 1e-9) + 1e-6)
    lo, hi = np.array([region[0], region[2]]), np.array([region[1], region[3]])
    inside = lo + g.random((5000, 2)) * (hi - lo)
    assert np.array_equal(f.locate(inside), f.to_planar(inside))


def test_no_cliff_at_the_region_edge():
    """1 m inside and 1 m outside the northern edge: planar points within ~2 m/c (the old drop rule made them
    'located' and 'absent': infinitely far apart)."""
    f = PlanarFrame("metres", US, 37.0)
    one_m = math.degrees(1.0 / R)
    lon = np.linspace(-124.0, -67.0, 50)
    a = np.column_stack([np.full(50, 50.0 - one_m), lon])
    b = np.column_stack([np.full(50, 50.0 + one_m), lon])
    d_u = np.linalg.norm(f.locate(a) - f.locate(b), axis=1)
    assert np.all(d_u <= 2.0 / f.metres_per_unit() + 1e-6)
    far = f.locate([[21.3, -157.9], [64.8, -147.7], [-33.9, 151.2], [89.9, 10.0]])  # HNL, FAI, SYD, a pole
    x0, y0 = f.to_planar([[US[0], US[2]]])[0]
    x1, y1 = f.to_planar([[US[1], US[3]]])[0]
    assert np.all((far[:, 0] >= x0) & (far[:, 0] <= x1) & (far[:, 1] >= y0) & (far[:, 1] <= y1))


def test_locations_given_past_the_poles_or_modulo_360_are_the_same_points():
    f = PlanarFrame("metres", US, 37.0)
    same = f.locate([[40.0, -100.0], [40.0, 260.0], [40.0, -460.0], [140.0, 80.0]])  # all the point (40N, 100W)
    assert np.allclose(same, same[0], atol=1e-6)
    # reduced exactly in degrees: huge multiples of 360 name the same point (radians first would drift by km)
    k = np.array([1e6, 1e12, 1e14, 2.0**50])
    lon = -100.0 + 360.0 * k  # not all exactly representable: compare with what the float names
    want = np.column_stack([np.full(4, 40.0), np.fmod(lon + 180.0, 360.0) - 180.0])
    assert np.array_equal(f.locate(np.column_stack([np.full(4, 40.0), lon])), f.locate(want))
    assert np.array_equal(f.locate([[40.0 + 360.0 * 1e12, -100.0]]), f.locate([[40.0, -100.0]]))
    for bad in ([95.0, 10.0], [-95.0, 10.0], [40.0, 540.0], [-270.0, 0.0]):
        lat, lon = normalize_latlon(np.array([bad]))[0]
        assert -90.0 <= lat <= 90.0 and -180.0 <= lon < 180.0
        assert haversine_rad([bad], [[lat, lon]])[0] < 1e-12  # the same point of the sphere


@pytest.mark.parametrize("region,match", [((80.0, 89.5, -90.0, 90.0), "pole"), ((10.0, 20.0, 165.0, 179.5),
                                                                             "antimeridian"),
                                          ((-80.0, 80.0, -170.0, 170.0), "too large"),
                                          ((0.0, 10.0, -100.0, 90.0), "180° of longitude"),
                                          ((-49.6, -46.3, 23.3, 151.6), "pole")])  # its smallest cap holds a pole
def test_regions_that_cannot_be_folded_are_refused(region, match):
    with pytest.raises(ValueError, match=match):
        PlanarFrame("metres", list(region))
