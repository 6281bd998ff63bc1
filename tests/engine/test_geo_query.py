"""Query kinds geo_locations, geo_knn, geo_convex_hull (Liang–Yi (CGP)) end to end through the engine (in-memory store).

Expected costs, σ's and the metres-per-unit bound are recomputed here from the formulas (Liang–Yi (CGP) Thm 3.1/4.8, Lemma
3.6; the sinc/chord bound of streamdp/engine/queries/geo.py), not read from the code under test.
"""

import json
import math
import os

import numpy as np
import orjson
import pytest
from scipy import stats

from streamdp.accounting.cost import COMPONENTS, LOSS_SCALE, Cost
from streamdp.adapters.kafka.schemas import release_validator
from streamdp.cli.main import main
from streamdp.config.kinds import ConfigError
from streamdp.config.loader import parse_config
from streamdp.engine.queries.geo import GeoConvexHull, GeoKNN, GeoLocations, PlanarFrame
from streamdp.mechanisms.geo.convex_hull import convex_hull_vertices, hull_jaccard
from streamdp.noise.generator import synthetic_data_generator

from engine_helpers import engine, run
from geo_reference import folded_c, folded_point

R = 6_371_008.8  # IUGG mean Earth radius (m)
US = [24.0, 50.0, -125.0, -66.0]
NYC = [40.4, 41.0, -74.3, -73.6]
CGP = COMPONENTS.index("cgp_rho")
EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")


def ev(user, ts, loc=None, items=()):
    d = {"user": user, "ts": ts, "items": list(items)}
    if loc is not None:
        d["loc"] = list(loc)
    return orjson.dumps(d)


def sinc_half(x):
    return 1.0 if x == 0 else math.sin(x / 2) / (x / 2)


def c_bound(units, region, ref_lat=None):
    """Metres per planar unit, lower bound over the region: R·min(s_φ/b, cos(max|lat|)·s_λ/a)."""
    lat0, lat1, lon0, lon1 = region
    ref = (lat0 + lat1) / 2 if ref_lat is None else ref_lat
    s_phi, s_lam = sinc_half(math.radians(lat1 - lat0)), sinc_half(math.radians(lon1 - lon0))
    cc = math.cos(math.radians(max(abs(lat0), abs(lat1))))
    if units == "degrees":
        a = b = 180 / math.pi
    else:
        a, b = R * math.cos(math.radians(ref)), R
    return R * min(s_phi / b, cc * s_lam / a)


def fixed_up(x):
    v = math.ceil(x * LOSS_SCALE)
    return v + 1 if v / LOSS_SCALE < x else v


def planar(latlon, units, ref):
    ll = np.asarray(latlon, dtype=float).reshape(-1, 2)
    if units == "degrees":
        return np.column_stack([ll[:, 1], ll[:, 0]])
    return np.column_stack([R * math.cos(math.radians(ref)) * np.radians(ll[:, 1]), R * np.radians(ll[:, 0])])


def haversine(p, q):
    p, q = np.radians(p), np.radians(q)
    h = np.sin((q[:, 0] - p[:, 0]) / 2) ** 2 + np.cos(p[:, 0]) * np.cos(q[:, 0]) * np.sin((q[:, 1] - p[:, 1]) / 2) ** 2
    return 2 * R * np.arcsin(np.sqrt(np.minimum(h, 1.0)))


# ------------------------------------------------------------------------------------------------ units
@pytest.mark.parametrize("units,region,ref", [("metres", US, 37.0), ("metres", NYC, None), ("degrees", US, None),
                                              ("degrees", [-10.0, 60.0, -20.0, 40.0], None)])
