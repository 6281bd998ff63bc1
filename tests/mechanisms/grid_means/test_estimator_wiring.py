"""How the projected estimators wire their interval step (Rameshwar–Tandon (IoT means) §III-D, §III-E): budget per step and utility
sensitivity under each grouping, read off the law of the released interval, and OptimizedQuantile's levels.

Closes gaps of the mutation audit in ``streamdp/mechanisms/grid_means/estimators.py``. Expected laws are worked
out here from Rameshwar–Tandon (IoT means) and implementation notes on Rameshwar–Tandon (IoT means), never read from the code under test:

* Levy (Rameshwar–Tandon (IoT means) §III-D1, Alg. 3) at ε_I = ε/2: τ = U·√(log(2K̄/γ)/(2 m_UB)) (eq. (8), γ = 0.2), ⌈U/τ⌉ bins of width τ,
  midpoints (j + ½)τ, cost c(x) = max(#{μ_i < x}, #{μ_i > x}), x̂ drawn ∝ exp(−ε_I·c(x)/(2Δc)),
  [a, b] = [max(0, x̂ − 3τ/2), min(x̂ + 3τ/2, U)]. Δc = 1 under BestFit (a user is in one array); under WrapAround a
  user can move two array means, so Δc = 2 (the erratum in private_interval.py: Alg. 3 as printed is only ε_I-DP
  for Δc = 1).
* FixedQuantile (Rameshwar–Tandon (IoT means) §III-E1): Smith's exponential mechanism for the 1/10 and 9/10 quantiles at ε/4 each; gap i of
  the padded sorted array means (i = 0 … n) is drawn ∝ width_i·exp(−(ε/4)·|i − q·n|/(2Δu)) (implementation notes on Rameshwar–Tandon (IoT means)), the
  output uniform in the gap; Δu = 1 (BestFit) or 2 (WrapAround). The interval is the two draws, sorted.
* OptimizedQuantile (Rameshwar–Tandon (IoT means) §III-E2): the (t/K̄, 1 − t/K̄) interquantile interval with t = ⌈2/ε⌉.

Statistical checks: fixed seeds, acceptance at p > 1e-6, and the nearby wrong law rejected at p < 1e-6 on the same
sample.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from streamdp.mechanisms.grid_means import FixedQuantile, Levy, OptimizedQuantile
from streamdp.noise.generator import unsafe_seeded_generator

P_MIN = 1e-6


# ------------------------------------------------------------------------------------------------------ Levy
def _levy_bin_law(eps_interval: float, delta_c: int) -> np.ndarray:
    """The setting below: all 10 array means in bin 0 of 5, so c = 0 for bin 0 and c = 10 for bins 1–4."""
    c = np.array([0, 10, 10, 10, 10], dtype=float)
    w = np.exp(-eps_interval * c / (2 * delta_c))
    return w / w.sum()


def test_levy_hand_values_of_the_interval_law():
    """τ = √(log(2·10/0.2)/(2·50)) = √(log 100/100) = 0.214597, ⌈1/τ⌉ = 5 bins; ε_I = ε/2 = 1/2:
    Δc = 2: P(bin 0) = 1/(1 + 4e^{−(1/2)·10/4}) = 1/(1 + 4e^{−1.25}) = 0.465979;
    Δc = 1: P(bin 0) = 1/(1 + 4e^{−(1/2)·10/2}) = 1/(1 + 4e^{−2.5}) = 0.752819."""
    tau = math.sqrt(math.log(100.0) / 100.0)
    assert tau == pytest.approx(0.2145966026, rel=1e-9) and math.ceil(1 / tau) == 5
    assert _levy_bin_law(0.5, 2)[0] == pytest.approx(0.465979, abs=1e-6)
    assert _levy_bin_law(0.5, 1)[0] == pytest.approx(0.752819, abs=1e-6)


@pytest.mark.statistical
@pytest.mark.parametrize("grouping,delta_c", [("bestfit", 1), ("wraparound", 2)])
def test_levy_interval_law_uses_the_grouping_utility_sensitivity(grouping, delta_c):
    """ε = 1, U = 1, m_UB = 50; 10 users with 50 values 0.05 each. Both groupings give 10 full arrays of one user
    each (BestFit: r = m_UB opens a fresh array; WrapAround: K = ⌊500/50⌋ = 10 contiguous arrays), all array means
    0.05 → bin 0 (see :func:`test_levy_hand_values_of_the_interval_law`). The released interval identifies x̂:
    bin j gives [max(0, (j − 1)τ), min((j + 2)τ, 1)], five distinct intervals. χ² of the bin counts against
    Δc = 1 (BestFit) or 2 (WrapAround); the other grouping's law is rejected on the same sample."""
    tau = math.sqrt(math.log(100.0) / 100.0)
    expected_intervals = [(max(0.0, (j - 1) * tau), min((j + 2) * tau, 1.0)) for j in range(5)]
    est = Levy(1.0, 1.0, grouping=grouping, m_ub=50)
    values = {f"u{i}": [0.05] * 50 for i in range(10)}
    rng = unsafe_seeded_generator(4301 if grouping == "bestfit" else 4302)
    n = 3000
    counts = np.zeros(5, dtype=np.int64)
    for _ in range(n):
        rel = est.release(values, rng)
        assert rel.n_arrays == 10 and rel.m_ub == 50
        j = [k for k, iv in enumerate(expected_intervals) if np.allclose(rel.interval, iv, rtol=0, atol=1e-12)]
        assert len(j) == 1, rel.interval
        counts[j[0]] += 1
    right, other = _levy_bin_law(0.5, delta_c), _levy_bin_law(0.5, 3 - delta_c)
    assert stats.chisquare(counts, right * n).pvalue > P_MIN
    assert stats.chisquare(counts, other * n).pvalue < P_MIN


