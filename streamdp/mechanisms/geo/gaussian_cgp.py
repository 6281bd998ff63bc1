"""The Gaussian mechanism under concentrated geo-privacy (003 Thm 3.1) and the CGP identity query (003 Thm 4.8).

ρ-CGP (003 Def. 3): D_α(M(x) ‖ M(x')) ≤ α·ρ·dist(x, x')² for all α > 1. **Units:** ρ is per (distance unit)², the
unit being that of the coordinates handed to the mechanism (metres in, ρ per m²; convert with
:func:`streamdp.accounting.cgp.convert_cgp_rho`, e.g. per m² → per km² multiplies ρ by 10⁶).

Thm 3.1: for g K-Lipschitz into (ℝ^d, ‖·‖₂), G(x) = g(x) + (K/√(2ρ))·Z, Z ~ N(0, I_d), is ρ-CGP, because
D_α(N(μ, σ²I) ‖ N(μ', σ²I)) = α‖μ − μ'‖²/(2σ²) ≤ α·K²dist²/(2σ²) = α·ρ·dist² for σ = K/√(2ρ).

Identity query on n points under dist_∞(x, x') = max_i ‖x_i − x'_i‖ (003 §4.2): each x ↦ x_i is 1-Lipschitz, so
by composition (003 Thm 3.2) adding N(0, n/(2ρ)·I₂) to every point (ρ/n-CGP each) is ρ-CGP. Per point
‖noise‖ = √(n/(2ρ))·‖Z‖ with ‖Z‖ Rayleigh(1), E‖Z‖ = √(π/2), so E‖x̃_i − x_i‖ = √(πn/(4ρ)) = (√π/2)·√(n/ρ)
≈ 0.8862·√(n/ρ) (003 Cor. A.2 with d = 2: Γ(3/2)/Γ(1)·√(n/ρ)).
"""

from __future__ import annotations

import math

import numpy as np

from streamdp.mechanisms.geo._checks import _pos, _points
from streamdp.accounting.cost import Cost
from streamdp.noise import samplers

__all__ = ["GaussianCGP", "IdentityQueryCGP", "cgp_sigma"]


def cgp_sigma(rho: float, lipschitz: float = 1.0) -> float:
    """σ = K/√(2ρ) (003 Thm 3.1)."""
    return _pos(lipschitz, "lipschitz") / math.sqrt(2.0 * _pos(rho, "rho"))


class GaussianCGP:
    """g(x) + (K/√(2ρ))·N(0, I_d) for a K-Lipschitz g: ρ-CGP (003 Thm 3.1), ρ per unit²."""

    def __init__(self, rho: float, lipschitz: float = 1.0):
        self.rho = _pos(rho, "rho")
        self.lipschitz = _pos(lipschitz, "lipschitz")

    @property
    def sigma(self) -> float:
        return cgp_sigma(self.rho, self.lipschitz)

    def cost(self) -> Cost:
        """ρ-CGP (003 Thm 3.1): Cost.cgp(ρ), ρ per (coordinate unit)²."""
        return Cost.cgp(self.rho)

    def release(self, rng: np.random.Generator, value) -> np.ndarray:
        v = np.asarray(value, dtype=np.float64)
        if not np.all(np.isfinite(v)):
            raise ValueError("value must be finite")
        return v + samplers.gaussian(rng, self.sigma, v.shape)


class IdentityQueryCGP:
    """Privatise an n-tuple of points under dist_∞: x_i + N(0, n/(2ρ)·I) for every i — ρ-CGP (003 Thm 4.8).

    n is the (public) tuple size; ρ is per (coordinate unit)².
    """

    def __init__(self, rho: float):
        self.rho = _pos(rho, "rho")

    def sigma(self, n: int) -> float:
        """Per-coordinate σ = √(n/(2ρ)) (003 §4.2: ρ/n-CGP per point, composed over n points)."""
        if isinstance(n, bool) or int(n) != n or int(n) < 1:
            raise ValueError(f"n must be a positive integer, got {n!r}")
        return math.sqrt(int(n) / (2.0 * self.rho))

    def expected_point_error(self, n: int, d: int = 2) -> float:
        """E‖x̃_i − x_i‖₂ = σ·√2·Γ((d+1)/2)/Γ(d/2); for d = 2: (√π/2)·√(n/ρ) ≈ 0.8862·√(n/ρ) (003 Cor. A.2)."""
        return self.sigma(n) * math.sqrt(2.0) * math.exp(math.lgamma((d + 1) / 2.0) - math.lgamma(d / 2.0))

    def cost(self) -> Cost:
        """ρ-CGP for the whole tuple (003 Thm 4.8 via Thm 3.2): Cost.cgp(ρ), ρ per unit²."""
        return Cost.cgp(self.rho)

    def release(self, rng: np.random.Generator, points) -> np.ndarray:
        x = _points(points)
        return x + samplers.gaussian(rng, self.sigma(x.shape[0]), x.shape)
