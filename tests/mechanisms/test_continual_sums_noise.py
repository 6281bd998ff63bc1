"""The noise processes of ``continual_sums`` (tree and BLT) against explicit matrices built here, and their laws.

Known answers: the strategy matrix C of each factorization is built independently (the tree's node-incidence rows;
the BLT matrix entry by entry, inverted with numpy), and the accounting's G = CᵀC, the released noise's variance
(‖row t of B‖², or the BLUE variance by least squares for Honaker's estimate) and the square root's coefficients
(math.comb) are compared with the module's. Statistical: the kept noise of keys present from window 1 and of keys
first seen later has the law N(0, s²·v_t) (KS) and the covariance across windows the explicit B·Bᵀ gives.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import stats

from streamdp.mechanisms.blt_noise import BltNoise, BltParameters, fit_blt, sqrt_factor_coefficients
from streamdp.mechanisms.tree_noise import TreeNoise, tree_gram_column, tree_variance
from streamdp.noise.generator import unsafe_seeded_generator

warnings.simplefilter("ignore")


def tree_strategy(L: int) -> np.ndarray:
    """Rows: the tree nodes completed by L (level j, index k ≥ 1 with k·2^j ≤ L), as 0/1 rows over windows 1..L."""
    rows = []
    j = 0
    while 2 ** j <= L:
        for k in range(1, L // 2 ** j + 1):
            r = np.zeros(L)
            r[(k - 1) * 2 ** j: k * 2 ** j] = 1.0
            rows.append(r)
        j += 1
    return np.array(rows)


def decomposition(t: int) -> list[tuple[int, int]]:
    """(start, end) windows of t's binary decomposition, greedily from the left: largest powers of two first."""
    out, lo = [], 0
    while lo < t:
        size = 1 << ((t - lo).bit_length() - 1)
        out.append((lo + 1, lo + size))
        lo += size
    return out


@pytest.mark.parametrize("L", [1, 5, 6, 8, 13, 16, 100])
def test_tree_gram_is_the_node_incidence_gram(L):
    C = tree_strategy(L)
    G = C.T @ C
    for t in range(1, L + 1):
        np.testing.assert_array_equal(tree_gram_column(t, L)[1:], G[:t, t - 1])
    assert TreeNoise(L, 1.0).gram_max() == G.diagonal().max()


def test_tree_gram_known_values():
    # L = 6: windows 5 and 6 lie in nodes [5], [5,6] (and [5..8] ends after 6): G[5,5] = 2, G[5,6] = 1
    assert tree_gram_column(5, 6)[5] == 2 and tree_gram_column(6, 6)[5] == 1 and tree_gram_column(6, 6)[6] == 2
    # window 1 of L = 8 lies in [1], [1,2], [1..4], [1..8]
    assert tree_gram_column(1, 8)[1] == 4 and tree_gram_column(8, 8)[1] == 1


@pytest.mark.parametrize("t", [1, 2, 3, 5, 6, 7, 11, 12, 13])
def test_tree_variances(t):
    assert tree_variance(t, "plain") == len(decomposition(t))
    # Honaker's estimate is the BLUE of c(t) from the nodes completed by t: σ²·1ᵀ(XᵀX)⁻¹1 by least squares
    X = tree_strategy(t)  # the nodes completed by t, over windows 1..t
    blue = float(np.ones(t) @ np.linalg.solve(X.T @ X, np.ones(t)))
    assert tree_variance(t, "optimal") == pytest.approx(blue, rel=1e-12)


def test_sqrt_coefficients_square_to_the_counting_matrix():
    L = 40
    f = sqrt_factor_coefficients(L)
    assert np.allclose(f, [math.comb(2 * k, k) / 4 ** k for k in range(L)], rtol=1e-14)
    F = np.array([[f[i - j] if i >= j else 0.0 for j in range(L)] for i in range(L)])
    np.testing.assert_allclose(F @ F, np.tril(np.ones((L, L))), atol=1e-12)
    # the figure: worst-estimate std per unit sensitivity at n = 100 is Σ f_k² ≈ 2.53
    assert float(np.sum(sqrt_factor_coefficients(100) ** 2)) == pytest.approx(2.5314, abs=1e-4)


