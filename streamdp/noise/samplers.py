"""Vectorised noise samplers. Every function takes the generator first (see :mod:`streamdp.noise.generator`),
then its scale parameter(s), then numpy's ``size`` (None, an int or a tuple of ints).

Scalar laws (``size`` is the output shape; the scale may be an array that broadcasts against ``size``):

* :func:`gaussian` N(0, σ²); :func:`laplace` Lap(b), density e^{−|x|/b}/(2b); :func:`gumbel` Gumbel(0, β),
  CDF exp(−e^{−x/β}); :func:`exponential` Exp with mean ``scale``. These are numpy's float64 samplers over the
  ChaCha generator. Their outputs are floats: a release of an *integer* quantity must use the discrete samplers
  (or round the noisy value before release — post-processing) so that no floating-point least-significant bits
  leak (Mironov 2012; docs/contract.md §3 "Noise").
* :func:`discrete_gaussian` N_Z(0, σ²) and :func:`discrete_laplace` Lap_Z(t) (int64), from
  :mod:`streamdp.noise.discrete` (Canonne–Kamath–Steinke 2020); :func:`discrete_gaussian_array` draws one
  N_Z(0, σ_i²) per element of an array of σ's (output shape = that array's shape).
* :func:`lattice_l2_laplace` Z on ℤ^d with Pr[z] ∝ exp(−‖z‖₂/τ) (int64, shape ``size + (d,)``, d ≤ 32), by exact
  rejection from d independent Lap_Z(√d·τ) (:mod:`streamdp.noise.discrete`): the noise of the granular planar
  Laplace and K-norm releases (:mod:`streamdp.mechanisms.granular_l2_laplace`), which replace
  :func:`planar_laplace` and :func:`knorm_gamma_ball` wherever a float is published.

Vector laws (output shape ``size + (d,)``; a scalar scale):

* :func:`planar_laplace` — density ∝ exp(−ε‖z‖₂) on ℝ², the canonical planar-Laplace / geo-indistinguishability
  noise of Liang–Yi (CGP) §2.3 Lemma 2.6 and App. A (implementation notes on Liang–Yi (CGP)): radius ~ Gamma(shape 2, scale 1/ε), angle uniform on
  [0, 2π).
* :func:`knorm_gamma_ball` — R·U with R ~ Gamma(shape d+1, scale s) and U uniform in the unit ℓ2 ball of ℝ^d: the
  K-norm mechanism of Hardt–Talwar (2010) for K = ℓ2 ball, used by PrivEMDLinear (Imola et al. (EMD), implementation notes on Imola et al. (EMD)). Its density
  is ∝ exp(−‖z‖₂/s).
* :func:`uniform_sphere`, :func:`uniform_ball` — uniform on the unit sphere S^{d−1} / in the unit ball of ℝ^d.

Float gaps (δ-level, stated here once; 2026-11-23 noise review). numpy draws these laws from 53-bit uniforms, so
their tails are cut: Gumbel −β·log(−log U) lies in about [−3.6β, 36.7β] and Laplace within ±36.7b, each missing a
tail mass of about 2⁻⁵³ ≈ 1e-16; the exponential mechanisms that pick an index by one 53-bit uniform
(``grid_means.private_interval.sample_log_weights``) resolve probabilities to 2⁻⁵³ and drop weights below e⁻⁷⁴⁵.
Each is a statistical distance of order 1e-16 per draw from the exact law, i.e. an additive δ of that order on a
pure-ε claim — negligible next to any configured δ, and not added to the charged costs. The discrete samplers'
own gap is discussed in :mod:`streamdp.noise.discrete`. Float *outputs* are a separate matter: a float release
must not add float noise to a data-dependent float (Mironov 2012); see ``mechanisms/granular_laplace.py`` and
docs/DECISIONS.md ("Float releases are drawn on a public grid").

The samplers only draw noise; the privacy cost of each use is stated by the mechanism that adds it.
Bad parameters raise ``ValueError`` naming the parameter.
"""

