"""The window origin is configured, never derived from events (privacy review of 2026-11-23, F2).

A derived origin (the first batch's earliest time, rounded down) put one user's event time into every published
record: one early event moved each window's bounds, its number, the epochs and the set of windows published, at
no charge. Now every path refuses to start without it and names the field."""

import math

import orjson
import pytest

from streamdp.accounting.cost import budget_vector
from streamdp.cli.main import main
from streamdp.config.kinds import ConfigError
from streamdp.config.loader import parse_config
from streamdp.engine.engine import EngineConfig, ReleaseEngine
from streamdp.engine.pipeline import EmbeddedPipeline
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.outputs.sinks import ListSink

Q = [{"id": "cc", "kind": "continual_counts", "sigma": 5.0}]


def test_the_loader_requires_the_origin_and_says_why():
    with pytest.raises(ConfigError, match=r"service\.origin: is required \(the event time where window 1 starts"):
        parse_config({"service": {"window_seconds": 100.0}, "query": Q})


def test_config_check_refuses_a_file_without_origin(tmp_path, capsys):
    p = tmp_path / "c.toml"
    p.write_text('[service]\nwindow_seconds = 100\n[[query]]\nid = "cc"\nkind = "continual_counts"\nsigma = 5.0\n')
    assert main(["config", "check", str(p)]) == 1
    err = capsys.readouterr().err
    assert "service.origin: is required" in err and "public time" in err and "Traceback" not in err


@pytest.mark.parametrize("origin", [None, math.nan, math.inf])
def test_the_engine_refuses_a_missing_or_infinite_origin(origin):
    with pytest.raises(ValueError, match="origin"):
        ReleaseEngine(EngineConfig(window_seconds=100.0, origin=origin), [], MemoryBudgetStore())


def _records(with_early: bool):
    cfg = parse_config({"service": {"window_seconds": 100.0, "horizon": 4, "origin": 1_000_000.0,
                                    "unsafe_test_seed": 3},
                        "budget": {"zcdp_rho": 10.0, "zcdp_delta": 1e-3}, "query": [dict(q) for q in Q]})
    eng = ReleaseEngine(cfg.engine_config(), cfg.build_queries(), MemoryBudgetStore(budget_vector(cfg.budget)))
    sink = ListSink()
    evs = [orjson.dumps({"user": f"u{i}", "ts": 1_000_000 + 10 * i, "items": ["a"]}) for i in range(20)]
    if with_early:  # one event 5 windows before the others, before the origin
        evs.insert(0, orjson.dumps({"user": "early", "ts": 1_000_000 - 499, "items": ["zzz"]}))
    p = EmbeddedPipeline(eng, [sink])
    p.run([evs])
    return [(r.key, r.to_dict()["window"]) for r in sink.records], [d.reason for d in sink.dead]


def test_one_early_event_moves_no_window():
    with_early, dead = _records(True)
    without, none = _records(False)
    assert dead == ["before_origin"] and none == []
    assert [k for k, _ in with_early] == [k for k, _ in without]  # same keys (query/epoch/window), same bounds
    assert [w for _, w in with_early] == [w for _, w in without]
    assert with_early[0][1]["start"] == 1_000_000.0
