"""Liang–Yi (adaptive budgeting) Alg. 3: allocation over m sequential queries reusing savings."""

from __future__ import annotations

import numpy as np
import pytest

from streamdp.accounting.cost import LOSS_SCALE, budget_to_fixed, cost_to_fixed
from streamdp.mechanisms.adaptive.pie import split_rounds
from streamdp.mechanisms.adaptive.range_count import (
    count_error,
    range_count_baseline,
    range_count_pie,
    true_range_count,
)
from streamdp.mechanisms.adaptive.sequential import (
    SequentialBudgeting,
    gamma_l,
    reservation_to_rho,
    invariant_holds,
    run_sequential,
    savings_allocation,
    savings_allocation_fixed,
    uniform_allocation,
)
from streamdp.mechanisms.adaptive.synthetic import random_squares, synthetic_trajectories
from streamdp.noise.generator import unsafe_seeded_generator


@pytest.mark.parametrize("m", [2, 3, 8, 56])
def test_gamma_known_answer(m):
    for l in range(1, m + 1):
        assert gamma_l(l, m) == pytest.approx((l - 1) / (m - 1) * (1 - 3 / 4) + 3 / 4, rel=1e-15)
    assert gamma_l(1, m) == 0.75 and gamma_l(m, m) == 1.0


def test_gamma_m1_and_validation():
    assert gamma_l(1, 1) == 1.0
    with pytest.raises(ValueError, match="l"):
        gamma_l(0, 3)
    with pytest.raises(ValueError, match="l"):
        gamma_l(4, 3)
    with pytest.raises(ValueError, match="m"):
        gamma_l(1, 0)


def test_allocation_known_answer():
    B, m = 2.0, 5
    remaining = np.array([2.0, 1.9, 1.7, 1.6])  # query l = 1 → only B_i = B is reachable; use l = 2 (floor 1.6)
    l = 2
    g = (l - 1) / (m - 1) * 0.25 + 0.75
    expected = g * (remaining - (m - l + 1) / m * B) + B / m  # Liang–Yi (adaptive budgeting) Alg. 3 line 4, recomputed
    np.testing.assert_allclose(savings_allocation(remaining, B, l, m), expected, rtol=1e-14)
    # first query: everyone has B, gets B/m; last query: r_i = B_i
    np.testing.assert_allclose(savings_allocation(np.full(3, B), B, 1, m), B / m)
    last = np.array([0.4, 0.55, 1.3])
    np.testing.assert_array_equal(savings_allocation(last, B, m, m), last)
    # m = 1: r_i = B_i (implementation notes on Liang–Yi (adaptive budgeting))
    np.testing.assert_array_equal(savings_allocation(np.array([3.0]), 3.0, 1, 1), [3.0])
    np.testing.assert_allclose(uniform_allocation(B, m, 4), B / m)


def test_allocation_rejects_invariant_violations():
    with pytest.raises(ValueError, match="remaining"):
        savings_allocation(np.array([1.0, 0.5]), 2.0, 2, 4)  # floor is 1.5
    r = savings_allocation(np.array([1.0, 0.5]), 2.0, 2, 4, strict=False)
    assert np.all(r >= 0) and np.all(r <= [1.0, 0.5])
    with pytest.raises(ValueError, match="remaining"):
        savings_allocation(np.array([-1.0]), 2.0, 1, 4)
    with pytest.raises(ValueError, match="budget"):
        savings_allocation(np.array([1.0]), 0.0, 1, 4)


@pytest.mark.parametrize("m", [1, 2, 7, 40])
def test_invariant_holds_under_arbitrary_executed_costs(m):
    """B_i ≥ ((m−l+1)/m)·B before every query, r_i ∈ [B/m, B_i]: the filter (Liang–Yi (adaptive budgeting) eq. (7)) never halts."""
    rng = unsafe_seeded_generator(100 + m)
    n, B = 3000, 0.7
    state = SequentialBudgeting(B, m, n)
    spent = np.zeros(n)
    for l in range(1, m + 1):
        assert np.all(invariant_holds(state.remaining, B, l, m))
        assert np.all(state.remaining >= (m - l + 1) / m * B * (1 - 1e-12))
        r = state.allocate()
        assert np.all(r <= state.remaining)  # filter: spent + r ≤ B
        assert np.all(spent + r <= B * (1 + 1e-12))
        assert np.all(r >= B / m * (1 - 1e-9))
        if l == m:
            np.testing.assert_array_equal(r, state.remaining)
        # executed: a random fraction, with many users running every round (e = r) or almost none
        u = rng.random(n)
        e = np.where(u < 0.3, r, np.where(u < 0.5, r * 1e-3, r * rng.random(n)))
        state.record(e)
        spent += e
    assert state.done
    assert np.all(spent <= B * (1 + 1e-12))
    with pytest.raises(ValueError):
        state.allocate()


