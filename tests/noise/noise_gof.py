"""Goodness-of-fit helpers for the noise tests (plain functions, no streamdp imports: the expected laws are
written out in the tests from their textbook formulas, never taken from the code under test)."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

P_MIN = 1e-6  # reject a sampler only below this p-value (fixed seeds → deterministic, not flaky)
Z_MAX = 5.0  # moment checks: within 5 standard errors


def chi2_pvalue(samples: np.ndarray, support: np.ndarray, pmf: np.ndarray, min_expected: float = 5.0) -> float:
    """χ² p-value of integer ``samples`` against the law ``pmf`` on the integer range ``support`` (sorted,
    contiguous, carrying essentially all the mass). The outermost values are pooled into tail bins
    (−∞, a] and [b, ∞) until every bin expects ≥ ``min_expected`` counts."""
    samples = np.asarray(samples).ravel()
    n = samples.size
    pmf = np.asarray(pmf, dtype=np.float64) / np.sum(pmf)
    exp = n * pmf
    lo, hi = 0, len(support) - 1
    while lo < hi and exp[: lo + 1].sum() < min_expected:
        lo += 1
    while hi > lo and exp[hi:].sum() < min_expected:
        hi -= 1
    a, b = int(support[lo]), int(support[hi])
    if b == a:  # (almost) all the mass on one value
        return 1.0 if np.all(samples == a) else 0.0
    obs = np.bincount(np.clip(samples, a, b) - a, minlength=b - a + 1)
    expected = np.concatenate([[exp[: lo + 1].sum()], exp[lo + 1: hi], [exp[hi:].sum()]])
    expected *= n / expected.sum()
    return float(stats.chisquare(obs, expected).pvalue)


def ks_pvalue(samples: np.ndarray, cdf) -> float:
    return float(stats.kstest(np.asarray(samples).ravel(), cdf).pvalue)


def assert_mean(samples: np.ndarray, mean: float, var: float) -> None:
    """|sample mean − mean| ≤ 5 standard errors (SE = √(var/n))."""
    x = np.asarray(samples, dtype=np.float64).ravel()
    se = math.sqrt(var / x.size)
    z = (x.mean() - mean) / se
    assert abs(z) <= Z_MAX, f"mean {x.mean():.6g} vs {mean:.6g}: {z:.2f} standard errors"


def assert_variance(samples: np.ndarray, var: float, mu4: float) -> None:
    """|sample variance − var| ≤ 5 standard errors, SE = √((μ4 − var²)/n) (μ4 the 4th central moment)."""
    x = np.asarray(samples, dtype=np.float64).ravel()
    se = math.sqrt((mu4 - var * var) / x.size)
    z = (x.var(ddof=1) - var) / se
    assert abs(z) <= Z_MAX, f"variance {x.var(ddof=1):.6g} vs {var:.6g}: {z:.2f} standard errors"
