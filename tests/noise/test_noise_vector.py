"""Vector samplers: planar Laplace (Liang–Yi (CGP) Lemma 2.6 / App. A), K-norm ℓ2-ball noise (Imola et al. (EMD) PrivEMDLinear), uniform
sphere and ball. KS at p = 1e-6 with fixed seeds on the radial law and on the direction, moments, power checks.

Reference laws (written here from their definitions):
* planar Laplace, density ∝ e^{−ε‖z‖} on ℝ²: radius CDF 1 − (1 + εr)e^{−εr} (Liang–Yi (CGP) proof of Lemma 4.5;
  Gamma(2, 1/ε), App. A), angle uniform on [0, 2π); E‖z‖ = 2/ε (Liang–Yi (CGP) Cor. A.1 with d = 2);
* density ∝ e^{−‖z‖/s} on ℝ^d: norm ~ Gamma(shape d, scale s) (polar coordinates: r^{d−1}e^{−r/s}), direction
  uniform; for d = 1 this is Laplace(s);
* uniform point on S^{d−1}: (x₁ + 1)/2 ~ Beta((d−1)/2, (d−1)/2) (d = 3: x₁ ~ U[−1, 1], Archimedes);
* uniform point in the unit d-ball: Pr[‖x‖ ≤ r] = r^d.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from noise_gof import P_MIN, assert_mean, ks_pvalue
from streamdp.noise import samplers
from streamdp.noise.generator import unsafe_seeded_generator

N = 100_000


def direction_marginal_cdf(d: int):
    """CDF of one coordinate of a uniform point on S^{d−1}, d ≥ 2."""
    return stats.beta((d - 1) / 2, (d - 1) / 2, loc=-1, scale=2).cdf


def assert_uniform_direction(z: np.ndarray) -> None:
    """KS of the first and last coordinates of z/‖z‖ against the sphere marginal, and of the first coordinate among
    the larger half of the norms (direction independent of the norm); for d = 1, a fair sign."""
    d = z.shape[-1]
    norms = np.linalg.norm(z, axis=-1)
    u = z / norms[:, None]
    if d == 1:
        assert stats.binomtest(int(np.count_nonzero(u[:, 0] > 0)), u.shape[0]).pvalue > P_MIN
        return
    cdf = direction_marginal_cdf(d)
    assert ks_pvalue(u[:, 0], cdf) > P_MIN
    assert ks_pvalue(u[:, -1], cdf) > P_MIN
    assert ks_pvalue(u[norms > np.median(norms), 0], cdf) > P_MIN


def test_direction_marginal_reference_is_uniform_for_d3():
    # Known answer: for d = 3 the coordinate of a uniform point on the sphere is U[−1, 1].
    xs = np.linspace(-1, 1, 11)
    np.testing.assert_allclose(direction_marginal_cdf(3)(xs), (xs + 1) / 2, atol=1e-12)


# ------------------------------------------------------------------------------------------------ planar Laplace
@pytest.mark.statistical
@pytest.mark.parametrize("eps", [0.1, 1.0, 5.0])
def test_planar_laplace_radius_angle_moments(eps):
    z = samplers.planar_laplace(unsafe_seeded_generator(int(eps * 10) + 200), eps, N)
    assert z.shape == (N, 2) and z.dtype == np.float64
    r = np.hypot(z[:, 0], z[:, 1])
    assert ks_pvalue(r, lambda x: 1 - (1 + eps * x) * np.exp(-eps * x)) > P_MIN
    theta = np.mod(np.arctan2(z[:, 1], z[:, 0]), 2 * math.pi)
    assert ks_pvalue(theta, stats.uniform(0, 2 * math.pi).cdf) > P_MIN
    assert ks_pvalue(theta[r > np.median(r)], stats.uniform(0, 2 * math.pi).cdf) > P_MIN
    assert_mean(r, 2 / eps, 2 / eps**2)  # Gamma(2, 1/ε): mean 2/ε, variance 2/ε²
    for c in range(2):  # each coordinate: mean 0, variance E r²/2 = (2/ε² + 4/ε²)/2 = 3/ε²
        assert_mean(z[:, c], 0.0, 3 / eps**2)
        assert abs(z[:, c].var() / (3 / eps**2) - 1) < 0.03


@pytest.mark.statistical
def test_planar_laplace_radius_check_has_power():
    z = samplers.planar_laplace(unsafe_seeded_generator(299), 1.0, N)
    r = np.hypot(z[:, 0], z[:, 1])
    assert ks_pvalue(r, lambda x: 1 - (1 + 1.05 * x) * np.exp(-1.05 * x)) < P_MIN
    assert ks_pvalue(r, stats.expon(scale=2.0).cdf) < P_MIN  # same mean, Gamma(1) instead of Gamma(2)


# ------------------------------------------------------------------------------------------------ K-norm ball
@pytest.mark.statistical
@pytest.mark.parametrize("d", [1, 2, 3, 10])
@pytest.mark.parametrize("scale", [0.5, 3.0])
def test_knorm_gamma_ball_norm_and_direction(d, scale):
    z = samplers.knorm_gamma_ball(unsafe_seeded_generator(300 + 7 * d + int(scale * 2)), d, scale, N)
    assert z.shape == (N, d)
    norms = np.linalg.norm(z, axis=1)
    # density ∝ exp(−‖z‖/scale)  ⇔  norm ~ Gamma(d, scale) with a uniform direction (R itself is Gamma(d+1)).
    assert ks_pvalue(norms, stats.gamma(a=d, scale=scale).cdf) > P_MIN
    assert_uniform_direction(z)
    assert_mean(norms, d * scale, d * scale**2)
    # each coordinate: mean 0, variance E‖z‖²/d = (d + 1)·scale²
    assert_mean(z[:, 0], 0.0, (d + 1) * scale**2)
    assert abs(z[:, 0].var() / ((d + 1) * scale**2) - 1) < 0.04


@pytest.mark.statistical
def test_knorm_gamma_ball_d1_is_laplace():
    # d = 1: density ∝ exp(−|z|/s) is exactly Laplace(s).
    z = samplers.knorm_gamma_ball(unsafe_seeded_generator(330), 1, 2.0, N)
    assert ks_pvalue(z[:, 0], stats.laplace(scale=2.0).cdf) > P_MIN


@pytest.mark.statistical
@pytest.mark.parametrize("d", [2, 5])
def test_knorm_gamma_ball_norm_check_rejects_gamma_d_plus_1(d):
    # Power check, and the pitfall noted in the implementation notes on Imola et al. (EMD) ("never mix"): the norm is NOT Gamma(d+1).
    z = samplers.knorm_gamma_ball(unsafe_seeded_generator(340 + d), d, 1.0, N)
    assert ks_pvalue(np.linalg.norm(z, axis=1), stats.gamma(a=d + 1, scale=1.0).cdf) < P_MIN


@pytest.mark.statistical
def test_knorm_d2_matches_planar_laplace():
    # Same law by definition: knorm_gamma_ball(d=2, scale=1/ε) and planar_laplace(ε).
    a = samplers.knorm_gamma_ball(unsafe_seeded_generator(350), 2, 0.5, N)
    b = samplers.planar_laplace(unsafe_seeded_generator(351), 2.0, N)
    assert stats.ks_2samp(np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)).pvalue > P_MIN
    assert stats.ks_2samp(a[:, 0], b[:, 0]).pvalue > P_MIN


# ------------------------------------------------------------------------------------------- uniform sphere/ball
@pytest.mark.statistical
@pytest.mark.parametrize("d", [1, 2, 3, 7])
def test_uniform_sphere(d):
    u = samplers.uniform_sphere(unsafe_seeded_generator(400 + d), d, N)
    assert u.shape == (N, d)
    np.testing.assert_allclose(np.linalg.norm(u, axis=1), 1.0, rtol=1e-12)
    assert_uniform_direction(u)
    if d == 3:
        assert ks_pvalue(u[:, 1], stats.uniform(-1, 2).cdf) > P_MIN


@pytest.mark.statistical
def test_uniform_sphere_direction_check_has_power():
    # A normalised vector of i.i.d. uniforms (a classic bug) is not uniform on the sphere.
    rng = unsafe_seeded_generator(410)
    v = rng.random((N, 3)) * 2 - 1
    with pytest.raises(AssertionError):
        assert_uniform_direction(v)


@pytest.mark.statistical
@pytest.mark.parametrize("d", [1, 2, 3, 7])
def test_uniform_ball(d):
    x = samplers.uniform_ball(unsafe_seeded_generator(420 + d), d, N)
    assert x.shape == (N, d)
    r = np.linalg.norm(x, axis=1)
    assert np.all(r <= 1.0)
    assert ks_pvalue(r, lambda s: np.clip(s, 0, 1) ** d) > P_MIN
    assert_uniform_direction(x[r > 0])
    if d == 1:
        assert ks_pvalue(x[:, 0], stats.uniform(-1, 2).cdf) > P_MIN
    assert ks_pvalue(r, lambda s: np.clip(s, 0, 1) ** (d + 1)) < P_MIN  # power: the radius law is r^d only


# ------------------------------------------------------------------------------------------------------ shapes
@pytest.mark.parametrize(
    "draw, d",
    [
        (lambda g, size: samplers.planar_laplace(g, 1.0, size), 2),
        (lambda g, size: samplers.knorm_gamma_ball(g, 4, 1.0, size), 4),
        (lambda g, size: samplers.uniform_sphere(g, 3, size), 3),
        (lambda g, size: samplers.uniform_ball(g, 5, size), 5),
    ],
)
def test_vector_shapes(draw, d):
    g = unsafe_seeded_generator(430)
    assert draw(g, None).shape == (d,)
    assert draw(g, 7).shape == (7, d)
    assert draw(g, (2, 3)).shape == (2, 3, d)
    assert draw(g, 0).shape == (0, d)
