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

``lattice_l2_laplace(rng, d, tau)`` draws Z on ℤ^d with Pr[Z = z] ∝ exp(−‖z‖₂/τ) (the lattice ℓ2-Laplace of the
granular planar Laplace and K-norm releases, :mod:`streamdp.mechanisms.granular_l2_laplace`) by rejection from the
product of d independent Lap_Z(√d·τ): a proposal z (pmf p(z) ∝ exp(−‖z‖₁/(√d·τ))) is accepted with probability
A(z) = exp(−(‖z‖₂ − ‖z‖₁/√d)/τ), which is ≤ 1 because ‖z‖₁ ≤ √d·‖z‖₂ (Cauchy–Schwarz). Exactness: p(z)·A(z) ∝
exp(−‖z‖₂/τ), and the output is the first accepted proposal of an i.i.d. sequence, whose law is p·A/Σ p·A — exactly
∝ exp(−‖z‖₂/τ) (normalisable: Σ_z exp(−‖z‖₂/τ) ≤ Σ_z exp(−‖z‖₁/(√d·τ)) < ∞). The acceptance rate is
Σ_z e^{−‖z‖₂/τ} / Σ_z e^{−‖z‖₁/(√dτ)}, which for large τ tends to the ratio of the integrals,
d!·vol(B₂^d) / (2√d)^d (∫e^{−‖x‖_K} = d!·vol(K); the ℓ1 ball of radius √d has volume (2√d)^d/d!): 1 at d = 1,
0.785 at d = 2, 0.605 at d = 3, 0.156 at d = 8, 0.0175 at d = 16, 2.2·10⁻⁴ at d = 32 (≈ 4600 proposals of 32
coordinates per sample) and 2.4·10⁻⁵ at d = 40 — so d > MAX_LATTICE_DIM = 32 is refused (ValueError). Vectorised:
each pending sample gets a block of ≈ 1.2/rate i.i.d. proposals per round and keeps the first accepted one; samples
with none accepted propose again in the next round (each sample is then the first accepted proposal of its own
i.i.d. sequence — the law above; the proposals after it are discarded unseen). The same float64 caveat as the
discrete Gaussian:
A(z) is computed in float64 (‖z‖₂ of integers below ~2⁴⁶ to a relative 10⁻¹⁶) and compared with a 53-bit uniform,
a statistical distance of order 10⁻¹⁵ per draw; the proposal scale √d·τ must be ≤ MAX_SCALE.
"""

from __future__ import annotations

import math
import operator

import numpy as np

__all__ = ["discrete_laplace", "discrete_gaussian", "discrete_gaussian_array", "lattice_l2_laplace",
           "lattice_l2_acceptance_rate", "MAX_SCALE", "MAX_LATTICE_DIM"]

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


#: Largest dimension of :func:`lattice_l2_laplace`: its acceptance rate is ≈ d!·vol(B₂^d)/(2√d)^d, 2.2·10⁻⁴ at d = 32
#: and 2.4·10⁻⁵ at d = 40 (module docstring).
MAX_LATTICE_DIM = 32


def lattice_l2_acceptance_rate(d: int) -> float:
    """The large-τ acceptance rate d!·vol(B₂^d)/(2√d)^d of :func:`lattice_l2_laplace` (module docstring)."""
    return math.exp(math.lgamma(d + 1) + (d / 2) * math.log(math.pi) - math.lgamma(d / 2 + 1)
                    - d * math.log(2.0 * math.sqrt(d)))


def lattice_l2_laplace(rng: np.random.Generator, d: int, tau: float, size=None):
    """Z on ℤ^d with Pr[Z = z] ∝ exp(−‖z‖₂/τ), int64 of shape ``size + (d,)``.

    Rejection from d independent Lap_Z(√d·τ), acceptance exp(−(‖z‖₂ − ‖z‖₁/√d)/τ) ≤ 1; exact up to the float64
    rounding of the acceptance probabilities (module docstring, with the proof and the acceptance rates).
    1 ≤ d ≤ MAX_LATTICE_DIM = 32 and 0 < √d·τ ≤ MAX_SCALE, ValueError otherwise.
    """
    if isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer)) or d < 1:
        raise ValueError(f"d must be a positive integer, got {d!r}")
    d = int(d)
    if d > MAX_LATTICE_DIM:
        raise ValueError(f"d must be ≤ {MAX_LATTICE_DIM} for the lattice ℓ2-Laplace (rejection from a product of "
                         f"discrete Laplaces accepts ≈ {lattice_l2_acceptance_rate(d):.1e} of the proposals at "
                         f"d = {d}), got {d}")
    tau = _scalar_scale(tau, "tau")
    root_d = math.sqrt(d)
    t = _scalar_scale(root_d * tau, "sqrt(d)*tau")
    shape = _shape(size)
    n = math.prod(shape) if shape else 1
    p = -math.expm1(-1.0 / t)  # 1 − q for Lap_Z(√d·τ)
    out = np.empty((n, d), dtype=np.int64)
    pending = np.arange(n)
    rate = lattice_l2_acceptance_rate(d)
    while pending.size:
        # at most _BATCH·d proposal coordinates per round (bounded memory); rows beyond are drawn in later rounds
        reps = int(1.2 / rate) + 1  # proposals per pending row this round (≈ 1.2 expected acceptances)
        rows = pending[: max(1, _BATCH // (d * reps))]  # ≤ max(_BATCH, d·reps) proposal coordinates per round
        m = rows.size * reps
        z = _lap_z(rng, p, m * d).reshape(m, d)
        zf = z.astype(np.float64)
        l2 = np.sqrt(np.einsum("ij,ij->i", zf, zf))
        l1 = np.abs(zf).sum(axis=1)
        acc = rng.random(m) < np.exp(-(l2 - l1 / root_d) / tau)
        # row r's proposals are z[r·reps:(r+1)·reps]; it takes its first accepted one (if any)
        acc2 = acc.reshape(rows.size, reps)
        got = acc2.any(axis=1)
        first = acc2.argmax(axis=1)
        idx = np.flatnonzero(got)
        out[rows[idx]] = z.reshape(rows.size, reps, d)[idx, first[idx]]
        done = np.zeros(n, dtype=bool)
        done[rows[idx]] = True
        pending = pending[~done[pending]]
    return out.reshape(shape + (d,)) if shape else out[0]
