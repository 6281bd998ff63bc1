"""The granular ℓ2-Laplace (review 12): g·(rint(v/g) + Z), Z on ℤ^d with Pr[z] ∝ exp(−‖z‖₂/τ), τ = s/g ∈ [2³⁶, 2³⁷)
(streamdp.mechanisms.granular_l2_laplace), used by the planar Laplace GP releases (geo_locations "gp") and by
PrivEMDLinear (emd_linear) instead of x + float noise (Mironov 2012).

Checked: the releases are on the grid; the exact pmf ratio of the released lattice points for neighbouring inputs is
≤ exp((‖v − v'‖ + √m≠·g)/s) and reaches exp(√m≠·g/s) across a rounding boundary (the additive term is real); the
public geo_locations ("gp") and emd_linear releases are on their grids through the engine; the costs are unchanged.
"""

from __future__ import annotations

import math

import numpy as np
import orjson
import pytest

import streamdp.mechanisms.granular_l2_laplace as gl
from streamdp.accounting.cost import Cost, budget_vector
from streamdp.engine.engine import EngineConfig, ReleaseEngine
from streamdp.engine.pipeline import EmbeddedPipeline
from streamdp.engine.queries.emd import EMDLinear
from streamdp.engine.queries.geo import GeoLocations
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.mechanisms.emd.linear import PrivEMDLinear
from streamdp.mechanisms.geo.planar_laplace import IdentityQueryGP, PlanarLaplaceGP, gp_cost
from streamdp.noise.generator import unsafe_seeded_generator
from streamdp.outputs.sinks import ListSink

US = [24.0, 50.0, -125.0, -66.0]


def on_grid(values, g) -> bool:
    q = np.asarray(values, dtype=np.float64) / g
    return bool(np.all(q == np.rint(q)))


# ------------------------------------------------------------------------------------------------ the mechanism
@pytest.mark.parametrize("d,scale", [(1, 3.7), (2, 1000.0), (3, 2.5e-3), (16, 7.0), (32, 1.0)])
def test_release_is_on_the_grid_of_its_scale(d, scale):
    rng = unsafe_seeded_generator(5100 + d)
    g = gl.granularity(scale)
    assert g == 2.0 ** (math.floor(math.log2(scale)) - 36)
    assert 2.0**36 <= scale / g < 2.0**37
    v = rng.uniform(-1e3, 1e3, (5, d)) * scale
    out = gl.granular_l2_laplace(rng, v, scale)
    assert out.shape == v.shape and on_grid(out, g) and not on_grid(v, g)
    # the noise is of the continuous law's size: ‖out − v‖ ≈ Gamma(d, s), far below 100·d·s
    assert np.all(np.linalg.norm(out - v, axis=1) < 100 * d * scale)


def test_dimension_above_32_is_refused():
    rng = unsafe_seeded_generator(5200)
    with pytest.raises(ValueError, match="at most 32"):
        gl.granular_l2_laplace(rng, np.zeros(33), 1.0)
    with pytest.raises(ValueError, match="dim must be ≤ 32"):
        PrivEMDLinear(1.0, 1.0, 33)
    with pytest.raises(ValueError, match="value must be finite"):
        gl.granular_l2_laplace(rng, [0.0, math.nan], 1.0)


def grid_index_of(v, scale, monkeypatch) -> np.ndarray:
    """The implementation's own k = rint(v/g): its release with the noise replaced by 0, divided by g."""
    def no_noise(rng, d, tau, size=None):
        return np.zeros(tuple(np.atleast_1d(np.asarray(size if size is not None else (), dtype=np.int64)))
                        + (d,), dtype=np.int64)

    monkeypatch.setattr(gl.samplers, "lattice_l2_laplace", no_noise)
    try:
        out = gl.granular_l2_laplace(np.random.default_rng(0), v, scale)
    finally:
        monkeypatch.undo()
    return out / gl.granularity(scale)


def log_pmf_ratio(y, k, k2, tau) -> np.ndarray:
    """log Pr[M(v) = g·y] − log Pr[M(v') = g·y] from the exact pmf exp(−‖y − k‖/τ)/N (same N for every integer
    shift k), for lattice points y (rows)."""
    return (np.linalg.norm(y - k2, axis=-1) - np.linalg.norm(y - k, axis=-1)) / tau


