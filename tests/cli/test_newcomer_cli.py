"""The CLI as a newcomer meets it (issue 28): --version, help texts without raw markup, the query-kind listing at
≤ 100 columns and one kind in full, privacy cost by query-kind name with ε, the demo on your own events file, a
demo re-run refused with its own exit code and no half-written output, no progress frames off a terminal, and the
honest demo's summary (budget, halted share) and plot (one drawn panel per query, every example)."""

from __future__ import annotations

import json
import math
import os

import pytest

from streamdp.cli.main import main

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(capsys, *argv) -> tuple[int, str, str]:
    try:
        rc = main(list(argv))
    except SystemExit as e:  # argparse: --help, --version, usage errors
        rc = e.code
    out, err = capsys.readouterr()
    return rc, out, err


# ---------------------------------------------------------------------------------------------- help, version
def test_version(capsys):
    from importlib.metadata import version

    rc, out, _ = run(capsys, "--version")
    assert rc == 0 and out.strip() == f"streamdp {version('streamdp')}"


@pytest.mark.parametrize("argv", [["--help"], ["budget", "--help"], ["privacy", "--help"], ["queries", "--help"],
                                  ["config", "--help"], ["demo", "--help"], ["tail", "--help"], ["run", "--help"]])
def test_help_has_a_description_and_no_raw_markup(capsys, argv):
    rc, out, _ = run(capsys, *argv)
    assert rc == 0
    usage, _, rest = out.partition("\n\n")
    assert rest.strip() and not rest.lstrip().startswith(("positional", "options")), "no description"
    for raw in ("``", ":mod:", ":func:", "::\n", "DESIGN" + ".md", "../" + "shared"):
        assert raw not in out, raw


# ------------------------------------------------------------------------------------------------ queries kinds
def test_queries_kinds_is_a_short_list_within_100_columns(capsys):
    from streamdp.config.kinds import kinds

    rc, out, _ = run(capsys, "queries", "kinds")
    assert rc == 0
    lines = out.splitlines()
    assert max(len(x) for x in lines) <= 100
    assert len(lines) <= len(kinds()) + 12
    for k in kinds():
        assert any(x.split()[:1] == [k] for x in lines), k


@pytest.mark.parametrize("kind", ["top_k", "continual_counts", "grid_means", "range_counts"])
def test_queries_kinds_kind_shows_one_kind_in_full(capsys, kind):
    from streamdp.config.kinds import kinds

    rc, out, _ = run(capsys, "queries", "kinds", kind)
    assert rc == 0 and out.startswith(f"{kind}  [")
    assert max(len(x) for x in out.splitlines()) <= 100
    for p in kinds()[kind].params:
        assert f"  {p.name} (" in out, p.name
    rc, out, _ = run(capsys, "queries", "kinds", kind, "--json")
    assert rc == 0 and json.loads(out) == kinds()[kind].describe()


def test_queries_kinds_json_lists_every_kind_and_an_unknown_kind_is_one_line(capsys):
    from streamdp.config.kinds import kinds

    rc, out, _ = run(capsys, "queries", "kinds", "--json")
    assert rc == 0 and json.loads(out) == [k.describe() for k in kinds().values()]
    rc, out, err = run(capsys, "queries", "kinds", "nope")
    assert rc == 2 and "unknown query kind 'nope'" in err and "top_k" in err and len(err.splitlines()) == 1


# ---------------------------------------------------------------------------------------------- privacy cost
ALIASES = [  # (kind name, alias, parameters)
    ("continual_counts", "binary-tree", ["--sigma", "3", "--horizon", "128", "--delta-item", "1e-6", "--cap", "1"]),
    ("top_k", "gumbel-topk", ["--epsilon", "1", "--delta", "1e-6", "--k", "3", "--kbar", "10"]),
    ("window_histogram", "gaussian-histogram", ["--epsilon", "0.5", "--delta", "1e-7", "--l0", "4", "--linf", "1"]),
    ("window_histogram", "laplace-histogram", ["--epsilon", "0.5", "--delta", "1e-7", "--l0", "4", "--linf", "1",
                                               "--noise", "laplace"]),
    ("window_histogram", "topkbar-gaussian", ["--epsilon", "0.5", "--delta", "1e-7", "--l0", "4", "--linf", "1",
                                              "--kbar", "5"]),
]


