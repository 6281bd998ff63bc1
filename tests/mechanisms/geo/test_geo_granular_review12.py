"""Review 12: the geo kinds publish Gaussian-noised coordinates on a public power-of-two grid, never x + float noise.

``x + N(0, σ²)`` in float64 leaks through its low bits (Mironov 2012): its outputs are (almost surely) not integer
multiples of g = 2^{⌊log2 σ⌋−30}, whereas g·(rint(x/g) + N_Z(0, (σ/g)²)) always are. Every published coordinate of
geo_locations (mechanism "cgp"), geo_knn and geo_convex_hull is checked to lie on the grid of its σ — through the
engine with ``units = "degrees"`` (the published [lat, lon] is the planar (x, y) swapped, no float conversion) and,
for metres, on the planar values before the lat/lon conversion (post-processing). The σ of the centre and radius of
the convex hull is pinned by hand (the pin of test_geo_convex_hull.py spied on the float sampler, which the hull no
longer calls). PNN's comparison-only noise stays float (its index is never published) and planar Laplace (``gp``)
states its float gap — not tested here beyond the docstring.
"""

from __future__ import annotations

import importlib
import math

import numpy as np
import orjson
import pytest

import streamdp.mechanisms.geo.convex_hull as ch
import streamdp.mechanisms.granular_gaussian as gg
from streamdp.accounting.cost import Cost, budget_vector
from streamdp.engine.engine import EngineConfig, ReleaseEngine
from streamdp.engine.pipeline import EmbeddedPipeline
from streamdp.engine.queries.geo import GeoConvexHull, GeoKNN, GeoLocations
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.mechanisms.geo import GaussianCGP, IdentityQueryCGP, basic_convex_hull, private_convex_hull
from streamdp.mechanisms.granular_gaussian import granularity
from streamdp.noise.generator import unsafe_seeded_generator
from streamdp.outputs.sinks import ListSink

US = [24.0, 50.0, -125.0, -66.0]


def on_grid(values, g) -> bool:
    q = np.asarray(values, dtype=np.float64) / g
    return bool(np.all(q == np.rint(q)))


def ev(user, ts, loc):
    return orjson.dumps({"user": user, "ts": ts, "items": [], "loc": [float(loc[0]), float(loc[1])]})


def run_engine(queries, payloads, seed):
    store = MemoryBudgetStore(budget_vector(Cost.cgp(1e9)))
    e = ReleaseEngine(EngineConfig(window_seconds=10.0, horizon=8, origin=0.0, unsafe_test_seed=seed), queries, store)
    sink = ListSink()
    EmbeddedPipeline(e, [sink]).run([payloads])
    return sink.records


def us_locations(rng, n):
    return np.column_stack([rng.uniform(30.0, 45.0, n), rng.uniform(-115.0, -75.0, n)])  # [lat, lon]


# ------------------------------------------------------------------------------------------------ mechanisms
def test_gaussian_cgp_release_is_on_its_grid_and_states_its_distance():
    rng = unsafe_seeded_generator(1201)
    m = GaussianCGP(2e-7, lipschitz=math.sqrt(2) / 5)
    v = rng.uniform(-1e6, 1e6, (400, 3))
    out = m.release(rng, v)
    assert m.granularity == granularity(m.sigma)
    assert on_grid(out, m.granularity)
    assert not on_grid(v, m.granularity)  # the inputs were not: the release rounded them
    assert m.grid_distance(3) == math.sqrt(3) * m.granularity / m.lipschitz
    assert m.grid_distance(3) <= math.sqrt(3) * 2.0**-30 / math.sqrt(2 * m.rho)


def test_identity_query_release_is_on_its_grid_in_one_draw(monkeypatch):
    calls = []
    real = gg.samplers.discrete_gaussian

    def spy(rng, sigma, size=None):
        calls.append((sigma, size))
        return real(rng, sigma, size)

    monkeypatch.setattr(gg.samplers, "discrete_gaussian", spy)
    rng = unsafe_seeded_generator(1202)
    iq = IdentityQueryCGP(5e-5)
    x = rng.uniform(-2e6, 2e6, (3000, 2))
    out = iq.release(rng, x)
    g = iq.granularity(3000)
    assert g == granularity(iq.sigma(3000))
    assert calls == [(iq.sigma(3000) / g, (3000, 2))]  # one vectorised draw for the n points, s = σ/g
    assert on_grid(out, g)
    assert iq.grid_distance(3000) == math.sqrt(2) * g
    assert iq.grid_distance(3000) <= math.sqrt(2) * 2.0**-30 * iq.sigma(3000)


