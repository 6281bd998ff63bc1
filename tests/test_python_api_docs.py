"""docs/python_api.md runs: every ```python block of the page, in order, in one namespace (a block that raises
fails the test); and the surface it documents is what ``streamdp`` exports."""

from __future__ import annotations

import os
import re

import streamdp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "python_api.md")


def _blocks() -> list[str]:
    with open(PAGE, encoding="utf-8") as f:
        return re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)


def test_every_example_of_the_page_runs():
    blocks = _blocks()
    assert len(blocks) >= 6
    ns: dict = {}
    for i, code in enumerate(blocks):
        try:
            exec(compile(code, f"{PAGE} block {i + 1}", "exec"), ns)  # noqa: S102 — our own docs
        except Exception as e:  # pragma: no cover - the failure message names the block
            raise AssertionError(f"docs/python_api.md block {i + 1} failed: {type(e).__name__}: {e}") from e
    assert ns["records"] and ns["noisy_counts"].dtype.kind == "i"


def test_the_documented_names_are_exported_and_nothing_leaky_is():
    names = set(streamdp.__all__)
    assert {"Pipeline", "InvalidEvent", "RejectedEvents", "ConfigError", "MemoryBudgetStore", "RedisBudgetStore",
            "Cost", "zcdp_to_dp", "cks_epsilon", "gaussian_exact_epsilon", "cgp_to_gp_epsilon", "GaussianMechanism",
            "LaplaceMechanism", "secure_generator", "query_kinds"} <= names
    for n in names - {"__version__"}:
        assert getattr(streamdp, n) is not None
    text = open(PAGE, encoding="utf-8").read()
    for n in ("Pipeline", "InvalidEvent", "RejectedEvents", "query_kinds", "Cost", "zcdp_to_dp",
              "GaussianMechanism", "LaplaceMechanism", "secure_generator", "MemoryBudgetStore", "RedisBudgetStore"):
        assert f"streamdp.{n}" in text, n
    # no float-on-float release and no way to pass a seeded generator silently
    assert not any(n.lower().startswith(("samplers", "unsafe")) for n in names)


def test_a_library_pipeline_in_dead_letter_mode_keeps_going():
    p = streamdp.Pipeline({"service": {"window_seconds": 60, "origin": 0},
                           "budget": {"zcdp_rho": 1.0, "zcdp_delta": 1e-5},
                           "query": [{"id": "c", "kind": "continual_counts", "sigma": 2.0}]},
                          on_bad_event="dead_letter")
    p.feed([b"not json", {"user": "a", "ts": 1.0, "items": ["x"]}, {"user": "b", "ts": 61.0}])
    p.feed([{"user": "a", "ts": 2.0, "items": ["x"]}])  # late: window 1 closed
    assert [d.reason for d in p.dead_letters] == ["malformed_json", "late"]
    assert [d.index for d in p.dead_letters] == [0, 3]  # positions in the whole input
