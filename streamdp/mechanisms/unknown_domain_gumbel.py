"""Unknown-domain Gumbel top-k from the top-(k̄+1): Rogers (unknown-domain) Alg. 3 and Thm 9 (Durfee–Rogers 2019).

Input: an (∞, 1)-sensitive histogram — one user changes any number of counts, each by at most 1 (in streamdp: a
user contributes at most once per item per window). With β = 1/ε and T = 1 + (1/ε)·log(k̄/δ):

    T̃ = T + c_(k̄+1) + Gumbel(β)              (c_(k̄+1) = 0 when there are at most k̄ positive items)
    c̃_i = c_i + Gumbel(β)  for the top-k̄ items with c_i > 0
    I = the (at most k) items with c̃_i > T̃, by decreasing c̃_i;  I ← I + [⊥] when |I| < k.

Output: the ranked list of item ids, ⊥ included — never a count, never a noisy value (report-noisy-max releases
the arg max order only; Rogers (unknown-domain) §4.2.1). Thm 9: δ-approximate k·ε²/8-zCDP. Under pay-what-you-get composition
(Rogers (unknown-domain) Alg. 4, Thm 10; :mod:`streamdp.mechanisms.pay_what_you_get`) a call pays for what it returned: |I|·ε²/8
(⊥ counts as a returned item) and δ.

Ties in the top-k̄ selection are broken by ascending item id (see :mod:`.unknown_domain_histogram`); noise is drawn
for T̃ first, then for the top-k̄ items in (count desc, id asc) order.
"""

from __future__ import annotations

import math

import numpy as np

from streamdp.accounting.cost import Cost
from streamdp.mechanisms.exponential import exponential_mechanism_cost
from streamdp.mechanisms.unknown_domain_histogram import (
    check_delta,
    check_epsilon,
    check_int,
    histogram_arrays,
    top_kbar,
)
from streamdp.noise import samplers

__all__ = ["BOTTOM", "Bottom", "gumbel_topk_threshold", "gumbel_topk_cost", "UnknownDomainGumbel"]


class Bottom:
    """⊥: "fewer than k items passed the noisy threshold". A singleton (``BOTTOM``); survives pickling."""

    _instance: "Bottom | None" = None

    def __new__(cls) -> "Bottom":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "⊥"

    def __reduce__(self):
        return (Bottom, ())

    def __eq__(self, other) -> bool:
        return other is self

    def __hash__(self) -> int:
        return hash("streamdp.⊥")


#: The ⊥ item of Rogers (unknown-domain) Alg. 3.
BOTTOM = Bottom()


def gumbel_topk_threshold(epsilon: float, delta: float, kbar: int) -> float:
    """T = 1 + (1/ε)·log(k̄/δ) — Rogers (unknown-domain) Thm 9 (for (∞,1)-sensitive histograms, β = 1/ε)."""
    e, d, kb = check_epsilon(epsilon), check_delta(delta), check_int(kbar, "kbar")
    return 1.0 + math.log(kb / d) / e


def gumbel_topk_cost(epsilon: float, delta: float, k: int) -> Cost:
    """δ-approximate k·ε²/8-zCDP — Rogers (unknown-domain) Thm 9 (k exponential mechanisms, Rogers (unknown-domain) Thm 5, plus δ)."""
    d = check_delta(delta)
    kk = check_int(k, "k")
    return Cost.zcdp(rho=exponential_mechanism_cost(epsilon, kk).zcdp_rho, delta=d)


class UnknownDomainGumbel:
    """Rogers (unknown-domain) Alg. 3 with the Thm 9 calibration. Stateless; :meth:`release` returns a ranked list (⊥ = ``BOTTOM``)."""

    def __init__(self, epsilon: float, delta: float, k: int, kbar: int) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.delta = check_delta(delta)
        self.k = check_int(k, "k")
        self.kbar = check_int(kbar, "kbar")
        if self.k > self.kbar:
            raise ValueError(f"k must be ≤ kbar, got k={k!r}, kbar={kbar!r}")
        self.beta = 1.0 / self.epsilon
        self.threshold = gumbel_topk_threshold(self.epsilon, self.delta, self.kbar)

    def cost(self) -> Cost:
        """Worst case of one call, Rogers (unknown-domain) Thm 9: (k·ε²/8, δ)."""
        return gumbel_topk_cost(self.epsilon, self.delta, self.k)

    def realised_cost(self, n_returned: int) -> Cost:
        """Pay-what-you-get cost of a call that returned ``n_returned`` items, ⊥ included: (|I|·ε²/8, δ)
        (Rogers (unknown-domain) Thm 10)."""
        n = check_int(n_returned, "n_returned", minimum=0)
        if n > self.k:
            raise ValueError(f"n_returned must be ≤ k={self.k}, got {n_returned!r}")
        return Cost.zcdp(rho=exponential_mechanism_cost(self.epsilon, n).zcdp_rho, delta=self.delta)

    def release(self, rng: np.random.Generator, ids, counts) -> list:
        """Ranked list of at most k item ids; ``BOTTOM`` appended when fewer than k pass the noisy threshold."""
        ids, c = histogram_arrays(ids, counts)
        idx, c_next = top_kbar(ids, c, self.kbar)
        g = samplers.gumbel(rng, self.beta, idx.size + 1)  # g[0] for T̃, then one per top-k̄ item
        t_noisy = self.threshold + c_next + g[0]
        noisy = c[idx] + g[1:]
        passing = np.flatnonzero(noisy > t_noisy)
        ranked = passing[np.argsort(-noisy[passing], kind="stable")][: self.k]
        out = [ids[idx[j]].item() if isinstance(ids[idx[j]], np.generic) else ids[idx[j]] for j in ranked]
        if len(out) < self.k:
            out.append(BOTTOM)
        return out
