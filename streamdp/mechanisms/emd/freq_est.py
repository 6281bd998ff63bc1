"""FreqEstLocal with the clustered k-RR (Imola et al. (EMD) Alg. 4, §6.2, Thm 6.5–6.6, App. D.3; implementation notes on Imola et al. (EMD), item 4).

Domain: the clustered metric on k = c·g items (c clusters of g items; d = 0 same item, γ within a cluster, 1
across). The metric k-randomised response reports y for input x with probability

    P(y | x) = e^{−α0·d(x, y)} / Z,     Z = 1 + (g − 1)e^{−α0γ} + (k − g)e^{−α0}

(Z is the same for every x on this metric). It is α0-d_X-DP: P(y|x)/P(y|x') = e^{α0(d(x',y) − d(x,y))} ≤
e^{α0·d(x,x')} by the triangle inequality. Its column-stochastic transition matrix T[y, x] = P(y | x) is

    T = (p − q)·I + (q − r)·(I_c ⊗ J_g) + r·J_k,     p = 1/Z, q = e^{−α0γ}/Z, r = e^{−α0}/Z,

and, since I, B = I_c ⊗ J_g and J = J_k multiply as B² = gB, BJ = JB = gJ, J² = kJ, its inverse is

    T⁻¹ = a·I + b·B + e·J,   a = 1/(p − q),   b = −(q − r)/((p − q)(p − q + g(q − r))),
                             e = −r/((p − q + g(q − r))·(p + (g − 1)q + (k − g)r)) = −r/(p − q + g(q − r))

(the last factor is a column sum of T, = 1). FreqEstLocal releases each item through PrivEMDItemWise with this
randomiser and estimates the histogram by ĥ = T⁻¹·v̄, v̄ = mean one-hot of the reports: E[v̄] = T·h, so ĥ is
unbiased. ĥ may have negative entries: :func:`~streamdp.mechanisms.emd.metric.project_to_simplex` before
measuring d_EM (post-processing).

Baseline (Imola et al. (EMD) Lemma 6.7): Laplace noise on each bin of the normalised global histogram; one user changing all m of
their items moves it by ≤ 2/n in ℓ1 (bounded, n users with m items each), so Lap(2/(n·ε)) per bin is ε-user-level
DP (a different guarantee from d_EM-DP; see :class:`LaplaceHistogram`).
"""

from __future__ import annotations

import math

import numpy as np

from streamdp.accounting.cost import Cost
from streamdp.mechanisms.emd.itemwise import PrivEMDItemWise
from streamdp.mechanisms.emd.metric import clustered_metric, project_to_simplex
from streamdp.noise import samplers

__all__ = [
    "ClusteredKRR",
    "clustered_krr_matrix",
    "clustered_krr_inverse",
    "apply_clustered_inverse",
    "FreqEstLocal",
    "LaplaceHistogram",
]


def _params(c, g, gamma, alpha0) -> tuple[int, int, float, float]:
    if isinstance(c, bool) or int(c) != c or int(c) < 1:
        raise ValueError(f"c must be a positive integer, got {c!r}")
    if isinstance(g, bool) or int(g) != g or int(g) < 1:
        raise ValueError(f"g must be a positive integer, got {g!r}")
    gamma = float(gamma)
    if not (0.0 < gamma <= 1.0):
        raise ValueError(f"gamma must lie in (0, 1], got {gamma!r}")
    if int(g) == 1:
        gamma = 1.0  # singleton clusters: no two items are γ apart, the metric is the discrete one and γ is unused
    alpha0 = float(alpha0)
    if not math.isfinite(alpha0) or alpha0 <= 0:
        raise ValueError(f"alpha0 must be finite and > 0, got {alpha0!r}")
    return int(c), int(g), gamma, alpha0


def _pqr(c: int, g: int, gamma: float, alpha0: float) -> tuple[float, float, float]:
    k = c * g
    wq = math.exp(-alpha0 * gamma)
    wr = math.exp(-alpha0)
    z = 1.0 + (g - 1) * wq + (k - g) * wr
    return 1.0 / z, wq / z, wr / z


def clustered_krr_matrix(c: int, g: int, gamma: float, alpha0: float) -> np.ndarray:
    """T[y, x] = P(y | x) = e^{−α0 d(x,y)}/Z on the clustered metric (dense k×k; for tests and small k)."""
    c, g, gamma, alpha0 = _params(c, g, gamma, alpha0)
    p, q, r = _pqr(c, g, gamma, alpha0)
    k = c * g
    b = np.kron(np.eye(c), np.ones((g, g)))
    return (p - q) * np.eye(k) + (q - r) * b + r * np.ones((k, k))


