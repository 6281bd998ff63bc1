"""Review 10, finding 5b: a config path that is not a readable TOML file — a directory, non-UTF-8 bytes, arrays
nested thousands deep — gives ONE line naming the file and the problem (it was an IsADirectoryError /
UnicodeDecodeError / RecursionError traceback from ``config check``, ``run --config`` and ``demo --config``),
and a TOML syntax error names the file once (it said ``f.toml: f.toml: not valid TOML``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from streamdp.cli.main import main


def _files(tmp_path) -> dict:
    d = tmp_path / "adir"
    d.mkdir()
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"\xff\xfe[service]\nwindow_seconds = 60\n")
    latin1 = tmp_path / "latin1.toml"
    latin1.write_bytes('[service]\nwindow_seconds = 60\n[[query]]\nid = "caf\xe9"\n'.encode("latin-1"))
    syn = tmp_path / "syn.toml"
    syn.write_text("[service\nwindow_seconds = 1\n")
    deep = tmp_path / "deep.toml"
    deep.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    return {"directory": (d, "is a directory, not a TOML config file"),
            "non-UTF-8": (binary, "not valid TOML: not UTF-8 text"),
            "latin-1": (latin1, "not valid TOML: not UTF-8 text"),
            "syntax": (syn, "not valid TOML: Expected ']'"),
            "deep": (deep, "not valid TOML: arrays or tables nested too deeply"),
            "missing": (tmp_path / "nope.toml", "config file not found")}


CASES = ("directory", "non-UTF-8", "latin-1", "syntax", "deep", "missing")


@pytest.mark.parametrize("case", CASES)
def test_config_check_reports_an_unreadable_file_in_one_line(tmp_path, capsys, case):
    path, message = _files(tmp_path)[case]
    assert main(["config", "check", str(path)]) == 1
    err = capsys.readouterr().err
    assert err == f"streamdp: error: {path}: {message}" + err.split(message, 1)[1]
    assert err.count(str(path)) == 1, err  # the path once
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("case", CASES)
def test_run_config_reports_an_unreadable_file_in_one_line(tmp_path, capsys, monkeypatch, case):
    import streamdp.cli.service as service

    def started(*a, **k):
        raise AssertionError("a store was opened for an unreadable config")

    monkeypatch.setattr(service, "open_store_retrying", started)
    path, message = _files(tmp_path)[case]
    assert main(["run", "--config", str(path), "--store", "redis://127.0.0.1:1/0", "--store-wait", "0"]) == 2
    err = capsys.readouterr().err
    assert f"invalid configuration: {path}: {message}" in err and err.count(str(path)) == 1
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("case", ("directory", "non-UTF-8"))
def test_demo_config_reports_an_unreadable_file_in_one_line(tmp_path, capsys, case):
    path, message = _files(tmp_path)[case]
    assert main(["demo", "--config", str(path), "--limit", "10", "--out", str(tmp_path / "o"), "--no-plot",
                 "--quiet"]) != 0
    err = capsys.readouterr().err
    assert f"{path}: {message}" in err and len(err.strip().splitlines()) == 1


def test_the_reviewers_directory_case_without_a_traceback(tmp_path):
    r = subprocess.run([sys.executable, "-m", "streamdp", "config", "check", str(tmp_path)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr == f"streamdp: error: {tmp_path}: is a directory, not a TOML config file\n"


def test_a_field_error_still_names_the_file_once(tmp_path, capsys):
    """Control: errors inside a readable file keep the ``FILE: field: …`` form."""
    p = tmp_path / "f.toml"
    p.write_text('[service]\nwindow_seconds = 0\norigin = 0\n[[query]]\nid = "q"\nkind = "continual_counts"\n'
                 'sigma = 1.0\n')
    assert main(["config", "check", str(p)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"streamdp: error: {p}: service.window_seconds: must be ≥") and err.count(str(p)) == 1
