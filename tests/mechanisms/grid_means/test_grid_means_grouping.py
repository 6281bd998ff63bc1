"""WrapAround (Rameshwar–Tandon (IoT means) Alg. 1) and BestFit (Rameshwar–Tandon (IoT means) Alg. 2): K, K̄, array contents and sensitivities, hand-checked."""

from __future__ import annotations

import numpy as np
import pytest

from streamdp.mechanisms.grid_means import (
    array_averaging_sensitivity,
    array_means,
    best_fit_assignment,
    best_fit_plan,
    eq10_m_ub,
    wraparound_num_arrays,
    wraparound_plan,
)
from streamdp.mechanisms.grid_means.synthetic import itms_count_profile, user_scaled
from streamdp.noise.generator import unsafe_seeded_generator


def best_fit_reference(counts, m_ub):
    """Rameshwar–Tandon (IoT means) Alg. 2 transcribed literally: L empty arrays; users by non-increasing count (stable); each user's
    r = min(m_ℓ, m_UB) samples go to the least-indexed array of maximal fill among those with room for r."""
    L = len(counts)
    w = [0] * L
    order = sorted(range(L), key=lambda u: -counts[u])
    assign = [None] * L
    for u in order:
        r = min(counts[u], m_ub)
        cand = [i for i in range(L) if m_ub - w[i] >= r]
        best = max(w[i] for i in cand)
        i = min(i for i in cand if w[i] == best)
        w[i] += r
        assign[u] = i
    # Arrays are opened in index order, so the non-empty ones are 0 … K̄−1.
    k_bar = sum(1 for x in w if x > 0)
    assert all(x > 0 for x in w[:k_bar])
    return assign, k_bar


def test_wraparound_hand_example():
    # counts 5, 3, 3, 2 with m_UB = 4: r = 4, 3, 3, 2, Σ = 12 → K = ⌊12/4⌋ = 3 full arrays
    # A1 = u0[0:4]; A2 = u1[0:3] + u2[0:1]; A3 = u2[1:3] + u3[0:2]; u0's 5th value is clipped away.
    counts = np.array([5, 3, 3, 2])
    values = np.array([1, 2, 3, 4, 100,  10, 20, 30,  5, 6, 7,  8, 9], dtype=float)
    plan = wraparound_plan(counts, 4)
    assert plan.n_arrays == 3 == wraparound_num_arrays(counts, 4) == (4 + 3 + 3 + 2) // 4
    np.testing.assert_array_equal(plan.fill(), [4, 4, 4])
    np.testing.assert_allclose(array_means(values, plan), [(1 + 2 + 3 + 4) / 4, (10 + 20 + 30 + 5) / 4,
                                                           (6 + 7 + 8 + 9) / 4])
    assert array_averaging_sensitivity(50.0, plan) == pytest.approx(2 * 50.0 / 3)  # 2U/K


def test_wraparound_sorts_users_and_deletes_the_partial_array():
    # counts 2, 6 (user 1 first after sorting), m_UB = 3: r = 3, 2 (user 1, user 0), Σ = 5 → K = 1:
    # A1 = user 1's first 3 values; user 0's two values land in the deleted partial array.
    counts = np.array([2, 6])
    values = np.array([0.0, 0.0, 7.0, 8.0, 9.0, 50.0, 50.0, 50.0])
    plan = wraparound_plan(counts, 3)
    assert plan.n_arrays == 1
    np.testing.assert_allclose(array_means(values, plan), [8.0])


