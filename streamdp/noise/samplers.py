"""Vectorised noise samplers. Every function takes the generator first (see :mod:`streamdp.noise.generator`).

(Stub: the full set with exact discrete samplers lands with the noise work; signatures are fixed here.)
"""

from __future__ import annotations

import numpy as np


def gaussian(rng: np.random.Generator, sigma: float, size=None) -> np.ndarray:
    """N(0, σ²)."""
    return rng.normal(0.0, sigma, size)


def laplace(rng: np.random.Generator, b: float, size=None) -> np.ndarray:
    """Lap(b): density exp(−|x|/b)/(2b)."""
    return rng.laplace(0.0, b, size)


def gumbel(rng: np.random.Generator, beta: float, size=None) -> np.ndarray:
    """Gumbel(0, β): CDF exp(−exp(−x/β))."""
    return rng.gumbel(0.0, beta, size)


def exponential(rng: np.random.Generator, scale: float, size=None) -> np.ndarray:
    return rng.exponential(scale, size)