from __future__ import annotations

import math
import operator

import numpy as np

from streamdp.noise.discrete import (_shape, discrete_gaussian, discrete_gaussian_array, discrete_laplace,
                                    lattice_l2_laplace)

__all__ = [
    "gaussian",
    "laplace",
    "gumbel",
    "exponential",
    "discrete_gaussian",
    "discrete_gaussian_array",
    "discrete_laplace",
    "lattice_l2_laplace",
    "planar_laplace",
    "knorm_gamma_ball",
    "uniform_sphere",
    "uniform_ball",
]


# --------------------------------------------------------------------------------------------------- validation
#: Largest scale of the continuous samplers: a few dozen scales still fit a float64 (a sample at 1.7e308 was ±inf)
MAX_SCALE = 1e300


def _positive(x, name: str, upper: float = MAX_SCALE):
    """A finite positive float ≤ ``upper`` (or float array, every entry so); ValueError naming ``name``. Booleans and
    strings are refused (numpy would read True as 1.0 and "3" as 3.0)."""
    if isinstance(x, (bool, np.bool_, str, bytes)):
        raise ValueError(f"{name} must be a real number (or array of reals), got {x!r}")
    try:
        a = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number (or array of reals), got {x!r}") from None
    if a.size == 0:
        raise ValueError(f"{name} must not be empty")
    if not np.all(np.isfinite(a)) or not np.all(a > 0):
        raise ValueError(f"{name} must be finite and > 0, got {x!r}")
    if np.any(a > upper):
        raise ValueError(f"{name} must be ≤ {upper:g} (a larger scale overflows float64 samples), got {x!r}")
    return float(a) if a.ndim == 0 else a


def _positive_scalar(x, name: str) -> float:
    if np.ndim(x) != 0:
        raise ValueError(f"{name} must be a scalar, got an array of shape {np.shape(x)}")
    return _positive(x, name)


def _dimension(d) -> int:
    if isinstance(d, bool):
        raise ValueError(f"d must be a positive integer, got {d!r}")
    try:
        d = operator.index(d)
    except TypeError:
        raise ValueError(f"d must be a positive integer, got {d!r}") from None
    if d < 1:
        raise ValueError(f"d must be a positive integer, got {d!r}")
    return d


# ------------------------------------------------------------------------------------------------- scalar laws
def gaussian(rng: np.random.Generator, sigma, size=None):
    """N(0, σ²), float64 (ziggurat over the ChaCha stream)."""
    return rng.normal(0.0, _positive(sigma, "sigma"), size)


def laplace(rng: np.random.Generator, b, size=None):
    """Lap(b): density exp(−|x|/b)/(2b), variance 2b², float64."""
    return rng.laplace(0.0, _positive(b, "b"), size)


def gumbel(rng: np.random.Generator, beta, size=None):
    """Gumbel(0, β): CDF exp(−exp(−x/β)), mean γ_Euler·β, variance π²β²/6, float64."""
    return rng.gumbel(0.0, _positive(beta, "beta"), size)


def exponential(rng: np.random.Generator, scale, size=None):
    """Exponential with mean ``scale``: density exp(−x/scale)/scale on x ≥ 0, float64."""
    return rng.exponential(_positive(scale, "scale"), size)


# ------------------------------------------------------------------------------------------------- vector laws
def uniform_sphere(rng: np.random.Generator, d: int, size=None) -> np.ndarray:
    """Uniform points on the unit sphere S^{d−1} ⊂ ℝ^d, shape ``size + (d,)`` (normalised standard normals).

    For d = 1 the sphere is {−1, +1}.
    """
    d = _dimension(d)
    shape = _shape(size)
    n = math.prod(shape)
    z = rng.standard_normal((n, d))
    norms = np.sqrt(np.einsum("ij,ij->i", z, z))
    bad = norms == 0.0  # probability ~0 (every coordinate exactly 0.0); redraw rather than divide by zero
    while np.any(bad):
        idx = np.flatnonzero(bad)
        z[idx] = rng.standard_normal((idx.size, d))
        norms[idx] = np.sqrt(np.einsum("ij,ij->i", z[idx], z[idx]))
        bad = norms == 0.0
    z /= norms[:, None]
    return z.reshape(shape + (d,))


