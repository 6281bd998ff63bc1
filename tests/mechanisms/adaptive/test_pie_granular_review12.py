"""The PIE rounds' and the baselines' Gaussian mechanism is granular (no floating-point leak; review 12).

``gaussian_mechanism`` releases row i as g_i·(rint(v_i/g_i) + Z_i), Z_i ~ N_Z(0, (σ_i/g_i)²), σ_i = 1/√(2ρ_i),
g_i = 2^{⌊log2 σ_i⌋ − 30} (guarantee: ρ_i-CGP w.r.t. d + √m·g_i, stated at ``gaussian_mechanism_cost``). The grid
is computed here from that formula with math.frexp, never read from the code under test. Checked:

* every output of row i is an integer multiple of g_i (fails on the float mechanism: a float Gaussian sum is
  almost never on a grid 2³⁰ times finer than σ);
* (out − v_i)/σ_i is N(0, 1) (KS, mean, variance) with mixed ρ_i and off-grid v_i (the rounding, ≤ 2⁻³¹σ_i, is
  invisible);
* the PIE rounds (pie_ni / pie_k, hence kde_point / knn_point pm0 / pm1 and range_counts, threshold_count) draw
  through gaussian_mechanism, and kde_point's estimate and knn_point's distances are functions of its on-grid
  outputs: a replay of the recorded outputs under another generator publishes the same values.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from streamdp.engine.queries import adaptive_point
from streamdp.engine.queries.adaptive_point import KDEPoint, KNNPoint
from streamdp.mechanisms.adaptive import kde as kde_mod
from streamdp.mechanisms.adaptive import knn as knn_mod
from streamdp.mechanisms.adaptive import pie
from streamdp.mechanisms.adaptive.pie import distance_triple, gaussian_mechanism, pie_k, pie_ni, point_triple
from streamdp.noise.generator import unsafe_seeded_generator

P_MIN = 1e-6


def grid_of(rho) -> np.ndarray:
    """g_i = 2^{⌊log2 σ_i⌋ − 30}, σ_i = 1/√(2ρ_i), per element (math.frexp: σ = f·2^e, f ∈ [0.5, 1))."""
    sig = 1.0 / np.sqrt(2.0 * np.asarray(rho, dtype=np.float64))
    return np.array([math.ldexp(1.0, math.frexp(float(s))[1] - 1 - 30) for s in sig.ravel()]).reshape(sig.shape)


def assert_on_row_grids(out, rho) -> None:
    out = np.asarray(out, dtype=np.float64)
    g = grid_of(np.broadcast_to(rho, out.shape[:1]))
    if out.ndim == 2:
        g = g[:, None]
    q = out / g
    assert np.all(q == np.rint(q)), "an output is not an integer multiple of its row's granularity"
    sig = 1.0 / np.sqrt(2.0 * np.broadcast_to(np.asarray(rho, dtype=float), out.shape[:1]))
    assert np.all(g <= sig.reshape(g.shape[0], *([1] * (g.ndim - 1))) * 2.0**-30)


# ------------------------------------------------------------------------------------------ the mechanism
def test_outputs_are_on_each_rows_grid_with_mixed_rho():
    rng = unsafe_seeded_generator(120)
    n = 3000
    rho = np.exp(rng.uniform(np.log(1e-9), np.log(1e6), n))  # σ from 7e-4 to 2e4: many different g_i
    v1 = rng.uniform(-1e4, 1e4, n)
    assert_on_row_grids(gaussian_mechanism(rng, v1, rho), rho)
    v2 = rng.uniform(-1e4, 1e4, (n, 2))
    assert_on_row_grids(gaussian_mechanism(rng, v2, rho), rho)
    assert_on_row_grids(gaussian_mechanism(rng, v2, 0.37), np.full(n, 0.37))  # scalar ρ


@pytest.mark.statistical
def test_noise_is_standard_normal_after_dividing_by_each_sigma():
    rng = unsafe_seeded_generator(121)
    rho = np.array([1e-6, 0.02, 0.5, 3.0, 4e4] * 20000)
    sigma = 1.0 / np.sqrt(2.0 * rho)
    v = rng.uniform(-50.0, 50.0, rho.size)  # off-grid values: the rounding is part of the noise
    z = (gaussian_mechanism(rng, v, rho) - v) / sigma
    assert stats.kstest(z, "norm").pvalue > P_MIN
    se = math.sqrt(1.0 / z.size)
    assert abs(z.mean()) < 5 * se
    assert abs(z.var(ddof=1) - 1.0) < 5 * math.sqrt(2.0 / z.size)
    for r in np.unique(rho):  # each ρ_i on its own
        assert stats.kstest(z[rho == r], "norm").pvalue > P_MIN
    pts = rng.uniform(-5, 5, (30000, 2))
    rho2 = np.where(np.arange(30000) % 2 == 0, 0.5, 0.005)
    out = gaussian_mechanism(rng, pts, rho2)
    z2 = (out - pts) * np.sqrt(2.0 * rho2)[:, None]
    assert stats.kstest(z2.ravel(), "norm").pvalue > P_MIN


def test_float_noise_would_not_be_on_the_grid():
    """The on-grid check has power: a float Gaussian sum (the old mechanism) fails it."""
    rng = np.random.default_rng(3)
    rho = np.full(100, 0.5)
    v = rng.uniform(-5, 5, 100) + rng.normal(0.0, 1.0, 100)
    with pytest.raises(AssertionError):
        assert_on_row_grids(v, rho)


# ------------------------------------------------------------------------------------------- PIE rounds
def test_pie_round_values_are_on_the_grid_of_each_users_round_budget():
    rng = unsafe_seeded_generator(122)
    n, c = 400, 4
    x = rng.uniform(-10, 10, (n, 2))
    r = rng.uniform(0.01, 3.0, n)
    rr = pie.split_rounds(r, c, "doubling")
    res = pie_ni(rng, point_triple(x, pie.distance_to(np.zeros(2))), rr, beta0=0.05, nu_low=-math.inf,
                 nu_high=math.inf, keep_rounds=True)  # nobody eliminated: every round runs
    assert np.all(res.rounds_run == c)
    for j in range(c):
        assert_on_row_grids(res.round_values[:, j, :], rr[:, j])
    res = pie_k(rng, distance_triple(rng.uniform(0, 10, n)), rr, k=5, beta0=0.05, keep_rounds=True)
    for j in range(res.rounds):
        ran = res.rounds_run > j
        assert_on_row_grids(res.round_values[ran, j, :], rr[ran, j])


class Recorder:
    """Spy on gaussian_mechanism: records every output (and checks it is on its rows' grids); in replay mode it
    returns the recorded outputs in order instead of drawing."""

    def __init__(self, real) -> None:
        self.real = real
        self.outputs: list[np.ndarray] = []
        self.replay: list[np.ndarray] | None = None

    def __call__(self, rng, values, rho):
        if self.replay is not None:
            return self.replay.pop(0).copy()
        out = self.real(rng, values, rho)
        assert_on_row_grids(out, np.broadcast_to(np.asarray(rho, dtype=float), np.shape(values)[:1]))
        self.outputs.append(out.copy())
        return out


@pytest.fixture
def recorder(monkeypatch):
    rec = Recorder(pie.gaussian_mechanism)
    for mod in (pie, kde_mod, knn_mod, adaptive_point):
        monkeypatch.setattr(mod, "gaussian_mechanism", rec)
    return rec


def _data(seed: int, n: int = 300):
    rng = np.random.default_rng(seed)
    xy = rng.uniform(-30.0, 30.0, (n, 2))  # metres around p = (0, 0)
    rho = rng.uniform(0.002, 0.02, n)  # per m²: σ ≈ 5–16 m per round
    return xy, rho


def _run_twice(recorder, query, xy, rho):
    first, _, _ = query._run(unsafe_seeded_generator(7), 1, xy, rho)
    assert recorder.outputs, "the release drew no noise through gaussian_mechanism"
    recorder.replay = [o.copy() for o in recorder.outputs]
    n_calls = len(recorder.replay)
    second, _, _ = query._run(unsafe_seeded_generator(8), 1, xy, rho)  # another generator, same on-grid outputs
    assert recorder.replay == [] and n_calls == len(recorder.outputs)
    return first, second


@pytest.mark.parametrize("estimator", ["pm0", "pm1", "bm0", "bm1"])
def test_kde_point_estimate_is_a_function_of_on_grid_outputs(recorder, estimator):
    xy, rho = _data(10)
    q = KDEPoint("k", queries=[{"window": 1, "point": [0.0, 0.0]}], bandwidth=8.0, budget_rho=1.0, units="m",
                 estimator=estimator, rounds=4)
    first, second = _run_twice(recorder, q, xy, rho)
    assert first["estimate"] == second["estimate"] and first == second


@pytest.mark.parametrize("estimator", ["pm0", "pm1", "bm0", "bm1"])
def test_knn_point_distances_are_functions_of_on_grid_outputs(recorder, estimator):
    xy, rho = _data(11)
    q = KNNPoint("n", queries=[{"window": 1, "point": [0.0, 0.0]}], k=5, budget_rho=1.0, units="m",
                 estimator=estimator, rounds=4)
    first, second = _run_twice(recorder, q, xy, rho)
    assert len(first["distances"]) == 5 and first["distances"] == second["distances"] and first == second


def test_knn_point_bm1_publishes_the_k_smallest_on_grid_outputs(recorder):
    xy, rho = _data(12)
    q = KNNPoint("n", queries=[{"window": 1, "point": [0.0, 0.0]}], k=5, budget_rho=1.0, units="m",
                 estimator="bm1")
    values, _, _ = q._run(unsafe_seeded_generator(9), 1, xy, rho)
    (out,) = recorder.outputs
    assert values["distances"] == sorted(out.tolist())[:5]
    assert_on_row_grids(np.array(values["distances"]), rho[np.argsort(out, kind="stable")[:5]])
