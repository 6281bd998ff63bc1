"""Unknown-domain binary mechanism: continual running counts over items not known in advance.

Paper: Rogers (unknown-domain) §4.3, Thm 11 (Rogers, after Cardoso–Rogers 2022 [17]); binary mechanism of Dwork et al. 2010 /
Chan–Shi–Song 2011. User-level use and costs: docs/contract.md §3 "Continual counts, user level" and "Noise".

Mechanism. Windows t = 1..L (the horizon). For every item, the counts per window are the leaves of a dyadic
tree; the node at level j (0 ≤ j < levels = ⌈log2(L+1)⌉) and index k covers windows ((k−1)2^j, k·2^j]. Every
(item, node) pair gets one noise draw N(0, σ²) (or the discrete Gaussian N_Z(0, σ²)), drawn ONCE and kept. The
running count released at t is an estimate from the noisy nodes completed by t (see ``tree_estimators``: the
plain sum over the popcount(t) nodes of t's binary decomposition, or Honaker's variance-optimal combination).
An item that appears for the first time at window t gets fresh noise for every node it now needs: its past
nodes are zero-count nodes, still noised (Rogers (unknown-domain) §4.3 "we will add fresh noise to each prior partial sum for the
new item"). An item is *selected* the first time its noisy running count exceeds the threshold T (c̃ > T, strict
as in Rogers (unknown-domain) §4.3 "larger than a fixed threshold"); selection is sticky: every selected item is published at every
later window of the epoch. After window L the engine starts a new epoch with a fresh tree (:meth:`reset`).

Privacy (user level; Rogers, Unknown-Domain Algorithms, Thm 11). A user changes an item's count by at most C over the
horizon, at most once per window (the bounder keeps distinct (user, item) pairs per window), and contributes to
≤ Δ0 items per window (the engine charges per item). For one item, the node table is a Gaussian mechanism (Rogers
Thm 4; discrete Gaussian: Canonne–Kamath–Steinke 2020 Thm 4, same ρ) whose ℓ2 sensitivity is the worst case, over
C distinct windows, of the squared norm of the user's node contributions:

    Δ2²(C, L) = max_{W ⊆ [1, L], |W| = min(C, L)}  Σ_{v used}  |W ∩ v|²,

"used" being the nodes the estimator reads. ``plain`` reads the nodes a prefix sum reads (odd index k,
k·2^j ≤ L: ``tree_estimators``) — L of them, one completed per window, and the L released counts are an
invertible map of them, so their sensitivity is exactly the release's. It is attained by the first min(C, L)
windows (:func:`node_sensitivity_sq`, whose docstring holds the proof); C = 1 gives Δ2² = levels, and
Δ2² ≤ C²·levels always (the per-level bound C², which the contract states), e.g. 29 instead of 32 at C = 2,
L = 128. ``optimal`` (Honaker) reads EVERY completed node, right children (even k) included, so its Δ2² is over
all of them (:func:`completed_node_sensitivity_sq`, release rule 3): 30 at C = 2, L = 128. Charging the used
nodes only under-charged it for C ≥ 2 — the exact Rényi loss of Honaker's released counts exceeds the used-node
Δ2², e.g. 40.05 > 38 at C = 4, L = 8, and 6 > 5 at C = 2, L = 3 (``tests/mechanisms/test_tree_sensitivity.py``).
A user's first contribution to an item costs ρ = Δ2²(C, L)/(2σ²) and δ_item (:func:`binary_tree_cost`).

The δ term: an item held by this user alone has true count ≤ C at every t, and its noisy count at t is C plus a
sum of popcount(t) independent node noises, popcount(t) ≤ P(L) = max_{t ≤ L} popcount(t)
(:func:`max_prefix_popcount`: max(popcount(L), ⌊log2 L⌋) ≤ levels); T is chosen so that each of the L windows
crosses with probability ≤ δ_item/L (union bound → δ_item):

* Gaussian nodes: Pr[N(0, kσ²) > σ√P·Φ⁻¹(1 − δ_item/L)] ≤ δ_item/L for every k ≤ P (Rogers Thm 11 with the exact
  number of summed nodes: its statement's √(levels+1) and its proof's √levels are both ≥ √P). This needs
  Φ⁻¹(1 − δ_item/L) ≥ 0, hence δ_item/L < 1/2 is enforced.
* Discrete Gaussian nodes: N_Z(0, σ²) is σ²-sub-Gaussian (CKS 2020), so a sum S of k ≤ P of them has
  Pr[S ≥ x] ≤ exp(−x²/(2kσ²)) ≤ δ_item/L for x = σ√(2·P·ln(L/δ_item)) (the contract's tail bound for sums of discrete Gaussians).
* The optimal estimator's noise is a linear combination of node noises with Σ coefficient² ≤ popcount(t) (its
  variance Σ V_j ≤ popcount(t)·σ²), so the same thresholds remain valid; it costs nothing extra (post-processing).

Which noise is analysed. An item that the target user introduces first (other users add to it later) has early
nodes that are conditioned on "not selected" and reused by later counts, so Rogers' Thm 11 factorisation is not
exact for it (review of 2026-12-06). For Gaussian nodes the conditioning is on a convex set (every prefix estimate ≤ T: half-spaces in the
node table), and Gopi–Lee–Liu 2022 Lemma 4.1 (as Rogers uses it for Thm 8) bounds the Rényi divergence of two
Gaussians restricted to one convex set by that of the unrestricted pair: the cost above holds. For discrete
Gaussian nodes no cited result covers the conditioning, so ``gaussian`` is the analysed noise and the default;
``discrete_gaussian`` stays available, documented as outside that analysis (docs/query_counts_top_k.md).

Releasing the noisy value of an item that was never selected would void the δ argument (Thm 11 relies on the
noisy counts of unselected items staying hidden); hence :meth:`range_count` answers selected items only and
:meth:`noisy_running_counts` is documented as internal.

State (all numpy arrays over "rows"; an item's row is fixed at first appearance; no per-item Python objects):

* ``ids``       int64 [n]         row → item id (ids are the engine's interned non-negative ints);
* ``count``     int64 [n]         exact running count c(t) of the current epoch;
* ``noise``     float64 or int64 [levels, n]: for each level j whose bit is set in t, the noise of the node of
  t's binary decomposition at level j (plain: its raw noise e; optimal: its refined noise D); 0 at other levels.
  That is the only noise the estimators still need: O(levels) per item. The released estimate at t is
  c(t) + Σ_{j ∈ bits(t)} noise[j] (summed in ascending j);
* ``selected``  bool [n];
* ``row_of_id`` int32 [max id + 1] (−1 = unseen): a dense lookup, 4 bytes per interned id;
* with ``keep_history=True`` only: ``hist_count`` int64 [L, n] (c(u) for every window u ≤ t) and ``hist_noise``
  [L, n] (the noise of the decomposition node completed at window u: one left node completes per window, at level
  ctz(u)). That is every node any prefix estimate ever used, 16 bytes per item per window. A new item in history
  mode replays the zero-count windows 1..t−1 so that all its past prefix nodes exist (O(t) draws per new item).

Range counts (:meth:`range_count`) are the difference of prefix estimates, ĉ(s..t) = c̃(t) − c̃(s−1), where the
nodes shared by both decompositions cancel exactly; so ``range_count(ids, 1, u)`` reproduces, before rounding, the
running count released at window u. They need the history (``keep_history=True``).
"""

