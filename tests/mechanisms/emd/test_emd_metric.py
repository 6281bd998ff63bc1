"""Imola et al. (EMD) §2.2: d_EM between multisets, the clustered metric, simplex projection."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from streamdp.mechanisms.emd import (
    clustered_metric,
    emd_histograms,
    emd_items,
    emd_points,
    histogram,
    project_to_simplex,
)
from streamdp.noise.generator import unsafe_seeded_generator


def test_clustered_metric_is_a_metric_with_diameter_one():
    d = clustered_metric(3, 4, 0.25)
    assert d.shape == (12, 12)
    assert np.all(np.diag(d) == 0) and np.allclose(d, d.T) and d.max() == 1.0
    assert d[0, 3] == 0.25 and d[0, 4] == 1.0 and d[5, 7] == 0.25
    # triangle inequality over all triples
    assert np.all(d[:, None, :] <= d[:, :, None] + d[None, :, :] + 1e-12)
    with pytest.raises(ValueError, match="gamma"):
        clustered_metric(2, 2, 1.5)


def test_emd_known_answers():
    d = clustered_metric(2, 2, 0.5)  # items 0,1 | 2,3
    # one of three items moves within its cluster: 0.5/3; across: 1/3
    assert emd_items(np.array([0, 0, 2]), np.array([0, 1, 2]), d) == pytest.approx(0.5 / 3)
    assert emd_items(np.array([0, 0, 2]), np.array([0, 3, 2]), d) == pytest.approx(1 / 3)
    # unequal sizes: {0} vs {0, 1}: move half the mass of item 0 to item 1 → 0.5·0.5
    assert emd_items(np.array([0]), np.array([0, 1]), d) == pytest.approx(0.25)
    # 1-D points with equal sizes: mean |sorted difference|
    rng = unsafe_seeded_generator(400)
    a, b = rng.normal(size=(7, 1)), rng.normal(size=(7, 1))
    assert emd_points(a, b) == pytest.approx(np.abs(np.sort(a[:, 0]) - np.sort(b[:, 0])).mean())
    # unequal sizes in 1-D: W1 = ∫|F − G|
    a, b = rng.normal(size=(4, 1)), rng.normal(size=(6, 1))
    grid = np.sort(np.concatenate([a[:, 0], b[:, 0]]))
    fa = np.searchsorted(np.sort(a[:, 0]), grid[:-1], side="right") / 4
    fb = np.searchsorted(np.sort(b[:, 0]), grid[:-1], side="right") / 6
    assert emd_points(a, b) == pytest.approx(np.sum(np.abs(fa - fb) * np.diff(grid)))


def test_assignment_agrees_with_transport_lp():
    rng = unsafe_seeded_generator(401)
    d = clustered_metric(3, 3, 0.3)
    for _ in range(30):
        a = rng.integers(0, 9, 8)
        b = rng.integers(0, 9, 8)
        assert emd_items(a, b, d) == pytest.approx(emd_histograms(histogram(a, 9), histogram(b, 9), d), abs=1e-9)


def test_brute_force_assignment_small():
    rng = unsafe_seeded_generator(402)
    d = clustered_metric(2, 3, 0.4)
    a, b = rng.integers(0, 6, 5), rng.integers(0, 6, 5)
    brute = min(sum(d[a[i], b[p[i]]] for i in range(5)) for p in itertools.permutations(range(5))) / 5
    assert emd_items(a, b, d) == pytest.approx(brute)


def test_simplex_projection():
    assert project_to_simplex([0.2, 0.3, 0.5]) == pytest.approx([0.2, 0.3, 0.5])
    assert project_to_simplex([2.0, 0.0]) == pytest.approx([1.0, 0.0])
    assert project_to_simplex([0.5, 0.5, -0.2]) == pytest.approx([0.5, 0.5, 0.0])
    rng = unsafe_seeded_generator(403)
    for _ in range(50):
        v = rng.normal(0, 1, 10)
        h = project_to_simplex(v)
        assert h.min() >= 0 and h.sum() == pytest.approx(1.0)
        # optimality: for a random simplex point s, (v − h)·(s − h) ≤ 0
        s = rng.dirichlet(np.ones(10))
        assert np.dot(v - h, s - h) <= 1e-9


def test_bad_input():
    d = clustered_metric(2, 2, 0.5)
    with pytest.raises(ValueError, match="mass"):
        emd_histograms([1, 0, 0, 0], [0.5, 0, 0, 0], d)
    with pytest.raises(ValueError, match="non-negative"):
        emd_histograms([1.2, -0.2, 0, 0], [1, 0, 0, 0], d)
    with pytest.raises(ValueError, match="items"):
        histogram(np.array([0, 7]), 4)
