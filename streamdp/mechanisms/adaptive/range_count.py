"""Private range counting via iterative elimination (Liang–Yi (adaptive budgeting) §6.2, Alg. 6; App. A, App. B), local model, CGP.

Count the users whose location x_i ∈ ℝ² lies in a rectangle Γ. φ = Proj_Γ, the signed distance to ∂Γ
(negative inside, Liang–Yi (adaptive budgeting) eq. (11)), is 1-Lipschitz (Liang–Yi (adaptive budgeting) Lemma 6.3), so PIE-NI (Alg. 4) with ν_low = ν_high = 0
puts users confidently inside Γ into S1 and users confidently outside into S0; they stop paying. Survivors
G_c are counted by post-processing their c-round means:

* PM0 (point privatisation): |S1| + #{i ∈ G_c : Proj_Γ(x̄_i) < 0};
* PM1 (distance privatisation): |S1| + #{i ∈ G_c : ȳ_i < η_i}, η_i the App. B shift (η_i = 0 without shift).

Baselines BM0 / BM1 spend each user's whole ρ_i in one Gaussian release. β is split β0 = β/4 for the
elimination and β1 = 3β/4 for the final count (Liang–Yi (adaptive budgeting) Remark 6); β1 enters only the accuracy statement.

Costs (CGP, ρ per distance unit²): a baseline user pays ρ_i (:func:`range_count_baseline_cost`); a PIE user pays
the rounds executed (:func:`range_count_pie_cost`, ≤ the reservation r_i).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from streamdp.accounting.cost import Cost
from streamdp.mechanisms.adaptive.pie import (
    check_points,
    check_privatization,
    per_user_rho,
    check_probability,
    check_rho,
    distance_triple,
    gaussian_mechanism,
    pie_cost,
    pie_ni,
    point_triple,
    privacy_savings,
    split_rounds,
)

__all__ = [
    "Rectangle",
    "shift_coefficient",
    "eta_threshold",
    "RangeCountResult",
    "range_count_pie",
    "range_count_baseline",
    "range_count_pie_cost",
    "range_count_baseline_cost",
    "true_range_count",
    "count_error",
]

#: Liang–Yi (adaptive budgeting) Remark 6: β0 = 0.25β for the elimination, β1 = 0.75β for the final count.
BETA0_FRACTION = 0.25


# ------------------------------------------------------------------------------------------------ rectangle
@dataclass(frozen=True)
class Rectangle:
    """A (possibly rotated) rectangle Γ ⊂ ℝ²: centre (cx, cy), side ``length`` along the direction ``angle``
    (radians from the x axis) and side ``width`` perpendicular to it. Γ is closed."""

    cx: float
    cy: float
    length: float
    width: float
    angle: float = 0.0

    def __post_init__(self) -> None:
        for name in ("cx", "cy", "angle"):
            if not math.isfinite(float(getattr(self, name))):
                raise ValueError(f"{name} must be finite")
        for name in ("length", "width"):
            v = float(getattr(self, name))
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be finite and > 0, got {v!r}")

    @classmethod
    def axis_aligned(cls, xmin: float, ymin: float, xmax: float, ymax: float) -> "Rectangle":
        if not (xmax > xmin):
            raise ValueError(f"need xmin < xmax, got {xmin}, {xmax}")
        if not (ymax > ymin):
            raise ValueError(f"need ymin < ymax, got {ymin}, {ymax}")
        return cls((xmin + xmax) / 2, (ymin + ymax) / 2, xmax - xmin, ymax - ymin)

    @classmethod
    def square(cls, center, side: float) -> "Rectangle":
        return cls(float(center[0]), float(center[1]), side, side)

    @classmethod
    def from_vertices(cls, u, v, w, z, *, rtol: float = 1e-9) -> "Rectangle":
        """Liang–Yi (adaptive budgeting) App. A naming: vertices u, v, w, z with uv̄ ∥ wz̄ and uw̄ ∥ vz̄ (so u, v, z, w go round Γ)."""
        u, v, w, z = (np.asarray(p, dtype=np.float64).reshape(2) for p in (u, v, w, z))
        e1, e2 = v - u, w - u
        l1, l2 = float(np.hypot(*e1)), float(np.hypot(*e2))
        if not (l1 > 0 and l2 > 0):
            raise ValueError("vertices must span a rectangle of positive area")
        scale = max(l1, l2)
        if np.hypot(*((z - w) - e1)) > rtol * scale or abs(float(e1 @ e2)) > rtol * l1 * l2:
            raise ValueError("vertices u, v, w, z do not form a rectangle (need uv ∥ wz, uw ∥ vz, uv ⊥ uw)")
        c = (u + v + w + z) / 4.0
        return cls(float(c[0]), float(c[1]), l1, l2, math.atan2(e1[1], e1[0]))

    def _excess(self, points) -> tuple[np.ndarray, np.ndarray]:
        p = check_points(points, "points", d=2)
        ca, sa = math.cos(self.angle), math.sin(self.angle)
        dx = p[:, 0] - self.cx
        dy = p[:, 1] - self.cy
        s = dx * ca + dy * sa  # coordinate along the 'length' side
        t = -dx * sa + dy * ca  # coordinate along the 'width' side
        return np.abs(s) - self.length / 2.0, np.abs(t) - self.width / 2.0

    def proj(self, points) -> np.ndarray:
        """Proj_Γ (Liang–Yi (adaptive budgeting) eq. (11)): distance to ∂Γ, negated inside Γ; 1-Lipschitz (Liang–Yi (adaptive budgeting) Lemma 6.3).

        Equal to Liang–Yi (adaptive budgeting) App. A's min over the four edges of the distance to the clipped projection; computed in
        the rectangle's own frame: outside ‖(max(e_s, 0), max(e_t, 0))‖, inside max(e_s, e_t) ≤ 0, where
        e_s = |s| − length/2 and e_t = |t| − width/2.
        """
        es, et = self._excess(points)
        inside = (es <= 0) & (et <= 0)
        return np.where(inside, np.maximum(es, et), np.hypot(np.maximum(es, 0.0), np.maximum(et, 0.0)))

    def contains(self, points) -> np.ndarray:
        """𝟙_Γ(x) for the closed rectangle."""
        es, et = self._excess(points)
        return (es <= 0) & (et <= 0)


def true_range_count(x, rect: Rectangle) -> int:
    """f(x_1..x_n; Γ) = Σ_i 𝟙_Γ(x_i) (Liang–Yi (adaptive budgeting) §6.2)."""
    return int(np.count_nonzero(rect.contains(x)))


def count_error(estimate: float, truth: float) -> float:
    """CountErr = |C̃ − C| / C (Liang–Yi (adaptive budgeting) §7.1); requires C > 0."""
    if truth <= 0:
        raise ValueError("truth must be > 0 for a relative count error")
    return abs(float(estimate) - float(truth)) / float(truth)


# ------------------------------------------------------------------------------------------- App. B shift
def shift_coefficient(gamma, length: float, width: float):
    """a(γ) of Liang–Yi (adaptive budgeting) App. B for a rectangle with sides l = ``length``, w = ``width``.

    Chosen so that the shifted bands outside and inside ∂Γ have equal areas:
    l, w > 2γ:  a = (4γ(l+w) − 4γ√((l+w)² − 16γ²)) / (16γ²);
    otherwise:  a = (8γ² + 2γ(l+w) − 2γ√((l+w)² + 4lw)) / (8γ²).   a ∈ [0, 1].
    """
    g = check_rho(gamma, "gamma")
    l = float(check_rho(length, "length"))
    w = float(check_rho(width, "width"))
    s = l + w
    big = (l > 2.0 * g) & (w > 2.0 * g)
    with np.errstate(invalid="ignore"):
        a_big = (4.0 * g * s - 4.0 * g * np.sqrt(np.maximum(s * s - 16.0 * g * g, 0.0))) / (16.0 * g * g)
    a_small = (8.0 * g * g + 2.0 * g * s - 2.0 * g * math.sqrt(s * s + 4.0 * l * w)) / (8.0 * g * g)
    a = np.clip(np.where(big, a_big, a_small), 0.0, 1.0)
    return float(a) if a.ndim == 0 else a


def eta_threshold(rho, length: float, width: float):
    """η_i = η(γ_i) = −a(γ_i)·γ_i with γ_i = 1/√(2ρ_i), the noise scale of the released distance (Liang–Yi (adaptive budgeting) App. B)."""
    gamma = 1.0 / np.sqrt(2.0 * check_rho(rho))
    return -shift_coefficient(gamma, length, width) * gamma


# -------------------------------------------------------------------------------------------------- results
@dataclass
class RangeCountResult:
    """A private range count. ``executed_rho[i]`` is user i's cost to settle (CGP), ``allocated_rho[i]`` the
    reservation; ``n_eliminated_early`` users stopped before the last round; ``s1_count`` = |S1| and
    ``survivors`` = |G_c| (PIE only; 0 for baselines)."""

    estimate: int
    method: str
    executed_rho: np.ndarray
    allocated_rho: np.ndarray
    n_eliminated_early: int = 0
    s1_count: int = 0
    survivors: int = 0
    rounds: int = 1

    @property
    def privacy_savings(self) -> float:
        """PrivSav = (1/n) Σ_i remaining_i/ρ_i (Liang–Yi (adaptive budgeting) §7.1)."""
        return privacy_savings(self.allocated_rho, self.executed_rho)


def range_count_baseline_cost(rho_i: float) -> Cost:
    """BM0/BM1: one Gaussian release M(x_i, ρ_i; f_id or Proj_Γ) is ρ_i-CGP (Liang–Yi (adaptive budgeting) Lemma 3.4, Lemma 6.3)."""
    return Cost.cgp(float(rho_i))


def range_count_pie_cost(executed_rho_i: float) -> Cost:
    """PM0/PM1: the executed PIE-NI rounds, Σ_{s ≤ j_i} r_{i,s}, in CGP (Liang–Yi (adaptive budgeting) Alg. 4, Thm 4.4)."""
    return pie_cost(executed_rho_i)


# --------------------------------------------------------------------------------------------------- BM0/BM1
def range_count_baseline(
    rng: np.random.Generator,
    x,
    rect: Rectangle,
    rho,
    *,
    privatization: str = "distance",
    shift: bool = True,
) -> RangeCountResult:
    """BM0 (point): Σ 𝟙{Proj_Γ(x̃_i) < 0}, x̃_i = x_i + Z/√(2ρ_i), Z ~ N(0, I_2);
    BM1 (distance): Σ 𝟙{ỹ_i < η_i}, ỹ_i = Proj_Γ(x_i) + Z/√(2ρ_i) (Liang–Yi (adaptive budgeting) §6.2.1). Each user pays ρ_i."""
    x = check_points(x, "x", d=2)
    privatization = check_privatization(privatization)
    r = per_user_rho(rho, x.shape[0])
    if privatization == "point":
        noisy = gaussian_mechanism(rng, x, r)  # ρ_i-CGP, Liang–Yi (adaptive budgeting) Lemma 3.4
        est = int(np.count_nonzero(rect.proj(noisy) < 0)) if x.shape[0] else 0
        method = "BM0"
    else:
        noisy = gaussian_mechanism(rng, rect.proj(x), r)  # ρ_i-CGP, Proj_Γ is 1-Lipschitz (Lemma 6.3)
        eta = eta_threshold(r, rect.length, rect.width) if (shift and r.size) else np.zeros_like(r)
        est = int(np.count_nonzero(noisy < eta))
        method = "BM1"
    return RangeCountResult(est, method, executed_rho=r.copy(), allocated_rho=r)


# --------------------------------------------------------------------------------------------------- PM0/PM1
def range_count_pie(
    rng: np.random.Generator,
    x,
    rect: Rectangle,
    rho,
    *,
    privatization: str = "distance",
    c: int = 4,
    split: str = "even",
    beta: float = 0.1,
    shift: bool = True,
) -> RangeCountResult:
    """Liang–Yi (adaptive budgeting) Alg. 6: PIE-NI(Proj_Γ, ν_low = ν_high = 0, β0 = β/4) then |S1| if G_ĵ = ∅, else PM0 / PM1.

    ``rho`` is r_i (scalar or per user), split into c rounds by ``split`` ('even' | 'doubling').
    """
    x = check_points(x, "x", d=2)
    privatization = check_privatization(privatization)
    beta = check_probability(beta, "beta")
    n = x.shape[0]
    r = per_user_rho(rho, n)
    round_rho = split_rounds(r, c, split) if n else np.zeros((0, c))
    if privatization == "point":
        triple = point_triple(x, rect.proj)
    else:
        triple = distance_triple(rect.proj(x))
    res = pie_ni(rng, triple, round_rho, beta0=BETA0_FRACTION * beta, nu_low=0.0, nu_high=0.0)
    s1 = int(np.count_nonzero(res.s1))
    surv = np.flatnonzero(res.survivors)
    if surv.size == 0:
        est = s1  # Alg. 6 line 3 (every user categorised; correct w.p. 1 − β0, Cor. 6.3)
    elif privatization == "point":
        # PM0: |S1| + Σ_{G_c} 𝟙{Proj_Γ(x̄_i) < 0} (the paper drops "< 0"; implementation notes on Liang–Yi (adaptive budgeting))
        est = s1 + int(np.count_nonzero(rect.proj(res.mean[surv]) < 0))
    else:
        # PM1: |S1| + Σ_{G_c} 𝟙{ȳ_i < η_i}, ȳ_i ~ N(Proj_Γ(x_i), 1/(2ρ_i)) (Fact 6.2), η_i from App. B
        rho_bar = res.executed_rho[surv]
        eta = eta_threshold(rho_bar, rect.length, rect.width) if shift else 0.0
        est = s1 + int(np.count_nonzero(res.mean[surv, 0] < eta))
    return RangeCountResult(
        estimate=est,
        method="PM0" if privatization == "point" else "PM1",
        executed_rho=res.executed_rho,
        allocated_rho=res.allocated_rho,
        n_eliminated_early=res.n_eliminated_early,
        s1_count=s1,
        survivors=int(surv.size),
        rounds=res.rounds,
    )
