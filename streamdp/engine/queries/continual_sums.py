"""Running event counts and value sums per key, user level, individual accounting — the ``continual_sums`` kind.

Per window (docs/query_continual_sums.md has the derivations):

1. every (event, key) occurrence is a record, with the event's value clamped to [lo, hi] and rounded to the sums'
   public grid g (:mod:`streamdp.bounding.record_bounds` applies the operator's bounds in event order: ≤ m records
   per (user, key) and ≤ C per user over the epoch, ≤ Δ0 keys per user per window);
2. each user with kept records is charged what those records add to the squared norm of the released
   mechanism's strategy vector (:func:`streamdp.mechanisms.continual_sums.window_charges`: zCDP ρ, exact, using the
   user's own earlier records on each key) and δ_key per key first touched while unselected — known before the
   release, from the user's own data and the earlier releases only;
3. the admitted users' records enter the per-key running totals (:class:`~streamdp.mechanisms.continual_sums.
   ContinualSums`); keys whose noisy count crosses T_t are selected for good; every selected key's count, sum and
   95 % intervals are published.

An event with items and no value, when a value range is configured, is dead-lettered by the engine
("missing_value") — the parser already refuses a non-numeric or non-finite value ("bad_value"); a value outside
[lo, hi] is clamped, not refused.
"""

from __future__ import annotations

import math

import numpy as np

from streamdp.accounting.cost import DELTA_SCALE, LOSS_SCALE, N_COMPONENTS, Cost, cost_to_fixed, costs_to_fixed
from streamdp.bounding.record_bounds import RecordBounder
from streamdp.engine.query import Names, QueryRelease, Reservation, WindowData, WindowQuery
from streamdp.mechanisms.continual_sums import ContinualSums as SumsMechanism
from streamdp.mechanisms.continual_sums import window_charges

_RHO, _DELTA = 0, 1  # the zcdp columns of a cost vector


def record_order(w: WindowData) -> np.ndarray:
    """Each record's place in event order (event time, then position in the window's input, then the item's
    position in the event), as distinct int64s."""
    counts = np.diff(w.item_offsets)
    n_ev = counts.size
    if n_ev and not bool(np.all(w.ts[1:] >= w.ts[:-1])):
        ev_rank = np.empty(n_ev, dtype=np.int64)
        ev_rank[np.argsort(w.ts, kind="stable")] = np.arange(n_ev)
        width = int(counts.max()) if counts.size else 1
        pos = np.arange(w.item_ids.size, dtype=np.int64) - np.repeat(w.item_offsets[:-1], counts)
        return np.repeat(ev_rank, counts) * max(width, 1) + pos
    return np.arange(w.item_ids.size, dtype=np.int64)  # already in time order: input order is event order


def charges_to_fixed(x: np.ndarray, scale: int) -> np.ndarray:
    """Computed charges (floats that no operator wrote) rounded UP to the fixed-point grid, fast: ⌊x·scale⌋ + 1 where
    x·scale < 2⁴⁸ (the float product is then within 2⁻⁵ of the exact one, so this is ≥ ⌈x·scale⌉, at most one
    unit — 10⁻¹² ρ — above it), 0 for 0, and :func:`~streamdp.accounting.cost.costs_to_fixed` for the rest."""
    x = np.asarray(x, dtype=np.float64)
    if x.size and (not np.all(np.isfinite(x)) or x.min() < 0):
        raise ValueError("charges must be finite and ≥ 0")
    p = x * float(scale)
    out = np.floor(p).astype(np.int64) + 1
    out[x == 0] = 0
    big = p >= 2.0 ** 48
    if big.any():
        out[big] = costs_to_fixed(x[big], scale)
    return out


def _int_bincount(keys: np.ndarray, weights: np.ndarray, top: int) -> np.ndarray:
    """``np.bincount`` with int64 weights summed exactly (float64 weights would round past 2⁵³)."""
    if weights.size == 0 or int(np.abs(weights).max()) * keys.size < 2 ** 53:
        return np.rint(np.bincount(keys, weights=weights, minlength=top)).astype(np.int64)
    out = np.zeros(top, dtype=np.int64)
    np.add.at(out, keys, weights)
    return out