from __future__ import annotations

import io
import json
import math
import operator
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from streamdp.accounting.cost import Cost
from streamdp.mechanisms.tree_estimators import (
    ESTIMATORS,
    _bits,
    _chain,
    _ctz,
    honaker_spine_coefficients,
    node_variances,
)
from streamdp.noise import samplers

__all__ = [
    "NOISES",
    "ESTIMATORS",
    "MAX_ITEM_ID",
    "levels_for_horizon",
    "max_prefix_popcount",
    "node_sensitivity_sq",
    "completed_node_sensitivity_sq",
    "charged_sensitivity_sq",
    "binary_tree_cost",
    "binary_tree_threshold",
    "HorizonExceeded",
    "Release",
    "UnknownDomainBinaryTree",
]

NOISES: tuple[str, ...] = ("gaussian", "discrete_gaussian")

#: Item ids index a dense int32 lookup table, so they must be interned (dense) non-negative ints below this.
MAX_ITEM_ID = 2**31 - 2

_MAGIC = b"STREAMDP-UDBT"
_FORMAT_VERSION = 1


# --------------------------------------------------------------------------------------------------- validation
def _int_param(x, name: str, minimum: int = 1) -> int:
    if isinstance(x, bool):
        raise ValueError(f"{name} must be an integer ≥ {minimum}, got {x!r}")
    try:
        v = operator.index(x)
    except TypeError:
        raise ValueError(f"{name} must be an integer ≥ {minimum}, got {x!r}") from None
    if v < minimum:
        raise ValueError(f"{name} must be an integer ≥ {minimum}, got {x!r}")
    return int(v)


