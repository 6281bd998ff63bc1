"""Integer-valued noise: the discrete Laplace and the discrete Gaussian of Canonne, Kamath and Steinke (2020).

Canonne, Kamath, Steinke, *The Discrete Gaussian for Differential Privacy* (NeurIPS 2020), "CKS" below.

* Discrete Laplace ``Lap_Z(t)``: Pr[X = x] = (1 − q)/(1 + q) · q^|x| with q = e^{−1/t}, x ∈ ℤ (CKS sample it by
  Alg. 2).
  Sampled as G₁ − G₂ with G₁, G₂ i.i.d. geometric of success probability 1 − q: the difference of two
  i.i.d. geometrics has exactly this law (the convolution sum is Σ_k (1−q)² q^{2k+|x|} = (1−q)/(1+q) q^|x|).
* Discrete Gaussian ``N_Z(0, σ²)``: Pr[X = x] = exp(−x²/(2σ²)) / Σ_{y∈ℤ} exp(−y²/(2σ²)) (CKS Def. 1).
  Sampled by rejection from ``Lap_Z(t)`` with t = ⌊σ⌋ + 1 (CKS Alg. 3): a proposal Y is accepted with
  probability exp(−(|Y| − σ²/t)²/(2σ²)). Indeed exp(−y²/(2σ²)) / exp(−|y|/t) =
  exp(−(|y| − σ²/t)²/(2σ²)) · exp(σ²/(2t²)), and the last factor does not depend on y, so the accepted values
  follow N_Z(0, σ²) exactly; the acceptance rate is ≈ 0.46 for σ → 0, ≈ 0.54 at σ = 1 and → 0.76 for large σ.

Exactness. CKS give an algorithm that is exact in rational arithmetic (Bernoulli(exp(−γ)) from fair coins,
Alg. 1/2). Here the geometrics come from numpy's ``Generator.geometric`` (inversion of a float64 exponential for
small success probabilities, sequential search otherwise) and the Bernoulli(exp(−x)) acceptance compares a float64
uniform (53-bit resolution) with ``exp(−x)``. The output law therefore equals N_Z(0, σ²) up to float64 rounding
of those probabilities: each Bernoulli is off by at most about 2⁻⁵³ plus one ulp of ``exp``, so the statistical
distance Δ to N_Z is of order 10⁻¹⁵ per sample (an estimate from the 53-bit resolution of every draw, not a
proved bound). That is fine for our use because (a) the noise is added to an *integer* count and the release
is an integer, so there is no floating-point least-significant-bit channel (Mironov 2012) — the reason streamdp
uses the discrete Gaussian at all — and nothing about the data enters the float computations (σ and the draws
only); (b) a sampler at statistical distance Δ from N_Z keeps a δ-approximate guarantee with δ replaced by
δ + Δ per sample, and Δ ≈ 10⁻¹⁵ is negligible next to the δ's a count release is configured with. A deployment
that needs δ at that scale must swap in an exact-rational sampler (same signature).
The privacy cost of N_Z(0, σ²) on a sensitivity-Δ₂ query is ρ = Δ₂²/(2σ²) zCDP (CKS Thm. 4) — charged by the
mechanisms that use it, not here.

Everything is vectorised: proposals are drawn in batches sized from the expected acceptance rate, and only the
shortfall is redrawn. Output dtype is ``int64``.

``discrete_gaussian_array(rng, sigma)`` draws one N_Z(0, σ_i²) per element of an *array* of σ's (the granular
Gaussian mechanism of the PIE rounds, one σ per user): the same rejection, element by element — element i
proposes from Lap_Z(t_i), t_i = ⌊σ_i⌋ + 1, accepts with probability exp(−(|Y| − σ_i²/t_i)²/(2σ_i²)), and only the
rejected elements propose again. Each element's proposals are independent of the others' and of its own earlier
ones, so its output is the first accepted proposal of an i.i.d. sequence: exactly the law of the scalar sampler
for σ_i (the scalar sampler keeps the accepted values of one i.i.d. batch, the same law), with the same
point-mass rule (σ_i < POINT_MASS_SIGMA gives 0) and the same range check (σ_i ≤ MAX_SCALE).
"""

from __future__ import annotations

import math
import operator

import numpy as np

