"""What a configuration charges one user, window by window, and how long the default budget lasts
(``streamdp config check --explain``; ``--strict``'s budget findings).

The user considered is **active in every window** and is charged, in every window, the most each query can charge
them there — each query's own cost code, in the ledger's fixed point (costs rounded up, the budget down, as the
filter admits: DESIGN §3 "Filter"). Per query kind:

* most kinds charge the same worst case in every window: their ``window_cost`` (``streamdp.config.kinds``), e.g.
  continual counts Δ0 first contributions of ρ_item and δ_item, a geo release ρ per located user;
* ``top_k`` charges a user present in window i |I(i)|·ε²/8 and δ, ⊥ included (Rogers, Unknown-Domain Algorithms,
  Thm 10), but its counter counts released items only (⊥ not counted: docs/DECISIONS.md), so a run of [⊥] windows
  never stops it and Thm 10's whole-run bound k*·ε²/8 does not apply. A window's charge is its advance of the
  counter plus 1 for ⊥, so through window N the most a user can pay is S(N) = min(N·k, k* + N − 1) items' ε²/8
  (k − 1 items and ⊥ while the counter allows, then [⊥] for ever); δ is charged in every window. The realised
  halting window is never earlier than the one this gives (the reservation k(i) is itself a possible charge);
* ``range_counts``, ``kde_point``, ``knn_point`` charge only at their registered windows: the allocation r_i of
  Liang & Yi, Adaptive Privacy Budgeting, Alg. 3 for a user located at every query who executes every round (the
  largest cumulative charge at every query; the sequence never charges more than its published bound P in all),
  converted to ρ per m² as the ledger does;
* ``threshold_count`` reserves ρ at each registered window.

A kind without a per-window bound from its parameters (``window_cost`` None and none of the above) is listed as
such and left out of the totals. "Lasts N windows": the user is admitted in windows 1..N and halted in window N + 1
(for good, DESIGN §3), by the first budget component whose cumulative charge passes the default budget; None when
the charges stop before any component runs out.

Conversions, as the reports show them (``streamdp.accounting.report``): zCDP (ρ, δ) ⇒ (ε, δ + δ′)-DP; CGP ρ per m²
⇒ ε per km for locations within 1 km, δ + δ′; EMD stays (α, δ)-d_EM-DP.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from streamdp.accounting.cost import COMPONENTS, NOTIONS, SCALES, budget_vector
from streamdp.accounting.report import DEFAULT_DELTA_PRIME, as_dp, as_gp

__all__ = ["Schedule", "query_schedule", "explain", "strict_findings", "test_mode_warning"]

_SEQUENTIAL = ("range_counts", "kde_point", "knn_point")


@dataclass
class Schedule:
    """What one query charges a user active in every window: per component index, segments (first window, last
    window or None = for ever, fixed-point amount per window)."""

    basis: str
    when: str  # in words: "every window", "windows 3, 10", "windows 1–20 (ρ), 1–60 (δ)"
    segments: dict[int, list[tuple[int, int | None, int]]] = field(default_factory=dict)
    bounded: bool = True  # False: no per-window bound from the parameters

    def at(self, w: int) -> np.ndarray:
        out = np.zeros(len(COMPONENTS), dtype=np.int64)
        for j, segs in self.segments.items():
            out[j] = sum(a for s, e, a in segs if s <= w and (e is None or w <= e))
        return out

    def worst(self) -> np.ndarray:
        """The most it charges in one window, per component."""
        out = np.zeros(len(COMPONENTS), dtype=np.int64)
        for j, segs in self.segments.items():
            out[j] = max((a for _, _, a in segs), default=0)
        return out


def _every_window(cost, basis: str) -> Schedule:
    fixed = cost.to_fixed()
    return Schedule(basis, "every window", {j: [(1, None, int(fixed[j]))] for j in range(len(COMPONENTS)) if fixed[j]})


def _windows_text(ws: list[int]) -> str:
    shown = ", ".join(map(str, ws[:8])) + (f", … ({len(ws)} in all)" if len(ws) > 8 else "")
    return f"window{'s' if len(ws) > 1 else ''} {shown}"


def query_schedule(q) -> Schedule:
    """The :class:`Schedule` of one built query (module notes), from the query's own cost code."""
    from streamdp.config.kinds import kinds

    kind = (q.config_params or {}).get("kind", q.kind)
    if kind == "top_k":
        k, k_star, pwyg = q.k, q.pwyg.k_star, q.pwyg
        rho_j, delta_j = COMPONENTS.index("zcdp_rho"), COMPONENTS.index("zcdp_delta")

        def rho(n: int) -> int:
            return int(pwyg.call_cost(n).to_fixed()[rho_j])

        # S(N) = min(N·k, k* + N − 1) (module notes): k a window for m = ⌊(k* − 1)/(k − 1)⌋ windows (k − 1 items
        # and ⊥), then the rest R + 1 of the counter (R items and ⊥), then [⊥] for ever; k = 1: [⊥] for ever
        if k == 1:
            segs = {rho_j: [(1, None, rho(1))]}
            when_rho = "every window"
        else:
            m, r = divmod(k_star - 1, k - 1)
            segs = {rho_j: ([(1, m, rho(k))] if m else []) + [(m + 1, m + 1, rho(r + 1)), (m + 2, None, rho(1))]}
            when_rho = f"every window: {k} items' worth in windows 1–{m}, then less" if m else "every window"
        d = int(pwyg.call_cost(1).to_fixed()[delta_j])
        if d:
            segs[delta_j] = [(1, None, d)]
        return Schedule("|I(i)|·ε²/8 and δ per window, ⊥ included; ⊥ does not advance the pay-what-you-get counter, "
                        f"so [⊥] windows never stop the query: at most min(N·k, k* + N − 1) items' ε²/8 through "
                        f"window N (k = {k}, k* = {k_star}) and δ in every window",
                        f"{when_rho} (ρ); every window (δ)", segs)
    if kind in _SEQUENTIAL:
        j = COMPONENTS.index("cgp_rho")
        rem, charged, segs = q.B, 0, []
        for l, w in enumerate(q.windows, start=1):
            r = int(q.allocation(np.array([rem], dtype=np.int64), l)[0])
            c = min(int(q.coords.canonical_fixed(np.array([r], dtype=np.int64))[0]), q.budget_canonical - charged)
            segs.append((w, w, c))
            rem, charged = rem - r, charged + c
        return Schedule("the adaptive allocation r_i at each registered window, for a user located at every query who "
                        "executes every round (ρ per m²; the whole sequence charges at most its published bound)",
                        _windows_text(q.windows), {j: segs})
    if kind == "threshold_count":
        from streamdp.accounting.cost import Cost

        fixed = Cost.zcdp(q.rho).to_fixed()
        return Schedule("ρ reserved at each registered window", _windows_text(q.windows),
                        {j: [(w, w, int(fixed[j])) for w in q.windows] for j in range(len(COMPONENTS)) if fixed[j]})
    k = kinds().get(kind)
    if k is None or k.window_cost is None:
        return Schedule("no per-window bound follows from the parameters alone", "—", {}, bounded=False)
    cost, basis = k.window_cost(q)
    return _every_window(cost, basis)


