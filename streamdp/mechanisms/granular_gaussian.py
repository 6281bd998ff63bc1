"""The Gaussian mechanism for float coordinates, on a power-of-two grid (no floating-point leak); its CGP guarantee.

``x + N(0, σ²)`` computed in float64 leaks through the low bits of the sum (Mironov, *On Significance of the Least
Significant Bits for Differential Privacy*, CCS 2012; for Gaussian samplers Jin, McMurtry, Rubinstein and Ohrimenko,
*Are We There Yet? Timing and Floating-Point Attacks on Differential Privacy Systems*, IEEE S&P 2022): which doubles
``x + noise`` can reach depends on x, so some outputs are possible for one location and impossible for a
neighbouring one, an unbounded privacy loss. Here every coordinate is released as an integer multiple of a public
granularity g = 2^j, as :mod:`streamdp.mechanisms.granular_laplace` does for the Laplace mechanism:

    release = g · (rint(v / g) + Z),   Z ~ N_Z(0, s²) independently per coordinate,   s = σ/g,
    g = 2^{⌊log2 σ⌋ − GRID_BITS}  (GRID_BITS = 30, so s ∈ [2³⁰, 2³¹)),

N_Z the discrete Gaussian of Canonne, Kamath and Steinke, *The Discrete Gaussian for Differential Privacy*
(NeurIPS 2020; "CKS"), drawn by :func:`streamdp.noise.samplers.discrete_gaussian` in one vectorised call for all
the coordinates of all the points. s is exact (σ/g is a power-of-two scaling of σ) and lies far inside the
sampler's MAX_SCALE = 2⁴⁰ for every σ.

**Guarantee (stated here; quoted by the geo mechanisms, docs/query_geo_emd.md, and — per row, through
:func:`granular_gaussian_rows` — by the PIE rounds at ``pie.gaussian_mechanism_cost`` and docs/query_range.md).**
For v, v' ∈ ℝ^m let m≠ = #{j : v_j ≠ v'_j} (≤ m) and a = √m≠·g. Then for every α > 1

    D_α(M(v) ‖ M(v')) ≤ α·‖k − k'‖²/(2s²) ≤ α·(‖v − v'‖ + a)²/(2σ²)      (k = rint(v/g), k' = rint(v'/g)),

and the left side is 0 when v = v'. For a K-Lipschitz statistic f released as M(f(x)) with σ = K/√(2ρ) (Liang–Yi (CGP)
Thm 3.1's calibration) this reads D_α ≤ α·ρ·(dist(x, x') + √m·g/K)² for x ≠ x': the release is ρ-CGP (Liang–Yi (CGP) Def. 3)
**with respect to the metric d_g(x, x') = dist(x, x') + √m·g/K (x ≠ x'), d_g(x, x) = 0** instead of dist.
(d_g is a metric: the triangle inequality gains a second additive term on the right.) The float mechanism claimed
α·ρ·dist²; the grid adds the distance a/K = √m·g/K ≤ √m·2⁻³⁰·σ/K = √m·2⁻³⁰/√(2ρ) to every non-zero distance.

Proof.
1. Rounding. g is a power of two, so v_j/g is the exact quotient (a power-of-two scaling; the only inexact case is
   a subnormal quotient |v_j/g| < 2⁻¹⁰²², which rint sends to 0, still within 1/2). So e = k − v/g has
   |e_j| ≤ 1/2, and e_j = e'_j where v_j = v'_j. Hence k − k' = (v − v')/g + (e − e') with ‖e − e'‖ ≤ √m≠ and
   ‖k − k'‖ ≤ ‖v − v'‖/g + √m≠ (triangle inequality).
2. Discrete Gaussian on an integer shift. Let P = N_Z(μ, s²), Q = N_Z(ν, s²) on ℤ with μ, ν ∈ ℤ: both have the
   normaliser N = Σ_{y∈ℤ} e^{−y²/(2s²)} (an integer shift of ℤ is ℤ). With c = αμ + (1 − α)ν,
   α(y − μ)² + (1 − α)(y − ν)² = (y − c)² + α(1 − α)(μ − ν)², so
   Σ_y P(y)^α Q(y)^{1−α} = e^{α(α−1)(μ−ν)²/(2s²)} · Σ_y e^{−(y−c)²/(2s²)} / N ≤ e^{α(α−1)(μ−ν)²/(2s²)},
   because Σ_y e^{−(y−c)²/(2s²)} = s√(2π)·Σ_{t∈ℤ} e^{−2π²s²t²} cos(2πtc) ≤ N for every real c (Poisson summation;
   the fact CKS use to prove their Thm 4). So D_α(P‖Q) ≤ α(μ − ν)²/(2s²), with equality when α is an integer
   (then c ∈ ℤ). The coordinates are independent and Rényi divergence adds over product distributions, so on ℤ^m
   D_α ≤ α‖μ − ν‖²/(2s²): ℓ2 sensitivity Δ gives Δ²/(2s²)-zCDP — CKS Thm 4 for one coordinate, and their
   multivariate statement (CKS §2, "Multivariate Discrete Gaussian", independent coordinates; Thm 14 in
   arXiv:2004.00010 as we recall the numbering — the argument above does not depend on it).
3. With μ = k, ν = k' and step 1: D_α ≤ α(‖v − v'‖/g + √m≠)²/(2s²) = α(‖v − v'‖ + √m≠·g)²/(2σ²) (s = σ/g).
4. Post-processing. The release is fl(fl(k + Z)·g). IEEE addition is correctly rounded, so fl(k + Z) is a function
   of the exact integer vector k + Z alone (it is exact while |k + Z| ≤ 2⁵³), and multiplying by the power of two
   g is exact; D_α does not increase under post-processing. Nothing about the data enters a float computation
   after the noise.

Tightness: two values 1 nm apart on either side of a rounding boundary get indices that differ by 1 in each such
coordinate, and the divergence is then α·m≠/(2s²) = α·a²/(2σ²) exactly (integer α) while ‖v − v'‖² → 0 — so the
additive term cannot be absorbed into a larger ρ for dist → 0; it is part of the guarantee, stated next to the cost.

What it means. The ledger still charges ρ per unit² (``Cost.cgp(ρ)``, unchanged); write b = a/K = √m·g/K for the
added distance in the unit of x. For dist ≥ d0 the bound is ≤ α·ρ(1 + b/d0)²·dist², i.e. ρ(1 + b/d0)²-CGP above d0;
as dist → 0 it tends to α·ρ·b² = α·m·g²/(2σ²) ≤ α·m·2⁻⁶¹ instead of 0. Numerically b ≤ √m·2⁻³⁰·σ/K, about 10⁻⁹ of
the noise: σ = 1 km, m = 2, K = 1 gives g = 2⁻²¹ m and b = √2·2⁻²¹ m ≈ 0.67 µm (bound 1.3 µm); Liang–Yi (CGP)'s smallest
ρ = 5·10⁻⁸ per m² (σ = 3.16 km) gives g = 2⁻¹⁹ m and b ≈ 2.7 µm. Compositions: pieces with distances b_i and costs
ρ_i give Σ ρ_i(d + b_i)² ≤ (Σ ρ_i)(d + max b_i)².

Utility. The noise is g·Z plus the rounding error g·e (|e_j| ≤ 1/2): per coordinate |rounding| ≤ 2⁻³¹σ, and
g·Z has variance below σ² (Var N_Z(0, s²) < s², CKS; indistinguishable from σ² at s ≥ 2³⁰).

Float gaps that remain (δ-level, not charged). The sampler's own float64 rejection steps put N_Z within a
statistical distance of order 10⁻¹⁵ per draw (:mod:`streamdp.noise.discrete`). The guarantee is for the statistic
v = f(x) as computed: a statistic computed in floats (a mean, a distance) is K-Lipschitz up to its own rounding
error η (a few ulp of the coordinates: ≤ ~10⁻⁸ m for Earth coordinates in metres), which adds 2η/K to b; for the
identity query (v = x) η = 0. When |v/g| > 2⁵³ (σ tiny against the coordinates: σ below 2.4–4.8 m for
coordinates of 2·10⁷ m) the float release is coarser than g — still a function of k + Z, so the guarantee is unchanged.
"""