class ContinualSums(WindowQuery):
    kind = "continual_sums"
    notion = "zcdp"

    def __init__(self, query_id: str, *, sigma: float, horizon: int, delta_key: float = 1e-6,
                 max_contributions: int = 32, max_keys_per_window: int | None = None,
                 max_per_key: int | None = None, noise: str = "blt", estimator: str = "plain",
                 blt_buffers: int = 4, value_range: list | None = None, value_sigma: float | None = None) -> None:
        super().__init__(query_id)
        self.horizon = int(horizon)
        self.sigma = float(sigma)
        if not (math.isfinite(self.sigma) and self.sigma > 0):
            raise ValueError(f"sigma must be a finite number > 0, got {sigma!r}")
        self.delta_key = float(delta_key)
        self.C = int(max_contributions)
        self.delta0 = self.C if max_keys_per_window is None else int(max_keys_per_window)
        self.m = self.C if max_per_key is None else min(int(max_per_key), self.C)
        if (value_range is None) != (value_sigma is None):
            raise ValueError("value_range and value_sigma go together (sums need both; counts only need neither)")
        self.lo = self.hi = None
        if value_range is not None:
            lo, hi = (float(v) for v in value_range)
            if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
                raise ValueError(f"value_range must be [lo, hi] with finite lo ≤ hi, got {value_range!r}")
            self.lo, self.hi = lo, hi
        self.requires_value = value_range is not None
        self.mech = SumsMechanism(self.horizon, self.sigma, self.delta_key, self.m, noise=noise,
                                  estimator=estimator, buffers=blt_buffers, value_sigma=value_sigma)
        self.value_sigma = self.mech.value_sigma
        self.grid = self.mech.grid
        if self.requires_value:  # the clamp range on the grid (rounded inward: a rounded value stays in [lo, hi])
            self._lo_units = math.ceil(self.lo / self.grid)
            self._hi_units = math.floor(self.hi / self.grid)
            if self._lo_units > self._hi_units:
                raise ValueError(f"value_range {value_range!r} holds no point of the sums' grid {self.grid!r}")
            self.value_bound = max(abs(self._lo_units), abs(self._hi_units)) * self.grid
        else:
            self.value_bound = 0.0
        self.bounder = RecordBounder(self.C, self.delta0, self.m, with_values=self.requires_value,
                                     horizon=self.horizon)
        self._delta_key_fixed = cost_to_fixed(self.delta_key, DELTA_SCALE)
        self._window_cost = self._public_window_cost()

    # ------------------------------------------------------------------------------------------------ costs
    def _public_window_cost(self) -> Cost:
        """The most one user can be charged for one window, from the parameters alone.

        A window adds j_k records to key k on top of n_k earlier ones (n_k + j_k ≤ m, Σ_k j_k ≤ R = min(C, Δ0·m),
        Σ_k (n_k + j_k) ≤ C); the exact charge (count part) is Σ_k 2j_k·Σ_s G[s,t] + j_k²·G[t,t] ≤
        Σ_k ((n_k + j_k)² − n_k²)·G_max ≤ min((2m − 1)·R, m·C)·G_max, since |G[s, t]| ≤ G_max (Cauchy–Schwarz) and
        (n + j)² − n² = j(2n + j) ≤ j(2m − 1). The sum part is the same with |values| ≤ B. δ: ≤ min(Δ0, C) first
        contributions."""
        R = min(self.C, self.delta0 * self.m)
        units = min((2 * self.m - 1) * R, self.m * self.C) * self.mech.gram_max()
        rho = units / (2.0 * self.sigma ** 2)
        if self.requires_value:
            rho += units * self.value_bound ** 2 / (2.0 * self.value_sigma ** 2)
        return Cost.zcdp(rho=rho, delta=min(self.delta0, self.C) * self.delta_key)

    public_cost_basis = ("per user, this window: at most min((2m−1)·min(C, Δ0·m), m·C)·G_max·(1/(2σ²) + B²/(2σ_s²)) "
                         "and min(Δ0, C)·δ_key; each user pays only for their own kept records")

    def public_cost(self, rel):
        return self._window_cost

    def epoch_cost_bound(self) -> Cost:
        """The most one user can be charged over one epoch: ρ ≤ m·C·G_max·(1/(2σ²) + B²/(2σ_s²)), δ ≤ C·δ_key
        (ΔᵀGΔ ≤ G_max·Σ_k n_k² ≤ G_max·m·Σ_k n_k)."""
        units = self.m * self.C * self.mech.gram_max()
        rho = units / (2.0 * self.sigma ** 2)
        if self.requires_value:
            rho += units * self.value_bound ** 2 / (2.0 * self.value_sigma ** 2)
        return Cost.zcdp(rho=rho, delta=self.C * self.delta_key)

    # ------------------------------------------------------------------------------------------------ steps
    def new_epoch(self) -> None:
        self.mech.reset()
        self.bounder.reset()

    def _values(self, w: WindowData, counts: np.ndarray) -> np.ndarray | None:
        """Per record: the event's value clamped to [lo, hi] and rounded to the grid (a multiple of g, float64)."""
        if not self.requires_value:
            return None
        v = np.repeat(w.value, counts)
        if np.isnan(v).any():  # the engine dead-letters these ("missing_value"); a query built alone refuses
            raise ValueError("continual_sums: a record without a value reached the query")
        units = np.clip(np.rint(v / self.grid), self._lo_units, self._hi_units)
        return units * self.grid

    def prepare(self, w: WindowData, rng: np.random.Generator) -> Reservation:
        if self.mech.t != w.t - 1:
            raise ValueError(f"continual_sums {self.id}: window {w.t} after {self.mech.t} (windows close in order)")
        return self.prepare_with(w, self.bounder, self.mech.selected_mask)

    def prepare_with(self, w: WindowData, bounder: RecordBounder, selected_mask) -> Reservation:
        """:meth:`prepare` against the per-user record history ``bounder`` (the query's own; in a staged deployment
        the input partition's, held by stage A) and ``selected_mask`` (key ids → selected by an earlier window of
        the epoch: public, from the releases; stage A's half answers it from the outcomes' selected key names)."""
        users, keys = w.item_pairs()
        if users.size == 0:
            return Reservation(users=np.zeros(0, dtype=np.int64), costs=np.zeros((0, N_COMPONENTS), np.int64),
                               private=None)
        counts = np.diff(w.item_offsets)
        x = self._values(w, counts)
        gram = self.mech.gram_column(w.t)  # public: a function of t and the parameters only
        b = bounder.bound(users, keys, x, record_order(w), w.t, gram)
        first_unselected = (b.prior_n == 0) & ~selected_mask(b.pair_key)
        cu, rho, n_first = window_charges(b.pair_user, b.pair_j, b.prior_g, float(gram[w.t]), self.sigma,
                                          b.pair_a, b.prior_xg, self.value_sigma, first_unselected)
        costs = np.zeros((cu.size, N_COMPONENTS), dtype=np.int64)
        costs[:, _RHO] = charges_to_fixed(rho, LOSS_SCALE)
        costs[:, _DELTA] = n_first * self._delta_key_fixed  # exact: δ_key as the operator wrote it, rounded up
        return Reservation(users=cu, costs=costs, private=b)

    def release(self, w: WindowData, res: Reservation, admitted: np.ndarray, rng: np.random.Generator,
                items: Names) -> QueryRelease:
        ids, inc_c, inc_s = self.admitted_increments(res, admitted, self.bounder)
        return self.release_increments(ids, inc_c, inc_s, rng, items)[0]

    def admitted_increments(self, res: Reservation, admitted: np.ndarray, bounder: RecordBounder | None = None
                            ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Stage A's share of the release: commits the admitted users' kept records to the per-user history
        (``bounder``: the query's own by default) and returns per key (sorted key ids) the admitted clamped count
        and (with values) sum increments — integers (sums in grid units), so their sum over partitions is exact
        in any order."""
        bounder = self.bounder if bounder is None else bounder
        b = res.private
        ids = np.zeros(0, dtype=np.int64)
        inc_c = np.zeros(0, dtype=np.int64)
        inc_s = np.zeros(0, dtype=np.int64) if self.requires_value else None
        if b is not None and b.pair_user.size:
            bounder.commit(b, admitted)
            keep = admitted[b.pair_user]
            everyone = bool(keep.all())
            keys, j = (b.pair_key, b.pair_j) if everyone else (b.pair_key[keep], b.pair_j[keep])
            if keys.size:
                a_units = None
                if self.requires_value:
                    a_units = np.rint((b.pair_a if everyone else b.pair_a[keep]) / self.grid).astype(np.int64)
                top = int(keys.max()) + 1
                if top <= 4 * keys.size + (1 << 20):  # dense ids: one counting pass (exact: integer weights)
                    per = np.bincount(keys, weights=j, minlength=top)
                    ids = np.flatnonzero(per)
                    inc_c = per[ids].astype(np.int64)
                    if a_units is not None:
                        has = np.bincount(keys, minlength=top)  # keys whose value sum is 0 still count
                        ids = np.flatnonzero(has)
                        inc_c = per[ids].astype(np.int64)
                        inc_s = _int_bincount(keys, a_units, top)[ids]
                else:
                    o = np.argsort(keys)  # any order within a key: the increments are summed
                    ks = keys[o]
                    starts = np.flatnonzero(np.concatenate(([True], ks[1:] != ks[:-1])))
                    ids = ks[starts]
                    inc_c = np.add.reduceat(j[o], starts)
                    if a_units is not None:
                        inc_s = np.add.reduceat(a_units[o], starts)
        return ids, inc_c, inc_s

    def release_increments(self, ids: np.ndarray, inc_c: np.ndarray, inc_s: np.ndarray | None,
                           rng: np.random.Generator, items: Names) -> tuple[QueryRelease, None]:
        """The coordinator's share: one step of the per-key running totals (the tree or BLT noise, sticky
        thresholded selection) with the merged per-key increments (sorted key ids of ``items``). No settle:
        (release, None)."""
        rel = self.mech.step(ids, inc_c, inc_s, rng)
        names = items.names(rel.selected_ids)
        hc = rel.count_halfwidth
        values = {
            "counts": dict(zip(names, rel.counts.tolist())),
            "sums": None,
            "ci95": {"count": dict(zip(names, zip((rel.counts - hc).tolist(), (rel.counts + hc).tolist()))),
                     "sum": None},
            "new_keys": sorted(items.names(rel.new_ids)),
            "threshold": rel.threshold,
        }
        if rel.sums is not None:
            g, hs = self.grid, rel.sum_halfwidth
            values["sums"] = dict(zip(names, (rel.sums * g).tolist()))  # × a power of two: exact
            values["ci95"]["sum"] = dict(zip(names, zip(((rel.sums - hs) * g).tolist(),
                                                        ((rel.sums + hs) * g).tolist())))
        return QueryRelease(values=values, meta={"selected": len(names),
                                                 "new_selected": len(values["new_keys"])}), None

    #: the version of the tree's charge rule (``tree_noise`` module docstring): 2 = the plain tree charges only the
    #: nodes its estimate reads (rule 1 charged every completed node). A release parameter of ``noise = "tree"``
    #: with ``estimator = "plain"`` only — the others are unchanged — so a checkpoint of rule 1 is refused there
    #: (users charged under two Gram matrices in one epoch: a sum's increments are not monotone in G).
    RELEASE_RULE = 2

    def parameters(self) -> dict:
        p = super().parameters()
        if self.mech.noise_kind == "tree" and self.mech.estimator == "plain":
            p = {**p, "release_rule": self.RELEASE_RULE}
        return p

    # ------------------------------------------------------------------------------------------------ state
    def state(self) -> dict:
        return {"mech": self.mech.state(), "bounder": self.bounder.state()}

    def load_state(self, d: dict) -> None:
        self.mech.load_state(d["mech"])
        self.bounder = RecordBounder.from_state(d["bounder"])

    def describe(self) -> dict:
        out = {**super().describe(), "sigma": self.sigma, "horizon": self.horizon, "delta_key": self.delta_key,
               "max_contributions": self.C, "max_keys_per_window": self.delta0, "max_per_key": self.m,
               "noise": self.mech.noise_kind, "estimator": self.mech.estimator, "gram_max": self.mech.gram_max(),
               "value_range": None if self.lo is None else [self.lo, self.hi], "value_sigma": self.value_sigma,
               "value_grid": self.grid, "epoch_rho_max": self.epoch_cost_bound().zcdp_rho}
        if self.mech.noise_kind == "blt":
            p = self.mech.noise_count.params
            out["blt"] = {"theta": list(p.theta), "omega": list(p.omega)}
        return out