def _positive_param(x, name: str) -> float:
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a finite number > 0, got {x!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {x!r}")
    return v


def _delta_param(delta_item, horizon: int) -> float:
    try:
        d = float(delta_item)
    except (TypeError, ValueError):
        raise ValueError(f"delta_item must be a number in (0, 1), got {delta_item!r}") from None
    if not (0.0 < d < 1.0):
        raise ValueError(f"delta_item must be a number in (0, 1), got {delta_item!r}")
    if d / horizon >= 0.5:
        # Φ⁻¹(1 − δ/L) < 0 there, and the √P inflation then makes the tail bound fail.
        raise ValueError(f"delta_item/horizon must be < 1/2, got delta_item={d!r} with horizon={horizon}")
    return d


def _noise_param(noise: str) -> str:
    if noise not in NOISES:
        raise ValueError(f"noise must be one of {NOISES}, got {noise!r}")
    return noise


def _sorted_unique(a: np.ndarray) -> np.ndarray:
    """np.unique for int arrays by sort + adjacent compare (faster here than numpy's hash-based unique)."""
    s = np.sort(a)
    if s.size < 2:
        return s
    keep = np.empty(s.size, dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def _has_duplicates(a: np.ndarray) -> bool:
    s = np.sort(a)
    return bool(np.any(s[1:] == s[:-1]))


# ------------------------------------------------------------------------------------------ parameters, Rogers (unknown-domain) Thm 11
def levels_for_horizon(L: int) -> int:
    """⌈log2(L+1)⌉: the number of tree levels for horizon L (= the bit length of L; a window lies in that many
    nodes, and a window t ≤ L has popcount(t) ≤ levels decomposition nodes)."""
    return _int_param(L, "horizon").bit_length()


def max_prefix_popcount(L: int) -> int:
    """P(L) = max_{1 ≤ t ≤ L} popcount(t) = max(popcount(L), bit_length(L) − 1): the most decomposition nodes a
    released running count sums. (A t ≤ L with bit_length(L) bits set is 2^b − 1 = L itself; otherwise 2^(b−1) − 1
    ≤ L has b − 1.) At most levels = bit_length(L); 7 instead of 8 at L = 128."""
    L = _int_param(L, "horizon")
    return max(bin(L).count("1"), L.bit_length() - 1)


def _prefix_block_value(a: int, c: int) -> int:
    """Σ_{used v} |[0, c) ∩ v|² in one complete subtree of height a (levels 0..a, windows 0..2^a − 1 counted from
    its start, its root used): at level i the nodes are the runs of 2^i windows, used when their index is even
    (odd in 1-based numbering); the prefix fills ⌊c/2^i⌋ runs and a part run of c mod 2^i windows."""
    total = 0
    for i in range(a + 1):
        full, rem = divmod(c, 1 << i)
        total += ((full + 1) // 2) * (1 << (2 * i))
        if rem and full % 2 == 0:
            total += rem * rem
    return total


def node_sensitivity_sq(horizon: int, cap: int = 1) -> int:
    """Δ2²(C, L): the worst case, over a user's ≤ C contributions to one item in distinct windows of [1, L], of
    the squared ℓ2 norm of their changes to the used tree nodes (those a prefix sum reads: index k odd and
    k·2^j ≤ L). Exact, in integers. C = 1 gives levels; C = 2, L = 128 gives 29 (C²·levels = 32).

    Value: the first c = min(C, L) windows attain the maximum, so Δ2² = Σ_{v used} |[1, c] ∩ v|².

    Proof (docs/query_counts_top_k.md has it with examples). Write L = 2^{a_1} + 2^{a_2} + … (a_1 > a_2 > …).
    (i) Blocks. The used nodes are those of complete subtrees of heights a_1, a_2, … laid side by side, each root
    used, and no used node spans two of them (an ancestor of the r-th block's root at a level above a_r ends past
    L). So f(W) = Σ_r F_{a_r}(W ∩ block r) with F_a the value in a full tree of height a whose root is used.
    (ii) Inside a full tree, the prefix is optimal. Let P_a(c) be the prefix value and D_a(c) = P_a(c) − c² (the
    same tree, root not counted). A tree of height a splits into a left subtree (root used) and a right one (root
    not used), so by induction max_{|W| = c} F_a = c² + max_{x + y = c} P_{a−1}(x) + D_{a−1}(y). With m = c − 1 the
    prefix's increments are ΔP_a(c) = Σ_{i ≤ a, bit_i(m) = 0} (2(m mod 2^i) + 1). The split value
    ψ(y) = P(c − y) + D(y) satisfies ψ(y) ≤ ψ(c − y) for y ≥ c/2 (P = D + y²), and ψ(y + 1) ≤ ψ(y) for
    y < c/2 iff ΔP(y + 1) − ΔP(c − y) ≤ 2y + 1, which follows from: for 0 ≤ m ≤ n < 2^a,
    S(m) − S(n) ≤ 2n + 1 with S(m) = Σ_{i<a, bit_i(m)=0} (2(m mod 2^i) + 1). (Let t be the highest bit where m and
    n differ: the terms above t are smaller for m; what remains for m is S_{t+1}(m mod 2^t) ≤ 2^{t+1} − 1, by
    induction on t, and 2n + 1 ≥ 2^{t+1} + 1.) So the least y, i.e. the left subtree filled first: the prefix.
    (iii) Across blocks, filling the larger (earlier) block first is optimal: for blocks a > b and y ≤ 2^b,
    P_b(y) = D_a(y) − (a − b − 1)y², so P_a(x) + P_b(y) ≤ P_a(x') + D_a(y') − (a − b − 1)y'² = P_a(x') + P_b(y')
    with x' = min(x + y, 2^a), y' = x + y − x' ≤ y, by (ii) in a tree of height a + 1. Exchanging pairwise
    reaches the prefix. ``tests/mechanisms/test_tree_sensitivity.py`` checks it against every subset for small L.
    """
    L = _int_param(horizon, "horizon")
    left = min(_int_param(cap, "cap"), L)
    total = 0
    for a in range(L.bit_length() - 1, -1, -1):  # blocks of 2^a windows, largest first
        if not (L >> a) & 1 or left == 0:
            continue
        c = min(left, 1 << a)
        total += _prefix_block_value(a, c)
        left -= c
    return total


def completed_node_sensitivity_sq(horizon: int, cap: int = 1) -> int:
    """Δ2²_all(C, L): as :func:`node_sensitivity_sq`, but over EVERY node completed by L (level j, index k of
    either parity, k·2^j ≤ L) — the node table that Honaker's estimator reads (release rule 3).

    Honaker's refined value of a node combines its own noisy value with those of both children, so the running
    count at t reads every node of the complete subtrees under t's decomposition, right children (even k)
    included (:mod:`streamdp.mechanisms.tree_estimators`). The released estimates are a post-processing of that
    whole table (Rogers, Unknown-Domain Algorithms, Thm 4 and §4.3: a Gaussian mechanism on the table of partial
    sums), whose squared ℓ2 sensitivity is Σ_{v completed} |W ∩ v|². Exactly as for the used nodes, the first
    c = min(C, L) windows attain the maximum: inside a full tree every aligned block of c windows is a prefix of
    some subtree, and the larger (earlier) block has more levels (``tests/mechanisms/test_tree_sensitivity.py``
    checks it against every window set for small L). Value, per level j: the ⌊c/2^j⌋ full nodes inside [1, c]
    give 4^j each, and the part node (c mod 2^j windows) counts when it is completed.

    C = 1 gives levels, as for the used nodes (window 1 lies in a completed node at every level); for C ≥ 2 it is
    larger: 30 instead of 29 at C = 2, L = 128 (window 2's level-0 node is a right child).
    """
    L = _int_param(horizon, "horizon")
    c = min(_int_param(cap, "cap"), L)
    total = 0
    for j in range(L.bit_length()):
        full, rem = divmod(c, 1 << j)
        total += full << (2 * j)
        if rem and (full + 1) << j <= L:
            total += rem * rem
    return total


def charged_sensitivity_sq(horizon: int, cap: int = 1, estimator: str = "plain") -> int:
    """Δ2² charged for one item: the used nodes for ``plain`` (:func:`node_sensitivity_sq`; the released counts
    are an invertible map of those L nodes, so nothing else enters), every completed node for ``optimal``
    (:func:`completed_node_sensitivity_sq`: Honaker reads right children too)."""
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
    if estimator == "optimal":
        return completed_node_sensitivity_sq(horizon, cap)
    return node_sensitivity_sq(horizon, cap)


def binary_tree_cost(sigma: float, horizon: int, delta_item: float, cap: int = 1, estimator: str = "plain") -> Cost:
    """Cost of a user's first contribution to one item (Rogers, Unknown-Domain Algorithms, Thm 11 with Δ0 = 1 per item,
    at user level):

        ρ = Δ2²(C, L) / (2σ²),   δ = δ_item,

    Δ2²(C, L) = :func:`charged_sensitivity_sq` — the exact worst case of the user's contributions to the nodes the
    estimator reads: the used nodes for ``plain`` (:func:`node_sensitivity_sq`: = levels for C = 1, ≤ C²·levels),
    every completed node for ``optimal`` (:func:`completed_node_sensitivity_sq`, release rule 3). Gaussian
    mechanism (Rogers Thm 4; discrete Gaussian: CKS 2020 Thm 4, same ρ). Later contributions to the same item are
    free.
    """
    sigma = _positive_param(sigma, "sigma")
    horizon = _int_param(horizon, "horizon")
    cap = _int_param(cap, "cap")
    delta = _delta_param(delta_item, horizon)
    return Cost.zcdp(rho=charged_sensitivity_sq(horizon, cap, estimator) / (2.0 * sigma * sigma), delta=delta)


def binary_tree_threshold(sigma: float, horizon: int, delta_item: float, cap: int = 1,
                          noise: str = "gaussian") -> float:
    """Selection threshold T (an item is selected when its noisy running count c̃ > T), with P = P(L) the largest
    number of nodes a released count sums (:func:`max_prefix_popcount`, ≤ levels):

    gaussian:           T = C + σ·√P·Φ⁻¹(1 − δ_item/L)        (Rogers Thm 11 with the exact node count)
    discrete_gaussian:  T = C + σ·√(2·P·ln(L/δ_item))          (σ²-sub-Gaussian sum of ≤ P nodes)
    """
    sigma = _positive_param(sigma, "sigma")
    horizon = _int_param(horizon, "horizon")
    cap = _int_param(cap, "cap")
    delta = _delta_param(delta_item, horizon)
    noise = _noise_param(noise)
    p = max_prefix_popcount(horizon)
    if noise == "gaussian":
        # norm.isf(p) = Φ⁻¹(1 − p), computed without the cancellation of 1 − p for tiny p
        return cap + sigma * math.sqrt(p) * float(norm.isf(delta / horizon))
    return cap + sigma * math.sqrt(2.0 * p * math.log(horizon / delta))


# -------------------------------------------------------------------------------------------------------- types
class HorizonExceeded(RuntimeError):
    """``step`` was called after window L: the engine must start a new epoch (``reset()`` or a new tree)."""


@dataclass(frozen=True)
class Release:
    """The continual-count release of window ``t``.

    ``selected_ids`` every item selected so far (sticky), in row order (order of first appearance; items first
    seen in the same window in ascending id order); ``counts`` their released running counts (int64; continuous
    noise is rounded to the nearest integer at release — post-processing); ``new_ids`` the items selected at t.
    """

    t: int
    selected_ids: np.ndarray
    counts: np.ndarray
    new_ids: np.ndarray


# ------------------------------------------------------------------------------------------------------ the tree
class UnknownDomainBinaryTree:
    """Per-item binary-mechanism trees with thresholded, sticky selection (Rogers (unknown-domain) §4.3, Thm 11).

    Parameters: ``horizon`` L (windows per epoch), ``sigma`` node noise σ, ``delta_item`` per-item failure
    probability, ``cap`` C (max contributions of one user to one item per epoch), ``noise`` ("gaussian" —
    continuous, rounded at release — or "discrete_gaussian"), ``estimator`` ("plain" or "optimal": see
    :mod:`streamdp.mechanisms.tree_estimators`; "optimal" needs continuous noise), ``keep_history`` (keep every
    prefix node so that :meth:`range_count` works; 16 B per item per window).

    Cost per user per item: :func:`binary_tree_cost`; threshold: :func:`binary_tree_threshold`.
    """

    def __init__(self, horizon: int, sigma: float, delta_item: float, cap: int = 1, noise: str = "gaussian",
                 estimator: str = "plain", keep_history: bool = False) -> None:
        self.horizon = _int_param(horizon, "horizon")
        self.sigma = _positive_param(sigma, "sigma")
        self.delta_item = _delta_param(delta_item, self.horizon)
        self.cap = _int_param(cap, "cap")
        self.noise = _noise_param(noise)
        if estimator not in ESTIMATORS:
            raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
        if estimator == "optimal" and noise != "gaussian":
            # A refined node is a weighted sum of many nodes; for discrete noise it cannot be drawn in one go, so
            # a new item would need every past node drawn (O(t) draws each). Its output is real-valued anyway.
            raise ValueError("estimator='optimal' requires noise='gaussian' (discrete noise supports 'plain' only)")
        self.estimator = estimator
        if not isinstance(keep_history, (bool, np.bool_)):
            raise ValueError(f"keep_history must be a bool, got {keep_history!r}")
        self.keep_history = bool(keep_history)
        if self.noise == "discrete_gaussian" and not hasattr(samplers, "discrete_gaussian"):
            raise ValueError("noise='discrete_gaussian' needs streamdp.noise.samplers.discrete_gaussian")
        self.levels = levels_for_horizon(self.horizon)
        self.threshold = binary_tree_threshold(self.sigma, self.horizon, self.delta_item, self.cap, self.noise)
        self._noise_dtype = np.dtype(np.int64) if self.noise == "discrete_gaussian" else np.dtype(np.float64)
        # optimal estimator: per i, the spine coefficients (a, b) and the std of Σ a_j e_j
        if self.estimator == "optimal":
            self._spine = [honaker_spine_coefficients(i) for i in range(self.levels)]
            self._spine_sd = [self.sigma * math.sqrt(float(np.sum(a * a))) for a, _ in self._spine]
            self._node_sd = np.sqrt(node_variances(self.sigma, self.levels, "optimal"))
        self.reset()

    # ----------------------------------------------------------------------------------------------- state
    def reset(self) -> None:
        """Start a new epoch: no items, t = 0 (parameters kept)."""
        self._t = 0
        self._n = 0
        self._alloc(0)
        self._row_of_id = np.full(0, -1, dtype=np.int32)

    def _alloc(self, capacity: int) -> None:
        self._cap_rows = capacity
        self._ids = np.zeros(capacity, dtype=np.int64)
        self._count = np.zeros(capacity, dtype=np.int64)
        self._noise = np.zeros((self.levels, capacity), dtype=self._noise_dtype)
        self._selected = np.zeros(capacity, dtype=bool)
        if self.keep_history:
            self._hist_count = np.zeros((self.horizon, capacity), dtype=np.int64)
            self._hist_noise = np.zeros((self.horizon, capacity), dtype=self._noise_dtype)

    def _ensure_capacity(self, needed: int) -> None:
        if needed <= self._cap_rows:
            return
        new_cap = max(needed, self._cap_rows + self._cap_rows // 2 + 16)
        n, t = self._n, self._t
        old = (self._ids, self._count, self._noise, self._selected)
        old_hist = (self._hist_count, self._hist_noise) if self.keep_history else None
        self._alloc(new_cap)
        self._ids[:n] = old[0][:n]
        self._count[:n] = old[1][:n]
        self._noise[:, :n] = old[2][:, :n]
        self._selected[:n] = old[3][:n]
        if old_hist is not None:
            self._hist_count[:t, :n] = old_hist[0][:t, :n]
            self._hist_noise[:t, :n] = old_hist[1][:t, :n]

    @property
    def t(self) -> int:
        """The last window stepped (0 before the first)."""
        return self._t

    @property
    def n_items(self) -> int:
        return self._n

    @property
    def item_ids(self) -> np.ndarray:
        """Every item seen this epoch, in row order."""
        return self._ids[: self._n].copy()

    @property
    def selected_ids(self) -> np.ndarray:
        """Every item selected this epoch, in row order."""
        return self._ids[: self._n][self._selected[: self._n]]

    @property
    def nbytes(self) -> int:
        """Bytes held by the state arrays (allocated capacity, including the id lookup and any history)."""
        arrays = [self._ids, self._count, self._noise, self._selected, self._row_of_id]
        if self.keep_history:
            arrays += [self._hist_count, self._hist_noise]
        return int(sum(a.nbytes for a in arrays))

    def cost(self) -> Cost:
        """Cost of a user's first contribution to an item (:func:`binary_tree_cost`, for this tree's estimator)."""
        return binary_tree_cost(self.sigma, self.horizon, self.delta_item, self.cap, self.estimator)

    # ------------------------------------------------------------------------------------------------- noise
    def _draw(self, rng: np.random.Generator, sd: float, k: int) -> np.ndarray:
        if self.noise == "discrete_gaussian":
            return np.asarray(samplers.discrete_gaussian(rng, sd, k), dtype=np.int64)
        return samplers.gaussian(rng, sd, k)

    def _new_node_noise(self, left: np.ndarray, i: int, k: int, rng: np.random.Generator) -> np.ndarray:
        """Noise of the level-i node of the decomposition completing now, for k rows.

        ``left``: the rows' noise array [levels, k] as of window t−1 (levels < i hold t−1's decomposition nodes,
        the left children of the right spine). plain: a fresh draw e_i. optimal: D_i = Σ_{j≤i} a_j e_j +
        Σ_{j<i} b_j D_j^left with Σ a_j e_j drawn as one N(0, σ²Σa_j²) (tree_estimators module docstring).
        """
        if self.estimator == "plain":
            return self._draw(rng, self.sigma, k)
        _, b = self._spine[i]
        out = self._draw(rng, self._spine_sd[i], k)
        for j in range(i):
            out += b[j] * left[j]
        return out

    def _init_new_rows(self, lo: int, hi: int, T: int, rng: np.random.Generator) -> None:
        """Give rows lo:hi (items first seen at window T) the noise state of a zero-count item at window T−1."""
        k = hi - lo
        if T == 1 or k == 0:
            return
        if self.keep_history:
            # replay windows 1..T−1 with zero data: every past prefix node is drawn (once) and recorded
            sub = np.zeros((self.levels, k), dtype=self._noise_dtype)
            for u in range(1, T):
                i = _ctz(u)
                new = self._new_node_noise(sub, i, k, rng)
                sub[:i] = 0
                sub[i] = new
                self._hist_noise[u - 1, lo:hi] = new
                self._hist_count[u - 1, lo:hi] = 0
            self._noise[:, lo:hi] = sub
            return
        i_next = _ctz(T)
        for j in _bits(T - 1):
            if self.estimator == "plain":
                if j > i_next:  # levels ≤ ctz(T) are not in T's decomposition: plain never reads them
                    self._noise[j, lo:hi] = self._draw(rng, self.sigma, k)
            else:
                # refined noise of a zero-count complete subtree at level j: N(0, V_j), independent over j
                self._noise[j, lo:hi] = samplers.gaussian(rng, float(self._node_sd[j]), k)

    # --------------------------------------------------------------------------------------------- stepping
    def _validate_batch(self, item_ids, increments) -> tuple[np.ndarray, np.ndarray]:
        ids = np.asarray(item_ids)
        inc = np.asarray(increments)
        if ids.ndim != 1:
            raise ValueError(f"item_ids must be a 1-D array, got shape {ids.shape}")
        if inc.shape != ids.shape:
            raise ValueError(f"increments must have the shape of item_ids {ids.shape}, got {inc.shape}")
        if ids.size == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        if not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"item_ids must be integers, got dtype {ids.dtype}")
        if not np.issubdtype(inc.dtype, np.integer):
            raise ValueError(f"increments must be integers, got dtype {inc.dtype}")
        ids = ids.astype(np.int64, copy=False)
        inc = inc.astype(np.int64, copy=False)
        if ids.min() < 0 or ids.max() > MAX_ITEM_ID:
            raise ValueError(f"item_ids must be interned ids in [0, {MAX_ITEM_ID}]")
        if inc.min() < 0:
            raise ValueError("increments must be ≥ 0")
        return ids, inc

    def _rows_for(self, ids: np.ndarray, T: int, rng: np.random.Generator) -> np.ndarray:
        """Rows of ``ids``, registering unseen items (fresh noise for their past nodes)."""
        if ids.size == 0:
            return np.zeros(0, dtype=np.int64)
        top = int(ids.max())
        if top >= self._row_of_id.size:
            grown = np.full(max(top + 1, self._row_of_id.size + self._row_of_id.size // 2), -1, dtype=np.int32)
            grown[: self._row_of_id.size] = self._row_of_id
            self._row_of_id = grown
        rows = self._row_of_id[ids]
        unseen = rows < 0
        if unseen.any():
            new_ids = _sorted_unique(ids[unseen])
            lo, hi = self._n, self._n + new_ids.size
            self._ensure_capacity(hi)
            self._ids[lo:hi] = new_ids
            self._count[lo:hi] = 0
            self._noise[:, lo:hi] = 0
            self._selected[lo:hi] = False
            self._row_of_id[new_ids] = np.arange(lo, hi, dtype=np.int32)
            self._n = hi
            self._init_new_rows(lo, hi, T, rng)
            rows = self._row_of_id[ids]
        return rows.astype(np.int64)

    def _estimate(self, rows=None) -> np.ndarray:
        """c(t) + Σ_{j ∈ bits(t)} noise[j] for ``rows`` (all rows if None): the unrounded running count."""
        sl = slice(0, self._n) if rows is None else rows
        if self._noise_dtype == np.int64:
            est = self._count[sl].copy()
        else:
            est = self._count[sl].astype(np.float64)
        for j in _bits(self._t):
            est += self._noise[j, sl]
        return est

    def _publish(self, values: np.ndarray) -> np.ndarray:
        if values.dtype == np.int64:
            return values
        return np.rint(values).astype(np.int64)

    def step(self, item_ids, increments, rng: np.random.Generator) -> Release:
        """Close the next window t: add its per-item counts (already bounded and admitted), complete the nodes
        ending at t, and return the release of t (see :class:`Release`). Raises :class:`HorizonExceeded` after L.

        ``item_ids`` int [m] (interned, may be new, repeated ids add up), ``increments`` int [m] ≥ 0.
        Draws, in order: the new items' past-node noise, then one node per row (level ctz(t)).
        """
        if self._t >= self.horizon:
            raise HorizonExceeded(f"window {self._t + 1} is beyond the horizon L={self.horizon}; start a new epoch")
        ids, inc = self._validate_batch(item_ids, increments)
        T = self._t + 1
        rows = self._rows_for(ids, T, rng)
        if rows.size:
            if rows.size > 1 and not np.all(ids[1:] > ids[:-1]) and _has_duplicates(rows):
                np.add.at(self._count, rows, inc)
            else:
                self._count[rows] += inc
        n = self._n
        i = _ctz(T)
        if n:
            new = self._new_node_noise(self._noise[:, :n], i, n, rng)
            self._noise[:i, :n] = 0
            self._noise[i, :n] = new
            if self.keep_history:
                self._hist_noise[T - 1, :n] = new
                self._hist_count[T - 1, :n] = self._count[:n]
        self._t = T
        est = self._estimate()
        sel = self._selected[:n]
        newly = np.flatnonzero(~sel & (est > self.threshold))
        sel[newly] = True
        sel_rows = np.flatnonzero(sel)
        return Release(t=T, selected_ids=self._ids[sel_rows], counts=self._publish(est[sel_rows]),
                       new_ids=self._ids[newly])

    # --------------------------------------------------------------------------------------------- queries
    def _rows_of(self, item_ids, name: str = "item_ids") -> np.ndarray:
        ids = np.asarray(item_ids)
        if ids.ndim != 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
            raise ValueError(f"{name} must be a 1-D integer array")
        ids = ids.astype(np.int64, copy=False)
        if ids.size == 0:
            return np.zeros(0, dtype=np.int64)
        ok = (ids >= 0) & (ids < self._row_of_id.size)
        rows = np.full(ids.shape, -1, dtype=np.int64)
        rows[ok] = self._row_of_id[ids[ok]]
        if np.any(rows < 0):
            raise ValueError(f"{name} contains items not seen in this epoch: {ids[rows < 0][:5].tolist()}")
        return rows

    def noisy_running_counts(self, item_ids=None) -> np.ndarray:
        """INTERNAL (tests, audits): the unrounded noisy running counts at t of ``item_ids`` (all rows, in row
        order, if None). NOT a release: publishing the value of an unselected item voids Thm 11's δ argument."""
        rows = None if item_ids is None else self._rows_of(item_ids)
        return self._estimate(rows)

    def _range_noisy(self, rows: np.ndarray, s: int, t: int) -> np.ndarray:
        """c̃(t) − c̃(s−1) from the history, shared decomposition nodes cancelled (unrounded)."""
        a, b = _chain(t), _chain(s - 1)
        shared = set(a) & set(b)
        if self._noise_dtype == np.int64:
            est = self._hist_count[t - 1, rows].copy()
        else:
            est = self._hist_count[t - 1, rows].astype(np.float64)
        if s > 1:
            est -= self._hist_count[s - 2, rows]
        for p in a:  # ascending level order, as in the release
            if p not in shared:
                est += self._hist_noise[p - 1, rows]
        for p in b:
            if p not in shared:
                est -= self._hist_noise[p - 1, rows]
        return est

    def range_count(self, item_ids, s: int, t: int, *, unsafe_include_unselected: bool = False) -> np.ndarray:
        """Noisy count of each item over windows s..t (1 ≤ s ≤ t ≤ self.t), int64 (rounded if continuous).

        ĉ = c̃(t) − c̃(s−1) from stored prefix nodes (free post-processing of the node table). Needs
        ``keep_history=True`` (the prefix nodes of past windows are otherwise discarded). Only selected items are
        answered unless ``unsafe_include_unselected`` (which is not private to publish).
        """
        if not self.keep_history:
            raise ValueError("range_count needs keep_history=True (past prefix nodes are not kept otherwise)")
        s = _int_param(s, "s")
        t = _int_param(t, "t")
        if not (s <= t <= self._t):
            raise ValueError(f"need 1 ≤ s ≤ t ≤ {self._t} (the current window), got s={s}, t={t}")
        rows = self._rows_of(item_ids)
        if not unsafe_include_unselected and not np.all(self._selected[rows]):
            raise ValueError("item_ids contains unselected items; their noisy counts must not be published")
        return self._publish(self._range_noisy(rows, s, t))

    # -------------------------------------------------------------------------------------------- snapshots
    def _arrays(self) -> list[tuple[str, np.ndarray]]:
        n, t = self._n, self._t
        out = [("ids", self._ids[:n]), ("count", self._count[:n]), ("noise", self._noise[:, :n]),
               ("selected", self._selected[:n])]
        if self.keep_history:
            out += [("hist_count", self._hist_count[:t, :n]), ("hist_noise", self._hist_noise[:t, :n])]
        return out

    def to_bytes(self) -> bytes:
        """Exact snapshot (parameters, t, items, counts, every kept noise value, selection, history)."""
        arrays = self._arrays()
        header = {
            "version": _FORMAT_VERSION,
            "horizon": self.horizon, "sigma": self.sigma.hex(), "delta_item": self.delta_item.hex(),
            "cap": self.cap, "noise": self.noise, "estimator": self.estimator, "keep_history": self.keep_history,
            "t": self._t, "n": self._n,
            "arrays": [[name, a.dtype.newbyteorder("<").str, list(a.shape)] for name, a in arrays],
        }
        hb = json.dumps(header, separators=(",", ":")).encode()
        buf = io.BytesIO()
        buf.write(_MAGIC)
        buf.write(len(hb).to_bytes(4, "little"))
        buf.write(hb)
        for _, a in arrays:
            buf.write(np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes())
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, b: bytes) -> "UnknownDomainBinaryTree":
        """Restore a snapshot written by :meth:`to_bytes` (ValueError on a malformed or foreign blob)."""
        b = bytes(b)
        if not b.startswith(_MAGIC):
            raise ValueError("b is not an UnknownDomainBinaryTree snapshot (bad magic)")
        off = len(_MAGIC)
        try:
            hlen = int.from_bytes(b[off:off + 4], "little")
            header = json.loads(b[off + 4: off + 4 + hlen])
        except (ValueError, UnicodeDecodeError) as e:
            raise ValueError(f"b has a corrupt snapshot header: {e}") from None
        if header.get("version") != _FORMAT_VERSION:
            raise ValueError(f"unsupported snapshot version {header.get('version')!r}")
        tree = cls(header["horizon"], float.fromhex(header["sigma"]), float.fromhex(header["delta_item"]),
                   cap=header["cap"], noise=header["noise"], estimator=header["estimator"],
                   keep_history=header["keep_history"])
        t, n = int(header["t"]), int(header["n"])
        if not (0 <= t <= tree.horizon) or n < 0:
            raise ValueError("b has an inconsistent snapshot header (t or n)")
        pos = off + 4 + hlen
        got = {}
        for name, dt, shape in header["arrays"]:
            dt = np.dtype(dt)
            size = int(np.prod(shape)) * dt.itemsize
            if pos + size > len(b):
                raise ValueError("b is a truncated snapshot")
            got[name] = np.frombuffer(b, dtype=dt, count=int(np.prod(shape)), offset=pos).reshape(shape)
            pos += size
        if pos != len(b):
            raise ValueError("b has trailing bytes after the snapshot")
        expect = {"ids": (n,), "count": (n,), "noise": (tree.levels, n), "selected": (n,)}
        if tree.keep_history:
            expect.update(hist_count=(t, n), hist_noise=(t, n))
        for name, shape in expect.items():
            if name not in got or tuple(got[name].shape) != shape:
                raise ValueError(f"b has a missing or mis-shaped array {name!r}")
        tree._t, tree._n = t, n
        tree._alloc(n)
        tree._ids[:] = got["ids"]
        tree._count[:] = got["count"]
        tree._noise[:] = got["noise"]
        tree._selected[:] = got["selected"]
        if tree.keep_history:
            tree._hist_count[:t] = got["hist_count"]
            tree._hist_noise[:t] = got["hist_noise"]
        if n:
            if got["ids"].min() < 0 or got["ids"].max() > MAX_ITEM_ID:
                raise ValueError("b has invalid item ids")
            tree._row_of_id = np.full(int(got["ids"].max()) + 1, -1, dtype=np.int32)
            tree._row_of_id[tree._ids[:n]] = np.arange(n, dtype=np.int32)
            if not np.array_equal(tree._row_of_id[tree._ids[:n]], np.arange(n)):
                raise ValueError("b has repeated item ids")
        return tree
