"""The binary tree's noise as a process per key, apart from the data: what ``continual_sums`` adds to a running total.

Paper: the binary mechanism (Dwork–Naor–Pitassi–Rothblum 2010; Chan–Shi–Song 2011), as used by Rogers, Unknown-Domain
Algorithms, §4.3; the variance-optimal estimate is Honaker (2015), "Efficient use of differentially private binary
trees" — both as in :mod:`streamdp.mechanisms.tree_estimators`, whose formulas this module imports.

As a matrix mechanism. Windows 1..L; the tree's nodes read by the estimator are the rows of the 0/1 *strategy*
matrix C (node (j, k) covers windows ((k−1)2^j, k·2^j], completed at window k·2^j ≤ L; plain: k odd only); every node gets its own noise
z ~ N(0, s²), drawn once and kept. The running total released at t is a fixed linear combination of the noisy nodes
completed by t (plain: the popcount(t) nodes of t's binary decomposition; optimal: Honaker's refined values), so
the release is x̂(t) = c(t) + N(t) with N(t) = Σ_v B[t, v]·z_v:

* ``variance(t)`` = Var N(t)/s² — popcount(t) (plain) or Σ_{j ∈ bits(t)} 2^j/(2^{j+1} − 1) (optimal);
* ``gram_column(t)[s]`` = G[s, t] = (CᵀC)[s, t] = the number of nodes *the estimator reads* that contain both
  windows s and t: one user's contribution vector Δ over the windows moves that node table by CΔ, of squared norm
  ΔᵀGΔ (what the individual accounting of ``continual_sums`` charges). Which nodes (release rule 2 of
  ``continual_sums``, as release rule 3 of ``continual_counts``): ``optimal`` (Honaker) reads every node completed
  by L, right children included; ``plain`` reads only the nodes of binary decompositions — odd index k (1-based),
  k·2^j ≤ L — L of them, one completed per window, and the L released totals are an invertible map of them, so
  ‖C_used Δ‖² is exactly the release's Gaussian divergence and charging the others (a right child is never
  read) only over-charged: at L = 8 a record at window 8 lies in one used node ([1..8]) but four completed ones.
  G[t, t] ≤ ⌈log2(L+1)⌉ = G[1, 1] (window 1 lies in a used node at every level), and it is smaller for later
  windows (their high-level nodes end after L and are never completed; under ``plain`` also the right children).

State per key: the noise of the nodes the estimators still need (``tree_estimators`` module docstring): plain, the
raw noise of each node of t's decomposition; optimal, its refined noise D. A key first seen after window 1 gets, in
one go, the noise state of a key with zero data up to then (plain: fresh draws for the decomposition nodes still
needed; optimal: D_j ~ N(0, V_j) independently), exactly as :class:`~streamdp.mechanisms.binary_tree.UnknownDomainBinaryTree`
does for a new item.
"""

from __future__ import annotations

import numpy as np

from streamdp.mechanisms.binary_tree import levels_for_horizon
from streamdp.mechanisms.tree_estimators import (_bits, _ctz, honaker_spine_coefficients, honaker_weights,
                                                 node_variances)
from streamdp.noise import samplers

__all__ = ["TreeNoise", "tree_gram_column", "tree_variance"]


def tree_variance(t: int, estimator: str = "plain") -> float:
    """Var N(t)/s² of the running total at window t ≥ 1 (plain: popcount(t); optimal: Honaker's Σ V_j/s²)."""
    t = int(t)
    if t < 1:
        raise ValueError(f"t must be ≥ 1, got {t}")
    if estimator == "plain":
        return float(bin(t).count("1"))
    w = honaker_weights(t.bit_length())
    return float(sum(w[j] for j in _bits(t)))


def tree_gram_column(t: int, horizon: int, estimator: str = "plain") -> np.ndarray:
    """G[s, t] for s = 0..t (index 0 unused, 0): the number of tree nodes read by ``estimator`` that contain both
    windows s and t. Node (j, k) contains window u iff ⌈u/2^j⌉ = k; it is completed iff k·2^j ≤ L; ``plain`` reads
    it iff also k is odd (a left child: part of a binary decomposition), ``optimal`` reads every completed node
    (module docstring)."""
    if estimator not in ("plain", "optimal"):
        raise ValueError(f"estimator must be 'plain' or 'optimal', got {estimator!r}")
    t, L = int(t), int(horizon)
    if not 1 <= t <= L:
        raise ValueError(f"t must be in 1..{L}, got {t}")
    s = np.arange(0, t + 1, dtype=np.int64)
    g = np.zeros(t + 1, dtype=np.float64)
    for j in range(levels_for_horizon(L)):
        k = (t - 1) >> j  # 0-based index of t's level-j node
        if ((k + 1) << j) > L:  # ends after the horizon: never completed
            continue
        if estimator == "plain" and k % 2 == 1:  # 1-based index even: a right child, never in a decomposition
            continue
        g += ((s - 1) >> j) == k
    g[0] = 0.0
    return g


