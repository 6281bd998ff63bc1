"""The ℓ2-Laplace (planar Laplace / ℓ2 K-norm) mechanism for float vectors, on a power-of-two grid (no float leak).

``v + noise`` with noise density ∝ exp(−‖z‖₂/s) on ℝ^d computed in float64 leaks through the low bits of the sum
(Mironov, *On Significance of the Least Significant Bits for Differential Privacy*, CCS 2012): which doubles v + z
can reach depends on v, so some outputs are possible for one input and impossible for a neighbouring one — an
unbounded privacy loss. Here the vector is released as an integer multiple of a public granularity g = 2^j, as
:mod:`streamdp.mechanisms.granular_laplace` and :mod:`streamdp.mechanisms.granular_gaussian` do:

    release = g · (rint(v / g) + Z),   Pr[Z = z] ∝ exp(−‖z‖₂/τ) on ℤ^d,   τ = s/g,
    g = 2^{⌊log2 s⌋ − L2_GRID_BITS}  (L2_GRID_BITS = 36, so τ ∈ [2³⁶, 2³⁷)),

Z drawn exactly (up to the δ-level float64 rounding of a Bernoulli) by
:func:`streamdp.noise.samplers.lattice_l2_laplace`
(rejection from d independent discrete Laplaces Lap_Z(√d·τ); d ≤ 32). The grid is 2⁶ times finer than the Gaussian
and Laplace grids (GRID_BITS = 30): 36 is the largest L2_GRID_BITS for which the proposal scale √d·τ < √32·2³⁷ =
2^39.5 stays within the discrete sampler's MAX_SCALE = 2⁴⁰ at every d ≤ 32, and a finer grid shrinks both the added
distance a below and the rounding of the release (with GRID_BITS = 30, the engine's coupling check
(n+1)·mean_with − n·mean_without = q_f(D_h) of tests/engine/test_emd_query.py moved by ~10⁻⁹). τ is exact (a
power-of-two scaling of s), and the integers stay exact: every proposal coordinate is a difference of two numpy
geometrics ⌈E/p⌉ with a float64 exponential E ≲ 45, so |Z_j| ≲ 45·√d·τ < 2⁴⁶ ≪ 2⁵³.

**Guarantee (stated here; quoted by :mod:`streamdp.mechanisms.geo.planar_laplace`,
:mod:`streamdp.mechanisms.emd.linear` and docs/query_geo_emd.md).** For v, v' ∈ ℝ^d let m≠ = #{j : v_j ≠ v'_j}
(≤ d) and k = rint(v/g), k' = rint(v'/g). Then for every output y (every y ∈ g·ℤ^d; the others have probability 0
under both)

    Pr[M(v) = y] / Pr[M(v') = y] ≤ exp(‖k − k'‖₂/τ) ≤ exp((‖v − v'‖₂ + √m≠·g)/s),

and the ratio is 1 when v = v'. For a K-Lipschitz statistic f : (X, dist) → (ℝ^d, ‖·‖₂) released as M(f(x)) with
s = K/ε — the calibration of the continuous mechanism, which was ε·dist-private — this reads
Pr[M(f(x)) = y] ≤ exp(ε·(dist(x, x') + √d·g/K))·Pr[M(f(x')) = y] for x ≠ x': the release is ε-private **with respect
to the metric d_g(x, x') = dist(x, x') + a, a = √d·g/K (x ≠ x'), d_g(x, x) = 0** instead of dist (d_g is a metric).
Here a = √d·g/K ≤ √d·2⁻³⁶·s/K = √d·2⁻³⁶/ε: about 1.5·10⁻¹¹·√d of the noise's scale s/K in the unit of x.
Per mechanism (:func:`grid_distance` computes a):

* planar Laplace (``PlanarLaplaceGP``, f K-Lipschitz into ℝ², s = K/ε): ε-GP (Liang–Yi (CGP) Def. 2) w.r.t. dist + √2·g/K;
  the GP identity query on n points (s = n/ε per point, dist_∞): ε-GP w.r.t. dist_∞ + √2·g (g = g(n/ε)), since the
  n independent points give Π_i exp((ε/n)(‖x_i − x'_i‖ + √2·g)) ≤ exp(ε(dist_∞ + √2·g)). Through Liang–Yi (CGP) Lemma 3.6
  (ε-GP ⇒ ε²/2-CGP, for any metric) the charged Cost.cgp(ε²/2) holds w.r.t. the same metric dist + a.
* PrivEMDLinear (Imola et al. (EMD) Alg. 1, s = L·ω; ‖q(D) − q(D')‖₂ ≤ L·d_EM(D, D') by Imola et al. (EMD) Thm 4.1): local (ω = 1/α, K = L):
  α-d_EM-DP w.r.t. d_EM + √d·g/L; central (ω = 1/(nα), one user's change moves the mean by ≤ L·d_EM/n, K = L/n):
  α-d_EM-DP w.r.t. d_EM + n·√d·g/L. In both a ≤ √d·2⁻³⁶/α (d_EM units). The charged Cost.emd(α) is unchanged.

Proof.
1. Rounding (as in :mod:`streamdp.mechanisms.granular_gaussian`, step 1). g is a power of two, so v_j/g is exact
   (a subnormal quotient rounds to 0, still within 1/2), e = k − v/g has |e_j| ≤ 1/2 and e_j = e'_j where
   v_j = v'_j, so ‖k − k'‖ ≤ ‖v − v'‖/g + ‖e − e'‖ ≤ ‖v − v'‖/g + √m≠.
2. Lattice noise on an integer shift. Pr[k + Z = y] = exp(−‖y − k‖/τ)/N with the same normaliser
   N = Σ_{z∈ℤ^d} exp(−‖z‖/τ) for every k ∈ ℤ^d (an integer shift of ℤ^d is ℤ^d), so the ratio at y is
   exp((‖y − k'‖ − ‖y − k‖)/τ) ≤ exp(‖k − k'‖/τ) (triangle inequality).
3. With step 1 and τ = s/g: ‖k − k'‖/τ ≤ (‖v − v'‖ + √m≠·g)/s.
4. Post-processing. The release is fl(fl(k + Z)·g): fl(k + Z) is a function of the exact integer vector k + Z (exact
   while |k + Z| ≤ 2⁵³) and the product by the power of two g is exact; nothing about the data enters a float
   computation after the noise, and a pmf-ratio bound survives post-processing.

Tightness: two inputs 1 nm apart on either side of a rounding boundary in m≠ coordinates get ‖k − k'‖ = √m≠ and the
ratio exp(√m≠/τ) = exp(√m≠·g/s) is attained exactly at every y = k + t·(k − k'), t ∈ ℕ, so the
additive term is part of the guarantee, stated next to the cost.

Utility. The noise is g·Z plus the rounding g·e (|e_j| ≤ g/2 ≤ 2⁻³⁷·s): for s ≫ g the law of g·Z is the continuous
one's (‖Z‖·g is Gamma(d, s) to within O(√d/τ) relative). Float gaps (δ-level, not charged): the sampler's float64
acceptance (~10⁻¹⁵ statistical distance per draw, :mod:`streamdp.noise.discrete`); a statistic computed in floats (a
mean) is K-Lipschitz only up to its own rounding η, which adds 2η/K to a.
"""

