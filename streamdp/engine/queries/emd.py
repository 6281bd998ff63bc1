"""Metric-DP releases of users' windowed item multisets under the earth mover's distance (Imola et al. (EMD); docs/contract.md §1
"metric-DP releases", §3 ``emd``).

A user's data for a window is the multiset D_i of the items of all their events in the window that lie in the
query's item domain (other items are ignored; a user with none pays nothing). The guarantee is (α, δ)-d_EM-DP for
that user: for two values D_i, D_i' of their multiset, Pr[M ∈ S] ≤ e^{α·d_EM(D_i, D_i')}·Pr[M' ∈ S] + δ, with d_EM
the optimal-transport distance between the normalised histograms over a ground metric d_X ≤ 1 (Imola et al. (EMD) §2.2).
Not protected: whether a user has items of the domain in the window (the number of such users is published).

* :class:`EMDLinear` (``emd_linear``) — Imola et al. (EMD) Alg. 1 (PrivEMDLinear), central model. f: item → ℝ^d is the table
  ``features``; the ground metric is the one f induces, d_X(x, y) = ‖f(x) − f(y)‖₂ / L with L = ``lipschitz``
  (so f is exactly L-Lipschitz; L must be ≥ the diameter of the feature set so that d_X ≤ 1). Released: the mean
  over the n users of q_f(D_i) = mean of f over D_i, plus K-norm noise L·R·U, R ~ Gamma(d+1, 1/(nα)), U uniform in
  the unit ball. One user's change moves the released mean by ≤ L·d_EM(D_i, D_i')/n for multisets of any sizes
  (Imola et al. (EMD) Thm 4.1), so the release is α-d_EM-DP for every user (Imola et al. (EMD) Lemma 4.2, ω = 1/(nα)); cost Cost.emd(α, 0) per
  user with featured items.
* :class:`EMDFrequency` (``emd_frequency``) — Imola et al. (EMD) Alg. 4 (FreqEstLocal) with the clustered k-RR on the domain
  ``clusters`` (c clusters of g items each: d_X = 0 same item, ``gamma`` within a cluster, 1 across, Imola et al. (EMD) §6.2).
  Every item of every user is randomised independently (α0-d_X-DP each); the user-weighted mean one-hot of the
  reports, v̄ = (1/n)·Σ_i (1/m_i)·Σ_j e_{y_ij}, is unbiased for T·h̄ with h̄ = (1/n)·Σ_i h(D_i), so T⁻¹·v̄ is an
  unbiased estimate of the average user's item distribution; it is projected onto the simplex and published
  (the reports themselves never are: post-processing of each user's shuffled local release). A user with m_i
  items pays the PrivEMDItemWise guarantee of their own m_i reports (local model, N = m_i; Imola et al. (EMD) Thm 4.4):
  α = m_i·α0 (composition, δ = 0), or — when ``delta`` > 0 — the FMT22 shuffle bound if it gives a smaller α with
  a charged δ = δ_step·Σ_{j<m_i} e^{jα/m_i} ≤ ``delta`` (:func:`shuffle_delta_step` picks δ_step).
  Sizes are public in Imola et al. (EMD)'s bounded model, and so is the rule on them: users with more than ``max_items`` items in
  the window are left out of the window's estimate and pay nothing. (Keeping a random subset of max_items items
  instead would NOT be α(max_items)-d_EM-DP: when one item moves by m·d the subsample keeps it with probability
  max_items/m and the loss is not linear in d at that slope.)

Item ids are interned by the engine; the query maps them to its domain through the engine's
:class:`~streamdp.engine.query.Names`, which it receives at :meth:`release` (and at :meth:`bind_names`, if the engine
calls it before :meth:`prepare`). Item ids not resolvable at prepare time (only before the first release, or after
the engine swapped its name table) are reserved at the worst case and settled to the exact cost; a user whose exact
cost would exceed their reservation is left out of the release (never charged more than reserved).
"""