def test_metres_per_unit_bound_is_sound_and_nearly_tight(units, region, ref):
    """The region's own bound (the charged one is over the folding cap's box: tests/bounding/test_region_fold.py)."""
    f = PlanarFrame(units, region, ref)
    c = c_bound(units, region, ref)
    assert f.region_metres_per_unit() == pytest.approx(c, rel=1e-12)
    g = synthetic_data_generator(5)  # test data, not privacy noise
    lo, hi = np.array([region[0], region[2]]), np.array([region[1], region[3]])
    a = lo + g.random((20000, 2)) * (hi - lo)
    b = lo + g.random((20000, 2)) * (hi - lo)
    # plus near-worst pairs: short east-west hops on the edge of largest |lat|
    lat_edge = region[1] if abs(region[1]) >= abs(region[0]) else region[0]
    lon = lo[1] + g.random(2000) * (hi[1] - lo[1] - 1e-3)
    a = np.vstack([a, np.column_stack([np.full(2000, lat_edge), lon])])
    b = np.vstack([b, np.column_stack([np.full(2000, lat_edge), lon + 1e-3])])
    ref_ = (region[0] + region[1]) / 2 if ref is None else ref
    d_u = np.sqrt(((planar(a, units, ref_) - planar(b, units, ref_)) ** 2).sum(axis=1))
    ratio = haversine(a, b) / d_u
    assert ratio.min() >= c * (1 - 1e-9)  # d_true ≥ c·d_planar everywhere: the converted cost is sound
    assert ratio.min() <= c * 1.06  # and not loose by more than a few per cent
    # the cost conversion: ρ per unit² → ρ/c² per m², c over the cap that every location is folded into
    cf = folded_c(units, region, ref)
    assert cf < c and f.canonical_rho(2.5) == pytest.approx(2.5 / cf**2, rel=1e-6)


def test_region_and_units_validation():
    with pytest.raises(ValueError, match="region"):
        PlanarFrame("metres", [10, 5, 0, 1])
    with pytest.raises(ValueError, match="region"):
        PlanarFrame("metres", [-90, 5, 0, 1])  # the poles are excluded
    with pytest.raises(ValueError, match="region"):
        PlanarFrame("metres", [0, 5, 170, 190])  # no antimeridian wrap
    with pytest.raises(ValueError, match="units"):
        PlanarFrame("km", US)


# ------------------------------------------------------------------------------------------------ costs
def test_known_costs_fixed_point_with_unit_conversion_and_gp():
    rho_m, rho_deg, eps = 3e-9, 40.0, 2e-4
    qs = [GeoLocations("cloud", rho=rho_m, units="metres", region=US, ref_lat=37.0, neighbourhood="user"),
          GeoConvexHull("hull", rho=rho_deg, units="degrees", region=US),
          GeoLocations("gp", mechanism="gp", epsilon=eps, units="metres", region=US)]
    e, store = engine(qs, Cost.cgp(1.0))
    locs = [(40.7, -74.0), (34.0, -118.2), (41.9, -87.6), (29.7, -95.3)]
    payloads = [ev(f"u{i}", w * 10 + 1 + i, locs[i]) for w in range(3) for i in range(4)]
    recs = run(e, payloads)
    # c over the bounding box of the smallest cap around the region (computed independently: geo_reference.py,
    # to ~1e-9 relative — hence ±1 fixed-point unit per term)
    per_window = (fixed_up(rho_m / folded_c("metres", US, 37.0) ** 2)
                  + fixed_up(rho_deg / folded_c("degrees", US) ** 2)
                  + fixed_up(eps**2 / 2 / folded_c("metres", US) ** 2))  # ε-GP ⇒ ε²/2-CGP (Liang–Yi (CGP) Lemma 3.6)
    for i in range(4):
        u = store.get_user(f"u{i}")
        assert abs(int(u.spent[CGP]) - 3 * per_window) <= 3 * 3
        assert not u.spent[[j for j in range(len(COMPONENTS)) if j != CGP]].any()
    for r in recs:  # the output contract (the kind's schema once it exists, else the envelope)
        release_validator(r.kind).validate(orjson.loads(r.to_bytes()))
    by_q = {r.query: r for r in recs if r.t == 1}
    assert by_q["cloud"].realized["cgp"]["rho"] == pytest.approx(rho_m / folded_c("metres", US, 37.0) ** 2, rel=1e-8)
    assert by_q["cloud"].realized["users_charged"] == 4


