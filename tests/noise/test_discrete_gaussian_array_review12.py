"""discrete_gaussian_array: one N_Z(0, σ_i²) per element of an array of σ's (the granular PIE rounds' sampler).

The expected law is written out here: Pr[x] = exp(−x²/(2σ²)) / Σ_y exp(−y²/(2σ²)) on ℤ (CKS Def. 1), never taken
from the code under test. The σ's are mixed in one array (shuffled), and each σ's elements are tested by χ²
against its own pmf, plus mean and variance (fixed seeds, p = 1e-6).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from noise_gof import P_MIN, assert_mean, assert_variance, chi2_pvalue
from streamdp.noise import discrete, samplers
from streamdp.noise.generator import unsafe_seeded_generator


def nz_pmf(sigma: float):
    """The exact N_Z(0, σ²) pmf on a range carrying all the float64 mass."""
    k = math.ceil(40 * sigma) + 50  # mass beyond ±k is < exp(−800)
    x = np.arange(-k, k + 1)
    w = np.exp(-(x.astype(float) ** 2) / (2 * sigma * sigma))
    return x, w / w.sum()


def moments(x: np.ndarray, p: np.ndarray) -> tuple[float, float]:
    xf = x.astype(float)
    return float(np.sum(xf**2 * p)), float(np.sum(xf**4 * p))


SIGMAS = [0.3, 0.7, 1.0, 2.5, 7.3, 40.0]
PER_SIGMA = 60_000


@pytest.mark.statistical
def test_mixed_sigmas_each_element_has_its_own_discrete_gaussian_law():
    rng = unsafe_seeded_generator(1201)
    sig = np.repeat(np.array(SIGMAS), PER_SIGMA)
    perm = rng.permutation(sig.size)
    sig = sig[perm].reshape(-1, 20)  # a 2-d array: the output has its shape
    z = samplers.discrete_gaussian_array(rng, sig)
    assert z.dtype == np.int64 and z.shape == sig.shape
    for s in SIGMAS:
        x = z[sig == s]
        assert x.size == PER_SIGMA
        support, pmf = nz_pmf(s)
        assert chi2_pvalue(x, support, pmf) > P_MIN, s
        var, mu4 = moments(support, pmf)
        assert_mean(x, 0.0, var)
        assert_variance(x, var, mu4)


@pytest.mark.statistical
def test_the_chi2_check_has_power_against_a_swapped_sigma():
    """The σ = 1.0 elements do not pass as σ = 1.1 (the test above would catch a per-element σ mix-up)."""
    rng = unsafe_seeded_generator(1202)
    sig = np.tile(np.array([1.0, 2.5]), PER_SIGMA)
    z = samplers.discrete_gaussian_array(rng, sig)
    support, pmf = nz_pmf(1.1)
    assert chi2_pvalue(z[sig == 1.0], support, pmf) < P_MIN
    support, pmf = nz_pmf(1.0)
    assert chi2_pvalue(z[sig == 1.0], support, pmf) > P_MIN


@pytest.mark.statistical
def test_grid_scale_sigmas_are_normal_with_variance_sigma_squared():
    """σ_i ∈ [2³⁰, 2³¹) (what the granular Gaussian mechanism draws): Z/σ_i is N(0, 1) to ~10⁻⁹ (KS, mean, var)."""
    rng = unsafe_seeded_generator(1203)
    sig = 2.0**30 * rng.uniform(1.0, 2.0, 200_000)
    z = samplers.discrete_gaussian_array(rng, sig)
    u = z / sig
    assert stats.kstest(u, "norm").pvalue > P_MIN
    assert_mean(u, 0.0, 1.0)
    assert_variance(u, 1.0, 3.0)


def test_point_mass_below_POINT_MASS_SIGMA_per_element_and_rejection_only_redraws_the_rest():
    rng = unsafe_seeded_generator(1204)
    tiny = discrete.POINT_MASS_SIGMA / 2
    sig = np.array([tiny, 5.0, 1e-300, 5.0, tiny] * 2000)
    z = samplers.discrete_gaussian_array(rng, sig)
    assert np.all(z[sig < discrete.POINT_MASS_SIGMA] == 0)
    assert np.count_nonzero(z[sig == 5.0]) > 3000  # the others are real draws (Pr[0] ≈ 0.08 at σ = 5)


def test_shapes_scalar_empty_and_validation():
    rng = unsafe_seeded_generator(1205)
    v = samplers.discrete_gaussian_array(rng, 3.0)
    assert isinstance(v, np.integer)
    assert samplers.discrete_gaussian_array(rng, np.ones((0, 3))).shape == (0, 3)
    assert samplers.discrete_gaussian_array(rng, [discrete.MAX_SCALE, 1.0]).shape == (2,)
    for bad in ([1.0, 0.0], [1.0, -2.0], [np.nan], [np.inf], [discrete.MAX_SCALE * 2], True, "3", [[True]]):
        with pytest.raises(ValueError, match="sigma"):
            samplers.discrete_gaussian_array(rng, bad)
