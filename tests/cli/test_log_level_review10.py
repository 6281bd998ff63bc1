"""Review 10, finding 5c: ``streamdp run --log-level foo`` died with ``ValueError: Unknown level: 'FOO'`` (a
traceback from ``logging.setLevel``) after the configuration was loaded; ``--log-level`` now has the standard level
names as choices (in any case), so argparse refuses another name in one usage line, and ``setup_logging`` itself
names the choices."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from streamdp.adapters.kafka.logs import setup_logging
from streamdp.cli.main import CLIError, main


@pytest.mark.parametrize("level", ["foo", "", "verbose", "10", "INFO2"])
def test_run_refuses_an_unknown_log_level_as_a_usage_error(level, capsys):
    with pytest.raises(SystemExit) as e:
        main(["run", "--store", "redis://127.0.0.1:1/0", "--log-level", level, "--store-wait", "0"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "argument --log-level: invalid choice" in err and "DEBUG" in err and "Traceback" not in err


def test_the_reviewers_command_prints_no_traceback():
    r = subprocess.run([sys.executable, "-m", "streamdp", "run", "--store", "redis://127.0.0.1:1/0", "--log-level",
                        "foo", "--store-wait", "0"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "argument --log-level: invalid choice: 'FOO'" in r.stderr


@pytest.mark.parametrize("given,level", [("debug", "DEBUG"), ("Warning", "WARNING"), ("ERROR", "ERROR")])
def test_run_takes_a_standard_level_in_any_case(given, level, monkeypatch):
    import streamdp.cli.service as service

    seen = {}

    def stop(url, budget, wait):  # the store is opened right after logging is set up
        seen["level"] = logging.getLogger("streamdp").level
        raise CLIError("stopped here", code=1)

    monkeypatch.setattr(service, "open_store_retrying", stop)
    try:
        assert main(["run", "--store", "redis://127.0.0.1:1/0", "--log-level", given]) == 1
        assert seen["level"] == getattr(logging, level)
    finally:
        setup_logging("json", "INFO")
        for name in ("streamdp", "aiokafka"):
            logging.getLogger(name).handlers[:] = []
            logging.getLogger(name).propagate = True


def test_setup_logging_names_the_choices():
    with pytest.raises(ValueError, match=r"unknown log level 'foo': use one of DEBUG, INFO, WARNING"):
        setup_logging("json", "foo")