def test_events_without_loc_charge_nothing_and_locations_outside_the_region_count():
    """A location outside the region is folded in, not dropped (dropping would publish that it is outside)."""
    q = GeoLocations("cloud", rho=1e-8, region=NYC)
    e, store = engine([q], Cost.cgp(1.0))
    payloads = [ev("in", 1, (40.7, -74.0)), ev("noloc", 2, None, ["x"]), ev("far", 3, (34.0, -118.2)),
                ev("mixed", 4, (34.0, -118.2)), ev("mixed", 5, (40.75, -73.9))]
    recs = run(e, payloads)
    assert recs[0].values["users"] == 3 and len(recs[0].values["points"]) == 3
    assert not store.get_user("noloc").spent.any()
    want = fixed_up(1e-8 / folded_c("metres", NYC) ** 2)
    for u in ("in", "mixed", "far"):
        assert abs(int(store.get_user(u).spent[CGP]) - want) <= 1
    # a window with nobody located: empty release, nobody charged
    e2, s2 = engine([GeoLocations("cloud", rho=1e-8, region=NYC)], Cost.cgp(1.0))
    r2 = run(e2, [ev("a", 1, None, ["x"])])
    assert r2[0].values == {"points": [], "users": 0, "noise": {"sigma": None}, "distance_unit": "m"}
    assert r2[0].realized["users_charged"] == 0 and r2[0].meta == {"users": 0}


@pytest.mark.parametrize("rule,expect", [("last", (40.70, -73.95)), ("first", (40.60, -74.10)),
                                         ("mean", None)])
def test_location_rules(rule, expect):
    q = GeoLocations("cloud", rho=1e6, region=NYC, location=rule, neighbourhood="user")  # σ = 0.7 mm
    e, _ = engine([q], Cost.cgp(1e9))
    # arrival order differs from event time order; the out-of-region event (30N 90W) counts where the fold puts it,
    # clamped into the region (for "mean"; "last"/"first" pick other events)
    payloads = [ev("u", 5, (40.70, -73.95)), ev("u", 1, (40.60, -74.10)), ev("u", 3, (40.65, -73.95)),
                ev("u", 4, (30.0, -90.0))]
    recs = run(e, payloads)
    (pt,) = recs[0].values["points"]
    if expect is None:
        lat, lon = folded_point(NYC, 30.0, -90.0)
        lat, lon = min(max(lat, NYC[0]), NYC[1]), min(max(lon, NYC[2]), NYC[3])  # the planar clamp, in lat/lon
        assert NYC[0] < lat < NYC[1] and lon == NYC[2]  # folded to the west of the region, then clamped
        expect = ((40.70 + 40.60 + 40.65 + lat) / 4, (-73.95 - 74.10 - 73.95 + lon) / 4)
    assert pt == pytest.approx(list(expect), abs=1e-6)


# ------------------------------------------------------------------------------------------------ halting
def _halt_case(kind):
    if kind == "geo_locations":
        return lambda: GeoLocations("q", rho=1e-8, region=US, neighbourhood="user")  # noqa: E731
    if kind == "geo_knn":
        return lambda: GeoKNN("q", k=3, rho=1e-8, points=[[40.7, -74.0], [34.0, -118.2]], region=US)  # noqa: E731
    return lambda: GeoConvexHull("q", rho=1e-8, region=US)  # noqa: E731


