"""Continual counts over an unknown domain, user level (Rogers (unknown-domain) §4.3 Thm 11 + docs/contract.md §3).

Per window: contribution bounding (≤ Δ0 distinct items per user per window, ≤ C per (user, item) over the horizon),
then the unknown-domain binary-mechanism tree over items. Cost per user per window:

    (#items the user contributes to for the first time in this epoch) × (ρ = Δ2²(C, L)/(2σ²), δ = δ_item)

with Δ2²(C, L) the exact worst case of a user's contributions to the nodes the estimator reads
(``binary_tree.charged_sensitivity_sq``: levels for C = 1; plain, the used nodes, ≤ C²·⌈log2(L+1)⌉; optimal, every
completed node). Later contributions to an item (up to C) are free. The running count of every
selected item is published at every window (sticky selection), as an integer.

Release rule 2 (2026-12-07): the exact Δ2² for C > 1 (it was C²·levels) and the threshold's √P, P the largest
popcount of a window number ≤ L (it was √(levels+1)). Both are tighter and both sound; a checkpoint written under
rule 1 carries no ``release_rule`` in its release parameters and is refused at restore (``release_parameters.py``:
its tree and its users' charges were made under the old rule), so a deployment moves to rule 2 with a new
deployment (new consumer group and query ids), never in the middle of an epoch.

Release rule 3 (2026-12-07): with ``estimator = "optimal"`` Δ2² is over every completed tree node
(``binary_tree.completed_node_sensitivity_sq``), not only the nodes a prefix sum reads: Honaker's estimate reads
the right children too, and rule 2 under-charged it for C ≥ 2 (30 instead of 29 at C = 2, L = 128). Plain and
C = 1 costs are unchanged; thresholds are unchanged (Honaker's variance at t is ≤ popcount(t)·σ²). Rule-2
checkpoints are refused like rule-1 ones.
"""

from __future__ import annotations

import numpy as np

from streamdp.bounding.contribution import ContributionBounder
from streamdp.engine.query import Names, QueryRelease, Reservation, WindowData, WindowQuery
from streamdp.mechanisms.binary_tree import UnknownDomainBinaryTree, binary_tree_cost, binary_tree_threshold