from __future__ import annotations

import math

import numpy as np

from streamdp.mechanisms.granular_laplace import GRID_BITS, granularity
from streamdp.noise import samplers

__all__ = ["GRID_BITS", "MIN_SIGMA", "MAX_SIGMA", "granularity", "granularities", "grid_index",
           "granular_gaussian", "granular_gaussian_rows", "grid_distance", "on_grid", "added_distance", "noise_scale"]

#: σ range: g = 2^{⌊log2 σ⌋−30} then stays a normal float64 far from the overflow (and s = σ/g ∈ [2³⁰, 2³¹)).
MIN_SIGMA = 2.0**-960
MAX_SIGMA = 2.0**960


def noise_scale(x, name: str = "sigma") -> float:
    """A noise scale of the granular mechanisms: a real scalar in [2**-960, 2**960] (its power-of-two grid is then a
    normal float64), or a ValueError naming ``name``. Booleans and strings are refused."""
    if isinstance(x, (bool, np.bool_, str, bytes)) or np.ndim(x) != 0:
        raise ValueError(f"{name} must be a real number, got {x!r}")
    try:
        s = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number, got {x!r}") from None
    if not (math.isfinite(s) and MIN_SIGMA <= s <= MAX_SIGMA):
        raise ValueError(f"{name} must be finite and in [2**-960, 2**960], got {x!r}")
    return s



