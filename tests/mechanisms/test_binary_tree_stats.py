"""Statistical tests of the unknown-domain binary mechanism (fixed seeds, reject at p < 1e-6).

Expected laws are written here from the definitions, never taken from the code under test:
* plain estimator: error of the running count at t ~ sum of popcount(t) i.i.d. node noises;
* optimal (Honaker) estimator: Σ_{j∈bits(t)} V_j with V_0 = σ², V_j = σ²·2V_{j−1}/(σ² + 2V_{j−1});
* discrete Gaussian N_Z(0, σ²): p(x) ∝ exp(−x²/(2σ²)) on ℤ (CKS 2020 Def. 1), sums by exact convolution.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from streamdp.mechanisms.binary_tree import UnknownDomainBinaryTree
from streamdp.noise import samplers
from streamdp.noise.generator import unsafe_seeded_generator

pytestmark = pytest.mark.statistical

P_MIN = 1e-6
Z_MAX = stats.norm.isf(P_MIN / 2)  # two-sided p = 1e-6
CONFIGS = [("gaussian", "plain"), ("gaussian", "optimal"), ("discrete_gaussian", "plain")]


def bits(t):
    return [j for j in range(t.bit_length()) if t >> j & 1]


def chain(t):
    out = []
    while t > 0:
        out.append(t)
        t &= t - 1
    return out


def optimal_node_var(sigma, j):
    v = sigma**2
    for _ in range(j):
        v = sigma**2 * 2 * v / (sigma**2 + 2 * v)
    return v


def node_var(sigma, j, estimator):
    return sigma**2 if estimator == "plain" else optimal_node_var(sigma, j)


def dgauss_pmf(sigma):
    k = math.ceil(40 * sigma) + 50
    x = np.arange(-k, k + 1)
    w = np.exp(-(x.astype(float) ** 2) / (2 * sigma * sigma))
    return x, w / w.sum()


def dgauss_sum_pmf(sigma, k):
    """pmf of the sum of k i.i.d. N_Z(0, σ²), on a symmetric integer support."""
    x, p = dgauss_pmf(sigma)
    out = np.array([1.0])
    for _ in range(k):
        out = np.convolve(out, p)
    half = (out.size - 1) // 2
    return np.arange(-half, half + 1), out


def chi2_pvalue(samples, support, pmf, min_expected=5.0):
    samples = np.asarray(samples).ravel()
    exp = samples.size * pmf / pmf.sum()
    lo, hi = 0, len(support) - 1
    while lo < hi and exp[: lo + 1].sum() < min_expected:
        lo += 1
    while hi > lo and exp[hi:].sum() < min_expected:
        hi -= 1
    a, b = int(support[lo]), int(support[hi])
    obs = np.bincount(np.clip(samples, a, b) - a, minlength=b - a + 1)
    expected = np.concatenate([[exp[: lo + 1].sum()], exp[lo + 1: hi], [exp[hi:].sum()]])
    expected *= samples.size / expected.sum()
    return float(stats.chisquare(obs, expected).pvalue)


def check_centered_law(err, var, noise, sigma=None, k=None):
    """Mean 0, variance `var` (χ²), and the full law: KS vs N(0, var) (continuous) or χ² vs the exact pmf of a
    sum of k discrete Gaussians."""
    err = np.asarray(err, dtype=np.float64)
    n = err.size
    z = err.mean() / math.sqrt(var / n)
    assert abs(z) < Z_MAX, f"mean {err.mean():.4g}: z = {z:.2f}"
    if noise == "gaussian":
        q = (n - 1) * err.var(ddof=1) / var
        p_var = 2 * min(stats.chi2.cdf(q, n - 1), stats.chi2.sf(q, n - 1))
        assert p_var > P_MIN, f"variance {err.var(ddof=1):.4g} vs {var:.4g} (p = {p_var:.2g})"
        p_ks = stats.kstest(err, stats.norm(0, math.sqrt(var)).cdf).pvalue
        assert p_ks > P_MIN, f"KS p = {p_ks:.2g}"
    else:
        support, pmf = dgauss_sum_pmf(sigma, k)
        exact_var = float(np.sum(support.astype(float) ** 2 * pmf))
        mu4 = float(np.sum(support.astype(float) ** 4 * pmf))
        zv = (err.var(ddof=1) - exact_var) / math.sqrt((mu4 - exact_var**2) / n)
        assert abs(zv) < Z_MAX, f"variance {err.var(ddof=1):.4g} vs {exact_var:.4g}: z = {zv:.2f}"
        assert abs(exact_var - var) < 1e-6 * var  # N_Z(0, σ²) has variance ≈ σ² for σ ≥ 1
        p = chi2_pvalue(err.astype(np.int64), support, pmf)
        assert p > P_MIN, f"χ² p = {p:.2g}"


@pytest.mark.parametrize("noise, estimator", CONFIGS)
@pytest.mark.parametrize("keep_history", [False, True])
def test_running_count_error_law(noise, estimator, keep_history):
    """20k items with count 1 in window 1, and 20k more first seen (count 1) at window 11: the error of the noisy
    running count at t has mean 0 and the law above (new items get fresh noise for their past nodes)."""
    sigma, L, n = 2.0, 64, 20_000
    tr = UnknownDomainBinaryTree(L, sigma, 1e-9, noise=noise, estimator=estimator, keep_history=keep_history)
    rng = unsafe_seeded_generator(100 + 10 * CONFIGS.index((noise, estimator)) + keep_history)
    a, b = np.arange(n), np.arange(n, 2 * n)
    checks = {1, 2, 3, 7, 8, 11, 12, 13, 16, 21, 32, 43, 63, 64}
    seen = 0
    for t in range(1, L + 1):
        ids = a if t == 1 else (b if t == 11 else np.zeros(0, dtype=np.int64))
        rel = tr.step(ids, np.ones(ids.size, dtype=np.int64), rng)
        assert rel.selected_ids.size == 0  # T is far above 1 + noise at δ = 1e-9
        if t in checks:
            var = sum(node_var(sigma, j, estimator) for j in bits(t))
            check_centered_law(tr.noisy_running_counts(a) - 1, var, noise, sigma, len(bits(t)))
            if t >= 11:
                check_centered_law(tr.noisy_running_counts(b) - 1, var, noise, sigma, len(bits(t)))
            seen += 1
    assert seen == len(checks)


@pytest.mark.parametrize("noise, estimator, cap", [("gaussian", "plain", 1), ("gaussian", "optimal", 1),
                                                   ("discrete_gaussian", "plain", 1), ("gaussian", "plain", 2)])
def test_single_user_item_selected_with_probability_at_most_delta(noise, estimator, cap):
    """Monte Carlo of Thm 11's δ: an item held by one user (count C once) must be selected at some t ≤ L with
    probability ≤ δ_item. 200k items (100k contributed at window 1, 100k at window 9), δ_item = 0.1: a one-sided
    binomial test at 1e-6, which rejects any true rate ≥ 1.05·δ (a 2× violation gives ~20k excess items).
    Sharper check of the threshold itself: at t = 15 the fraction of noisy counts above T must match the exact
    law of C + noise (two-sided binomial test)."""
    sigma, L, delta, n = 1.0, 16, 0.1, 100_000
    tr = UnknownDomainBinaryTree(L, sigma, delta, cap=cap, noise=noise, estimator=estimator)
    rng = unsafe_seeded_generator(200 + cap + 10 * CONFIGS.index((noise, estimator)))
    g1, g9 = np.arange(n), np.arange(n, 2 * n)
    ever = set()
    for t in range(1, L + 1):
        ids = g1 if t == 1 else (g9 if t == 9 else np.zeros(0, dtype=np.int64))
        rel = tr.step(ids, np.full(ids.size, cap), rng)
        ever.update(rel.new_ids.tolist())
        if t == 15:
            k = int(np.sum(tr.noisy_running_counts(g1) > tr.threshold))
            if noise == "gaussian":
                var = sum(node_var(sigma, j, estimator) for j in bits(15))
                p_exact = stats.norm.sf((tr.threshold - cap) / math.sqrt(var))
            else:
                support, pmf = dgauss_sum_pmf(sigma, len(bits(15)))
                p_exact = float(pmf[support > tr.threshold - cap].sum())
            assert stats.binomtest(k, n, p_exact).pvalue > P_MIN, (k, n * p_exact)
            assert p_exact <= delta / L
    selected = len(ever)
    assert selected == tr.selected_ids.size
    assert stats.binom.sf(selected - 1, 2 * n, delta) > P_MIN, selected / (2 * n)
    # not vacuous: some single-user items do cross (the test sees the tail)
    assert selected > 0


def test_discrete_tail_bound_monte_carlo():
    """The bound behind the discrete threshold: a sum S of P N_Z(0, σ²) (P = the largest popcount of a window
    number ≤ L: the most nodes a released count sums) has Pr[S ≥ T − C] ≤ δ/L for T − C = σ√(2·P·ln(L/δ)). Small
    σ (where N_Z differs most from N(0, σ²)) and large δ so that the tail is measurable; the empirical tail must
    also match the exact convolution."""
    sigma, L, delta, C = 0.8, 8, 0.4, 1
    p = max(bin(t).count("1") for t in range(1, L + 1))  # 3 (t = 7)
    x = sigma * math.sqrt(2 * p * math.log(L / delta))
    tr = UnknownDomainBinaryTree(L, sigma, delta, cap=C, noise="discrete_gaussian")
    assert tr.threshold - C == pytest.approx(x, rel=1e-14)
    n = 300_000
    s = samplers.discrete_gaussian(unsafe_seeded_generator(300), sigma, (p, n)).sum(axis=0)
    k = int(np.sum(s >= x))
    support, pmf = dgauss_sum_pmf(sigma, p)
    p_exact = float(pmf[support >= x].sum())
    assert p_exact <= delta / L
    assert stats.binom.sf(k - 1, n, delta / L) > P_MIN
    assert stats.binomtest(k, n, p_exact).pvalue > P_MIN


def test_optimal_estimator_is_unbiased_with_lower_mse():
    """Same data, same σ: Honaker's estimator is unbiased at every t and its MSE over t = 1..L is lower than the
    plain one's, by the predicted ratio Σ_t Σ_{j∈bits(t)} V_j / Σ_t popcount(t)·σ²."""
    sigma, L, n = 1.5, 64, 20_000
    data = unsafe_seeded_generator(400).poisson(2.0, size=(L, n))
    truth = np.cumsum(data, axis=0)
    mse = {}
    for est, seed in (("plain", 401), ("optimal", 402)):
        tr = UnknownDomainBinaryTree(L, sigma, 1e-9, estimator=est)
        rng = unsafe_seeded_generator(seed)
        total = 0.0
        for t in range(1, L + 1):
            tr.step(np.arange(n), data[t - 1], rng)
            err = tr.noisy_running_counts(np.arange(n)) - truth[t - 1]
            var = sum(node_var(sigma, j, est) for j in bits(t))
            assert abs(err.mean() / math.sqrt(var / n)) < Z_MAX, (est, t)
            total += float(np.mean(err**2))
        mse[est] = total / L
    predicted = {e: sum(node_var(sigma, j, e) for t in range(1, L + 1) for j in bits(t)) / L for e in mse}
    for e in mse:  # each average of L·n squared errors is within 2% of its expectation
        assert mse[e] == pytest.approx(predicted[e], rel=0.02), (e, mse[e], predicted[e])
    assert mse["optimal"] < 0.85 * mse["plain"]