from __future__ import annotations

import math

import numpy as np

from streamdp.arrays import unique_sorted
from streamdp.accounting.cost import N_COMPONENTS, Cost, fixed_to_cost
from streamdp.engine.query import Names, QueryRelease, Reservation, WindowData, WindowQuery
from streamdp.mechanisms.emd.freq_est import ClusteredKRR, apply_clustered_inverse
from streamdp.mechanisms.emd.itemwise import PrivEMDItemWise
from streamdp.mechanisms.emd.linear import PrivEMDLinear
from streamdp.mechanisms.emd.metric import project_to_simplex

__all__ = ["ItemDomain", "EMDLinear", "EMDFrequency", "feature_diameter", "shuffle_delta_step", "MAX_ITEMS_LIMIT"]

MAX_ITEMS_LIMIT = 10_000  # largest max_items (the per-size cost table is precomputed)

_UNKNOWN = -2  # item id not resolvable yet
_OUTSIDE = -1  # item not in the domain


def _pos(x, name: str) -> float:
    if isinstance(x, bool):
        raise ValueError(f"{name}: must be a number, got {x!r}")
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: must be a number, got {x!r}") from None
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"{name}: must be finite and > 0, got {x!r}")
    return v


class ItemDomain:
    """Engine item id → row of a configured item list (−1: not in the domain; −2: not resolvable yet).

    Bound to the engine's :class:`Names` (a live, append-only table); new ids are resolved incrementally.
    """

    def __init__(self, names: list[str]) -> None:
        self.names = list(names)
        self.row_of = {s: i for i, s in enumerate(self.names)}
        self._table: Names | None = None
        self._rows = np.zeros(0, dtype=np.int64)

    def bind(self, items: Names) -> None:
        if items is not self._table:
            self._table, self._rows = items, np.zeros(0, dtype=np.int64)
        n = len(items)
        if self._rows.size < n:
            new = items.names(np.arange(self._rows.size, n, dtype=np.int64))
            get = self.row_of.get
            add = np.fromiter((get(s, _OUTSIDE) for s in new), dtype=np.int64, count=len(new))
            self._rows = np.concatenate([self._rows, add])

    def rows(self, item_ids: np.ndarray) -> np.ndarray:
        if self._table is not None:
            self.bind(self._table)  # the live table already holds every id ingested so far
        out = np.full(item_ids.size, _UNKNOWN, dtype=np.int64)
        known = item_ids < self._rows.size
        out[known] = self._rows[item_ids[known]]
        return out


def feature_diameter(f: np.ndarray) -> float:
    """max_{x,y} ‖f(x) − f(y)‖₂ over the rows of ``f`` (exact, in blocks)."""
    best = 0.0
    for i in range(0, f.shape[0], 512):
        blk = f[i:i + 512]
        d2 = ((blk[:, None, :] - f[None, :, :]) ** 2).sum(axis=2)
        best = max(best, float(d2.max()))
    return math.sqrt(best)


def shuffle_delta_step(alpha0: float, m: int, delta: float) -> float | None:
    """A per-step δ_step for the local shuffle bound of m items (N = m) whose charged δ stays ≤ ``delta``, chosen
    to minimise α over a grid of 0.1-decade steps from ``delta`` down 60 decades; None if no grid point is valid.

    Every grid point is checked with the bound itself (Imola et al. (EMD) Thm 4.4, implementation notes on Imola et al. (EMD)): valid iff
    α0 ≤ log(m/(16·log(2/δ_step))); α = 4α0·(√(m e^{α0} log(4/δ_step)) + e^{α0}); charged δ = δ_step·Σ_{j<m}
    e^{jα/m}. The grid only *chooses* δ_step; the cost is then computed by :class:`PrivEMDItemWise`, so the grid
    needs no monotonicity.
    """
    ds = delta * 10.0 ** (-np.linspace(0.0, 60.0, 601))
    ds = ds[(ds > 1e-300) & (ds < 1.0)]
    if ds.size == 0:
        return None
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        valid = alpha0 <= np.log(m / (16.0 * np.log(2.0 / ds)))
        e = math.exp(alpha0)
        alpha = m * 4.0 * alpha0 * (np.sqrt(e * np.log(4.0 / ds) / m) + e / m)
        factor = np.expm1(alpha) / np.expm1(alpha / m)
        charged = ds * factor
        ok = valid & np.isfinite(charged) & (charged <= delta) & (charged >= 0)
    if not ok.any():
        return None
    cand = np.flatnonzero(ok)
    return float(ds[cand[np.argmin(alpha[cand])]])