@pytest.mark.parametrize("d", [1, 2, 3, 8])
def test_exact_pmf_ratio_is_bounded_by_distance_plus_grid_term(d, monkeypatch):
    rng = np.random.default_rng(5300 + d)
    scale = 12.5
    g, tau = gl.granularity(scale), scale / gl.granularity(scale)
    for trial in range(200):
        v = rng.uniform(-50, 50, d)
        if trial % 2:  # far neighbours, a random number of coordinates changed
            v2 = v.copy()
            changed = rng.random(d) < 0.5
            v2[changed] += rng.normal(0, 3.0, changed.sum())
        else:  # near neighbours straddling rounding boundaries: v on a half-integer point ± a few ulp of g
            base = (np.rint(v / g) + 0.5) * g
            v, v2 = base - g * 1e-3, base + g * 1e-3
            changed = np.ones(d, dtype=bool)
        k, k2 = grid_index_of(v, scale, monkeypatch), grid_index_of(v2, scale, monkeypatch)
        m_ne = int(np.count_nonzero(v != v2))
        bound = (np.linalg.norm(v - v2) + math.sqrt(m_ne) * g) / scale
        # the worst output y = k + t(k − k') attains ‖k − k'‖/τ; random outputs near both means stay below it
        ys = [k + t * (k - k2) for t in (0, 1, 5, 10**6)]
        ys += list(k + np.rint(rng.normal(0, tau, (50, d))))
        ys += list(k2 + np.rint(rng.normal(0, tau, (50, d))))
        lr = log_pmf_ratio(np.array(ys), k, k2, tau)
        assert np.all(lr <= bound * (1 + 1e-9) + 1e-15)
        if np.any(k != k2):
            assert lr[:4].max() == pytest.approx(np.linalg.norm(k - k2) / tau, rel=1e-6)
        if trial % 2 == 0:  # across the boundary: ‖k − k'‖ = √d, so the ratio is e^{√d·g/s} while ‖v − v'‖ ≈ 0
            assert np.linalg.norm(k - k2) == math.sqrt(d)
            assert lr.max() == pytest.approx(math.sqrt(d) * g / scale, rel=1e-6)
            assert np.linalg.norm(v - v2) / scale < 1e-2 * lr.max()


def test_grid_distance_formula():
    assert gl.grid_distance(1000.0, 2, 1.0) == math.sqrt(2) * gl.granularity(1000.0)
    assert gl.grid_distance(1000.0, 3, 4.0) == math.sqrt(3) * gl.granularity(1000.0) / 4.0
    assert gl.grid_distance(1000.0, 2) <= math.sqrt(2) * 2.0**-36 * 1000.0


# ------------------------------------------------------------------------------------------------ planar Laplace
def test_planar_laplace_gp_releases_on_the_grid_and_costs_unchanged():
    rng = unsafe_seeded_generator(5400)
    x = rng.uniform(-1e5, 1e5, (30, 2))
    m = PlanarLaplaceGP(0.01, lipschitz=2.0)  # s = K/ε = 200
    out = m.release(rng, x)
    assert on_grid(out, gl.granularity(200.0)) and not on_grid(x, gl.granularity(200.0))
    assert m.grid_distance() == math.sqrt(2) * gl.granularity(200.0) / 2.0
    assert m.cost() == gp_cost(0.01)
    iq = IdentityQueryGP(0.5)  # s = n/ε = 60 per point
    out = iq.release(rng, x)
    assert on_grid(out, gl.granularity(60.0))
    assert iq.grid_distance(30) == math.sqrt(2) * gl.granularity(60.0)
    assert iq.cost() == gp_cost(0.5)
    assert np.mean(np.linalg.norm(out - x, axis=1)) == pytest.approx(iq.expected_point_error(30), rel=0.35)


def run_engine(queries, payloads, budget, seed):
    store = MemoryBudgetStore(budget_vector(budget))
    e = ReleaseEngine(EngineConfig(window_seconds=10.0, horizon=8, origin=0.0, unsafe_test_seed=seed), queries, store)
    sink = ListSink()
    EmbeddedPipeline(e, [sink]).run([payloads])
    return sink.records


