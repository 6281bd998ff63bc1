"""Discrete Gaussian N_Z(0, σ²) and discrete Laplace Lap_Z(t): χ² against the exact pmf (p = 1e-6, fixed seeds),
mean and variance against the exact moments Σx²p(x), Σx⁴p(x), and power checks.

The pmfs are written here from their definitions (Canonne–Kamath–Steinke 2020):
N_Z: p(x) = exp(−x²/(2σ²)) / Σ_y exp(−y²/(2σ²)); Lap_Z: p(x) = (1 − q)/(1 + q)·q^|x|, q = e^{−1/t}.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from noise_gof import P_MIN, assert_mean, assert_variance, chi2_pvalue
from streamdp.noise import discrete, samplers
from streamdp.noise.generator import unsafe_seeded_generator

N = 300_000


def dgauss_pmf(sigma: float):
    k = math.ceil(40 * sigma) + 50  # mass beyond ±k is < exp(−800): nil in float64
    x = np.arange(-k, k + 1)
    w = np.exp(-(x.astype(float) ** 2) / (2 * sigma * sigma))
    return x, w / w.sum()


def dlaplace_pmf(t: float):
    k = math.ceil(60 * t) + 50  # mass beyond ±k is < e^{−60}
    x = np.arange(-k, k + 1)
    q = math.exp(-1 / t)
    return x, (1 - q) / (1 + q) * q ** np.abs(x)


def moments(x: np.ndarray, p: np.ndarray) -> tuple[float, float]:
    """(variance, 4th central moment) of a symmetric law — mean 0."""
    xf = x.astype(float)
    return float(np.sum(xf**2 * p)), float(np.sum(xf**4 * p))


# ------------------------------------------------------------------------------------------- discrete Gaussian
@pytest.mark.statistical
@pytest.mark.parametrize("sigma", [0.3, 0.5, 1.0, 2.5, 3.0, 20.0])
def test_discrete_gaussian_chi2_mean_variance(sigma):
    x = samplers.discrete_gaussian(unsafe_seeded_generator(int(sigma * 100) + 1), sigma, N)
    assert x.dtype == np.int64 and x.shape == (N,)
    support, pmf = dgauss_pmf(sigma)
    assert chi2_pvalue(x, support, pmf) > P_MIN
    var, mu4 = moments(support, pmf)
    assert_mean(x, 0.0, var)
    assert_variance(x, var, mu4)


@pytest.mark.statistical
@pytest.mark.parametrize("sigma", [0.5, 1.5, 7.3])
def test_discrete_gaussian_large_sample(sigma):
    # 3·10⁶ draws: this χ² detects a relative error of about 0.5 % in the probability of a central value.
    x = samplers.discrete_gaussian(unsafe_seeded_generator(int(sigma * 10) + 7000), sigma, 3_000_000)
    support, pmf = dgauss_pmf(sigma)
    assert chi2_pvalue(x, support, pmf) > P_MIN
    var, mu4 = moments(support, pmf)
    assert_variance(x, var, mu4)


def test_discrete_gaussian_exact_variance_is_below_sigma_squared():
    # Known answers, by hand from the pmf: σ = 0.5 → (2e⁻² + 8e⁻⁸ + 18e⁻¹⁸ + …)/(1 + 2e⁻² + 2e⁻⁸ + …) ≈ 0.21501;
    # σ = 1 → 1 − ≈2.1e-7 (the gap decays like 4π²σ⁴e^{−2π²σ²}); σ ≥ 3 → σ² to float64 precision.
    w = np.exp(-np.array([0.0, 1.0, 4.0, 9.0]) / (2 * 0.25))
    by_hand = 2 * (w[1] + 4 * w[2] + 9 * w[3]) / (w[0] + 2 * (w[1] + w[2] + w[3]))
    assert moments(*dgauss_pmf(0.5))[0] == pytest.approx(by_hand, rel=1e-12)
    assert moments(*dgauss_pmf(0.5))[0] == pytest.approx(0.2150127, abs=1e-7)
    assert 1 - 3e-7 < moments(*dgauss_pmf(1.0))[0] < 1 - 1e-7
    assert moments(*dgauss_pmf(3.0))[0] == pytest.approx(9.0, rel=1e-12)
    assert moments(*dgauss_pmf(20.0))[0] == pytest.approx(400.0, rel=1e-12)


@pytest.mark.statistical
def test_discrete_gaussian_variance_check_has_power():
    # At σ = 0.5 the sample variance must be incompatible with σ² = 0.25 (it estimates ≈ 0.2150).
    x = samplers.discrete_gaussian(unsafe_seeded_generator(91), 0.5, N)
    _, mu4 = moments(*dgauss_pmf(0.5))
    with pytest.raises(AssertionError):
        assert_variance(x, 0.25, mu4)


@pytest.mark.statistical
@pytest.mark.parametrize("sigma", [0.5, 3.0, 20.0])
def test_discrete_gaussian_chi2_has_power(sigma):
    # The χ² test must reject a 5 % error in σ and the discrete Laplace proposal itself.
    x = samplers.discrete_gaussian(unsafe_seeded_generator(92), sigma, N)
    assert chi2_pvalue(x, *dgauss_pmf(sigma * 1.05)) < P_MIN
    assert chi2_pvalue(x, *dlaplace_pmf(math.floor(sigma) + 1)) < P_MIN


@pytest.mark.statistical
def test_discrete_gaussian_multi_batch_path(monkeypatch):
    # Force many internal batches (and the observed-rate refills) and check the law is unchanged.
    monkeypatch.setattr(discrete, "_BATCH", 997)
    sigma = 1.0
    x = samplers.discrete_gaussian(unsafe_seeded_generator(93), sigma, 100_003)
    support, pmf = dgauss_pmf(sigma)
    assert chi2_pvalue(x, support, pmf) > P_MIN
    assert chi2_pvalue(x[-20_000:], support, pmf) > P_MIN  # the tail of the output is filled properly too


def test_discrete_gaussian_extreme_scales():
    rng = unsafe_seeded_generator(94)
    # σ = 1e-3: Pr[x ≠ 0] = 2e^{−5·10⁵}/Z — zero in float64.
    assert np.all(samplers.discrete_gaussian(rng, 1e-3, 10_000) == 0)
    # σ = 1e6: moments match the continuous Gaussian (the difference is exp(−2π²σ²)-small): var σ², μ4 3σ⁴.
    sigma = 1e6
    x = samplers.discrete_gaussian(rng, sigma, 200_000)
    assert_mean(x, 0.0, sigma**2)
    assert_variance(x, sigma**2, 3 * sigma**4)


# -------------------------------------------------------------------------------------------- discrete Laplace
@pytest.mark.statistical
@pytest.mark.parametrize("t", [0.5, 1.0, 2.5, 10.0])
def test_discrete_laplace_chi2_mean_variance(t):
    x = samplers.discrete_laplace(unsafe_seeded_generator(int(t * 10) + 500), t, N)
    assert x.dtype == np.int64 and x.shape == (N,)
    support, pmf = dlaplace_pmf(t)
    assert chi2_pvalue(x, support, pmf) > P_MIN
    var, mu4 = moments(support, pmf)
    q = math.exp(-1 / t)
    assert var == pytest.approx(2 * q / (1 - q) ** 2, rel=1e-12)  # closed form agrees with the pmf sum
    assert_mean(x, 0.0, var)
    assert_variance(x, var, mu4)


@pytest.mark.statistical
def test_discrete_laplace_chi2_has_power():
    x = samplers.discrete_laplace(unsafe_seeded_generator(95), 2.5, N)
    assert chi2_pvalue(x, *dlaplace_pmf(2.5 * 1.05)) < P_MIN


# ------------------------------------------------------------------------------------------------------ shapes
@pytest.mark.parametrize("fn", [samplers.discrete_gaussian, samplers.discrete_laplace])
def test_discrete_shapes(fn):
    rng = unsafe_seeded_generator(96)
    assert fn(rng, 2.0, (3, 4)).shape == (3, 4)
    assert fn(rng, 2.0, 0).shape == (0,)
    scalar = fn(rng, 2.0)
    assert np.ndim(scalar) == 0 and isinstance(scalar, np.integer)
    assert fn(rng, 2.0, (2, 0, 3)).shape == (2, 0, 3)
