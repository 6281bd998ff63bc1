"""The approximate-GP filter of Liang & Yi (Adaptive Privacy Budgeting, eq. (10)) wired as a cgp budget: CONT iff
f(Σr) ≤ ε with f(R) = min_{s>1} max(g_δ(s)·√R, sΛR); f is non-decreasing in R, so CONT iff Σr ≤ R*(ε, δ, Λ) —
the additive filter the budget store runs. Checked here on random cost sequences, with f evaluated by brute force
over a fine grid of s (independent of the code's bisection), and through the configuration."""

from __future__ import annotations

import math

import numpy as np
import pytest

from streamdp.accounting.cgp import approx_gp_budget, approx_gp_filter_continue
from streamdp.accounting.cost import LOSS_SCALE
from streamdp.config.kinds import ConfigError
from streamdp.config.loader import parse_config
from streamdp.noise.generator import synthetic_data_generator


def f_brute(R: float, delta: float, lam: float) -> float:
    """min over a log grid of s ∈ (1, 2/δ − 1] of max(g_δ(s)√R, sΛR), g_δ(s) = (s/(s−1))·2√(log(2/((s+1)δ)))."""
    s = 1.0 + np.logspace(-8, math.log10(2 / delta - 2), 200_000)
    g = s / (s - 1) * 2 * np.sqrt(np.maximum(np.log(2 / ((s + 1) * delta)), 0.0))
    return float(np.min(np.maximum(g * math.sqrt(R), s * lam * R)))


@pytest.mark.parametrize("eps, delta, lam", [(1.0, 1e-6, 1.0), (0.1, 1e-9, 10.0), (5.0, 1e-3, 0.01),
                                             (30.0, 1e-5, 2.0)])
def test_the_budget_is_where_the_filter_value_reaches_epsilon(eps, delta, lam):
    r = approx_gp_budget(eps, delta, lam)
    assert f_brute(r, delta, lam) <= eps * (1 + 1e-4)  # the s grid resolves the minimum to ~1e-4
    assert f_brute(r * 1.001, delta, lam) > eps * (1 + 1e-4)  # the largest such R, to 0.1 %
    # monotone: f is non-decreasing in R (the equivalence's premise)
    grid = r * np.logspace(-3, 1, 60)
    vals = [f_brute(x, delta, lam) for x in grid]
    assert all(a <= b * (1 + 1e-9) for a, b in zip(vals, vals[1:]))


def test_the_additive_filter_at_the_budget_decides_as_eq_10():
    g = synthetic_data_generator(10)
    eps, delta, lam = 2.0, 1e-6, 1.5
    r_star = approx_gp_budget(eps, delta, lam)
    agree = 0
    for _ in range(300):
        costs = g.exponential(r_star / g.integers(1, 12), size=int(g.integers(1, 12)))
        spent = 0.0
        for c in costs:  # a user's sequence: eq. (10) and spent + c ≤ R* must answer alike at every step
            eq10 = bool(approx_gp_filter_continue(spent + c, eps, delta, lam))
            additive = spent + c <= r_star
            if abs(spent + c - r_star) > 1e-9 * r_star:
                assert eq10 == additive
                agree += 1
            if not eq10:
                break
            spent += c
    assert agree > 500


def test_the_configuration_sets_cgp_rho_from_the_gp_target():
    raw = {"service": {"window_seconds": 60.0, "origin": 0.0},
           "budget": {"zcdp_rho": 1.0, "zcdp_delta": 1e-5, "gp_epsilon_per_km": 2.0, "gp_delta": 1e-6,
                      "gp_within_km": 1.5},
           "query": [{"id": "c", "kind": "continual_counts", "sigma": 3.0}]}
    cfg = parse_config(raw)
    per_km2 = approx_gp_budget(2.0, 1e-6, 1.5)
    assert cfg.budget.cgp_rho == pytest.approx(per_km2 * 1e-6, rel=1e-12)  # per m²: the ledger's unit
    assert cfg.budget.cgp_rho * LOSS_SCALE > 1  # on the fixed-point grid
    with pytest.raises(ConfigError, match="budget.gp_within_km: is required"):
        parse_config({**raw, "budget": {"gp_epsilon_per_km": 2.0, "gp_delta": 1e-6}})
    with pytest.raises(ConfigError, match="budget.cgp_rho: set either"):
        parse_config({**raw, "budget": {**raw["budget"], "cgp_rho": 1e-9}})
