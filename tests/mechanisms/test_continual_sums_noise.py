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


def tree_strategy(L: int, estimator: str = "optimal") -> np.ndarray:
    """Rows: the tree nodes completed by L (level j, index k ≥ 1 with k·2^j ≤ L), as 0/1 rows over windows 1..L —
    all of them (what Honaker's ``optimal`` estimate reads), or for ``plain`` those of odd k (the left children,
    the only nodes a binary decomposition uses)."""
    rows = []
    j = 0
    while 2 ** j <= L:
        for k in range(1, L // 2 ** j + 1, 2 if estimator == "plain" else 1):
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


@pytest.mark.parametrize("estimator", ["plain", "optimal"])
@pytest.mark.parametrize("L", [1, 5, 6, 8, 13, 16, 100])
def test_tree_gram_is_the_node_incidence_gram(L, estimator):
    C = tree_strategy(L, estimator)
    G = C.T @ C
    for t in range(1, L + 1):
        np.testing.assert_array_equal(tree_gram_column(t, L, estimator)[1:], G[:t, t - 1])
        np.testing.assert_array_equal(TreeNoise(L, 1.0, estimator).gram_column(t), tree_gram_column(t, L, estimator))
    assert TreeNoise(L, 1.0, estimator).gram_max() == G.diagonal().max()


def test_tree_gram_known_values():
    # L = 6: windows 5 and 6 lie in nodes [5], [6], [5,6] (and [5..8] ends after 6); plain reads [5] and [5,6] only
    # ([6] is a right child): all nodes G[5,5] = 2, G[5,6] = 1, G[6,6] = 2; plain G[6,6] = 1
    assert tree_gram_column(5, 6, "optimal")[5] == 2 and tree_gram_column(6, 6, "optimal")[5] == 1
    assert tree_gram_column(6, 6, "optimal")[6] == 2 and tree_gram_column(6, 6, "plain")[6] == 1
    assert tree_gram_column(5, 6, "plain")[5] == 2 and tree_gram_column(6, 6, "plain")[5] == 1
    # window 1 of L = 8 lies in [1], [1,2], [1..4], [1..8] (all left children); window 8 in [8], [7,8], [5..8],
    # [1..8], of which plain reads only [1..8]
    for est in ("plain", "optimal"):
        assert tree_gram_column(1, 8, est)[1] == 4 and tree_gram_column(8, 8, est)[1] == 1
    assert tree_gram_column(8, 8, "optimal")[8] == 4 and tree_gram_column(8, 8, "plain")[8] == 1


@pytest.mark.parametrize("L", [3, 6, 8, 13, 16])
def test_the_charged_gram_is_the_exact_loss_of_the_plain_release_and_covers_honakers(L):
    """The release of every running total c + Bz (z ~ N(0, I)) is a Gaussian vector; one user's Δ moves it by AΔ,
    so its Rényi divergence is α·ΔᵀAᵀ(BBᵀ)⁻¹AΔ/2. Plain: that matrix IS the used-node Gram (the release is an
    invertible map of the L used nodes) — charging every completed node over-charged. Honaker: it is below the
    every-completed-node Gram (psd order), which is what it is charged."""
    A = np.tril(np.ones((L, L)))
    G_plain = np.array([np.concatenate([tree_gram_column(t, L, "plain")[1:], np.zeros(L - t)]) for t in
                        range(1, L + 1)])
    G_plain = np.triu(G_plain.T) + np.triu(G_plain.T, 1).T  # the columns hold s ≤ t
    B = explicit_B(TreeNoise(L, 1.0, "plain"), L)
    np.testing.assert_allclose(A.T @ np.linalg.solve(B @ B.T, A), G_plain, atol=1e-9)
    # Honaker's estimate as the least-squares estimate of c(t) from the nodes completed by t
    C_all = tree_strategy(L, "optimal")
    Bh = np.zeros((L, C_all.shape[0]))
    ends = np.array([int(np.flatnonzero(r)[-1]) + 1 for r in C_all])
    for t in range(1, L + 1):
        idx = np.flatnonzero(ends <= t)
        X = C_all[idx][:, :t]
        Bh[t - 1, idx] = np.ones(t) @ np.linalg.solve(X.T @ X, X.T)
    loss = A.T @ np.linalg.solve(Bh @ Bh.T, A)
    gap = C_all.T @ C_all - loss
    assert np.linalg.eigvalsh((gap + gap.T) / 2).min() > -1e-9
    assert float(np.ones(L) @ gap @ np.ones(L)) >= -1e-9  # 0 up to rounding at L = 2^k


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
    C = tree_strategy(L, "optimal")
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


def test_blt_coefficients_at_a_long_horizon_against_a_triangular_solve():
    """Privacy review of 2026-12-07 (a lost review claimed the Toeplitz coefficients had to be computed term by
    term): at L = 1000 the recurrence's c (C = M⁻¹'s column), h (B's) and the variances and column norms built
    from them agree with C's column solved directly from M, term by term, to ~1e-10 relative."""
    from scipy.linalg import solve_triangular, toeplitz

    L = 1000
    p = fit_blt(L, 4)
    th, om = np.array(p.theta), np.array(p.omega)
    i = np.arange(1, L)
    mcol = np.concatenate([[1.0], (om[None, :] * th[None, :] ** (i[:, None] - 1.0)).sum(axis=1)])
    M = np.tril(toeplitz(mcol))
    e1 = np.zeros(L)
    e1[0] = 1.0
    c = solve_triangular(M, e1, lower=True)
    h = np.cumsum(mcol)
    np.testing.assert_allclose(p.c, c, rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(p.h, h, rtol=1e-8, atol=1e-12)
    assert p.variance(L) == pytest.approx(float(h @ h), rel=1e-8)
    assert p.gram_max() == pytest.approx(float(c @ c), rel=1e-8)
    for t in (1, 2, 500, 999, 1000):  # G[s, t] = Σ_{j ≤ L−t} c_{j+t−s}·c_j
        want = np.array([float(np.dot(c[t - s: t - s + L - t + 1], c[: L - t + 1])) for s in range(1, t + 1)])
        np.testing.assert_allclose(p.gram_column(t)[1:], want, rtol=1e-8, atol=1e-12)