def blt_matrices(p: BltParameters):
    L = p.horizon
    th, om = np.array(p.theta), np.array(p.omega)
    M = np.eye(L)
    for i in range(L):
        for j in range(i):
            M[i, j] = float(np.sum(om * th ** (i - j - 1)))
    A = np.tril(np.ones((L, L)))
    return M, np.linalg.inv(M), A @ M, A


@pytest.mark.parametrize("L", [1, 7, 32, 100])
def test_blt_accounting_against_explicit_matrices(L):
    p = fit_blt(L, 4)
    M, C, B, A = blt_matrices(p)
    np.testing.assert_allclose(B @ C, A, atol=1e-9)  # a factorization of the counting matrix
    G = C.T @ C
    for t in range(1, L + 1):
        assert p.variance(t) == pytest.approx(float(B[t - 1] @ B[t - 1]), rel=1e-9)
        np.testing.assert_allclose(p.gram_column(t)[1:], G[:t, t - 1], rtol=1e-9, atol=1e-12)
    assert p.gram_max() == pytest.approx(G.diagonal().max(), rel=1e-12)
    # within 2 % of the exact square root's max-error objective (Σ f_k²)²
    f = sqrt_factor_coefficients(L)
    assert p.objective() <= 1.02 * float(np.sum(f * f)) ** 2


def test_blt_fit_at_the_benchmark_horizon_matches_the_square_root():
    p = fit_blt(100, 4)
    assert math.sqrt(p.objective()) < 2.5314 * 1.001  # exact square root: 2.5314; plain tree √(7·6) = 6.48
    assert p.gram_max() < 2.6 and p.variance(100) < 2.6


def explicit_B(noise, L: int) -> np.ndarray:
    if isinstance(noise, BltNoise):
        return blt_matrices(noise.params)[2]
    # plain tree: the decomposition nodes' indicator, over the node table's rows
    C = tree_strategy(L)
    B = np.zeros((L, C.shape[0]))
    for t in range(1, L + 1):
        for (a, b) in decomposition(t):
            row = np.flatnonzero((C[:, a - 1] == 1) & (C.sum(axis=1) == b - a + 1))
            B[t - 1, row] = 1.0
    return B


@pytest.mark.parametrize("kind", ["blt", "tree", "tree_optimal"])
def test_noise_law_early_and_late_keys(kind):
    L, n, s, t0 = 12, 20000, 3.0, 6
    rng = unsafe_seeded_generator(11)
    if kind == "blt":
        p = BltNoise(fit_blt(L, 4), s)
    else:
        p = TreeNoise(L, s, "optimal" if kind == "tree_optimal" else "plain")
    p.add_rows(n, rng)
    traj = []
    for t in range(1, L + 1):
        if t == t0:
            p.add_rows(n, rng)  # keys first seen at window t0: the state of a zero-data key after t0 − 1 windows
        traj.append(p.step(rng))
    for t in (t0, 9, L):
        v = p.variance(t)
        early, late = traj[t - 1][:n], traj[t - 1][n:]
        for sample in (early, late):
            assert stats.kstest(sample / (s * math.sqrt(v)), "norm").pvalue > 1e-3
    # the covariance of N(t0) and N(L) is the same for both groups
    for sample in (np.arange(n), np.arange(n, 2 * n)):
        c = float(np.mean(traj[t0 - 1][sample] * traj[L - 1][sample]))
        if kind != "tree_optimal":
            B = explicit_B(p, L)
            exact = s * s * float(B[t0 - 1] @ B[L - 1])
        else:  # Honaker's: the exact covariance from the early group is the reference for the late one
            exact = float(np.mean(traj[t0 - 1][:n] * traj[L - 1][:n]))
        sd = s * s * math.sqrt(p.variance(t0) * p.variance(L) * 2 / n)
        assert abs(c - exact) < 5 * sd


def test_noise_state_round_trips_and_is_kept():
    rng = unsafe_seeded_generator(3)
    for p in (BltNoise(fit_blt(16, 4), 2.0), TreeNoise(16, 2.0, "optimal"), TreeNoise(16, 2.0)):
        p.add_rows(5, rng)
        for _ in range(5):
            p.step(rng)
        q = type(p).from_state(p.state())
        np.testing.assert_array_equal(q.current(), p.current())
        r1, r2 = unsafe_seeded_generator(9), unsafe_seeded_generator(9)
        np.testing.assert_array_equal(q.step(r1), p.step(r2))
