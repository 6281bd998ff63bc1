"""Levy's PrivateInterval (Rameshwar–Tandon (IoT means) Alg. 3, eq. (8)): τ, bins, costs, the exponential-mechanism law, its privacy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from streamdp.mechanisms.grid_means import levy_tau, private_interval
from streamdp.mechanisms.grid_means.private_interval import (
    interval_costs,
    interval_midpoints,
    private_interval_probabilities,
)
from streamdp.noise.generator import unsafe_seeded_generator

P_MIN = 1e-6


def costs_by_definition(means, upper, tau):
    """Rameshwar–Tandon (IoT means) Alg. 3 lines 2–4 written out: ⌈U/τ⌉ midpoints, μ_i = argmin_x∈T |Ā_i − x|, c(x) = max(#<, #>)."""
    n = math.ceil(upper / tau)
    T = [(j + 0.5) * tau for j in range(n)]
    mu = [min(T, key=lambda x: (abs(a - x), x)) for a in means]
    return T, [max(sum(m < x for m in mu), sum(m > x for m in mu)) for x in T]


def test_tau_eq_8():
    # τ = U·√(log(2K̄/γ)/(2 m_UB)); ITMS numbers: U = 100, K̄ = 164, m_UB = 50, γ = 0.2
    assert levy_tau(100.0, 164, 50, 0.2) == pytest.approx(100 * math.sqrt(math.log(2 * 164 / 0.2) / 100), rel=1e-14)
    assert levy_tau(10.0, 4, 3) == pytest.approx(10 * math.sqrt(math.log(40) / 6), rel=1e-14)
    with pytest.raises(ValueError, match="gamma"):
        levy_tau(1.0, 3, 3, gamma=1.5)


def test_midpoints_and_costs_hand_example():
    # U = 10, τ = 3: ⌈10/3⌉ = 4 bins (0,3], (3,6], (6,9], (9,12] with midpoints 1.5, 4.5, 7.5, 10.5.
    # Means 0.2, 1.0, 4.0, 4.4, 9.9 → μ = 1.5, 1.5, 4.5, 4.5, 10.5;
    # c(1.5) = max(0, 3) = 3, c(4.5) = max(2, 1) = 2, c(7.5) = max(4, 1) = 4, c(10.5) = max(4, 0) = 4.
    means = [0.2, 1.0, 4.0, 4.4, 9.9]
    np.testing.assert_allclose(interval_midpoints(10.0, 3.0), [1.5, 4.5, 7.5, 10.5])
    T, c = interval_costs(means, 10.0, 3.0)
    np.testing.assert_array_equal(c, [3, 2, 4, 4])
    T_ref, c_ref = costs_by_definition(means, 10.0, 3.0)
    np.testing.assert_allclose(T, T_ref)
    np.testing.assert_array_equal(c, c_ref)


def test_costs_match_definition_on_random_inputs():
    gen = unsafe_seeded_generator(21)
    for _ in range(200):
        upper = float(gen.uniform(1, 100))
        tau = float(gen.uniform(0.05, 1.2)) * upper
        means = gen.uniform(0, upper, size=gen.integers(1, 15))
        T, c = interval_costs(means, upper, tau)
        T_ref, c_ref = costs_by_definition(list(means), upper, tau)
        np.testing.assert_allclose(T, T_ref)
        np.testing.assert_array_equal(c, c_ref)


@pytest.mark.parametrize("eps_total", [0.5, 2.0, 8.0])
def test_probabilities_are_exp_minus_eps_c_over_4(eps_total):
    means = [0.2, 1.0, 4.0, 4.4, 9.9]
    c = np.array([3, 2, 4, 4])
    w = np.exp(-eps_total * c / 4)  # Rameshwar–Tandon (IoT means) Alg. 3 line 5 with the total ε (Levy spends ε/2 here)
    _, p = private_interval_probabilities(means, eps_total / 2, 3.0, 10.0)
    np.testing.assert_allclose(p, w / w.sum(), rtol=1e-12)
    # WrapAround: utility sensitivity 2 → exp(−ε c / 8)
    w2 = np.exp(-eps_total * c / 8)
    _, p2 = private_interval_probabilities(means, eps_total / 2, 3.0, 10.0, utility_sensitivity=2)
    np.testing.assert_allclose(p2, w2 / w2.sum(), rtol=1e-12)


@pytest.mark.statistical
def test_sampling_matches_the_exponential_mechanism_chi2():
    means, upper, tau, eps_total = [0.2, 1.0, 4.0, 4.4, 9.9], 10.0, 3.0, 2.0
    c = np.array([3, 2, 4, 4])
    p = np.exp(-eps_total * c / 4)
    p /= p.sum()
    # [a, b] = [max(0, x − 3τ/2), min(x + 3τ/2, U)] for x = 1.5, 4.5, 7.5, 10.5
    intervals = [(max(0.0, x - 1.5 * tau), min(x + 1.5 * tau, upper)) for x in (1.5, 4.5, 7.5, 10.5)]
    assert intervals == [(0.0, 6.0), (0.0, 9.0), (3.0, 10.0), (6.0, 10.0)]
    rng = unsafe_seeded_generator(2024)
    n = 40_000
    obs = np.zeros(4)
    for _ in range(n):
        ab = private_interval(means, eps_total / 2, tau, upper, rng)
        obs[intervals.index(ab)] += 1
    assert stats.chisquare(obs, n * p).pvalue > P_MIN


def _neighbour_max_log_ratio(means, eps_i, tau, upper, moved: int, utility_sensitivity: int) -> float:
    """max over neighbours (``moved`` array means relocated to every bin) and outputs x of log Q_D(x)/Q_D'(x)."""
    n_bins = math.ceil(upper / tau)
    spots = [(j + 0.5) * tau for j in range(n_bins)] + [0.0, upper]
    _, p = private_interval_probabilities(means, eps_i, tau, upper, utility_sensitivity)
    worst = -np.inf
    for targets in np.array(np.meshgrid(*[spots] * moved)).T.reshape(-1, moved):
        other = np.array(means, dtype=float)
        other[:moved] = np.minimum(targets, upper)
        _, q = private_interval_probabilities(other, eps_i, tau, upper, utility_sensitivity)
        worst = max(worst, float(np.max(np.abs(np.log(p) - np.log(q)))))
    return worst


def test_exact_privacy_of_the_interval_step():
    """Exact (not Monte Carlo) check: the law over T moves by at most e^{ε_I} between neighbours."""
    upper, tau, eps_i = 10.0, 1.5, 1.0
    gen = unsafe_seeded_generator(5)
    for _ in range(20):
        means = gen.uniform(0, upper, size=6)
        # BestFit: a user changes one array mean; Δc = 1.
        assert _neighbour_max_log_ratio(means, eps_i, tau, upper, 1, 1) <= eps_i + 1e-9
        # WrapAround: a user changes two array means; with Δc = 2 the step stays ε_I-DP …
        assert _neighbour_max_log_ratio(means, eps_i, tau, upper, 2, 2) <= eps_i + 1e-9
    # … whereas Alg. 3 unchanged (Δc = 1) is not ε_I-DP when two means move (the erratum in notes):
    means = np.array([4.9, 5.1] * 4)
    assert _neighbour_max_log_ratio(means, eps_i, tau, upper, 2, 1) > eps_i + 0.5


def test_interval_cost_is_the_exponential_mechanism_cost():
    from streamdp.accounting.cost import Cost
    from streamdp.mechanisms.grid_means.private_interval import private_interval_cost

    # an exponential mechanism at ε (weights exp(−ε·c/(2Δc))): ε-DP with range ε ⇒ ε²/8-zCDP (Rogers (unknown-domain) Thm 5)
    assert private_interval_cost(0.5) == Cost(zcdp_rho=0.5**2 / 8)
    with pytest.raises(ValueError, match="epsilon"):
        private_interval_cost(0.0)
