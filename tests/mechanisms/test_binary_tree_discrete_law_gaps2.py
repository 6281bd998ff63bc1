"""The discrete-Gaussian tree's node noise is exactly N_Z(0, σ²) (CKS 2020 Def. 1), not a rounded Gaussian.

At σ = 2 (test_binary_tree_stats.py) N_Z(0, σ²) and round(N(0, σ²)) differ by ~1 % in each probability, which
20k samples cannot see; at σ = 0.5 they are far apart. Hand values (σ = 0.5, so x²/(2σ²) = 2x²):
  N_Z:              p(0) = 1/(1 + 2e⁻² + 2e⁻⁸ + 2e⁻¹⁸ + …) = 1/1.271342… = 0.786571…;
  rounded Gaussian: p(0) = Pr[|N(0, 1)| < 1] = 0.682689….
Plain estimator: the error of the noisy running count at t is the sum of popcount(t) i.i.d. node noises — one at
t = 1 and t = 2, two at t = 3 (for items present from window 1 and for items first seen at window 3, whose
level-1 node is a fresh zero-count node drawn at registration). χ² at p = 1e-6, fixed seed; the same samples
must reject the rounded-Gaussian law.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from streamdp.mechanisms.binary_tree import UnknownDomainBinaryTree
from streamdp.noise.generator import unsafe_seeded_generator

pytestmark = pytest.mark.statistical

P = 1e-6
SIGMA = 0.5
K = 12  # support ±12: N_Z(0, 0.25) mass beyond is e^{−338}


def dgauss_pmf():
    x = np.arange(-K, K + 1)
    w = np.exp(-(x.astype(float) ** 2) / (2 * SIGMA * SIGMA))
    return x, w / w.sum()


def rounded_gauss_pmf():
    x = np.arange(-K, K + 1)
    p = stats.norm.cdf((x + 0.5) / SIGMA) - stats.norm.cdf((x - 0.5) / SIGMA)
    return x, p / p.sum()


def sum_pmf(pmf, k):
    x, p = pmf
    out = np.array([1.0])
    for _ in range(k):
        out = np.convolve(out, p)
    half = (out.size - 1) // 2
    return np.arange(-half, half + 1), out


def chi2_p(samples, support, pmf, min_expected=5.0):
    samples = np.asarray(samples).ravel()
    exp = samples.size * pmf / pmf.sum()
    keep = exp >= min_expected
    lo, hi = int(np.argmax(keep)), len(keep) - 1 - int(np.argmax(keep[::-1]))
    a, b = int(support[lo]), int(support[hi])
    obs = np.bincount(np.clip(samples, a, b) - a, minlength=b - a + 1)
    expected = np.concatenate([[exp[: lo + 1].sum()], exp[lo + 1: hi], [exp[hi:].sum()]])
    expected *= samples.size / expected.sum()
    return float(stats.chisquare(obs, expected).pvalue)


def test_hand_values_of_the_two_laws():
    assert dgauss_pmf()[1][K] == pytest.approx(1 / (1 + 2 * math.exp(-2) + 2 * math.exp(-8) + 2 * math.exp(-18)),
                                               rel=1e-9)
    assert dgauss_pmf()[1][K] == pytest.approx(0.786571, abs=1e-6)
    assert rounded_gauss_pmf()[1][K] == pytest.approx(0.682689, abs=1e-6)


def test_discrete_tree_node_noise_is_the_discrete_gaussian():
    n = 30_000
    tr = UnknownDomainBinaryTree(4, SIGMA, 1e-3, noise="discrete_gaussian", estimator="plain")
    rng = unsafe_seeded_generator(2600)
    a, b = np.arange(n), np.arange(n, 2 * n)
    one = np.ones(n, dtype=np.int64)
    for t in (1, 2, 3):
        ids = a if t == 1 else (b if t == 3 else np.zeros(0, dtype=np.int64))
        tr.step(ids, one[: ids.size], rng)
        k = bin(t).count("1")
        groups = [a] if t < 3 else [a, b]
        for g in groups:
            err = tr.noisy_running_counts(g) - 1
            assert err.dtype == np.int64
            assert chi2_p(err, *sum_pmf(dgauss_pmf(), k)) > P, (t, k)
            assert chi2_p(err, *sum_pmf(rounded_gauss_pmf(), k)) < P, (t, k)
