"""Pay-what-you-get top-k per window (Rogers (unknown-domain) Alg. 3/4, Thm 9/10; docs/contract.md §3 "Top-k").

Per window: the histogram of admitted users over items, at most 1 per (user, item) — an (∞, 1)-sensitive
histogram; the unknown-domain Gumbel top-k (β = 1/ε, T = 1 + log(k̄/δ)/ε, T̃ = T + c_(k̄+1) + Gumbel(β)) returns a
ranked list of ≤ k items and ⊥, never counts. The query stops for good after k* released items (⊥ is not
counted: a quiet window returns [⊥], and a run of them — a quiet night, or many windows closed at once by one far
event — must not end the query; docs/DECISIONS.md "Top-k: ⊥ does not count towards k*").

Cost (reserve and settle): every user with items in window i reserves (k(i)·ε²/8, δ) with k(i) = min(k, k* − used)
and is settled to (|I(i)|·ε²/8, δ) once the list is known (Rogers (unknown-domain) Thm 10). Users absent from the window pay nothing.
"""

from __future__ import annotations

import numpy as np

from streamdp.arrays import unique_sorted
from streamdp.accounting.cost import Cost
from streamdp.bounding.contribution import pair_keys
from streamdp.engine.query import Names, QueryRelease, Reservation, WindowData, WindowQuery
from streamdp.mechanisms.pay_what_you_get import PayWhatYouGet
from streamdp.mechanisms.unknown_domain_gumbel import BOTTOM, gumbel_topk_threshold


class TopK(WindowQuery):
    kind = "top_k"
    notion = "zcdp"

    def __init__(self, query_id: str, *, epsilon: float, delta: float, k: int, kbar: int, k_star: int) -> None:
        super().__init__(query_id)
        if kbar < k:
            raise ValueError(f"kbar must be ≥ k, got kbar={kbar}, k={k}")
        self.k, self.kbar = int(k), int(kbar)
        self.pwyg = PayWhatYouGet(epsilon, delta, k_star, count_bottom=False)
        self.threshold = gumbel_topk_threshold(epsilon, delta, self.kbar)
        self.pwyg.reserve_cost(self.k).to_fixed()  # the largest reservation must fit the fixed-point grid: fail now

    def prepare(self, w: WindowData, rng: np.random.Generator) -> Reservation:
        return self.prepare_under(w, self.pwyg)

    def prepare_under(self, w: WindowData, pwyg: PayWhatYouGet) -> Reservation:
        """:meth:`prepare` against the PWYG counter ``pwyg`` (the query's own; in a staged deployment stage A's copy,
        brought up to date by the previous window's outcome)."""
        users, items = w.item_pairs()
        if users.size == 0 or pwyg.exhausted:
            return Reservation.empty()
        keys = unique_sorted(pair_keys(users, items))  # ≤ 1 per (user, item)
        u = keys >> np.int64(32)  # sorted: distinct users are where the user changes
        present = u[np.flatnonzero(np.concatenate(([True], u[1:] != u[:-1])))]
        cost = pwyg.reserve_cost(self.k).to_fixed()  # Rogers (unknown-domain) Thm 10 / Alg. 4: reserve k(i)·ε²/8 and δ, the worst case
        return Reservation(present, np.tile(cost, (present.size, 1)), private=keys)

    def release(self, w: WindowData, res: Reservation, admitted: np.ndarray, rng: np.random.Generator,
                items: Names) -> QueryRelease:
        ids, counts = self.admitted_counts(res, admitted)
        rel, row = self.release_counts(ids, counts, rng, items)
        if row is not None:
            users = res.users[admitted[res.users]] if res.users.size else res.users
            rel.users, rel.actual = users, np.tile(row, (users.size, 1))
        return rel

    def admitted_counts(self, res: Reservation, admitted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Stage A's share of the release: per item (sorted ids), the number of admitted users holding it."""
        keys = res.private if res.private is not None else np.zeros(0, dtype=np.int64)
        if keys.size:
            keys = keys[admitted[keys >> np.int64(32)]]
        return np.unique(keys & np.int64(0xFFFFFFFF), return_counts=True)

    def release_counts(self, ids: np.ndarray, counts: np.ndarray, rng: np.random.Generator,
                       items: Names) -> tuple[QueryRelease, np.ndarray | None]:
        """The coordinator's share: one PWYG call (Rogers (unknown-domain) Alg. 3/4) over the merged per-item counts
        (sorted item ids of ``items``). Returns the release and the actual cost row of every admitted user of the
        window — (n·ε²/8, δ), n the items returned (Thm 10) — or None once the counter is exhausted (nothing was
        reserved, nothing is settled)."""
        if self.pwyg.exhausted:
            return QueryRelease(values={"items": [], "bottom": False, "stopped": True,
                                        "pwyg_used": self.pwyg.used, "k_star": self.pwyg.k_star},
                                meta={"pwyg_used": self.pwyg.used, "items_returned": 0}), None
        # items by NAME: Alg. 3's top-k̄ cut breaks ties among equal counts by item, and an interned id depends on
        # other (even refused) users' data (Names.name_array)
        ranked = self.pwyg.release(rng, items.name_array(ids), counts, self.k, self.kbar)
        names = [None if x is BOTTOM else x for x in ranked]
        n = len(ranked)
        # Rogers (unknown-domain) Thm 10: settle to the n items actually returned (n·ε²/8, δ): pay what you get
        row = self.pwyg.call_cost(n).to_fixed()
        values = {"items": names, "bottom": bool(ranked and ranked[-1] is BOTTOM), "stopped": self.pwyg.exhausted,
                  "pwyg_used": self.pwyg.used, "k_star": self.pwyg.k_star}
        return QueryRelease(values=values, meta={"pwyg_used": self.pwyg.used, "items_returned": n}), row

    public_cost_basis = "per user present in this window: |I(i)|·ε²/8 and δ (pay-what-you-get, Rogers (unknown-domain) Thm 10)"

    def public_cost(self, rel):
        n = rel.meta.get("items_returned", 0)
        return self.pwyg.call_cost(n) if n else Cost()

    def state(self) -> dict:
        return {"pwyg": self.pwyg.state()}

    def load_state(self, d: dict) -> None:
        self.pwyg = PayWhatYouGet.from_state(self.pwyg.epsilon, self.pwyg.delta, d["pwyg"], count_bottom=False)

    def describe(self) -> dict:
        return {**super().describe(), "epsilon": self.pwyg.epsilon, "delta": self.pwyg.delta, "k": self.k,
                "kbar": self.kbar, "k_star": self.pwyg.k_star, "threshold": self.threshold}