@pytest.mark.parametrize("rho,share,sigma_hand", [(1.0, 0.5, math.sqrt(60.0)),  # ρ0 = 0.5/20: √(3/0.05)
                                                  (0.2, 0.25, math.sqrt(200.0))])  # ρ0 = 0.15/20: √(3/0.015)
def test_pch_centre_radius_and_anchors_on_their_grids(monkeypatch, rho, share, sigma_hand):
    """Liang–Yi (CGP) Alg. 4 lines 2–3 by hand: the centre (√2-Lipschitz, Gaussian at 2ρ0/3) and the radius (1-Lipschitz, at
    ρ0/3) both get σ0 = √(3/(2ρ0)), ρ0 = (1 − share)·ρ/20 — the first two granular draws, 2 coordinates then 1 — and
    are published on the grid g0 = granularity(σ0); the anchors on the identity query's grid at |A| points."""
    calls = []
    real = ch.granular_gaussian

    def spy(rng, value, sigma):
        calls.append((float(sigma), np.shape(value)))
        return real(rng, value, sigma)

    monkeypatch.setattr(ch, "granular_gaussian", spy)
    rng = unsafe_seeded_generator(1203)
    x = rng.uniform(0, 100, (30, 2))
    res = private_convex_hull(rng, x, rho, k=4, anchor_share=share)
    assert calls[0] == (pytest.approx(sigma_hand, rel=1e-12), (2,))
    assert calls[1] == (pytest.approx(sigma_hand, rel=1e-12), ())
    g0 = granularity(calls[0][0])
    assert on_grid(res.center, g0) and on_grid(res.radius, g0)
    ga = IdentityQueryCGP(share * rho).granularity(res.indices.size)
    assert on_grid(res.anchors, ga) and on_grid(res.hull, ga)
    assert all(any(np.array_equal(v, a) for a in res.anchors) for v in res.hull)  # hull vertices are anchors


def test_basic_convex_hull_cgp_is_on_the_grid():
    rng = unsafe_seeded_generator(1204)
    x = rng.uniform(0, 1000, (50, 2))
    hull = basic_convex_hull(rng, x, rho=0.01)
    assert on_grid(hull, IdentityQueryCGP(0.01).granularity(50))


def test_comparison_noise_stays_float_and_planar_laplace_states_its_grid():
    """Documented, not changed: the PNN/SVT noise is only compared. Planar Laplace ("gp") is on a grid since the
    lattice ℓ2-Laplace (tests/mechanisms/test_granular_l2_laplace_review12.py) and states its grid distance."""
    mod = importlib.import_module  # the package re-exports a function named pnn
    assert "Float noise" in mod("streamdp.mechanisms.geo.pnn").__doc__
    assert "Float noise" in mod("streamdp.mechanisms.geo.svt").__doc__
    doc = mod("streamdp.mechanisms.geo.planar_laplace").__doc__
    assert "On a grid (review 12)" in doc and "dist_∞(x, x') + a" in doc


# ------------------------------------------------------------------------------------------------ engine, degrees
@pytest.mark.parametrize("neighbourhood", ["user", "dist_inf"])
def test_geo_locations_published_points_on_the_grid(neighbourhood):
    rng = unsafe_seeded_generator(1205)
    locs = us_locations(rng, 40)
    q = GeoLocations("cloud", rho=40.0, region=US, units="degrees", neighbourhood=neighbourhood)
    recs = run_engine([q], [ev(f"u{i}", 1 + 0.01 * i, p) for i, p in enumerate(locs)], seed=7)
    v = recs[0].values
    assert v["users"] == 40 and v["distance_unit"] == "deg"
    sigma = v["noise"]["sigma"]
    assert sigma == pytest.approx(math.sqrt((40 if neighbourhood == "dist_inf" else 1) / 80.0), rel=1e-12)
    g = granularity(sigma)
    pts = np.array(v["points"])
    assert on_grid(pts, g)  # [lat, lon] = (y, x): the planar release, swapped
    assert np.max(np.abs(pts - locs[np.argmin(((pts[:, None] - locs[None]) ** 2).sum(-1), axis=1)])) < 8 * sigma


