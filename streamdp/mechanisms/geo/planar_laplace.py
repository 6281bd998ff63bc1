"""Planar Laplace under geo-privacy (003 Lemma 2.6, App. A; Andrés et al. 2013) and the GP identity query
(003 Thm 4.6).

ε-GP (003 Def. 2): Pr[M(x) ∈ S] ≤ e^{ε·dist(x, x')}·Pr[M(x') ∈ S]; ε is per distance unit of the coordinates.
For g K-Lipschitz into (ℝ², ‖·‖₂), drawing y with density ∝ exp(−(ε/K)‖y − g(x)‖) is ε-GP (003 Lemma 2.6): the
density ratio at any y is ≤ exp((ε/K)‖g(x) − g(x')‖) ≤ exp(ε·dist(x, x')). The noise radius is
Gamma(shape 2, scale K/ε), the angle uniform (:func:`samplers.planar_laplace`).

GP identity query on n points under dist_∞ (003 Thm 4.6): every point gets planar Laplace with ε/n; basic
composition (003 Lemma 2.7) makes the tuple ε-GP. GP admits no advanced composition (003 Thm 3.5).

Accounting: streamdp charges geo releases in the ``cgp`` notion; an ε-GP mechanism is ε²/2-CGP (003 Lemma 3.6),
so the cost is Cost.cgp(ε²/2) with ε per (coordinate unit).

**Float gap, not closed (review 12).** These releases are x + planar-Laplace noise computed in float64: the noisy
float leaks through its low bits (Mironov 2012; Jin et al., IEEE S&P 2022) — which doubles x + z can reach depends
on x, so an output can be possible for one location and impossible for a neighbouring one, and the ε-GP (hence
ε²/2-CGP) claim does not hold for the float mechanism as implemented (the loss is unbounded on such outputs). The
Gaussian (``cgp``) releases are drawn on a public grid instead
(:mod:`streamdp.mechanisms.granular_gaussian`); a discrete planar Laplace on a grid g·ℤ² (density ∝ e^{−ε‖y − x‖}
restricted to the grid around rint(x/g), with the same additive grid distance) is future work. Until then
``mechanism = "gp"`` of ``geo_locations`` carries this gap; prefer ``mechanism = "cgp"``.
"""

from __future__ import annotations


import numpy as np

from streamdp.mechanisms.geo._checks import _pos
from streamdp.accounting.cgp import gp_to_cgp
from streamdp.accounting.cost import Cost
from streamdp.noise import samplers

__all__ = ["PlanarLaplaceGP", "IdentityQueryGP", "gp_cost"]


def gp_cost(epsilon: float) -> Cost:
    """An ε-GP mechanism is ε²/2-CGP (003 Lemma 3.6): Cost.cgp(ε²/2) (ε per unit ⇒ ρ per unit²)."""
    return Cost.cgp(gp_to_cgp(_pos(epsilon, "epsilon")))


class PlanarLaplaceGP:
    """g(x) + planar Laplace with density ∝ exp(−(ε/K)‖z‖): ε-GP (003 Lemma 2.6) for a K-Lipschitz g: X → ℝ²."""

    def __init__(self, epsilon: float, lipschitz: float = 1.0):
        self.epsilon = _pos(epsilon, "epsilon")
        self.lipschitz = _pos(lipschitz, "lipschitz")

    @property
    def rate(self) -> float:
        """ε/K: the noise density is ∝ exp(−rate·‖z‖); E‖z‖ = 2/rate."""
        return self.epsilon / self.lipschitz

    def cost(self) -> Cost:
        return gp_cost(self.epsilon)

    def release(self, rng: np.random.Generator, value) -> np.ndarray:
        v = np.asarray(value, dtype=np.float64)
        if v.shape[-1:] != (2,) or not np.all(np.isfinite(v)):
            raise ValueError("value must be a finite point (or array of points) in ℝ², last axis of length 2")
        return v + samplers.planar_laplace(rng, self.rate, v.shape[:-1])


class IdentityQueryGP:
    """Privatise an n-tuple of 2-D points under dist_∞: planar Laplace with ε/n on every point — ε-GP
    (003 Thm 4.6). E‖x̃_i − x_i‖ = 2n/ε (003 Cor. A.1)."""

    def __init__(self, epsilon: float):
        self.epsilon = _pos(epsilon, "epsilon")

    def per_point_epsilon(self, n: int) -> float:
        if isinstance(n, bool) or int(n) != n or int(n) < 1:
            raise ValueError(f"n must be a positive integer, got {n!r}")
        return self.epsilon / int(n)

    def expected_point_error(self, n: int) -> float:
        return 2.0 / self.per_point_epsilon(n)

    def cost(self) -> Cost:
        """ε-GP ⇒ ε²/2-CGP (003 Thm 4.6, Lemma 3.6)."""
        return gp_cost(self.epsilon)

    def release(self, rng: np.random.Generator, points) -> np.ndarray:
        x = np.asarray(points, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != 2 or x.shape[0] == 0 or not np.all(np.isfinite(x)):
            raise ValueError(f"points must be a finite, non-empty (n, 2) array, got shape {x.shape}")
        return x + samplers.planar_laplace(rng, self.per_point_epsilon(x.shape[0]), x.shape[0])