def _lasts(schedules: list[Schedule], budget: np.ndarray) -> tuple[int | None, int | None]:
    """(the first window in which a user active in every window is halted, the component that halts them), or
    (None, None) when the charges stop before any component passes its budget."""
    first, by = None, None
    for j in range(len(COMPONENTS)):
        segs = [s for sch in schedules for s in sch.segments.get(j, []) if s[2] > 0]
        if not segs:
            continue
        b = int(budget[j])
        points = sorted({s for s, _, _ in segs} | {e + 1 for _, e, _ in segs if e is not None})
        total = 0
        for i, start in enumerate(points):
            end = points[i + 1] - 1 if i + 1 < len(points) else None
            rate = sum(a for s, e, a in segs if s <= start and (e is None or start <= e))
            if rate == 0:
                continue
            # windows start..end each add `rate`: the first W with total + (W − start + 1)·rate > b
            need = (b - total) // rate + 1  # windows until the budget is passed
            w = start + need - 1
            if end is None or w <= end:
                if first is None or w < first:
                    first, by = w, j
                break
            total += (end - start + 1) * rate
    return first, by


def _amounts(fixed: np.ndarray) -> dict:
    """Fixed-point components → {notion: {"rho"/"alpha": x, "delta": d}} for the notions charged."""
    out = {}
    for i, notion in enumerate(NOTIONS):
        a, d = int(fixed[2 * i]), int(fixed[2 * i + 1])
        if a or d:
            out[notion] = {("alpha" if notion == "emd" else "rho"): a / SCALES[2 * i], "delta": d / SCALES[2 * i + 1]}
    return out


