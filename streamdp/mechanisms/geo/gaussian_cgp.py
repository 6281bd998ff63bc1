"""The Gaussian mechanism under concentrated geo-privacy (Liang–Yi (CGP) Thm 3.1) and the CGP identity query (Liang–Yi (CGP) Thm 4.8).

ρ-CGP (Liang–Yi (CGP) Def. 3): D_α(M(x) ‖ M(x')) ≤ α·ρ·dist(x, x')² for all α > 1. **Units:** ρ is per (distance unit)², the
unit being that of the coordinates handed to the mechanism (metres in, ρ per m²; convert with
:func:`streamdp.accounting.cgp.convert_cgp_rho`, e.g. per m² → per km² multiplies ρ by 10⁶).

Thm 3.1: for g K-Lipschitz into (ℝ^d, ‖·‖₂), G(x) = g(x) + (K/√(2ρ))·Z, Z ~ N(0, I_d), is ρ-CGP, because
D_α(N(μ, σ²I) ‖ N(μ', σ²I)) = α‖μ − μ'‖²/(2σ²) ≤ α·K²dist²/(2σ²) = α·ρ·dist² for σ = K/√(2ρ).

Identity query on n points under dist_∞(x, x') = max_i ‖x_i − x'_i‖ (Liang–Yi (CGP) §4.2): each x ↦ x_i is 1-Lipschitz, so
by composition (Liang–Yi (CGP) Thm 3.2) adding N(0, n/(2ρ)·I₂) to every point (ρ/n-CGP each) is ρ-CGP. Per point
‖noise‖ = √(n/(2ρ))·‖Z‖ with ‖Z‖ Rayleigh(1), E‖Z‖ = √(π/2), so E‖x̃_i − x_i‖ = √(πn/(4ρ)) = (√π/2)·√(n/ρ)
≈ 0.8862·√(n/ρ) (Liang–Yi (CGP) Cor. A.2 with d = 2: Γ(3/2)/Γ(1)·√(n/ρ)).

**Released on a grid (review 12).** ``v + N(0, σ²)`` in float64 leaks through the low bits of the sum (Mironov 2012;
Jin et al. 2022): some outputs are possible for one location and impossible for a neighbouring one. Both classes
release g·(rint(v/g) + Z), Z ~ N_Z(0, (σ/g)²) per coordinate, g = 2^{⌊log2 σ⌋−30}
(:func:`streamdp.mechanisms.granular_gaussian.granular_gaussian`). Guarantee, proved there: for x ≠ x'

    D_α(M(x) ‖ M(x')) ≤ α·ρ·(dist(x, x') + a)²,   a = √m·g/K ≤ √m·2⁻³⁰·σ/K,

m the number of coordinates that can change (m = d for :class:`GaussianCGP` on a d-vector; m = 2 per point for
the identity query, the dist_∞ composition over the points keeping a = √2·g), i.e. ρ-CGP with respect to the
metric dist + a. The cost charged is still ρ per unit² (``Cost.cgp(ρ)``); a (:meth:`GaussianCGP.grid_distance`,
:meth:`IdentityQueryCGP.grid_distance`) is stated next to it. For σ = 1 km and m = 2, a = √2·2⁻²¹ m ≈ 0.67 µm.
"""

from __future__ import annotations

import math

import numpy as np

from streamdp.mechanisms.geo._checks import _pos, _points
from streamdp.accounting.cost import Cost
from streamdp.mechanisms.granular_gaussian import granular_gaussian, granularity

__all__ = ["GaussianCGP", "IdentityQueryCGP", "cgp_sigma"]


def cgp_sigma(rho: float, lipschitz: float = 1.0) -> float:
    """σ = K/√(2ρ) (Liang–Yi (CGP) Thm 3.1)."""
    return _pos(lipschitz, "lipschitz") / math.sqrt(2.0 * _pos(rho, "rho"))