@pytest.mark.parametrize("kind, alias, params", ALIASES, ids=[a for _, a, _ in ALIASES])
def test_privacy_cost_takes_the_kind_name_and_the_old_name(capsys, kind, alias, params):
    rc, out, err = run(capsys, "privacy", "cost", "--mechanism", kind, *params, "--json")
    assert rc == 0, err
    by_kind = json.loads(out)
    alias_params = [p for p in params if p != "--noise" and p != "laplace"] if alias != "laplace-histogram" else \
        params[:-2]
    rc, out, err = run(capsys, "privacy", "cost", "--mechanism", alias, *alias_params, "--json")
    assert rc == 0, err
    by_alias = json.loads(out)
    for k in ("rho", "delta", "threshold", "epsilon_cks", "target_delta"):
        assert by_kind[k] == by_alias[k], k


def test_privacy_cost_always_prints_epsilon_at_the_mechanisms_delta_plus_1e6(capsys):
    params = ["--sigma", "3", "--horizon", "128", "--delta-item", "1e-6", "--cap", "1"]
    rc, out, _ = run(capsys, "privacy", "cost", "--mechanism", "continual_counts", *params, "--json")
    d = json.loads(out)
    levels = math.ceil(math.log2(129))
    assert d["rho"] == pytest.approx(levels / (2 * 9)) and d["delta"] == 1e-6
    assert d["target_delta"] == pytest.approx(2e-6)
    # the same ε as `privacy convert` of (ρ, δ′ = 1e-6), a separate path through the CLI
    rc, out, _ = run(capsys, "privacy", "convert", "--rho", repr(d["rho"]), "--delta", "1e-6", "--json")
    assert d["epsilon_cks"] == pytest.approx(json.loads(out)["epsilon_cks"], rel=1e-9)
    assert d["rho"] < d["epsilon_cks"] < d["rho"] + 2 * math.sqrt(d["rho"] * math.log(1e6))  # below Bun–Steinke
    rc, out, _ = run(capsys, "privacy", "cost", "--mechanism", "continual_counts", *params)
    assert rc == 0 and "epsilon    " in out and "at total delta 2e-06" in out
    rc, _, err = run(capsys, "privacy", "cost", "--mechanism", "continual_counts", *params, "--noise", "laplace")
    assert rc == 2 and "gaussian or discrete-gaussian" in err


# ---------------------------------------------------------------------------------------- the demo, your file
def _events_file(path, n=600, bad_at=(3,)) -> None:
    lines = []
    for i in range(n):
        lines.append(json.dumps({"user": f"u{i % 50}", "ts": 1_700_000_000 + 20 * i, "items": [f"i{i % 7}"]}))
    for k in bad_at:
        lines.insert(k - 1, "{not json")
    lines.insert(5, "")  # a blank line is no event (as for `streamdp replay FILE`)
    path.write_text("\n".join(lines) + "\n")


def test_demo_on_your_own_file_dead_letters_carry_the_file_and_line(tmp_path, capsys):
    f = tmp_path / "events.jsonl"
    _events_file(f, bad_at=(3,))
    out = tmp_path / "out"
    rc, _, err = run(capsys, "demo", "--data", str(f), "--origin", "2023-11-14T22:00:00Z", "--out", str(out),
                     "--no-plot", "--quiet", "--unsafe-test-seed", "4")
    assert rc == 0, err
    (dead,) = [json.loads(x) for x in (out / "dead_letters.jsonl").read_text().splitlines()]
    assert (dead["topic"], dead["offset"], dead["reason"]) == (str(f), 3, "malformed_json")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["events"] == 601 and summary["data"] == str(f) and summary["windows"] >= 3
    assert (out / "releases" / "item_counts.jsonl").exists()