from __future__ import annotations

import math

import numpy as np

from streamdp.mechanisms.granular_gaussian import added_distance, grid_index, noise_scale, on_grid
from streamdp.mechanisms.granular_laplace import GRID_BITS, granularity as _coarse_granularity
from streamdp.noise import samplers
from streamdp.noise.discrete import MAX_LATTICE_DIM

__all__ = ["L2_GRID_BITS", "MAX_LATTICE_DIM", "MIN_SCALE", "MAX_SCALE", "granularity", "granular_l2_laplace",
           "grid_distance"]

#: τ = s/g ∈ [2^L2_GRID_BITS, 2^(L2_GRID_BITS+1)); the largest value with √32·2^(L2_GRID_BITS+1) ≤ 2⁴⁰ (MAX_SCALE of
#: the discrete Laplace proposals) — module docstring
L2_GRID_BITS = 36

#: range of the noise scale s: g = 2^{⌊log2 s⌋−36} stays a normal float64 far from overflow (τ = s/g ∈ [2³⁶, 2³⁷))
MIN_SCALE = 2.0**-960
MAX_SCALE = 2.0**960


def _scale(scale) -> float:
    return noise_scale(scale, "scale")


def granularity(scale: float) -> float:
    """g = 2^{⌊log2 s⌋ − L2_GRID_BITS}: the power of two with s/g ∈ [2³⁶, 2³⁷) (the granular Laplace's
    :func:`~streamdp.mechanisms.granular_laplace.granularity`, 2^(L2_GRID_BITS − GRID_BITS) times finer)."""
    return math.ldexp(_coarse_granularity(_scale(scale)), GRID_BITS - L2_GRID_BITS)


def granular_l2_laplace(rng: np.random.Generator, value, scale: float) -> np.ndarray:
    """g·(rint(v/g) + Z) for every row v (last axis, length d ≤ 32) of ``value``, Z i.i.d. on ℤ^d with
    Pr[z] ∝ exp(−‖z‖₂/τ), τ = s/g, g = :func:`granularity`(s) — one vectorised draw. Same shape as ``value``,
    float64, every entry an integer multiple of g. Guarantee: module docstring (the continuous mechanism's
    exp(‖v − v'‖/s) with ‖v − v'‖ + √m≠·g in place of ‖v − v'‖)."""
    s = _scale(scale)
    v = np.asarray(value, dtype=np.float64)
    if v.ndim == 0 or v.shape[-1] < 1:
        raise ValueError(f"value must have a non-empty last axis (the d coordinates), got shape {v.shape}")
    d = v.shape[-1]
    if d > MAX_LATTICE_DIM:
        raise ValueError(f"the granular ℓ2-Laplace takes at most {MAX_LATTICE_DIM} coordinates, got d = {d}")
    g = granularity(s)
    k = grid_index(v, g)
    tau = s / g  # exact: a power-of-two scaling, in [2^L2_GRID_BITS, 2^(L2_GRID_BITS+1))
    z = samplers.lattice_l2_laplace(rng, d, tau, v.shape[:-1])  # int64, |z| ≪ 2⁵³
    return on_grid(k, z, g)


def grid_distance(scale: float, coords: int = 2, lipschitz: float = 1.0) -> float:
    """a = √coords·g(s)/K: the distance the grid adds to every non-zero distance in the guarantee of
    :func:`granular_l2_laplace` with noise scale s on a K-Lipschitz statistic with ``coords`` coordinates that can
    change (module docstring). In the unit of the statistic's input (for the central PrivEMDLinear pass K = L/n)."""
    return added_distance(granularity(_scale(scale)), coords, lipschitz)
