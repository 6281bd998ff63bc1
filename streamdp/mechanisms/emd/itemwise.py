"""PrivEMDItemWise: randomise every item with an α0-d_X-DP randomiser, then shuffle (Imola et al. (EMD) Alg. 2, Thms 4.3–4.4).

The converted paper lost its formulas; the bounds below are reconstructed (implementation notes on Imola et al. (EMD), item 2) and re-derived
here so that every constant has a stated source.

**Composition bound** (always valid, δ = 0). For equal sizes m, d_EM(D, D') = (1/m)·Σ_i d_X(x_i, x'_σ(i)) for an
optimal matching σ (Imola et al. (EMD) Lemma 2.1). Releasing R(x_1), …, R(x_m) is then Σ_i α0·d_X(x_i, x'_σ(i)) = m·α0·d_EM-DP
by basic composition, and shuffling is post-processing:  α = m·α0.

**Shuffle bound** (FMT22 = Feldman–McMillan–Talwar 2022, Thm 3.1, generalised to metric randomisers in Imola et al. (EMD)
Thm 4.3). Let N items be shuffled together (N = m in the local model: one user's items; N = n·m in the central
model: everybody's items) and change ONE item x → x' with the other N − 1 fixed. Since d_X ≤ 1, R is α0-LDP, which
is what the "clones" argument needs, while the pair (x, x') is only α0·d-distinguishable, d = d_X(x, x'). FMT22's
bound, with the pair factor tanh(α0·d/2) in place of tanh(α0/2), is

    ε(d) = log(1 + tanh(α0 d/2)·8·(√(e^{α0} log(4/δ)/N) + e^{α0}/N))  ≤  α0·d·4·(√(e^{α0} log(4/δ)/N) + e^{α0}/N),

valid when α0 ≤ log(N/(16 log(2/δ))). ε(d) is concave in d (Imola et al. (EMD) Thm 4.3 proof). Changing a user's m items one at a
time (group privacy for hockey-stick divergences, Imola et al. (EMD) Lemma A.2) sums the m per-item bounds: Σ_i ε(d_i) ≤
4α0(…)·m·d_EM, hence

    local   (N = m):    α = 4α0·(√(m e^{α0} log(4/δ)) + e^{α0}),
    central (N = n·m):  α = 4α0·(√(m e^{α0} log(4/δ)/n) + e^{α0}/n)      (implementation notes on Imola et al. (EMD); FMT-form upper bound).

**δ of the group step** (our derivation; the paper's δ term is lost). Chaining P_{j−1}(S) ≤ e^{ε_j}P_j(S) + δ over
the m single-item changes gives P_0(S) ≤ e^{Σε_j}P_m(S) + δ·Σ_j e^{ε_1+…+ε_{j−1}}. Changing the items in increasing
order of d_i keeps every partial sum ≤ (j−1)/m of the total ≤ (j−1)α/m (d_EM ≤ 1), so the released guarantee is
(α, δ_total) with

    δ_total = δ·Σ_{j=0}^{m−1} e^{jα/m}        (δ = the per-step FMT22 δ).

Calibration (:func:`calibrate_alpha0`): from a target (α, δ_total) take δ = δ_total/Σ_j e^{jα/m}, solve the shuffle
bound for α0 by bisection, compare with the composition value α/m, and use whichever allows the larger α0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from streamdp.accounting.cost import Cost

__all__ = [
    "ItemRandomizer",
    "PrivEMDItemWise",
    "ItemWiseGuarantee",
    "composition_alpha",
    "shuffle_alpha",
    "shuffle_alpha0_limit",
    "group_delta_factor",
    "calibrate_alpha0",
]

_MODELS = ("local", "central")


class ItemRandomizer(Protocol):
    """An α0-d_X-DP randomiser of single items: Pr[R(x) = y] ≤ e^{α0·d_X(x, x')}·Pr[R(x') = y]."""

    alpha0: float

    def randomize(self, rng: np.random.Generator, items: np.ndarray) -> np.ndarray:  # pragma: no cover
        ...


def _pos(x, name: str) -> float:
    x = float(x)
    if not math.isfinite(x) or x <= 0:
        raise ValueError(f"{name} must be finite and > 0, got {x!r}")
    return x


def _posint(x, name: str) -> int:
    if isinstance(x, bool) or x is None or int(x) != x or int(x) < 1:
        raise ValueError(f"{name} must be a positive integer, got {x!r}")
    return int(x)


def _delta(x, name: str = "delta") -> float:
    x = float(x)
    if not (0.0 < x < 1.0):
        raise ValueError(f"{name} must lie in (0, 1), got {x!r}")
    return x


def _n_shuffled(m: int, model: str, n_users: int | None) -> int:
    if model not in _MODELS:
        raise ValueError(f"model must be one of {_MODELS}, got {model!r}")
    if model == "local":
        return m
    return m * _posint(n_users, "n_users")


def composition_alpha(alpha0: float, m: int) -> float:
    """α = m·α0 (basic composition over the m items + Birkhoff–von Neumann; Imola et al. (EMD) §4.2)."""
    return _posint(m, "m") * _pos(alpha0, "alpha0")


def shuffle_alpha0_limit(n_shuffled: int, delta: float) -> float:
    """Largest α0 for which the FMT22 shuffle bound applies: log(N/(16·log(2/δ))) (may be ≤ 0: never)."""
    return math.log(_posint(n_shuffled, "n_shuffled") / (16.0 * math.log(2.0 / _delta(delta))))


def shuffle_alpha(alpha0: float, m: int, delta: float, model: str = "local", n_users: int | None = None) -> float:
    """Shuffle bound on α (per unit d_EM), see module docstring; ``inf`` when α0 exceeds the validity limit.

    local: 4α0(√(m e^{α0} log(4/δ)) + e^{α0});  central: 4α0(√(m e^{α0} log(4/δ)/n) + e^{α0}/n).
    Both equal m·4α0(√(e^{α0} log(4/δ)/N) + e^{α0}/N) with N = m (local) or n·m (central).
    """
    alpha0 = _pos(alpha0, "alpha0")
    m = _posint(m, "m")
    delta = _delta(delta)
    n_sh = _n_shuffled(m, model, n_users)
    if alpha0 > shuffle_alpha0_limit(n_sh, delta):
        return math.inf
    e = math.exp(alpha0)
    return m * 4.0 * alpha0 * (math.sqrt(e * math.log(4.0 / delta) / n_sh) + e / n_sh)


def group_delta_factor(alpha: float, m: int) -> float:
    """Σ_{j=0}^{m−1} e^{jα/m}: δ_total = δ·factor for the m-step group-privacy chain (module docstring)."""
    alpha = float(alpha)
    m = _posint(m, "m")
    if not math.isfinite(alpha) or alpha < 0:
        raise ValueError(f"alpha must be finite and ≥ 0, got {alpha!r}")
    r = alpha / m
    if r == 0.0:
        return float(m)
    return math.expm1(alpha) / math.expm1(r)


@dataclass(frozen=True)
class ItemWiseGuarantee:
    """(α, δ_total)-bounded d_EM-DP of one PrivEMDItemWise release, and which bound produced it."""

    alpha: float
    delta: float
    bound: str  # "composition" | "shuffle"
    alpha0: float
    delta_step: float = 0.0

    def cost(self) -> Cost:
        return Cost.emd(self.alpha, self.delta)


def calibrate_alpha0(
    alpha: float, m: int, delta: float = 0.0, model: str = "local", n_users: int | None = None, tol: float = 1e-12
) -> ItemWiseGuarantee:
    """The largest per-item α0 such that PrivEMDItemWise is (α, δ)-bounded d_EM-DP.

    Composition gives α0 = α/m with δ = 0. If δ > 0 the shuffle bound is solved by bisection with the per-step
    δ_step = δ/Σ_{j<m} e^{jα/m}; the bound allowing the larger α0 wins (the returned guarantee's α never exceeds
    the target, its δ never exceeds the target δ).
    """
    alpha = _pos(alpha, "alpha")
    m = _posint(m, "m")
    delta = float(delta)
    if not (0.0 <= delta < 1.0):
        raise ValueError(f"delta must lie in [0, 1), got {delta!r}")
    n_sh = _n_shuffled(m, model, n_users)
    best = ItemWiseGuarantee(alpha=composition_alpha(alpha / m, m), delta=0.0, bound="composition", alpha0=alpha / m)
    if delta == 0.0:
        return best
    delta_step = delta / group_delta_factor(alpha, m)
    if not (0.0 < delta_step < 1.0):
        return best
    hi = shuffle_alpha0_limit(n_sh, delta_step)
    if hi <= 0:
        return best

    def f(a0: float) -> float:
        return shuffle_alpha(a0, m, delta_step, model, n_users)

    if f(hi) <= alpha:
        a0 = hi
    else:
        lo = 0.0  # f(0+) = 0 ≤ α; f is increasing in α0
        while hi - lo > tol * max(1.0, hi):
            mid = 0.5 * (lo + hi)
            if f(mid) <= alpha:
                lo = mid
            else:
                hi = mid
        a0 = lo
    if a0 <= best.alpha0 or a0 <= 0:
        return best
    a_sh = f(a0)
    return ItemWiseGuarantee(
        alpha=a_sh, delta=delta_step * group_delta_factor(a_sh, m), bound="shuffle", alpha0=a0, delta_step=delta_step
    )


class PrivEMDItemWise:
    """Apply an α0-d_X-DP randomiser to every item, then release the outputs in uniformly random order.

    ``model="local"``: one user's m items (N = m shuffled). ``model="central"``: all n users' items, m each
    (N = n·m shuffled together). Sizes are public (bounded d_EM-DP); for unbounded data wrap with
    :class:`~streamdp.mechanisms.emd.bounded_reduction.BoundedEMDReduction`.

    ``bound``: ``"composition"`` (α = m·α0, δ = 0), ``"shuffle"`` (needs ``delta_step``), or ``"auto"`` (the
    smaller α of the two; composition when no ``delta_step``).
    """

    def __init__(
        self,
        randomizer: ItemRandomizer,
        m: int,
        model: str = "local",
        n_users: int | None = None,
        bound: str = "auto",
        delta_step: float = 0.0,
    ):
        self.randomizer = randomizer
        self.alpha0 = _pos(getattr(randomizer, "alpha0", None), "randomizer.alpha0")
        self.m = _posint(m, "m")
        self.n_shuffled = _n_shuffled(self.m, model, n_users)
        self.model = model
        self.n_users = None if model == "local" else int(n_users)
        if bound not in ("auto", "composition", "shuffle"):
            raise ValueError(f"bound must be 'auto', 'composition' or 'shuffle', got {bound!r}")
        self.bound = bound
        self.delta_step = float(delta_step)
        if bound == "shuffle" and not (0.0 < self.delta_step < 1.0):
            raise ValueError("delta_step must lie in (0, 1) for the shuffle bound")
        self._guarantee = self._compute_guarantee()

    @classmethod
    def calibrated(
        cls,
        randomizer_factory,
        alpha: float,
        m: int,
        delta: float = 0.0,
        model: str = "local",
        n_users: int | None = None,
    ) -> "PrivEMDItemWise":
        """Build with α0 from :func:`calibrate_alpha0`; ``randomizer_factory(alpha0)`` returns the randomiser."""
        g = calibrate_alpha0(alpha, m, delta, model, n_users)
        rnd = randomizer_factory(g.alpha0)
        if abs(float(rnd.alpha0) - g.alpha0) > 1e-12 * max(1.0, g.alpha0):
            raise ValueError("randomizer_factory(alpha0) must return a randomiser with that alpha0")
        return cls(rnd, m, model, n_users, bound=g.bound, delta_step=g.delta_step)

    def _compute_guarantee(self) -> ItemWiseGuarantee:
        comp = ItemWiseGuarantee(composition_alpha(self.alpha0, self.m), 0.0, "composition", self.alpha0)
        if self.bound == "composition" or (self.bound == "auto" and not (0.0 < self.delta_step < 1.0)):
            return comp
        a = shuffle_alpha(self.alpha0, self.m, self.delta_step, self.model, self.n_users)
        if not math.isfinite(a):
            if self.bound == "shuffle":
                raise ValueError(
                    f"alpha0={self.alpha0} exceeds the shuffle-bound limit "
                    f"log(N/(16 log(2/δ))) = {shuffle_alpha0_limit(self.n_shuffled, self.delta_step):.6g}"
                )
            return comp
        sh = ItemWiseGuarantee(a, self.delta_step * group_delta_factor(a, self.m), "shuffle", self.alpha0,
                               self.delta_step)
        if self.bound == "shuffle" or sh.alpha < comp.alpha:
            return sh
        return comp

    @property
    def guarantee(self) -> ItemWiseGuarantee:
        return self._guarantee

    def cost(self) -> Cost:
        """Cost.emd(α, δ_total) to each user whose items are released (Imola et al. (EMD) Thm 4.4; module docstring)."""
        return self._guarantee.cost()

    def release(self, rng: np.random.Generator, items) -> np.ndarray:
        """Randomise and shuffle. Local: ``items`` has m entries. Central: ``items`` is (n_users, m)."""
        items = np.asarray(items)
        if self.model == "local":
            if items.shape[:1] != (self.m,):
                raise ValueError(f"items must hold exactly m={self.m} items (bounded model), got shape {items.shape}")
            flat = items
        else:
            if items.shape[:2] != (self.n_users, self.m):
                raise ValueError(f"items must have shape (n_users={self.n_users}, m={self.m}, ...), got {items.shape}")
            flat = items.reshape((self.n_users * self.m,) + items.shape[2:])
        out = np.asarray(self.randomizer.randomize(rng, flat))
        return out[rng.permutation(out.shape[0])]

    def release_users(self, rng: np.random.Generator, items) -> np.ndarray:
        """Vectorised local releases for many users at once: ``items`` is (n, m); row i of the result is user i's
        own shuffled release (each row costs ``cost()`` to its user only)."""
        if self.model != "local":
            raise ValueError("release_users is for the local model; use release() for the central model")
        items = np.asarray(items)
        if items.ndim < 2 or items.shape[1] != self.m:
            raise ValueError(f"items must have shape (n, m={self.m}, ...), got {items.shape}")
        n = items.shape[0]
        out = np.asarray(self.randomizer.randomize(rng, items.reshape((n * self.m,) + items.shape[2:])))
        out = out.reshape((n, self.m) + out.shape[1:])
        order = np.argsort(rng.random((n, self.m)), axis=1)  # an independent uniform permutation per user
        return out[np.arange(n)[:, None], order]
