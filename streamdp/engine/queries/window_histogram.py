"""Window histogram: noisy counts of this window's items above a threshold (Rogers (unknown-domain) Alg. 1 / Thm 7, Alg. 2 / Thm 8;
docs/contract.md §1).

Per window: the histogram of admitted users over items, at most 1 per (user, item) (Δ∞ = 1: counts of distinct
users) and at most Δ0 = ``max_items_per_window`` distinct items per user (a user with more keeps a uniform random
subset, :func:`~streamdp.bounding.contribution.delta0_subset`) — a (Δ0, 1)-sensitive histogram over items nobody
listed in advance. Windows are independent: nothing carries over (no tree, no sticky selection).

* ``algorithm = "threshold"`` (Alg. 1): every positive count gets noise of scale σ = Δ∞/ε (Gaussian or Laplace) and
  the items above T are released — T = 1 + (1/ε)·Φ⁻¹(1 − δ/Δ0) (Gaussian) or 1 + (1/ε)·log(Δ0/(2δ)) (Laplace).
* ``algorithm = "top_kbar"`` (Alg. 2): only the k̄ largest counts get N(0, σ²) noise and are released above the
  noisy threshold T̃ = T + c_(k̄+1) + N(0, σ²), T = 1 + (√2/ε)·Φ⁻¹(1 − δ/Δ0). T̃ is never published.

Released counts are integers (rounded after the threshold test: post-processing), by decreasing noisy count.

Cost, per user present in the window (known before the release: no settle):

* ``threshold``: a user u with m_u ≤ Δ0 kept items pays ρ = m_u·ε²/2 and δ = m_u·δ/Δ0. Removing u changes m_u
  counts by 1: the noise on the counts that stay present is a Gaussian of ℓ2 sensitivity √m_u (ρ = m_u·ε²/2,
  Rogers (unknown-domain) Thm 4), or m_u Laplace counts of ε-DP each (m_u·ε²/2 as zCDP, Rogers (unknown-domain) Thm 7 proof); a count that u alone holds
  (count 1 = Δ∞) crosses T with probability exactly δ/Δ0 — T is calibrated so (Thm 7) — hence m_u·δ/Δ0 by a
  union bound. At m_u = Δ0 this is Thm 7's (Δ0·ε²/2, δ).
* ``top_kbar``: every user present pays Thm 8's (Δ0·ε²/2, δ): its proof compares the top-k̄ sets of neighbouring
  histograms as a whole and gives no per-item split.
"""

from __future__ import annotations

import numpy as np

from streamdp.accounting.cost import Cost
from streamdp.arrays import unique_sorted
from streamdp.bounding.contribution import delta0_subset, pair_keys
from streamdp.engine.query import Names, QueryRelease, Reservation, WindowData, WindowQuery
from streamdp.mechanisms.unknown_domain_histogram import TopKbarGaussianHistogram, UnknownDomainHistogram

ALGORITHMS = ("threshold", "top_kbar")
NOISES = ("gaussian", "laplace")

_SHIFT = np.int64(32)


