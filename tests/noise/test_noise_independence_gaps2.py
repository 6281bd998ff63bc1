"""Independence of the draws of one call of the integer samplers (discrete Laplace, discrete Gaussian).

The χ² tests in test_noise_discrete.py check the *marginal* law only: a sampler whose outputs are dependent —
e.g. a Laplace proposal built as G − reversed(G) from ONE geometric vector instead of two, so that draw i and
draw n−1−i cancel exactly — has the right marginal and passes them, yet the noise on two released counts would
then cancel in their sum. Two checks, both at p = 1e-6 with fixed seeds:

* the sum of the k draws of one call has variance k·Var (independence), Var written here from the pmf
  (Lap_Z(t): 2q/(1−q)², q = e^{−1/t}; N_Z(0, σ²): Σ x² e^{−x²/(2σ²)} / Σ e^{−x²/(2σ²)}); χ² test on the sample
  variance of R such sums (each from its own call, as a release would draw them);
* within one large call, the correlation of draw i with draw i+1, with draw n−1−i and with draw i+n/2 is 0
  (|r|·√n below the two-sided normal quantile at p = 1e-6).
Positive control: the same checks reject a deliberately dependent sample built from the sampler's own output.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from streamdp.noise import samplers
from streamdp.noise.generator import unsafe_seeded_generator

pytestmark = pytest.mark.statistical

P = 1e-6
Z = stats.norm.isf(P / 2)


def dlaplace_var(t):
    q = math.exp(-1.0 / t)
    return 2 * q / (1 - q) ** 2


def dgauss_var(sigma):
    x = np.arange(-(math.ceil(40 * sigma) + 50), math.ceil(40 * sigma) + 51).astype(float)
    w = np.exp(-x * x / (2 * sigma * sigma))
    return float(np.sum(x * x * w) / np.sum(w))


def sum_variance_pvalue(sums, var_each, k):
    """Two-sided χ² p-value of the sample variance of ``sums`` against k·var_each (normal approximation of the
    sum is fine for k = 100)."""
    r = sums.size
    q = (r - 1) * np.var(sums, ddof=1) / (k * var_each)
    return 2 * min(stats.chi2.cdf(q, r - 1), stats.chi2.sf(q, r - 1))


def pair_correlations(x):
    x = np.asarray(x, dtype=np.float64)
    n = x.size
    h = n // 2
    pairs = [(x[:-1], x[1:]), (x[:h], x[::-1][:h]), (x[:h], x[h:2 * h])]
    return [(np.corrcoef(a, b)[0, 1], a.size) for a, b in pairs]


CASES = [
    ("discrete_laplace", samplers.discrete_laplace, 2.5, dlaplace_var(2.5)),
    ("discrete_gaussian", samplers.discrete_gaussian, 0.8, dgauss_var(0.8)),
    ("discrete_gaussian", samplers.discrete_gaussian, 3.0, dgauss_var(3.0)),
]


@pytest.mark.parametrize("name, fn, scale, var", CASES, ids=["dlaplace-2.5", "dgauss-0.8", "dgauss-3.0"])
def test_sum_of_one_call_has_k_times_the_variance(name, fn, scale, var):
    rng = unsafe_seeded_generator(2300 + int(scale * 10))
    k, r = 100, 3000
    sums = np.array([fn(rng, scale, k).sum() for _ in range(r)], dtype=np.float64)
    assert sum_variance_pvalue(sums, var, k) > P
    assert abs(sums.mean()) < Z * math.sqrt(k * var / r)


@pytest.mark.parametrize("name, fn, scale, var", CASES, ids=["dlaplace-2.5", "dgauss-0.8", "dgauss-3.0"])
def test_draws_of_one_call_are_uncorrelated(name, fn, scale, var):
    x = fn(unsafe_seeded_generator(2400 + int(scale * 10)), scale, 200_000)
    for rho, n in pair_correlations(x):
        assert abs(rho) * math.sqrt(n) < Z, f"correlation {rho:.4g} over {n} pairs"


def test_independence_checks_have_power():
    rng = unsafe_seeded_generator(2500)
    var = dlaplace_var(2.5)
    # antithetic pairs inside each call: the marginal is still Lap_Z(2.5), but x_i + x_{k−1−i} = 0
    sums = []
    for _ in range(3000):
        g = samplers.discrete_laplace(rng, 2.5, 50)
        sums.append(np.concatenate([g, -g[::-1]]).sum())
    assert sum_variance_pvalue(np.array(sums, dtype=np.float64), var, 100) < P
    g = samplers.discrete_laplace(rng, 2.5, 100_000)
    x = np.concatenate([g, -g[::-1]])
    assert any(abs(rho) * math.sqrt(n) >= Z for rho, n in pair_correlations(x))
    # a 20 % larger variance is also rejected by the sum check
    sums = np.array([samplers.discrete_laplace(rng, 2.5, 100).sum() for _ in range(3000)], dtype=np.float64)
    assert sum_variance_pvalue(sums, var / 1.2, 100) < P
