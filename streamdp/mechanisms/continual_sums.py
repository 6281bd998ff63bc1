"""Running event counts and value sums per key over an unknown domain, with individual (per-user) accounting.

Papers: Rogers, Unknown-Domain Algorithms (δ-approximate zCDP, Lemma 3.1; the unknown-domain binary mechanism,
§4.3 Thm 11) for key selection over keys nobody listed; the binary tree (Dwork et al. 2010; Chan–Shi–Song 2011) or
a near-square-root factorization (Henzinger–Upadhyay–Upadhyay, SODA 2023; Fichtenberger–Henzinger–Upadhyay,
ICML 2023; in its buffered-linear-Toeplitz form, Dvijotham–McMahan–Pillutla–Steinke–Thakurta 2024) for the running
totals; individual privacy accounting with a filter (Feldman & Zrnic, "Individual privacy accounting via a Rényi
filter", NeurIPS 2021) for the charges. The derivations are in docs/query_continual_sums.md.

Per key, two running totals over the epoch's windows 1..L: the count of bounded records and (optionally) the sum of
their values, clamped to [lo, hi] and rounded to a public power-of-two grid g. Each total is released as
c(t) + rint(N(t)) (sums: g·(S(t) + rint(N_s(t))), S in grid units) where N is the factorization's noise (``TreeNoise``
or ``BltNoise``, independent for counts and sums, scale σ and σ_s/g). The data is an integer, the noise is rounded
before it meets the data, so no float computation ever sees the data (no least-significant-bit leak).

Selection (sticky). A key is published from the first window t at which its noisy count exceeds

    T_t = m + σ·√v_t·Φ⁻¹(1 − δ_key/L)                                       (``selection_threshold``)

(v_t = Var N(t)/σ², m = the most one user can add to one key's count). A key held by one user u alone has count
≤ m at every t, and its noisy count at t is (≤ m) + N(0, σ²v_t) — a Gaussian whatever the factorization — so it
crosses at some t ≤ L with probability ≤ Σ_t δ_key/L = δ_key (union bound; the exact per-window law, not Thm 11's
conservative √(levels+1)). That is the "bad event" of Lemma 3.1 for u's keys.

Charges (individual, Feldman–Zrnic filter; in zCDP). For one user u and key k, u's records move the key's strategy
vector C·x by C·Δ_{u,k} (Δ over windows), and the two Gaussian mechanisms have individual zCDP
ρ_u = Σ_k ‖CΔ^count_{u,k}‖²/(2σ²) + ‖CΔ^sum_{u,k}‖²/(2σ_s²), ‖CΔ‖² = ΔᵀGΔ, G = CᵀC, C the rows the release
reads (tree: the left children for ``plain``, every completed node for Honaker's ``optimal`` — ``tree_noise``). A record is paid for when it
is taken in: at window t, u's j new records of total value a on key k (earlier records on k: windows s, values x_s)
raise ΔᵀGΔ by exactly

    count: 2·j·Σ_s G[s, t] + j²·G[t, t]            sum: 2·a·Σ_s x_s·G[s, t] + a²·G[t, t]

(``window_charges``), which includes every node or coordinate the record will ever feed — those completed after u
is halted are paid already. Plus δ_key for each key u touches for the first time while it is unselected (a key
selected before is public and cannot be one of u's "bad" keys). A user with one record at window t pays
G[t, t]·(1/(2σ²) + x²/(2σ_s²)) + δ_key; nobody pays for anyone else's records.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from streamdp.mechanisms.blt_noise import BltNoise, fit_blt
from streamdp.mechanisms.tree_noise import TreeNoise

__all__ = ["NOISES", "Z95", "GRID_BITS", "value_grid", "selection_quantile", "selection_threshold",
           "interval_halfwidth", "window_charges", "SumsRelease", "ContinualSums"]

NOISES = ("blt", "tree")
Z95 = float(norm.isf(0.025))  # 1.959963984540054
GRID_BITS = 20  # sums are released on g = 2^(⌊log2 σ_s⌋ − GRID_BITS)


def value_grid(value_sigma: float) -> float:
    """The public grid of the sums: g = 2^(⌊log2 σ_s⌋ − GRID_BITS) (about 10⁻⁶ of the noise)."""
    return math.ldexp(1.0, math.frexp(float(value_sigma))[1] - 1 - GRID_BITS)


def selection_quantile(delta_key: float, horizon: int) -> float:
    """Φ⁻¹(1 − δ_key/L) (``norm.isf`` avoids the cancellation of 1 − p)."""
    p = float(delta_key) / int(horizon)
    if not 0.0 < p < 0.5:
        raise ValueError(f"delta_key/horizon must be in (0, 1/2), got {p!r}")
    return float(norm.isf(p))


def selection_threshold(variance_t: float, sigma: float, delta_key: float, horizon: int, m: int) -> float:
    """T_t = m + σ·√v_t·Φ⁻¹(1 − δ_key/L)."""
    return float(m) + float(sigma) * math.sqrt(float(variance_t)) * selection_quantile(delta_key, horizon)


def interval_halfwidth(sd: float) -> int:
    """r with Pr[|rint(N(0, sd²))| ≤ r] ≥ 95 %: |rint(N)| ≤ r ⟺ |N| < r + ½, so r = ⌈1.96·sd − ½⌉ (≥ 0)."""
    return max(0, int(math.ceil(Z95 * float(sd) - 0.5)))


def window_charges(pair_user: np.ndarray, pair_j: np.ndarray, prior_g: np.ndarray, g_tt: float, sigma: float,
                   pair_a: np.ndarray | None = None, prior_xg: np.ndarray | None = None,
                   value_sigma: float | None = None, first_unselected: np.ndarray | None = None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per user of one window: (users, ρ, n) with n the keys first touched while unselected (each costs δ_key).
    Pairs sorted by user; see the module docstring for the formulas. A user's ρ is floored at 0 (a negative value
    increment may lower ΔᵀGΔ; the charge never refunds)."""
    if pair_user.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0, dtype=np.int64)
    j = pair_j.astype(np.float64)
    inc = (2.0 * j * prior_g + j * j * g_tt) / (2.0 * sigma * sigma)
    if pair_a is not None:
        inc = inc + (2.0 * pair_a * prior_xg + pair_a * pair_a * g_tt) / (2.0 * value_sigma * value_sigma)
    starts = np.flatnonzero(np.concatenate(([True], pair_user[1:] != pair_user[:-1])))
    users = pair_user[starts]
    sizes = np.diff(np.append(starts, pair_user.size))
    big = sizes >= 3
    if big.any():
        # a user's terms in ascending order: the float sum of ≥ 3 terms depends on their order, and the pairs come
        # in key-id order — interned per process (partition-local in the staged split). Sorted, the sum is a
        # function of the user's own multiset of terms (bit for bit the same in every worker). Only the users with
        # ≥ 3 terms are sorted (two terms add alike in either order); their rows stay in place (sorted by user)
        rows = np.flatnonzero(np.repeat(big, sizes))
        inc = inc.copy()
        inc[rows] = inc[rows[np.lexsort((inc[rows], pair_user[rows]))]]
    rho = np.maximum(np.add.reduceat(inc, starts), 0.0)
    if first_unselected is not None:
        n_first = np.add.reduceat(first_unselected.astype(np.int64), starts)
    else:
        n_first = np.zeros(users.size, dtype=np.int64)
    return users, rho, n_first


