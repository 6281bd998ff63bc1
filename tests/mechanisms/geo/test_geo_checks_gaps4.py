"""Point-set checks of the geo mechanisms (contract §6: bad input gets a clear error naming the parameter).

A 1-D vector is not an (n, d) point set: the identity query would otherwise read [lat, lon] as two 1-D points and
calibrate its noise for n = 2, and an empty or 3-D array must not reach a mechanism either.
"""

from __future__ import annotations

import numpy as np
import pytest

from streamdp.mechanisms.geo import IdentityQueryCGP, basic_knn
from streamdp.mechanisms.geo.pnn import k_pnn, knn_distance_ratio, pnn
from streamdp.noise.generator import unsafe_seeded_generator


@pytest.mark.parametrize("points", [
    [40.7, -74.0],  # one point given as a flat vector
    np.zeros((0, 2)),  # no points
    np.zeros((2, 2, 2)),  # not a point set
])
def test_malformed_point_sets_are_rejected_by_name(points):
    rng = unsafe_seeded_generator(405)
    with pytest.raises(ValueError, match="points"):
        IdentityQueryCGP(1.0).release(rng, points)
    with pytest.raises(ValueError, match="points"):
        pnn(rng, points, [0.0, 0.0], epsilon=1.0)
    with pytest.raises(ValueError, match="points"):
        k_pnn(rng, points, [0.0, 0.0], k=1, epsilon=1.0)
    with pytest.raises(ValueError, match="points"):
        basic_knn(rng, points, [0.0, 0.0], k=1, rho=1.0)
    with pytest.raises(ValueError, match="points"):
        knn_distance_ratio(points, [0.0, 0.0], [0])


def test_a_single_point_as_an_n_by_d_array_is_accepted():
    out = IdentityQueryCGP(1e6).release(unsafe_seeded_generator(406), [[40.7, -74.0]])
    assert out.shape == (1, 2) and out == pytest.approx(np.array([[40.7, -74.0]]), abs=0.1)
