"""Running-count estimators over the noisy dyadic tree of the binary mechanism.

Tree. Windows 1..L are the leaves; the node at level j with index k ≥ 1 covers windows ((k−1)·2^j, k·2^j] and is
*completed* at window k·2^j. Every node gets its own independent noise e ~ N(0, σ²) (or N_Z(0, σ²)), drawn once.
The binary decomposition of t is the set of nodes {level j, ending at t with bits < j cleared : bit j of t is 1}
(popcount(t) nodes, each a left child, i.e. of odd index); they partition (0, t].

Two estimators of the running count c(t) = Σ_{i ≤ t} x_i, both functions of the nodes completed by t only
(streaming), both unbiased, both post-processing of the same noisy node table (same privacy cost):

* ``plain`` (Dwork–Naor–Pitassi–Rothblum 2010, Chan–Shi–Song 2011; Rogers (unknown-domain) §4.3): sum of the noisy nodes of t's
  decomposition. Error variance σ²·popcount(t).

* ``optimal`` — the streaming form of Honaker (2015), "Efficient use of differentially private binary trees"
  (= the bottom-up pass of Hay–Rastogi–Miklau–Suciu 2010, "Boosting the accuracy of differentially private
  histograms through consistency"). Each completed node v at level j gets the refined estimate

      z(v) = w_j · y(v) + (1 − w_j) · (z(left child) + z(right child)),   z(leaf) = y(leaf),

  the inverse-variance combination of its own noisy value y(v) and the sum of its children's refined estimates.
  With V_j = Var[z(v) − true(v)]: V_0 = σ², 2V_{j−1} is the variance of the children's sum, so

      w_j = 2V_{j−1} / (σ² + 2V_{j−1}) = 2^j / (2^{j+1} − 1),    V_j = w_j·σ² = σ²·2^j / (2^{j+1} − 1)

  (V_j decreases from σ² to σ²/2). The running count at t is the sum of z over t's decomposition; its error
  variance is Σ_{j ∈ bits(t)} V_j. Why this is the minimum-variance unbiased (BLUE) estimate of c(t) from the
  nodes completed by t: those nodes are exactly the subtrees rooted at t's decomposition nodes (the parent of each
  decomposition node is not complete). The subtrees are disjoint in data and noise, so the BLUE of the sum is
  the sum of the BLUEs of the roots; in a complete subtree the root has no parent, so the top-down pass of
  Honaker / Hay et al. does not change it, and the least-squares root estimate (Gauss–Markov: BLUE, the noise is
  i.i.d.) equals z(root). ``tests/mechanisms/test_binary_tree_estimators.py`` checks this against a generalised
  least-squares solve of the whole node table.

Data/noise split (what the tree stores). Because every weight is data-independent and z is linear,
z(v) = true(v) + D(v) with D(v) = w_j·e(v) + (1 − w_j)·(D(left) + D(right)): the refined *noise* D obeys the same
recursion with the raw noises e. The tree therefore keeps the exact running count c(t) per item plus one
noise value per alive level (plain: e of the decomposition node; optimal: D of it), and the released estimate is
c(t) + Σ_{j ∈ bits(t)} noise_j.

At window t with i = ctz(t), the nodes at levels 0..i ending at t complete. The new level-i node's refined noise is

      D_i = Σ_{j=0}^{i} a_j·e_j + Σ_{j=0}^{i−1} b_j·D_j^left,
      b_j = Π_{m=j+1}^{i} (1 − w_m),   a_j = w_j·b_j,

where e_j is the raw noise of the level-j node ending at t (right spine) and D_j^left the refined noise of its left
sibling-subtree (the level-j node of t−1's decomposition, kept from before). For continuous Gaussian noise whose
raw right-spine values are not kept anywhere else, Σ a_j e_j is a single N(0, σ²·Σ a_j²) draw (equal in law; each
of those nodes is still "drawn once" — it is marginalised, never redrawn).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "ESTIMATORS",
    "honaker_weights",
    "node_variances",
    "honaker_spine_coefficients",
    "honaker_refine",
    "running_count_variance",
]

ESTIMATORS: tuple[str, ...] = ("plain", "optimal")


def _check_estimator(estimator: str) -> str:
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
    return estimator


def honaker_weights(levels: int) -> np.ndarray:
    """w_j = 2^j/(2^{j+1} − 1) for j = 0..levels−1: weight of a node's own noisy value (Honaker 2015 bottom-up)."""
    j = np.arange(int(levels), dtype=np.float64)
    return np.exp2(j) / (np.exp2(j + 1.0) - 1.0)


