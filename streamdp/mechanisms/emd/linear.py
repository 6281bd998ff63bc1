"""PrivEMDLinear: d_EM-private linear queries (Imola et al. (EMD) Alg. 1, Thm 4.1, Lemma 4.2; implementation notes on Imola et al. (EMD), item 1).

A linear query on a user's multiset D is the mean of a vector function over the items,

    q_f(D) = (1/|D|)·Σ_{x∈D} f(x) ∈ ℝ^d,

with f L-Lipschitz from (X, d_X) to (ℝ^d, ‖·‖₂). Then ‖q_f(D) − q_f(D')‖₂ ≤ L·d_EM(D, D') for multisets of any
sizes (Imola et al. (EMD) Thm 4.1: push the optimal coupling through f). The release is

    q_f(D) + L·R·U,   R ~ Gamma(shape d+1, scale ω),   U uniform in the unit ℓ2 ball,

whose noise density is ∝ exp(−‖z‖₂/(L·ω)) (Hardt–Talwar K-norm mechanism, :func:`samplers.knorm_gamma_ball`).
The likelihood ratio at any output is therefore ≤ exp(‖Δq‖/(Lω)) ≤ exp(d_EM/ω):

* local model (each user releases its own q): ω = 1/α ⇒ α-unbounded local d_EM-DP (Imola et al. (EMD) Lemma 4.2);
* central model (one release of the mean over n users with equal public sizes m): changing one user's D_i moves
  the global mean by ≤ L·d_EM(D_i, D_i')/n, so ω = 1/(n·α) ⇒ α-bounded central d_EM-DP (Imola et al. (EMD) Lemma 4.2).

In one dimension the noise is exactly Laplace(L·ω): Gamma(2, ω)·Uniform[−1, 1] has density e^{−|z|/ω}/(2ω).

Indicator (region) queries are not Lipschitz: use a kernel-smoothed indicator.

**On a grid (review 12).** q + float noise computed in float64 leaks through its low bits (Mironov 2012): some
outputs would be possible for one dataset and impossible for a neighbour. The release is therefore drawn on a public
grid by :func:`streamdp.mechanisms.granular_l2_laplace.granular_l2_laplace` (which proves the bound):
g·(rint(q/g) + Z), Z on ℤ^d with Pr[z] ∝ exp(−‖z‖₂/τ), τ = Lω/g ∈ [2³⁶, 2³⁷), g = 2^{⌊log2(Lω)⌋−36} — the lattice
version of the K-norm law above, with ‖Z‖·g ≈ Gamma(d, Lω). The likelihood ratio is then
≤ exp((‖Δq‖ + √m≠·g)/(Lω)), so **the guarantee is α-d_EM-DP with respect to d_EM + a instead of d_EM** (D ≠ D'):

* local: a = √d·g/L (ω = 1/α);
* central: a = n·√d·g/L (ω = 1/(nα); one user moves the mean by ≤ L·d_EM/n);

in both a ≤ √d·2⁻³⁶/α (:meth:`PrivEMDLinear.grid_distance`). The charged Cost.emd(α) is unchanged. d ≤ 32 (the
exact lattice sampler's acceptance rate falls to 2.2·10⁻⁴ at d = 32): a larger ``dim`` is refused (ValueError).
"""

from __future__ import annotations

import math

import numpy as np

from streamdp.accounting.cost import Cost
from streamdp.mechanisms.granular_l2_laplace import MAX_LATTICE_DIM, granular_l2_laplace, grid_distance

__all__ = ["PrivEMDLinear"]

_MODELS = ("local", "central")


def _pos(x, name: str) -> float:
    x = float(x)
    if not math.isfinite(x) or x <= 0:
        raise ValueError(f"{name} must be finite and > 0, got {x!r}")
    return x


