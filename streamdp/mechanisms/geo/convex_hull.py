"""Private convex hull under CGP (Liang–Yi (CGP) Alg. 4 "PCH", §4.4, Thm 4.16) and the "Basic" baseline.

Budget ρ (per coordinate unit²) for the n-tuple x under dist_∞. A share ``anchor_share`` (paper: one half) is kept
for releasing the anchors; Alg. 4 runs on the rest, ρ_A = (1 − anchor_share)·ρ:

1. ρ0 = ρ_A/20. Centre c(x) = midpoints of the coordinate ranges, √2-Lipschitz (Liang–Yi (CGP) Lemma F.1):
   c̃ = c(x) + N(0, 3/(2ρ0)·I₂) — Gaussian mechanism at 2ρ0/3 (σ² = 2/(2·2ρ0/3)).
2. R̃ = max_i ‖x_i − c̃‖ + √(3 log(2/β)/ρ0) + N(0, 3/(2ρ0)) — 1-Lipschitz (Liang–Yi (CGP) Lemmas E.1, 4.9), Gaussian at ρ0/3;
   the shift makes the circle (c̃, R̃) enclose x w.p. ≥ 1 − β/2 (Gaussian tail, σ² = 3/(2ρ0)).
3. k anchors P_j = c̃ + R̃(cos θ_j, sin θ_j), θ_j = 2π(j−1)/k; a_j = PNN(x, P_j, [n], √(2ρ1)) with
   ρ1 = (ρ_A − ρ0)/k (each ρ1-CGP). Steps 1–3 cost 2ρ0/3 + ρ0/3 + k·ρ1 = ρ_A.
4. Anchor release (Liang–Yi (CGP) §4.4 "Finding the convex hull privately"): x̃_a = x_a + N(0, |A|/(2ρ_anchor)·I₂) for each
   distinct a ∈ A (identity query on |A| points, ρ_anchor-CGP); return CONV(x̃_A). Total ρ_A + ρ_anchor = ρ.

k is chosen from released values only (post-processing): k = (R̃·√ρ_A / log(n/β))^{2/3} (Liang–Yi (CGP) §4.4 "Setting k",
ω(x) replaced by R̃), rounded and clipped to [16, 128] (Liang–Yi (CGP) §5). n (the tuple size) is public under dist_∞.

Basic (Liang–Yi (CGP) §5): CONV of the identity-query release of all n points.
Quality (Liang–Yi (CGP) §5): Jaccard index of the released hull and the true hull (areas of convex polygons, exact).

**Published floats on a grid (review 12).** The centre c̃, the radius R̃ and the anchors x̃_A are published (R̃ also
sets k), so none is x + float noise (Mironov 2012): each is released by
:func:`streamdp.mechanisms.granular_gaussian.granular_gaussian`, g·(rint(v/g) + N_Z(0, (σ/g)²)),
g = 2^{⌊log2 σ⌋−30}, with the σ above (centre and radius: g0 = g(√(3/(2ρ0))); anchors: the identity query's
g_A = g(√(|A|/(2ρ_anchor)))). Each piece is then CGP w.r.t. dist + its grid distance: g0 for the centre
(√2·g0/K with K = √2), g0 for the radius (K = 1), √2·g_A for the anchors; the PNN steps are ε-GP w.r.t. dist.
Composed (Liang–Yi (CGP) Thm 3.2; Σ ρ_i(d + a_i)² ≤ ρ(d + max a_i)²): for x ≠ x', D_α ≤ α·ρ·(dist_∞(x, x') + a)² with
a = max(g0, √2·g_A) ≤ 2⁻³⁰·max(σ0, √2·σ_A). The cost charged is ρ (unchanged); a is stated next to it. PNN's Laplace
threshold and the SVT noise stay float: only the outcome of their comparisons (an index, never published) is
used (see :func:`streamdp.mechanisms.geo.pnn._pnn_on_distances`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.spatial import ConvexHull, QhullError

from streamdp.mechanisms.geo._checks import _pos
from streamdp.accounting.cost import Cost
from streamdp.mechanisms.geo.gaussian_cgp import IdentityQueryCGP
from streamdp.mechanisms.geo.planar_laplace import IdentityQueryGP
from streamdp.mechanisms.geo.pnn import _pnn_on_distances
from streamdp.mechanisms.granular_gaussian import granular_gaussian

__all__ = [
    "PCHResult",
    "private_convex_hull",
    "pch_cost",
    "choose_k",
    "midpoint_center",
    "basic_convex_hull",
    "convex_hull_vertices",
    "polygon_area",
    "convex_intersection",
    "hull_jaccard",
]


@dataclass(frozen=True)
class PCHResult:
    hull: np.ndarray  # (h, 2) counter-clockwise vertices of CONV(x̃_A)
    anchors: np.ndarray  # (|A|, 2) released noisy anchor points x̃_A
    indices: np.ndarray  # A (distinct, sorted) — released as part of the output
    center: np.ndarray  # c̃
    radius: float  # R̃
    k: int


def _points2(points) -> np.ndarray:
    x = np.asarray(points, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] != 2 or x.shape[0] == 0:
        raise ValueError(f"points must be a non-empty (n, 2) array, got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("points must be finite")
    return x


def midpoint_center(points) -> np.ndarray:
    """c(x): midpoints of the coordinate ranges, √2-Lipschitz under dist_∞ (Liang–Yi (CGP) Lemma F.1)."""
    x = _points2(points)
    return 0.5 * (x.min(axis=0) + x.max(axis=0))


def choose_k(radius: float, rho: float, n: int, beta: float, k_range: tuple[int, int] = (16, 128)) -> int:
    """k = (R̃·√ρ/log(n/β))^{2/3}, rounded, clipped to ``k_range`` (Liang–Yi (CGP) §4.4 "Setting k", §5)."""
    lo, hi = int(k_range[0]), int(k_range[1])
    if not (1 <= lo <= hi):
        raise ValueError(f"k_range must satisfy 1 ≤ lo ≤ hi, got {k_range!r}")
    lg = math.log(max(int(n), 2) / float(beta))
    raw = (max(float(radius), 0.0) * math.sqrt(float(rho)) / lg) ** (2.0 / 3.0) if lg > 0 else hi
    return int(min(hi, max(lo, round(raw))))


def pch_cost(rho: float) -> Cost:
    """ρ-CGP for the whole release (Liang–Yi (CGP) Thm 4.16): Cost.cgp(ρ), ρ per coordinate unit²."""
    return Cost.cgp(_pos(rho, "rho"))


def private_convex_hull(
    rng: np.random.Generator,
    points,
    rho: float,
    beta: float = 0.05,
    k: int | None = None,
    anchor_share: float = 0.5,
    k_range: tuple[int, int] = (16, 128),
    gamma0_factor: float = 0.0,
    max_cycles: int = 1000,
) -> PCHResult:
    """ρ-CGP private convex hull of 2-D points (Liang–Yi (CGP) Alg. 4 + anchor release; module docstring).

    ``gamma0_factor`` c: every PNN uses γ0 = c/√(2ρ1) (0 = Liang–Yi (CGP) Thm 4.11).
    """
    x = _points2(points)
    rho = _pos(rho, "rho")
    if not (0.0 < float(beta) < 1.0):
        raise ValueError(f"beta must lie in (0, 1), got {beta!r}")
    if not (0.0 < float(anchor_share) < 1.0):
        raise ValueError(f"anchor_share must lie in (0, 1), got {anchor_share!r}")
    n = x.shape[0]
    rho_a = (1.0 - anchor_share) * rho
    rho_anchor = anchor_share * rho
    rho0 = rho_a / 20.0
    s0 = math.sqrt(3.0 / (2.0 * rho0))
    # 1. centre: √2-Lipschitz, Gaussian at 2ρ0/3 ⇒ σ = √2/√(2·2ρ0/3) = √(3/(2ρ0)); published, so on the grid
    #    g0 = granularity(s0) with discrete Gaussian noise (w.r.t. dist_∞ + √2·g0/√2 = dist_∞ + g0)
    c_t = granular_gaussian(rng, midpoint_center(x), s0)
    # 2. radius: 1-Lipschitz (c̃ is public now), Gaussian at ρ0/3 ⇒ σ = 1/√(2ρ0/3) = √(3/(2ρ0)); published and sets
    #    k, so on the grid g0 too (w.r.t. dist_∞ + g0)
    r_stat = float(np.sqrt(((x - c_t) ** 2).sum(axis=1)).max()) + math.sqrt(3.0 * math.log(2.0 / beta) / rho0)
    r_t = float(granular_gaussian(rng, r_stat, s0))
    # 3. anchors by PNN (k from released values only)
    if k is None:
        k = choose_k(r_t, rho_a, n, beta, k_range)
    if isinstance(k, bool) or int(k) != k or int(k) < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    k = int(k)
    rho1 = (rho_a - rho0) / k
    eps1 = math.sqrt(2.0 * rho1)  # ε1-GP ⇒ ρ1-CGP (Liang–Yi (CGP) Lemma 3.6)
    g0 = float(gamma0_factor) / eps1
    theta = 2.0 * math.pi * np.arange(k) / k
    anchors_p = c_t + max(r_t, 0.0) * np.column_stack([np.cos(theta), np.sin(theta)])
    chosen = np.empty(k, dtype=np.int64)
    for j in range(k):
        dist = np.sqrt(((x - anchors_p[j]) ** 2).sum(axis=1))
        chosen[j], _, _ = _pnn_on_distances(rng, dist, eps1, g0, int(max_cycles))
    a = np.unique(chosen)
    # 4. anchor release: identity query on |A| points at ρ_anchor (granular: on the grid g_A, w.r.t. dist_∞ + √2·g_A)
    noisy = IdentityQueryCGP(rho_anchor).release(rng, x[a])
    return PCHResult(hull=convex_hull_vertices(noisy), anchors=noisy, indices=a, center=c_t, radius=r_t, k=k)


def basic_convex_hull(rng: np.random.Generator, points, rho: float | None = None, epsilon: float | None = None):
    """Baseline (Liang–Yi (CGP) §5): CONV of all n points released by the ρ-CGP (or ε-GP) identity query."""
    x = _points2(points)
    if (rho is None) == (epsilon is None):
        raise ValueError("give exactly one of rho (CGP) or epsilon (GP)")
    noisy = IdentityQueryCGP(rho).release(rng, x) if rho is not None else IdentityQueryGP(epsilon).release(rng, x)
    return convex_hull_vertices(noisy)


# ------------------------------------------------------------------------------------------------ geometry
def convex_hull_vertices(points) -> np.ndarray:
    """Counter-clockwise vertices of CONV(points); degenerate sets (< 3 points, collinear) return their
    extreme points (area 0)."""
    x = _points2(points)
    u = np.unique(x, axis=0)
    if u.shape[0] < 3:
        return u
    try:
        h = ConvexHull(u)
    except QhullError:
        # collinear: the two extreme points along the principal direction
        d = u - u.mean(axis=0)
        _, _, vt = np.linalg.svd(d, full_matrices=False)
        t = d @ vt[0]
        return u[[int(np.argmin(t)), int(np.argmax(t))]]
    return u[h.vertices]  # scipy returns 2-D hull vertices in counter-clockwise order


def polygon_area(poly) -> float:
    """Area of a simple polygon (shoelace); 0 for fewer than 3 vertices."""
    p = np.asarray(poly, dtype=np.float64)
    if p.ndim != 2 or p.shape[0] < 3:
        return 0.0
    x, y = p[:, 0], p[:, 1]
    return float(abs(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))) / 2.0)


def convex_intersection(subject, clip) -> np.ndarray:
    """Intersection of two convex polygons given counter-clockwise (Sutherland–Hodgman clipping)."""
    out = np.asarray(subject, dtype=np.float64)
    c = np.asarray(clip, dtype=np.float64)
    if out.shape[0] < 3 or c.shape[0] < 3:
        return np.empty((0, 2))
    for i in range(c.shape[0]):
        a, b = c[i], c[(i + 1) % c.shape[0]]
        if out.shape[0] == 0:
            break
        e = b - a
        side = e[0] * (out[:, 1] - a[1]) - e[1] * (out[:, 0] - a[0])  # ≥ 0: left of a→b (inside)
        nxt = np.roll(out, -1, axis=0)
        side_n = np.roll(side, -1)
        pts = []
        for j in range(out.shape[0]):
            cur_in, nxt_in = side[j] >= 0, side_n[j] >= 0
            if cur_in:
                pts.append(out[j])
            if cur_in != nxt_in:
                t = side[j] / (side[j] - side_n[j])
                pts.append(out[j] + t * (nxt[j] - out[j]))
        out = np.array(pts) if pts else np.empty((0, 2))
    return out


def hull_jaccard(hull_a, hull_b) -> float:
    """Jaccard index μ(A ∩ B)/μ(A ∪ B) of two convex polygons (counter-clockwise vertices) — Liang–Yi (CGP) §5."""
    area_a, area_b = polygon_area(hull_a), polygon_area(hull_b)
    inter = polygon_area(convex_intersection(hull_a, hull_b))
    union = area_a + area_b - inter
    return float(inter / union) if union > 0 else 0.0
