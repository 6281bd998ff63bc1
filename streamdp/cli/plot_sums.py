"""A demo plot panel for ``continual_sums``: released running counts (or sums) of the top keys, with their 95 %
intervals, against the raw running totals (non-private, for the plot only). Not wired into ``streamdp demo``'s
figure here (the demo's plot is being rebuilt as one panel per released kind): call
:func:`plot_continual_sums` with a matplotlib axis."""

from __future__ import annotations

import os
from collections import defaultdict

import orjson


def released_series(out: str, query_id: str, what: str = "counts") -> tuple[dict, dict]:
    """From ``<out>/releases/<query_id>.jsonl``: ({key: {seq: value}}, {key: {seq: (lo, hi)}})."""
    values: dict = defaultdict(dict)
    bands: dict = defaultdict(dict)
    ci = "count" if what == "counts" else "sum"
    with open(os.path.join(out, "releases", f"{query_id}.jsonl"), "rb") as f:
        for line in f:
            r = orjson.loads(line)
            v = r["values"].get(what) or {}
            band = (r["values"].get("ci95") or {}).get(ci) or {}
            seq = r["window"]["seq"]
            for k, x in v.items():
                values[k][seq] = x
                if k in band:
                    bands[k][seq] = tuple(band[k])
    return values, bands


def true_running(events: list[bytes], cfg, what: str = "counts", lo: float | None = None,
                 hi: float | None = None) -> dict:
    """NON-PRIVATE raw running totals per key within each epoch (every record, no bounds): {key: {seq: total}}.
    Sums clamp the value to [lo, hi] as the query does."""
    ws, L, origin = cfg.service["window_seconds"], cfg.service["horizon"], cfg.service["origin"]
    per: dict = defaultdict(lambda: defaultdict(float))
    for raw in events:
        e = orjson.loads(raw)
        if "user" not in e or not e.get("items"):
            continue
        if what == "sums":
            if e.get("value") is None:
                continue
            x = min(max(float(e["value"]), lo), hi)
        else:
            x = 1.0
        seq = int((e["ts"] - origin) // ws) + 1
        for it in e["items"]:
            per[it][seq] += x
    out: dict = {}
    for k, by_seq in per.items():
        run, series = 0.0, {}
        for seq in range(1, max(by_seq) + 1):
            if (seq - 1) % L == 0:
                run = 0.0
            run += by_seq.get(seq, 0.0)
            series[seq] = run
        out[k] = series
    return out


def plot_continual_sums(ax, out: str, events: list[bytes], cfg, query_id: str, what: str = "counts",
                        top: int = 6) -> None:
    """Released running ``what`` ("counts" or "sums") of the ``top`` keys with the largest last value, their 95 %
    intervals as bands, and the raw running totals dotted."""
    values, bands = released_series(out, query_id, what)
    table = next(t for t in cfg.query_tables if t["id"] == query_id)
    lo, hi = (table.get("value_range") or [None, None])
    truth = true_running(events, cfg, what, lo, hi)
    last = {k: v[max(v)] for k, v in values.items() if v}
    keys = sorted(last, key=last.get, reverse=True)[:top]
    for i, k in enumerate(keys):
        xs = sorted(values[k])
        ax.plot(xs, [values[k][x] for x in xs], "-", color=f"C{i}", label=f"{k} released")
        bx = sorted(bands[k])
        if bx:
            ax.fill_between(bx, [bands[k][x][0] for x in bx], [bands[k][x][1] for x in bx], color=f"C{i}",
                            alpha=0.2, linewidth=0)
        tx = sorted(truth.get(k, {}))
        ax.plot(tx, [truth[k][x] for x in tx], ":", color=f"C{i}", alpha=0.8, label=f"{k} true (raw)")
    ax.set_xlabel("window")
    ax.set_ylabel(f"running {'count of records' if what == 'counts' else 'sum of values'} (per epoch)")
    ax.set_title(f"{query_id}: released {what} with 95 % intervals vs raw running totals (top keys)")
    ax.legend(fontsize=7, ncol=2)
