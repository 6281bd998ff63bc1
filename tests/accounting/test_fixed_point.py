"""Fixed-point costs and budgets (accounting/cost.py): a cost rounds UP and a budget DOWN, exactly, from the number's
shortest decimal (what an operator wrote) — checked by hand and against rational arithmetic (``fractions.Fraction``
of the decimal text), not against the code's own floats."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from streamdp.accounting.cost import (DELTA_SCALE, INT64_MAX, LOSS_SCALE, budget_to_fixed, cost_to_fixed,
                                      costs_to_fixed)


def exact_up(x: float, scale: int) -> int:
    return math.ceil(Fraction(f"{x!r}") * scale)


def exact_down(x: float, scale: int) -> int:
    return math.floor(Fraction(f"{x!r}") * scale)


def test_hand_values():
    assert cost_to_fixed(1.5e-12, LOSS_SCALE) == 2 and budget_to_fixed(1.5e-12, LOSS_SCALE) == 1
    assert cost_to_fixed(2.5e-18, DELTA_SCALE) == 3 and budget_to_fixed(2.5e-18, DELTA_SCALE) == 2
    assert cost_to_fixed(0.5, LOSS_SCALE) == budget_to_fixed(0.5, LOSS_SCALE) == 500_000_000_000  # exact in binary
    assert cost_to_fixed(0.0, DELTA_SCALE) == budget_to_fixed(0.0, DELTA_SCALE) == 0
    assert budget_to_fixed(math.inf, LOSS_SCALE) == INT64_MAX
    # decimals as written: 0.1 (0.1000000000000000055… as a float) is one tenth, 0.416 (0.41599999999999998…) is 0.416
    assert cost_to_fixed(0.1, DELTA_SCALE) == budget_to_fixed(0.1, DELTA_SCALE) == 100_000_000_000_000_000
    assert budget_to_fixed(0.416, LOSS_SCALE) == cost_to_fixed(0.416, LOSS_SCALE) == 416_000_000_000
    assert sum(cost_to_fixed(0.1, LOSS_SCALE) for _ in range(10)) == budget_to_fixed(1.0, LOSS_SCALE)
    # past 2**53 the float product is off: 0.14568674262649717·10**18 = 145686742626497170 exactly, while
    # fl(x·10**18) = 145686742626497152 (the old code charged …153, 17 units short)
    assert cost_to_fixed(0.14568674262649717, DELTA_SCALE) == 145_686_742_626_497_170
    assert cost_to_fixed(1 / 3, LOSS_SCALE) == 333_333_333_334 and budget_to_fixed(1 / 3, LOSS_SCALE) == 333_333_333_333


# found by the mutation audit: the float product rounded the wrong way past 2**53 (by 15 units of 10**-18 here)
KNOWN_HARD = [0.14568674262649717, 0.26633056045725956, 0.416, 0.1, 1 / 3, 2 / 3, 0.7, 1e-12, 3e-18]


def _inputs(seed: int = 7, n: int = 4000) -> list[float]:
    rng = np.random.default_rng(seed)  # test inputs, not noise
    xs = list(KNOWN_HARD)
    xs += (10.0 ** rng.uniform(-19, 5, n)).tolist()  # every magnitude a cost or budget takes
    xs += (rng.integers(1, 10**6, n) / 10.0 ** rng.integers(0, 19, n)).tolist()  # decimal-looking values
    xs += [k * 2.0**-e for k, e in zip(rng.integers(1, 1000, 200).tolist(), rng.integers(0, 60, 200).tolist())]
    return xs


@pytest.mark.parametrize("scale", [LOSS_SCALE, DELTA_SCALE])
def test_rounding_is_exact_against_rationals(scale):
    xs = [x for x in _inputs() if Fraction(x) * scale < INT64_MAX]
    bad_up = [x for x in xs if cost_to_fixed(x, scale) != exact_up(x, scale)]
    bad_down = [x for x in xs if budget_to_fixed(x, scale) != exact_down(x, scale)]
    assert not bad_up[:5] and not bad_down[:5]


@pytest.mark.parametrize("scale", [LOSS_SCALE, DELTA_SCALE])
def test_vectorised_costs_equal_the_exact_ceiling(scale):
    rng = np.random.default_rng(5)
    grid = np.concatenate([rng.integers(1, 2**53, 1500), rng.integers(1, 2**40, 1500)]) / float(scale)
    # costs on a grid point and one or two ulps either side (where the fast path must tell d < N/s from d > N/s)
    near = np.concatenate([grid, np.nextafter(grid, 0), np.nextafter(grid, np.inf),
                           np.nextafter(np.nextafter(grid, 0), 0)])
    xs = np.array([x for x in _inputs(seed=11) + near.tolist() if Fraction(x) * scale < 2**62]
                  + [0.0, 5e-300, 1e-320])
    got = costs_to_fixed(xs, scale)
    want = np.array([exact_up(float(x), scale) for x in xs], dtype=np.int64)
    assert got.dtype == np.int64
    assert np.flatnonzero(got != want).tolist() == []
    assert costs_to_fixed(xs.reshape(-1, 1)[:6], scale).shape == (6, 1)


def test_sums_of_fixed_costs_never_pass_the_budget_in_exact_arithmetic():
    """The module's promise: Σ fixed(cost_i) ≤ fixed(budget) implies Σ cost_i ≤ budget exactly (as decimals)."""
    rng = np.random.default_rng(3)
    for _ in range(300):
        costs = (10.0 ** rng.uniform(-6, 0, 20)).tolist()
        budget = float(sum(Fraction(c) for c in costs)) * (1 + rng.uniform(-1e-15, 1e-15))
        if sum(cost_to_fixed(c, DELTA_SCALE) for c in costs) <= budget_to_fixed(budget, DELTA_SCALE):
            assert sum(Fraction(repr(c)) for c in costs) <= Fraction(repr(budget))


def test_out_of_range_is_refused():
    for bad in (-1e-12, math.nan, math.inf):
        with pytest.raises(ValueError):
            cost_to_fixed(bad, LOSS_SCALE)
        with pytest.raises(ValueError):
            costs_to_fixed([0.1, bad], LOSS_SCALE)
    with pytest.raises(OverflowError):
        cost_to_fixed(1e7, DELTA_SCALE)
    with pytest.raises(OverflowError):
        costs_to_fixed([1e7], DELTA_SCALE)
    with pytest.raises(ValueError):
        budget_to_fixed(-1.0, LOSS_SCALE)
    assert budget_to_fixed(1e300, LOSS_SCALE) == INT64_MAX
