"""The budget the library baselines hand to their noise (test audit of 2026-11-23: knn_baseline, basic_knn and
basic_convex_hull were only run at budgets of 1e8–1e9, where the noise vanishes, or compared with other estimators
built on the same noise code). The identity queries and gaussian_mechanism have statistical tests of their own;
here, by spies, that each baseline passes its ρ (ε) through unchanged and to the right quantity (Liang–Yi (adaptive budgeting) §6.4.1 BM0/BM1;
Liang–Yi (CGP) §5 "Basic")."""

import importlib

import numpy as np
import pytest

from streamdp.mechanisms.adaptive.knn import knn_baseline
from streamdp.mechanisms.geo.convex_hull import basic_convex_hull
from streamdp.mechanisms.geo.pnn import basic_knn
from streamdp.noise.generator import unsafe_seeded_generator

# the modules themselves (the package re-exports functions named like some of them, e.g. `pnn`)
knn_mod = importlib.import_module("streamdp.mechanisms.adaptive.knn")
ch = importlib.import_module("streamdp.mechanisms.geo.convex_hull")
pnn_mod = importlib.import_module("streamdp.mechanisms.geo.pnn")


def _spy_class(monkeypatch, module, name, seen):
    real = getattr(module, name)

    def make(budget):
        seen.append((name, budget))
        return real(budget)

    monkeypatch.setattr(module, name, make)


@pytest.mark.parametrize("fn,module", [(lambda rng, x, **kw: basic_knn(rng, x, [0.0, 0.0], 3, **kw), pnn_mod),
                                       (lambda rng, x, **kw: basic_convex_hull(rng, x, **kw), ch)])
def test_basic_baselines_release_all_points_with_the_given_budget(monkeypatch, fn, module):
    seen = []
    _spy_class(monkeypatch, module, "IdentityQueryCGP", seen)
    _spy_class(monkeypatch, module, "IdentityQueryGP", seen)
    rng = unsafe_seeded_generator(5)
    x = rng.uniform(0, 10, (12, 2))
    fn(rng, x, rho=0.37)
    fn(rng, x, epsilon=0.9)
    assert seen == [("IdentityQueryCGP", 0.37), ("IdentityQueryGP", 0.9)]


@pytest.mark.parametrize("privatization,method", [("distance", "BM1"), ("point", "BM0")])
def test_knn_baseline_noises_the_right_quantity_at_each_users_rho(monkeypatch, privatization, method):
    calls = []
    real = knn_mod.gaussian_mechanism

    def spy(rng, values, rho):
        calls.append((np.array(values, dtype=float), np.array(rho, dtype=float)))
        return real(rng, values, rho)

    monkeypatch.setattr(knn_mod, "gaussian_mechanism", spy)
    rng = unsafe_seeded_generator(6)
    x = np.array([[3.0, 4.0], [6.0, 8.0], [0.0, 1.0], [1.0, 1.0]])
    rho = np.array([0.1, 0.2, 0.3, 0.4])
    res = knn_baseline(rng, x, [0.0, 0.0], 2, rho, privatization=privatization)
    assert res.method == method and len(calls) == 1
    values, r = calls[0]
    np.testing.assert_array_equal(r, rho)  # ρ_i unchanged, per user (Liang–Yi (adaptive budgeting) §6.4.1: the whole r_i, no savings)
    expected = np.array([5.0, 10.0, 1.0, np.sqrt(2.0)]) if privatization == "distance" else x
    np.testing.assert_allclose(values, expected)  # BM1: len_p(x_i); BM0: the points themselves
    np.testing.assert_array_equal(res.executed_rho, rho)
