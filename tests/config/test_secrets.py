"""Secrets from the environment or a mounted file (``*_FILE``): the budget store URL and the SASL password never
have to sit in a configuration file or a ConfigMap."""

from __future__ import annotations

import pytest

from streamdp.cli.main import main
from streamdp.config.kinds import ConfigError
from streamdp.config.secrets import fill_kafka_secrets, secret


def test_value_then_file_then_none(tmp_path):
    f = tmp_path / "url"
    f.write_text("redis://:s3cret@redis:6379/0\n")
    assert secret("STREAMDP_STORE", {"STREAMDP_STORE": "redis://a:1/0"}) == "redis://a:1/0"
    assert secret("STREAMDP_STORE", {"STREAMDP_STORE_FILE": str(f)}) == "redis://:s3cret@redis:6379/0"
    assert secret("STREAMDP_STORE", {}) is None


@pytest.mark.parametrize("env, msg", [
    ({"STREAMDP_STORE": "redis://a:1/0", "STREAMDP_STORE_FILE": "/x"}, "both set"),
    ({"STREAMDP_STORE_FILE": "/nonexistent/url"}, "cannot read the budget store URL"),
])
def test_both_or_an_unreadable_file_is_refused(env, msg):
    with pytest.raises(ConfigError, match=msg):
        secret("STREAMDP_STORE", env)


def test_an_empty_file_is_refused(tmp_path):
    (tmp_path / "pw").write_text("\n")
    with pytest.raises(ConfigError, match="empty"):
        secret("STREAMDP_KAFKA_SASL_PASSWORD", {"STREAMDP_KAFKA_SASL_PASSWORD_FILE": str(tmp_path / "pw")})


def test_sasl_password_from_a_file_unless_the_config_has_one(tmp_path):
    (tmp_path / "pw").write_text("hunter2\n")
    env = {"STREAMDP_KAFKA_SASL_PASSWORD_FILE": str(tmp_path / "pw")}
    assert fill_kafka_secrets({"sasl_password": None}, env)["sasl_password"] == "hunter2"
    assert fill_kafka_secrets({"sasl_password": "given"}, env)["sasl_password"] == "given"


def test_run_takes_the_store_url_from_the_file(tmp_path, monkeypatch, capsys):
    """`streamdp run` with no --store and no config store reads $STREAMDP_STORE_FILE (here a Redis that does not
    answer: the refusal names its address, so the URL came from the file)."""
    (tmp_path / "url").write_text("redis://127.0.0.1:1/0\n")
    monkeypatch.delenv("STREAMDP_STORE", raising=False)
    monkeypatch.setenv("STREAMDP_STORE_FILE", str(tmp_path / "url"))
    assert main(["run", "--store-wait", "0", "--log-level", "error"]) == 2
    err = capsys.readouterr().err
    assert "cannot open budget store" in err and "127.0.0.1:1" in err
    monkeypatch.setenv("STREAMDP_STORE", "redis://127.0.0.1:1/0")
    assert main(["run", "--store-wait", "0"]) == 2
    assert "both set" in capsys.readouterr().err