@dataclass(frozen=True)
class SumsRelease:
    """The release of window t: selected keys (sticky, row order), their integer counts and, with values, their
    sums in grid units (value = sum·grid); the keys selected at t; the 95 % interval half-widths (count units and
    grid units); the threshold T_t."""

    t: int
    selected_ids: np.ndarray
    counts: np.ndarray
    sums: np.ndarray | None
    new_ids: np.ndarray
    count_halfwidth: int
    sum_halfwidth: int | None
    threshold: float


def make_noise(kind: str, horizon: int, scale: float, estimator: str = "plain", buffers: int = 4):
    if kind == "tree":
        return TreeNoise(horizon, scale, estimator)
    if kind == "blt":
        if estimator != "plain":
            raise ValueError("estimator applies to the tree only (the BLT's estimate is its own)")
        return BltNoise(fit_blt(horizon, buffers), scale)
    raise ValueError(f"noise must be one of {NOISES}, got {kind!r}")


class ContinualSums:
    """Per-key running counts (and sums) with thresholded sticky selection; see the module docstring.

    ``horizon`` L, ``sigma`` σ (count noise per unit of z), ``delta_key``, ``max_per_key`` m (the threshold's
    offset: the most one user adds to one key's count per epoch), ``noise`` ("blt" or "tree"), ``estimator``
    ("plain" or "optimal", tree only), ``buffers`` (BLT), ``value_sigma`` σ_s (None: counts only).
    """

    def __init__(self, horizon: int, sigma: float, delta_key: float, max_per_key: int, noise: str = "blt",
                 estimator: str = "plain", buffers: int = 4, value_sigma: float | None = None) -> None:
        self.horizon = int(horizon)
        self.sigma = float(sigma)
        self.delta_key = float(delta_key)
        self.m = int(max_per_key)
        self.noise_kind, self.estimator, self.buffers = noise, estimator, int(buffers)
        self.value_sigma = None if value_sigma is None else float(value_sigma)
        self.grid = None if value_sigma is None else value_grid(value_sigma)
        self.quantile = selection_quantile(self.delta_key, self.horizon)
        self.reset()

    def _noise(self, scale: float):
        return make_noise(self.noise_kind, self.horizon, scale, self.estimator, self.buffers)

    def reset(self) -> None:
        self.t = 0
        self._n = 0
        self._ids = np.zeros(0, dtype=np.int64)
        self._count = np.zeros(0, dtype=np.int64)
        self._sum = np.zeros(0, dtype=np.int64)
        self._selected = np.zeros(0, dtype=bool)
        self._sum_row = np.zeros(0, dtype=np.int64)  # row → row of the sum noise (−1: drawn at selection)
        self._row_of_id = np.full(0, -1, dtype=np.int64)
        self.noise_count = self._noise(self.sigma)
        self.noise_sum = None if self.value_sigma is None else self._noise(self.value_sigma / self.grid)

    # ------------------------------------------------------------------------------------------ public law
    def variance(self, t: int) -> float:
        return self.noise_count.variance(t)

    def gram_column(self, t: int) -> np.ndarray:
        return self.noise_count.gram_column(t)

    def gram_max(self) -> float:
        return self.noise_count.gram_max()

    def threshold(self, t: int) -> float:
        return float(self.m) + self.sigma * math.sqrt(self.variance(t)) * self.quantile

    def halfwidths(self, t: int) -> tuple[int, int | None]:
        v = math.sqrt(self.variance(t))
        hc = interval_halfwidth(self.sigma * v)
        hs = None if self.value_sigma is None else interval_halfwidth(self.value_sigma / self.grid * v)
        return hc, hs

    # ------------------------------------------------------------------------------------------------ rows
    def _grow(self, need: int) -> None:
        cap = self._ids.size
        if need <= cap:
            return
        new = max(need, cap + cap // 2, 1024)
        for name, fill in (("_ids", 0), ("_count", 0), ("_sum", 0), ("_selected", False), ("_sum_row", -1)):
            a = getattr(self, name)
            b = np.full(new, fill, dtype=a.dtype)
            b[: self._n] = a[: self._n]
            setattr(self, name, b)

    def rows_of(self, key_ids: np.ndarray) -> np.ndarray:
        """Rows of key ids (−1 for keys never seen this epoch)."""
        k = np.asarray(key_ids, dtype=np.int64)
        out = np.full(k.size, -1, dtype=np.int64)
        ok = (k >= 0) & (k < self._row_of_id.size)
        out[ok] = self._row_of_id[k[ok]]
        return out

    def selected_mask(self, key_ids: np.ndarray) -> np.ndarray:
        """Whether each key was selected by an earlier window of this epoch (public: it was released)."""
        rows = self.rows_of(key_ids)
        out = np.zeros(rows.size, dtype=bool)
        seen = rows >= 0
        out[seen] = self._selected[rows[seen]]
        return out

    def _rows_for(self, ids: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if ids.size == 0:
            return np.zeros(0, dtype=np.int64)
        top = int(ids.max())
        if top >= self._row_of_id.size:
            grown = np.full(max(top + 1, self._row_of_id.size + self._row_of_id.size // 2), -1, dtype=np.int64)
            grown[: self._row_of_id.size] = self._row_of_id
            self._row_of_id = grown
        rows = self._row_of_id[ids]
        unseen = rows < 0
        if unseen.any():
            new = np.unique(ids[unseen])
            lo, hi = self._n, self._n + new.size
            self._grow(hi)
            self._ids[lo:hi] = new
            self._row_of_id[new] = np.arange(lo, hi)
            self._n = hi
            self.noise_count.add_rows(new.size, rng)
            rows = self._row_of_id[ids]
        return rows

    # ------------------------------------------------------------------------------------------------ step
    def step(self, key_ids: np.ndarray, count_inc: np.ndarray, sum_inc: np.ndarray | None,
             rng: np.random.Generator) -> SumsRelease:
        """Close window t + 1 with the admitted, bounded per-key increments (distinct key ids; sums in grid units).
        Draws, in order: new keys' count-noise states, every row's count noise, the newly selected keys' sum-noise
        states, every selected key's sum noise."""
        if self.t >= self.horizon:
            raise ValueError(f"window {self.t + 1} is beyond the horizon {self.horizon}; start a new epoch")
        ids = np.asarray(key_ids, dtype=np.int64)
        rows = self._rows_for(ids, rng)
        if rows.size:
            self._count[rows] += np.asarray(count_inc, dtype=np.int64)
            if self.value_sigma is not None:
                self._sum[rows] += np.asarray(sum_inc, dtype=np.int64)
        T = self.t + 1
        n = self._n
        noise_c = self.noise_count.step(rng)
        thr = self.threshold(T)
        sel = self._selected[:n]
        est = self._count[:n] + noise_c
        newly = np.flatnonzero(~sel & (est > thr))
        sel[newly] = True
        sel_rows = np.flatnonzero(sel)
        counts = self._count[sel_rows] + np.rint(noise_c[sel_rows]).astype(np.int64)
        sums = None
        if self.noise_sum is not None:
            if newly.size:  # sum noise is drawn when first needed: never observed before, equal in law
                lo = self.noise_sum.n
                self.noise_sum.add_rows(newly.size, rng)
                self._sum_row[newly] = np.arange(lo, lo + newly.size)
            noise_s = self.noise_sum.step(rng)
            sums = self._sum[sel_rows] + np.rint(noise_s[self._sum_row[sel_rows]]).astype(np.int64)
        self.t = T
        hc, hs = self.halfwidths(T)
        return SumsRelease(t=T, selected_ids=self._ids[sel_rows], counts=counts, sums=sums,
                           new_ids=self._ids[newly], count_halfwidth=hc, sum_halfwidth=hs, threshold=thr)

    # --------------------------------------------------------------------------------------------- internal
    def noisy_counts(self) -> np.ndarray:
        """INTERNAL (tests, audits): the unrounded noisy counts of every row at t — NOT a release (publishing an
        unselected key's noisy count voids the selection's δ argument)."""
        return self._count[: self._n] + self.noise_count.current()

    def exact(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """INTERNAL (tests, benchmarks): (key ids, exact counts, exact sums in grid units) of every row."""
        n = self._n
        return self._ids[:n].copy(), self._count[:n].copy(), self._sum[:n].copy()

    @property
    def n_keys(self) -> int:
        return self._n

    def nbytes(self) -> int:
        arrays = [self._ids, self._count, self._sum, self._selected, self._sum_row, self._row_of_id]
        total = sum(a.nbytes for a in arrays)
        for p in (self.noise_count, self.noise_sum):
            if p is not None:
                st = p.state()
                total += sum(v.nbytes for v in st.values() if isinstance(v, np.ndarray))
        return int(total)

    # ------------------------------------------------------------------------------------------- snapshots
    def state(self) -> dict:
        n = self._n
        return {"t": self.t, "ids": self._ids[:n].copy(), "count": self._count[:n].copy(),
                "sum": self._sum[:n].copy(), "selected": self._selected[:n].copy(),
                "sum_row": self._sum_row[:n].copy(), "noise_count": self.noise_count.state(),
                "noise_sum": None if self.noise_sum is None else self.noise_sum.state()}

    def load_state(self, d: dict) -> None:
        ids = np.asarray(d["ids"], dtype=np.int64)
        n = ids.size
        self.reset()
        self._grow(n)
        self.t = int(d["t"])
        self._ids[:n] = ids
        self._count[:n] = d["count"]
        self._sum[:n] = d["sum"]
        self._selected[:n] = d["selected"]
        self._sum_row[:n] = d["sum_row"]
        self._n = n
        if n:
            if ids.min() < 0 or np.unique(ids).size != n:
                raise ValueError("continual sums state: invalid or repeated key ids")
            self._row_of_id = np.full(int(ids.max()) + 1, -1, dtype=np.int64)
            self._row_of_id[ids] = np.arange(n)
        nc = d["noise_count"]
        self.noise_count = (TreeNoise if nc["name"] == "tree" else BltNoise).from_state(nc)
        ns = d.get("noise_sum")
        self.noise_sum = None if ns is None else (TreeNoise if ns["name"] == "tree" else BltNoise).from_state(ns)
        if self.noise_count.n != n or self.noise_count.t != self.t:
            raise ValueError("continual sums state: the count noise does not match the keys")
