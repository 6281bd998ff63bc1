"""Gaussian, Laplace and exponential mechanisms: costs recomputed from Rogers (unknown-domain) Thm 1, 3, 4, 5 and the Thm 7 proof,
noise laws checked by KS / χ² at p = 1e-6 with fixed seeds."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from streamdp.mechanisms.exponential import ExponentialMechanism, exponential_mechanism_cost, pure_dp_cost
from streamdp.mechanisms.gaussian import GaussianMechanism, gaussian_cost, gaussian_sigma
from streamdp.mechanisms.laplace import LaplaceMechanism, laplace_cost, laplace_pure_epsilon
from streamdp.noise.generator import unsafe_seeded_generator

P = 1e-6


# ------------------------------------------------------------------------------------------------------- costs
def test_gaussian_cost_thm4():
    c = gaussian_cost(sigma=2.0, l2_sensitivity=3.0)
    assert c.zcdp_rho == pytest.approx(3.0**2 / (2 * 2.0**2))
    assert c.zcdp_delta == 0.0
    assert gaussian_sigma(c.zcdp_rho, 3.0) == pytest.approx(2.0)
    assert GaussianMechanism(2.0, 3.0).cost() == c
    with pytest.raises(ValueError, match="sigma"):
        gaussian_cost(0.0, 1.0)
    with pytest.raises(ValueError, match="l2_sensitivity"):
        gaussian_cost(1.0, float("inf"))


def test_laplace_cost_per_differing_count_not_l1():
    b, linf, l0 = 2.0, 3.0, 4
    c = laplace_cost(b, linf, l0)
    assert c.zcdp_rho == pytest.approx(l0 * (linf / b) ** 2 / 2)  # Rogers (unknown-domain) Thm 7 proof: 4.5
    l1_route = (l0 * linf / b) ** 2 / 2  # Δ1 = Δ0Δ∞ then Thm 3: 18
    assert c.zcdp_rho < l1_route and l1_route / c.zcdp_rho == pytest.approx(l0)
    assert laplace_pure_epsilon(b, l0 * linf) == pytest.approx(6.0)
    assert LaplaceMechanism(b, linf, l0).cost() == c
    with pytest.raises(ValueError, match="l0_sensitivity"):
        laplace_cost(1.0, 1.0, 0)
    with pytest.raises(ValueError, match="l0_sensitivity"):
        laplace_cost(1.0, 1.0, 1.5)


def test_exponential_and_pure_costs():
    assert exponential_mechanism_cost(0.8).zcdp_rho == pytest.approx(0.8**2 / 8)  # Rogers (unknown-domain) Thm 5
    assert exponential_mechanism_cost(0.8, 5).zcdp_rho == pytest.approx(5 * 0.8**2 / 8)
    assert exponential_mechanism_cost(0.8, 0).is_zero()
    assert pure_dp_cost(0.8).zcdp_rho == pytest.approx(0.8**2 / 2)  # Rogers (unknown-domain) Thm 3
    assert ExponentialMechanism(0.8).cost(3).zcdp_rho == pytest.approx(3 * 0.08)
    with pytest.raises(ValueError, match="selections"):
        exponential_mechanism_cost(1.0, -1)
    with pytest.raises(ValueError, match="epsilon"):
        ExponentialMechanism(0.0)


# ------------------------------------------------------------------------------------------------------ noise
@pytest.mark.statistical
def test_gaussian_mechanism_noise_law():
    rng = unsafe_seeded_generator(11)
    sigma, n = 2.5, 200_000
    x = np.linspace(-5, 5, n)
    z = GaussianMechanism(sigma, 1.0).release(rng, x) - x
    assert stats.kstest(z, stats.norm(scale=sigma).cdf).pvalue > P
    assert abs(z.mean()) < 5.5 * sigma / math.sqrt(n)
    assert z.var() == pytest.approx(sigma**2, rel=5.5 * math.sqrt(2 / n))
    # a wrong scale is rejected by the same test (the test can fail)
    assert stats.kstest(z, stats.norm(scale=sigma * 1.03).cdf).pvalue < P


@pytest.mark.statistical
def test_laplace_mechanism_noise_law():
    rng = unsafe_seeded_generator(12)
    b, n = 1.7, 200_000
    z = LaplaceMechanism(b, 1.0, 1).release(rng, np.zeros(n))
    assert stats.kstest(z, stats.laplace(scale=b).cdf).pvalue > P
    assert abs(z.mean()) < 5.5 * math.sqrt(2) * b / math.sqrt(n)
    assert z.var() == pytest.approx(2 * b * b, rel=0.03)
    assert stats.kstest(z, stats.laplace(scale=b * 1.03).cdf).pvalue < P


@pytest.mark.statistical
def test_exponential_mechanism_selection_law():
    rng = unsafe_seeded_generator(13)
    eps, rs = 1.2, 2.0
    scores = np.array([0.0, 1.0, 2.5, 3.0, 4.0])
    w = np.exp(eps * scores / rs)  # Rogers (unknown-domain) Thm 2/5: Pr ∝ exp(ε q/Δ(q))
    m = ExponentialMechanism(eps, rs)
    n = 20_000
    picks = np.array([m.select(rng, scores) for _ in range(n)])
    obs = np.bincount(picks, minlength=scores.size)
    assert stats.chisquare(obs, n * w / w.sum()).pvalue > P


@pytest.mark.statistical
def test_select_ranked_is_peeling():
    rng = unsafe_seeded_generator(14)
    scores = np.array([3.0, 0.0, 1.0, 2.0])
    m = ExponentialMechanism(0.7)
    w = np.exp(0.7 * scores)
    pairs = list(itertools.permutations(range(4), 2))
    expected = np.array([w[i] / w.sum() * w[j] / (w.sum() - w[i]) for i, j in pairs])
    n = 20_000
    counts = dict.fromkeys(pairs, 0)
    for _ in range(n):
        i, j = m.select_ranked(rng, scores, 2)
        counts[(int(i), int(j))] += 1
    assert stats.chisquare([counts[p] for p in pairs], n * expected).pvalue > P
    with pytest.raises(ValueError, match="k must be"):
        m.select_ranked(rng, scores, 5)