def _inverse_coefficients(c: int, g: int, gamma: float, alpha0: float) -> tuple[float, float, float]:
    p, q, r = _pqr(c, g, gamma, alpha0)
    u = p - q
    v = q - r
    a = 1.0 / u
    b = -v / (u * (u + g * v))
    e = -r / (u + g * v)  # the general form divides also by p + (g−1)q + (k−g)r, which equals 1
    return a, b, e


def clustered_krr_inverse(c: int, g: int, gamma: float, alpha0: float) -> np.ndarray:
    """Closed-form T⁻¹ = a·I + b·(I_c ⊗ J_g) + e·J_k (dense; see module docstring)."""
    c, g, gamma, alpha0 = _params(c, g, gamma, alpha0)
    a, b, e = _inverse_coefficients(c, g, gamma, alpha0)
    k = c * g
    return a * np.eye(k) + b * np.kron(np.eye(c), np.ones((g, g))) + e * np.ones((k, k))


def apply_clustered_inverse(v, c: int, g: int, gamma: float, alpha0: float) -> np.ndarray:
    """T⁻¹·v in O(k) without forming T⁻¹: a·v + b·(cluster sums, broadcast) + e·Σv."""
    c, g, gamma, alpha0 = _params(c, g, gamma, alpha0)
    v = np.asarray(v, dtype=np.float64)
    if v.shape != (c * g,):
        raise ValueError(f"v must have shape ({c * g},), got {v.shape}")
    a, b, e = _inverse_coefficients(c, g, gamma, alpha0)
    cluster_sums = v.reshape(c, g).sum(axis=1)
    return a * v + b * np.repeat(cluster_sums, g) + e * v.sum()


MIN_SEPARATION = 1e-9  # least 1 − e^{−α0·γ} (= u·Z) the closed-form inverse of the k-RR matrix is computed for


