"""``continual_sums`` configuration: every invalid setting fails at start with a message naming the field."""

from __future__ import annotations

import pytest

from streamdp.config.kinds import ConfigError
from streamdp.config.loader import parse_config


def cfg(horizon=16, **q):
    table = {"id": "s", "kind": "continual_sums", "sigma": 2.0, **q}
    return {"service": {"window_seconds": 60.0, "origin": 0.0, "horizon": horizon}, "query": [table]}


@pytest.mark.parametrize("q, horizon, field, words", [
    ({"value_range": [0.0, 1.0]}, 16, "value_sigma", "required with value_range"),
    ({"value_sigma": 1.0}, 16, "value_range", "required with value_sigma"),
    ({"value_range": [3.0, 1.0], "value_sigma": 1.0}, 16, "value_range", "lo must be ≤ hi"),
    ({"value_range": [0.0, "x"], "value_sigma": 1.0}, 16, "value_range", "two finite numbers"),
    ({"value_range": [0.0], "value_sigma": 1.0}, 16, "value_range", "two finite numbers"),
    ({"value_range": [0.0, 1.0], "value_sigma": -1.0}, 16, "value_sigma", "> 0"),
    ({"max_keys_per_window": 40}, 16, "max_keys_per_window", "≤ max_contributions"),
    ({"max_per_key": 40}, 16, "max_per_key", "≤ max_contributions"),
    ({"max_contributions": 0}, 16, "max_contributions", "≥ 1"),
    ({"noise": "sqrt"}, 16, "noise", "one of"),
    ({"estimator": "optimal"}, 16, "estimator", "only used by noise = 'tree'"),
    ({"noise": "tree", "blt_buffers": 3}, 16, "blt_buffers", "only used by noise = 'blt'"),
    ({}, 5000, "noise", "up to 4096"),
    ({"delta_key": 0.9}, 1, "delta_key", "< 1/2"),
    ({"sigma": 1e-9}, 16, "sigma", "too small"),
    ({"sigma": 0.0}, 16, "sigma", "> 0"),
    ({"unknown": 1}, 16, "unknown", "unknown parameter"),
])
def test_bad_settings_name_the_field(q, horizon, field, words):
    with pytest.raises(ConfigError) as e:
        parse_config(cfg(horizon=horizon, **q), log_warnings=False)
    msg = str(e.value)
    assert f"query[0].{field}" in msg or f"{field}:" in msg, msg
    assert words in msg, msg


def test_good_settings_build_and_tree_horizons_are_unbounded():
    parse_config(cfg(value_range=[-1, 1], value_sigma=0.5, max_per_key=2, max_keys_per_window=4), log_warnings=False)
    parse_config(cfg(horizon=5000, noise="tree", estimator="optimal"), log_warnings=False)