__all__ = ["discrete_laplace", "discrete_gaussian", "discrete_gaussian_array", "MAX_SCALE"]

#: Largest σ or t accepted. Values stay far inside int64 and float64 integers are exact up to 2⁵³; beyond this
#: scale a count release would be pure noise anyway.
MAX_SCALE = float(2**40)

#: Samples produced per internal batch (bounds the temporary memory to a few tens of MB for any ``size``).
_BATCH = 1 << 20


#: Below this σ, N_Z(0, σ²) is the point mass at 0 to float precision: Pr[X ≠ 0] < 3·exp(−1/(2σ²)) < 10⁻²⁴⁰. The
#: sampler returns zeros there (its rejection step computed 0·∞ = NaN for σ ≲ 5e-155 and never accepted).
POINT_MASS_SIGMA = 0.03


def _scalar_scale(x, name: str) -> float:
    """A positive finite scalar ≤ MAX_SCALE, or a ValueError naming ``name`` (booleans and strings refused)."""
    if isinstance(x, (bool, np.bool_, str, bytes)):
        raise ValueError(f"{name} must be a real number, got {x!r}")
    if np.ndim(x) != 0:
        raise ValueError(f"{name} must be a scalar for the discrete samplers, got an array of shape {np.shape(x)}")
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number, got {x!r}") from None
    if not math.isfinite(v) or v <= 0.0:
        raise ValueError(f"{name} must be a finite number > 0, got {x!r}")
    if v > MAX_SCALE:
        raise ValueError(f"{name} must be ≤ 2**40 (≈1.1e12), got {x!r}")
    return v


def _shape(size) -> tuple[int, ...]:
    """Normalise numpy's ``size`` argument (None, an int or a tuple of ints) to a shape tuple."""
    if size is None:
        return ()
    if isinstance(size, (int, np.integer)) and not isinstance(size, bool):
        size = (size,)
    try:
        shape = tuple(operator.index(s) for s in size)
    except TypeError:
        raise ValueError(f"size must be None, an int or a tuple of ints, got {size!r}") from None
    if any(s < 0 for s in shape):
        raise ValueError(f"size must not contain negative dimensions, got {size!r}")
    return shape


def _finish(out: np.ndarray, shape: tuple[int, ...]):
    return out.reshape(shape) if shape else out[0]


def _lap_z(rng: np.random.Generator, q_complement: float, n: int) -> np.ndarray:
    """n draws of Lap_Z(t) as a difference of two geometrics of success probability 1 − q = 1 − e^{−1/t}."""
    return rng.geometric(q_complement, n) - rng.geometric(q_complement, n)


def discrete_laplace(rng: np.random.Generator, t: float, size=None):
    """Discrete Laplace Lap_Z(t): Pr[x] ∝ exp(−|x|/t) on ℤ (CKS Alg. 2's law), as int64.

    ``t`` > 0 need not be an integer. Variance 2q/(1 − q)² with q = e^{−1/t}.
    """
    t = _scalar_scale(t, "t")
    shape = _shape(size)
    n = math.prod(shape) if shape else 1
    p = -math.expm1(-1.0 / t)  # 1 − q, accurate for large t
    out = _lap_z(rng, p, n).astype(np.int64, copy=False)
    return _finish(out, shape)


def _acceptance_rate_guess(sigma: float) -> float:
    # Slightly below the measured rates (0.445 minimum near σ = 0.3, 0.54 at σ = 1, → 0.760 as σ → ∞) so that
    # one batch usually suffices; the shortfall, if any, is redrawn using the observed rate.
    if sigma < 1.0:
        return 0.43
    if sigma < 3.0:
        return 0.52
    return 0.69


