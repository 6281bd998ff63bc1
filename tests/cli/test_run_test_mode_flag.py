"""``streamdp run`` takes test mode only from the command line (outside review of 2026-12-06: a seed left in a
configuration file put a worker in test mode — noise anyone can reproduce — with nothing on the command line or in
a deployment manifest to show it). A seed in the file is refused (exit 2, one line naming the setting and the
flag) unless ``--unsafe-test-seed`` is given too; ``--unsafe-test-seed`` alone takes the file's seed (and is refused
when the file has none); ``--unsafe-test-seed N`` sets N. The refusal comes before any store or broker is touched."""

from __future__ import annotations

import pytest

from streamdp.cli.main import main

CONFIG = """[service]
window_seconds = 60.0
origin = 0.0
{seed}
[budget]
zcdp_rho = 1.0
zcdp_delta = 1e-5

[[query]]
id = "c"
kind = "continual_counts"
sigma = 4.0
"""


def _config(tmp_path, seed: int | None) -> str:
    p = tmp_path / "c.toml"
    p.write_text(CONFIG.format(seed="" if seed is None else f"unsafe_test_seed = {seed}"))
    return str(p)


@pytest.fixture
def started(monkeypatch):
    """Stops ``run`` where it would open the store (after every command-line check), recording the config."""
    import streamdp.cli.service as service

    seen = {}

    def fake_open(url, *a, **kw):
        seen["opened"] = url
        raise SystemExit(0)

    monkeypatch.setattr(service, "open_store_retrying", fake_open)
    orig = service._test_mode_from_the_command_line

    def spy(args, cfg):
        orig(args, cfg)
        seen["seed"] = cfg.service["unsafe_test_seed"]

    monkeypatch.setattr(service, "_test_mode_from_the_command_line", spy)
    return seen


def test_a_seed_in_the_file_alone_is_refused(tmp_path, capsys, started):
    assert main(["run", "--config", _config(tmp_path, 7), "--store", "redis://127.0.0.1:1/0"]) == 2
    err = capsys.readouterr().err
    assert "service.unsafe_test_seed = 7" in err and "--unsafe-test-seed" in err and "NOT" in err
    assert "opened" not in started  # refused before the store is touched
    # the ingest role too: one rule for every role
    assert main(["run", "--role", "ingest", "--config", _config(tmp_path, 7)]) == 2
    assert "service.unsafe_test_seed = 7" in capsys.readouterr().err


def test_the_bare_flag_accepts_the_files_seed(tmp_path, started):
    with pytest.raises(SystemExit):
        main(["run", "--config", _config(tmp_path, 7), "--store", "redis://127.0.0.1:1/0", "--unsafe-test-seed"])
    assert started["seed"] == 7 and started["opened"] == "redis://127.0.0.1:1/0"


def test_the_bare_flag_without_a_seed_in_the_file_is_refused(tmp_path, capsys, started):
    assert main(["run", "--config", _config(tmp_path, None), "--store", "redis://127.0.0.1:1/0",
                 "--unsafe-test-seed"]) == 2
    assert "give the seed (--unsafe-test-seed N)" in capsys.readouterr().err


def test_a_seed_on_the_command_line_sets_it(tmp_path, capsys, started):
    with pytest.raises(SystemExit):
        main(["run", "--config", _config(tmp_path, 7), "--store", "redis://127.0.0.1:1/0", "--unsafe-test-seed", "3"])
    assert started["seed"] == 3
    with pytest.raises(SystemExit):
        main(["run", "--config", _config(tmp_path, None), "--store", "redis://127.0.0.1:1/0",
              "--unsafe-test-seed", "0"])
    assert started["seed"] == 0
    assert main(["run", "--config", _config(tmp_path, None), "--store", "redis://127.0.0.1:1/0",
                 "--unsafe-test-seed", "-1"]) == 2
    assert "--unsafe-test-seed must be ≥ 0" in capsys.readouterr().err


def test_a_secure_config_runs_without_the_flag(tmp_path, started):
    with pytest.raises(SystemExit):
        main(["run", "--config", _config(tmp_path, None), "--store", "redis://127.0.0.1:1/0"])
    assert started["seed"] is None
