"""range_counts eliminates with β0 = β/4 (Liang–Yi (adaptive budgeting) Remark 6): the round-1 elimination rate of users at Proj_Γ = −1 is the
Gaussian tail at h = λ(1, β0/(c·n))·σ_1. (Review of 2026-11-23: a mutant with β0 = β passed every other test.)
"""
import math
import warnings

import numpy as np
from scipy import stats

from streamdp.mechanisms.adaptive.range_count import Rectangle, range_count_pie
from streamdp.noise.generator import unsafe_seeded_generator

warnings.filterwarnings("ignore")


def lam1(beta):
    return math.sqrt(2 * math.log(2 / beta))


def test_round_one_s1_rate_uses_beta_over_four():
    rect = Rectangle.axis_aligned(0.0, 0.0, 100.0, 100.0)
    n, c, beta, rho = 2000, 4, 0.1, 50.0  # sigma_1 = 1/sqrt(2*rho/c) = 0.2
    x = np.column_stack([np.full(n, 1.0), np.linspace(30, 70, n)])  # Proj_Gamma = -1 for every user
    sigma1 = 1 / math.sqrt(2 * rho / c)
    p_quarter = stats.norm.cdf(1 / sigma1 - lam1(beta / 4 / (c * n)))  # P(ybar_1 < -h) at beta0 = beta/4
    p_full = stats.norm.cdf(1 / sigma1 - lam1(beta / (c * n)))  # ... at beta0 = beta
    rng = unsafe_seeded_generator(77)
    hits = trials = 0
    for _ in range(5):
        res = range_count_pie(rng, x, rect, rho, privatization="distance", c=c, split="even", beta=beta)
        hits += int(np.count_nonzero(np.isclose(res.executed_rho, rho / c, rtol=1e-9)))  # decided in round 1
        trials += n
    assert stats.binomtest(hits, trials, p_quarter).pvalue > 1e-6, (hits / trials, p_quarter)
    assert stats.binomtest(hits, trials, p_full).pvalue < 1e-6, (hits / trials, p_full)  # power