class PrivEMDLinear:
    """Release q_f(D) + L·R·U (Imola et al. (EMD) Alg. 1), drawn on the grid g(Lω)·ℤ^d by its lattice version (module docstring:
    α-d_EM-DP with respect to d_EM + :meth:`grid_distance`).

    Parameters
    ----------
    alpha : the d_EM-DP parameter α (per unit of d_EM; d_X normalised to ≤ 1).
    lipschitz : L, the Lipschitz constant of f : (X, d_X) → (ℝ^d, ‖·‖₂).
    dim : d, the output dimension of f.
    model : ``"local"`` (ω = 1/α; each user randomises its own mean; also valid for unbounded sizes) or
        ``"central"`` (ω = 1/(n·α); the mean over n users holding equally many items, sizes public).
    n_users : n, required for the central model.
    """

    def __init__(self, alpha: float, lipschitz: float, dim: int, model: str = "local", n_users: int | None = None):
        self.alpha = _pos(alpha, "alpha")
        self.lipschitz = _pos(lipschitz, "lipschitz")
        if isinstance(dim, bool) or int(dim) != dim or int(dim) < 1:
            raise ValueError(f"dim must be a positive integer, got {dim!r}")
        self.dim = int(dim)
        if self.dim > MAX_LATTICE_DIM:
            raise ValueError(f"dim must be ≤ {MAX_LATTICE_DIM}: the release is drawn on a grid by an exact lattice "
                             f"ℓ2-Laplace sampler whose acceptance rate is hopeless above (got dim = {self.dim})")
        if model not in _MODELS:
            raise ValueError(f"model must be one of {_MODELS}, got {model!r}")
        self.model = model
        if model == "central":
            if n_users is None or isinstance(n_users, bool) or int(n_users) != n_users or int(n_users) < 1:
                raise ValueError(f"n_users must be a positive integer for the central model, got {n_users!r}")
            self.n_users = int(n_users)
        else:
            self.n_users = None

    @property
    def omega(self) -> float:
        """Gamma scale ω: 1/α (local) or 1/(n·α) (central) — Imola et al. (EMD) Lemma 4.2."""
        if self.model == "local":
            return 1.0 / self.alpha
        return 1.0 / (self.n_users * self.alpha)

    @property
    def noise_scale(self) -> float:
        """L·ω: the noise density is ∝ exp(−‖z‖₂/(L·ω)); in 1-D it is Laplace(L·ω)."""
        return self.lipschitz * self.omega

    def grid_distance(self) -> float:
        """a: the release is α-d_EM-DP with respect to d_EM + a (module docstring): √d·g/L (local) or n·√d·g/L
        (central), g = 2^{⌊log2(Lω)⌋−36}."""
        k = self.lipschitz if self.model == "local" else self.lipschitz / self.n_users
        return grid_distance(self.noise_scale, self.dim, k)

    def cost(self) -> Cost:
        """α-d_EM-DP, δ = 0 (Imola et al. (EMD) Lemma 4.2): Cost.emd(α) — with respect to d_EM + :meth:`grid_distance`."""
        return Cost.emd(self.alpha)

    def expected_noise_norm(self) -> float:
        """E‖L·R·U‖₂ = d·L·ω (the norm of the K-norm noise is Gamma(shape d, scale Lω))."""
        return self.dim * self.noise_scale

    # ------------------------------------------------------------------------------------------------ queries
    def _values(self, f_values) -> np.ndarray:
        v = np.asarray(f_values, dtype=np.float64)
        if v.ndim == 1 and self.dim == 1:
            v = v[:, None]
        if v.ndim != 2 or v.shape[1] != self.dim or v.shape[0] == 0:
            raise ValueError(f"f_values must be an (m, {self.dim}) array of f(x) for the m ≥ 1 items")
        if not np.all(np.isfinite(v)):
            raise ValueError("f_values must be finite")
        return v

    def query(self, f_values) -> np.ndarray:
        """q_f(D) = mean of f over the items (rows of ``f_values``)."""
        return self._values(f_values).mean(axis=0)

    def release(self, rng: np.random.Generator, f_values) -> np.ndarray:
        """One release.

        Local model: ``f_values`` is (m, d) — f at one user's m items (m may differ between users).
        Central model: ``f_values`` is (n, m, d) — f at each of the n users' m items (bounded: equal, public m);
        the released quantity is the global mean.
        """
        if self.model == "local":
            q = self.query(f_values)
        else:
            v = np.asarray(f_values, dtype=np.float64)
            if v.ndim == 2 and self.dim == 1:
                v = v[..., None]
            if v.ndim != 3 or v.shape[0] != self.n_users or v.shape[2] != self.dim or v.shape[1] == 0:
                raise ValueError(
                    f"central f_values must be an (n_users={self.n_users}, m, {self.dim}) array (equal sizes m)"
                )
            if not np.all(np.isfinite(v)):
                raise ValueError("f_values must be finite")
            q = v.mean(axis=(0, 1))
        return granular_l2_laplace(rng, q, self.noise_scale)  # on the grid g(Lω) (module docstring)

    def release_means(self, rng: np.random.Generator, means) -> np.ndarray:
        """Vectorised local releases: ``means`` is (n, d), one precomputed q_f(D_i) per user; each row gets
        independent noise (each user's release costs ``cost()`` to that user only)."""
        if self.model != "local":
            raise ValueError("release_means is for the local model; use release() for the central model")
        q = np.asarray(means, dtype=np.float64)
        if q.ndim == 1 and self.dim == 1:
            q = q[:, None]
        if q.ndim != 2 or q.shape[1] != self.dim:
            raise ValueError(f"means must be an (n, {self.dim}) array")
        if not np.all(np.isfinite(q)):
            raise ValueError("means must be finite")
        return granular_l2_laplace(rng, q, self.noise_scale)  # one lattice draw per row (module docstring)
