"""The Laplace mechanism and its zCDP cost counted per differing count (Rogers (unknown-domain) Thm 7 proof; Thm 1; Thm 3).

Each count gets independent Lap(b) noise. A count that changes by at most Δ∞ is (Δ∞/b)-DP, hence
(Δ∞/b)²/2-zCDP (Rogers (unknown-domain) Thm 3); a user changes at most Δ0 counts, so by composition over the differing counts
(Rogers (unknown-domain) Thm 6) the histogram release is ρ = Δ0·(Δ∞/b)²/2-zCDP. This is **not** the ℓ1 route (Δ1 = Δ0Δ∞ gives
(Δ0Δ∞/b)-DP, i.e. Δ0²(Δ∞/b)²/2-zCDP — worse by a factor Δ0; see the discussion after Rogers (unknown-domain) Thm 7).
"""

from __future__ import annotations

import math

import numpy as np

from streamdp.accounting.cost import Cost
from streamdp.noise import samplers

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
    """ρ = Δ0·(Δ∞/b)²/2, δ = 0 — per-count composition of Rogers (unknown-domain) Thm 7 proof (Laplace case)."""
    b = _positive(b, "b")
    linf = _positive(linf_sensitivity, "linf_sensitivity")
    l0 = _count(l0_sensitivity, "l0_sensitivity")
    return Cost.zcdp(rho=l0 * (linf / b) ** 2 / 2.0)


def laplace_pure_epsilon(b: float, l1_sensitivity: float) -> float:
    """ε = Δ1/b: pure-DP parameter of the Laplace mechanism (Rogers (unknown-domain) Thm 1). Its zCDP cost via Thm 3 is ε²/2."""
    return _positive(l1_sensitivity, "l1_sensitivity") / _positive(b, "b")


class LaplaceMechanism:
    """Adds i.i.d. Lap(b) to each count of a (Δ0, Δ∞)-sensitive histogram; cost per differing count."""

    def __init__(self, b: float, linf_sensitivity: float = 1.0, l0_sensitivity: int = 1) -> None:
        self.b = _positive(b, "b")
        self.linf_sensitivity = _positive(linf_sensitivity, "linf_sensitivity")
        self.l0_sensitivity = _count(l0_sensitivity, "l0_sensitivity")

    def cost(self) -> Cost:
        return laplace_cost(self.b, self.linf_sensitivity, self.l0_sensitivity)

    def release(self, rng: np.random.Generator, values) -> np.ndarray:
        v = np.asarray(values, dtype=np.float64)
        if not np.all(np.isfinite(v)):
            raise ValueError("values must be finite")
        return v + samplers.laplace(rng, self.b, v.shape)
