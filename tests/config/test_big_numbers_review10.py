"""Review 10, finding 5a: a TOML integer of hundreds of digits (tomllib has no bound) is a ConfigError naming the
field, not an ``OverflowError`` traceback from ``float(value)`` — in ``[service]``, ``[budget]``, ``[kafka]``, a
query's scalar parameters and numbers nested in a query's list or table parameters (features, region, points)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from streamdp.cli.main import main
from streamdp.config.kinds import ConfigError
from streamdp.config.loader import parse_config

BIG = 10**400
US = [24.0, 50.0, -125.0, -66.0]


def _raw(service=None, budget=None, kafka=None, query=None) -> dict:
    raw = {"service": {"window_seconds": 60.0, "origin": 0.0, **(service or {})},
           "query": [query or {"id": "q", "kind": "continual_counts", "sigma": 3.0}]}
    if budget:
        raw["budget"] = budget
    if kafka:
        raw["kafka"] = kafka
    return raw


@pytest.mark.parametrize("raw,field", [
    (_raw(service={"window_seconds": BIG, "origin": 0.0}), "service.window_seconds"),
    (_raw(service={"window_seconds": -BIG, "origin": 0.0}), "service.window_seconds"),
    (_raw(service={"origin": BIG}), "service.origin"),
    (_raw(service={"allowed_lateness": BIG}), "service.allowed_lateness"),
    (_raw(service={"horizon": BIG}), "service.horizon"),
    (_raw(service={"unsafe_test_seed": BIG}), "service.unsafe_test_seed"),
    (_raw(budget={"zcdp_rho": BIG}), "budget.zcdp_rho"),
    (_raw(budget={"emd_delta": BIG}), "budget.emd_delta"),
    (_raw(kafka={"checkpoint_seconds": BIG}), "kafka.checkpoint_seconds"),
    (_raw(kafka={"partitions": BIG}), "kafka.partitions"),
    (_raw(kafka={"partitions": 2**63}), "kafka.partitions"),  # just past int64
    (_raw(query={"id": "q", "kind": "continual_counts", "sigma": BIG}), r"query\[0\].sigma"),
    (_raw(query={"id": "q", "kind": "continual_counts", "sigma": 3.0, "max_items_per_window": BIG}),
     r"query\[0\].max_items_per_window"),
    (_raw(query={"id": "q", "kind": "top_k", "epsilon": 1.0, "k_star": 2**64}), r"query\[0\].k_star"),
    (_raw(query={"id": "q", "kind": "emd_linear", "alpha": 1.0, "lipschitz": 2.0,
                 "features": {"A": [0.0, 0.0], "B": [BIG, 1.0]}}), r"query\[0\].features\['B'\]\[0\]"),
    (_raw(query={"id": "q", "kind": "geo_locations", "rho": 1.0, "region": [24.0, 50.0, -BIG, -66.0]}),
     r"query\[0\].region\[2\]"),
])
def test_a_huge_integer_is_a_config_error_naming_the_field(raw, field):
    with pytest.raises(ConfigError, match=rf"^{field}:") as e:
        parse_config(raw)
    assert len(str(e.value)) < 300  # the 400 digits are not echoed


def test_an_int64_parameter_at_the_bound_is_still_checked_by_its_kind():
    """Control: 2**63 - 1 passes the generic int check; the kind's own check decides (here: a cost too large)."""
    with pytest.raises(ConfigError, match=r"query\[0\]"):
        parse_config(_raw(query={"id": "q", "kind": "top_k", "epsilon": 1.0, "k": 2**63 - 1, "kbar": 2**63 - 1,
                                 "k_star": 2**63 - 1}))
    parse_config(_raw(kafka={"partitions": 2**31}))  # large but valid


def test_config_check_reports_the_reviewers_file_in_one_line(tmp_path):
    p = tmp_path / "bigint.toml"
    p.write_text("[service]\norigin = 0\nwindow_seconds = 1" + "0" * 400
                 + '\n[[query]]\nid = "c"\nkind = "continual_counts"\nsigma = 3.0\n')
    r = subprocess.run([sys.executable, "-m", "streamdp", "config", "check", str(p)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "service.window_seconds: must be a finite number" in r.stderr


def test_demo_config_with_a_huge_integer_is_one_line(tmp_path, capsys):
    p = tmp_path / "bigint.toml"
    p.write_text("[service]\nwindow_seconds = 60.0\norigin = 0\n[[query]]\nid = \"c\"\nkind = \"continual_counts\"\n"
                 "sigma = 3.0\nmax_items_per_window = 1" + "0" * 400 + "\n")
    assert main(["demo", "--config", str(p), "--limit", "10", "--out", str(tmp_path / "o"), "--no-plot",
                 "--quiet"]) != 0
    err = capsys.readouterr().err
    assert "query[0].max_items_per_window: must fit a 64-bit integer" in err
