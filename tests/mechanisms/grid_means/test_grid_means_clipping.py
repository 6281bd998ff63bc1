"""m_UB rules (Rameshwar–Tandon (IoT means) Lemma III.2 median; eq. (10)). Expected values are recomputed here from the formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest

from streamdp.mechanisms.grid_means import eq10_m_ub, median_m_ub, resolve_m_ub
from streamdp.mechanisms.grid_means.clipping import check_m_ub, eq10_objective
from streamdp.mechanisms.grid_means.synthetic import itms_count_profile
from streamdp.noise.generator import unsafe_seeded_generator


def eq10_brute_force(counts) -> int:
    """argmax_{m_* ≤ m ≤ m*} Σ_ℓ min(m_ℓ, m)/√m, first maximiser (Rameshwar–Tandon (IoT means) eq. (10)), written out."""
    best, best_m = -1.0, None
    for m in range(min(counts), max(counts) + 1):
        val = sum(min(c, m) for c in counts) / math.sqrt(m)
        if val > best:
            best, best_m = val, m
    return best_m


def test_eq10_hand_example():
    # Σ min(m_ℓ, m)/√m for counts {1, 4, 9, 16}: m = 8 → 21/√8 = 7.425, m = 9 → 23/3 = 7.667,
    # m = 10 → 24/√10 = 7.589, m = 16 → 30/4 = 7.5: the maximiser is 9.
    assert 23 / 3 > 24 / math.sqrt(10) and 23 / 3 > 21 / math.sqrt(8) and 23 / 3 > 30 / 4
    assert eq10_m_ub(np.array([16, 1, 9, 4])) == 9
    np.testing.assert_allclose(eq10_objective([16, 1, 9, 4], [8, 9, 16]), [21 / math.sqrt(8), 23 / 3, 7.5])


def test_eq10_matches_brute_force_on_random_profiles():
    gen = unsafe_seeded_generator(7)
    for _ in range(200):
        counts = gen.integers(1, 60, size=gen.integers(1, 25))
        assert eq10_m_ub(counts) == eq10_brute_force(list(counts))


def test_median_is_the_lower_median_and_satisfies_lemma_III_2():
    assert median_m_ub([5, 1, 3]) == 3
    assert median_m_ub([10, 1, 3, 2]) == 2  # ⌈L/2⌉-th smallest of 1, 2, 3, 10
    gen = unsafe_seeded_generator(8)
    for _ in range(200):
        c = gen.integers(1, 100, size=gen.integers(1, 30))
        m = median_m_ub(c)
        assert m in c
        # Lemma III.2's proof needs at least ⌈L/2⌉ users with m_ℓ ≥ m_UB.
        assert np.count_nonzero(c >= m) >= math.ceil(c.size / 2)
        # … and the gain Δ_f / Δ̃_f_arr = (m*/Σm)·(Σ min(m_ℓ, m_UB))/m_UB is ≥ OPT/2 = m*·L/(2Σm).
        gain = (c.max() / c.sum()) * np.minimum(c, m).sum() / m
        assert gain >= c.max() * c.size / (2 * c.sum()) - 1e-12


def test_itms_profile_rules():
    c = itms_count_profile()
    assert median_m_ub(c) == 46  # Rameshwar–Tandon (IoT means) §IV-B: med(m_1, …, m_L) = 46
    assert eq10_m_ub(c) == eq10_brute_force(list(c))


def test_resolve_and_validation():
    assert resolve_m_ub([3, 5, 9], "median") == 5
    assert resolve_m_ub([3, 5, 9], 4) == 4
    assert resolve_m_ub([3, 5, 9], 100) == 9  # capped at m*
    for bad in ("mean", 0, -3, 2.5, True, None):
        with pytest.raises(ValueError, match="m_ub"):
            check_m_ub(bad)
    with pytest.raises(ValueError, match="counts"):
        median_m_ub([])
    with pytest.raises(ValueError, match="counts"):
        eq10_m_ub([0, 3])