class WindowHistogram(WindowQuery):
    kind = "window_histogram"
    notion = "zcdp"

    def __init__(self, query_id: str, *, epsilon: float, delta: float, max_items_per_window: int = 4,
                 algorithm: str = "threshold", noise: str = "gaussian", kbar: int = 20) -> None:
        super().__init__(query_id)
        if algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
        if noise not in NOISES:
            raise ValueError(f"noise must be one of {NOISES}, got {noise!r}")
        if algorithm == "top_kbar" and noise != "gaussian":
            raise ValueError("algorithm 'top_kbar' (Rogers (unknown-domain) Alg. 2) is Gaussian only")
        self.algorithm, self.noise = algorithm, noise
        self.delta0 = int(max_items_per_window)
        if algorithm == "threshold":
            self.mech = UnknownDomainHistogram(epsilon, delta, self.delta0, 1.0, noise=noise)
        else:
            self.mech = TopKbarGaussianHistogram(epsilon, delta, kbar, self.delta0, 1.0)
        self.threshold = float(self.mech.threshold)
        self.kbar = int(kbar)
        full = self.mech.cost()  # Thm 7 / Thm 8: (Δ0·ε²/2, δ)
        self.full_cost_fixed = full.to_fixed()
        # threshold: per kept item ε²/2 and δ/Δ0, each rounded up to fixed point, times m_u ≤ Δ0 — at m_u = Δ0 this
        # is Rogers (unknown-domain) Thm 7's (Δ0·ε²/2, δ); per item is the team's decision (docs/DECISIONS.md, module doc)
        eps = self.mech.epsilon
        self.item_cost_fixed = Cost.zcdp(rho=eps * eps / 2.0, delta=self.mech.delta / self.delta0).to_fixed()

    def prepare(self, w: WindowData, rng: np.random.Generator) -> Reservation:
        users, items = w.item_pairs()
        if users.size == 0:
            return Reservation.empty()
        keys = unique_sorted(pair_keys(users, items))  # ≤ 1 per (user, item): Δ∞ = 1
        u = keys >> _SHIFT
        keep = delta0_subset(u, self.delta0, rng, keys & np.int64(0xFFFFFFFF))  # ≤ Δ0 items per user
        if keep is not None:
            keys, u = keys[keep], u[keep]
        starts = np.flatnonzero(np.concatenate(([True], u[1:] != u[:-1])))  # sorted: where the user changes
        present = u[starts]
        if self.algorithm == "threshold":
            m = np.diff(np.append(starts, u.size)).astype(np.int64)  # m_u: kept items per user
            costs = m[:, None] * self.item_cost_fixed[None, :]
        else:
            costs = np.tile(self.full_cost_fixed, (present.size, 1))
        return Reservation(present, costs.astype(np.int64, copy=False), private=keys)

    def release(self, w: WindowData, res: Reservation, admitted: np.ndarray, rng: np.random.Generator,
                items: Names) -> QueryRelease:
        ids, counts = self.admitted_counts(res, admitted)
        return self.release_counts(ids, counts, rng, items)[0]

    def admitted_counts(self, res: Reservation, admitted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Stage A's share of the release: per item (sorted ids), the number of admitted users whose bounded
        contributions hold it (≤ 1 per (user, item), ≤ Δ0 items per user)."""
        keys = res.private if res.private is not None else np.zeros(0, dtype=np.int64)
        if keys.size:
            keys = keys[admitted[keys >> _SHIFT]]
        return np.unique(keys & np.int64(0xFFFFFFFF), return_counts=True)

    def release_counts(self, ids: np.ndarray, counts: np.ndarray, rng: np.random.Generator,
                       items: Names) -> tuple[QueryRelease, None]:
        """The coordinator's share: Rogers (unknown-domain) Alg. 1/2 over the merged per-item counts (sorted item
        ids of ``items``). No settle: (release, None)."""
        # items by NAME: Alg. 2's top-k̄ cut breaks ties among equal counts by item, and an interned id depends on
        # other (even refused) users' data (Names.name_array)
        out_names, noisy = self.mech.release(rng, items.name_array(ids), counts)  # by decreasing noisy count
        names = list(out_names)
        values = {"counts": dict(zip(names, np.asarray(noisy).tolist())), "threshold": self.threshold}
        return QueryRelease(values=values, meta={"released": len(names)}), None

    public_cost_basis = "per user present in this window: at most max_items_per_window items (Rogers (unknown-domain) Thm 7/8)"

    def public_cost(self, rel):
        return self.mech.cost()

    def state(self) -> dict:
        return {}

    def load_state(self, d: dict) -> None:
        pass

    def describe(self) -> dict:
        d = {**super().describe(), "epsilon": self.mech.epsilon, "delta": self.mech.delta,
             "max_items_per_window": self.delta0, "algorithm": self.algorithm, "threshold": self.threshold,
             "rho_max": self.mech.cost().zcdp_rho}
        if self.algorithm == "threshold":
            d["noise"] = self.noise
        else:
            d["kbar"] = self.kbar
        return d