class ClusteredKRR:
    """The α0-d_X-DP metric k-RR on the clustered metric (an :class:`ItemRandomizer`)."""

    def __init__(self, c: int, g: int, gamma: float, alpha0: float):
        self.c, self.g, self.gamma, self.alpha0 = _params(c, g, gamma, alpha0)
        # The estimator inverts T in closed form through u = p − q = (1 − e^{−α0·γ})/Z. Below MIN_SEPARATION the
        # float difference loses most of its digits (relative error ≈ 1e-16 / (1 − e^{−α0·γ})) and at ≈ 1e-16 it
        # is 0 (a division by zero at the first window close, after users were charged: config review of
        # 2026-11-23, F4). Such an α0 gives no usable estimate anyway (the variance grows as 1/u²).
        sep = -math.expm1(-self.alpha0 * self.gamma)
        if not sep >= MIN_SEPARATION:
            raise ValueError(f"alpha0: {alpha0!r} is too small with gamma = {gamma!r} for the frequency estimator: "
                             f"1 − e^(−alpha0·gamma) = {sep:.3g} < {MIN_SEPARATION:g} (the inverse of the k-RR "
                             "matrix is not resolvable in floating point)")
        self.k = self.c * self.g
        self.p, self.q, self.r = _pqr(self.c, self.g, self.gamma, self.alpha0)

    def metric(self) -> np.ndarray:
        return clustered_metric(self.c, self.g, self.gamma)

    def matrix(self) -> np.ndarray:
        return clustered_krr_matrix(self.c, self.g, self.gamma, self.alpha0)

    def randomize(self, rng: np.random.Generator, items) -> np.ndarray:
        """Vectorised: keep the item w.p. p; another item of its cluster w.p. (g−1)q (uniform among them);
        an item of another cluster w.p. (k−g)r (uniform among them)."""
        x = np.asarray(items)
        if x.ndim != 1 or not np.issubdtype(x.dtype, np.integer):
            raise ValueError("items must be a 1-D array of integer item indices")
        if x.size and (x.min() < 0 or x.max() >= self.k):
            raise ValueError(f"items must lie in [0, {self.k})")
        n = x.size
        c, g = self.c, self.g
        u = rng.random(n)
        p_same = self.p
        p_in = (g - 1) * self.q
        out = x.astype(np.int64).copy()
        in_cluster = (u >= p_same) & (u < p_same + p_in)
        across = u >= p_same + p_in
        if g > 1 and in_cluster.any():
            idx = np.flatnonzero(in_cluster)
            pos = x[idx] % g
            off = rng.integers(0, g - 1, idx.size)
            off = off + (off >= pos)  # uniform over the g−1 other positions
            out[idx] = (x[idx] // g) * g + off
        if c > 1 and across.any():
            idx = np.flatnonzero(across)
            cl = x[idx] // g
            oc = rng.integers(0, c - 1, idx.size)
            oc = oc + (oc >= cl)  # uniform over the c−1 other clusters
            out[idx] = oc * g + rng.integers(0, g, idx.size)
        return out


class FreqEstLocal:
    """Frequency estimation with the clustered k-RR through PrivEMDItemWise (Imola et al. (EMD) Alg. 4).

    ``itemwise`` carries the accounting (composition or shuffle bound); ``estimate`` is pure post-processing.
    Local model: each user sends ``itemwise.release(rng, D_i)``; the server pools all reports. Central model
    (Imola et al. (EMD) Cor. 6.8): the curator applies it to all n·m items.
    """

    def __init__(self, itemwise: PrivEMDItemWise):
        if not isinstance(itemwise.randomizer, ClusteredKRR):
            raise ValueError("FreqEstLocal needs a PrivEMDItemWise whose randomizer is a ClusteredKRR")
        self.itemwise = itemwise
        self.krr: ClusteredKRR = itemwise.randomizer

    @classmethod
    def calibrated(cls, c, g, gamma, alpha, m, delta=0.0, model="local", n_users=None) -> "FreqEstLocal":
        c, g, gamma, _ = _params(c, g, gamma, 1.0)
        it = PrivEMDItemWise.calibrated(lambda a0: ClusteredKRR(c, g, gamma, a0), alpha, m, delta, model, n_users)
        return cls(it)

    def cost(self) -> Cost:
        return self.itemwise.cost()

    def release(self, rng: np.random.Generator, items) -> np.ndarray:
        return self.itemwise.release(rng, items)

    def estimate(self, reports) -> np.ndarray:
        """Unbiased ĥ = T⁻¹·(mean one-hot of the reports) (may be negative)."""
        y = np.asarray(reports).ravel()
        if y.size == 0:
            raise ValueError("reports must be non-empty")
        v = np.bincount(y, minlength=self.krr.k).astype(np.float64) / y.size
        if v.size != self.krr.k:
            raise ValueError(f"reports must lie in [0, {self.krr.k})")
        return apply_clustered_inverse(v, self.krr.c, self.krr.g, self.krr.gamma, self.krr.alpha0)

    def estimate_distribution(self, reports) -> np.ndarray:
        """ĥ projected onto the probability simplex (post-processing)."""
        return project_to_simplex(self.estimate(reports))


class LaplaceHistogram:
    """Baseline: normalised histogram + Lap(2/(n·ε)) per bin, projected onto the simplex (Imola et al. (EMD) Lemma 6.7).

    ε-user-level DP for n users with m items each (bounded). This is NOT an ε-d_EM-DP guarantee (a d_EM-DP
    mechanism must be more private for nearby data; the implication runs only the other way: α-d_EM-DP ⇒
    α-user-level DP because d_EM ≤ 1), so it is charged in the zCDP notion: Cost.pure_dp(ε) = ε²/2.
    ``n_users = 1`` gives the local per-user version (scale 2/ε on the user's own histogram).
    """

    def __init__(self, epsilon: float, n_users: int, k: int):
        self.epsilon = float(epsilon)
        if not math.isfinite(self.epsilon) or self.epsilon <= 0:
            raise ValueError(f"epsilon must be finite and > 0, got {epsilon!r}")
        if isinstance(n_users, bool) or int(n_users) != n_users or int(n_users) < 1:
            raise ValueError(f"n_users must be a positive integer, got {n_users!r}")
        self.n_users = int(n_users)
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or int(k) < 1:
            raise ValueError(f"k (the number of bins) must be a positive integer, got {k!r}")
        self.k = int(k)

    @property
    def scale(self) -> float:
        return 2.0 / (self.n_users * self.epsilon)

    def cost(self) -> Cost:
        return Cost.pure_dp(self.epsilon)

    def release(self, rng: np.random.Generator, h) -> np.ndarray:
        h = np.asarray(h, dtype=np.float64)
        if h.shape != (self.k,):
            raise ValueError(f"h must have shape ({self.k},)")
        return project_to_simplex(h + samplers.laplace(rng, self.scale, self.k))
