"""Continuous scalar samplers: KS against the exact CDF (p = 1e-6, fixed seeds), mean and variance, power."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from noise_gof import P_MIN, assert_mean, assert_variance, ks_pvalue
from streamdp.noise import samplers
from streamdp.noise.generator import unsafe_seeded_generator

N = 200_000
EULER_GAMMA = 0.5772156649015329

# name → (sampler, reference law for a scale s, mean(s), variance(s), 4th central moment(s)) — textbook formulas.
LAWS = {
    "gaussian": (samplers.gaussian, lambda s: stats.norm(scale=s), lambda s: 0.0, lambda s: s * s,
                 lambda s: 3 * s**4),
    "laplace": (samplers.laplace, lambda s: stats.laplace(scale=s), lambda s: 0.0, lambda s: 2 * s * s,
                lambda s: 24 * s**4),
    # Gumbel: mean γβ, variance π²β²/6, excess kurtosis 12/5.
    "gumbel": (samplers.gumbel, lambda s: stats.gumbel_r(scale=s), lambda s: EULER_GAMMA * s,
               lambda s: math.pi**2 * s * s / 6, lambda s: (3 + 12 / 5) * (math.pi**2 * s * s / 6) ** 2),
    # Exponential(mean s): variance s², 4th central moment 9s⁴.
    "exponential": (samplers.exponential, lambda s: stats.expon(scale=s), lambda s: s, lambda s: s * s,
                    lambda s: 9 * s**4),
}


@pytest.mark.statistical
@pytest.mark.parametrize("name", sorted(LAWS))
@pytest.mark.parametrize("scale", [0.3, 1.0, 17.0])
def test_ks_mean_variance(name, scale):
    sampler, law, mean, var, mu4 = LAWS[name]
    rng = unsafe_seeded_generator(1000 + int(scale * 10) + len(name))
    x = sampler(rng, scale, N)
    assert x.shape == (N,) and x.dtype == np.float64
    assert ks_pvalue(x, law(scale).cdf) > P_MIN
    assert_mean(x, mean(scale), var(scale))
    assert_variance(x, var(scale), mu4(scale))


@pytest.mark.statistical
@pytest.mark.parametrize("name", sorted(LAWS))
def test_ks_detects_a_five_percent_scale_error(name):
    # Power check: the same KS test must reject a law whose scale is off by 5 %.
    sampler, law, *_ = LAWS[name]
    x = sampler(unsafe_seeded_generator(77), 2.0, N)
    assert ks_pvalue(x, law(2.0 * 1.05).cdf) < P_MIN


def test_array_scale_broadcasts():
    rng = unsafe_seeded_generator(3)
    sig = np.array([1.0, 10.0, 100.0])
    x = samplers.gaussian(rng, sig, (20_000, 3))
    assert x.shape == (20_000, 3)
    np.testing.assert_allclose(x.std(axis=0) / sig, 1.0, atol=0.03)
