"""The demo's plot: one panel per released query, drawn by a panel function chosen by the query's kind, and a panel
of users' remaining budget in every notion the run used.

``PANELS`` maps a kind to its panel function ``panel(ax, query, records, ctx)``; a kind without one (a new kind)
gets :func:`generic_panel`, which plots the numeric fields of its released ``values`` over the windows. A panel
function draws on ``ax`` and may return a short note for the figure's caption. Register a new kind's panel with
``PANELS["my_kind"] = my_panel``.

The ground truth drawn beside released counts is NOT private: it is computed from the raw input, for the demo's
reader only, and never published. Two truths are drawn: over every accepted event ("raw"), and over the users the
filter had admitted at that window ("admitted": a user refused at window t is halted, and their data of t and every
later window is dropped before any mechanism reads it), so the gap the filter makes is visible.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from streamdp.accounting.cost import COMPONENTS, DELTA_SCALE, LOSS_SCALE

#: fixed-point value that stands for an unlimited budget
_UNLIMITED = np.iinfo(np.int64).max


@dataclass
class PlotContext:
    """What the panels may read besides the released records (the demo fills it)."""

    cfg: object  # ServiceConfig
    events: list  # raw payloads in input order (position = index)
    dead_positions: set = field(default_factory=set)  # positions of dead-lettered events (never in the truth)
    halted_at: dict = field(default_factory=dict)  # user → the window (seq) at which the filter first refused them
    users: list = field(default_factory=list)  # UserBudget of every user the store saw
    default_budget: np.ndarray | None = None

    _rows: list | None = None
    _distinct: list | None = None

    def parsed(self, distinct: bool = True) -> list[tuple[str, int, list]]:
        """(user, window seq, items) of every accepted event with a user, in input order: its distinct items (the
        distinct-user kinds' view), or with ``distinct=False`` every item as sent (the event-count kinds')."""
        if self._rows is None:
            import orjson

            ws, origin = self.cfg.service["window_seconds"], self.cfg.service["origin"]
            out = []
            for i, raw in enumerate(self.events):
                if i in self.dead_positions:
                    continue
                try:
                    e = orjson.loads(raw)
                    user, ts = e["user"], float(e["ts"])
                except (ValueError, KeyError, TypeError):
                    continue
                items = e.get("items") or []
                if not isinstance(items, list):
                    items = []
                out.append((str(user), int((ts - origin) // ws) + 1, [str(x) for x in items]))
            self._rows = out
        if not distinct:
            return self._rows
        if self._distinct is None:
            self._distinct = [(u, s, list(dict.fromkeys(items))) for u, s, items in self._rows]
        return self._distinct


Panel = Callable[..., "str | None"]


def _seq(r: dict) -> int:
    return int(r["window"]["seq"])


def _epoch_segments(xs: list[int], ys: list[float], horizon: int) -> list[tuple[list[int], list[float]]]:
    """Split a series at epoch boundaries (windows 1..L, L+1..2L, …): a line is never drawn across a reset."""
    segs: list[tuple[list[int], list[float]]] = []
    cur = None
    for x, y in zip(xs, ys):
        ep = (x - 1) // horizon
        if cur is None or ep != cur[0] or (segs and x != segs[-1][0][-1] + 1):
            segs.append(([], []))
            cur = (ep,)
        segs[-1][0].append(x)
        segs[-1][1].append(y)
    return segs


def _plot_segments(ax, xs, ys, horizon, **kw) -> None:
    label = kw.pop("label", None)
    for i, (sx, sy) in enumerate(_epoch_segments(xs, ys, horizon)):
        ax.plot(sx, sy, label=label if i == 0 else None, **kw)


def _epoch_lines(ax, last_seq: int, horizon: int) -> None:
    for b in range(horizon, last_seq, horizon):
        ax.axvline(b + 0.5, color="grey", lw=0.6, ls="--", alpha=0.6)


# ------------------------------------------------------------------------------------------------------ panels
def continual_counts_panel(ax, query: dict, records: list[dict], ctx: PlotContext) -> str | None:
    horizon = ctx.cfg.service["horizon"]
    cap = int(query.get("max_per_item", 1) or 1)
    released: dict = defaultdict(dict)
    for r in records:
        for it, c in (r["values"].get("counts") or {}).items():
            released[it][_seq(r)] = c
    if not released:
        return _empty(ax, query, "no item crossed the selection threshold")
    final = {it: max(v.values()) for it, v in released.items()}
    top = sorted(final, key=final.get, reverse=True)[:5]
    last = max(_seq(r) for r in records)
    # NON-PRIVATE truth: Σ over users of min(C, windows in which the user had the item), running within each epoch
    want = set(top)
    raw_n: dict = defaultdict(lambda: defaultdict(int))  # item → (user, epoch) → contributions
    adm_n: dict = defaultdict(lambda: defaultdict(int))
    raw_by: dict = {it: defaultdict(int) for it in top}  # item → seq → increments
    adm_by: dict = {it: defaultdict(int) for it in top}
    seen_uw: set = set()
    for user, seq, items in ctx.parsed():
        ep = (seq - 1) // horizon
        halted = ctx.halted_at.get(user)
        for it in items:
            if it not in want or (user, seq, it) in seen_uw:
                continue
            seen_uw.add((user, seq, it))
            k = (user, ep)
            if raw_n[it][k] < cap:
                raw_n[it][k] += 1
                raw_by[it][seq] += 1
            if (halted is None or seq < halted) and adm_n[it][k] < cap:
                adm_n[it][k] += 1
                adm_by[it][seq] += 1
    xs_all = list(range(1, last + 1))

    def running(by: dict) -> list[float]:
        out, v = [], 0
        for s in xs_all:
            if (s - 1) % horizon == 0:
                v = 0
            v += by.get(s, 0)
            out.append(v)
        return out

    for i, it in enumerate(top):
        xs = sorted(released[it])
        _plot_segments(ax, xs, [released[it][x] for x in xs], horizon, color=f"C{i}", lw=1.6,
                       label=f"{it} released")
        _plot_segments(ax, xs_all, running(adm_by[it]), horizon, color=f"C{i}", ls="--", lw=1.0, alpha=0.9,
                       label=f"{it} truth, admitted users")
        _plot_segments(ax, xs_all, running(raw_by[it]), horizon, color=f"C{i}", ls=":", lw=1.0, alpha=0.7,
                       label=f"{it} truth, all users")
    _epoch_lines(ax, last, horizon)
    ax.set_xlabel("window (dashed grey: a new epoch, the counts restart)")
    ax.set_ylabel("running count per epoch" + (" (distinct users)" if cap == 1 else f" (≤ {cap} per user)"))
    ax.set_title(f"{query['id']} (continual_counts): released vs true running counts, top {len(top)} items",
                 fontsize=9)
    ax.legend(fontsize=6, ncol=3)
    return None


def continual_sums_panel(ax, query: dict, records: list[dict], ctx: PlotContext) -> str | None:
    """Released running event counts (and, with a ``value_range``, clamped sums on a twin axis) of the top keys, their
    95 % intervals as bands, against the NON-PRIVATE truth over every accepted event and over admitted users; lines
    broken at epochs. The truths count every record of a user (no per-user bound), as a reader would."""
    horizon = ctx.cfg.service["horizon"]
    released: dict = defaultdict(dict)
    bands: dict = defaultdict(dict)
    for r in records:
        v = r["values"]
        ci = (v.get("ci95") or {}).get("count") or {}
        for k, c in (v.get("counts") or {}).items():
            released[k][_seq(r)] = c
            if k in ci:
                bands[k][_seq(r)] = ci[k]
    if not released:
        return _empty(ax, query, "no key crossed the selection threshold")
    final = {k: v[max(v)] for k, v in released.items()}
    top = sorted(final, key=final.get, reverse=True)[:5]
    last = max(_seq(r) for r in records)
    want = set(top)
    raw_by: dict = {k: defaultdict(int) for k in top}  # key → seq → records
    adm_by: dict = {k: defaultdict(int) for k in top}
    for user, seq, items in ctx.parsed(distinct=False):
        halted = ctx.halted_at.get(user)
        for k in items:
            if k in want:
                raw_by[k][seq] += 1
                if halted is None or seq < halted:
                    adm_by[k][seq] += 1
    xs_all = list(range(1, last + 1))

    def running(by: dict) -> list[float]:
        out, v = [], 0
        for s in xs_all:
            if (s - 1) % horizon == 0:
                v = 0
            v += by.get(s, 0)
            out.append(v)
        return out

    for i, k in enumerate(top):
        xs = sorted(released[k])
        _plot_segments(ax, xs, [released[k][x] for x in xs], horizon, color=f"C{i}", lw=1.6, label=f"{k} released")
        bx = sorted(bands[k])
        for seg_x, _ in _epoch_segments(bx, [0.0] * len(bx), horizon):
            ax.fill_between(seg_x, [bands[k][x][0] for x in seg_x], [bands[k][x][1] for x in seg_x],
                            color=f"C{i}", alpha=0.15, linewidth=0)
        _plot_segments(ax, xs_all, running(adm_by[k]), horizon, color=f"C{i}", ls="--", lw=1.0, alpha=0.9,
                       label=f"{k} truth, admitted users")
        _plot_segments(ax, xs_all, running(raw_by[k]), horizon, color=f"C{i}", ls=":", lw=1.0, alpha=0.7,
                       label=f"{k} truth, all users")
    _epoch_lines(ax, last, horizon)
    ax.set_xlabel("window (dashed grey: a new epoch, the counts restart)")
    ax.set_ylabel("running count of events per epoch\n(truths: every record; released: each user's bounded records)",
                  fontsize=7)
    ax.set_title(f"{query['id']} (continual_sums): released event counts with 95 % intervals vs true running "
                 f"counts, top {len(top)} keys", fontsize=9)
    ax.legend(fontsize=6, ncol=3)
    return None


def top_k_panel(ax, query: dict, records: list[dict], ctx: PlotContext) -> str | None:
    times: dict = defaultdict(int)
    for r in records:
        for it in r["values"].get("items") or []:
            if it is not None:
                times[it] += 1
    used = max((r["values"].get("pwyg_used", 0) or 0 for r in records), default=0)
    kstar = next((r["values"].get("k_star") for r in records if r["values"].get("k_star")), query.get("k_star"))
    if not times:
        return _empty(ax, query, "no item returned")
    top = sorted(times, key=times.get, reverse=True)[:12]
    ax.barh(top[::-1], [times[t] for t in top[::-1]], color="C1")
    ax.set_xlabel("windows in which the item was returned")
    stop = next((_seq(r) for r in records if r["values"].get("stopped")), None)
    ax.set_title(f"{query['id']} (top_k): items returned, {used}/{kstar} of the pay-what-you-get total"
                 + (f"; stopped at window {stop}" if stop else ""), fontsize=9)
    return None


def window_histogram_panel(ax, query: dict, records: list[dict], ctx: PlotContext) -> str | None:
    series: dict = defaultdict(dict)
    thr = []
    for r in records:
        for it, c in (r["values"].get("counts") or {}).items():
            series[it][_seq(r)] = c
        if r["values"].get("threshold") is not None:
            thr.append((_seq(r), r["values"]["threshold"]))
    if not series:
        return _empty(ax, query, "no count above the threshold")
    tot = {it: sum(v.values()) for it, v in series.items()}
    for i, it in enumerate(sorted(tot, key=tot.get, reverse=True)[:5]):
        xs = sorted(series[it])
        ax.plot(xs, [series[it][x] for x in xs], ".-", color=f"C{i}", lw=0.8, ms=3, label=it)
    if thr:
        ax.plot(*zip(*thr), color="grey", lw=0.8, ls="--", label="threshold")
    ax.set_xlabel("window")
    ax.set_ylabel("count in the window")
    ax.set_title(f"{query['id']} (window_histogram): counts released per window, top items", fontsize=9)
    ax.legend(fontsize=7)
    return None


def grid_means_panel(ax, query: dict, records: list[dict], ctx: PlotContext) -> str | None:
    series: dict = defaultdict(dict)
    users: dict = defaultdict(int)
    for r in records:
        for cell, v in (r["values"].get("cells") or {}).items():
            if v.get("mean") is not None:
                series[cell][_seq(r)] = v["mean"]
                users[cell] += int(v.get("users") or 0)
    if not series:
        return _empty(ax, query, "no cell released")
    for i, cell in enumerate(sorted(users, key=users.get, reverse=True)[:5]):
        xs = sorted(series[cell])
        ax.plot(xs, [series[cell][x] for x in xs], ".", color=f"C{i}", ms=3, label=f"cell {cell}")
    ax.set_xlabel("window")
    ax.set_ylabel("released mean")
    ax.set_title(f"{query['id']} (grid_means): per-cell means, the 5 busiest cells", fontsize=9)
    ax.legend(fontsize=7)
    return None


def _answers_panel(ax, query: dict, records: list[dict], ctx: PlotContext) -> str | None:
    """range_counts, kde_point, knn_point, threshold_count: one answer per registered query, at its window."""
    pts = []
    for r in records:
        v = r["values"]
        if v.get("query_index") is None:
            continue
        if isinstance(v.get("below_threshold"), bool):  # threshold_count: a yes/no answer about a threshold
            pts.append((_seq(r), float(v.get("threshold") or 0), "threshold (bar text: the released answer)",
                        v["query_index"], "below" if v["below_threshold"] else "not below"))
            continue
        for k in ("estimate", "answer", "count", "noisy_count", "users"):
            if isinstance(v.get(k), (int, float)) and not isinstance(v.get(k), bool):
                pts.append((_seq(r), float(v[k]), k, v["query_index"], None))
                break
        else:
            d = v.get("distances")
            if isinstance(d, list) and d and all(isinstance(x, (int, float)) for x in d):
                pts.append((_seq(r), float(np.mean(d)), "mean distance", v["query_index"], None))
    if not pts:
        return _empty(ax, query, "no registered query was answered in this run")
    xs, ys, names, idx, texts = zip(*pts)
    ax.bar(range(len(xs)), ys, color="C4")
    for i, (y, t) in enumerate(zip(ys, texts)):
        if t:
            ax.text(i, y, t, ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(xs)), [f"q{i}\nw{x}" for i, x in zip(idx, xs)], fontsize=7)
    ax.set_ylabel(names[0])
    ax.set_title(f"{query['id']} ({query['kind']}): answer per registered query (q index, window)", fontsize=9)
    return None


def geo_locations_panel(ax, query: dict, records: list[dict], ctx: PlotContext) -> str | None:
    pts = [p for r in records for p in (r["values"].get("points") or []) if isinstance(p, list) and len(p) == 2]
    if not pts:
        return _empty(ax, query, "no location released")
    a = np.asarray(pts, dtype=float)
    if len(a) > 5000:
        a = a[np.linspace(0, len(a) - 1, 5000).astype(int)]
    ax.scatter(a[:, 1], a[:, 0], s=2, alpha=0.3, color="C0")
    ax.set_xlabel("longitude (or x)")
    ax.set_ylabel("latitude (or y)")
    ax.set_title(f"{query['id']} (geo_locations): released noisy locations, all windows", fontsize=9)
    return None


def geo_knn_panel(ax, query: dict, records: list[dict], ctx: PlotContext) -> str | None:
    series: dict = defaultdict(dict)
    for r in records:
        for n in r["values"].get("neighbours") or []:
            if n.get("mean_distance") is not None:
                series[tuple(n["point"])][_seq(r)] = n["mean_distance"]
    if not series:
        return _empty(ax, query, "no neighbours released")
    unit = next((r["values"].get("distance_unit") for r in records if r["values"].get("distance_unit")), "")
    for i, p in enumerate(list(series)[:6]):
        xs = sorted(series[p])
        ax.plot(xs, [series[p][x] for x in xs], ".", ms=3, color=f"C{i}", label=f"({p[0]:.2f}, {p[1]:.2f})")
    ax.set_yscale("symlog")
    ax.set_xlabel("window")
    ax.set_ylabel(f"mean distance of the k nearest ({unit})")
    ax.set_title(f"{query['id']} (geo_knn): per query point", fontsize=9)
    ax.legend(fontsize=7)
    return None


def geo_convex_hull_panel(ax, query: dict, records: list[dict], ctx: PlotContext) -> str | None:
    hulls = [(_seq(r), r["values"]["hull"]) for r in records if len(r["values"].get("hull") or []) >= 3]
    if not hulls:
        return _empty(ax, query, "no hull released")
    for i, (s, h) in enumerate(hulls[-6:]):
        a = np.asarray(h + [h[0]], dtype=float)
        ax.plot(a[:, 1], a[:, 0], "-", color=f"C{i}", lw=1, label=f"window {s}")
    ax.set_xlabel("longitude (or x)")
    ax.set_ylabel("latitude (or y)")
    ax.set_title(f"{query['id']} (geo_convex_hull): the last {min(6, len(hulls))} released hulls", fontsize=9)
    ax.legend(fontsize=7)
    return None


def emd_frequency_panel(ax, query: dict, records: list[dict], ctx: PlotContext) -> str | None:
    series: dict = defaultdict(dict)
    for r in records:
        for it, f in (r["values"].get("frequencies") or {}).items():
            series[it][_seq(r)] = f
    if not series:
        return _empty(ax, query, "no frequency released")
    tot = {it: sum(v.values()) for it, v in series.items()}
    for i, it in enumerate(sorted(tot, key=tot.get, reverse=True)[:5]):
        xs = sorted(series[it])
        ax.plot(xs, [series[it][x] for x in xs], "-", lw=0.8, color=f"C{i}", label=it)
    ax.set_xlabel("window")
    ax.set_ylabel("released frequency")
    ax.set_title(f"{query['id']} (emd_frequency): the 5 most frequent items", fontsize=9)
    ax.legend(fontsize=7)
    return None


def _numeric_leaves(v, prefix: str = "") -> dict[str, float]:
    out: dict[str, float] = {}
    if isinstance(v, bool) or v is None:
        return out
    if isinstance(v, (int, float)):
        if math.isfinite(v):
            out[prefix or "value"] = float(v)
    elif isinstance(v, dict):
        for k, x in v.items():
            out.update(_numeric_leaves(x, f"{prefix}.{k}" if prefix else str(k)))
    return out


def generic_panel(ax, query: dict, records: list[dict], ctx: PlotContext) -> str | None:
    """Any kind: the released numeric fields of ``values`` (nested keys joined by dots) over the windows — the six
    present in the most windows, largest values first."""
    series: dict = defaultdict(dict)
    for r in records:
        for k, x in _numeric_leaves(r.get("values") or {}).items():
            series[k][_seq(r)] = x
    if not series:
        return _empty(ax, query, f"{len(records)} releases, no numeric values to draw")
    keys = sorted(series, key=lambda k: (-len(series[k]), -max(abs(x) for x in series[k].values())))[:6]
    span = [abs(x) for k in keys for x in series[k].values() if x]
    for i, k in enumerate(keys):
        xs = sorted(series[k])
        ax.plot(xs, [series[k][x] for x in xs], ".-", lw=0.7, ms=2, color=f"C{i}", label=k)
    if span and max(span) / max(min(span), 1e-300) > 1e3:
        ax.set_yscale("symlog")
    ax.set_xlabel("window")
    ax.set_title(f"{query['id']} ({query['kind']}): released values", fontsize=9)
    ax.legend(fontsize=6, ncol=2)
    return None


def _empty(ax, query: dict, why: str) -> str:
    ax.text(0.5, 0.5, f"{query['id']} ({query['kind']}):\n{why}", ha="center", va="center", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])
    return f"{query['id']}: {why}"


#: kind → panel; kinds not listed get :func:`generic_panel`
PANELS: dict[str, Panel] = {
    "continual_counts": continual_counts_panel,
    "continual_sums": continual_sums_panel,
    "top_k": top_k_panel,
    "window_histogram": window_histogram_panel,
    "grid_means": grid_means_panel,
    "range_counts": _answers_panel,
    "kde_point": _answers_panel,
    "knn_point": _answers_panel,
    "threshold_count": _answers_panel,
    "geo_locations": geo_locations_panel,
    "geo_knn": geo_knn_panel,
    "geo_convex_hull": geo_convex_hull_panel,
    "emd_frequency": emd_frequency_panel,
    # emd_linear and any new kind: generic_panel
}


def panel_for(kind: str) -> Panel:
    return PANELS.get(kind, generic_panel)


# ------------------------------------------------------------------------------------------------------ budget
#: notion → (index of its ρ / α component in a budget vector, symbol)
_NOTION_MAIN = {"zcdp": (COMPONENTS.index("zcdp_rho"), "ρ"), "cgp": (COMPONENTS.index("cgp_rho"), "ρ per m²"),
                "emd": (COMPONENTS.index("emd_alpha"), "α")}


def budget_panel(ax, ctx: PlotContext, notions: list[str]) -> None:
    drawn = False
    for i, n in enumerate(notions):
        j, sym = _NOTION_MAIN[n]
        fr = [max(0.0, 1 - int(u.spent[j]) / int(u.budget[j])) for u in ctx.users
              if 0 < int(u.budget[j]) < _UNLIMITED]
        if fr:
            ax.hist(fr, bins=20, range=(0, 1), histtype="step", lw=1.5, color=f"C{i + 2}",
                    label=f"{n} ({sym}): {len(fr):,} users")
            drawn = True
    halted = sum(1 for u in ctx.users if u.halted)
    if not drawn:
        ax.text(0.5, 0.5, "no finite budget in use", ha="center", va="center", transform=ax.transAxes)
    else:
        ax.legend(fontsize=7)
    ax.set_xlabel("remaining budget (fraction of the user's budget in the notion)")
    ax.set_ylabel("users")
    ax.set_title(f"users' remaining budget: {halted:,} of {len(ctx.users):,} halted", fontsize=9)


def budget_caption(default_budget, users: list, notions: list[str]) -> str:
    parts = []
    for n in notions:
        j, _ = _NOTION_MAIN[n]
        rho, delta = int(default_budget[j]), int(default_budget[j + 1])
        name = "α" if n == "emd" else "ρ"
        r = "unlimited" if rho >= _UNLIMITED else f"{rho / LOSS_SCALE:g}"
        d = "unlimited" if delta >= _UNLIMITED else f"{delta / DELTA_SCALE:g}"
        parts.append(f"{n} {name} = {r}, δ = {d}")
    halted = sum(1 for u in users if u.halted)
    share = f"{halted / len(users):.1%}" if users else "0%"
    return (f"default budget per user: {'; '.join(parts) or 'none'} — {halted:,} of {len(users):,} users halted "
            f"({share}): their data is dropped from the window they were refused on")


def draw(out_path: str, query_tables: list[dict], records_by_query: dict[str, list[dict]], ctx: PlotContext,
         notions: list[str], title: str) -> list[str]:
    """Write the figure to ``out_path``; returns the panels' notes (also in the caption)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(query_tables) + 1
    cols = 2 if n > 1 else 1
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(7.2 * cols, 4.4 * rows + 0.8), squeeze=False)
    flat = list(axes.flat)
    notes = []
    for ax, q in zip(flat, query_tables):
        recs = records_by_query.get(q["id"], [])
        try:
            note = panel_for(q["kind"])(ax, q, recs, ctx) if recs else _empty(ax, q, "no release in this run")
        except Exception as e:  # a panel's bug must not cost the run its outputs: fall back, and say so
            ax.clear()
            try:
                note = generic_panel(ax, q, recs, ctx)
            except Exception:
                note = _empty(ax, q, f"cannot draw ({type(e).__name__})")
        if note:
            notes.append(note)
    budget_panel(flat[len(query_tables)], ctx, notions)
    for ax in flat[n:]:
        ax.axis("off")
    caption = budget_caption(ctx.default_budget, ctx.users, notions)
    fig.suptitle(title, fontsize=11)
    fig.text(0.5, 0.005, caption, ha="center", va="bottom", fontsize=8, wrap=True)
    fig.tight_layout(rect=(0, 0.03, 1, 0.97))
    fig.savefig(out_path, dpi=100)
    plt.close(fig)
    return notes


__all__ = ["PANELS", "PlotContext", "budget_caption", "draw", "generic_panel", "panel_for"]
