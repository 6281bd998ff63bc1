"""Synthetic check data for the grid-means estimators (Rameshwar–Tandon (IoT means) §IV-C; implementation notes on Rameshwar–Tandon (IoT means)).

The ITMS bus-speed data of Rameshwar–Tandon (IoT means) §IV-B is not public. Its published statistics are: L = 217 users,
m* = 417, m_* = 1, Σ_ℓ m_ℓ = 17166, median count 46, μ = 20.66769, σ² = 115.135, and eq. (10) gives K = 160
arrays under WrapAround and K̄ = 164 under BestFit. :func:`itms_count_profile` is a deterministic count profile
with **all** of these count statistics (the test suite checks each one):

    lower half   m_i       = ⌊1  +  45·(i/108)^0.87 + ½⌋,  i = 0 … 108   (1 … 46, the median is m_108 = 46)
    upper half   m_{108+j} = ⌊46 + 371·(j/108)^3.32 + ½⌋,  j = 1 … 108   (… 417)
    then m_215 −= 1 (the formula sums to 17167; the second-largest count absorbs the difference).

(The two exponents were chosen by a grid search for Σ = 17166 and K = 160; K̄ = 164 then holds as well.)

:func:`clipped_gaussian_grid` draws i.i.d. values Π_[0,U](X), X ~ N(μ, σ²) (Rameshwar–Tandon (IoT means) §IV-C) for a count profile;
:func:`sample_scaled` and :func:`user_scaled` are the sample-scaling (m̂_ℓ = λ·m_ℓ) and user-scaling
(L̂ = λ·L) profiles of Rameshwar–Tandon (IoT means) §IV-C.
"""

from __future__ import annotations

import math

import numpy as np

from streamdp.mechanisms.grid_means.data import GridValues, check_upper

__all__ = [
    "ITMS_MEAN",
    "ITMS_VARIANCE",
    "itms_count_profile",
    "sample_scaled",
    "user_scaled",
    "clipped_gaussian_grid",
]

ITMS_MEAN = 20.66769  # μ(D), Rameshwar–Tandon (IoT means) §IV-B
ITMS_VARIANCE = 115.135  # σ²(D), Rameshwar–Tandon (IoT means) §IV-C


def itms_count_profile() -> np.ndarray:
    """217 counts (ascending) with m_* = 1, m* = 417, Σ = 17166, median 46, eq. (10) K = 160 and K̄ = 164."""
    i = np.arange(109, dtype=np.float64)
    lower = np.floor(0.5 + 1.0 + 45.0 * (i / 108.0) ** 0.87)
    upper = np.floor(0.5 + 46.0 + 371.0 * (i[1:] / 108.0) ** 3.32)
    counts = np.concatenate([lower, upper]).astype(np.int64)
    counts[215] -= 1
    return counts


def sample_scaled(counts, lam: int) -> np.ndarray:
    """Sample scaling (Rameshwar–Tandon (IoT means) §IV-C 1): m̂_ℓ = λ·m_ℓ."""
    return np.asarray(counts, dtype=np.int64) * int(lam)


def user_scaled(counts, lam: int) -> np.ndarray:
    """User scaling (Rameshwar–Tandon (IoT means) §IV-C 2): every user replicated λ times, m̂_{λ(ℓ−1)+i} = m_ℓ."""
    return np.repeat(np.asarray(counts, dtype=np.int64), int(lam))


def clipped_gaussian_grid(rng: np.random.Generator, counts, upper: float, mean: float = ITMS_MEAN,
                          variance: float = ITMS_VARIANCE) -> GridValues:
    """One grid of i.i.d. Π_[0,U](N(μ, σ²)) values with the given per-user counts (Rameshwar–Tandon (IoT means) §IV-C)."""
    upper = check_upper(upper)
    counts = np.asarray(counts, dtype=np.int64)
    x = rng.normal(mean, math.sqrt(variance), int(counts.sum()))
    return GridValues.from_concatenated(np.clip(x, 0.0, upper), counts, upper)