@pytest.mark.parametrize("neighbourhood", ["user", "dist_inf"])
def test_geo_locations_gp_published_points_on_the_grid(neighbourhood):
    rng = unsafe_seeded_generator(5500)
    n = 25
    locs = np.column_stack([rng.uniform(30.0, 45.0, n), rng.uniform(-115.0, -75.0, n)])
    q = GeoLocations("cloud", mechanism="gp", epsilon=50.0, region=US, units="degrees", neighbourhood=neighbourhood)
    payloads = [orjson.dumps({"user": f"u{i}", "ts": 1 + 0.01 * i, "items": [], "loc": [float(a), float(b)]})
                for i, (a, b) in enumerate(locs)]
    recs = run_engine([q], payloads, Cost.cgp(1e9), seed=9)
    v = recs[0].values
    assert v["users"] == n
    eps_pt = v["noise"]["epsilon_per_point"]
    assert eps_pt == pytest.approx(50.0 / (n if neighbourhood == "dist_inf" else 1), rel=1e-12)
    g = gl.granularity(1.0 / eps_pt)
    pts = np.array(v["points"])
    assert on_grid(pts, g) and not on_grid(locs, g)


# ------------------------------------------------------------------------------------------------ PrivEMDLinear
@pytest.mark.parametrize("dim", [1, 2, 5, 32])
def test_priv_emd_linear_releases_on_the_grid(dim):
    rng = unsafe_seeded_generator(5600 + dim)
    loc = PrivEMDLinear(2.0, 3.0, dim)  # s = L/α = 1.5
    means = rng.uniform(-10, 10, (4, dim))
    out = loc.release_means(rng, means)
    g = gl.granularity(1.5)
    assert out.shape == (4, dim) and on_grid(out, g)
    assert on_grid(loc.release(rng, rng.uniform(-1, 1, (7, dim))), g)
    assert loc.grid_distance() == math.sqrt(dim) * g / 3.0 <= math.sqrt(dim) * 2.0**-36 / 2.0
    assert loc.cost() == Cost.emd(2.0)
    cen = PrivEMDLinear(2.0, 3.0, dim, model="central", n_users=10)  # s = L/(nα) = 0.15
    out = cen.release(rng, rng.uniform(-1, 1, (10, 3, dim)))
    assert out.shape == (dim,) and on_grid(out, gl.granularity(0.15))
    assert cen.grid_distance() == pytest.approx(10 * math.sqrt(dim) * gl.granularity(0.15) / 3.0, rel=1e-15)
    assert cen.grid_distance() <= math.sqrt(dim) * 2.0**-36 / 2.0
    assert cen.cost() == Cost.emd(2.0)


def test_emd_linear_published_mean_on_the_grid():
    feats = {"a": [0.1, 0.2], "b": [1.3, -0.7], "c": [0.5, 0.5]}
    q = EMDLinear("lin", alpha=0.5, features=feats, lipschitz=3.0, dimensions=["x", "y"])
    rng = np.random.default_rng(5700)
    payloads = [orjson.dumps({"user": f"u{i}", "ts": 1 + 0.01 * i, "items": [str(rng.choice(list(feats)))]})
                for i in range(20)]
    recs = run_engine([q], payloads, Cost.emd(1e9), seed=11)
    v = recs[0].values
    n = v["users"]
    assert n == 20 and v["noise_scale"] == pytest.approx(3.0 / (n * 0.5), rel=1e-12)
    g = gl.granularity(v["noise_scale"])
    assert on_grid([v["mean"]["x"], v["mean"]["y"]], g)


def test_emd_linear_with_more_feature_coordinates_than_the_sampler_takes_is_refused_at_start():
    """PrivEMDLinear refuses d > 32 at release; the config used to accept it, so a deployment passed config check
    and failed at its first release, after the admit (closing check of the day)."""
    from streamdp.config.kinds import ConfigError
    from streamdp.config.loader import parse_config

    def cfg(d):
        return parse_config({"service": {"window_seconds": 60.0, "origin": 0.0, "horizon": 8},
                             "query": [{"id": "e", "kind": "emd_linear", "alpha": 1.0, "lipschitz": 10.0,
                                        "features": {"a": [0.0] * d, "b": [1.0] + [0.0] * (d - 1)}}]},
                            log_warnings=False).build_queries()

    cfg(32)
    with pytest.raises(ConfigError, match=r"features: feature vectors of at most 32 coordinates"):
        cfg(33)