def _converted(amounts: dict, delta_prime: float) -> dict:
    """Per notion charged, the guarantee it converts to (12 significant digits: δ + δ′ in floats carries dust)."""
    from streamdp.outputs.records import public_float

    out = {}
    for notion, v in amounts.items():
        if notion == "zcdp":
            c = as_dp(v["rho"], v["delta"], delta_prime)
        elif notion == "cgp":
            c = as_gp(v["rho"], v["delta"], delta_prime)
        else:
            c = {"alpha": v["alpha"], "delta": v["delta"]}
        out[{"zcdp": "dp", "cgp": "gp"}.get(notion, notion)] = (
            None if c is None else {k: public_float(x) for k, x in c.items()})
    return out


def explain(cfg, delta_prime: float = DEFAULT_DELTA_PRIME) -> dict:
    """Per query and in all: the worst-case charge per window, its (ε, δ), and how many windows a user active in
    every window lasts under the default budget (module notes)."""
    queries = cfg.build_queries()
    schedules = [query_schedule(q) for q in queries]
    budget = budget_vector(cfg.budget)
    out_q = []
    for q, s in zip(queries, schedules):
        worst = s.worst()
        amounts = _amounts(worst)
        alone, alone_by = _lasts([s], budget)
        out_q.append({"id": q.id, "kind": q.kind, "notion": q.notion, "bounded": s.bounded, "when": s.when,
                      "basis": s.basis, "per_window": amounts, "converted": _converted(amounts, delta_prime),
                      "alone_halted_in_window": alone,
                      "alone_limited_by": None if alone_by is None else COMPONENTS[alone_by]})
    zero = np.zeros(len(COMPONENTS), dtype=np.int64)
    # the sum over queries is constant between segment starts: its largest value is at one of them
    starts = {1} | {b for s in schedules for segs in s.segments.values() for b, _, _ in segs}
    totals = np.max([sum((s.at(w) for s in schedules), zero) for w in sorted(starts)], axis=0)
    first = sum((s.at(1) for s in schedules), zero)
    halted, by = _lasts(schedules, budget)
    b_amounts = {}
    for i, notion in enumerate(NOTIONS):
        if any(int(totals[2 * i + t]) for t in (0, 1)):
            b_amounts[notion] = {("alpha" if notion == "emd" else "rho"): float(cfg.budget.as_tuple()[2 * i]),
                                 "delta": float(cfg.budget.as_tuple()[2 * i + 1])}
    return {
        "assumption": "a user active in every window, charged in every window the most each query can charge them",
        "delta_prime": delta_prime,
        "queries": out_q,
        "all": {"per_window_max": _amounts(totals), "converted": _converted(_amounts(totals), delta_prime),
                "window_1": _amounts(first)},
        "budget": b_amounts,
        "lasts_windows": None if halted is None else halted - 1,
        "halted_in_window": halted,
        "limited_by": None if by is None else COMPONENTS[by],
        "unbounded_queries": [q.id for q, s in zip(queries, schedules) if not s.bounded],
    }


def test_mode_warning(cfg) -> str | None:
    seed = cfg.service.get("unsafe_test_seed")
    if seed is None:
        return None
    return (f"service.unsafe_test_seed = {seed}: TEST MODE — the noise comes from a fixed seed that anyone can "
            "reproduce, so the releases are NOT differentially private (every record says test_mode: true); "
            "`streamdp run` refuses it unless the command line also says --unsafe-test-seed")


def strict_findings(cfg, info: dict | None = None) -> list[str]:
    """What ``config check --strict`` refuses: test mode; the budget warnings (users halted at their first event or
    window: :func:`~streamdp.config.loader.budget_warnings`); a default budget component that is 0 while a query
    charges it; a user active in every window halted in window 1 (the schedule of :func:`explain`)."""
    test_mode = test_mode_warning(cfg)
    budget_findings = list(cfg.warnings)
    budget = budget_vector(cfg.budget)
    queries = cfg.build_queries()
    for j, c in enumerate(COMPONENTS):
        if budget[j] != 0 or any(c in x for x in cfg.warnings):  # a warning names it already
            continue
        users = [f"query[{i}] {q.id!r}" for i, q in enumerate(queries) if query_schedule(q).worst()[j] > 0]
        if users:
            budget_findings.append(f"the default budget [budget] {c} is 0 while {', '.join(users)} "
                                   f"charge{'s' if len(users) == 1 else ''} it: every user charged there is halted "
                                   "(for good) at the first such charge")
    info = info if info is not None else explain(cfg)
    if info["halted_in_window"] == 1 and not budget_findings:
        budget_findings.append("a user active in every window is halted in window 1: the queries' worst cases in "
                               f"that window add up to more than the default budget {info['limited_by']}")
    return ([test_mode] if test_mode is not None else []) + budget_findings