# ------------------------------------------------------------------------------------------------ FixedQuantile
def _smith_cdf(x: np.ndarray, n: int, q: float, eps_each: float, delta_u: int) -> np.ndarray:
    """CDF of one Smith draw for the array means k/(n + 1), k = 1 … n, on [0, 1]: n + 1 gaps of width 1/(n + 1),
    P(i) ∝ exp(−ε_each·|i − q·n|/(2Δu)), uniform inside the gap."""
    i = np.arange(n + 1)
    p = np.exp(-eps_each * np.abs(i - q * n) / (2 * delta_u))
    p /= p.sum()
    cum = np.concatenate([[0.0], np.cumsum(p)])
    pos = np.clip(np.asarray(x, dtype=float) * (n + 1), 0.0, n + 1)
    g = np.minimum(np.floor(pos).astype(int), n)
    return cum[g] + p[g] * (pos - g)


@pytest.mark.statistical
@pytest.mark.parametrize("grouping,delta_u", [("bestfit", 1), ("wraparound", 2)])
def test_fixed_quantile_interval_spends_eps_over_4_per_end_with_the_grouping_sensitivity(grouping, delta_u):
    """ε = 2, U = 1, m_UB = 5; 10 users, user k with 5 values k/11 (k = 1 … 10): either grouping gives 10 arrays of
    one user each, means k/11, so the 11 gaps of [0, 1] all have width 1/11. Each end is an independent Smith draw at
    ε/4 = 1/2 (q = 1/10 and 9/10, q·n = 1 and 9); the interval is (min, max) of the two, so
        P(a ≤ x) = 1 − (1 − F_lo(x))(1 − F_hi(x)),   P(b ≤ x) = F_lo(x)·F_hi(x).
    KS of a and of b against these with Δu = 1 (BestFit) or 2 (WrapAround). Power on the same sample: ε/2 per end
    (the audit's mutant) and the other grouping's Δu are rejected (for at least one of the two ends). Only
    ε_each/Δu enters the law, so under WrapAround "ε/2 per end" and "Δu = 1" are the same wrong law."""
    est = FixedQuantile(2.0, 1.0, grouping=grouping, m_ub=5)
    values = {f"u{k}": [k / 11] * 5 for k in range(1, 11)}
    rng = unsafe_seeded_generator(4303 if grouping == "bestfit" else 4304)
    n_rel = 5000
    lo, hi = np.empty(n_rel), np.empty(n_rel)
    for t in range(n_rel):
        rel = est.release(values, rng)
        assert rel.n_arrays == 10 and rel.m_ub == 5
        lo[t], hi[t] = rel.interval

    def pvalues(eps_each, du):
        f_lo = lambda x: _smith_cdf(x, 10, 0.1, eps_each, du)  # noqa: E731
        f_hi = lambda x: _smith_cdf(x, 10, 0.9, eps_each, du)  # noqa: E731
        p_a = stats.kstest(lo, lambda x: 1 - (1 - f_lo(x)) * (1 - f_hi(x))).pvalue
        p_b = stats.kstest(hi, lambda x: f_lo(x) * f_hi(x)).pvalue
        return p_a, p_b

    assert min(pvalues(2.0 / 4, delta_u)) > P_MIN
    assert min(pvalues(2.0 / 2, delta_u)) < P_MIN  # ε/2 per end
    assert min(pvalues(2.0 / 4, 3 - delta_u)) < P_MIN  # the other grouping's utility sensitivity


# ------------------------------------------------------------------------------------------- OptimizedQuantile
def test_optimized_quantile_levels_are_ceil_2_over_eps_over_k_bar():
    """Rameshwar–Tandon (IoT means) §III-E2: t = ⌈2/ε⌉. ε = 0.3: 2/0.3 = 6.67 → t = 7, K̄ = 100 → (0.07, 0.93) (⌊2/ε⌋ = 6 would give 0.06).
    ε = 0.7: 2/0.7 = 2.86 → t = 3, K̄ = 50 → (0.06, 0.94). ε = 0.3 with K̄ = 10: t/K̄ = 0.7 > 1/2, both levels
    clamped to 1/2 (the estimator's documented rule)."""
    assert OptimizedQuantile(0.3, 1.0).quantile_levels(100) == (pytest.approx(0.07), pytest.approx(0.93))
    assert OptimizedQuantile(0.7, 1.0).quantile_levels(50) == (pytest.approx(0.06), pytest.approx(0.94))
    assert OptimizedQuantile(0.3, 1.0).quantile_levels(10) == (pytest.approx(0.5), pytest.approx(0.5))