def uniform_ball(rng: np.random.Generator, d: int, size=None) -> np.ndarray:
    """Uniform points in the unit ball of ℝ^d, shape ``size + (d,)``: S·V^{1/d}, S uniform on the sphere,
    V ~ U[0, 1) (so the radius has CDF r^d)."""
    d = _dimension(d)
    shape = _shape(size)
    s = uniform_sphere(rng, d, shape)
    r = rng.random(shape) ** (1.0 / d)
    s *= r[..., None]
    return s


def planar_laplace(rng: np.random.Generator, epsilon: float, size=None) -> np.ndarray:
    """Planar Laplace on ℝ²: density (ε²/2π)·exp(−ε‖z‖₂), shape ``size + (2,)`` (Liang–Yi (CGP) Lemma 2.6, App. A).

    Polar form: the radius has density ε²·r·e^{−εr}, i.e. Gamma(shape 2, scale 1/ε), drawn as the sum of two
    independent Exp(1/ε); the angle is uniform on [0, 2π). (Equivalent to the inverse-CDF form
    r = −(W₋₁((u−1)/e) + 1)/ε quoted in the notes, without the Lambert-W evaluation.) With ε = ε_GP/K for a
    K-Lipschitz location query this is ε_GP-geo-indistinguishable; its cost is charged by the mechanism.
    """
    epsilon = _positive_scalar(epsilon, "epsilon")
    if epsilon < 1.0 / MAX_SCALE:
        raise ValueError(f"epsilon must be ≥ {1.0 / MAX_SCALE:g} (the radius scale 1/ε overflows), got {epsilon!r}")
    shape = _shape(size)
    radius = rng.standard_exponential(shape)
    radius += rng.standard_exponential(shape)
    radius /= epsilon
    angle = rng.random(shape) * (2.0 * math.pi)
    out = np.empty(shape + (2,), dtype=np.float64)
    np.multiply(radius, np.cos(angle), out=out[..., 0])
    np.multiply(radius, np.sin(angle), out=out[..., 1])
    return out


def knorm_gamma_ball(rng: np.random.Generator, d: int, scale: float, size=None) -> np.ndarray:
    """K-norm noise for the ℓ2 ball: R·U, R ~ Gamma(shape d+1, scale), U uniform in the unit ball of ℝ^d.

    Shape ``size + (d,)``. The law has density ∝ exp(−‖z‖₂/scale) on ℝ^d (Hardt–Talwar 2010, K-norm mechanism
    with K = unit ℓ2 ball; PrivEMDLinear of Imola et al. (EMD) with scale = L·ω, implementation notes on Imola et al. (EMD)). Proof sketch: ‖R·U‖ = R·V with
    V = ‖U‖ ~ Beta(d, 1) independent of R, and Gamma(d+1)·Beta(d, 1) = Gamma(d), so the norm has density
    ∝ r^{d−1}e^{−r/scale} and the direction is uniform — exactly the radial law of ∝ exp(−‖z‖/scale).
    Consequently the *norm* of the output is Gamma(shape d, scale), not d+1 (R itself is Gamma(d+1)); drawing
    Gamma(d) with U on the sphere gives the same law for ℓ2 only — never mix Gamma(d+1) with the sphere.
    """
    d = _dimension(d)
    scale = _positive_scalar(scale, "scale")
    shape = _shape(size)
    u = uniform_ball(rng, d, shape)
    r = rng.gamma(d + 1.0, scale, shape)
    u *= r[..., None]
    return u
