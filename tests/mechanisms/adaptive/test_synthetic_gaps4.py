"""The synthetic trajectories used by the adaptive-mechanism tests: shape, the documented [0, extent]² range, and
parameter checks (clear errors naming the parameter)."""

from __future__ import annotations

import numpy as np
import pytest

from streamdp.mechanisms.adaptive.synthetic import synthetic_trajectories
from streamdp.noise.generator import synthetic_data_generator


def test_trajectories_stay_in_the_city_from_the_first_step():
    # hotspot spread far wider than the city: without clipping most initial positions would lie outside
    x = synthetic_trajectories(synthetic_data_generator(407), 200, 3, extent=1_000.0, hotspot_scale=5_000.0,
                               step_scale=5_000.0)
    assert x.shape == (3, 200, 2)
    assert x.min() >= 0.0 and x.max() <= 1_000.0
    assert np.any(x[0] == 0.0) and np.any(x[0] == 1_000.0)  # the clip was needed at t = 0


@pytest.mark.parametrize("kw,name", [
    ({"pull": 1.5}, "pull"), ({"pull": -0.1}, "pull"), ({"jump_prob": 2.0}, "jump_prob"),
    ({"background": -1.0}, "background"), ({"extent": 0.0}, "extent"), ({"step_scale": float("inf")}, "step_scale"),
    ({"hotspot_scale": -1.0}, "hotspot_scale"), ({"n_hotspots": 0}, "n_hotspots"),
])
def test_bad_parameters_are_rejected_by_name(kw, name):
    with pytest.raises(ValueError, match=name):
        synthetic_trajectories(synthetic_data_generator(408), 5, 2, **kw)


def test_bad_sizes_are_rejected_by_name():
    for n_users, n_steps in ((0, 2), (5, 0), (2.5, 2), (True, 2)):
        with pytest.raises(ValueError, match="n_users|n_steps"):
            synthetic_trajectories(synthetic_data_generator(408), n_users, n_steps)