def test_geo_knn_published_aggregates_on_the_grid():
    rng = unsafe_seeded_generator(1206)
    locs = us_locations(rng, 30)
    points = [[40.7, -74.0], [34.05, -110.0]]
    q = GeoKNN("knn", k=3, rho=40.0, points=points, region=US, units="degrees")
    recs = run_engine([q], [ev(f"u{i}", 1 + 0.01 * i, p) for i, p in enumerate(locs)], seed=8)
    v = recs[0].values
    sigma = v["noise"]["sigma"]
    assert sigma == pytest.approx((math.sqrt(2) / 3) / math.sqrt(2 * 0.5 * 40.0 / 2), rel=1e-12)
    g = granularity(sigma)
    for nb in v["neighbours"]:
        assert on_grid(nb["mean_location"], g)
        assert on_grid(nb["mean_distance"], g)  # clipped at 0.0, which is on the grid too


def test_geo_convex_hull_published_hull_and_circle_on_the_grid():
    rng = unsafe_seeded_generator(1207)
    locs = us_locations(rng, 60)
    rho, share = 40.0, 0.5
    q = GeoConvexHull("hull", rho=rho, region=US, units="degrees", k=16, anchor_share=share)
    recs = run_engine([q], [ev(f"u{i}", 1 + 0.01 * i, p) for i, p in enumerate(locs)], seed=9)
    v = recs[0].values
    s0 = math.sqrt(3 / (2 * (1 - share) * rho / 20))
    g0 = granularity(s0)
    assert on_grid(v["circle"]["center"], g0) and on_grid(v["circle"]["radius"], g0)
    hull = np.array(v["hull"])
    assert hull.shape[0] >= 1
    # |A| (distinct anchors, ≤ k) is not published: the hull is on the identity query's grid for one of them
    grids = {granularity(math.sqrt(a / (2 * share * rho))) for a in range(1, v["k"] + 1)}
    assert any(on_grid(hull, g) for g in grids)


# ------------------------------------------------------------------------------------------------ engine, metres
def test_metres_planar_releases_on_the_grid_before_the_latlon_conversion(monkeypatch):
    """units = "metres": the published [lat, lon] is a float conversion of the planar release (post-processing);
    the planar values handed to it are on the grid."""
    rng = unsafe_seeded_generator(1208)
    locs = us_locations(rng, 25)
    xy = GeoLocations("x", rho=1e-8, region=US).frame.locate(locs)
    seen = []

    def spy(self, pts):
        seen.append(np.array(pts, dtype=np.float64).reshape(-1, 2))
        return self.frame.to_latlon(pts).tolist()

    monkeypatch.setattr(GeoLocations, "_latlon_list", spy)
    monkeypatch.setattr(GeoKNN, "_latlon_list", spy)
    monkeypatch.setattr(GeoConvexHull, "_latlon_list", spy)

    loc_q = GeoLocations("cloud", rho=1e-8, region=US)
    out = loc_q._release(unsafe_seeded_generator(1), xy)
    assert on_grid(seen[-1], granularity(out["noise"]["sigma"]))

    knn_q = GeoKNN("knn", k=2, rho=1e-8, points=[[40.7, -74.0]], region=US)
    out = knn_q._release(unsafe_seeded_generator(2), xy)
    g = granularity(out["noise"]["sigma"])
    assert on_grid(seen[-1], g) and on_grid(out["neighbours"][0]["mean_distance"], g)

    hull_q = GeoConvexHull("hull", rho=1e-8, region=US, k=16)
    seen.clear()
    out = hull_q._release(unsafe_seeded_generator(3), xy)
    g0 = granularity(math.sqrt(3 / (2 * 0.5 * 1e-8 / 20)))
    hull_xy, centre_xy = seen
    assert on_grid(centre_xy, g0) and on_grid(out["circle"]["radius"], g0)
    grids = {granularity(math.sqrt(a / (2 * 0.5 * 1e-8))) for a in range(1, 17)}
    assert any(on_grid(hull_xy, g) for g in grids)
