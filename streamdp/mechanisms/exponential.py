"""The exponential mechanism (report-noisy-max with Gumbel noise) and its zCDP cost.

Pr[M(x) = y] ∝ exp(ε·q(x, y)/Δ(q)) with Δ(q) the *range* of the quality score (Rogers (unknown-domain) Thm 2, footnote 1) is
ε²/8-zCDP (Rogers (unknown-domain) Thm 5, Cesar–Rogers 2021) — better than the ε²/2 that pure ε-DP gives through Rogers (unknown-domain) Thm 3.
Adding Gumbel(Δ(q)/ε) noise to every score and taking the arg max samples exactly this law; taking the k largest
noisy scores equals k rounds of peeling (iterated exponential mechanism without replacement), ranked, at a cost
of k·ε²/8 (Durfee–Rogers 2019; Rogers (unknown-domain) §4.2.1). Only the arg max order is released, never the noisy values.
"""

from __future__ import annotations

import math

import numpy as np

from streamdp.accounting.cost import Cost
from streamdp.noise import samplers

__all__ = ["exponential_mechanism_cost", "pure_dp_cost", "ExponentialMechanism"]


def _positive(x, name: str) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number, got {x!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be finite and > 0, got {x!r}")
    return v


def exponential_mechanism_cost(epsilon: float, selections: int = 1) -> Cost:
    """ρ = selections·ε²/8, δ = 0 — Rogers (unknown-domain) Thm 5 per selection, composed (Rogers (unknown-domain) Thm 6)."""
    e = _positive(epsilon, "epsilon")
    try:
        ok = not isinstance(selections, bool) and float(selections).is_integer() and int(selections) >= 0
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok:
        raise ValueError(f"selections must be an integer ≥ 0, got {selections!r}")
    return Cost.zcdp(rho=int(selections) * e * e / 8.0)


def pure_dp_cost(epsilon: float) -> Cost:
    """A pure ε-DP mechanism is ε²/2-zCDP — Rogers (unknown-domain) Thm 3."""
    return Cost.pure_dp(_positive(epsilon, "epsilon"))


class ExponentialMechanism:
    """Selects indices of high quality scores; Gumbel scale β = Δ(q)/ε (Pr ∝ exp(ε q/Δ(q)))."""

    def __init__(self, epsilon: float, range_sensitivity: float = 1.0) -> None:
        self.epsilon = _positive(epsilon, "epsilon")
        self.range_sensitivity = _positive(range_sensitivity, "range_sensitivity")
        self.beta = self.range_sensitivity / self.epsilon

    def cost(self, selections: int = 1) -> Cost:
        return exponential_mechanism_cost(self.epsilon, selections)

    def _noisy(self, rng: np.random.Generator, scores) -> np.ndarray:
        q = np.asarray(scores, dtype=np.float64)
        if q.ndim != 1 or q.size == 0:
            raise ValueError("scores must be a non-empty 1-D array")
        if not np.all(np.isfinite(q)):
            raise ValueError("scores must be finite")
        return q + samplers.gumbel(rng, self.beta, q.shape)

    def select(self, rng: np.random.Generator, scores) -> int:
        """Index drawn with probability ∝ exp(ε·score/Δ(q)) (Gumbel-max). Cost: :meth:`cost` (ε²/8)."""
        return int(np.argmax(self._noisy(rng, scores)))

    def select_ranked(self, rng: np.random.Generator, scores, k: int) -> np.ndarray:
        """k indices, ranked, distributed as k rounds of peeling (one-shot Gumbel). Cost: ``cost(k)``."""
        noisy = self._noisy(rng, scores)
        try:
            ok = not isinstance(k, bool) and float(k).is_integer() and 1 <= int(k) <= noisy.size
        except (TypeError, ValueError, OverflowError):
            ok = False
        if not ok:
            raise ValueError(f"k must be an integer in [1, {noisy.size}], got {k!r}")
        k = int(k)
        top = np.argpartition(-noisy, k - 1)[:k]
        return top[np.argsort(-noisy[top], kind="stable")]
