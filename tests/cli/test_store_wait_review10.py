"""Review 10, finding 10b: ``streamdp run --store-wait nan`` retried an unreachable store forever (``waited + delay >
nan`` is never true) and ``-1`` gave up at once; ``--store-wait`` now takes only a finite number of seconds ≥ 0,
and the other duration flags of ``run`` refuse nan/inf the same way (``--checkpoint-seconds nan`` passed the
``<= 0`` check and checkpointed on no schedule)."""

from __future__ import annotations

import pytest

from streamdp.cli.main import CLIError, main


def _refuse(monkeypatch):
    import streamdp.cli.service as service

    def started(*a, **k):
        raise AssertionError("the store was opened: the flag was not refused")

    monkeypatch.setattr(service, "open_store_retrying", started)


@pytest.mark.parametrize("flag,value", [
    ("--store-wait", "nan"), ("--store-wait", "NaN"), ("--store-wait", "inf"), ("--store-wait", "-1"),
    ("--store-wait", "abc"), ("--store-wait", ""),
    ("--checkpoint-seconds", "nan"), ("--checkpoint-seconds", "inf"), ("--checkpoint-seconds", "0"),
    ("--drain-idle", "nan"), ("--drain-idle", "-5"),
])
def test_run_refuses_a_duration_that_is_not_a_finite_number(flag, value, capsys, monkeypatch):
    _refuse(monkeypatch)
    with pytest.raises(SystemExit) as e:
        main(["run", "--store", "redis://127.0.0.1:1/0", flag, value])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: expected a finite number of seconds" in err and repr(value) in err


@pytest.mark.parametrize("value,wait", [("0", 0.0), ("2.5", 2.5), ("600", 600.0)])
def test_run_passes_a_finite_store_wait_on(value, wait, monkeypatch):
    import streamdp.cli.service as service

    seen = {}

    def stop(url, budget, w):
        seen["wait"] = w
        raise CLIError("stopped here", code=1)

    monkeypatch.setattr(service, "open_store_retrying", stop)
    monkeypatch.setattr("streamdp.adapters.kafka.logs.setup_logging", lambda *a, **k: None)
    assert main(["run", "--store", "redis://127.0.0.1:1/0", "--store-wait", value]) == 1
    assert seen["wait"] == wait


def test_replay_refuses_a_nan_rate(tmp_path, capsys):
    f = tmp_path / "e.jsonl"
    f.write_text('{"user": "u", "ts": 1}\n')
    assert main(["replay", str(f), "--rate", "nan"]) == 2
    assert "--rate must be > 0" in capsys.readouterr().err
