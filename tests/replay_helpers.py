"""Test helper: make an engine's replay nondeterministic by hand (tests of ReplayCostExceeded)."""

from __future__ import annotations


def inflate_reservations(query, factor: int = 2) -> None:
    """From now on ``query`` reserves ``factor`` times what it computes (its ``prepare`` wrapped in place)."""
    prepare = query.prepare

    def more(w, rng):
        r = prepare(w, rng)
        r.costs = r.costs * factor
        return r
    query.prepare = more
