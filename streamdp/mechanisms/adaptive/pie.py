"""Private iterative elimination: PIE-NI (Liang–Yi (adaptive budgeting) Alg. 4) and PIE-k (Liang–Yi (adaptive budgeting) Alg. 5), local model, CGP.

Each user i holds x_i ∈ ℝ^d and a per-query budget r_i, split into c rounds r_{i,1..c} (Σ_j r_{i,j} ≤ r_i; even
or doubling split, Liang–Yi (adaptive budgeting) §7). In round j every still-active user releases one Gaussian-mechanism output
ṽ_i(j) = u_i + Z/√(2 r_{i,j}) (Liang–Yi (adaptive budgeting) Lemma 3.4), where u_i is either the point itself (point privatisation,
triple (M(·;f_id), g0, h0) of Liang–Yi (adaptive budgeting) Cor. 6.1) or φ(x_i) for a 1-Lipschitz φ (distance privatisation, triple
(M(·;φ), g1, h1) of Liang–Yi (adaptive budgeting) Cor. 6.2). Rounds are combined by inverse-variance weights (Liang–Yi (adaptive budgeting) Fact 6.2):
ȳ_i(j) = (1/ρ̄_{i,j}) Σ_{s≤j} r_{i,s} ṽ_i(s) ~ N(u_i, 1/(2ρ̄_{i,j}) I), ρ̄_{i,j} = Σ_{s≤j} r_{i,s}, and the
confidence radius is h̄_{i,j} = λ(d, β_0/(c·|G_{j−1}|)) / √(2ρ̄_{i,j}) (Liang–Yi (adaptive budgeting) Lemma 6.1, Alg. 4 line 8).

Privacy (Liang–Yi (adaptive budgeting) Lemma 3.3(2), Thm 4.4): a user pays only the rounds actually executed, Σ_{s ≤ j_i} r_{i,s} in CGP
(ρ per unit²), where j_i is the round in which the user was eliminated (or c). Every round's ṽ_i(j) is drawn on a
power-of-two grid with discrete Gaussian noise (:func:`gaussian_mechanism`), so the guarantee is
Σ_s ρ_{i,s}(d + a_{i,s})² with a_{i,s} = √dim·2^{⌊log2 σ_{i,s}⌋−30}, at most R·(d + A)² with
A = √(N·dim)·2⁻³⁰/√(2R) over N pieces of total cost R (micrometres for km-scale σ; stated at
:func:`gaussian_mechanism_cost`, :func:`grid_distance_bound`). The decision to run round j for user i depends only on earlier outputs
(F_{j−1}-measurable), so the service reserves the worst case r_i and settles to the executed cost (contract §3
"Reserve and settle").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from streamdp.accounting.cost import Cost
from streamdp.mechanisms.granular_gaussian import granular_gaussian_rows

__all__ = [
    "MAX_ROUNDS",
    "confidence_lambda",
    "split_rounds",
    "gaussian_mechanism",
    "gaussian_mechanism_cost",
    "grid_distance_bound",
    "pie_cost",
    "executed_rho",
    "privacy_savings",
    "Triple",
    "point_triple",
    "distance_triple",
    "PIEResult",
    "pie_ni",
    "pie_k",
]

#: The number of rounds c of one PIE run is at most this (Liang–Yi (adaptive budgeting) §7 uses c ∈ {4, 10, 64}).
MAX_ROUNDS = 64


# --------------------------------------------------------------------------------------------------- validation
def check_rho(rho, name: str = "rho") -> np.ndarray:
    """A float array whose entries are finite and > 0; ValueError naming ``name``."""
    try:
        a = np.asarray(rho, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number or an array of reals, got {rho!r}") from None
    if not np.all(np.isfinite(a)) or not np.all(a > 0):
        raise ValueError(f"{name} must be finite and > 0 for every user")
    return a


def check_probability(p, name: str) -> float:
    try:
        p = float(p)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number in (0, 1), got {p!r}") from None
    if not (0.0 < p < 1.0):
        raise ValueError(f"{name} must be in (0, 1), got {p!r}")
    return p


def check_rounds(c) -> int:
    if isinstance(c, bool) or not isinstance(c, (int, np.integer)):
        raise ValueError(f"c (number of rounds) must be an integer, got {c!r}")
    c = int(c)
    if not (1 <= c <= MAX_ROUNDS):
        raise ValueError(f"c (number of rounds) must be in [1, {MAX_ROUNDS}], got {c}")
    return c


def check_points(x, name: str = "x", d: int | None = None) -> np.ndarray:
    try:
        a = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an array of coordinates") from None
    if a.ndim != 2:
        raise ValueError(f"{name} must have shape (n, d), got {a.shape}")
    if d is not None and a.shape[1] != d:
        raise ValueError(f"{name} must have shape (n, {d}), got {a.shape}")
    if a.shape[1] < 1:
        raise ValueError(f"{name} must have at least one coordinate")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite")
    return a


def per_user_rho(rho, n: int) -> np.ndarray:
    """ρ_i for each of ``n`` users: a scalar broadcast, or an array of shape (n,) (a copy); checked by
    :func:`check_rho`."""
    r = check_rho(rho, "rho")
    if r.ndim == 0:
        return np.full(n, float(r))
    if r.shape != (n,):
        raise ValueError(f"rho must be a scalar or have shape ({n},), got {r.shape}")
    return r.copy()


def check_query_point(p, d: int) -> np.ndarray:
    """The query point p ∈ ℝ^d (finite)."""
    pt = np.asarray(p, dtype=np.float64).reshape(-1)
    if pt.shape != (d,) or not np.all(np.isfinite(pt)):
        raise ValueError(f"p must be a finite point of dimension {d}")
    return pt


def check_privatization(p: str) -> str:
    """PM0/BM0 privatise the point x_i, PM1/BM1 the distance len_p(x_i) (Liang–Yi (adaptive budgeting) §6)."""
    if p not in ("point", "distance"):
        raise ValueError(f"privatization must be 'point' or 'distance', got {p!r}")
    return p


def distance_to(pt: np.ndarray):
    """len_p: u ↦ ‖u − p‖₂ row-wise (1-Lipschitz, Liang–Yi (adaptive budgeting) §6)."""
    def len_p(u: np.ndarray) -> np.ndarray:
        diff = u - pt
        return np.sqrt(np.einsum("ij,ij->i", diff, diff))

    return len_p


# ----------------------------------------------------------------------------------------- confidence radius
def confidence_lambda(d: int, beta):
    """λ(d, β) of Liang–Yi (adaptive budgeting) Lemma 6.1: with probability ≥ 1 − β a standard Gaussian Z ∈ ℝ^d has ‖Z‖ ≤ λ(d, β).

    λ(1, β) = √(2 log(2/β));  λ(2, β) = √(2 log(1/β));  λ(d > 2, β) = √(d + 2√(d log(1/β)) + 2 log(1/β))
    (Laurent–Massart). ``beta`` may be an array.
    """
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 1:
        raise ValueError(f"d must be a positive integer, got {d!r}")
    b = np.asarray(beta, dtype=np.float64)
    if not np.all((b > 0) & (b < 1)):
        raise ValueError("beta must be in (0, 1)")
    log_inv = -np.log(b)
    if d == 1:
        lam = np.sqrt(2.0 * (math.log(2.0) + log_inv))
    elif d == 2:
        lam = np.sqrt(2.0 * log_inv)
    else:
        lam = np.sqrt(d + 2.0 * np.sqrt(d * log_inv) + 2.0 * log_inv)
    return float(lam) if lam.ndim == 0 else lam


# --------------------------------------------------------------------------------------------- round splits
def split_rounds(r, c: int, scheme: str = "even") -> np.ndarray:
    """Split each user's query budget r_i into c round budgets r_{i,1..c} (Liang–Yi (adaptive budgeting) §7).

    ``even``: r_{i,j} = r_i/c ("c4", "c64");  ``doubling``: r_{i,j} = 2^{j−1}/(2^c − 1)·r_i ("log-c10").
    The returned (n, c) array has every entry > 0 and a floating-point running sum that never exceeds r_i
    (the last entry is nudged down by a few ulps if rounding made Σ_j r_{i,j} > r_i), so a user who runs every
    round is charged at most the reserved r_i.
    """
    c = check_rounds(c)
    r = check_rho(np.atleast_1d(r), "r")
    if r.ndim != 1:
        raise ValueError(f"r must be a 1-d array of per-user budgets, got shape {r.shape}")
    if scheme == "even":
        w = np.full(c, 1.0 / c)
    elif scheme == "doubling":
        w = np.exp2(np.arange(c, dtype=np.float64)) / (2.0**c - 1.0)
    else:
        raise ValueError(f"scheme must be 'even' or 'doubling', got {scheme!r}")
    out = r[:, None] * w[None, :]
    for _ in range(64):
        total = np.cumsum(out, axis=1)[:, -1]
        bad = total > r
        if not bad.any():
            break
        out[bad, -1] -= (total[bad] - r[bad]) + np.spacing(r[bad])
    else:  # pragma: no cover - cannot happen for c ≤ 64
        raise RuntimeError("could not split the round budgets below r")
    if not np.all(out > 0):
        raise ValueError("r is too small to split into c positive round budgets")
    return out


# ---------------------------------------------------------------------------------------- Gaussian mechanism
def gaussian_mechanism(rng: np.random.Generator, values, rho) -> np.ndarray:
    """M(u, ρ; φ) = φ(u) + Z/√(2ρ) (Liang–Yi (adaptive budgeting) Lemma 3.4), applied row-wise, drawn on a power-of-two grid per row.

    ``values`` holds φ(u_i) (shape (n,) or (n, m)); ``rho`` is a scalar or one ρ_i per row. Row i is released as
    g_i·(rint(v_i/g_i) + Z_i), Z_i ~ N_Z(0, (σ_i/g_i)²) independently per coordinate, σ_i = 1/√(2ρ_i),
    g_i = granularity(σ_i) = 2^{⌊log2 σ_i⌋ − 30}: :func:`streamdp.mechanisms.granular_gaussian.granular_gaussian_rows`,
    one vectorised draw (:func:`streamdp.noise.samplers.discrete_gaussian_array`). Every output of row i is an
    integer multiple of g_i, a function of the exact integers rint(v_i/g_i) + Z_i: no floating-point leak
    (Mironov 2012), unlike φ(u) + float Gaussian. The noise is g_i·Z_i plus a rounding of at most g_i/2 ≤ 2⁻³¹σ_i
    per coordinate; Var g_i·Z_i < σ_i² and is σ_i² to ~10⁻⁹ (s = σ_i/g_i ≥ 2³⁰). Cost and guarantee:
    :func:`gaussian_mechanism_cost`.
    """
    v = np.asarray(values, dtype=np.float64)
    rho = check_rho(rho)
    if v.size == 0:
        return v.copy()
    if v.ndim not in (1, 2):
        raise ValueError(f"values must have shape (n,) or (n, m), got {v.shape}")
    if rho.ndim == 0:
        rho = np.full(v.shape[0], float(rho))
    elif rho.shape != (v.shape[0],):
        raise ValueError(f"rho must be a scalar or have shape ({v.shape[0]},), got {rho.shape}")
    with np.errstate(over="ignore", divide="ignore"):
        sigma = 1.0 / np.sqrt(2.0 * rho)
    return granular_gaussian_rows(rng, v, sigma)


def gaussian_mechanism_cost(rho: float) -> Cost:
    """M(·, ρ; φ) for a 1-Lipschitz φ (in the configured distance) is ρ-CGP (Liang–Yi (adaptive budgeting) Lemma 3.4.2; Liang–Yi (CGP) Lemma 3.4) as a
    real-number mechanism; the cost charged is ``Cost.cgp(ρ)``.

    **Guarantee of the granular release** (:func:`gaussian_mechanism` draws on the grid g = granularity(σ),
    σ = 1/√(2ρ)). With m the number of coordinates of φ(u) (m = d for point privatisation, 1 for a distance)
    and a = √m·g ≤ √m·2⁻³⁰·σ, the release is ρ-CGP **with respect to d + a** for a 1-Lipschitz φ: for every
    α > 1 and u ≠ u′, D_α(M(u) ‖ M(u′)) ≤ α·ρ·(d(u, u′) + a)², and 0 for u = u′. This is the guarantee of
    :mod:`streamdp.mechanisms.granular_gaussian` (proof there: rounding, discrete Gaussian on an integer shift,
    post-processing) with K = 1; it is not repeated here. The additive a cannot be absorbed into ρ (two values on
    either side of a rounding boundary, d → 0, lose α·ρ·a²), so it is part of the guarantee, in the configured
    distance unit. A φ computed in float64 (len_p, Proj_Γ) is 1-Lipschitz up to its own rounding error η, which
    adds 2η to a (granular_gaussian, "Float gaps").

    Composition (PIE; Liang & Yi, Adaptive Privacy Budgeting, Lemma 3.3 inside the filter, Thm 4.4): user i's
    pieces j — every executed round of every query of the sequence — at ρ_j with distances a_j = √m·granularity(1/√(2ρ_j)) ≤ √m·2⁻³⁰/√(2ρ_j) give

        D_α ≤ α·Σ_j ρ_j·(d + a_j)²  ≤  α·R·(d + √(N·m)·2⁻³⁰/√(2R))²,   R = Σ_j ρ_j, N = the number of pieces,

    because Σ_j ρ_j a_j ≤ √m·2⁻³⁰·Σ_j √(ρ_j/2) ≤ √m·2⁻³⁰·√(N·R/2) (Cauchy–Schwarz) and Σ_j ρ_j a_j² ≤ N·m·2⁻⁶¹,
    which are the cross and square terms of R·(d + A)² with A = √(N·m)·2⁻³⁰/√(2R). The right side increases with R,
    so the filter's R ≤ B gives B-CGP for the whole sequence with respect to d + A_B, A_B =
    :func:`grid_distance_bound` (B, N, m) — on every path (the ρ_j may be chosen adaptively) and for every split:
    A grows with √N, whatever the smallest round. (The earlier statement (Σ ρ_j)(d + max_j a_j)² put the largest
    a — that of the smallest round, ρ_j = B/(L(2^c − 1)) under ``doubling`` — on every piece: vacuous for many
    rounds, A = 64 km at c = 64; review of 2026-12-06.)
        """
    return Cost.cgp(float(rho))


def grid_distance_bound(total_rho: float, pieces: int, coords: int = 1) -> float:
    """A = √(N·m)·2⁻³⁰/√(2R): the distance the power-of-two grids of N Gaussian pieces (m coordinates each) of total
    cost R add to d in the guarantee Σ_j ρ_j(d + a_j)² ≤ R·(d + A)² (:func:`gaussian_mechanism_cost`), in the unit
    of the costs (ρ per unit²)."""
    r = float(total_rho)
    if not (math.isfinite(r) and r > 0):
        raise ValueError(f"total_rho must be finite and > 0, got {total_rho!r}")
    if isinstance(pieces, bool) or int(pieces) != pieces or pieces < 1:
        raise ValueError(f"pieces must be an integer ≥ 1, got {pieces!r}")
    if isinstance(coords, bool) or int(coords) != coords or coords < 1:
        raise ValueError(f"coords must be an integer ≥ 1, got {coords!r}")
    return math.sqrt(int(pieces) * int(coords)) * 2.0**-30 / math.sqrt(2.0 * r)


def pie_cost(executed: float) -> Cost:
    """Cost of one user's PIE run: the sum of the executed rounds' r_{i,s}, in CGP.

    Adaptive composition of the executed Gaussian rounds (Liang–Yi (adaptive budgeting) Lemma 3.3(2)) inside the privacy filter, where
    each round's cost is fixed before its noise is drawn (Liang–Yi (adaptive budgeting) Thm 4.4); rounds not run cost nothing (Liang–Yi (adaptive budgeting) Alg. 1,
    R = 0). The reservation is the same function of the full r_i = Σ_j r_{i,j}.
    """
    return Cost.cgp(float(executed))


def executed_rho(round_rho: np.ndarray, rounds_run: np.ndarray) -> np.ndarray:
    """Σ_{s ≤ rounds_run_i} r_{i,s} per user (0 for users that ran no round)."""
    cum = np.cumsum(round_rho, axis=1)
    out = np.zeros(round_rho.shape[0])
    ran = rounds_run > 0
    out[ran] = cum[ran, rounds_run[ran] - 1]
    return out


def privacy_savings(allocated, executed) -> float:
    """PrivSav = (1/n) Σ_i remaining_i / ρ_i with remaining_i = ρ_i − executed_i (Liang–Yi (adaptive budgeting) §7.1); 0 for n = 0."""
    allocated = np.asarray(allocated, dtype=np.float64)
    executed = np.asarray(executed, dtype=np.float64)
    if allocated.size == 0:
        return 0.0
    return float(np.mean((allocated - executed) / allocated))


# ------------------------------------------------------------------------------------------------ triples
@dataclass(frozen=True)
class Triple:
    """A valid triple (M, g, h) for a 1-Lipschitz φ (Liang–Yi (adaptive budgeting) Def. 5).

    ``values`` (n, dim) is what M privatises: the points x_i (point privatisation, dim = d) or φ(x_i)
    (distance privatisation, dim = 1). ``phi`` is φ for the point triple (g0 = φ(x̄)); None for the distance
    triple (g1 = ȳ). h = λ(dim, β)/√(2ρ̄).
    """

    kind: str
    values: np.ndarray
    phi: Callable[[np.ndarray], np.ndarray] | None = None

    @property
    def n(self) -> int:
        return self.values.shape[0]

    @property
    def dim(self) -> int:
        return self.values.shape[1]

    def estimate(self, means: np.ndarray) -> np.ndarray:
        """g: φ̄ from the inverse-variance mean of the rounds (Liang–Yi (adaptive budgeting) Cor. 6.1 / 6.2)."""
        if self.phi is None:
            return means[:, 0]
        out = np.asarray(self.phi(means), dtype=np.float64)
        if out.shape != (means.shape[0],):
            raise ValueError(f"phi must map an (m, d) array to an (m,) array, got shape {out.shape}")
        return out


def point_triple(points, phi: Callable[[np.ndarray], np.ndarray]) -> Triple:
    """(M(·,·; f_id), g0, h0) of Liang–Yi (adaptive budgeting) Cor. 6.1: privatise the point, estimate φ(x̄), radius λ(d, β)/√(2ρ̄)."""
    x = check_points(points, "points")
    if not callable(phi):
        raise ValueError("phi must be callable")
    return Triple("point", x, phi)


def distance_triple(phi_values) -> Triple:
    """(M(·,·; φ), g1, h1) of Liang–Yi (adaptive budgeting) Cor. 6.2: privatise φ(x), estimate ȳ, radius λ(1, β)/√(2ρ̄)."""
    v = np.asarray(phi_values, dtype=np.float64)
    if v.ndim != 1:
        raise ValueError(f"phi_values must be a 1-d array, got shape {v.shape}")
    if not np.all(np.isfinite(v)):
        raise ValueError("phi_values must be finite")
    return Triple("distance", v[:, None].copy())


# ----------------------------------------------------------------------------------------------- results
@dataclass
class PIEResult:
    """Outcome of one PIE-NI / PIE-k run over n users.

    * ``s0``, ``s1`` (PIE-NI only; all False for PIE-k): users confidently above ν_high / below ν_low;
    * ``survivors``: G_ĵ, users still active at the end;
    * ``rounds_run[i]``: rounds user i executed (1..c); ``executed_rho[i]`` = Σ_{s ≤ rounds_run[i]} r_{i,s},
      the cost to settle (:func:`pie_cost`); ``allocated_rho[i]`` = Σ_j r_{i,j} ≤ r_i, the reservation;
    * ``mean[i]`` (n, dim): inverse-variance mean of user i's executed rounds (x̄_i or ȳ_i, Liang–Yi (adaptive budgeting) Fact 6.2);
    * ``estimate[i]``: φ̄_i from the last executed round;
    * ``rounds``: ĵ, the number of rounds the loop ran; ``c``: rounds configured;
    * ``round_values`` (n, c, dim), NaN where not executed — only when ``keep_rounds=True``.
    """

    s0: np.ndarray
    s1: np.ndarray
    survivors: np.ndarray
    rounds_run: np.ndarray
    executed_rho: np.ndarray
    allocated_rho: np.ndarray
    mean: np.ndarray
    estimate: np.ndarray
    rounds: int
    c: int
    round_values: np.ndarray | None = None

    @property
    def n_eliminated(self) -> int:
        """|S0| + |S1| (PIE-NI) or n − |G_ĵ| (PIE-k)."""
        return int(self.survivors.size - np.count_nonzero(self.survivors))

    @property
    def n_eliminated_early(self) -> int:
        """Users eliminated before round c (S0 / S1 of PIE-NI; outside the k-th interval for PIE-k): not in G_ĵ
        and ran fewer than c rounds. (It used to count every user who ran fewer than c rounds, which for PIE-k
        includes the selected users once |G_j| ≤ k stops the loop: :attr:`n_stopped_early`.)"""
        return int(np.count_nonzero((self.rounds_run < self.c) & ~self.survivors))

    @property
    def n_stopped_early(self) -> int:
        """Users who ran fewer than c rounds (and so saved budget): the eliminated ones and, for PIE-k, the
        survivors when |G_j| ≤ k ended the loop early."""
        return int(np.count_nonzero(self.rounds_run < self.c))

    @property
    def privacy_savings(self) -> float:
        return privacy_savings(self.allocated_rho, self.executed_rho)


class _Rounds:
    """Shared state of one PIE run: running Σ r_s v_s, ρ̄ and the per-user round counter."""

    def __init__(self, triple: Triple, round_rho, beta0, keep_rounds: bool) -> None:
        if not isinstance(triple, Triple):
            raise ValueError("triple must be built with point_triple() or distance_triple()")
        rr = check_rho(round_rho, "round_rho")
        if rr.ndim != 2 or rr.shape[0] != triple.n:
            raise ValueError(f"round_rho must have shape (n={triple.n}, c), got {rr.shape}")
        self.c = check_rounds(rr.shape[1])
        self.beta0 = check_probability(beta0, "beta0")
        self.triple = triple
        self.round_rho = rr
        n, dim = triple.n, triple.dim
        self.weighted = np.zeros((n, dim))
        self.rho_bar = np.zeros(n)
        self.rounds_run = np.zeros(n, dtype=np.int64)
        self.estimate = np.full(n, np.nan)
        self.round_values = np.full((n, self.c, dim), np.nan) if keep_rounds else None

    def run_round(self, rng: np.random.Generator, j: int, active: np.ndarray):
        """Round j (0-based) for the users ``active`` (indices): returns (φ̄, h̄) for them."""
        r = self.round_rho[active, j]
        # Gaussian mechanism, Liang–Yi (adaptive budgeting) Lemma 3.4: ṽ = u + Z/√(2 r_{i,j}), drawn on each user's grid (granular, see
        # gaussian_mechanism_cost for the guarantee); this round costs r_{i,j} (CGP).
        v = gaussian_mechanism(rng, self.triple.values[active], r)
        if self.round_values is not None:
            self.round_values[active, j] = v
        self.weighted[active] += r[:, None] * v
        self.rho_bar[active] += r
        self.rounds_run[active] = j + 1
        rho_bar = self.rho_bar[active]
        means = self.weighted[active] / rho_bar[:, None]  # Liang–Yi (adaptive budgeting) Fact 6.2
        est = self.triple.estimate(means)
        self.estimate[active] = est
        # Liang–Yi (adaptive budgeting) Alg. 4/5 line 8/7: h(r_{i,[j]}, β0/(c|G_{j−1}|)) = λ(dim, ·)/√(2ρ̄_{i,j})
        lam = confidence_lambda(self.triple.dim, self.beta0 / (self.c * active.size))
        return est, lam / np.sqrt(2.0 * rho_bar)

    def result(self, s0, s1, survivors, rounds: int) -> PIEResult:
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = self.weighted / self.rho_bar[:, None]
        mean[self.rounds_run == 0] = np.nan
        return PIEResult(
            s0=s0,
            s1=s1,
            survivors=survivors,
            rounds_run=self.rounds_run,
            executed_rho=executed_rho(self.round_rho, self.rounds_run),
            allocated_rho=np.cumsum(self.round_rho, axis=1)[:, -1] if self.triple.n else np.zeros(0),
            mean=mean,
            estimate=self.estimate,
            rounds=rounds,
            c=self.c,
            round_values=self.round_values,
        )


# ------------------------------------------------------------------------------------------------- PIE-NI
def pie_ni(
    rng: np.random.Generator,
    triple: Triple,
    round_rho,
    *,
    beta0: float,
    nu_low: float,
    nu_high: float,
    keep_rounds: bool = False,
) -> PIEResult:
    """PIE-NI, Liang–Yi (adaptive budgeting) Alg. 4 (G_0 = all n users of ``triple``).

    Round j, for every i ∈ G_{j−1}: release ṽ_i(j), update φ̄_i(j) and h̄_{i,j}; i → S1 if
    φ̄_i(j) < ν_low − h̄_{i,j}, else i → S0 if φ̄_i(j) > ν_high + h̄_{i,j}, else i stays in G_j. Stops after c
    rounds or when G_j = ∅. With probability ≥ 1 − β0, φ(x_i) < ν_low for all i ∈ S1 and φ(x_i) > ν_high for all
    i ∈ S0 (Liang–Yi (adaptive budgeting) Lemma 5.2). Costs: :func:`pie_cost` of ``executed_rho``.
    """
    nu_low = float(nu_low)
    nu_high = float(nu_high)
    if math.isnan(nu_low) or math.isnan(nu_high) or nu_low > nu_high:
        raise ValueError(f"need nu_low ≤ nu_high, got nu_low={nu_low}, nu_high={nu_high}")
    st = _Rounds(triple, round_rho, beta0, keep_rounds)
    n = triple.n
    s0 = np.zeros(n, dtype=bool)
    s1 = np.zeros(n, dtype=bool)
    active = np.arange(n)
    rounds = 0
    for j in range(st.c):
        if active.size == 0:
            break
        est, h = st.run_round(rng, j, active)
        rounds = j + 1
        to_s1 = est < nu_low - h
        to_s0 = ~to_s1 & (est > nu_high + h)
        s1[active[to_s1]] = True
        s0[active[to_s0]] = True
        active = active[~(to_s1 | to_s0)]
    survivors = np.zeros(n, dtype=bool)
    survivors[active] = True
    return st.result(s0, s1, survivors, rounds)


# -------------------------------------------------------------------------------------------------- PIE-k
def pie_k(
    rng: np.random.Generator,
    triple: Triple,
    round_rho,
    *,
    k: int,
    beta0: float,
    keep_rounds: bool = False,
) -> PIEResult:
    """PIE-k, Liang–Yi (adaptive budgeting) Alg. 5 (G_0 = all n users of ``triple``): keep the users whose φ may be among the k smallest.

    While j ≤ c and |G_{j−1}| > k: every i ∈ G_{j−1} releases a round; t_1..t_k are the k smallest right end
    points φ̄_i + h̄_i; G_j = {t_1..t_k} ∪ {i : I_i(j) ∩ I_{t_k}(j) ≠ ∅}. With probability ≥ 1 − β0 the true k
    smallest are in every G_j (Liang–Yi (adaptive budgeting) Lemma 5.3). Costs: :func:`pie_cost` of ``executed_rho``.
    """
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    k = int(k)
    st = _Rounds(triple, round_rho, beta0, keep_rounds)
    n = triple.n
    active = np.arange(n)
    rounds = 0
    for j in range(st.c):
        if active.size <= k:
            break
        est, h = st.run_round(rng, j, active)
        rounds = j + 1
        right = est + h
        top = np.argpartition(right, k - 1)[:k]  # t_1..t_k: the k smallest right end points (line 8)
        tk = top[np.argmax(right[top])]  # t_k: the k-th smallest right end point (line 9)
        lo_k, hi_k = est[tk] - h[tk], right[tk]
        keep = (est - h <= hi_k) & (right >= lo_k)  # I_i(j) ∩ I_{t_k}(j) ≠ ∅ (line 13)
        keep[top] = True
        active = active[keep]
    survivors = np.zeros(n, dtype=bool)
    survivors[active] = True
    none = np.zeros(n, dtype=bool)
    return st.result(none, none.copy(), survivors, rounds)
