"""Sampler limits (2026-11-23 noise review): the discrete Gaussian hung for σ ≲ 5e-155 (its rejection step
computed 0·∞ = NaN and never accepted) and raised ZeroDivisionError below ~2e-162; the continuous samplers
returned ±inf at scales near the float64 maximum; booleans and strings were read as numbers."""

from __future__ import annotations

import math
import signal

import numpy as np
import pytest

from streamdp.noise import samplers
from streamdp.noise.discrete import POINT_MASS_SIGMA
from streamdp.noise.generator import unsafe_seeded_generator


@pytest.fixture
def alarm():
    def boom(*_):
        raise TimeoutError("sampler did not return within 5 s")
    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(5)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("sigma", [1e-155, 1e-160, 1e-200, 5e-324, 1e-3, POINT_MASS_SIGMA / 2])
def test_a_tiny_sigma_is_the_point_mass_at_zero(sigma, alarm):
    rng = unsafe_seeded_generator(1)
    assert samplers.discrete_gaussian(rng, sigma, 1000).tolist() == [0] * 1000
    assert samplers.discrete_gaussian(rng, sigma) == 0


def test_the_point_mass_threshold_is_where_the_law_is_zero_to_float_precision():
    # Pr[X ≠ 0] < 3·exp(−1/(2σ²)) at σ = POINT_MASS_SIGMA: below 1e-240
    assert 3 * math.exp(-1 / (2 * POINT_MASS_SIGMA**2)) < 1e-240
    # just above it the sampler runs (and still gives 0 w.p. 1 − 1e-240)
    assert samplers.discrete_gaussian(unsafe_seeded_generator(2), POINT_MASS_SIGMA * 1.01, 100).tolist() == [0] * 100


@pytest.mark.parametrize("fn,arg", [
    (samplers.gaussian, "sigma"), (samplers.laplace, "b"), (samplers.gumbel, "beta"),
    (samplers.exponential, "scale"), (samplers.discrete_gaussian, "sigma"), (samplers.discrete_laplace, "t"),
    (samplers.planar_laplace, "epsilon"), (lambda rng, s, n: samplers.knorm_gamma_ball(rng, 2, s, n), "scale"),
])
@pytest.mark.parametrize("bad", [True, "3", b"3"])
def test_booleans_and_strings_are_not_scales(fn, arg, bad):
    with pytest.raises(ValueError, match=arg):
        fn(unsafe_seeded_generator(0), bad, 3)


@pytest.mark.parametrize("fn", [samplers.gaussian, samplers.laplace, samplers.gumbel, samplers.exponential,
                                lambda rng, s, n: samplers.knorm_gamma_ball(rng, 3, s, n)])
def test_continuous_scales_are_capped_below_overflow(fn):
    rng = unsafe_seeded_generator(3)
    assert np.all(np.isfinite(fn(rng, samplers.MAX_SCALE, 20_000)))
    with pytest.raises(ValueError, match="overflows"):
        fn(rng, 1.7e308, 3)


def test_planar_laplace_epsilon_is_bounded_below():
    rng = unsafe_seeded_generator(4)
    assert np.all(np.isfinite(samplers.planar_laplace(rng, 1 / samplers.MAX_SCALE, 20_000)))
    with pytest.raises(ValueError, match="epsilon"):
        samplers.planar_laplace(rng, 1e-320, 3)
