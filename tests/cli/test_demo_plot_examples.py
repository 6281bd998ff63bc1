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

    assert plots.panel_for("continual_sums") is plots.generic_panel
    cfg = parse_config({"service": {"window_seconds": 60.0, "origin": 0.0},
                        "query": [{"id": "c", "kind": "continual_counts", "sigma": 1.0}]}, log_warnings=False)
    recs = [{"window": {"seq": s, "t": s, "start": 0.0, "end": 1.0},
             "values": {"counts": {"a": s, "b": 2 * s}, "sums": {"a": 1.5 * s}}} for s in range(1, 6)]
    budget = np.array([10**12, 10**12, 0, 0, 0, 0], dtype=np.int64)
    users = [UserBudget(user="u", halted=False, spent=np.zeros(6, dtype=np.int64), budget=budget)]
    ctx = plots.PlotContext(cfg=cfg, events=[], users=users, default_budget=budget)
    notes = plots.draw(str(tmp_path / "p.png"), [{"id": "s", "kind": "continual_sums"}], {"s": recs}, ctx,
                       ["zcdp"], "t")
    assert notes == [] and (tmp_path / "p.png").stat().st_size > 10_000