@pytest.mark.parametrize("kind", ["geo_locations", "geo_knn", "geo_convex_hull"])
def test_user_at_budget_is_halted_and_later_events_change_no_output(kind):
    make = _halt_case(kind)
    one = make().cost.to_fixed()
    g = synthetic_data_generator(1)  # test data
    base = [ev(f"v{i}", 10 * w + 1 + i * 0.01, (float(g.uniform(30, 45)), float(g.uniform(-120, -75))))
            for w in range(4) for i in range(30)]
    heavy = [ev("h", 10 * w + 5, (40.0 + w, -100.0 - w)) for w in range(4)]

    def go(events):
        e, store = engine([make()], Cost.cgp(1.0), seed=3)
        store.grant("h", one)  # exactly one window fits
        return run(e, events), store

    r1, s1 = go(base + heavy)
    assert s1.get_user("h").halted and np.array_equal(s1.get_user("h").spent, one)
    r2, _ = go(base + heavy[:1])  # the halted user's later events removed
    assert [r.to_bytes() for r in r1] == [r.to_bytes() for r in r2]
    assert r1[0].values["users"] == 31 and r1[1].values["users"] == 30


# ------------------------------------------------------------------------------------------------ noise
@pytest.mark.statistical
@pytest.mark.parametrize("neighbourhood", ["dist_inf", "user"])
def test_geo_locations_gaussian_noise_ks(neighbourhood):
    n, rho, ref = 2000, 1e-6, 40.7
    q = GeoLocations("cloud", rho=rho, region=NYC, ref_lat=ref, neighbourhood=neighbourhood)
    e, _ = engine([q], Cost.cgp(1e9), seed=21)
    x0 = (40.70, -74.00)
    recs = run(e, [ev(f"u{i}", 1 + i * 1e-4, x0) for i in range(n)])
    pts = np.array(recs[0].values["points"])
    assert pts.shape == (n, 2)
    res = (planar(pts, "metres", ref) - planar([x0], "metres", ref)).ravel()  # metres
    sigma = math.sqrt((n if neighbourhood == "dist_inf" else 1) / (2 * rho))  # Liang–Yi (CGP) Thm 4.8 / Thm 3.1
    assert recs[0].values["noise"]["sigma"] == pytest.approx(sigma, rel=1e-12)
    assert stats.kstest(res / sigma, "norm").pvalue > 1e-6
    assert abs(res.mean()) < 5 * sigma / math.sqrt(res.size)
    # variance: Σ(res/σ)² ~ χ²(N) exactly (the true location is known); two-sided at 1e-6 — detects a σ off by 6%
    chi = float(((res / sigma) ** 2).sum())
    assert 1e-6 / 2 < stats.chi2.cdf(chi, res.size) < 1 - 1e-6 / 2
    assert stats.kstest(res / (1.25 * sigma), "norm").pvalue < 1e-3  # the KS test has power


@pytest.mark.statistical
def test_geo_locations_planar_laplace_radius_ks():
    n, eps = 1500, 5e-3  # per metre; dist_inf: ε/n per point, radius ~ Gamma(2, n/ε) (Liang–Yi (CGP) Thm 4.6)
    q = GeoLocations("cloud", mechanism="gp", epsilon=eps, neighbourhood="dist_inf", region=NYC, ref_lat=40.7)
    e, _ = engine([q], Cost.cgp(1e9), seed=22)
    x0 = (40.70, -74.00)
    recs = run(e, [ev(f"u{i}", 1 + i * 1e-4, x0) for i in range(n)])
    d = planar(recs[0].values["points"], "metres", 40.7) - planar([x0], "metres", 40.7)
    r = np.sqrt((d**2).sum(axis=1))
    assert stats.kstest(r, stats.gamma(2, scale=n / eps).cdf).pvalue > 1e-6
    # scale: Σ r_i ~ Gamma(2N, n/ε) exactly; two-sided at 1e-6
    assert 1e-6 / 2 < stats.gamma(2 * r.size, scale=n / eps).cdf(r.sum()) < 1 - 1e-6 / 2
    assert stats.kstest(r, stats.gamma(2, scale=1.25 * n / eps).cdf).pvalue < 1e-3
    ang = np.arctan2(d[:, 1], d[:, 0])
    assert stats.kstest(ang, stats.uniform(-math.pi, 2 * math.pi).cdf).pvalue > 1e-6


