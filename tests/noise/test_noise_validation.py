"""Bad parameters raise ValueError naming the parameter; ``size`` accepts None, an int or a tuple."""

from __future__ import annotations

import math

import numpy as np
import pytest

from streamdp.noise import samplers
from streamdp.noise.generator import unsafe_seeded_generator

BAD_SCALES = [0, 0.0, -1.0, math.nan, math.inf, -math.inf, "abc", None]

SCALAR_SAMPLERS = {
    "sigma": [samplers.gaussian, samplers.discrete_gaussian],
    "b": [samplers.laplace],
    "beta": [samplers.gumbel],
    "scale": [samplers.exponential],
    "t": [samplers.discrete_laplace],
    "epsilon": [samplers.planar_laplace],
}


@pytest.fixture
def rng():
    return unsafe_seeded_generator(0)


@pytest.mark.parametrize("name, fn", [(n, f) for n, fs in SCALAR_SAMPLERS.items() for f in fs])
@pytest.mark.parametrize("bad", BAD_SCALES)
def test_bad_scale_is_a_value_error_naming_the_parameter(rng, name, fn, bad):
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        fn(rng, bad, 3)


@pytest.mark.parametrize("fn", [samplers.gaussian, samplers.laplace, samplers.gumbel, samplers.exponential])
def test_bad_entry_in_array_scale(rng, fn):
    with pytest.raises(ValueError):
        fn(rng, np.array([1.0, -2.0]), 2)
    with pytest.raises(ValueError):
        fn(rng, np.array([1.0, np.nan]), 2)


@pytest.mark.parametrize("fn", [samplers.discrete_gaussian, samplers.discrete_laplace, samplers.planar_laplace])
def test_scalar_only_parameters_reject_arrays(rng, fn):
    with pytest.raises(ValueError, match="scalar"):
        fn(rng, np.array([1.0, 2.0]), 2)


def test_discrete_scale_upper_limit(rng):
    with pytest.raises(ValueError, match="sigma"):
        samplers.discrete_gaussian(rng, 1e13, 2)
    with pytest.raises(ValueError, match=r"\bt\b"):
        samplers.discrete_laplace(rng, 1e13, 2)


@pytest.mark.parametrize("bad_d", [0, -1, 2.5, "3", None, True])
@pytest.mark.parametrize(
    "draw",
    [
        lambda g, d: samplers.uniform_sphere(g, d, 2),
        lambda g, d: samplers.uniform_ball(g, d, 2),
        lambda g, d: samplers.knorm_gamma_ball(g, d, 1.0, 2),
    ],
)
def test_bad_dimension(rng, draw, bad_d):
    with pytest.raises(ValueError, match=r"\bd\b"):
        draw(rng, bad_d)


@pytest.mark.parametrize("bad", BAD_SCALES)
def test_knorm_bad_scale(rng, bad):
    with pytest.raises(ValueError, match="scale"):
        samplers.knorm_gamma_ball(rng, 3, bad, 2)


@pytest.mark.parametrize(
    "draw",
    [
        lambda g, s: samplers.discrete_gaussian(g, 1.0, s),
        lambda g, s: samplers.discrete_laplace(g, 1.0, s),
        lambda g, s: samplers.planar_laplace(g, 1.0, s),
        lambda g, s: samplers.uniform_ball(g, 2, s),
    ],
)
@pytest.mark.parametrize("bad_size", [-1, (2, -1), "x", 2.5])
def test_bad_size(rng, draw, bad_size):
    with pytest.raises(ValueError, match="size"):
        draw(rng, bad_size)


@pytest.mark.parametrize("fn", [samplers.gaussian, samplers.laplace, samplers.gumbel, samplers.exponential])
def test_continuous_sizes(rng, fn):
    assert np.ndim(fn(rng, 1.0)) == 0
    assert fn(rng, 1.0, 5).shape == (5,)
    assert fn(rng, 1.0, (2, 3)).shape == (2, 3)
