"""``[kafka] stage_a``: ``"forward"`` (the default: the staged topology's stage A parses and forwards events) or
``"admit"`` (the split: stage A admits and sends per-item counts — the kinds with halves, no idle timeout yet).
``config check`` and ``streamdp run`` refuse a split configuration with another kind, naming the supported ones;
the split's internal topics take part in the topic-name checks."""

from __future__ import annotations

import pytest

from streamdp.cli.main import main
from streamdp.config.kinds import ConfigError
from streamdp.config.loader import parse_config

SERVICE = {"window_seconds": 60.0, "origin": 0.0}
CC = {"id": "cc", "kind": "continual_counts", "sigma": 1.0}
SUMS = {"id": "sums", "kind": "continual_sums", "sigma": 1.0}
GM = {"id": "gm", "kind": "grid_means", "cells": "item", "upper": 120.0, "rho": 0.125, "m_ub": 1,
      "delta_cell": 1e-8}


def _parse(queries, service=None, **kafka):
    return parse_config({"service": {**SERVICE, **(service or {})}, "kafka": kafka, "query": queries},
                        log_warnings=False)


def test_the_default_is_forward_and_admit_takes_the_count_kinds():
    assert _parse([CC]).kafka["stage_a"] == "forward"
    cfg = _parse([CC, {"id": "tk", "kind": "top_k", "epsilon": 1.0, "delta": 1e-6, "k": 2, "kbar": 3, "k_star": 9},
                  {"id": "h", "kind": "window_histogram", "epsilon": 1.0, "delta": 1e-6}], stage_a="admit")
    assert cfg.kafka["stage_a"] == "admit"


def test_admit_takes_every_kind():
    _parse([CC, GM], stage_a="admit")  # every kind has its halves (count_halves.SUPPORTED_KINDS)


def test_admit_refuses_a_kind_without_halves_naming_the_supported_ones(monkeypatch):
    """The guard for a kind added without halves (every kind has them today: SUPPORTED_KINDS is cut here)."""
    import streamdp.engine.count_halves as halves

    monkeypatch.setattr(halves, "SUPPORTED_KINDS", ("window_histogram", "top_k", "continual_counts"))
    _parse([CC, GM])  # forward: every kind
    with pytest.raises(ConfigError, match=r"kafka\.stage_a = \"admit\" supports the kinds window_histogram, "
                                          r"top_k, continual_counts only; not: 'gm' \(grid_means\)"):
        _parse([CC, GM], stage_a="admit")


def test_admit_refuses_an_idle_timeout():
    with pytest.raises(ConfigError, match=r"does not support service\.idle_timeout"):
        _parse([CC], service={"idle_timeout": 30.0}, stage_a="admit")


def test_an_unknown_stage_a_is_refused():
    with pytest.raises(ConfigError, match=r"kafka\.stage_a"):
        _parse([CC], stage_a="split")


def test_the_split_topics_must_not_collide():
    # with internal_prefix "x." the parts topic is "x.parts": an input topic of that name is refused
    with pytest.raises(ConfigError, match=r"kafka\.internal_prefix \(parts\): topic 'x\.parts' is also"):
        _parse([CC], stage_a="admit", internal_prefix="x.", input_topic="x.parts")
    _parse([CC], internal_prefix="x.", input_topic="x.parts")  # forward: no parts topic


def test_config_check_refuses_the_split_with_an_idle_timeout(tmp_path, capsys):
    p = tmp_path / "c.toml"
    p.write_text('[service]\nwindow_seconds = 60.0\norigin = 0.0\nidle_timeout = 30.0\n[kafka]\nstage_a = "admit"\n'
                 '[[query]]\nid = "gm"\nkind = "grid_means"\ncells = "item"\nupper = 120.0\nrho = 0.125\n'
                 'm_ub = 1\ndelta_cell = 1e-8\n')
    assert main(["config", "check", str(p)]) == 1
    err = capsys.readouterr()
    assert "does not support service.idle_timeout" in err.out + err.err
