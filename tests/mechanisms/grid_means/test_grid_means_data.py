"""Input validation of one grid's values (streamdp.mechanisms.grid_means.data)."""

from __future__ import annotations

import numpy as np
import pytest

from streamdp.mechanisms.grid_means import Baseline, GridValues
from streamdp.mechanisms.grid_means.data import as_grid_values
from streamdp.noise.generator import unsafe_seeded_generator


def test_mapping_input_concatenates_in_order_and_clips_to_0_U():
    raw = {"u1": [1.0, -3.0, 12.0], "u2": np.array([5.0]), "u3": []}
    g = GridValues.from_users(raw, upper=10.0)
    assert g.user_ids == ("u1", "u2")  # u3 has no value: not in the grid (Rameshwar–Tandon (IoT means) ^gℒ)
    np.testing.assert_array_equal(g.counts, [3, 1])
    np.testing.assert_array_equal(g.offsets, [0, 3, 4])
    np.testing.assert_array_equal(g.values, [1.0, 0.0, 10.0, 5.0])  # −3 → 0, 12 → U
    assert g.true_mean() == pytest.approx(16.0 / 4)
    assert raw["u1"] == [1.0, -3.0, 12.0]  # the caller's data is not modified
    with pytest.raises(ValueError):
        g.values[0] = 3.0  # read-only


def test_sequence_input_uses_positions_as_ids():
    g = GridValues.from_users([[1.0], [], [2.0, 3.0]], upper=5)
    assert g.user_ids == (0, 2)
    np.testing.assert_array_equal(g.counts, [1, 2])


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_values_raise(bad):
    with pytest.raises(ValueError, match="values"):
        GridValues.from_users({"a": [1.0, bad]}, upper=10)
    with pytest.raises(ValueError, match="values"):
        Baseline(1.0, 10.0).estimate({"a": [1.0, bad]}, unsafe_seeded_generator(0))


def test_bad_inputs_name_the_parameter():
    with pytest.raises(ValueError, match="at least one value"):
        GridValues.from_users({"a": [], "b": []}, upper=1)
    with pytest.raises(ValueError, match="values_by_user"):
        GridValues.from_users({"a": ["x"]}, upper=1)
    with pytest.raises(ValueError, match="values_by_user"):
        GridValues.from_users("abc", upper=1)
    with pytest.raises(ValueError, match="values_by_user"):
        GridValues.from_users(3.0, upper=1)
    for u in (0, -1, float("nan"), float("inf"), "x"):
        with pytest.raises(ValueError, match="upper"):
            GridValues.from_users({"a": [1.0]}, upper=u)


def test_from_concatenated():
    g = GridValues.from_concatenated([1.0, 2.0, 30.0], [2, 0, 1], upper=10, user_ids=["a", "b", "c"])
    assert g.user_ids == ("a", "c")
    np.testing.assert_array_equal(g.values, [1.0, 2.0, 10.0])
    with pytest.raises(ValueError, match="counts"):
        GridValues.from_concatenated([1.0, 2.0], [1, 2], upper=10)
    with pytest.raises(ValueError, match="counts"):
        GridValues.from_concatenated([1.0, 2.0], [3, -1], upper=10)
    with pytest.raises(ValueError, match="counts"):
        GridValues.from_concatenated([1.0, 2.0], [1.0, 1.0], upper=10)
    with pytest.raises(ValueError, match="user_ids"):
        GridValues.from_concatenated([1.0, 2.0], [1, 1], upper=10, user_ids=["a"])
    with pytest.raises(ValueError, match="empty"):
        GridValues.from_concatenated([], [0, 0], upper=10)


def test_grid_values_must_match_the_estimator_bound():
    g = GridValues.from_users({"a": [1.0]}, upper=10)
    assert as_grid_values(g, 10.0) is g
    with pytest.raises(ValueError, match="upper"):
        as_grid_values(g, 20.0)