def grid_index(value, g: float) -> np.ndarray:
    """k = rint(v/g) coordinatewise, as float64 integers (exact: g is a power of two; module docstring, step 1).
    ValueError if v is not finite or v/g overflows."""
    v = np.asarray(value, dtype=np.float64)
    if not np.all(np.isfinite(v)):
        raise ValueError("value must be finite")
    with np.errstate(over="ignore"):
        q = v / g
    if not np.all(np.isfinite(q)):
        raise ValueError(f"value is too large for the grid g = {g!r} (|v/g| overflows float64)")
    return np.rint(q)


def granular_gaussian(rng: np.random.Generator, value, sigma: float) -> np.ndarray:
    """g·(rint(v/g) + Z), Z ~ N_Z(0, (σ/g)²) per coordinate, g = :func:`granularity`(σ), for an array ``value`` of
    any shape (one vectorised draw for all coordinates). Same shape as ``value``, float64, every entry an integer
    multiple of g. Guarantee: module docstring (ρ = 1/(2σ²) per unit², distance plus √m≠·g)."""
    s_cont = noise_scale(sigma)
    g = granularity(s_cont)
    k = grid_index(value, g)
    s = s_cont / g  # exact: a power-of-two scaling, in [2^GRID_BITS, 2^(GRID_BITS+1))
    z = samplers.discrete_gaussian(rng, s, k.shape)  # int64, |z| ≪ 2⁵³: exact as float64
    return on_grid(k, z, g)


def granularities(sigma) -> np.ndarray:
    """:func:`granularity` element-wise for an array of σ's: g_i = 2^{⌊log2 σ_i⌋ − GRID_BITS} (np.frexp: σ = f·2^e,
    f ∈ [0.5, 1), so ⌊log2 σ⌋ = e − 1 exactly). Every σ_i must be finite and in [2**-960, 2**960] (ValueError)."""
    if isinstance(sigma, (bool, np.bool_, str, bytes)):
        raise ValueError(f"sigma must be an array of real numbers, got {sigma!r}")
    try:
        s = np.asarray(sigma, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"sigma must be an array of real numbers, got {sigma!r}") from None
    if not np.all(np.isfinite(s) & (s >= MIN_SIGMA) & (s <= MAX_SIGMA)):
        raise ValueError("sigma must be finite and in [2**-960, 2**960] in every element")
    _, e = np.frexp(s)
    return np.ldexp(1.0, e - 1 - GRID_BITS)