def node_variances(sigma: float, levels: int, estimator: str = "plain") -> np.ndarray:
    """Error variance of one (refined) node per level: σ² (plain) or V_j = σ²·2^j/(2^{j+1} − 1) (optimal)."""
    _check_estimator(estimator)
    s2 = float(sigma) ** 2
    if estimator == "plain":
        return np.full(int(levels), s2)
    return s2 * honaker_weights(levels)


def honaker_spine_coefficients(i: int) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) with D_i = Σ_{j≤i} a_j e_j + Σ_{j<i} b_j D_j^left (see the module docstring). a has i+1 entries,
    b has i."""
    i = int(i)
    w = honaker_weights(i + 1)
    # b_j = Π_{m=j+1}^{i} (1 − w_m) for j = 0..i (b_i = 1); a_j = w_j b_j
    one_minus = 1.0 - w
    b_full = np.ones(i + 1)
    for j in range(i - 1, -1, -1):
        b_full[j] = b_full[j + 1] * one_minus[j + 1]
    a = w * b_full
    return a, b_full[:i]


def honaker_refine(left_refined: np.ndarray, raw: np.ndarray) -> np.ndarray:
    """Reference recursion (explicit raw noises) for the refined value of the level-i node completing now.

    ``left_refined``: shape (i, n), refined values z (or noises D) of the left children at levels 0..i−1 (the
    nodes of t−1's decomposition). ``raw``: shape (i+1, n), noisy values y (or raw noises e) of the nodes at
    levels 0..i ending at t. Returns z of the level-i node ending at t, shape (n,). Works on values and on
    noises alike (the map is linear).
    """
    raw = np.asarray(raw, dtype=np.float64)
    left_refined = np.asarray(left_refined, dtype=np.float64)
    i = raw.shape[0] - 1
    if left_refined.shape[0] != i:
        raise ValueError(f"left_refined must have {i} rows (levels 0..{i - 1}), got {left_refined.shape[0]}")
    w = honaker_weights(i + 1)
    z = raw[0].copy()  # a leaf's refined value is its noisy value (w_0 = 1)
    for j in range(1, i + 1):
        z = w[j] * raw[j] + (1.0 - w[j]) * (left_refined[j - 1] + z)
    return z


def running_count_variance(sigma: float, t: int, estimator: str = "plain") -> float:
    """Error variance of the running count at window t: Σ_{j ∈ bits(t)} (σ² or V_j)."""
    _check_estimator(estimator)
    t = int(t)
    if t < 1:
        raise ValueError(f"t must be ≥ 1, got {t}")
    v = node_variances(sigma, t.bit_length(), estimator)
    return float(sum(v[j] for j in range(t.bit_length()) if (t >> j) & 1))


def _ctz(t: int) -> int:
    """Number of trailing zero bits of t ≥ 1 (the level of the highest node completing at window t)."""
    return (t & -t).bit_length() - 1


def _bits(t: int) -> list[int]:
    """Levels j with bit j of t set (t's binary decomposition), ascending."""
    return [j for j in range(max(int(t), 0).bit_length()) if (t >> j) & 1]


def _chain(t: int) -> list[int]:
    """Windows at which the nodes of t's decomposition were completed: t, t − lowbit(t), … (> 0)."""
    out = []
    while t > 0:
        out.append(t)
        t &= t - 1
    return out