class GaussianCGP:
    """g(x) + (K/√(2ρ))·N(0, I_d) for a K-Lipschitz g: ρ-CGP (Liang–Yi (CGP) Thm 3.1), ρ per unit² — released on the grid g,
    so w.r.t. dist + √d·g/K (module docstring)."""

    def __init__(self, rho: float, lipschitz: float = 1.0):
        self.rho = _pos(rho, "rho")
        self.lipschitz = _pos(lipschitz, "lipschitz")

    @property
    def sigma(self) -> float:
        return cgp_sigma(self.rho, self.lipschitz)

    def cost(self) -> Cost:
        """ρ-CGP (Liang–Yi (CGP) Thm 3.1): Cost.cgp(ρ), ρ per (coordinate unit)²."""
        return Cost.cgp(self.rho)

    @property
    def granularity(self) -> float:
        """g = 2^{⌊log2 σ⌋−30}: every released coordinate is an integer multiple of g."""
        return granularity(self.sigma)

    def grid_distance(self, coords: int) -> float:
        """a = √coords·g/K: the release is ρ-CGP w.r.t. dist + a (x ≠ x') when at most ``coords`` coordinates
        of g(x) can change (module docstring; :mod:`streamdp.mechanisms.granular_gaussian`)."""
        if isinstance(coords, bool) or int(coords) != coords or int(coords) < 1:
            raise ValueError(f"coords must be a positive integer, got {coords!r}")
        return math.sqrt(int(coords)) * self.granularity / self.lipschitz

    def release(self, rng: np.random.Generator, value) -> np.ndarray:
        """g(x) on the grid plus discrete Gaussian noise: g·(rint(v/g) + N_Z(0, (σ/g)²)) per coordinate."""
        v = np.asarray(value, dtype=np.float64)
        if not np.all(np.isfinite(v)):
            raise ValueError("value must be finite")
        return granular_gaussian(rng, v, self.sigma)


class IdentityQueryCGP:
    """Privatise an n-tuple of points under dist_∞: x_i + N(0, n/(2ρ)·I) for every i — ρ-CGP (Liang–Yi (CGP) Thm 4.8).

    n is the (public) tuple size; ρ is per (coordinate unit)².
    """

    def __init__(self, rho: float):
        self.rho = _pos(rho, "rho")

    def sigma(self, n: int) -> float:
        """Per-coordinate σ = √(n/(2ρ)) (Liang–Yi (CGP) §4.2: ρ/n-CGP per point, composed over n points)."""
        if isinstance(n, bool) or int(n) != n or int(n) < 1:
            raise ValueError(f"n must be a positive integer, got {n!r}")
        return math.sqrt(int(n) / (2.0 * self.rho))

    def expected_point_error(self, n: int, d: int = 2) -> float:
        """E‖x̃_i − x_i‖₂ = σ·√2·Γ((d+1)/2)/Γ(d/2); for d = 2: (√π/2)·√(n/ρ) ≈ 0.8862·√(n/ρ) (Liang–Yi (CGP) Cor. A.2)."""
        return self.sigma(n) * math.sqrt(2.0) * math.exp(math.lgamma((d + 1) / 2.0) - math.lgamma(d / 2.0))

    def cost(self) -> Cost:
        """ρ-CGP for the whole tuple (Liang–Yi (CGP) Thm 4.8 via Thm 3.2): Cost.cgp(ρ), ρ per unit²."""
        return Cost.cgp(self.rho)

    def granularity(self, n: int) -> float:
        """g = 2^{⌊log2 σ(n)⌋−30}: every released coordinate is an integer multiple of g."""
        return granularity(self.sigma(n))

    def grid_distance(self, n: int, d: int = 2) -> float:
        """a = √d·g: the n-point release is ρ-CGP w.r.t. dist_∞ + a (x ≠ x'). Each point is ρ/n-CGP w.r.t.
        ‖x_i − x'_i‖ + √d·g, and Σ_i (ρ/n)(‖x_i − x'_i‖ + a)² ≤ ρ(dist_∞ + a)² (Liang–Yi (CGP) Thm 3.2)."""
        return math.sqrt(int(d)) * self.granularity(n)

    def release(self, rng: np.random.Generator, points) -> np.ndarray:
        """Every point on the grid plus discrete Gaussian noise, one vectorised draw for the n points."""
        x = _points(points)
        return granular_gaussian(rng, x, self.sigma(x.shape[0]))