def test_sequential_state_validation():
    s = SequentialBudgeting(1.0, 3, 2)
    with pytest.raises(ValueError, match="allocate"):
        s.record(np.zeros(2))
    r = s.allocate()
    with pytest.raises(ValueError, match="record"):
        s.allocate()
    with pytest.raises(ValueError, match="executed"):
        s.record(r * 2)
    with pytest.raises(ValueError, match="executed"):
        s.record(np.zeros(3))
    s.record(r)


@pytest.mark.parametrize("m", [1, 2, 5, 56])
def test_fixed_point_allocation_is_exact(m):
    """Integer Alg. 3: r_i = B_i at l = m, the invariant holds exactly, and it agrees with the float formula."""
    rng = unsafe_seeded_generator(200 + m)
    B = budget_to_fixed(1e-4, LOSS_SCALE)
    n = 500
    rem = np.full(n, B, dtype=np.int64)
    for l in range(1, m + 1):
        assert np.all(m * rem.astype(object) >= (m - l + 1) * B)
        r = savings_allocation_fixed(rem, B, l, m)
        assert r.dtype == np.int64 and np.all(r <= rem) and np.all(r > 0)
        ref = savings_allocation(rem / LOSS_SCALE, B / LOSS_SCALE, l, m) * LOSS_SCALE
        assert np.all(np.abs(r - ref) <= 2)
        if l == m:
            np.testing.assert_array_equal(r, rem)
        e = (r * rng.random(n)).astype(np.int64)
        e[: n // 3] = r[: n // 3]
        rem = rem - e
    with pytest.raises(ValueError, match="invariant"):
        savings_allocation_fixed(np.array([1], dtype=np.int64), 100, 2, 4)
    with pytest.raises(ValueError, match="integer"):
        savings_allocation_fixed(np.array([1.0]), 100, 1, 4)


@pytest.mark.statistical
def test_alg3_with_savings_beats_uniform_allocation():
    """Liang–Yi (adaptive budgeting) §7.2: m range queries on synthetic trajectories; PM + Alg. 3 has lower average CountErr than
    BM with the uniform B/m allocation and than PM with B/m (savings wasted)."""
    rng = unsafe_seeded_generator(300)
    n, m, B, side, reps = 2000, 16, 2e-5, 4000.0, 8
    errs: dict[str, list[float]] = {}
    for _ in range(reps):
        X = synthetic_trajectories(rng, n, m)
        rects = [random_squares(rng, X[l], side, 1)[0] for l in range(m)]
        truths = [true_range_count(X[l], rects[l]) for l in range(m)]
        for priv in ("point", "distance"):
            for name, pie, reuse in (
                ("BM-uniform", False, False),
                ("PM-uniform", True, False),
                ("PM-alg3", True, True),
            ):

                def make(l, priv=priv, pie=pie):
                    def query(rng, r):
                        if pie:
                            res = range_count_pie(rng, X[l], rects[l], r, privatization=priv, c=10, split="doubling")
                        else:
                            res = range_count_baseline(rng, X[l], rects[l], r, privatization=priv)
                        return res.estimate, res.executed_rho

                    return query

                out = run_sequential(rng, [make(l) for l in range(m)], B, n, reuse_savings=reuse)
                assert np.all(out.executed.sum(axis=0) <= B * (1 + 1e-12))
                if not pie:
                    np.testing.assert_allclose(out.allocations, B / m)
                errs.setdefault(f"{priv} {name}", []).append(
                    np.mean([count_error(a, t) for a, t in zip(out.answers, truths)])
                )
    for priv in ("point", "distance"):
        alg3 = np.mean(errs[f"{priv} PM-alg3"])
        assert alg3 < 0.8 * np.mean(errs[f"{priv} BM-uniform"]), errs
        assert alg3 < 0.8 * np.mean(errs[f"{priv} PM-uniform"]), errs


def test_reservation_to_rho_settles_within_the_reservation():
    """Float budgets from fixed-point reservations: a survivor's executed cost, rounded up to the grid, is ≤ R."""
    rng = unsafe_seeded_generator(400)
    R = rng.integers(1, 10**13, 20000)
    R[:5] = [1, 3, 10**12, 123456789, 7 * 10**11 + 1]
    r = reservation_to_rho(R)
    assert np.all(r > 0) and np.all(r < R / LOSS_SCALE * (1 + 1e-15))
    for scheme, c in (("even", 7), ("doubling", 10), ("even", 64)):
        executed = np.cumsum(split_rounds(r, c, scheme), axis=1)[:, -1]
        fixed = np.array([cost_to_fixed(e, LOSS_SCALE) for e in executed])
        assert np.all(fixed <= R)
    with pytest.raises(ValueError, match="r_fixed"):
        reservation_to_rho(np.array([1.5]))
    with pytest.raises(ValueError, match="r_fixed"):
        reservation_to_rho(np.array([0]))
