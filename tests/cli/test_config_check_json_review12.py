"""``streamdp config check --json`` answers on stdout for an invalid file too (2026-11-23 operator review: a machine
reader got nothing to parse), with exit status 1 and the message on stderr as before."""

from __future__ import annotations

import json

from streamdp.cli.main import main


def test_an_invalid_config_gives_json_with_ok_false(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('[service]\nwindow_seconds = 60.0\norigin = 0.0\n\n[[query]]\nid = "c"\nkind = "continual_counts"\n'
                   'sigma = -1.0\n')
    assert main(["config", "check", "--json", str(bad)]) == 1
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert doc["ok"] is False and "sigma" in doc["error"] and str(bad) in doc["error"]
    assert "sigma" in err
    assert main(["config", "check", "--json", str(tmp_path / "missing.toml")]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False and "missing.toml" in doc["error"]
