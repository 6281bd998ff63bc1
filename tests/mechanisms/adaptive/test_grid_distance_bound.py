"""The whole-sequence guarantee of the grid Gaussian rounds (PIE, range counts): Σ_j ρ_j·(d + a_j)² ≤ R·(d + A)²
with A = √(N·m)·2⁻³⁰/√(2R) (pie.gaussian_mechanism_cost), recomputed here with each piece's real grid distance
a_j = √m·g(σ_j), g(σ) = 2^(⌊log2 σ⌋ − 30), for even, doubling (up to 64 rounds) and arbitrary splits; and the
earlier statement R·(d + max_j a_j)², vacuous for doubling (review of 2026-12-06: A = 64 km at 64 rounds)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from streamdp.mechanisms.adaptive.pie import grid_distance_bound
from streamdp.mechanisms.granular_gaussian import granularity
from streamdp.noise.generator import synthetic_data_generator


def a_of(rho: float, m: int) -> float:
    return math.sqrt(m) * granularity(1.0 / math.sqrt(2.0 * rho))


def splits():
    B = 0.01  # per km², as examples/range_queries.toml
    for L in (1, 6):
        for c in (1, 4, 16, 64):
            even = [B / (L * c)] * (L * c)
            doubling = [B / L * 2.0 ** (j - 1) / (2.0**c - 1) for _ in range(L) for j in range(1, c + 1)]
            yield f"even L={L} c={c}", even
            yield f"doubling L={L} c={c}", doubling
    g = synthetic_data_generator(4)
    for k in range(20):
        w = g.exponential(1.0, size=int(g.integers(1, 200))) ** 6  # very uneven
        yield f"random {k}", list(B * w / w.sum())


@pytest.mark.parametrize("name, pieces", list(splits()))
@pytest.mark.parametrize("m", [1, 2])
def test_the_sum_over_pieces_is_below_R_d_plus_A_squared(name, pieces, m):
    R, N = sum(pieces), len(pieces)
    A = grid_distance_bound(R, N, m)
    assert A == pytest.approx(math.sqrt(N * m) * 2.0**-30 / math.sqrt(2 * R), rel=1e-15)
    for d in (0.0, 1e-12, 1e-9, 1e-6, 1e-3, 1.0, 100.0):
        lhs = sum(r * (d + a_of(r, m)) ** 2 for r in pieces)
        assert lhs <= R * (d + A) ** 2 * (1 + 1e-12), (name, d)


def test_the_old_bound_was_vacuous_for_doubling_and_the_new_one_is_not():
    B, c = 0.01, 64
    pieces = [B * 2.0 ** (j - 1) / (2.0**c - 1) for j in range(1, c + 1)]
    old = max(a_of(r, 1) for r in pieces)  # the largest a, put on every piece
    new = grid_distance_bound(sum(pieces), len(pieces), 1)
    # the first round has ρ = B/(2^64 − 1): σ ≈ 2^32·7 km, its grid step 16 km — put on every piece
    assert old == 16.0
    assert new < 1e-7  # 0.05 mm
    # even a handful of extra rounds only grows A by √N
    assert grid_distance_bound(B, 4 * c, 1) == pytest.approx(2 * new, rel=1e-12)