def test_point_cloud_is_shuffled_and_unlabelled():
    q = GeoLocations("cloud", rho=1e3, region=US, units="degrees", neighbourhood="user")  # σ = 0.02 degrees
    e, _ = engine([q], Cost.cgp(1e9), seed=4)
    locs = [(25.0 + i, -120.0 + 2 * i) for i in range(20)]
    recs = run(e, [ev(f"u{i}", 1 + 0.01 * i, locs[i]) for i in range(20)])
    pts = np.array(recs[0].values["points"])
    # the multiset of points matches, the order does not (user order = arrival order here)
    nearest = np.argmin(((pts[:, None, :] - np.array(locs)[None]) ** 2).sum(-1), axis=1)
    assert sorted(nearest.tolist()) == list(range(20)) and nearest.tolist() != list(range(20))
    assert "u0" not in recs[0].to_bytes().decode()


# ------------------------------------------------------------------------------------------------ k-PNN
def test_geo_knn_finds_the_near_users_and_states_its_noise():
    k, rho, m = 3, 1e2, 2  # per m²: tiny noise
    pts = [[40.70, -74.00], [34.05, -118.25]]
    q = GeoKNN("knn", k=k, rho=rho, points=pts, region=US, neighbourhood="user", select_share=0.4)
    e, store = engine([q], Cost.cgp(1e9), seed=5)
    near_nyc = [(40.71, -74.01), (40.69, -73.99), (40.72, -74.02)]
    near_la = [(34.06, -118.24), (34.04, -118.26), (34.05, -118.20)]
    far = [(45.0, -95.0), (30.0, -90.0), (47.0, -110.0), (32.0, -100.0)]
    locs = near_nyc + near_la + far
    recs = run(e, [ev(f"u{i}", 1 + 0.01 * i, x) for i, x in enumerate(locs)])
    v = recs[0].values
    assert v["k"] == k and v["users"] == len(locs)
    sigma = (math.sqrt(2) / k) / math.sqrt(2 * (1 - 0.4) * rho / m)  # K = √2/k, ρ_rel = 0.6ρ/m (Liang–Yi (CGP) Thm 3.1)
    assert v["noise"]["sigma"] == pytest.approx(sigma, rel=1e-12)
    for nb, group, p in zip(v["neighbours"], (near_nyc, near_la), pts):
        assert nb["mean_location"] == pytest.approx(np.mean(group, axis=0).tolist(), abs=1e-3)
        d = np.sqrt(((planar(group, "metres", 37.0) - planar([p], "metres", 37.0)) ** 2).sum(axis=1)).mean()
        assert nb["mean_distance"] == pytest.approx(d, abs=1.0)
    c = folded_c("metres", US)
    assert int(store.get_user("u0").spent[CGP]) == pytest.approx(fixed_up(rho / c**2), rel=1e-8)
    # fewer users than k: k = n
    e2, _ = engine([GeoKNN("knn", k=5, rho=1e2, points=pts, region=US)], Cost.cgp(1e9))
    r2 = run(e2, [ev("a", 1, near_nyc[0]), ev("b", 2, near_la[0])])
    assert r2[0].values["k"] == 2 and len(r2[0].values["neighbours"]) == 2


