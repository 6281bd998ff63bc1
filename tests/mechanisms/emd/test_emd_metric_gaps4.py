"""Imola et al. (EMD) §2.2 Def. 2.4: d_EM known answers computed independently of the code, and the input checks (contract §6).

The transport-LP path (unequal multiset sizes, several sources and sinks) is checked against a hand-computed plan
and against a brute force over permutations of the multisets replicated to a common size (two uniform measures
on L points each: Birkhoff–von Neumann makes the optimal plan a permutation), never against the code itself.
"""

from __future__ import annotations

import itertools
import math

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


def _brute_emd(a, b, d) -> float:
    """d_EM of two multisets of sizes m, m' by brute force: replicate both to L = lcm(m, m') items, minimise the
    mean cost over all L! pairings."""
    L = math.lcm(len(a), len(b))
    ra = [x for x in a for _ in range(L // len(a))]
    rb = [y for y in b for _ in range(L // len(b))]
    return min(sum(d[ra[i], rb[p[i]]] for i in range(L)) for p in itertools.permutations(range(L))) / L


def test_transport_lp_hand_computed_plan():
    d = clustered_metric(2, 2, 0.5)  # items 0,1 | 2,3: 0.5 within a cluster, 1 across
    # h = (3/4, 0, 1/4, 0), h' = (0, 1/3, 0, 2/3). Common mass: none. Sources 0 (3/4), 2 (1/4); sinks 1 (1/3), 3 (2/3).
    # Optimal: 2→3 1/4 at 0.5, 0→1 1/3 at 0.5, 0→3 5/12 at 1  →  1/8 + 1/6 + 5/12 = 17/24.
    a, b = np.array([0, 0, 0, 2]), np.array([1, 3, 3])
    assert emd_items(a, b, d) == pytest.approx(17 / 24, abs=1e-9)
    assert emd_items(b, a, d) == pytest.approx(17 / 24, abs=1e-9)
    assert emd_histograms([0.75, 0, 0.25, 0], [0, 1 / 3, 0, 2 / 3], d) == pytest.approx(17 / 24, abs=1e-9)
    # common mass stays in place: mixing both with the same c, ½h + ½c vs ½h' + ½c, halves the cost → 17/48
    c = np.array([0.25, 0.25, 0.25, 0.25])
    h1 = (np.array([0.75, 0, 0.25, 0]) + c) / 2
    h2 = (np.array([0, 1 / 3, 0, 2 / 3]) + c) / 2
    assert emd_histograms(h1, h2, d) == pytest.approx(17 / 48, abs=1e-9)


def test_transport_lp_against_brute_force_on_unequal_sizes():
    rng = unsafe_seeded_generator(404)
    d = clustered_metric(3, 2, 0.3)  # k = 6
    asym = rng.uniform(0.1, 1.0, (6, 6))
    # a random metric too (shortest paths of a random symmetric weight matrix)
    w = (asym + asym.T) / 2
    np.fill_diagonal(w, 0.0)
    for m in range(6):
        w = np.minimum(w, w[:, m : m + 1] + w[m : m + 1, :])
    for metric in (d, w):
        for ma, mb in ((2, 3), (3, 2), (1, 3), (4, 2), (2, 6), (3, 6)):
            for _ in range(3):
                a, b = rng.integers(0, 6, ma), rng.integers(0, 6, mb)
                want = _brute_emd(a, b, metric)
                assert emd_items(a, b, metric) == pytest.approx(want, abs=1e-9)
                assert emd_histograms(histogram(a, 6), histogram(b, 6), metric) == pytest.approx(want, abs=1e-9)


def test_histogram_rejects_out_of_range_and_non_integer_items():
    assert histogram(np.array([0, 3, 3]), 4) == pytest.approx([1 / 3, 0, 0, 2 / 3])
    with pytest.raises(ValueError, match="items"):
        histogram(np.array([0, 4]), 4)  # k itself is out of range
    with pytest.raises(ValueError, match="items"):
        histogram(np.array([-1, 0]), 4)
    with pytest.raises(ValueError, match="integer"):
        histogram(np.array([0.0, 1.0]), 4)
    with pytest.raises(ValueError, match="non-empty"):
        histogram(np.array([], dtype=np.int64), 4)


def test_clustered_metric_rejects_degenerate_parameters():
    assert clustered_metric(2, 2, 1.0)[0, 1] == 1.0  # γ = 1 is allowed
    with pytest.raises(ValueError, match="gamma"):
        clustered_metric(2, 2, 0.0)  # a pseudo-metric: two items at distance 0
    with pytest.raises(ValueError, match="gamma"):
        clustered_metric(2, 2, float("nan"))
    with pytest.raises(ValueError, match="g"):
        clustered_metric(2, 0, 0.5)
    with pytest.raises(ValueError, match="c"):
        clustered_metric(0, 2, 0.5)


def test_emd_histograms_rejects_bad_input():
    d = clustered_metric(2, 2, 0.5)
    with pytest.raises(ValueError, match="non-negative"):
        emd_histograms([1, 0, 0, 0], [1.2, -0.2, 0, 0], d)  # the second histogram negative
    with pytest.raises(ValueError, match="shape"):
        emd_histograms([0.25, 0.25, 0.25, 0.25], [1.0], d)  # would broadcast silently
    with pytest.raises(ValueError, match="shape"):
        emd_histograms([0.25, 0.25, 0.25, 0.25], [0.5, 0.5], d)
    for off in (1e-3, 1e-6):  # masses that differ by more than rounding
        with pytest.raises(ValueError, match="mass"):
            emd_histograms([1, 0, 0, 0], [0.5, 0.5 - off, 0, 0], d)
    bad_neg = d.copy()
    bad_neg[0, 1] = bad_neg[1, 0] = -0.5
    with pytest.raises(ValueError, match="non-negative"):
        emd_histograms([1, 0, 0, 0], [0, 1, 0, 0], bad_neg)
    for v in (np.nan, np.inf):
        bad = d.copy()
        bad[0, 1] = bad[1, 0] = v
        with pytest.raises(ValueError, match="finite"):
            emd_histograms([1, 0, 0, 0], [0, 1, 0, 0], bad)
    with pytest.raises(ValueError, match="square"):
        emd_items(np.array([0]), np.array([1]), np.ones((2, 3)))
    with pytest.raises(ValueError, match="square"):
        emd_histograms([1, 0], [0, 1], np.ones((2, 3)))


def test_emd_points_rejects_empty_multisets():
    with pytest.raises(ValueError, match="non-empty"):
        emd_points(np.zeros((0, 2)), np.zeros((3, 2)))
    with pytest.raises(ValueError, match="non-empty"):
        emd_points(np.zeros((2, 2)), np.zeros((0, 2)))
    with pytest.raises(ValueError, match="same d"):
        emd_points(np.zeros((2, 2)), np.zeros((2, 3)))


def test_simplex_projection_rejects_non_finite_and_malformed_input():
    for v in ([0.5, np.nan, 0.5], [np.inf, 0.0], [-np.inf, 1.0]):
        with pytest.raises(ValueError, match="finite"):
            project_to_simplex(v)
    with pytest.raises(ValueError, match="1-D"):
        project_to_simplex([])
    with pytest.raises(ValueError, match="1-D"):
        project_to_simplex([[0.5, 0.5]])
    # known answers: equal entries → uniform; a shift of every entry changes nothing
    assert project_to_simplex([5.0, 5.0, 5.0, 5.0]) == pytest.approx([0.25] * 4)
    assert project_to_simplex([10.6, 10.6, 9.0]) == pytest.approx([0.5, 0.5, 0.0])
