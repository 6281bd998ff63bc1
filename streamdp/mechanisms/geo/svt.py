"""The sparse vector technique under geo-privacy (Liang–Yi (CGP) Alg. 1, Thm D.1).

Input: K-Lipschitz queries g_1, g_2, … (real-valued, K w.r.t. the input metric), a threshold T, a budget ε.

    ε1 = ε2 = ε/2;  W ~ Lap(K/ε1) once;  for j = 1, 2, …: V_j ~ Lap(2K/ε2);
    halt with ⊤ at the first j with g_j(x) + V_j ≤ T + W, else output ⊥.

The whole run — however many ⊥ precede the ⊤, or if it never halts — is ε-GP (Liang–Yi (CGP) Thm D.1), hence ε²/2-CGP
(Liang–Yi (CGP) Lemma 3.6). ε is per distance unit of the input coordinates.

Implementation: the query answers are handed in as an array (the caller computes g_j(x)); noise is drawn in
vectorised blocks; ``cycle=True`` visits the answers cyclically (g'_l = g_{(l−1) mod m}, as PNN needs), with fresh
V at every visit. ``max_steps`` caps the run: the output is then ⊥^{max_steps}, still covered by Thm D.1 (the
second case of its proof), so any data-independent fallback afterwards is post-processing.

Float noise (review 12): W and V_j are float64 Laplace draws added to float answers, but the run publishes only
the position of the first ⊤ — the outcome of comparisons, never a noisy float. Rounding can change an outcome only
when g_j + V_j and T + W are within a few ulp, probability ~ ulp/b per comparison: a δ-level distance from the
exact-real mechanism, not a low-bit channel (that needs the noisy float itself, Mironov 2012). Callers must not
publish T + W or g_j + V_j; a published noisy float goes through ``mechanisms/granular_gaussian.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from streamdp.mechanisms.geo._checks import _pos
from streamdp.accounting.cost import Cost
from streamdp.noise import samplers

__all__ = ["SparseVectorGP", "SVTResult"]

_BLOCK = 8192
_FIRST_BLOCK = 64


@dataclass(frozen=True)
class SVTResult:
    """``index``: 0-based position of the ⊤ in the query sequence (None if every answer was ⊥);
    ``steps``: number of queries answered (index + 1, or the cap)."""

    index: int | None
    steps: int


class SparseVectorGP:
    """Liang–Yi (CGP) Alg. 1 with budget ε (ε-GP ⇒ ε²/2-CGP). ``lipschitz`` is K of every query."""

    def __init__(self, epsilon: float, lipschitz: float = 1.0):
        self.epsilon = _pos(epsilon, "epsilon")
        self.lipschitz = _pos(lipschitz, "lipschitz")

    @property
    def threshold_noise_scale(self) -> float:
        """Scale of W: K/ε1 = 2K/ε."""
        return self.lipschitz / (self.epsilon / 2.0)

    @property
    def query_noise_scale(self) -> float:
        """Scale of every V_j: 2K/ε2 = 4K/ε."""
        return 2.0 * self.lipschitz / (self.epsilon / 2.0)

    def cost(self) -> Cost:
        """ε-GP for the whole run (Liang–Yi (CGP) Thm D.1) ⇒ Cost.cgp(ε²/2) (Liang–Yi (CGP) Lemma 3.6)."""
        return Cost.cgp(self.epsilon**2 / 2.0)

    def run(
        self,
        rng: np.random.Generator,
        values,
        threshold: float,
        *,
        cycle: bool = False,
        max_steps: int | None = None,
    ) -> SVTResult:
        """Run the SVT over the query answers ``values`` (halting at the first g_j + V_j ≤ T + W).

        ``cycle=False``: the sequence is ``values`` once (``max_steps`` ≤ len). ``cycle=True``: the sequence
        repeats ``values`` forever; ``max_steps`` (required) caps it.
        """
        g = np.asarray(values, dtype=np.float64).ravel()
        if g.size == 0:
            raise ValueError("values must be non-empty")
        if not np.all(np.isfinite(g)):
            raise ValueError("values must be finite")
        t = float(threshold)
        if not math.isfinite(t):
            raise ValueError(f"threshold must be finite, got {threshold!r}")
        if cycle:
            if max_steps is None or isinstance(max_steps, bool) or int(max_steps) < 1:
                raise ValueError("max_steps must be a positive integer when cycle=True")
            total = int(max_steps)
        else:
            total = g.size if max_steps is None else min(int(max_steps), g.size)
            if total < 1:
                raise ValueError("max_steps must be ≥ 1")
        m = g.size
        # float noise is fine here: T + W and g_j + V_j are only compared, never published (module docstring)
        level = t + samplers.laplace(rng, self.threshold_noise_scale)  # T + W, W drawn once
        b = self.query_noise_scale
        # vectorised blocks, small first (most runs halt early), doubling up to ~_BLOCK; cyclic blocks are
        # whole cycles so that position `done` is always a cycle start
        unit = m if cycle else 1
        block = unit * max(1, -(-_FIRST_BLOCK // unit))
        cap = unit * max(1, _BLOCK // unit)
        done = 0
        while done < total:
            n = min(block, total - done)
            q = np.resize(g, n) if cycle else g[done : done + n]
            hit = np.flatnonzero(q + samplers.laplace(rng, b, n) <= level)
            if hit.size:
                j = done + int(hit[0])
                return SVTResult(index=j, steps=j + 1)
            done += n
            block = min(2 * block, max(cap, block))
        return SVTResult(index=None, steps=total)