class ContinualCounts(WindowQuery):
    kind = "continual_counts"
    notion = "zcdp"

    def __init__(self, query_id: str, *, sigma: float, horizon: int, delta_item: float,
                 max_items_per_window: int = 4, max_per_item: int = 1, noise: str = "gaussian",
                 estimator: str = "plain", keep_history: bool = False) -> None:
        super().__init__(query_id)
        self.keep_history = bool(keep_history)
        self.sigma = float(sigma)
        self.horizon = int(horizon)
        self.delta_item = float(delta_item)
        self.noise = noise
        self.estimator = estimator
        self.bounder = ContributionBounder(max_items_per_window, max_per_item)
        self.item_cost = binary_tree_cost(self.sigma, self.horizon, self.delta_item, max_per_item, estimator)
        self.item_cost_fixed = self.item_cost.to_fixed()
        self.threshold = binary_tree_threshold(self.sigma, self.horizon, self.delta_item, max_per_item, noise)
        self.tree = self._new_tree()

    def _new_tree(self) -> UnknownDomainBinaryTree:
        return UnknownDomainBinaryTree(self.horizon, self.sigma, self.delta_item, cap=self.bounder.cap,
                                       noise=self.noise, estimator=self.estimator,
                                       keep_history=self.keep_history)

    def new_epoch(self) -> None:
        self.tree = self._new_tree()
        self.bounder.reset()

    def prepare(self, w: WindowData, rng: np.random.Generator) -> Reservation:
        return self.prepare_with(w, rng, self.bounder)

    def prepare_with(self, w: WindowData, rng, bounder: ContributionBounder) -> Reservation:
        """:meth:`prepare` against the epoch counters ``bounder`` (the query's own; in a staged deployment the
        input partition's, held by stage A)."""
        users, items = w.item_pairs()
        if users.size == 0:
            return Reservation.empty()
        b = bounder.bound(users, items, rng)
        # costly (first) contributions per user; users whose pairs are all repeats are charged nothing
        u = b.user_ids  # sorted (bounded pairs come in key order: user, then item)
        if u.size == 0:
            return Reservation(users=u.astype(np.int64), costs=np.zeros((0, self.item_cost_fixed.size), np.int64),
                               private=b)
        starts = np.flatnonzero(np.concatenate(([True], u[1:] != u[:-1])))
        n_first = np.add.reduceat(b.first.astype(np.int64), starts)
        # contract §3 (Rogers (unknown-domain) Thm 11 at user level): each first contribution to an item's tree in this epoch costs
        # ρ = Δ2²(C, L)/(2σ²) (over the nodes the estimator reads) and δ_item; a user pays n_first of them (≤ Δ0)
        costs = n_first[:, None] * self.item_cost_fixed[None, :]
        return Reservation(users=u[starts], costs=costs.astype(np.int64, copy=False), private=b)

    def release(self, w: WindowData, res: Reservation, admitted: np.ndarray, rng: np.random.Generator,
                items: Names) -> QueryRelease:
        ids, incs = self.admitted_counts(res, admitted, self.bounder)
        return self.release_counts(ids, incs, rng, items)[0]

    def admitted_counts(self, res: Reservation, admitted: np.ndarray,
                        bounder: ContributionBounder | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Stage A's share of the release: commits the admitted users' bounded pairs to the epoch counters
        (``bounder``: the query's own by default) and returns the per-item increments (sorted ids, counts)."""
        bounder = self.bounder if bounder is None else bounder
        b = res.private
        if b is not None and b.user_ids.size:
            keep = admitted[b.user_ids]
            bounder.commit_bounded(b, keep)
            return np.unique(b.item_ids[keep], return_counts=True)
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)

    def release_counts(self, ids: np.ndarray, incs: np.ndarray, rng: np.random.Generator,
                       items: Names) -> tuple[QueryRelease, None]:
        """The coordinator's share: one step of the unknown-domain binary mechanism (Rogers (unknown-domain) §4.3;
        the binary mechanism of Dwork et al., "Differential privacy under continual observation") with the merged
        per-item increments (sorted item ids of ``items``). No settle: (release, None)."""
        rel = self.tree.step(ids, np.asarray(incs).astype(np.int64), rng)
        sel = np.asarray(rel.selected_ids)
        counts = np.asarray(rel.counts).astype(np.int64)
        order = np.argsort(-counts, kind="stable")
        names = items.names(sel[order])
        values = {
            "counts": dict(zip(names, counts[order].tolist())),
            # sorted: the tree's row order is the interned-id order of first contributions, which depends on
            # other (even refused) users' data (review of 2026-11-23)
            "new_items": sorted(items.names(np.asarray(rel.new_ids))),
            "threshold": self.threshold,
        }
        return QueryRelease(values=values, meta={"selected": int(sel.size),
                                                 "new_selected": len(values["new_items"])}), None

    #: the version of the cost and threshold rule (module docstring); a release parameter
    RELEASE_RULE = 3

    def parameters(self) -> dict:
        return {**super().parameters(), "release_rule": self.RELEASE_RULE}

    public_cost_basis = "per user, this window: at most max_items_per_window first contributions"

    def public_cost(self, rel):
        return self.item_cost * self.bounder.delta0

    def state(self) -> dict:
        return {"tree": self.tree.to_bytes(), "bounder": self.bounder.state()}

    def load_state(self, d: dict) -> None:
        self.tree = UnknownDomainBinaryTree.from_bytes(d["tree"])
        self.bounder = ContributionBounder.from_state(d["bounder"])

    def range_count(self, item_names: list[str], s: int, t: int, items: Names) -> dict[str, int]:
        """Noisy count of selected items over windows s..t of the current epoch, from the stored tree nodes — free
        post-processing (Rogers (unknown-domain) §4.3; needs ``keep_history``). Unselected or unknown items are refused: their noisy
        counts were never published and must not be."""
        unknown = [n for n in item_names if n not in items.index]
        if unknown:
            raise ValueError(f"unknown items: {unknown[:5]}")
        ids = np.array([items.index[n] for n in item_names], dtype=np.int64)
        return dict(zip(item_names, self.tree.range_count(ids, s, t).tolist()))

    def describe(self) -> dict:
        return {**super().describe(), "sigma": self.sigma, "horizon": self.horizon, "delta_item": self.delta_item,
                "threshold": self.threshold, "rho_per_item": self.item_cost.zcdp_rho,
                "release_rule": self.RELEASE_RULE,
                "max_items_per_window": self.bounder.delta0, "max_per_item": self.bounder.cap}
