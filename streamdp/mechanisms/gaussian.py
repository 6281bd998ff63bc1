"""The Gaussian mechanism and its zCDP cost (Rogers (unknown-domain) Thm 4; Bun–Steinke 2016 Prop. 1.6).

f(x) + N(0, σ² I) with ℓ2 sensitivity Δ2 is ρ-zCDP with ρ = Δ2²/(2σ²); equivalently σ = Δ2/√(2ρ).
"""

from __future__ import annotations

import math

import numpy as np

from streamdp.accounting.cost import Cost
from streamdp.noise import samplers

__all__ = ["gaussian_cost", "gaussian_sigma", "GaussianMechanism"]


def _positive(x, name: str) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number, got {x!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be finite and > 0, got {x!r}")
    return v


def gaussian_cost(sigma: float, l2_sensitivity: float) -> Cost:
    """ρ = Δ2²/(2σ²), δ = 0 — Rogers (unknown-domain) Thm 4."""
    s = _positive(sigma, "sigma")
    d = _positive(l2_sensitivity, "l2_sensitivity")
    return Cost.zcdp(rho=d * d / (2.0 * s * s))


def gaussian_sigma(rho: float, l2_sensitivity: float) -> float:
    """σ = Δ2/√(2ρ): the noise that makes the Gaussian mechanism exactly ρ-zCDP (Rogers (unknown-domain) Thm 4 solved for σ)."""
    return _positive(l2_sensitivity, "l2_sensitivity") / math.sqrt(2.0 * _positive(rho, "rho"))


class GaussianMechanism:
    """Adds i.i.d. N(0, σ²) to a real vector whose ℓ2 sensitivity is Δ2 (Rogers (unknown-domain) Thm 4)."""

    def __init__(self, sigma: float, l2_sensitivity: float = 1.0) -> None:
        self.sigma = _positive(sigma, "sigma")
        self.l2_sensitivity = _positive(l2_sensitivity, "l2_sensitivity")

    def cost(self) -> Cost:
        return gaussian_cost(self.sigma, self.l2_sensitivity)

    def release(self, rng: np.random.Generator, values) -> np.ndarray:
        v = np.asarray(values, dtype=np.float64)
        if not np.all(np.isfinite(v)):
            raise ValueError("values must be finite")
        return v + samplers.gaussian(rng, self.sigma, v.shape)