def _pairs(w: WindowData) -> tuple[np.ndarray, np.ndarray]:
    return w.item_pairs()


def _domain_pairs(w: WindowData, table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The window's (user, item id) pairs in window order whose item is in the domain or not resolvable yet, and
    their rows (−2: not resolvable yet): what ``prepare`` keeps for the release (``Reservation.private``)."""
    users, item_ids = _pairs(w)
    if users.size == 0:
        z = np.zeros(0, dtype=np.int64)
        return z, z, z
    rows = table.rows(item_ids)
    keep = rows != _OUTSIDE
    return users[keep], item_ids[keep], rows[keep]


def _admitted_featured_pairs(res: Reservation, table, admitted: np.ndarray, w: WindowData | None = None):
    """The window's (user, featured-item row) pairs of admitted users, in window order (the pairs ``prepare``
    kept — or, for a reservation made elsewhere, those of ``w`` —, their rows resolved again now that the names are
    bound): (users, rows, their sorted unique users, each pair's index into those)."""
    pairs = res.private if res.private is not None else (_domain_pairs(w, table) if w is not None else None)
    if pairs is None:
        z = np.zeros(0, dtype=np.int64)
        return z, z, z, z
    users, item_ids, _ = pairs
    rows = table.rows(item_ids) if users.size else np.zeros(0, dtype=np.int64)
    keep = rows >= 0
    if keep.any():
        keep[keep] = admitted[users[keep]]
    u, r = users[keep], rows[keep]
    uu, inv = np.unique(u, return_inverse=True)
    return u, r, uu, inv


def _admitted_reserved(res: Reservation, users: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(is user reserved by this query, its reservation row) for sorted unique ``users``."""
    if res.users.size == 0:
        return np.zeros(users.size, dtype=bool), np.zeros((users.size, N_COMPONENTS), dtype=np.int64)
    pos = np.searchsorted(res.users, users)
    pos_c = np.minimum(pos, res.users.size - 1)
    found = res.users[pos_c] == users
    return found, np.where(found[:, None], res.costs[pos_c], 0)


class EMDLinear(WindowQuery):
    """Central PrivEMDLinear over users' windowed multisets (module notes; Imola et al. (EMD) Alg. 1, Thm 4.1, Lemma 4.2)."""

    public_cost_basis = "per user with items in the domain, this window"

    def public_cost(self, rel):
        return self.cost

    kind = "emd_linear"
    notion = "emd"

    def __init__(self, query_id: str, *, alpha: float, features: dict, lipschitz: float,
                 dimensions: list | None = None) -> None:
        super().__init__(query_id)
        self.alpha = _pos(alpha, "alpha")
        if not isinstance(features, dict) or not features:
            raise ValueError(f"features: must be a non-empty table {{item = [f1, …]}}, got {features!r}")
        dim = None
        rows = []
        for name, vec in features.items():
            if not isinstance(name, str):
                raise ValueError(f"features: item names must be strings, got {name!r}")
            if isinstance(vec, (int, float)) and not isinstance(vec, bool):
                vec = [vec]
            if not isinstance(vec, (list, tuple)) or not vec:
                raise ValueError(f"features.{name}: must be a non-empty list of numbers, got {vec!r}")
            if any(isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) for v in vec):
                raise ValueError(f"features.{name}: must hold finite numbers, got {vec!r}")
            if dim is None:
                dim = len(vec)
            elif len(vec) != dim:
                raise ValueError(f"features.{name}: every feature vector must have length {dim}, got {len(vec)}")
            rows.append([float(v) for v in vec])
        self.dim = int(dim)
        from streamdp.noise.discrete import MAX_LATTICE_DIM

        if self.dim > MAX_LATTICE_DIM:  # the lattice ℓ2-Laplace's rejection sampler (refused at release otherwise)
            raise ValueError(f"features: feature vectors of at most {MAX_LATTICE_DIM} coordinates (the grid's K-norm "
                             f"sampler accepts too few proposals beyond), got {self.dim}")
        self.items = ItemDomain(list(features))
        self.f = np.array(rows, dtype=np.float64)
        self.diameter = feature_diameter(self.f)
        self.lipschitz = _pos(lipschitz, "lipschitz")
        if self.lipschitz < self.diameter:
            raise ValueError(f"lipschitz: must be ≥ the diameter of the feature vectors, max ‖f(x) − f(y)‖₂ = "
                             f"{self.diameter!r} (the ground metric d_X = ‖f(x) − f(y)‖/L must be ≤ 1), "
                             f"got {lipschitz!r}")
        if dimensions is not None:
            if (not isinstance(dimensions, (list, tuple)) or len(dimensions) != self.dim
                    or not all(isinstance(s, str) for s in dimensions) or len(set(dimensions)) != self.dim):
                raise ValueError(f"dimensions: must be {self.dim} distinct names, got {dimensions!r}")
            dimensions = list(dimensions)
        self.dimensions = dimensions
        self.cost = Cost.emd(self.alpha)  # α-d_EM-DP, δ = 0 (Imola et al. (EMD) Lemma 4.2, central: ω = 1/(nα))
        try:
            self._cost_fixed = self.cost.to_fixed()
        except OverflowError:
            raise ValueError(f"alpha: {alpha!r} does not fit the fixed-point ledger") from None

    def bind_names(self, items: Names) -> None:
        self.items.bind(items)

    def prepare(self, w: WindowData, rng: np.random.Generator) -> Reservation:
        users, item_ids, rows = _domain_pairs(w, self.items)
        present = unique_sorted(users)  # featured, or not resolvable yet (worst case: featured)
        if present.size == 0:
            return Reservation.empty()
        return Reservation(present, np.tile(self._cost_fixed, (present.size, 1)), private=(users, item_ids, rows))

    def admitted_means(self, res: Reservation, admitted: np.ndarray, w: WindowData | None = None
                       ) -> tuple[np.ndarray, np.ndarray]:
        """Stage A's share: q_f(D_i), the mean of f over each admitted featured user's items (in window order:
        a function of the user's own events), (n, d), and the users (sorted ids) — their means in that order."""
        u, r, uu, inv = _admitted_featured_pairs(res, self.items, admitted, w)
        ok, _ = _admitted_reserved(res, uu)  # every featured user was reserved unless the prepare-time table was stale
        if not ok.all():
            sel = ok[inv]
            u, r = u[sel], r[sel]
            uu, inv = np.unique(u, return_inverse=True)
        n = int(uu.size)
        if n == 0:
            return np.zeros((0, self.dim)), uu
        cnt = np.bincount(inv, minlength=n).astype(np.float64)
        means = np.column_stack([np.bincount(inv, weights=self.f[r, j], minlength=n) for j in range(self.dim)])
        means /= cnt[:, None]
        return means, uu

    def release(self, w: WindowData, res: Reservation, admitted: np.ndarray, rng: np.random.Generator,
                items: Names) -> QueryRelease:
        self.items.bind(items)
        means, uu = self.admitted_means(res, admitted, w)
        rel = self.release_means(means, rng)
        n = int(uu.size)
        return QueryRelease(values=rel.values, users=uu, actual=np.tile(self._cost_fixed, (n, 1)), meta=rel.meta)

    def release_means(self, means: np.ndarray, rng: np.random.Generator) -> QueryRelease:
        """The coordinator's share: the release from the admitted users' q_f(D_i) of every partition, in any order.
        The rows are put in ascending lexicographic order first, so the float mean over users is a function of
        their multiset — not of interned ids (which follow other users' data and differ per worker) nor of
        partitions. The noise is one draw, independent of the order. Every user's cost is the reservation."""
        means = np.asarray(means, dtype=np.float64).reshape(-1, self.dim)
        n = int(means.shape[0])
        if n == 0:  # the released shape with nulls: nothing was computed (a stable record shape)
            mean0 = [None] * self.dim if self.dimensions is None else dict.fromkeys(self.dimensions)
            return QueryRelease(values={"mean": mean0, "users": 0, "noise_scale": None}, meta={"users": 0})
        means = means[np.lexsort(means.T[::-1])]
        mech = PrivEMDLinear(self.alpha, self.lipschitz, self.dim, model="central", n_users=n)
        noisy = mech.release(rng, means[:, None, :])  # mean over users of q_f(D_i) + L·R·U, ω = 1/(nα)
        mean = noisy.tolist() if self.dimensions is None else dict(zip(self.dimensions, noisy.tolist()))
        values = {"mean": mean, "users": n, "noise_scale": mech.noise_scale}
        return QueryRelease(values=values, meta={"users": n})

    def state(self) -> dict:
        return {}

    def load_state(self, d: dict) -> None:
        return None

    def describe(self) -> dict:
        return {**super().describe(), "alpha": self.alpha, "lipschitz": self.lipschitz, "dim": self.dim,
                "items": len(self.items.names), "feature_diameter": self.diameter, "model": "central"}


class EMDFrequency(WindowQuery):
    """FreqEstLocal with the clustered k-RR over users' windowed multisets (module notes; Imola et al. (EMD) Alg. 2/4, §6.2)."""

    public_cost_basis = "per user with items in the domain, this window (the most over 1..max_items items, per component)"

    def public_cost(self, rel):
        # The charged δ is not monotone in m (the shuffle bound's δ_step comes from a grid, and the composition
        # bound has δ = 0): the cost at max_items can understate a smaller user's δ (privacy review of
        # 2026-11-23, F1). The published bound is the componentwise max over every size, as reservations use.
        return fixed_to_cost(self._worst[self.max_items])

    kind = "emd_frequency"
    notion = "emd"

    def __init__(self, query_id: str, *, alpha0: float, clusters: dict, gamma: float, max_items: int = 32,
                 delta: float = 0.0) -> None:
        super().__init__(query_id)
        self.alpha0 = _pos(alpha0, "alpha0")
        if not isinstance(clusters, dict) or not clusters:
            raise ValueError(f"clusters: must be a non-empty table {{name = [item, …]}}, got {clusters!r}")
        g = None
        domain: list[str] = []
        for name, members in clusters.items():
            if not isinstance(members, (list, tuple)) or not members or not all(isinstance(s, str) for s in members):
                raise ValueError(f"clusters.{name}: must be a non-empty list of item names, got {members!r}")
            if g is None:
                g = len(members)
            elif len(members) != g:
                raise ValueError(f"clusters.{name}: every cluster must have the same size g = {g} "
                                 f"(Imola et al. (EMD) §6.2 clustered metric), got {len(members)}")
            domain.extend(members)
        dup = sorted({s for s in domain if domain.count(s) > 1})
        if dup:
            raise ValueError(f"clusters: item {dup[0]!r} is listed more than once")
        self.cluster_names = list(clusters)
        self.c, self.g = len(clusters), int(g)
        if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not (0.0 < float(gamma) <= 1.0):
            raise ValueError(f"gamma: must lie in (0, 1], got {gamma!r}")
        self.gamma = float(gamma)
        if (isinstance(max_items, bool) or not isinstance(max_items, (int, float)) or int(max_items) != max_items
                or not (1 <= int(max_items) <= MAX_ITEMS_LIMIT)):
            raise ValueError(f"max_items: must be an integer in [1, {MAX_ITEMS_LIMIT}], got {max_items!r}")
        self.max_items = int(max_items)
        if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not (0.0 <= float(delta) < 1.0):
            raise ValueError(f"delta: must lie in [0, 1), got {delta!r}")
        self.delta = float(delta)
        self.items = ItemDomain(domain)
        self.krr = ClusteredKRR(self.c, self.g, self.gamma, self.alpha0)
        # cost of a user with m reports (local model, N = m): Imola et al. (EMD) Thm 4.4 via PrivEMDItemWise; row 0 = nothing
        self.guarantees = [None] + [self._guarantee(m) for m in range(1, self.max_items + 1)]
        self._table = np.zeros((self.max_items + 1, N_COMPONENTS), dtype=np.int64)
        try:
            for m in range(1, self.max_items + 1):
                self._table[m] = self.guarantees[m].cost().to_fixed()
        except OverflowError:
            raise ValueError(f"alpha0: {alpha0!r}·max_items does not fit the fixed-point ledger") from None
        self._worst = np.maximum.accumulate(self._table, axis=0)  # componentwise max over sizes ≤ m

    def _guarantee(self, m: int):
        """Composition (α = m·α0, δ = 0), or the shuffle bound when it gives a smaller α with δ ≤ ``delta``."""
        comp = PrivEMDItemWise(self.krr, m, model="local", bound="composition").guarantee
        if self.delta == 0.0:
            return comp
        ds = shuffle_delta_step(self.alpha0, m, self.delta)
        if ds is None:
            return comp
        try:
            sh = PrivEMDItemWise(self.krr, m, model="local", bound="shuffle", delta_step=ds).guarantee
        except ValueError:  # at the validity limit by a rounding error
            return comp
        return sh if (sh.alpha < comp.alpha and sh.delta <= self.delta) else comp

    def cost(self, m: int) -> Cost:
        """Cost of a user with m items (1 ≤ m ≤ max_items) in the window."""
        if isinstance(m, bool) or int(m) != m or not (1 <= int(m) <= self.max_items):
            raise ValueError(f"m: must be an integer in [1, {self.max_items}], got {m!r}")
        return self.guarantees[int(m)].cost()

    def bind_names(self, items: Names) -> None:
        self.items.bind(items)

    def prepare(self, w: WindowData, rng: np.random.Generator) -> Reservation:
        u, item_ids, rows = _domain_pairs(w, self.items)
        unknown = rows == _UNKNOWN
        if u.size == 0:
            return Reservation.empty()
        uu, inv = np.unique(u, return_inverse=True)
        m_unk = np.bincount(inv, weights=unknown, minlength=uu.size).astype(np.int64)
        m_known = np.bincount(inv, minlength=uu.size).astype(np.int64) - m_unk
        exact = m_unk == 0
        costs = np.zeros((uu.size, N_COMPONENTS), dtype=np.int64)
        fits = exact & (m_known <= self.max_items)
        costs[fits] = self._table[m_known[fits]]
        # a user with item names not yet bound to the domain: reserve the componentwise largest cost over every size
        # still possible (_worst; _table[m] is the guarantee of m items, Imola et al. (EMD) item-wise composition or shuffle);
        # settled to the exact size in release
        maybe = ~exact & (m_known <= self.max_items)
        costs[maybe] = self._worst[np.minimum(m_known[maybe] + m_unk[maybe], self.max_items)]
        charged = fits | maybe
        return Reservation(uu[charged], costs[charged], private=(u, item_ids, rows))

    def admitted_rows(self, res: Reservation, admitted: np.ndarray, w: WindowData | None = None
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Stage A's share: the featured items of the admitted users the release keeps (at most ``max_items``, never
        charged more than reserved), in window order, as (domain rows, each row's user as an index into the kept
        users), and the kept users (sorted ids) with their exact costs (Imola et al. (EMD) Thm 4.4 at their m_i)."""
        u, r, uu, inv = _admitted_featured_pairs(res, self.items, admitted, w)
        m = np.bincount(inv, minlength=uu.size).astype(np.int64)
        ok = m <= self.max_items  # larger multisets are left out (sizes are public: bounded model)
        exact = self._table[np.minimum(m, self.max_items)]
        found, reserved = _admitted_reserved(res, uu)
        ok &= found & (exact <= reserved).all(axis=1)  # never charge more than reserved
        if not ok.all():
            sel = ok[inv]
            u, r = u[sel], r[sel]
            exact = exact[ok]
            uu, inv = np.unique(u, return_inverse=True)
        return r, inv.reshape(-1).astype(np.int64), uu, exact

    def release(self, w: WindowData, res: Reservation, admitted: np.ndarray, rng: np.random.Generator,
                items: Names) -> QueryRelease:
        self.items.bind(items)
        r, index, uu, exact = self.admitted_rows(res, admitted, w)
        rel = self.release_rows(r, index, int(uu.size), rng)
        return QueryRelease(values=rel.values, users=uu, actual=exact, meta=rel.meta)

    def release_rows(self, r: np.ndarray, index: np.ndarray, n: int, rng: np.random.Generator) -> QueryRelease:
        """The coordinator's share: the release from the kept rows of every partition (:meth:`admitted_rows`),
        concatenated in partition order — which is the window order of the single engine, (partition, offset): the
        k-RR draws one report per row in turn and the weighted counts add in row order — with ``index`` the rows'
        users numbered 0 … n − 1 over all partitions (a user's rows are all on their partition)."""
        r = np.asarray(r, dtype=np.int64)
        index = np.asarray(index, dtype=np.int64)
        if n == 0:  # the released shape with nulls (a stable record shape)
            values = {"frequencies": dict.fromkeys(self.items.names), "clusters": dict.fromkeys(self.cluster_names),
                      "users": 0}
            return QueryRelease(values=values, meta={"users": 0})
        m = np.bincount(index, minlength=n).astype(np.int64)
        y = self.krr.randomize(rng, r)  # every item independently, α0-d_X-DP (clustered k-RR)
        weights = 1.0 / (n * m[index])  # user-weighted: each user's reports sum to 1/n
        v = np.bincount(y, weights=weights, minlength=self.krr.k)
        h_raw = apply_clustered_inverse(v, self.c, self.g, self.gamma, self.alpha0)  # unbiased for h̄
        h = project_to_simplex(h_raw)
        freqs = dict(zip(self.items.names, h.tolist()))
        by_cluster = dict(zip(self.cluster_names, h.reshape(self.c, self.g).sum(axis=1).tolist()))
        values = {"frequencies": freqs, "clusters": by_cluster, "users": n}
        return QueryRelease(values=values, meta={"users": n})

    def state(self) -> dict:
        return {}

    def load_state(self, d: dict) -> None:
        return None

    def describe(self) -> dict:
        g1, gm = self.guarantees[1], self.guarantees[self.max_items]
        return {**super().describe(), "alpha0": self.alpha0, "clusters": self.c, "cluster_size": self.g,
                "gamma": self.gamma, "max_items": self.max_items, "delta": self.delta,
                "alpha_at_1_item": g1.alpha, "alpha_at_max_items": gm.alpha, "delta_at_max_items": gm.delta,
                "bound_at_max_items": gm.bound, "model": "local"}