def test_best_fit_hand_example_prefers_the_fullest_array():
    # counts 5, 3, 3, 1 with m_UB = 7 (sorted order is the input order):
    # u0 → A0 (fill 5); u1 (3 > room 2) → A1 (3); u2 → rooms 2 | 4 → A1 (6);
    # u3 (1) fits A0 (fill 5) and A1 (fill 6) → the fullest, A1 (first-fit would pick A0). K̄ = 2.
    counts = np.array([5, 3, 3, 1])
    assign, k_bar = best_fit_assignment(counts, 7)
    assert list(assign) == [0, 1, 1, 1] and k_bar == 2
    plan = best_fit_plan(counts, 7)
    np.testing.assert_array_equal(plan.fill(), [5, 7])
    values = np.arange(12, dtype=float)  # u0: 0..4, u1: 5..7, u2: 8..10, u3: 11
    np.testing.assert_allclose(array_means(values, plan), [2.0, np.mean([5, 6, 7, 8, 9, 10, 11])])
    assert array_averaging_sensitivity(50.0, plan) == pytest.approx(50.0 / 2)  # U/K̄
    assert wraparound_num_arrays(counts, 7) == 1  # ⌊12/7⌋ ≤ K̄


def test_best_fit_second_hand_example():
    # counts 5, 3, 3, 2, 1, 1, m_UB = 4: r = 4, 3, 3, 2, 1, 1
    # u0 → A0 (4, full); u1 → A1 (3); u2 → A2 (3); u3 → A3 (2); u4 → A1 (fill 3, least index of the fullest);
    # u5 → A2. K̄ = 4, WrapAround K = ⌊14/4⌋ = 3.
    counts = np.array([5, 3, 3, 2, 1, 1])
    assign, k_bar = best_fit_assignment(counts, 4)
    assert list(assign) == [0, 1, 2, 3, 1, 2] and k_bar == 4
    assert wraparound_num_arrays(counts, 4) == 3


def test_best_fit_matches_literal_transcription_and_invariants():
    gen = unsafe_seeded_generator(11)
    for _ in range(300):
        counts = gen.integers(1, 30, size=gen.integers(1, 40))
        m_ub = int(gen.integers(1, 35))
        assign, k_bar = best_fit_assignment(counts, m_ub)
        ref_assign, ref_k = best_fit_reference(list(counts), m_ub)
        assert list(assign) == ref_assign and k_bar == ref_k
        plan = best_fit_plan(counts, m_ub)
        r = np.minimum(counts, m_ub)
        assert plan.sample_index.size == r.sum()
        assert plan.fill().max() <= m_ub and plan.fill().min() >= 1
        assert k_bar >= wraparound_num_arrays(counts, m_ub)  # Rameshwar–Tandon (IoT means) §III-A2: K̄ ≥ K
        # every user in exactly one array, with its first r_ℓ samples
        owner = np.repeat(np.arange(counts.size), counts)[plan.sample_index]
        for u in range(counts.size):
            assert np.unique(plan.sample_array[owner == u]).size == 1
            np.testing.assert_array_equal(np.sort(plan.sample_index[owner == u]),
                                          np.arange(counts[:u].sum(), counts[:u].sum() + r[u]))


def test_wraparound_invariants():
    gen = unsafe_seeded_generator(12)
    for _ in range(300):
        counts = gen.integers(1, 30, size=gen.integers(1, 40))
        m_ub = int(gen.integers(1, counts.max() + 1))
        plan = wraparound_plan(counts, m_ub)
        r = np.minimum(counts, m_ub)
        assert plan.n_arrays == r.sum() // m_ub
        assert np.all(plan.fill() == m_ub)
        owner = np.repeat(np.arange(counts.size), counts)[plan.sample_index]
        for u in range(counts.size):
            touched = np.unique(plan.sample_array[owner == u])
            assert touched.size <= 2 and (touched.size < 2 or touched[1] == touched[0] + 1)


def test_itms_profile_reproduces_002_K_and_K_bar():
    """Rameshwar–Tandon (IoT means) §IV-B: with m_UB by eq. (10), K = 160 (WrapAround) and K̄ = 164 (BestFit)."""
    c = itms_count_profile()
    m_ub = eq10_m_ub(c)
    assert wraparound_num_arrays(c, m_ub) == int(np.minimum(c, m_ub).sum() // m_ub) == 160
    assert best_fit_assignment(c, m_ub)[1] == best_fit_reference(list(c), m_ub)[1] == 164
    # Lemma IV.2 (user scaling): K̄ scales by λ.
    assert best_fit_assignment(user_scaled(c, 3), m_ub)[1] == 3 * 164