def test_demo_file_needs_an_origin_and_takes_it_over_the_config(tmp_path, capsys):
    f = tmp_path / "events.jsonl"
    _events_file(f, bad_at=())
    rc, _, err = run(capsys, "demo", "--data", str(f), "--out", str(tmp_path / "o"), "--no-plot")
    assert rc == 2 and "needs --origin" in err and not (tmp_path / "o").exists()
    cfg = tmp_path / "c.toml"  # no origin in the file: --origin gives it
    cfg.write_text("[service]\nwindow_seconds = 600.0\n[budget]\nzcdp_rho = 5.0\nzcdp_delta = 1e-4\n"
                   "[[query]]\nid = 'h'\nkind = 'window_histogram'\nepsilon = 1.0\n")
    rc, _, err = run(capsys, "demo", "--data", str(f), "--config", str(cfg), "--origin", "1700000000",
                     "--out", str(tmp_path / "o2"), "--no-plot", "--quiet")
    assert rc == 0, err
    first = json.loads((tmp_path / "o2" / "releases" / "h.jsonl").read_text().splitlines()[0])
    assert first["window"]["start"] == 1_700_000_000.0 and first["window"]["end"] == 1_700_000_600.0
    rc, _, err = run(capsys, "demo", "--data", str(f), "--origin", "yesterday", "--out", str(tmp_path / "o3"))
    assert rc == 2 and "ISO date" in err


def test_demo_reads_standard_input(tmp_path, capsys, monkeypatch):
    import io
    import sys

    payload = b"".join(json.dumps({"user": "u1", "ts": 1_700_000_000 + i, "items": ["a"]}).encode() + b"\n"
                       for i in range(30))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(payload)))
    rc, _, err = run(capsys, "demo", "--data", "-", "--origin", "1700000000", "--out", str(tmp_path / "o"),
                     "--no-plot", "--quiet")
    assert rc == 0, err
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["data"] == "stdin"


def test_a_demo_rerun_is_refused_with_its_own_code_and_leaves_no_output(tmp_path, capsys):
    """A second run over windows the store already released exits 7 (not 2, the usage code). Before, it created
    --out with an empty releases/ folder and an empty dead_letters.jsonl; now nothing is written, and an existing
    --out keeps the earlier run's files byte for byte."""
    st = tmp_path / "store.json"
    argv = ["demo", "--data", "synthetic", "--users", "200", "--items", "50", "--windows", "3", "--rate", "400",
            "--store", str(st), "--no-plot", "--quiet"]
    rc, _, err = run(capsys, *argv, "--out", str(tmp_path / "o1"))
    assert rc == 0, err
    before = {p: p.read_bytes() for p in (tmp_path / "o1").rglob("*") if p.is_file()}
    rc, _, err = run(capsys, *argv, "--out", str(tmp_path / "o2"))
    assert rc == 7 and "already holds a different release" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o2").exists()
    rc, _, _ = run(capsys, *argv, "--out", str(tmp_path / "o1"))
    assert rc == 7
    assert {p: p.read_bytes() for p in (tmp_path / "o1").rglob("*") if p.is_file()} == before
    assert sorted(n for n in os.listdir(tmp_path) if not n.endswith(".lock")) == ["o1", "store.json"]  # no staging


def test_no_progress_frames_when_stderr_is_not_a_terminal(tmp_path, capsys):
    rc, out, err = run(capsys, "demo", "--data", "synthetic", "--users", "100", "--items", "20", "--windows", "3",
                       "--rate", "300", "--no-plot", "--out", str(tmp_path / "o"))
    assert rc == 0
    assert "\r" not in err and "ev/s]" not in err  # tqdm's frames
    assert out.count("window ") >= 3  # the per-window lines stay


def test_the_synthetic_defaults_keep_most_users_admitted_and_the_summary_says_so(tmp_path, capsys):
    rc, _, err = run(capsys, "demo", "--data", "synthetic", "--no-plot", "--quiet", "--out", str(tmp_path / "o"),
                     "--unsafe-test-seed", "1")
    assert rc == 0, err
    s = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert s["users"] == 20000 and s["halted_share"] == pytest.approx(s["halted_users"] / s["users"])
    assert 0 < s["halted_share"] < 0.15  # was 20,000 of 20,000 halted
    assert s["budget"] == {"zcdp": "zcdp: ρ = 4, δ = 0.0001"} and s["complete"] is True