class TreeNoise:
    """The noise N(t) of the binary tree's running total for every key (row), with s = ``scale`` per node.

    ``add_rows(k, rng)`` appends k rows with the noise state of a zero-data key after the windows stepped so far;
    ``step(rng)`` completes the next window's nodes for every row and returns N(t) (float64, one per row).
    Draws, in order: new rows' past nodes (level-ascending), then one node per row per window.
    """

    name = "tree"

    def __init__(self, horizon: int, scale: float, estimator: str = "plain") -> None:
        if estimator not in ("plain", "optimal"):
            raise ValueError(f"estimator must be 'plain' or 'optimal', got {estimator!r}")
        self.horizon = int(horizon)
        self.levels = levels_for_horizon(self.horizon)
        self.scale = float(scale)
        if not self.scale > 0:
            raise ValueError(f"scale must be > 0, got {scale!r}")
        self.estimator = estimator
        self.t = 0
        self._n = 0
        self._noise = np.zeros((self.levels, 0), dtype=np.float64)  # capacity columns; the first _n are rows
        if estimator == "optimal":
            self._spine = [honaker_spine_coefficients(i) for i in range(self.levels)]
            self._spine_sd = [self.scale * float(np.sqrt(np.sum(a * a))) for a, _ in self._spine]
            self._node_sd = np.sqrt(node_variances(self.scale, self.levels, "optimal"))

    # ---------------------------------------------------------------------------------------------- the law
    def variance(self, t: int) -> float:
        return tree_variance(t, self.estimator)

    def gram_column(self, t: int) -> np.ndarray:
        return tree_gram_column(t, self.horizon, self.estimator)

    def gram_max(self) -> float:
        """max_t G[t, t] (window 1 lies in one used, hence completed, node per level: the same for both estimators)."""
        return float(tree_gram_column(1, self.horizon, self.estimator)[1])

    # ---------------------------------------------------------------------------------------------- the state
    @property
    def n(self) -> int:
        return self._n

    @property
    def noise(self) -> np.ndarray:
        """[levels, n]: the kept noise of the nodes still needed (a view)."""
        return self._noise[:, :self._n]

    def add_rows(self, k: int, rng: np.random.Generator) -> None:
        k = int(k)
        if k <= 0:
            return
        lo, hi = self._n, self._n + k
        if hi > self._noise.shape[1]:  # grow geometrically: amortised O(1) per row
            grown = np.zeros((self.levels, max(hi, 2 * self._noise.shape[1], 1024)), dtype=np.float64)
            grown[:, :lo] = self._noise[:, :lo]
            self._noise = grown
        new = self._noise[:, lo:hi]
        new[:] = 0.0
        T = self.t + 1  # the window the next step closes
        if self.t > 0:
            i_next = _ctz(T)
            for j in _bits(self.t):
                if self.estimator == "plain":
                    if j > i_next:  # levels ≤ ctz(T) merge into T's new node: plain never reads them again
                        new[j] = samplers.gaussian(rng, self.scale, k)
                else:  # the refined noise of a zero-data complete subtree at level j: N(0, V_j)
                    new[j] = samplers.gaussian(rng, float(self._node_sd[j]), k)
        self._n = hi

    def step(self, rng: np.random.Generator) -> np.ndarray:
        if self.t >= self.horizon:
            raise ValueError(f"window {self.t + 1} is beyond the horizon {self.horizon}")
        T = self.t + 1
        i = _ctz(T)
        n = self._n
        if n:
            noise = self.noise
            if self.estimator == "plain":
                new = samplers.gaussian(rng, self.scale, n)
            else:  # D_i = Σ_{j≤i} a_j e_j + Σ_{j<i} b_j D_j^left (tree_estimators), Σ a_j e_j as one draw
                _, b = self._spine[i]
                new = samplers.gaussian(rng, self._spine_sd[i], n)
                for j in range(i):
                    new += b[j] * noise[j]
            noise[:i] = 0.0
            noise[i] = new
        self.t = T
        return self.current()

    def current(self, rows=None) -> np.ndarray:
        """N(t) of ``rows`` (all rows if None), summed over t's decomposition in ascending level order."""
        noise = self.noise
        sl = slice(None) if rows is None else rows
        out = np.zeros(self._n if rows is None else len(rows), dtype=np.float64)
        for j in _bits(self.t):
            out += noise[j, sl]
        return out

    def state(self) -> dict:
        return {"name": self.name, "horizon": self.horizon, "scale": self.scale, "estimator": self.estimator,
                "t": self.t, "noise": self.noise.copy()}

    @classmethod
    def from_state(cls, d: dict) -> "TreeNoise":
        p = cls(int(d["horizon"]), float(d["scale"]), str(d["estimator"]))
        noise = np.asarray(d["noise"], dtype=np.float64)
        if noise.ndim != 2 or noise.shape[0] != p.levels:
            raise ValueError("tree noise state has the wrong shape")
        p.t = int(d["t"])
        p._noise = noise.copy()
        p._n = int(noise.shape[1])
        return p