def discrete_gaussian(rng: np.random.Generator, sigma: float, size=None):
    """Discrete Gaussian N_Z(0, σ²): Pr[x] ∝ exp(−x²/(2σ²)) on ℤ, as int64 (CKS Alg. 3, vectorised).

    Rejection from Lap_Z(t), t = ⌊σ⌋ + 1, acceptance exp(−(|Y| − σ²/t)²/(2σ²)). Not the exact-rational
    version of CKS: the Bernoulli(exp(−x)) trials and geometrics use float64, so the law equals N_Z(0, σ²) up to
    float64 rounding of the acceptance probabilities (statistical distance of order 10⁻¹⁵ per sample), which is
    harmless here because outputs are integers (no floating-point side channel) and such a distance is negligible
    next to the δ's counts are configured with — see the module docstring. Its variance is below σ² (CKS;
    visibly so for σ ≲ 1).
    """
    sigma = _scalar_scale(sigma, "sigma")
    shape = _shape(size)
    n = math.prod(shape) if shape else 1
    if sigma < POINT_MASS_SIGMA:
        return _finish(np.zeros(n, dtype=np.int64), shape)
    t = math.floor(sigma) + 1.0
    p = -math.expm1(-1.0 / t)
    centre = sigma * sigma / t
    inv_two_var = 1.0 / (2.0 * sigma * sigma)
    out = np.empty(n, dtype=np.int64)
    filled = 0
    rate = _acceptance_rate_guess(sigma)
    while filled < n:
        want = min(n - filled, _BATCH)
        m = int(want / rate) + 64
        y = _lap_z(rng, p, m)
        dev = np.abs(y).astype(np.float64)
        dev -= centre
        dev *= dev
        dev *= -inv_two_var
        accepted = y[rng.random(m) < np.exp(dev, out=dev)]
        k = min(accepted.size, n - filled)
        out[filled:filled + k] = accepted[:k]
        filled += k
        # Next batch: observed rate (bounded away from 0) with 10 % head-room.
        rate = max(0.9 * accepted.size / m, 0.05)
    return _finish(out, shape)


def _array_scale(x, name: str) -> np.ndarray:
    """A float64 array (any shape, 0-d allowed) whose entries are finite, > 0 and ≤ MAX_SCALE; ValueError naming
    ``name`` otherwise (booleans and strings refused, as in :func:`_scalar_scale`)."""
    if isinstance(x, (bool, np.bool_, str, bytes)):
        raise ValueError(f"{name} must be a real number or an array of reals, got {x!r}")
    try:
        a = np.asarray(x)
        if a.dtype.kind not in "iuf":
            raise TypeError
        a = a.astype(np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number or an array of reals, got {x!r}") from None
    if not np.all(np.isfinite(a)) or not np.all(a > 0.0):
        raise ValueError(f"{name} must be finite and > 0 in every element")
    if np.any(a > MAX_SCALE):
        raise ValueError(f"{name} must be ≤ 2**40 (≈1.1e12) in every element")
    return a


def discrete_gaussian_array(rng: np.random.Generator, sigma):
    """One N_Z(0, σ_i²) per element of the array ``sigma`` (any shape), as int64 of the same shape (an int64
    scalar for a 0-d ``sigma``).

    Element i: rejection from Lap_Z(t_i), t_i = ⌊σ_i⌋ + 1, acceptance exp(−(|Y| − σ_i²/t_i)²/(2σ_i²)) (CKS Alg. 3);
    only the rejected elements are redrawn, so each element has exactly the law of :func:`discrete_gaussian`
    with its σ_i (module docstring), up to the same float64 rounding. σ_i < POINT_MASS_SIGMA gives 0; every σ_i
    must be finite, > 0 and ≤ MAX_SCALE (ValueError otherwise).
    """
    sig = _array_scale(sigma, "sigma")
    shape = sig.shape
    flat = sig.reshape(-1)
    out = np.zeros(flat.size, dtype=np.int64)
    live = np.flatnonzero(flat >= POINT_MASS_SIGMA)  # the others are the point mass at 0
    for start in range(0, live.size, _BATCH):  # bounded temporary memory for any size
        pending = live[start:start + _BATCH]
        s = flat[pending]
        t = np.floor(s) + 1.0
        p = -np.expm1(-1.0 / t)  # 1 − q_i, accurate for large t_i
        centre = s * s / t
        inv_two_var = 1.0 / (2.0 * s * s)
        while pending.size:
            y = rng.geometric(p) - rng.geometric(p)  # Lap_Z(t_i), one proposal per pending element
            dev = np.abs(y).astype(np.float64)
            dev -= centre
            dev *= dev
            dev *= -inv_two_var
            acc = rng.random(pending.size) < np.exp(dev, out=dev)
            out[pending[acc]] = y[acc]
            rej = ~acc
            pending, p, centre, inv_two_var = pending[rej], p[rej], centre[rej], inv_two_var[rej]
    return out.reshape(shape) if shape else out[0]
