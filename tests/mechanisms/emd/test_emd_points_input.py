"""emd_points takes (m, d) arrays only: a flat list was silently read as ONE point in ℝ^m (np.atleast_2d), so
emd_points([0, 1], [0, 2]) returned 1.0 — the distance between the points (0, 1) and (0, 2) — where the 1-D
multisets {0, 1} and {0, 2} are at d_EM = (|0−0| + |1−2|)/2 = 0.5 (Imola et al. (EMD) Def. 2.4). Bad input gets a clear error
(contract §6)."""

from __future__ import annotations

import numpy as np
import pytest

from streamdp.mechanisms.emd.metric import emd_points


def test_one_dimensional_points_are_written_as_columns():
    assert emd_points([[0.0], [1.0]], [[0.0], [2.0]]) == pytest.approx(0.5)


@pytest.mark.parametrize("a,b", [([0.0, 1.0], [0.0, 2.0]), (1.0, [[1.0]]), (np.zeros((2, 2, 1)), np.zeros((2, 2, 1)))])
def test_arrays_that_are_not_point_lists_are_refused(a, b):
    with pytest.raises(ValueError, match=r"\(m, d\) arrays"):
        emd_points(a, b)


def test_non_finite_points_are_refused():
    with pytest.raises(ValueError, match="finite"):
        emd_points([[np.nan]], [[0.0]])


@pytest.mark.parametrize("dist", [[[0.0, 1.0], [0.5, 0.0]], [[0.1, 1.0], [1.0, 0.0]]])
def test_a_ground_cost_that_is_not_a_metric_is_refused(dist):
    """Asymmetric, or a non-zero diagonal: the common mass min(h, h') may then not stay in place (the solver
    cancels it), so the value would not be the transport cost."""
    from streamdp.mechanisms.emd.metric import emd_histograms

    with pytest.raises(ValueError, match="must be a metric"):
        emd_histograms([0.5, 0.5], [1.0, 0.0], dist)