@pytest.mark.parametrize("estimator", ["plain", "optimal"])
def test_range_count_error_law(estimator):
    """c̃(t) − c̃(s−1) (unrounded, 5000 items, several ranges): the error law is N(0, σ²‖a_t − a_{s−1}‖²) where a_u
    are the raw-node coefficients of the estimate at u. Plain: shared decomposition nodes cancel and the error is
    the sum of the symmetric difference. Optimal: refined prefix nodes are correlated (a parent's estimate contains
    its left child's), so the coefficients are expanded here from the recursion."""
    sigma, L, n = 1.0, 32, 5000
    tr = UnknownDomainBinaryTree(L, sigma, 1e-9, estimator=estimator, keep_history=True)
    rng = unsafe_seeded_generator(500 + (estimator == "optimal"))
    data = unsafe_seeded_generator(501).integers(0, 3, size=(L, n))
    for t in range(1, L + 1):
        tr.step(np.arange(n), data[t - 1], rng)
    rows = tr._rows_of(np.arange(n))
    for s, t in [(1, 32), (2, 32), (5, 12), (9, 16), (17, 31), (13, 13)]:
        err = tr._range_noisy(rows, s, t) - data[s - 1: t].sum(axis=0)
        coef = prefix_coefficients(t, estimator)
        for node, c in prefix_coefficients(s - 1, estimator).items():
            coef[node] = coef.get(node, 0.0) - c
        var = sigma**2 * sum(c * c for c in coef.values())
        if estimator == "plain":  # independent nodes: the symmetric difference of the two decompositions
            lv = [(p & -p).bit_length() - 1 for p in set(chain(t)) ^ set(chain(s - 1))]
            assert var == pytest.approx(len(lv) * sigma**2)
        check_centered_law(err, var, "gaussian")


def refined_coefficients(j, k, estimator):
    """Coefficients over the raw node noises {(level, index)} of the estimate of node (j, k): the node itself
    (plain), or z = w_j·y + (1 − w_j)(z_left + z_right) with w_j = 2V_{j−1}/(σ² + 2V_{j−1}) (optimal, σ = 1)."""
    if estimator == "plain" or j == 0:
        return {(j, k): 1.0}
    c = 2 * optimal_node_var(1.0, j - 1)
    w = c / (1 + c)
    out = {(j, k): w}
    for child in ((j - 1, 2 * k - 1), (j - 1, 2 * k)):
        for node, v in refined_coefficients(*child, estimator).items():
            out[node] = out.get(node, 0.0) + (1 - w) * v
    return out


def prefix_coefficients(u, estimator):
    """Raw-noise coefficients of the running-count estimate at u: Σ over u's decomposition nodes."""
    out = {}
    for p in chain(u):
        j = (p & -p).bit_length() - 1
        for node, v in refined_coefficients(j, p >> j, estimator).items():
            out[node] = out.get(node, 0.0) + v
    return out
