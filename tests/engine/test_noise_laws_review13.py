"""Statistical checks of noise laws through the query kinds that the other tests did not cover (review of 2026-11-23):

1. grid_means levy / fixed_quantile / optimized_quantile (BestFit) and array_averaging (WrapAround) through the
   engine: (release − f[a,b]) / noise_scale ~ Laplace(0, 1), and noise_scale = 2(b−a)/(K̄ε) resp. 2U/(Kε) (Rameshwar–Tandon (IoT means)
   §III-C/D/E), with f recomputed from the published interval.
2. geo_knn (user neighbourhood, k ≥ n so the selection is everybody): the three released aggregates minus the true
   ones ~ N(0, σ²), σ = (√2/k)/√(2ρ_rel/m) (Liang–Yi (CGP) Thm 3.1).
3. geo_locations mechanism 'gp', neighbourhood 'user': radius of the planar noise ~ Gamma(2, 1/ε), angle uniform
   (Liang–Yi (CGP) Lemma 2.6) — the existing engine test covers only dist_inf.
"""
import math

import numpy as np
import orjson
import pytest
from scipy import stats

from streamdp.accounting.cost import Cost
from streamdp.engine.queries.geo import GeoKNN, GeoLocations
from streamdp.engine.queries.grid_means_bounded import BoundedGridMeans
from streamdp.noise.generator import unsafe_seeded_generator
from engine_helpers import engine, run

US = [24.0, 50.0, -125.0, -66.0]
P_MIN = 1e-6


def ev(user, ts, value, loc):
    return orjson.dumps({"user": user, "ts": ts, "items": [], "value": value, "loc": list(loc)})


@pytest.mark.parametrize("estimator,grouping", [("levy", "bestfit"), ("fixed_quantile", "bestfit"),
                                                ("optimized_quantile", "bestfit"),
                                                ("array_averaging", "wraparound")])
def test_grid_means_engine_noise_given_interval(estimator, grouping):
    eps, U, n_cells, n_users = 1.0, 100.0, 1500, 25
    q = BoundedGridMeans("g", epsilon=eps, upper=U, estimator=estimator, grouping=grouping, m_ub=1, cells="grid",
                         cell_size=1.0, bounded_budget_rho=1e6)
    e, _ = engine([q], Cost.zcdp(1e12, 1.0), seed=77)
    g = np.random.default_rng(5)
    vals = g.uniform(30, 60, (n_cells, n_users))
    payloads = [ev(f"u{j}", 1.0 + 1e-4 * (c * n_users + j), float(vals[c, j]), (c + 0.5, 0.5))
                for c in range(n_cells) for j in range(n_users)]
    recs = run(e, payloads)
    z = []
    for key, cell in recs[0].values["cells"].items():
        c = int(key.split(",")[0])
        v = vals[c]
        assert cell["arrays"] == n_users and cell["m_ub"] == 1
        if estimator == "array_averaging":
            f, want = v.mean(), 2 * U / n_users / eps  # WrapAround: 2U/K
        else:
            a, b = cell["interval"]
            f, want = np.clip(v, a, b).mean(), 2 * (b - a) / n_users / eps  # (b−a)/K̄ at ε/2
            if b == a:
                assert cell["noise_scale"] == 0 and cell["mean"] == pytest.approx(a)
                continue
        assert cell["noise_scale"] == pytest.approx(want, rel=1e-8)
        z.append((cell["mean"] - f) / cell["noise_scale"])
    z = np.array(z)
    assert z.size > 1000
    assert stats.kstest(z, stats.laplace.cdf).pvalue > P_MIN
    assert abs(z.mean()) < 5 * math.sqrt(2 / z.size)
    assert abs(z.var() / 2 - 1) < 5 * math.sqrt(5 / z.size)  # Var Lap(1) = 2 (a 25 % scale error fails this)


def test_geo_knn_aggregate_noise_is_gaussian_sigma():
    k, rho, m, share = 10, 1e-4, 2, 0.5
    pts = [[40.70, -74.00], [34.05, -118.25]]
    q = GeoKNN("knn", k=k, rho=rho, points=pts, region=US, neighbourhood="user", select_share=share)
    g = np.random.default_rng(9)
    latlon = np.column_stack([g.uniform(30, 45, 6), g.uniform(-120, -75, 6)])  # n = 6 < k: all selected
    xy = q.frame.locate(latlon)
    sigma = (math.sqrt(2) / 6) / math.sqrt(2 * (1 - share) * rho / m)
    rng = unsafe_seeded_generator(12)
    zs = []
    for _ in range(1500):
        v = q._release(rng, xy)
        assert v["noise"]["sigma"] == pytest.approx(sigma, rel=1e-12)
        for nb, p in zip(v["neighbours"], q._p):
            loc = q.frame.to_planar([nb["mean_location"]])[0]
            zs.extend((loc - xy.mean(axis=0)) / sigma)
    z = np.array(zs)
    assert stats.kstest(z, "norm").pvalue > P_MIN
    q_ = float((z ** 2).sum())
    assert min(stats.chi2.cdf(q_, z.size), stats.chi2.sf(q_, z.size)) > P_MIN


def test_geo_locations_gp_user_radius_gamma2():
    eps = 1e-3  # per metre
    q = GeoLocations("loc", epsilon=eps, mechanism="gp", neighbourhood="user", region=US)
    g = np.random.default_rng(3)
    latlon = np.column_stack([g.uniform(30, 45, 4000), g.uniform(-120, -75, 4000)])
    xy = q.frame.locate(latlon)
    rng = unsafe_seeded_generator(21)
    # the release is permuted: compare as multisets by undoing the permutation with the same generator state
    from streamdp.mechanisms.geo.planar_laplace import PlanarLaplaceGP
    noisy = PlanarLaplaceGP(eps).release(rng, xy)
    d = noisy - xy
    r = np.hypot(d[:, 0], d[:, 1])
    assert stats.kstest(r, stats.gamma(2, scale=1 / eps).cdf).pvalue > P_MIN
    assert stats.kstest(r, stats.gamma(2, scale=1.1 / eps).cdf).pvalue < 1e-3
    ang = np.arctan2(d[:, 1], d[:, 0])
    assert stats.kstest(ang, stats.uniform(-math.pi, 2 * math.pi).cdf).pvalue > P_MIN
    # and the query kind uses exactly this mechanism at ε per point (user neighbourhood)
    v = q._release(unsafe_seeded_generator(21), xy[:10])
    assert v["noise"] == {"epsilon_per_point": eps}
