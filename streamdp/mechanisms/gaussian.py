"""The Gaussian mechanism and its zCDP cost (Rogers (unknown-domain) Thm 4; Bun–Steinke 2016 Prop. 1.6).

f(x) + N(0, σ² I) with ℓ2 sensitivity Δ2 is ρ-zCDP with ρ = Δ2²/(2σ²); equivalently σ = Δ2/√(2ρ).

:class:`GaussianMechanism` releases as the service does — never float noise on a float:

* integer values (counts): v + Z, Z ~ N_Z(0, σ²) per coordinate (Canonne–Kamath–Steinke 2020, Thm 4: the same
  ρ = Δ2²/(2σ²) for an integer-valued statistic), int64;
* real values: on the public power-of-two grid of :mod:`streamdp.mechanisms.granular_gaussian`,
  g·(rint(v/g) + Z), Z ~ N_Z(0, (σ′/g)²). Rounding to the grid moves each of the m coordinates by up to g/2, so
  the grid indices have ℓ2 sensitivity ≤ Δ2/g + √m (that module's proof, step 1); the noise is widened to
  σ′ = σ·(Δ2 + √m·g)/Δ2 so that the cost stays exactly Δ2²/(2σ²) (σ′ exceeds σ by a factor 1 + √m·2⁻³⁰σ/Δ2).

Noise comes from the secure generator (``rng=None``: a fresh one) and any other generator is refused unless the
caller says ``unsafe_rng=True`` (:func:`streamdp.noise.generator.checked_generator`).
"""

from __future__ import annotations

import math

import numpy as np

from streamdp.accounting.cost import Cost
from streamdp.mechanisms.granular_gaussian import granular_gaussian, granularity, noise_scale
from streamdp.noise import samplers
from streamdp.noise.discrete import MAX_SCALE
from streamdp.noise.generator import checked_generator

__all__ = ["gaussian_cost", "gaussian_sigma", "grid_sigma", "GaussianMechanism"]


def _positive(x, name: str) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number, got {x!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be finite and > 0, got {x!r}")
    return v


def gaussian_cost(sigma: float, l2_sensitivity: float) -> Cost:
    """ρ = Δ2²/(2σ²), δ = 0 — Rogers (unknown-domain) Thm 4. ValueError when ρ is not a finite float (σ so small, or
    Δ2 so large, that σ² underflows or Δ2²/(2σ²) overflows: it used to raise ZeroDivisionError or report inf)."""
    s = _positive(sigma, "sigma")
    d = _positive(l2_sensitivity, "l2_sensitivity")
    r = d / s  # float division and product overflow to inf (no exception); ** would raise OverflowError
    rho = r * r / 2.0
    if not math.isfinite(rho):
        raise ValueError(f"the Gaussian cost Δ2²/(2σ²) is not finite for sigma={sigma!r}, "
                         f"l2_sensitivity={l2_sensitivity!r}")
    return Cost.zcdp(rho=rho)


def gaussian_sigma(rho: float, l2_sensitivity: float) -> float:
    """σ = Δ2/√(2ρ): the noise that makes the Gaussian mechanism exactly ρ-zCDP (Rogers (unknown-domain) Thm 4 solved for σ)."""
    return _positive(l2_sensitivity, "l2_sensitivity") / math.sqrt(2.0 * _positive(rho, "rho"))


def grid_sigma(sigma: float, l2_sensitivity: float, coords: int) -> float:
    """σ′ ≥ σ·(Δ2 + √m·g′)/Δ2 with g′ = granularity(σ′): the noise of a grid release of m real coordinates whose
    cost is exactly Δ2²/(2σ²) (module docstring). A fixed point of two steps at most (g′ only grows with σ′)."""
    s = sigma
    for _ in range(4):
        g = granularity(s)
        nxt = sigma * (l2_sensitivity + math.sqrt(coords) * g) / l2_sensitivity
        nxt = math.nextafter(nxt, math.inf)
        if granularity(nxt) == g:
            return nxt
        s = nxt
    # the grid's √m·g (g ≈ 2⁻³⁰σ) is not small against Δ2: widening σ widens g as fast, no fixed point
    raise ValueError(f"l2_sensitivity={l2_sensitivity!r} is too small against sigma={sigma!r} for a grid release of "
                     f"{coords} coordinates (√m·2⁻³⁰·σ must stay well below Δ2)")


#: integer values are released in int64: |v| ≤ 2⁶² leaves room for any noise the samplers draw (scale ≤ 2⁴⁰)
MAX_INT_VALUE = 2**62


def _int64_values(v: np.ndarray) -> np.ndarray:
    """The integer values as int64, refused (ValueError) beyond ±2⁶²: uint64 values past 2⁶³ and int64 values near
    the limit used to wrap around silently (a count of 2⁶³ − 1 was released as about −9.2·10¹⁸)."""
    if v.size and (int(v.max()) > MAX_INT_VALUE or int(v.min()) < -MAX_INT_VALUE):
        raise ValueError("integer values must lie in [-2**62, 2**62] (int64 with room for the noise)")
    return v.astype(np.int64)


class GaussianMechanism:
    """Adds N(0, σ²) to a vector whose ℓ2 sensitivity is Δ2 (Rogers, Unknown-Domain Algorithms, Thm 4), released on
    the public grid from the secure generator (module docstring). Cost: :meth:`cost` = Δ2²/(2σ²) for every
    release."""

    def __init__(self, sigma: float, l2_sensitivity: float = 1.0) -> None:
        self.sigma = _positive(sigma, "sigma")
        self.l2_sensitivity = _positive(l2_sensitivity, "l2_sensitivity")
        self.cost()  # a mechanism whose cost is not a finite ρ is refused before it can release

    def cost(self) -> Cost:
        return gaussian_cost(self.sigma, self.l2_sensitivity)

    def release(self, values, rng: np.random.Generator | None = None, *, unsafe_rng: bool = False) -> np.ndarray:
        """``values`` + noise: int64 for an integer array (discrete Gaussian), float64 on the grid otherwise.
        ``rng``: None (a fresh secure generator), a :func:`~streamdp.noise.generator.secure_generator`, or any
        generator with ``unsafe_rng=True``."""
        if isinstance(values, np.random.Generator):
            raise TypeError("release(values, rng=None): the values come first (a generator was passed as values)")
        g = checked_generator(rng, unsafe_rng)
        v = np.asarray(values)
        if v.dtype.kind in "iu":
            if self.sigma > MAX_SCALE:
                raise ValueError("sigma must be ≤ 2**40 for integer releases")
            w = _int64_values(v)
            z = samplers.discrete_gaussian(g, self.sigma, v.shape)
            return w + np.asarray(z, dtype=np.int64)
        if v.dtype.kind not in "f" or not np.all(np.isfinite(v)):
            raise ValueError("values must be finite real numbers (or integers)")
        s = grid_sigma(noise_scale(self.sigma), self.l2_sensitivity, max(1, v.size))
        return granular_gaussian(g, v.astype(np.float64), s)


def _float_release(rng: np.random.Generator, sigma: float, values) -> np.ndarray:
    """TESTS ONLY: x + N(0, σ²) in float64 — the float-on-float sum that leaks through its low bits (Mironov
    2012); never publish it. Kept private to test the sampler's law in isolation."""
    v = np.asarray(values, dtype=np.float64)
    return v + samplers.gaussian(rng, sigma, v.shape)
