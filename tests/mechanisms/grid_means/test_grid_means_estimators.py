"""The five estimators (Rameshwar–Tandon (IoT means) §III-B…E): sensitivities and noise scales recomputed from the paper's formulas,
Laplace noise goodness of fit, a Monte Carlo privacy check, costs, and the ITMS-profile check of implementation notes on Rameshwar–Tandon (IoT means)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from streamdp.accounting.cost import Cost
from streamdp.mechanisms.grid_means import (
    ArrayAveraging,
    Baseline,
    FixedQuantile,
    GridValues,
    Levy,
    OptimizedQuantile,
)
from streamdp.mechanisms.grid_means.synthetic import ITMS_MEAN, clipped_gaussian_grid, itms_count_profile
from streamdp.noise import samplers
from streamdp.noise.generator import unsafe_seeded_generator

P_MIN = 1e-6
Z_MAX = 5.0

# Hand example. Counts 5, 3, 3, 1 (U = 100):
#  * Baseline: μ = (150 + 6 + 15 + 90)/12 = 21.75, Δ = U·m*/Σm = 100·5/12;
#  * m_UB: lower median of {1, 3, 3, 5} = 3; eq. (10): Σmin(m_ℓ, m)/√m = 4, 7/√2, 10/√3, 11/2, 12/√5 for
#    m = 1…5 → argmax 3. So m_UB = 3 for every clipping estimator;
#  * BestFit, m_UB = 3: A0 = u0[:3] = (10, 20, 30), A1 = u1, A2 = u2, A3 = (90): K̄ = 4,
#    means 20, 2, 5, 90, f_arr = 29.25, Δ = U/K̄ = 25;
#  * WrapAround: r = 3, 3, 3, 1, K = ⌊10/3⌋ = 3 (u3's sample is dropped), f = (20 + 2 + 5)/3 = 9, Δ = 2U/K.
U = 100.0
HAND = {"u0": [10.0, 20.0, 30.0, 40.0, 50.0], "u1": [1.0, 2.0, 3.0], "u2": [4.0, 5.0, 6.0], "u3": [90.0]}
HAND_BESTFIT_MEANS = np.array([20.0, 2.0, 5.0, 90.0])
HAND_WRAP_MEANS = np.array([20.0, 2.0, 5.0])


def laplace_cdf(b):
    return stats.laplace(loc=0.0, scale=b).cdf


def assert_laplace_noise(noise, b):
    """KS against Lap(b) at p = 1e-6, mean 0 and variance 2b² within 5 standard errors."""
    noise = np.asarray(noise)
    assert stats.kstest(noise, laplace_cdf(b)).pvalue > P_MIN
    n = noise.size
    assert abs(noise.mean()) <= Z_MAX * math.sqrt(2 * b * b / n)
    # Var of the sample variance: (μ4 − σ⁴)/n with μ4 = 24b⁴, σ² = 2b²
    assert abs(noise.var(ddof=1) - 2 * b * b) <= Z_MAX * math.sqrt((24 - 4) * b**4 / n)


# ----------------------------------------------------------------------------------------- known answers
def test_known_answer_sensitivities_and_scales():
    rng = unsafe_seeded_generator(1)
    eps = 0.7
    for eq10 in (12 / math.sqrt(5), 11 / 2, 7 / math.sqrt(2), 4.0):
        assert 10 / math.sqrt(3) > eq10  # eq. (10) picks m = 3 here

    r = Baseline(eps, U).release(HAND, rng)
    assert r.sensitivity == pytest.approx(U * 5 / 12, rel=1e-14)
    # the granular Laplace's scale (mechanisms/granular_laplace.py): Δ/ε, up by at most a factor 1 + 2⁻³⁰/ε
    assert U * 5 / 12 / eps <= r.noise_scale == pytest.approx(U * 5 / 12 / eps, rel=2**-30 / eps)

    r = ArrayAveraging(eps, U).release(HAND, rng)
    assert (r.m_ub, r.n_arrays, r.grouping) == (3, 4, "bestfit")
    assert r.sensitivity == pytest.approx(U / 4, rel=1e-14)
    assert U / 4 / eps <= r.noise_scale == pytest.approx(U / 4 / eps, rel=2**-30 / eps)

    r = ArrayAveraging(eps, U, grouping="wraparound").release(HAND, rng)
    assert (r.m_ub, r.n_arrays) == (3, 3)
    assert r.noise_scale == pytest.approx(2 * U / 3 / eps, rel=2**-29 / eps)

    tau = U * math.sqrt(math.log(2 * 4 / 0.2) / (2 * 3))  # eq. (8), K̄ = 4, m_UB = 3, γ = 0.2
    midpoints = [(j + 0.5) * tau for j in range(math.ceil(U / tau))]
    for _ in range(50):
        r = Levy(eps, U).release(HAND, rng)
        a, b = r.interval
        assert any(a == pytest.approx(max(0.0, x - 1.5 * tau)) and b == pytest.approx(min(x + 1.5 * tau, U))
                   for x in midpoints)
        assert r.sensitivity == pytest.approx((b - a) / 4, rel=1e-12)
        assert r.noise_scale == pytest.approx(2 * (b - a) / (4 * eps), rel=2**-29 / eps)  # Lap(2(b − a)/(K̄ε))
        r = Levy(eps, U, grouping="wraparound").release(HAND, rng)
        a, b = r.interval
        assert r.noise_scale == pytest.approx(2 * 2 * (b - a) / (3 * eps), rel=2**-29 / eps)
        for cls in (FixedQuantile, OptimizedQuantile):
            r = cls(eps, U).release(HAND, rng)
            a, b = r.interval
            assert 0.0 <= a <= b <= U
            assert r.noise_scale == pytest.approx(2 * (b - a) / (4 * eps), rel=2**-29 / eps)


def test_optimized_quantile_levels():
    # t = ⌈2/ε⌉; levels (t/K̄, 1 − t/K̄), clamped to 1/2
    assert OptimizedQuantile(0.5, U).quantile_levels(164) == (4 / 164, 1 - 4 / 164)
    assert OptimizedQuantile(2.0, U).quantile_levels(164) == (1 / 164, 1 - 1 / 164)
    assert OptimizedQuantile(0.3, U).quantile_levels(10) == (0.5, 0.5)  # ⌈6.67⌉ = 7 > 10/2
    assert FixedQuantile(1.0, U).quantile_levels(164) == (0.1, 0.9)


def test_cost_and_users_charged():
    # one Laplace release: pure ε-DP ⇒ ε²/2 (Rogers (unknown-domain) Thm 3). Two steps composed in zCDP (Rogers (unknown-domain) Thm 6): the interval is an
    # exponential mechanism, ε′²/8 (Rogers (unknown-domain) Thm 5), the projected mean a Laplace release at ε/2, (ε/2)²/2:
    # Levy (ε/2)²/8 + (ε/2)²/2 = 5ε²/32; Quantile 2·(ε/4)²/8 + (ε/2)²/2 = 9ε²/64
    want = {Baseline: 1 / 2, ArrayAveraging: 1 / 2, Levy: 5 / 32, FixedQuantile: 9 / 64, OptimizedQuantile: 9 / 64}
    for cls, k in want.items():
        est = cls(0.8, U)
        assert est.cost().zcdp_rho == pytest.approx(k * 0.8**2, rel=1e-15) and est.cost().zcdp_delta == 0
        assert est.cost(2.0).zcdp_rho == pytest.approx(k * 4.0, rel=1e-15)
        assert cls.cost_at(0.8) == est.cost()
        assert est.cost().zcdp_rho <= 0.8**2 / 2  # never above what the pure ε-DP of the whole would cost
        # only users with a value in the grid pay (Rameshwar–Tandon (IoT means) Thm II.3)
        assert est.users_charged({"a": [1.0], "b": [], "c": [3.0, 4.0]}) == ("a", "c")
    # a WrapAround user whose samples all fall in the deleted partial array is still charged
    assert "u3" in ArrayAveraging(1.0, U, grouping="wraparound").users_charged(HAND)


def test_parameter_validation():
    for bad in (0, -1, float("nan"), float("inf"), "x"):
        with pytest.raises(ValueError, match="epsilon"):
            Baseline(bad, U)
        with pytest.raises(ValueError, match="upper"):
            Levy(1.0, bad)
    with pytest.raises(ValueError, match="grouping"):
        ArrayAveraging(1.0, U, grouping="firstfit")
    with pytest.raises(ValueError, match="m_ub"):
        Levy(1.0, U, m_ub="mean")
    with pytest.raises(ValueError, match="gamma"):
        Levy(1.0, U, gamma=0.0)
    with pytest.raises(ValueError, match="quantiles"):
        FixedQuantile(1.0, U, quantiles=(0.9, 0.1))
    with pytest.raises(ValueError, match="epsilon"):
        Baseline(1.0, U).cost(-1.0)


def test_same_seed_same_release_and_input_forms_agree():
    g = GridValues.from_users(HAND, U)
    seq = list(HAND.values())
    for cls in (Baseline, ArrayAveraging, Levy, FixedQuantile, OptimizedQuantile):
        est = cls(1.0, U)
        a = est.release(HAND, unsafe_seeded_generator(5))
        b = est.release(g, unsafe_seeded_generator(5))
        c = est.release(seq, unsafe_seeded_generator(5))
        assert a == b == c


def test_values_outside_range_are_clipped_before_the_mean():
    # a value of 1e9 counts as U: the release cannot be moved further than a value of U would move it
    big = dict(HAND, u3=[1e9])
    at_u = dict(HAND, u3=[U])
    for cls in (Baseline, ArrayAveraging, Levy):
        est = cls(1.0, U)
        assert est.release(big, unsafe_seeded_generator(8)) == est.release(at_u, unsafe_seeded_generator(8))


# ------------------------------------------------------------------------------------------- statistics
@pytest.mark.statistical
def test_baseline_noise_is_laplace_delta_over_eps():
    eps = 0.9
    g = GridValues.from_users(HAND, U)
    rng = unsafe_seeded_generator(100)
    est = Baseline(eps, U)
    noise = np.array([est.estimate(g, rng) for _ in range(20_000)]) - 21.75  # μ by hand
    assert_laplace_noise(noise, U * 5 / 12 / eps)


@pytest.mark.statistical
@pytest.mark.parametrize("grouping, f_arr, b", [("bestfit", HAND_BESTFIT_MEANS.mean(), U / 4),
                                                 ("wraparound", HAND_WRAP_MEANS.mean(), 2 * U / 3)])
def test_array_averaging_noise_is_laplace(grouping, f_arr, b):
    eps = 1.3
    g = GridValues.from_users(HAND, U)
    rng = unsafe_seeded_generator(101)
    est = ArrayAveraging(eps, U, grouping=grouping)
    noise = np.array([est.estimate(g, rng) for _ in range(20_000)]) - f_arr
    assert_laplace_noise(noise, b / eps)


@pytest.mark.statistical
@pytest.mark.parametrize("cls", [Levy, FixedQuantile, OptimizedQuantile])
def test_projected_mean_noise_given_interval_is_laplace(cls):
    """Given the released interval [a, b], value − mean(Π_[a,b](Ā_i)) ~ Lap(2(b − a)/(K̄ε)): the standardised
    residuals are Lap(1)."""
    eps = 1.1
    g = GridValues.from_users(HAND, U)
    rng = unsafe_seeded_generator(102)
    est = cls(eps, U)
    z = []
    for _ in range(10_000):
        r = est.release(g, rng)
        a, b = r.interval
        scale = 2 * (b - a) / (4 * eps)
        z.append((r.value - np.clip(HAND_BESTFIT_MEANS, a, b).mean()) / scale)
    assert_laplace_noise(np.array(z), 1.0)


def clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
    lo = stats.beta.ppf(alpha / 2, k, n - k + 1) if k > 0 else 0.0
    hi = stats.beta.ppf(1 - alpha / 2, k + 1, n - k) if k < n else 1.0
    return lo, hi


def empirical_epsilon_lower_bound(x: np.ndarray, y: np.ndarray, thresholds, alpha: float = P_MIN) -> float:
    """A (1 − α)-confidence lower bound on max_t log(Pr[Y > t]/Pr[X > t]) (Bonferroni over thresholds)."""
    a = alpha / len(thresholds)
    best = -np.inf
    for t in thresholds:
        py_lo, _ = clopper_pearson(int(np.count_nonzero(y > t)), y.size, a)
        _, px_hi = clopper_pearson(int(np.count_nonzero(x > t)), x.size, a)
        if py_lo > 0:
            best = max(best, math.log(py_lo / px_hi))
    return best


@pytest.mark.statistical
def test_monte_carlo_privacy_array_averaging():
    """Worst-case neighbours for BestFit array averaging: u0 is alone in A0 and its values go from all 0 to all
    U, moving f_arr by exactly Δ = U/K̄. The privacy loss on tail events must not exceed ε; the same check
    rejects a mechanism with half the noise (so the check can fail)."""
    eps = 1.0
    d0 = dict(HAND, u0=[0.0] * 5)
    d1 = dict(HAND, u0=[U] * 5)
    est = ArrayAveraging(eps, U)
    g0, g1 = GridValues.from_users(d0, U), GridValues.from_users(d1, U)
    rng = unsafe_seeded_generator(103)
    n = 30_000
    x = np.array([est.estimate(g0, rng) for _ in range(n)])
    y = np.array([est.estimate(g1, rng) for _ in range(n)])
    f1 = (100 + 2 + 5 + 90) / 4  # f_arr on d1
    b = U / 4 / eps
    thresholds = f1 + b * np.array([0.0, 0.5, 1.0, 1.5])
    assert empirical_epsilon_lower_bound(x, y, thresholds) <= eps
    # a mechanism that used half the Laplace scale (the "one user = one array" mistake for WrapAround is the
    # same factor 2) is caught:
    f0 = (0 + 2 + 5 + 90) / 4
    xb = f0 + samplers.laplace(rng, b / 2, n)
    yb = f1 + samplers.laplace(rng, b / 2, n)
    assert empirical_epsilon_lower_bound(xb, yb, thresholds) > eps


# ----------------------------------------------------------------------------------------- ITMS profile
def test_itms_profile_statistics_and_baseline_identity():
    c = itms_count_profile()
    assert (c.size, c.min(), c.max(), c.sum(), int(np.median(c))) == (217, 1, 417, 17166, 46)
    # Rameshwar–Tandon (IoT means) §IV-A: the Baseline MAE is E|Lap(b)| = b = Δ_f/ε = U·m*/(Σm·ε) = 0.0242922·U/ε on the ITMS profile.
    assert 417 / 17166 == pytest.approx(0.0242922, abs=5e-8)
    g = GridValues.from_concatenated(np.full(c.sum(), 1.0), c, U)
    assert Baseline(0.5, U).release(g, unsafe_seeded_generator(0)).noise_scale == pytest.approx(
        U * 417 / 17166 / 0.5, rel=2**-30 / 0.5)


@pytest.mark.statistical
def test_itms_profile_every_clipping_method_beats_baseline():
    """implementation notes on Rameshwar–Tandon (IoT means): on clipped-Gaussian data with the ITMS count profile (U = 100), every clipping estimator has
    a smaller MAE than Baseline, whose empirical MAE is 0.0242922·U/ε."""
    eps = 1.0
    grid = clipped_gaussian_grid(unsafe_seeded_generator(2002), itms_count_profile(), U)
    mu = grid.true_mean()
    assert abs(mu - ITMS_MEAN) < 1.0  # the sample mean of 17166 draws (clipped at 0)
    rng = unsafe_seeded_generator(2003)

    n_base = 20_000
    mae_base = np.mean([abs(Baseline(eps, U).estimate(grid, rng) - mu) for _ in range(n_base)])
    analytic = 0.0242922 * U / eps
    # |Lap(b)| ~ Exp(b): mean b, standard deviation b
    assert abs(mae_base - analytic) <= Z_MAX * analytic / math.sqrt(n_base)

    n = 400
    for est in (ArrayAveraging(eps, U), Levy(eps, U), FixedQuantile(eps, U), OptimizedQuantile(eps, U),
                ArrayAveraging(eps, U, grouping="wraparound"), Levy(eps, U, grouping="wraparound"),
                FixedQuantile(eps, U, grouping="wraparound"), OptimizedQuantile(eps, U, grouping="wraparound")):
        mae = np.mean([abs(est.estimate(grid, rng) - mu) for _ in range(n)])
        assert mae < analytic, f"{est!r}: MAE {mae:.4f} ≥ Baseline {analytic:.4f}"
        if est.grouping == "bestfit":  # "by a wide margin" (Rameshwar–Tandon (IoT means) §IV-B)
            assert mae < 0.5 * analytic, f"{est!r}: MAE {mae:.4f}"
