"""The Laplace mechanism for a real statistic released as a float, on a power-of-two grid (no floating-point leak).

``statistic + Lap(Δ/ε)`` computed in floating point is not ε-DP: which doubles the sum can reach depends on the
statistic, so some outputs are possible under one dataset and impossible under its neighbour (Mironov, *On
Significance of the Least Significant Bits for Differential Privacy*, CCS 2012; the 2026-11-23 noise review
reproduced it on the grid means: 41.8 % of the releases for one dataset could not occur for a neighbour). Here
the release is an integer multiple of a public granularity g = 2^j, as in Google's differential-privacy library's
"secure noise" (granularity) and OpenDP's discretized mechanisms:

    release = g · (rint(s / g) + Z),   Z ~ Lap_Z(t) (Pr[z] ∝ e^{−|z|/t}),   k = ⌊Δ/g⌋ + 1,   t = k/ε.

Proof of ε-DP. s/g is exact (g is a power of two) and |rint(a) − rint(a′)| ≤ |a − a′| + 1, an integer, so
neighbours' grid indices differ by at most ⌊Δ/g⌋ + 1 = k. Lap_Z(t) on an integer query of sensitivity k is
(k/t) = ε-DP (Pr ratio e^{|Δz|/t}; CKS 2020 §2). The multiplication by g and any float rounding of the
integer g·(…) after it are post-processing of that integer. So the cost is exactly the continuous mechanism's:
pure ε-DP (``Cost.pure_dp(ε)``), and nothing about the data enters a float computation before the noise.

Utility. g = 2^{⌊log2 Δ⌋ − GRID_BITS} (:func:`laplace_granularity`), so Δ/g ∈ [2³⁰, 2³¹): the noise scale is
g·t = (g⌊Δ/g⌋ + g)/ε ∈ (Δ/ε, (Δ + g)/ε], larger than Δ/ε by at most a factor 1 + 2⁻³⁰, and the rounding moves s by
at most g/2. For ε below about 2⁻⁹ the grid is coarsened until t ≤ 2³⁹ (the discrete sampler takes t ≤ 2⁴⁰); the
factor is then at most 1 + 2⁻³⁸/ε. ε below 2⁻³⁸ is refused.
The sampler's own float error (:mod:`streamdp.noise.discrete`: ~10⁻¹⁵ statistical distance per draw) is a δ-level
term, as for every discrete-noise release here.
"""

from __future__ import annotations

import math

import numpy as np

from streamdp.noise import samplers

__all__ = ["GRID_BITS", "MIN_EPSILON", "granularity", "laplace_granularity", "granular_laplace"]

#: the grid is 2^GRID_BITS to 2^(GRID_BITS+1) times finer than the sensitivity Δ (granular Laplace) or than the
#: noise scale σ (:func:`granularity`, the granular Gaussian's grid)
GRID_BITS = 30


def granularity(scale: float) -> float:
    """g = 2^{⌊log2 scale⌋ − GRID_BITS}: the power of two with scale/g ∈ [2^GRID_BITS, 2^(GRID_BITS+1))."""
    if not (isinstance(scale, (int, float)) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be finite and > 0, got {scale!r}")
    _, e = math.frexp(scale)  # scale = m·2^e, m ∈ [0.5, 1)
    return math.ldexp(1.0, e - 1 - GRID_BITS)


#: the smallest ε the granular Laplace takes: t = k/ε must stay within the discrete sampler's MAX_SCALE = 2⁴⁰
MIN_EPSILON = 2.0**-38


def laplace_granularity(sensitivity: float, epsilon: float) -> float:
    """The grid of :func:`granular_laplace`: g = 2^{⌊log2 Δ⌋ − GRID_BITS} (Δ/g ∈ [2³⁰, 2³¹), so the noise scale
    g·k/ε is at most (1 + 2⁻³⁰)·Δ/ε for every ε), doubled while the discrete Laplace parameter t = (⌊Δ/g⌋ + 1)/ε
    would pass 2³⁹ (ε below about 2⁻⁹); then the scale is at most (1 + 2⁻³⁸/ε)·Δ/ε. (Chosen from Δ, not from the
    scale Δ/ε: a grid relative to the scale added up to a factor 1 + 2⁻³⁰/ε of noise — ×2 at ε = 1e-9; closing
    review of 2026-11-23.)"""
    d, eps = float(sensitivity), float(epsilon)
    if not (math.isfinite(d) and d > 0):
        raise ValueError(f"sensitivity must be finite and > 0, got {sensitivity!r}")
    if not (math.isfinite(eps) and eps >= MIN_EPSILON):
        raise ValueError(f"epsilon must be finite and ≥ 2**-38 (≈ 3.6e-12), got {epsilon!r}")
    _, e = math.frexp(d)
    g = math.ldexp(1.0, e - 1 - GRID_BITS)
    while (math.floor(d / g) + 1) / eps > 2.0**39:  # ends: at g ≥ 2Δ, t = 1/ε ≤ 2³⁸
        g *= 2.0
    return g


def granular_laplace(rng: np.random.Generator, statistic: float, sensitivity: float,
                     epsilon: float) -> tuple[float, float]:
    """``statistic`` released with pure ε-DP for a change of at most ``sensitivity``: g·(rint(s/g) + Lap_Z(k/ε)),
    k = ⌊Δ/g⌋ + 1 (module docstring). Returns (release, its noise scale g·k/ε — the Laplace parameter b of the
    noise actually added, to publish)."""
    s, d, eps = float(statistic), float(sensitivity), float(epsilon)
    if not math.isfinite(s):
        raise ValueError(f"statistic must be finite, got {statistic!r}")
    if not (math.isfinite(d) and d > 0):
        raise ValueError(f"sensitivity must be finite and > 0, got {sensitivity!r}")
    if not (math.isfinite(eps) and eps > 0):
        raise ValueError(f"epsilon must be finite and > 0, got {epsilon!r}")
    g = laplace_granularity(d, eps)
    k = math.floor(d / g) + 1  # integer sensitivity of rint(s/g)
    t = k / eps
    index = int(np.rint(s / g))  # s/g exact: g is a power of two
    z = int(samplers.discrete_laplace(rng, t))  # ε-DP on the integer index (k/t = ε)
    return g * float(index + z), g * t
