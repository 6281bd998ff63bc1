"""``streamdp demo --store FILE``: what the demo publishes is charged and logged in the file first; an existing
store keeps its default budget; bad flags and a re-run on a used store get one-line errors (review of
2026-11-23, findings 1, 2, 4 and 5)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from streamdp.accounting.cost import Cost, budget_vector
from streamdp.cli.main import main
from streamdp.engine.pipeline import EmbeddedPipeline
from streamdp.outputs import sinks

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")


def _published(out) -> list[bytes]:
    rel = out / "releases"
    if not rel.exists():
        return []
    return [line for p in sorted(rel.glob("*.jsonl")) for line in p.read_bytes().splitlines() if line]


def test_an_interrupted_demo_leaves_every_published_release_charged_and_logged_in_the_file(tmp_path, monkeypatch,
                                                                                           capsys):
    """The demo stops (Ctrl-C) after 24 published records. Before the fix the file store was written only at the
    end: the file did not exist, and a second run published the same windows again with fresh noise."""
    st, out1, out2 = tmp_path / "store.json", tmp_path / "o1", tmp_path / "o2"
    write = sinks.JsonlSink.write
    calls = {"n": 0}

    def interrupted(self, rec):
        calls["n"] += 1
        if calls["n"] > 24:
            raise KeyboardInterrupt
        write(self, rec)

    monkeypatch.setattr(sinks.JsonlSink, "write", interrupted)
    assert main(["demo", "--store", str(st), "--out", str(out1), "--limit", "60000", "--batch", "3000",
                 "--quiet", "--no-plot"]) == 130
    monkeypatch.setattr(sinks.JsonlSink, "write", write)
    published = _published(out1)
    assert len(published) == 24
    saved = json.loads(st.read_text())
    log = {k: v.encode("latin-1") for k, v in saved["releases"].items()}
    for line in published:
        key = json.loads(line)["key"]
        assert log.get(key) == line, key  # the very bytes published are in the file's release log
    assert saved["users"] and any(s > 0 for row in saved["spent"] for s in row[:1])  # and their charges
    capsys.readouterr()

    # the re-run finds the logged releases: it refuses, in one line, and publishes nothing
    assert main(["demo", "--store", str(st), "--out", str(out2), "--limit", "60000", "--quiet", "--no-plot"]) == 7
    err = capsys.readouterr().err
    assert "already holds a different release for" in err and "Traceback" not in err
    assert _published(out2) == []


def test_before_publish_runs_before_the_sinks_see_a_window(tmp_path):
    from streamdp.engine.engine import EngineConfig, ReleaseEngine
    from streamdp.engine.queries.continual_counts import ContinualCounts
    from streamdp.filter import MemoryBudgetStore

    order: list[str] = []

    class Sink(sinks.ListSink):
        def write(self, rec):
            order.append("write")
            super().write(rec)

    store = MemoryBudgetStore(budget_vector(Cost(zcdp_rho=100.0, zcdp_delta=1.0)))
    eng = ReleaseEngine(EngineConfig(window_seconds=10.0, origin=0.0, horizon=8, unsafe_test_seed=1),
                        [ContinualCounts("c", sigma=1.0, horizon=8, delta_item=1e-6, max_items_per_window=2)], store)
    pipe = EmbeddedPipeline(eng, [Sink()], before_publish=lambda: order.append("save"))
    ev = [json.dumps({"user": f"u{i % 7}", "ts": 1.0 + 3.0 * i, "items": ["a"]}).encode() for i in range(20)]
    pipe.run([ev[:8], ev[8:]])
    assert order and order[0] == "save" and order.count("write") >= 5
    # every run of writes follows a save
    assert all(order[i - 1] in ("save", "write") for i in range(1, len(order)))
    assert "save" in order[:order.index("write")]


def test_an_existing_store_keeps_its_default_budget(tmp_path, capsys):
    """Before the fix the demo set the store's default to its configuration's [budget] (an audited
    `set-default` by "streamdp demo"): an operator's default was overwritten and users who had spent in a notion
    the new configuration leaves at 0 were halted for good."""
    st = tmp_path / "store.json"
    assert main(["demo", "--store", str(st), "--out", str(tmp_path / "a"), "--limit", "1000", "--quiet",
                 "--no-plot"]) == 0
    from streamdp.cli.demo import DEFAULT_NYC_CONFIG

    fresh = json.loads(st.read_text())["default"]  # a new store starts from the configuration's budget
    assert fresh == budget_vector(Cost(**{k: DEFAULT_NYC_CONFIG["budget"].get(k, 0.0) for k in
                                          ("zcdp_rho", "zcdp_delta", "cgp_rho")})).tolist()
    # (--force: the demo's users spent more than 2, see tests/cli/test_budget_safety.py)
    assert main(["budget", "set-default", "--rho", "2", "--yes", "--force", "--store", str(st), "--reason",
                 "tighten"]) == 0
    kept = json.loads(st.read_text())["default"]
    capsys.readouterr()
    assert main(["demo", "--config", os.path.join(EXAMPLES, "emd.toml"), "--store", str(st), "--out",
                 str(tmp_path / "b"), "--limit", "1000", "--quiet", "--no-plot"]) == 0
    err = capsys.readouterr().err
    d = json.loads(st.read_text())
    assert d["default"] == kept and kept != fresh
    assert not any(e.get("actor") == "streamdp demo" for e in d["ledger"])
    assert "keeps its default budget (zcdp_rho=2, zcdp_delta=0.0001)" in err
    assert "emd_alpha=300" in err


@pytest.mark.parametrize("argv,msg", [
    (["--data", "synthetic", "--users", "0"], "argument --users: expected a positive integer"),
    (["--data", "synthetic", "--items", "0"], "argument --items: expected a positive integer"),
    (["--data", "synthetic", "--rate", "-5"], "argument --rate: expected a positive integer"),
    (["--data", "synthetic", "--windows", "0"], "argument --windows: expected a positive integer"),
    (["--batch", "0"], "argument --batch: expected a positive integer"),
])
def test_demo_sizes_must_be_positive(argv, msg, capsys):
    with pytest.raises(SystemExit) as e:
        main(["demo", *argv])
    assert e.value.code == 2 and msg in capsys.readouterr().err


def test_demo_bad_paths_and_seed_are_one_line_errors(tmp_path, capsys):
    not_a_dir = tmp_path / "file.txt"
    not_a_dir.write_text("x")
    empty_json, not_json = tmp_path / "empty.json", tmp_path / "bad.json"
    empty_json.write_text("{}")
    not_json.write_text("not json")
    cases = [
        (["--out", str(not_a_dir)], "exists and is not a folder"),
        (["--config", os.path.join(EXAMPLES, "service.toml"), "--unsafe-test-seed", "-1"],
         "--unsafe-test-seed must be a non-negative integer"),
        (["--store", str(empty_json), "--out", str(tmp_path / "o1")], "is not a streamdp budget store file"),
        (["--store", str(not_json), "--out", str(tmp_path / "o2")], "is not a streamdp budget store file (not JSON"),
    ]
    for argv, msg in cases:
        assert main(["demo", "--limit", "200", "--quiet", "--no-plot", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert msg in err and "Traceback" not in err, (argv, err)
    assert not_a_dir.read_text() == "x" and empty_json.read_text() == "{}"  # nothing overwritten


def test_demo_prints_the_configuration_budget_warnings_once(tmp_path, capsys):
    """A configuration without [budget] halts every user at their first event: the demo says so, once, as a
    warning of its own (not through Python's fallback log handler)."""
    cfg = tmp_path / "nobudget.toml"
    cfg.write_text('[service]\nwindow_seconds = 86400.0\norigin = 1356998400.0\n\n'
                   '[[query]]\nid = "c"\nkind = "continual_counts"\nsigma = 3.0\n')
    assert main(["demo", "--config", str(cfg), "--limit", "2000", "--out", str(tmp_path / "o"), "--quiet",
                 "--no-plot"]) == 0
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if "zcdp_rho is 0" in x]
    assert len(lines) == 1 and lines[0].startswith("warning: query[0] 'c' (continual_counts")
