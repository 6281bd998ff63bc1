"""Synthetic location trajectories and query ranges for tests and benchmarks of the adaptive mechanisms.

Not a privacy mechanism: this draws *data*, not noise (it still takes the generator explicitly). The model is a
city of ``extent`` × ``extent`` distance units with weighted hotspots (think taxi ranks, Liang–Yi (adaptive budgeting) §7's T-Drive):
each user belongs to a hotspot (or, with probability ``background``, roams uniformly), takes Gaussian steps with
mild pull towards its hotspot, and jumps to a new hotspot with probability ``jump_prob`` per step.
"""

from __future__ import annotations

import numpy as np

from streamdp.mechanisms.adaptive.range_count import Rectangle

__all__ = ["synthetic_trajectories", "random_squares"]


def _positive(v, name: str) -> float:
    v = float(v)
    if not (np.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be finite and > 0, got {v!r}")
    return v


def _fraction(v, name: str) -> float:
    v = float(v)
    if not (0.0 <= v <= 1.0):
        raise ValueError(f"{name} must be in [0, 1], got {v!r}")
    return v


def synthetic_trajectories(
    rng: np.random.Generator,
    n_users: int,
    n_steps: int,
    *,
    extent: float = 100_000.0,
    n_hotspots: int = 25,
    hotspot_scale: float = 2_000.0,
    step_scale: float = 400.0,
    pull: float = 0.2,
    jump_prob: float = 0.05,
    background: float = 0.2,
) -> np.ndarray:
    """Locations of ``n_users`` users at ``n_steps`` time steps, shape (n_steps, n_users, 2), in [0, extent]²."""
    for name, v in (("n_users", n_users), ("n_steps", n_steps), ("n_hotspots", n_hotspots)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    extent = _positive(extent, "extent")
    hotspot_scale = _positive(hotspot_scale, "hotspot_scale")
    step_scale = _positive(step_scale, "step_scale")
    pull = _fraction(pull, "pull")
    jump_prob = _fraction(jump_prob, "jump_prob")
    background = _fraction(background, "background")

    hotspots = rng.uniform(0.1 * extent, 0.9 * extent, size=(n_hotspots, 2))
    weights = rng.gamma(0.7, 1.0, size=n_hotspots)
    weights /= weights.sum()

    home = rng.choice(n_hotspots, size=n_users, p=weights)
    roaming = rng.random(n_users) < background
    pos = hotspots[home] + rng.normal(0.0, hotspot_scale, size=(n_users, 2))
    pos[roaming] = rng.uniform(0.0, extent, size=(int(roaming.sum()), 2))

    out = np.empty((n_steps, n_users, 2))
    for t in range(n_steps):
        out[t] = np.clip(pos, 0.0, extent)
        jump = (rng.random(n_users) < jump_prob) & ~roaming
        home[jump] = rng.choice(n_hotspots, size=int(jump.sum()), p=weights)
        pos[jump] = hotspots[home[jump]] + rng.normal(0.0, hotspot_scale, size=(int(jump.sum()), 2))
        walk = ~jump
        drift = np.where(roaming[walk, None], 0.0, pull * (hotspots[home[walk]] - pos[walk]))
        pos[walk] += drift + rng.normal(0.0, step_scale, size=(int(walk.sum()), 2))
        pos = np.clip(pos, 0.0, extent)
    return out


def random_squares(rng: np.random.Generator, points, side: float, count: int) -> list[Rectangle]:
    """``count`` axis-aligned squares of side ``side``, each centred within side/2 (per coordinate) of a
    randomly chosen point, so that every square contains at least that point (true count ≥ 1)."""
    pts = np.asarray(points, dtype=np.float64)
    if pts.ndim != 2 or pts.shape[1] != 2 or pts.shape[0] == 0:
        raise ValueError("points must be a non-empty (n, 2) array")
    side = _positive(side, "side")
    if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
        raise ValueError(f"count must be an integer ≥ 0, got {count!r}")
    idx = rng.integers(0, pts.shape[0], size=count)
    jitter = rng.uniform(-0.49 * side, 0.49 * side, size=(count, 2))
    centres = pts[idx] + jitter
    return [Rectangle.square(cen, side) for cen in centres]