# ------------------------------------------------------------------------------------------------ hull
def test_geo_convex_hull_tracks_the_true_hull():
    g = synthetic_data_generator(8)  # test data
    corners = [(30.0, -110.0), (30.0, -80.0), (45.0, -80.0), (45.0, -110.0)]
    inner = [(float(g.uniform(32, 43)), float(g.uniform(-105, -85))) for _ in range(200)]
    locs = corners + inner
    q = GeoConvexHull("hull", rho=1e4, region=US, units="degrees")  # per degree²: tiny noise
    e, _ = engine([q], Cost.cgp(1e9), seed=6)
    recs = run(e, [ev(f"u{i}", 1 + 0.001 * i, x) for i, x in enumerate(locs)])
    v = recs[0].values
    assert v["users"] == len(locs) and 16 <= v["k"] <= 128
    true = convex_hull_vertices(planar(locs, "degrees", 0))
    got = planar(v["hull"], "degrees", 0)
    assert hull_jaccard(true, convex_hull_vertices(got)) > 0.95


# ------------------------------------------------------------------------------------------------ config
def _cfg(query: dict) -> dict:
    return {"service": {"window_seconds": 60.0, "origin": 0.0}, "budget": {"cgp_rho": 1e-6}, "query": [query]}


@pytest.mark.parametrize("query,field", [
    ({"id": "a", "kind": "geo_locations", "rho": 1.0}, "query[0].region"),
    ({"id": "a", "kind": "geo_locations", "rho": 1.0, "region": [50, 24, -125, -66]}, "query[0].region"),
    ({"id": "a", "kind": "geo_locations", "rho": 1.0, "region": [24, 50, -125]}, "query[0].region"),
    ({"id": "a", "kind": "geo_locations", "region": US}, "query[0].rho"),
    ({"id": "a", "kind": "geo_locations", "rho": 1.0, "epsilon": 1.0, "region": US}, "query[0].epsilon"),
    ({"id": "a", "kind": "geo_locations", "mechanism": "gp", "rho": 1.0, "region": US}, "query[0].rho"),
    ({"id": "a", "kind": "geo_locations", "rho": 1.0, "region": US, "units": "degrees", "ref_lat": 30},
     "query[0].ref_lat"),
    ({"id": "a", "kind": "geo_locations", "rho": 1.0, "region": US, "location": "median"}, "query[0].location"),
    ({"id": "a", "kind": "geo_locations", "rho": 1.0, "region": US, "colour": 1}, "query[0].colour"),
    ({"id": "a", "kind": "geo_knn", "k": 3, "rho": 1.0, "region": US, "points": [[1, 2, 3]]}, "query[0].points"),
    ({"id": "a", "kind": "geo_knn", "k": 3, "rho": 1.0, "region": US, "points": []}, "query[0].points"),
    ({"id": "a", "kind": "geo_knn", "k": 0, "rho": 1.0, "region": US, "points": [[1, 2]]}, "query[0].k"),
    ({"id": "a", "kind": "geo_knn", "k": 3, "rho": 1.0, "region": US, "points": [[1, 2]], "select_share": 1.0},
     "query[0].select_share"),
    ({"id": "a", "kind": "geo_convex_hull", "rho": 1.0, "region": US, "k_min": 40, "k_max": 20}, "query[0].k_max"),
    ({"id": "a", "kind": "geo_convex_hull", "rho": -1.0, "region": US}, "query[0].rho"),
])
def test_config_errors_name_the_field(query, field):
    with pytest.raises(ConfigError) as ei:
        parse_config(_cfg(query))
    assert str(ei.value).startswith(field), str(ei.value)


def test_cli_lists_kinds_and_checks_the_example(capsys):
    assert main(["queries", "kinds", "--json"]) == 0
    kinds = {k["kind"]: k for k in json.loads(capsys.readouterr().out)}
    for kd in ("geo_locations", "geo_knn", "geo_convex_hull"):
        assert kinds[kd]["notion"] == "cgp" and "per m^2" in kinds[kd]["cost"] and kinds[kd]["needs"] == ["loc"]
    assert main(["config", "check", os.path.join(EXAMPLES, "geo.toml")]) == 0
    out = capsys.readouterr().out
    assert "OK" in out and "geo_knn" in out and "geo_convex_hull" in out
