"""The Laplace mechanism and its zCDP cost counted per differing count (Rogers (unknown-domain) Thm 7 proof; Thm 1; Thm 3).

Each count gets independent Lap(b) noise. A count that changes by at most Δ∞ is (Δ∞/b)-DP, hence
(Δ∞/b)²/2-zCDP (Rogers (unknown-domain) Thm 3); a user changes at most Δ0 counts, so by composition over the differing counts
(Rogers (unknown-domain) Thm 6) the histogram release is ρ = Δ0·(Δ∞/b)²/2-zCDP. This is **not** the ℓ1 route (Δ1 = Δ0Δ∞ gives
(Δ0Δ∞/b)-DP, i.e. Δ0²(Δ∞/b)²/2-zCDP — worse by a factor Δ0; see the discussion after Rogers (unknown-domain) Thm 7).

:class:`LaplaceMechanism` releases as the service does — never float noise on a float: integer counts get the
discrete Laplace Lap_Z(b) (an integer change of at most Δ∞ has ratio e^{Δ∞/b}: the same (Δ∞/b) per count; Δ∞ must
then be an integer); real values get the granular Laplace of :mod:`streamdp.mechanisms.granular_laplace` per
coordinate, g·(rint(v/g) + Lap_Z(k/ε)) with ε = Δ∞/b and k = ⌊Δ∞/g⌋ + 1, whose loss is exactly ε per count (its
noise scale g·k/ε is at most (1 + 2⁻³⁰)·b). Noise from the secure generator; any other generator only with
``unsafe_rng=True``.
"""

from __future__ import annotations

import math

import numpy as np

from streamdp.accounting.cost import Cost
from streamdp.mechanisms.gaussian import _int64_values
from streamdp.mechanisms.granular_laplace import laplace_granularity
from streamdp.noise import samplers
from streamdp.noise.discrete import MAX_SCALE
from streamdp.noise.generator import checked_generator

__all__ = ["laplace_cost", "laplace_pure_epsilon", "LaplaceMechanism"]


def _positive(x, name: str) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number, got {x!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be finite and > 0, got {x!r}")
    return v


def _count(x, name: str) -> int:
    try:
        ok = not isinstance(x, bool) and float(x).is_integer() and int(x) >= 1
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise ValueError(f"{name} must be an integer ≥ 1, got {x!r}")
    return int(x)


def laplace_cost(b: float, linf_sensitivity: float = 1.0, l0_sensitivity: int = 1) -> Cost:
    """ρ = Δ0·(Δ∞/b)²/2, δ = 0 — per-count composition of Rogers (unknown-domain) Thm 7 proof (Laplace case).
    ValueError when ρ is not a finite float (b tiny against Δ∞: it used to raise OverflowError)."""
    b = _positive(b, "b")
    linf = _positive(linf_sensitivity, "linf_sensitivity")
    l0 = _count(l0_sensitivity, "l0_sensitivity")
    ratio = linf / b  # float division and product overflow to inf (no exception); ** would raise OverflowError
    rho = l0 * (ratio * ratio) / 2.0
    if not math.isfinite(rho):
        raise ValueError(f"the Laplace cost Δ0·(Δ∞/b)²/2 is not finite for b={b!r}, linf_sensitivity={linf!r}, "
                         f"l0_sensitivity={l0!r}")
    return Cost.zcdp(rho=rho)


def laplace_pure_epsilon(b: float, l1_sensitivity: float) -> float:
    """ε = Δ1/b: pure-DP parameter of the Laplace mechanism (Rogers (unknown-domain) Thm 1). Its zCDP cost via Thm 3 is ε²/2."""
    return _positive(l1_sensitivity, "l1_sensitivity") / _positive(b, "b")


class LaplaceMechanism:
    """Adds i.i.d. Lap(b) to each count of a (Δ0, Δ∞)-sensitive histogram; cost per differing count."""

    def __init__(self, b: float, linf_sensitivity: float = 1.0, l0_sensitivity: int = 1) -> None:
        self.b = _positive(b, "b")
        self.linf_sensitivity = _positive(linf_sensitivity, "linf_sensitivity")
        self.l0_sensitivity = _count(l0_sensitivity, "l0_sensitivity")
        self.cost()  # a mechanism whose cost is not a finite ρ is refused before it can release

    def cost(self) -> Cost:
        return laplace_cost(self.b, self.linf_sensitivity, self.l0_sensitivity)

    def release(self, values, rng: np.random.Generator | None = None, *, unsafe_rng: bool = False) -> np.ndarray:
        """``values`` + noise per count: int64 for an integer array (discrete Laplace; Δ∞ must be an integer),
        float64 on the grid otherwise (module docstring). ``rng`` as for
        :func:`~streamdp.noise.generator.checked_generator`."""
        if isinstance(values, np.random.Generator):
            raise TypeError("release(values, rng=None): the values come first (a generator was passed as values)")
        g = checked_generator(rng, unsafe_rng)
        v = np.asarray(values)
        if v.dtype.kind in "iu":
            if not float(self.linf_sensitivity).is_integer():
                raise ValueError("integer values need an integer linf_sensitivity (the counts' change)")
            if self.b > MAX_SCALE:
                raise ValueError("b must be ≤ 2**40 for integer releases")
            w = _int64_values(v)
            z = samplers.discrete_laplace(g, self.b, v.shape)
            return w + np.asarray(z, dtype=np.int64)
        if v.dtype.kind not in "f" or not np.all(np.isfinite(v)):
            raise ValueError("values must be finite real numbers (or integers)")
        eps = self.linf_sensitivity / self.b
        step = laplace_granularity(self.linf_sensitivity, eps)
        k = math.floor(self.linf_sensitivity / step) + 1  # integer sensitivity of rint(v/g) per count
        z = samplers.discrete_laplace(g, k / eps, v.shape)
        with np.errstate(over="ignore"):
            out = (np.rint(v.astype(np.float64) / step) + np.asarray(z, dtype=np.float64)) * step
        if not np.all(np.isfinite(out)):
            raise ValueError("values are too large for float64 after the noise")
        return out


def _float_release(rng: np.random.Generator, b: float, values) -> np.ndarray:
    """TESTS ONLY: x + Lap(b) in float64 (the float-on-float sum that leaks through its low bits); never publish."""
    v = np.asarray(values, dtype=np.float64)
    return v + samplers.laplace(rng, b, v.shape)
