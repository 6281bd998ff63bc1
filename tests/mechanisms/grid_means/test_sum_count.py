"""The add/remove grid-means mechanism (noisy clipped sum and count) in isolation: quantisation, calibration,
costs, threshold and the noise law, with values worked out here from the formulas."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from streamdp.mechanisms.grid_means.sum_count import ClippedSumCount, selection_threshold
from streamdp.noise.generator import unsafe_seeded_generator


def test_quantisation_is_centred_and_bounded():
    m = ClippedSumCount(100.0, 4, 0.5)
    q = m.q
    c = m.quantize([-5.0, 0.0, 50.0, 100.0, 1e9, 25.0])
    assert c.dtype == np.int64
    assert c.tolist()[:5] == [-q, -q, 0, q, q]  # clipped to [0, U] then centred: ±Q at the ends
    assert abs(int(c[5]) + q // 2) <= 1  # 25 → −Q/2 half-steps (U/4 below the centre)
    with pytest.raises(ValueError, match="finite"):
        m.quantize([float("nan")])


def test_q_puts_the_sum_noise_between_2_29_and_2_30_half_steps():
    for rho, m_ub in [(0.125, 5), (1e-3, 100), (2.0, 1), (50.0, 3)]:
        m = ClippedSumCount(10.0, m_ub, rho)
        assert 2**29 <= m.sigma_sum < 2**30 * (1 + 1e-12), (rho, m_ub)
        assert m.q & (m.q - 1) == 0  # a power of two


def test_calibration_is_exact_and_never_under_charges():
    for rho, m_ub, f in [(0.1, 3, 0.5), (0.3, 7, 0.25), (1.7, 1, 0.9)]:
        m = ClippedSumCount(1.0, m_ub, rho, f)
        r = Fraction(repr(rho))
        rs = Fraction(repr(f)) * r
        assert Fraction(m_ub * m.q) ** 2 / (2 * Fraction(m.sigma_sum) ** 2) <= rs
        assert Fraction(m_ub) ** 2 / (2 * Fraction(m.sigma_count) ** 2) <= r - rs
        assert m.sigma_count == pytest.approx(m_ub / math.sqrt(2 * (1 - f) * rho), rel=1e-12)
        assert m.sum_sd == pytest.approx(m_ub * 0.5 / math.sqrt(2 * f * rho), rel=1e-12)  # U/2 per value


def test_cost_of_a_cell_is_rho_times_a_squared_over_m_ub_squared():
    m = ClippedSumCount(100.0, 4, 0.5)
    assert m.cell_cost(4, 1e-6).zcdp_rho == 0.5 and m.cell_cost(4, 1e-6).zcdp_delta == 1e-6
    assert m.cell_cost(2).zcdp_rho == pytest.approx(0.5 / 4) and m.cell_cost(0).is_zero()
    with pytest.raises(ValueError):
        m.cell_cost(5)
    t = m.cost_table()
    assert t[:, 0].tolist() == [0, 31250000000, 125000000000, 281250000000, 500000000000]  # ⌈0.5·a²/16·10¹²⌉


def test_threshold_known_answer_and_tail():
    # m_UB = 3, σ_N = 2, δ = 1e-4: T = 3 + 2·√(2 ln 10⁴) = 3 + 2·4.2919321 = 11.5838641
    T = selection_threshold(3, 2.0, 1e-4)
    assert T == pytest.approx(3 + 2 * math.sqrt(2 * math.log(1e4)), rel=1e-14)
    assert T == pytest.approx(11.5838641, abs=1e-6)
    # the sub-Gaussian bound holds for the discrete Gaussian's exact tail: Pr[3 + Z > T] ≤ δ
    k = np.arange(-200, 201)
    w = np.exp(-(k**2) / (2 * 4.0))
    assert w[3 + k > T].sum() / w.sum() <= 1e-4
    with pytest.raises(ValueError, match="delta_cell"):
        selection_threshold(3, 2.0, 1.0)


def test_too_small_a_rho_is_refused():
    with pytest.raises(ValueError, match="too small"):
        ClippedSumCount(1.0, 1000, 1e-20)


@pytest.mark.statistical
def test_noise_law():
    """Z_N ~ N_Z(0, σ_N²) (χ² on the exact pmf) and Z_S/σ_S ~ N(0, 1) (KS; σ_S ≥ 2²⁹), 20k draws, fixed seed."""
    m = ClippedSumCount(10.0, 2, 0.3, 0.5)  # σ_N = 2/√0.3 = 3.65
    n = 20_000
    s, c = m.noise(unsafe_seeded_generator(12), np.zeros(n, np.int64), np.full(n, 7, np.int64))
    zn = c - 7
    k = np.arange(-15, 16)
    pmf = np.exp(-(np.arange(-400, 401) ** 2) / (2 * m.sigma_count**2))
    pmf /= pmf.sum()
    full = dict(zip(range(-400, 401), pmf))
    p = np.array([full[int(x)] for x in k])
    p[0] += sum(full[x] for x in range(-400, -15))
    p[-1] += sum(full[x] for x in range(16, 401))
    obs = np.array([np.sum(np.clip(zn, -15, 15) == x) for x in k])
    assert stats.chisquare(obs, p * n).pvalue > 1e-4
    assert stats.kstest(s / m.sigma_sum, "norm").pvalue > 1e-4
    assert stats.kstest(s / (1.05 * m.sigma_sum), "norm").pvalue < 1e-4  # power


def test_publish_is_post_processing_of_the_noisy_integers():
    m = ClippedSumCount(100.0, 2, 1.0)
    q = m.q
    (a, b) = m.publish(np.array([q, -3 * q]), np.array([4, 0]))
    # S̃ = Q half-steps over Ñ = 4: mean = 50 + (100/(2Q))·Q/4 = 62.5; sum = (100/(2Q))·(Q + 4Q) = 250
    assert a == {"mean": 62.5, "sum": 250.0, "count": 4}
    assert b["mean"] is None and b["count"] == 0
