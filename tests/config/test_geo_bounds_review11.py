"""Configuration review 11 of the geo kinds: bounds and public points are checked at start (contract §6).

* F3 — ``geo_convex_hull`` ``k`` / ``k_min`` / ``k_max`` had no upper bound: k = 10**9 passed ``config check`` and the
  first window close (after the users were charged) allocated 7.45 GiB. Now each is ≤ 4096.
* F10 — ``max_cycles`` (``geo_knn``, ``geo_convex_hull``) had no upper bound: a window close runs up to
  max_cycles·n·k SVT steps, so 2**62 never finished. Now ≤ 10**6.
* F5 — ``geo_knn`` ``points`` were only checked to be pairs of finite numbers: a latitude of 95° or a swapped
  [lon, lat] was accepted and published a release for a point nobody meant. Now |lat| ≤ 90, |lon| ≤ 180 and the
  point inside the query's ``region`` are required (as ``knn_point`` does), and the message names the point.

Every test pairs the refused value with the accepted boundary, through ``parse_config`` (what ``config check``
runs), the query classes, and the ``python -m streamdp config check`` command (exit 1, the field named, no
traceback)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from streamdp.config.kinds import ConfigError, kinds
from streamdp.config.loader import parse_config
from streamdp.engine.queries import geo
from streamdp.engine.queries.geo import GeoConvexHull, GeoKNN

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
US = [24.0, 50.0, -125.0, -66.0]
ORD = [41.9786, -87.9048]

MAX_K = 4096
MAX_CYCLES = 10**6


def _hull(**over) -> dict:
    return {"id": "q", "kind": "geo_convex_hull", "rho": 40.0, "units": "degrees", "region": US, **over}


def _knn(**over) -> dict:
    return {"id": "q", "kind": "geo_knn", "k": 5, "rho": 1e-8, "points": [ORD], "region": US, **over}


def _cfg(query: dict) -> dict:
    return {"service": {"window_seconds": 86400.0, "origin": 1356998400.0}, "budget": {"cgp_rho": 1e-5},
            "query": [query]}


def _refused(query: dict) -> str:
    with pytest.raises(ConfigError) as ei:
        parse_config(_cfg(query), log_warnings=False)
    return str(ei.value)


def _accepted(query: dict) -> None:
    cfg = parse_config(_cfg(query), log_warnings=False)
    assert len(cfg.build_queries()) == 1


# ------------------------------------------------------------------------------------------- F3: hull k bounds
@pytest.mark.parametrize("field,bad,good", [
    ("k", {"k": 10**9}, {"k": MAX_K}),
    ("k", {"k": MAX_K + 1}, {"k": MAX_K}),
    ("k_max", {"k_max": MAX_K + 1}, {"k_max": MAX_K}),
    ("k_min", {"k_min": 10**8, "k_max": 10**9}, {"k_min": MAX_K, "k_max": MAX_K}),  # F3 repro: both too big
    ("k_max", {"k_min": 16, "k_max": 10**9}, {"k_min": 16, "k_max": MAX_K}),
    ("k_min", {"k_min": MAX_K + 1, "k_max": MAX_K + 1}, {"k_min": MAX_K, "k_max": MAX_K}),
])
def test_hull_k_has_an_upper_bound_and_the_bound_is_accepted(field, bad, good):
    msg = _refused(_hull(**bad))
    assert msg.startswith(f"query[0].{field}: must be ≤ {MAX_K}"), msg
    _accepted(_hull(**good))


def test_hull_query_class_refuses_k_above_the_bound():
    with pytest.raises(ValueError, match=rf"^k: must be an integer in \[0, {MAX_K}\]"):
        GeoConvexHull("q", rho=1.0, region=US, k=MAX_K + 1)
    with pytest.raises(ValueError, match=rf"^k_max: must be an integer in \[1, {MAX_K}\]"):
        GeoConvexHull("q", rho=1.0, region=US, k_max=10**9)
    with pytest.raises(ValueError, match=rf"^k_min: must be an integer in \[1, {MAX_K}\]"):
        GeoConvexHull("q", rho=1.0, region=US, k_min=MAX_K + 1, k_max=MAX_K + 1)
    assert GeoConvexHull("q", rho=1.0, region=US, k=MAX_K, k_min=MAX_K, k_max=MAX_K).k == MAX_K


def test_hull_at_the_k_bound_releases_quickly():
    """k = 4096 is usable: one release over 40 users allocates O(k) and takes well under a few seconds."""
    import time

    import numpy as np

    q = GeoConvexHull("q", rho=40.0, region=US, units="degrees", k=MAX_K)
    rng = np.random.default_rng(1)
    xy = np.column_stack([rng.uniform(-110, -80, 40), rng.uniform(30, 45, 40)])
    t = time.perf_counter()
    v = q._release(rng, xy)
    assert v["k"] == MAX_K and len(v["hull"]) >= 3
    assert time.perf_counter() - t < 30.0
    with pytest.raises(ValueError):
        GeoConvexHull("q", rho=40.0, region=US, units="degrees", k=MAX_K + 1)


# ------------------------------------------------------------------------------------------- F10: max_cycles
@pytest.mark.parametrize("make", [_hull, _knn])
@pytest.mark.parametrize("bad", [MAX_CYCLES + 1, 2**62])
def test_max_cycles_has_an_upper_bound_and_the_bound_is_accepted(make, bad):
    msg = _refused(make(max_cycles=bad))
    assert msg.startswith(f"query[0].max_cycles: must be ≤ {MAX_CYCLES}"), msg
    _accepted(make(max_cycles=MAX_CYCLES))


def test_query_classes_refuse_max_cycles_above_the_bound():
    for cls, kw in ((GeoKNN, {"k": 3, "rho": 1.0, "points": [ORD]}), (GeoConvexHull, {"rho": 1.0})):
        with pytest.raises(ValueError, match=rf"^max_cycles: must be an integer in \[1, {MAX_CYCLES}\]"):
            cls("q", region=US, max_cycles=2**62, **kw)
        assert cls("q", region=US, max_cycles=MAX_CYCLES, **kw).max_cycles == MAX_CYCLES


def test_registry_bounds_are_the_query_classes_bounds():
    reg = kinds()
    hull = {p.name: p for p in reg["geo_convex_hull"].params}
    knn = {p.name: p for p in reg["geo_knn"].params}
    assert geo.MAX_HULL_K == MAX_K and geo.MAX_PNN_CYCLES == MAX_CYCLES
    assert hull["k"].max == hull["k_min"].max == hull["k_max"].max == geo.MAX_HULL_K
    assert hull["max_cycles"].max == knn["max_cycles"].max == geo.MAX_PNN_CYCLES


# ------------------------------------------------------------------------------------------- F5: geo_knn points
@pytest.mark.parametrize("points,field,words", [
    ([[95.0, 0.0]], "points[0]", "|lat| ≤ 90"),
    ([[-95.0, -100.0]], "points[0]", "|lat| ≤ 90"),
    ([[40.0, 181.0]], "points[0]", "|lon| ≤ 180"),
    ([ORD, [-87.9048, 41.9786]], "points[1]", "outside the region"),  # ORD with lat and lon swapped
    ([ORD, ORD, [51.5, -0.12]], "points[2]", "outside the region"),  # London: a real place, not in the region
    ([[24.0 - 1e-9, -100.0]], "points[0]", "outside the region"),
])
def test_knn_points_outside_the_world_or_the_region_are_refused(points, field, words):
    msg = _refused(_knn(points=points))
    assert msg.startswith(f"query[0].{field}: "), msg
    assert words in msg, msg
    # the region's corners are accepted (the region is closed), and so is the intended point
    _accepted(_knn(points=[[24.0, -125.0], [50.0, -66.0], [24.0, -66.0], [50.0, -125.0], ORD]))


def test_a_swapped_knn_point_says_so():
    msg = _refused(_knn(points=[[-87.9048, 41.9786]]))
    assert "lat and lon swapped?" in msg and "[-87.9048, 41.9786]" in msg, msg
    assert str(US) in msg, msg  # names the region it must lie in


def test_knn_query_class_refuses_points_outside_the_region():
    with pytest.raises(ValueError, match=r"^points\[0\]: .*outside the region"):
        GeoKNN("q", k=3, rho=1.0, points=[[-87.9048, 41.9786]], region=US)
    with pytest.raises(ValueError, match=r"^points\[1\]: .*\|lat\| ≤ 90"):
        GeoKNN("q", k=3, rho=1.0, points=[ORD, [95.0, 0.0]], region=US)
    assert GeoKNN("q", k=3, rho=1.0, points=[[50.0, -66.0]], region=US).points == [[50.0, -66.0]]


# ------------------------------------------------------------------------------------------- the command
def _toml(query: dict) -> str:
    def val(v):
        if isinstance(v, str):
            return f'"{v}"'
        if isinstance(v, list):
            return "[" + ", ".join(val(x) for x in v) + "]"
        return repr(v)

    lines = ["[service]", "window_seconds = 86400.0", "origin = 1356998400.0", "[budget]", "cgp_rho = 1e-5",
             "[[query]]"] + [f"{k} = {val(v)}" for k, v in query.items()]
    return "\n".join(lines) + "\n"


def _check(tmp_path, query: dict) -> subprocess.CompletedProcess:
    p = tmp_path / "c.toml"
    p.write_text(_toml(query))
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "streamdp", "config", "check", str(p)], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=120)


@pytest.mark.parametrize("bad,good,field", [
    (_hull(k=10**9), _hull(k=MAX_K), "query[0].k: must be ≤ 4096"),
    (_hull(k_min=10**8, k_max=10**9), _hull(k_min=MAX_K, k_max=MAX_K), "query[0].k_m"),
    (_knn(max_cycles=2**62), _knn(max_cycles=MAX_CYCLES), "query[0].max_cycles: must be ≤ 1000000"),
    (_hull(max_cycles=2**62), _hull(max_cycles=MAX_CYCLES), "query[0].max_cycles: must be ≤ 1000000"),
    (_knn(points=[[95.0, 0.0]]), _knn(points=[[50.0, -66.0]]), "query[0].points[0]: "),
    (_knn(points=[ORD, [-87.9048, 41.9786]]), _knn(points=[ORD, [24.0, -125.0]]), "query[0].points[1]: "),
])
def test_config_check_command_refuses_with_the_field_named(tmp_path, bad, good, field):
    r = _check(tmp_path, bad)
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert field in r.stderr, r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    r = _check(tmp_path, good)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "OK" in r.stdout
