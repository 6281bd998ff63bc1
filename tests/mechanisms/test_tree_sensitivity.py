"""The continual-count tree's exact user sensitivity Δ2²(C, L) and its largest popcount P(L), recomputed here
independently: by enumerating every set of C distinct windows (small L) over the tree's used nodes built from
their definition (odd index k, k·2^j ≤ L), and every window number t ≤ L. Then the cost and threshold formulas
(Rogers, Unknown-Domain Algorithms, Thm 11 with the exact constants) as known answers.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.stats import norm

from streamdp.mechanisms.binary_tree import (
    UnknownDomainBinaryTree,
    binary_tree_cost,
    binary_tree_threshold,
    completed_node_sensitivity_sq,
    max_prefix_popcount,
    node_sensitivity_sq,
)


def used_nodes(L: int) -> list[tuple[int, int]]:
    """(first, last) window of every node a prefix sum reads: level j, index k odd, complete by L."""
    out = []
    for j in range(L.bit_length() + 1):
        for k in range(1, L // 2**j + 1, 2):
            out.append(((k - 1) * 2**j + 1, k * 2**j))
    return out


def prefix_nodes(t: int) -> list[tuple[int, int]]:
    """The binary decomposition of (0, t]: left-aligned dyadic runs, largest first."""
    out, start = [], 0
    for j in range(t.bit_length() - 1, -1, -1):
        if t >> j & 1:
            out.append((start + 1, start + 2**j))
            start += 2**j
    return out


def brute_force(L: int, C: int) -> int:
    nodes = used_nodes(L)
    return max(sum(sum(1 for w in W if a <= w <= b) ** 2 for a, b in nodes)
               for W in itertools.combinations(range(1, L + 1), min(C, L)))


def test_used_nodes_are_the_nodes_prefix_sums_read():
    for L in range(1, 70):
        read = {n for t in range(1, L + 1) for n in prefix_nodes(t)}
        assert read == set(used_nodes(L))


@pytest.mark.parametrize("L", list(range(1, 19)) + [23, 31, 32, 33])
def test_sensitivity_is_the_worst_case_over_every_window_set(L):
    for C in range(1, min(L, 4) + 1):
        assert node_sensitivity_sq(L, C) == brute_force(L, C), (L, C)


def test_sensitivity_known_answers():
    # the review's figure: C = 2, L = 128 → windows 1, 2: level 0 gives 1 + 0 (window 2 is a right child),
    # levels 1..7 give 2² each: 1 + 7·4 = 29 (C²·levels = 4·8 = 32)
    assert node_sensitivity_sq(128, 2) == 29
    assert node_sensitivity_sq(128, 1) == 8
    # C = 1 is levels = ⌈log2(L+1)⌉ for every L (window 1 lies in a used node at every level)
    for L in (1, 2, 3, 100, 1023, 1024, 4097, 10**6):
        assert node_sensitivity_sq(L, 1) == math.ceil(math.log2(L + 1))
    # more contributions than windows: one per window at most
    assert node_sensitivity_sq(3, 10) == node_sensitivity_sq(3, 3) == brute_force(3, 3)


@pytest.mark.parametrize("L, C", [(64, 5), (100, 7), (128, 16), (1000, 3), (4096, 40), (10**6, 65535)])
def test_sensitivity_below_the_per_level_bound(L, C):
    levels = math.ceil(math.log2(L + 1))
    assert node_sensitivity_sq(L, C) <= C * C * levels


def test_sensitivity_of_the_prefix_by_direct_count():
    """The value for large L, C: the first C windows counted node by node (no closed form from the code)."""
    for L, C in [(128, 16), (1000, 37), (4096, 300)]:
        nodes = used_nodes(L)
        direct = sum(max(0, min(b, C) - a + 1) ** 2 for a, b in nodes)
        assert node_sensitivity_sq(L, C) == direct


def test_max_prefix_popcount_by_enumeration():
    for L in range(1, 5000):
        assert max_prefix_popcount(L) == max(bin(t).count("1") for t in range(1, L + 1))
    assert max_prefix_popcount(128) == 7 and max_prefix_popcount(127) == 7 and max_prefix_popcount(255) == 8


@pytest.mark.parametrize("sigma, L, delta, C", [(3.5, 4096, 1e-9, 1), (1.0, 10, 0.05, 2), (20.0, 128, 1e-6, 3)])
def test_cost_known_answer(sigma, L, delta, C):
    cost = binary_tree_cost(sigma, L, delta, C)
    assert cost.zcdp_rho == pytest.approx(brute_force(L, C) / (2 * sigma**2) if L <= 16 else
                                          node_sensitivity_sq(L, C) / (2 * sigma**2), rel=1e-15)
    assert cost.zcdp_delta == delta
    # L = 10, C = 2: windows {1, 2}: levels 1..3 hold both (4 each), level 0 only window 1 → 13
    if (L, C) == (10, 2):
        assert cost.zcdp_rho == pytest.approx(13 / 2)


def test_threshold_known_answers():
    # L = 128: P = 7 (127 = 1111111b); T = C + σ√7·Φ⁻¹(1 − δ/L); the statement's √(levels+1) = 3 is 1.134× larger
    sigma, L, delta = 3.0, 128, 1e-6
    z = norm.isf(delta / L)
    assert binary_tree_threshold(sigma, L, delta, 1) == pytest.approx(1 + 3.0 * math.sqrt(7) * z, rel=1e-14)
    assert 3.0 / math.sqrt(7) == pytest.approx(1.1339, abs=1e-4)
    # discrete: T = C + σ√(2·P·ln(L/δ)); L = 8 → P = 3
    assert binary_tree_threshold(2.0, 8, 1e-3, 1, "discrete_gaussian") == pytest.approx(
        1 + 2.0 * math.sqrt(2 * 3 * math.log(8000)), rel=1e-14)


def test_threshold_tail_holds_at_the_largest_popcount():
    """The threshold's union bound: a lone user's item (true count C) crosses T at a window t with probability
    Pr[N(0, popcount(t)σ²) > T − C] ≤ δ/L, with equality at the largest popcount, for every t ≤ L."""
    sigma, L, delta = 2.0, 100, 1e-4
    T = binary_tree_threshold(sigma, L, delta, 1)
    worst = max(norm.sf((T - 1) / (sigma * math.sqrt(bin(t).count("1")))) for t in range(1, L + 1))
    assert worst == pytest.approx(delta / L, rel=1e-9)


# ------------------------------------------------------------------------- release rule 3: Honaker reads every node
def completed_nodes(L: int) -> list[tuple[int, int]]:
    """(first, last) window of every node completed by L: level j, index k of either parity, k·2^j ≤ L."""
    return [((k - 1) * 2**j + 1, k * 2**j) for j in range(L.bit_length()) for k in range(1, L // 2**j + 1)]


def brute_force_all(L: int, C: int) -> int:
    nodes = completed_nodes(L)
    return max(sum(sum(1 for w in W if a <= w <= b) ** 2 for a, b in nodes)
               for W in itertools.combinations(range(1, L + 1), min(C, L)))


def honaker_release_matrix(L: int) -> np.ndarray:
    """Row t: the coefficients, over the completed nodes' noises, of the released count at t under Honaker's
    estimator — built here as the least-squares (BLUE) estimate of c(t) from the nodes completed by t (Honaker 2015;
    not from the code's recursion)."""
    nodes = completed_nodes(L)
    B = np.zeros((L, len(nodes)))
    for t in range(1, L + 1):
        idx = [i for i, (a, b) in enumerate(nodes) if b <= t]
        X = np.zeros((len(idx), t))
        for r, i in enumerate(idx):
            a, b = nodes[i]
            X[r, a - 1:b] = 1.0
        B[t - 1, idx] = np.ones(t) @ np.linalg.solve(X.T @ X, X.T)
    return B


def exact_release_loss(L: int, C: int, B: np.ndarray) -> float:
    """max over sets W of C windows of ΔᵀAᵀK⁻¹AΔ (K = BBᵀ): twice the exact zCDP ρ·σ² of releasing every running
    count c(t) + (Bz)_t, z ~ N(0, I) — the released vector's own Gaussian divergence."""
    A = np.tril(np.ones((L, L)))
    M = A.T @ np.linalg.solve(B @ B.T, A)
    best = 0.0
    for W in itertools.combinations(range(L), min(C, L)):
        d = np.zeros(L)
        d[list(W)] = 1.0
        best = max(best, float(d @ M @ d))
    return best


@pytest.mark.parametrize("L", list(range(1, 19)) + [23, 31, 32])
def test_completed_node_sensitivity_is_the_worst_case_over_every_window_set(L):
    for C in range(1, min(L, 4) + 1):
        assert completed_node_sensitivity_sq(L, C) == brute_force_all(L, C), (L, C)


def test_completed_node_sensitivity_known_answers():
    # C = 2, L = 128: windows 1, 2 share a node at levels 1..7 (2² each) and lie in two level-0 nodes: 2 + 28 = 30
    assert completed_node_sensitivity_sq(128, 2) == 30
    for L in (1, 2, 3, 100, 1023, 1024, 10**6):
        assert completed_node_sensitivity_sq(L, 1) == node_sensitivity_sq(L, 1) == math.ceil(math.log2(L + 1))
    for L, C in [(128, 16), (1000, 37), (4096, 300)]:
        assert completed_node_sensitivity_sq(L, C) == sum(max(0, min(b, C) - a + 1) ** 2
                                                          for a, b in completed_nodes(L))


@pytest.mark.parametrize("L, C", [(3, 2), (4, 3), (8, 4), (16, 4), (7, 2), (12, 3)])
def test_honaker_charge_covers_the_exact_loss_of_its_release(L, C):
    """The release rule 3 defect: rule 2 charged Honaker's estimator Δ2² over the prefix nodes only (e.g. 5 at L = 3,
    C = 2; 38 at L = 8, C = 4), below the exact loss of what it releases (6; 40.05). The charge must cover it."""
    sigma = 1.0
    loss = exact_release_loss(L, C, honaker_release_matrix(L))
    tree = UnknownDomainBinaryTree(L, sigma, 1e-3, cap=C, estimator="optimal")
    assert 2 * sigma**2 * tree.cost().zcdp_rho >= loss - 1e-9
    assert binary_tree_cost(sigma, L, 1e-3, C, "optimal").zcdp_rho == completed_node_sensitivity_sq(L, C) / 2


@pytest.mark.parametrize("L, C", [(3, 2), (8, 4), (12, 3)])
def test_plain_charge_is_exactly_the_loss_of_its_release(L, C):
    """Plain reads the L prefix nodes, one completed per window; the released counts are an invertible map of them,
    so the used-node Δ2² is the exact loss (no over-charge)."""
    nodes = completed_nodes(L)
    B = np.zeros((L, len(nodes)))
    for t in range(1, L + 1):
        for a, b in prefix_nodes(t):
            B[t - 1, nodes.index((a, b))] = 1.0
    assert exact_release_loss(L, C, B) == pytest.approx(node_sensitivity_sq(L, C), rel=1e-9)
    assert UnknownDomainBinaryTree(L, 1.0, 1e-3, cap=C).cost().zcdp_rho == node_sensitivity_sq(L, C) / 2


def test_honaker_variance_is_within_the_threshold_s_popcount_bound():
    """The threshold's √P is valid for Honaker too: its variance at t is at most popcount(t)·σ²."""
    for L in (8, 12, 16):
        B = honaker_release_matrix(L)
        for t in range(1, L + 1):
            assert float(B[t - 1] @ B[t - 1]) <= bin(t).count("1") + 1e-9
