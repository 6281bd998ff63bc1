"""Liang–Yi (CGP) Thm 3.1 / Thm 4.8: Gaussian mechanism and identity query under CGP."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from streamdp.accounting.cost import Cost
from streamdp.mechanisms.geo import GaussianCGP, IdentityQueryCGP, cgp_sigma
from streamdp.noise.generator import unsafe_seeded_generator

P_MIN = 1e-6


# ----------------------------------------------------------------------------------------- known answers
def test_sigma_and_cost_known_answer():
    # Thm 3.1: σ = K/√(2ρ)
    assert GaussianCGP(0.5, lipschitz=3.0).sigma == pytest.approx(3.0 / math.sqrt(1.0))
    assert cgp_sigma(2e-4, 1.0) == pytest.approx(1 / math.sqrt(4e-4))
    assert GaussianCGP(0.5, 3.0).cost() == Cost.cgp(0.5)
    # Thm 4.8: per-point N(0, n/(2ρ) I)
    iq = IdentityQueryCGP(5e-5)
    assert iq.sigma(20000) == pytest.approx(math.sqrt(20000 / (2 * 5e-5)))
    assert iq.cost().to_fixed().tolist() == Cost(cgp_rho=5e-5).to_fixed().tolist()


def test_mean_point_error_constant_from_first_principles():
    # E‖Z‖ for Z ~ N(0, σ² I₂): ∫ r · (r/σ²) e^{−r²/(2σ²)} dr, computed numerically (not from the code).
    rho, n = 5e-5, 20000
    s = math.sqrt(n / (2 * rho))
    mean_r, _ = integrate.quad(lambda r: r * (r / s**2) * math.exp(-(r**2) / (2 * s**2)), 0, 50 * s)
    assert IdentityQueryCGP(rho).expected_point_error(n) == pytest.approx(mean_r, rel=1e-9)
    # the constant: E‖Z‖ = (√π/2)·√(n/ρ); 0.8862 = √π/2; the notes' anchor 17,725 m at n = 20000, ρ = 5e-5
    assert mean_r / math.sqrt(n / rho) == pytest.approx(math.sqrt(math.pi) / 2, rel=1e-9)
    assert math.sqrt(math.pi) / 2 == pytest.approx(0.8862, abs=5e-5)
    assert mean_r == pytest.approx(17725, abs=1.0)


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), "x"])
def test_bad_rho(bad):
    with pytest.raises(ValueError, match="rho"):
        IdentityQueryCGP(bad)


def test_bad_points():
    with pytest.raises(ValueError, match="points"):
        IdentityQueryCGP(1.0).release(unsafe_seeded_generator(0), np.array([[0.0, np.nan]]))
    with pytest.raises(ValueError, match="n must"):
        IdentityQueryCGP(1.0).sigma(0)


# ------------------------------------------------------------------------------------------ statistical
@pytest.mark.statistical
def test_identity_noise_ks_and_mean_error():
    rng = unsafe_seeded_generator(301)
    rho, n = 0.02, 400
    x = rng.uniform(-1000, 1000, (n, 2))
    iq = IdentityQueryCGP(rho)
    reps = 250
    noise = np.stack([iq.release(rng, x) - x for _ in range(reps)])  # (reps, n, 2)
    s = math.sqrt(n / (2 * rho))
    z = (noise / s).ravel()
    assert stats.kstest(z, "norm").pvalue > P_MIN
    assert abs(z.mean()) < 5 / math.sqrt(z.size)
    assert abs(z.var() - 1) < 5 * math.sqrt(2 / z.size)
    # norm/σ is Rayleigh(1); mean per-point error vs (√π/2)·√(n/ρ)
    r = np.sqrt((noise**2).sum(-1)).ravel()
    assert stats.kstest(r / s, "rayleigh").pvalue > P_MIN
    expected = math.sqrt(math.pi) / 2 * math.sqrt(n / rho)
    se = s * math.sqrt(2 - math.pi / 2) / math.sqrt(r.size)  # sd of Rayleigh(σ) = σ√(2 − π/2)
    assert abs(r.mean() - expected) < 5 * se


@pytest.mark.statistical
def test_gaussian_cgp_noise_lipschitz_scaling():
    rng = unsafe_seeded_generator(302)
    m = GaussianCGP(0.1, lipschitz=2.5)
    v = m.release(rng, np.zeros(200_000)) / (2.5 / math.sqrt(0.2))
    assert stats.kstest(v, "norm").pvalue > P_MIN


def _binned_renyi2(a, b, edges):
    pa = np.histogram(a, edges)[0] / a.size
    pb = np.histogram(b, edges)[0] / b.size
    keep = (pa > 0) & (pb > 0)
    return math.log(np.sum(pa[keep] ** 2 / pb[keep]))


@pytest.mark.statistical
def test_monte_carlo_renyi_divergence_identity_query():
    """Empirical D_2 between the outputs on two tuples at dist_∞ = Δ must not exceed the CGP bound α·ρ·Δ² at
    α = 2. Worst case under dist_∞: every point moves by Δ (each point costs ρ/n). The mean of the moved
    coordinates is a sufficient statistic for the shift, so its binned D_2 estimates the divergence of the whole
    release (post-processing cannot increase it). A mechanism with σ/√2 must fail the same check."""
    rng = unsafe_seeded_generator(303)
    rho, n = 0.05, 8
    iq = IdentityQueryCGP(rho)
    delta = math.sqrt(0.5 / rho)  # ⇒ bound 2ρΔ² = 1.0
    reps = 30_000
    xa = np.zeros((n, 2))
    xb = np.tile([[delta, 0.0]], (n, 1))
    stat_a = np.array([iq.release(rng, xa)[:, 0].mean() for _ in range(reps)])
    stat_b = np.array([iq.release(rng, xb)[:, 0].mean() for _ in range(reps)])
    bound = 2 * rho * delta**2
    sm = iq.sigma(n) / math.sqrt(n)
    edges = np.linspace(-3.5 * sm, delta + 3.5 * sm, 40)
    est = _binned_renyi2(stat_a, stat_b, edges)
    assert est <= bound + 0.1
    assert est >= 0.75 * bound  # the Gaussian mechanism is tight for D_2: the check has power
    bad_a = rng.normal(0, sm / math.sqrt(2), reps)
    bad_b = rng.normal(delta, sm / math.sqrt(2), reps)
    assert _binned_renyi2(bad_a, bad_b, edges) > bound + 0.3
