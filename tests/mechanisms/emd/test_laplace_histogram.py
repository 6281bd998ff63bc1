"""LaplaceHistogram, the central user-level baseline of Imola et al. (EMD) §6.2.2 (Lemma 6.7): noise law before the projection,
its scale, and its cost.

Scale (Imola et al. (EMD) Lemma 6.7; the converted paper lost the formula, reconstructed in implementation notes on Imola et al. (EMD) and checked here):
n users each hold m items (bounded), h = normalised histogram of all n·m items. Changing one user's m items
moves at most m of the n·m unit masses, each from one bin to another, so ‖h − h'‖₁ ≤ 2m/(n·m) = 2/n. The Laplace
mechanism with ℓ1 sensitivity Δ = 2/n adds Lap(Δ/ε) = Lap(2/(n·ε)) to every bin and is ε-user-level DP; the
simplex projection that follows is post-processing. Cost: pure ε-DP is ε²/2-zCDP (Bun–Steinke 2016 Prop. 1.4;
Rogers (unknown-domain) Thm 3), δ = 0, nothing in the other notions.

The release returns only the projected vector, so the noise is observed at the smallest point that exposes it:
the argument of the projection, recorded by wrapping ``freq_est.project_to_simplex`` (the wrapper calls the real
projection, and the test checks the release equals the projection of what it recorded).
"""

import math

import numpy as np
import pytest
from scipy import stats

from streamdp.accounting.cost import COMPONENTS, LOSS_SCALE
from streamdp.mechanisms.emd import LaplaceHistogram, histogram, project_to_simplex
from streamdp.mechanisms.emd import freq_est
from streamdp.noise.generator import synthetic_data_generator, unsafe_seeded_generator

P_MIN = 1e-6


def test_bounded_change_of_one_user_moves_the_normalised_histogram_by_2_over_n():
    """The sensitivity behind the scale, on data: one user moving all m items to other bins changes h by exactly
    2/n in ℓ1 (and never more, over random replacements)."""
    n, m, k = 40, 7, 12
    g = synthetic_data_generator(5)
    data = g.integers(0, k // 2, (n, m))  # items in the lower half of the domain
    h = histogram(data.ravel(), k)
    worst = 0.0
    for trial in range(200):
        d2 = data.copy()
        d2[trial % n] = g.integers(0, k, m)
        worst = max(worst, np.abs(histogram(d2.ravel(), k) - h).sum())
    d2 = data.copy()
    d2[0] = k - 1  # every item moved to a bin no one used
    assert np.abs(histogram(d2.ravel(), k) - h).sum() == pytest.approx(2 / n, rel=1e-12)
    assert worst <= 2 / n + 1e-12


@pytest.mark.parametrize("epsilon,n_users,scale", [(0.5, 1000, 0.004), (2.0, 1, 1.0), (1.0, 8, 0.25)])
def test_scale_and_cost_known_answers(epsilon, n_users, scale):
    lb = LaplaceHistogram(epsilon, n_users, k=10)
    assert lb.scale == pytest.approx(scale, rel=1e-15)  # 2/(n·ε), by hand
    c = lb.cost()
    rho = {0.5: 0.125, 2.0: 2.0, 1.0: 0.5}[epsilon]  # ε²/2, by hand
    assert c.zcdp_rho == pytest.approx(rho, rel=1e-15)
    assert c.zcdp_delta == 0 and c.cgp_rho == 0 and c.cgp_delta == 0 and c.emd_alpha == 0 and c.emd_delta == 0
    fixed = c.to_fixed()
    assert int(fixed[COMPONENTS.index("zcdp_rho")]) == round(rho * LOSS_SCALE)
    assert [int(x) for i, x in enumerate(fixed) if COMPONENTS[i] != "zcdp_rho"] == [0] * (len(COMPONENTS) - 1)


def _released_noise(monkeypatch, lb, h, reps, seed):
    """``reps`` releases of ``lb`` on ``h``: the noise added before the projection, (reps, k)."""
    seen = []

    def recording_projection(v):
        seen.append(np.array(v, dtype=np.float64, copy=True))
        return project_to_simplex(v)

    monkeypatch.setattr(freq_est, "project_to_simplex", recording_projection)
    rng = unsafe_seeded_generator(seed)
    outs = [lb.release(rng, h) for _ in range(reps)]
    assert len(seen) == reps  # exactly one projection per release
    for pre, out in zip(seen, outs):
        np.testing.assert_array_equal(out, project_to_simplex(pre))  # the release IS the projection of pre
        assert out.min() >= 0 and out.sum() == pytest.approx(1.0)
    return np.array(seen) - h[None, :]


@pytest.mark.statistical
@pytest.mark.parametrize("epsilon,n_users,seed", [(0.5, 1000, 4401), (2.0, 1, 4402)])
def test_noise_before_projection_is_iid_laplace_2_over_n_epsilon(monkeypatch, epsilon, n_users, seed):
    """KS against Lap(2/(nε)) at 1e-6, χ² over 20 equiprobable bins, mean and variance (2b²) within 5 standard
    errors, no dependence on the bin (per-bin means); the KS test rejects Lap(1/(nε)) (sensitivity 1/n) and
    Lap(1.25·b)."""
    k, reps = 40, 200
    b = 2.0 / (n_users * epsilon)
    lb = LaplaceHistogram(epsilon, n_users, k)
    g = synthetic_data_generator(seed)
    h = histogram(g.integers(0, k, n_users * 5), k)  # n users × 5 items each
    z = _released_noise(monkeypatch, lb, h, reps, seed)
    x = z.ravel()
    N = x.size
    law = stats.laplace(0, b)
    assert stats.kstest(x, law.cdf).pvalue > P_MIN
    edges = law.ppf(np.linspace(0, 1, 21))
    obs = np.histogram(x, edges)[0]
    assert obs.sum() == N
    assert stats.chisquare(obs, np.full(20, N / 20)).pvalue > P_MIN
    # mean 0, Var = 2b²; Var of the sample variance ≈ (μ4 − σ⁴)/N = (24b⁴ − 4b⁴)/N
    assert abs(x.mean()) < 5 * math.sqrt(2) * b / math.sqrt(N)
    assert abs(x.var() - 2 * b * b) < 5 * math.sqrt(20 * b**4 / N)
    # every bin gets the same law: per-bin means within 5 standard errors (√(2b²/reps))
    assert np.all(np.abs(z.mean(axis=0)) < 5 * math.sqrt(2) * b / math.sqrt(reps))
    # power
    assert stats.kstest(x, stats.laplace(0, b / 2).cdf).pvalue < P_MIN
    assert stats.kstest(x, stats.laplace(0, 1.25 * b).cdf).pvalue < P_MIN


def test_release_rejects_a_histogram_of_the_wrong_length():
    lb = LaplaceHistogram(1.0, 10, k=5)
    with pytest.raises(ValueError, match="shape"):
        lb.release(unsafe_seeded_generator(1), np.full(4, 0.25))


@pytest.mark.parametrize("k", [0, -3, 2.5, "4", True, None])
def test_a_bad_number_of_bins_is_refused_at_construction(k):
    with pytest.raises(ValueError, match="k"):
        LaplaceHistogram(1.0, 10, k)
