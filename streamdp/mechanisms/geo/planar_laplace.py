"""Planar Laplace under geo-privacy (Liang–Yi (CGP) Lemma 2.6, App. A; Andrés et al. 2013) and the GP identity query
(Liang–Yi (CGP) Thm 4.6).

ε-GP (Liang–Yi (CGP) Def. 2): Pr[M(x) ∈ S] ≤ e^{ε·dist(x, x')}·Pr[M(x') ∈ S]; ε is per distance unit of the coordinates.
For g K-Lipschitz into (ℝ², ‖·‖₂), drawing y with density ∝ exp(−(ε/K)‖y − g(x)‖) is ε-GP (Liang–Yi (CGP) Lemma 2.6): the
density ratio at any y is ≤ exp((ε/K)‖g(x) − g(x')‖) ≤ exp(ε·dist(x, x')). The noise radius is
Gamma(shape 2, scale K/ε), the angle uniform (:func:`samplers.planar_laplace`) — the continuous law; the releases
below use its lattice version on a fine grid (next-but-one paragraph).

GP identity query on n points under dist_∞ (Liang–Yi (CGP) Thm 4.6): every point gets planar Laplace with ε/n; basic
composition (Liang–Yi (CGP) Lemma 2.7) makes the tuple ε-GP. GP admits no advanced composition (Liang–Yi (CGP) Thm 3.5).

Accounting: streamdp charges geo releases in the ``cgp`` notion; an ε-GP mechanism is ε²/2-CGP (Liang–Yi (CGP) Lemma 3.6),
so the cost is Cost.cgp(ε²/2) with ε per (coordinate unit).

**On a grid (review 12).** x + planar-Laplace noise computed in float64 leaks through its low bits (Mironov 2012;
Jin et al., IEEE S&P 2022): which doubles x + z can reach depends on x, so an output could be possible for one
location and impossible for a neighbouring one. Both releases are therefore drawn on a public grid by
:func:`streamdp.mechanisms.granular_l2_laplace.granular_l2_laplace` (which proves the bound):
γ·(rint(v/γ) + Z), v = g(x), Z on ℤ² with Pr[z] ∝ exp(−‖z‖₂/τ), τ = s/γ ∈ [2³⁶, 2³⁷), s = K/ε the continuous noise
scale, γ = 2^{⌊log2 s⌋−36} (the grid; g is the query above). **Guarantee**: the pmf ratio at every output is
≤ exp((‖v − v'‖ + √m≠·γ)/s) (m≠ ≤ 2 the coordinates of v that differ), so

* ``PlanarLaplaceGP(ε, K)``: ε-GP with respect to dist(x, x') + a for x ≠ x', a = √2·γ(K/ε)/K;
* ``IdentityQueryGP(ε)`` on n points (s = n/ε per point): ε-GP with respect to dist_∞(x, x') + a, a = √2·γ(n/ε)
  (Π_i exp((ε/n)(‖x_i − x'_i‖ + √2·γ)) ≤ exp(ε(dist_∞ + √2·γ))).

a ≤ √2·2⁻³⁶·s/K, about 2·10⁻¹¹ of the noise scale (:meth:`grid_distance`). The cost charged is unchanged,
Cost.cgp(ε²/2): ε-GP ⇒ ε²/2-CGP (Liang–Yi (CGP) Lemma 3.6) holds for any metric, here dist + a (0 at x = x'), so the cgp
cost too is with respect to dist + a — as for the Gaussian releases (:mod:`streamdp.mechanisms.granular_gaussian`).
"""

from __future__ import annotations


import numpy as np

from streamdp.mechanisms.geo._checks import _pos
from streamdp.accounting.cgp import gp_to_cgp
from streamdp.accounting.cost import Cost
from streamdp.mechanisms.granular_l2_laplace import granular_l2_laplace, grid_distance

__all__ = ["PlanarLaplaceGP", "IdentityQueryGP", "gp_cost"]


def gp_cost(epsilon: float) -> Cost:
    """An ε-GP mechanism is ε²/2-CGP (Liang–Yi (CGP) Lemma 3.6): Cost.cgp(ε²/2) (ε per unit ⇒ ρ per unit²)."""
    return Cost.cgp(gp_to_cgp(_pos(epsilon, "epsilon")))


class PlanarLaplaceGP:
    """f(x) + planar Laplace with density ∝ exp(−(ε/K)‖z‖) (Liang–Yi (CGP) Lemma 2.6), for a K-Lipschitz f: X → ℝ² (the
    caller passes f(x)), released on the grid γ·ℤ², γ = granularity(K/ε), with the lattice ℓ2-Laplace: ε-GP with
    respect to dist + √2·γ/K (module docstring)."""

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
        return granular_l2_laplace(rng, v, 1.0 / self.rate)  # on the grid g(K/ε): module docstring

    def grid_distance(self) -> float:
        """a = √2·g(K/ε)/K: the release is ε-GP with respect to dist + a (module docstring)."""
        return grid_distance(1.0 / self.rate, 2, self.lipschitz)


class IdentityQueryGP:
    """Privatise an n-tuple of 2-D points under dist_∞: planar Laplace with ε/n on every point (Liang–Yi (CGP) Thm 4.6), on the
    grid g(n/ε)·ℤ² — ε-GP with respect to dist_∞ + √2·g(n/ε) (module docstring). E‖x̃_i − x_i‖ = 2n/ε (Liang–Yi (CGP) Cor.
    A.1; to a relative 2⁻³⁶ on the grid)."""

    def __init__(self, epsilon: float):
        self.epsilon = _pos(epsilon, "epsilon")

    def per_point_epsilon(self, n: int) -> float:
        if isinstance(n, bool) or int(n) != n or int(n) < 1:
            raise ValueError(f"n must be a positive integer, got {n!r}")
        return self.epsilon / int(n)

    def expected_point_error(self, n: int) -> float:
        return 2.0 / self.per_point_epsilon(n)

    def cost(self) -> Cost:
        """ε-GP ⇒ ε²/2-CGP (Liang–Yi (CGP) Thm 4.6, Lemma 3.6)."""
        return gp_cost(self.epsilon)

    def release(self, rng: np.random.Generator, points) -> np.ndarray:
        x = np.asarray(points, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != 2 or x.shape[0] == 0 or not np.all(np.isfinite(x)):
            raise ValueError(f"points must be a finite, non-empty (n, 2) array, got shape {x.shape}")
        return granular_l2_laplace(rng, x, 1.0 / self.per_point_epsilon(x.shape[0]))  # grid g(n/ε), per point

    def grid_distance(self, n: int) -> float:
        """a = √2·g(n/ε): the release of n points is ε-GP with respect to dist_∞ + a (module docstring)."""
        return grid_distance(1.0 / self.per_point_epsilon(n), 2, 1.0)
