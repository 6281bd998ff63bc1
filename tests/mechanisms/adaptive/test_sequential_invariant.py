"""Liang–Yi (adaptive budgeting) Alg. 3's invariant B_i ≥ ((m − l + 1)/m)·B before query l, enforced exactly at its boundary.

Closes a gap of the mutation audit in ``streamdp/mechanisms/adaptive/sequential.py`` (``savings_allocation_fixed``
accepted B_i one below the floor when the check used (m − l)·B). Hand values, m = 4 and B = 100 (fixed-point grid
units), worked out from Liang–Yi (adaptive budgeting) Alg. 3 lines 3–4:

    γ_l = ((l − 1)/(m − 1))·(1 − 3/4) + 3/4 = 3/4, 5/6, 11/12, 1          for l = 1, 2, 3, 4
    floor_l = ((m − l + 1)/m)·B = 100, 75, 50, 25
    r_i = γ_l·(B_i − floor_l) + B/m        (= B/m = 25 at the floor; r_i = B_i at l = m)

e.g. l = 2, B_i = 87: r = 5/6·12 + 25 = 35; l = 3, B_i = 62: r = 11/12·12 + 25 = 36.
A user one grid unit below the floor cannot arise under Alg. 3 (its budget was spent outside the sequence); the
strict allocation must refuse it rather than hand out B/m the user does not have.
"""

from __future__ import annotations

import numpy as np
import pytest

from streamdp.engine.queries.adaptive_point import KNNPoint
from streamdp.mechanisms.adaptive.sequential import savings_allocation, savings_allocation_fixed

M, B = 4, 100
FLOORS = {1: 100, 2: 75, 3: 50, 4: 25}


def _ints(*v):
    return np.array(v, dtype=np.int64)


def test_strict_fixed_point_allocation_refuses_one_unit_below_the_floor():
    """m = 4, l = 2, B = 100: the floor is 3/4·100 = 75, so B_i = 74 must raise and B_i = 75 gets B/m = 25."""
    with pytest.raises(ValueError, match="invariant"):
        savings_allocation_fixed(_ints(74), B, 2, M)
    with pytest.raises(ValueError, match="invariant"):
        savings_allocation_fixed(_ints(100, 74), B, 2, M)  # one bad user is enough
    assert savings_allocation_fixed(_ints(75), B, 2, M).tolist() == [25]


@pytest.mark.parametrize("l", [1, 2, 3, 4])
def test_the_boundary_at_every_query(l):
    """At every l: floor_l − 1 raises, floor_l gets 25 (γ_l·0 + B/m, or B_i = 25 at l = m), with strict=False the
    clipped formula is returned instead of raising. The float version enforces the same floor."""
    f = FLOORS[l]
    assert f == (M - l + 1) * B // M
    with pytest.raises(ValueError, match="invariant"):
        savings_allocation_fixed(_ints(f - 1), B, l, M)
    assert savings_allocation_fixed(_ints(f), B, l, M).tolist() == [25]
    loose = savings_allocation_fixed(_ints(f - 1), B, l, M, strict=False)
    assert 0 <= int(loose[0]) <= f - 1
    with pytest.raises(ValueError, match="invariant"):
        savings_allocation(np.array([f - 1.0]), float(B), l, M)
    assert savings_allocation(np.array([float(f)]), float(B), l, M) == pytest.approx([25.0], rel=1e-12)


def test_allocation_above_the_floor_known_answers():
    """l = 2, B_i = 87 → 35; l = 3, B_i = 62 → 36; l = 1, B_i = B → 25; l = 4, B_i = 60 → 60 (module docstring)."""
    assert savings_allocation_fixed(_ints(87), B, 2, M).tolist() == [35]
    assert savings_allocation_fixed(_ints(62), B, 3, M).tolist() == [36]
    assert savings_allocation_fixed(_ints(100), B, 1, M).tolist() == [25]
    assert savings_allocation_fixed(_ints(60), B, 4, M).tolist() == [60]


def test_the_query_kinds_allocation_refuses_a_user_below_the_floor():
    """The path the engine runs (SequentialAdaptiveQuery.allocation): budget_rho = 1e-10 per m² is B = 100 grid
    units; four queries. B_i = 74 before query 2 raises; 75 gets 25; 87 gets 35."""
    q = KNNPoint("n", queries=[{"window": w, "point": [0.0, 0.0]} for w in (1, 2, 3, 4)], k=1, budget_rho=1e-10,
                 units="m")
    with pytest.raises(ValueError, match="invariant"):
        q.allocation(_ints(74), 2)
    assert q.allocation(_ints(75, 87), 2).tolist() == [25, 35]