def granular_gaussian_rows(rng: np.random.Generator, values, sigma) -> np.ndarray:
    """:func:`granular_gaussian` with one σ_i per row: row i of ``values`` (shape (n,) or (n, m)) is released as
    g_i·(rint(v_i/g_i) + Z_i), Z_i ~ N_Z(0, (σ_i/g_i)²) per coordinate, g_i = :func:`granularity`(σ_i), all rows
    in one vectorised draw (:func:`streamdp.noise.samplers.discrete_gaussian_array`). ``sigma`` has shape (n,).
    Row i is exactly :func:`granular_gaussian` (``values[i]``, σ_i) — the same law, hence the module docstring's
    guarantee per row: ρ_i = 1/(2σ_i²) per unit², distance plus √m≠·g_i; rows are independent."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim not in (1, 2):
        raise ValueError(f"values must have shape (n,) or (n, m), got {v.shape}")
    if np.shape(sigma) != (v.shape[0],):
        raise ValueError(f"sigma must have shape ({v.shape[0]},), one σ per row, got {np.shape(sigma)}")
    g = granularities(sigma)  # validates σ (finite, in [2**-960, 2**960])
    sig = np.asarray(sigma, dtype=np.float64)
    s = sig / g  # exact: power-of-two scalings, each in [2^GRID_BITS, 2^(GRID_BITS+1))
    if v.ndim == 2:
        g, s = g[:, None], s[:, None]
    if not np.all(np.isfinite(v)):
        raise ValueError("value must be finite")
    with np.errstate(over="ignore"):
        q = v / g
    if not np.all(np.isfinite(q)):
        raise ValueError("value is too large for its row's grid (|v/g| overflows float64)")
    k = np.rint(q)  # exact rounding of the exact quotient (module docstring, step 1)
    z = samplers.discrete_gaussian_array(rng, np.broadcast_to(s, v.shape))  # int64, |z| ≪ 2⁵³
    return on_grid(k, z, g)


def grid_distance(sigma: float, coords: int = 2, lipschitz: float = 1.0) -> float:
    """a/K = √coords·g/K: the distance the grid adds to every non-zero distance in the CGP guarantee of
    ``granular_gaussian`` applied to a K-Lipschitz statistic with ``coords`` coordinates that can change (module
    docstring). In the unit of the statistic's input."""
    return added_distance(granularity(noise_scale(sigma)), coords, lipschitz)


def on_grid(k: np.ndarray, z, g) -> np.ndarray:
    """The release g·(k + z) of the grid mechanisms: k the grid indices (float64 integers), z the integer noise.
    fl(k + z) is the correctly rounded integer k + z and the power-of-two g scales it exactly (post-processing of
    k + z, module docstring step 4). ValueError if it overflows float64."""
    with np.errstate(over="ignore"):
        out = (k + np.asarray(z, dtype=np.float64)) * g
    if not np.all(np.isfinite(out)):
        raise ValueError("value is too large for float64 after the noise")
    return out


def added_distance(g: float, coords: int, lipschitz: float) -> float:
    """√coords·g/K: the distance a grid of step g adds to every non-zero distance in the guarantee of a grid
    mechanism on a K-Lipschitz statistic with ``coords`` coordinates that can change."""
    if isinstance(coords, bool) or int(coords) != coords or int(coords) < 1:
        raise ValueError(f"coords must be a positive integer, got {coords!r}")
    k = float(lipschitz)
    if not (math.isfinite(k) and k > 0):
        raise ValueError(f"lipschitz must be finite and > 0, got {lipschitz!r}")
    return math.sqrt(int(coords)) * g / k
