"""Service review s10/svc, findings 6 and 7: ``streamdp run`` / ``replay`` flags and start errors that gave a Python
traceback (exit 1) or were silently ignored now give one line and a usage exit status (2), before the worker or the
producer starts. Checked without a broker: the worker, the store and the producer are replaced by recorders."""

from __future__ import annotations

import socket

import pytest

from streamdp.cli.main import main

CONFIG = """store = "redis://cfg-host:6379/3"
[service]
window_seconds = 60.0
origin = 0.0
[kafka]
bootstrap = "cfg-broker:9092"
input_topic = "cfg.events"
group_id = "cfg-group"
partitions = 6
metrics_port = {port}
[[query]]
id = "c"
kind = "continual_counts"
sigma = 1.0
"""


@pytest.fixture
def recorders(tmp_path, monkeypatch):
    """``run`` with a recording store opener and worker (the metrics endpoint is real unless a test replaces it)."""
    import streamdp.adapters.kafka.ingest as ingest
    import streamdp.adapters.kafka.logs as logs
    import streamdp.adapters.kafka.worker as worker
    import streamdp.cli.service as service

    seen: dict = {"opened": 0, "started": 0}

    class FakeStore:
        budget = None

        def default_budget(self):  # a new store: the configuration's default (run reads it for its warnings)
            return self.budget

        def close(self):
            pass

    def fake_open(url, budget, wait):
        seen["opened"] += 1
        st = FakeStore()
        st.budget = budget
        return st

    class FakeWorker:
        def __init__(self, *a, **k):
            seen["started"] += 1

        async def run(self):
            return 0

    monkeypatch.setattr(service, "open_store_retrying", fake_open)
    monkeypatch.setattr(worker, "KafkaWorker", FakeWorker)
    monkeypatch.setattr(ingest, "IngestWorker", FakeWorker)
    monkeypatch.setattr(logs, "setup_logging", lambda *a, **k: None)
    monkeypatch.delenv("STREAMDP_STORE", raising=False)

    def config(port: int = 0) -> str:
        path = tmp_path / f"c{port}.toml"
        path.write_text(CONFIG.format(port=port))
        return str(path)

    return config, seen


@pytest.fixture
def busy_port():
    """A TCP port some other process listens on (as a second worker's metrics endpoint would)."""
    s = socket.socket()
    s.bind(("0.0.0.0", 0))
    s.listen()
    try:
        yield s.getsockname()[1]
    finally:
        s.close()


# ---- finding 6: --metrics-port ------------------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["-1", "70000", "65536", "abc", "", "1.5"])
@pytest.mark.parametrize("role", ["all", "ingest"])
def test_run_refuses_a_metrics_port_out_of_range(value, role, recorders, capsys):
    config, seen = recorders
    with pytest.raises(SystemExit) as e:
        main(["run", "--role", role, "--config", config(), "--metrics-port", value])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "argument --metrics-port: expected a port number 0–65535" in err and repr(value) in err
    assert "Traceback" not in err and seen == {"opened": 0, "started": 0}


@pytest.mark.parametrize("value,port", [("0", 0), ("65535", 65535), ("9108", 9108)])
def test_run_takes_a_metrics_port_in_range(value, port, recorders, monkeypatch):
    from streamdp.adapters.metrics import WorkerMetrics

    config, seen = recorders
    served = []
    monkeypatch.setattr(WorkerMetrics, "serve", lambda self, p, addr="0.0.0.0": served.append(p))
    assert main(["run", "--config", config(), "--metrics-port", value]) == 0
    assert served == ([port] if port else []) and seen["started"] == 1


@pytest.mark.parametrize("role", ["all", "ingest"])
def test_a_busy_metrics_port_from_the_flag_is_one_line_and_exit_2(role, recorders, busy_port, capsys):
    config, seen = recorders
    assert main(["run", "--role", role, "--config", config(), "--metrics-port", str(busy_port)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("streamdp: error: ")
    assert f"port {busy_port}" in err and "--metrics-port" in err and "in use" in err
    # refused before the store is opened and before the worker starts
    assert seen == {"opened": 0, "started": 0}


@pytest.mark.parametrize("role", ["all", "ingest"])
def test_a_busy_metrics_port_from_the_config_names_the_config_key(role, recorders, busy_port, capsys):
    """The second worker of a group on one host with the deployment's `metrics_port` (deploy/streamdp.toml)."""
    config, seen = recorders
    assert main(["run", "--role", role, "--config", config(busy_port)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"port {busy_port}" in err and "kafka.metrics_port" in err
    assert "--metrics-port" in err  # how to give this worker another port
    assert seen == {"opened": 0, "started": 0}


# ---- finding 7a: replay --partitions ------------------------------------------------------------------------------

@pytest.fixture
def fake_replay(monkeypatch):
    import streamdp.adapters.kafka.replay as replay_mod

    calls = []

    async def fake(events, topic, client_kw, *, partitions=4, **kw):
        evs = list(events)
        calls.append({"topic": topic, "partitions": partitions, "events": evs})
        return len(evs)

    monkeypatch.setattr(replay_mod, "replay", fake)
    return calls


@pytest.mark.parametrize("value", ["0", "-2", "abc", "", "1.5"])
def test_replay_refuses_a_partition_count_that_is_not_positive(value, fake_replay, tmp_path, capsys):
    """0 silently meant the config's default; -2 reached the broker (a 0-partition topic, ZeroDivisionError)."""
    data = tmp_path / "e.jsonl"
    data.write_text('{"user": "u", "ts": 1}\n')
    with pytest.raises(SystemExit) as e:
        main(["replay", str(data), "--quiet", "--partitions", value])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "argument --partitions: expected a positive integer" in err and repr(value) in err
    assert fake_replay == []


def test_replay_takes_a_positive_partition_count(fake_replay, tmp_path):
    data = tmp_path / "e.jsonl"
    data.write_text('{"user": "u", "ts": 1}\n')
    assert main(["replay", str(data), "--quiet", "--partitions", "1"]) == 0
    assert fake_replay[-1]["partitions"] == 1


# ---- finding 7c: empty values ------------------------------------------------------------------------------------

@pytest.mark.parametrize("flag", ["--group", "--input-topic", "--store", "--bootstrap", "--config"])
@pytest.mark.parametrize("value", ["", "  "])
@pytest.mark.parametrize("role", ["all", "ingest"])
def test_run_refuses_an_empty_value_instead_of_using_the_configuration(flag, value, role, recorders, capsys):
    """``--group ''`` / ``--input-topic ''`` were ignored (``if args.group:``): the config's values were used."""
    config, seen = recorders
    argv = ["run", "--role", role, flag, value] + ([] if flag == "--config" else ["--config", config()])
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: expected a non-empty value" in err
    assert seen == {"opened": 0, "started": 0}


@pytest.mark.parametrize("flag", ["--topic", "--bootstrap", "--config"])
def test_replay_refuses_an_empty_value_instead_of_using_the_configuration(flag, fake_replay, tmp_path, capsys):
    data = tmp_path / "e.jsonl"
    data.write_text('{"user": "u", "ts": 1}\n')
    with pytest.raises(SystemExit) as e:
        main(["replay", str(data), "--quiet", flag, ""])
    assert e.value.code == 2
    assert f"argument {flag}: expected a non-empty value" in capsys.readouterr().err
    assert fake_replay == []


# ---- finding 7b: a store that answers with a permanent error is not retried ----------------------------------------

def _store_error(cause: Exception, where: str = "redis://127.0.0.1:6379/0"):
    from streamdp.filter.store import StoreError

    word = "unreachable" if isinstance(cause, ConnectionError) or "Connection" in type(cause).__name__ else "failed"
    e = StoreError(f"Redis budget store {word} ({where}): {cause}")
    e.__cause__ = cause
    return e


def _retrying(monkeypatch, error):
    """open_store_retrying with a store that always fails with ``error``; returns (outcome, sleeps)."""
    import streamdp.filter as filt
    from streamdp.cli.main import CLIError
    from streamdp.cli.service import open_store_retrying

    def failing(url, budget):
        raise error

    monkeypatch.setattr(filt, "open_store", failing)
    sleeps = []
    t = [0.0]

    def sleep(d):
        sleeps.append(d)
        t[0] += d

    try:
        open_store_retrying("redis://127.0.0.1:6379/0", None, 30.0, sleep=sleep, clock=lambda: t[0])
    except CLIError as e:
        return e, sleeps
    raise AssertionError("returned a store")


def _redis_errors():
    import redis.exceptions as rx

    return rx


@pytest.mark.parametrize("make,text", [
    (lambda rx: rx.ResponseError("DB index is out of range"), "DB index is out of range"),
    (lambda rx: rx.AuthenticationError("invalid username-password pair or user is disabled."), "invalid username"),
    (lambda rx: rx.AuthenticationError("Authentication required."), "Authentication required"),  # NOAUTH
    (lambda rx: rx.AuthenticationError("invalid password"), "invalid password"),
    (lambda rx: rx.AuthenticationError("Invalid Username or Password"), "Invalid Username or Password"),
    (lambda rx: rx.ConnectionError("Invalid Database"), "Invalid Database"),
    (lambda rx: rx.NoPermissionError("this user has no permissions to run the 'evalsha' command"),
     "no permissions"),
])
def test_a_server_error_reply_at_start_fails_at_once(make, text, monkeypatch):
    err, sleeps = _retrying(monkeypatch, _store_error(make(_redis_errors())))
    assert sleeps == []  # not retried
    assert err.code == 2 and text in str(err) and "\n" not in str(err)
    assert "refused" in str(err) and "unreachable" not in str(err)


@pytest.mark.parametrize("make", [
    lambda rx: rx.ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused."),
    lambda rx: rx.TimeoutError("Timeout connecting to server"),
    lambda rx: rx.BusyLoadingError("Redis is loading the dataset in memory"),
    lambda rx: rx.ConnectionError("max number of clients reached"),
    lambda rx: rx.ResponseError("BUSY Redis is busy running a script."),
    lambda rx: rx.ResponseError("MISCONF Redis is configured to save RDB snapshots, but it's unable to persist"),
    lambda rx: rx.ReadOnlyError("You can't write against a read only replica."),
    lambda rx: rx.OutOfMemoryError("command not allowed when used memory > 'maxmemory'."),
    lambda rx: rx.TryAgainError("Multiple keys request during rehashing of slot"),
    lambda rx: rx.MasterDownError("Link with MASTER is down"),
])
def test_an_outage_at_start_is_still_retried(make, monkeypatch):
    err, sleeps = _retrying(monkeypatch, _store_error(make(_redis_errors())))
    assert len(sleeps) > 2 and "retried for" in str(err) and err.code == 2


def test_a_store_error_without_a_redis_cause_is_retried(monkeypatch):
    from streamdp.filter.store import StoreError

    err, sleeps = _retrying(monkeypatch, StoreError("something"))
    assert len(sleeps) > 2


def test_a_real_redis_refusing_the_db_index_or_the_credentials_fails_at_once(redis_server, monkeypatch):
    """The servers' own replies (redis-server): DB 99 of 16, a user with a wrong password (ACL)."""
    import redis

    from streamdp.cli.main import CLIError
    from streamdp.cli.service import open_store_retrying

    def no_sleep(d):
        raise AssertionError(f"retried ({d} s): a server's error reply was taken for an outage")

    budget = [10**12, 0, 0, 0, 0, 0]
    r = redis.Redis(port=redis_server.port)
    r.execute_command("ACL", "SETUSER", "svc10", "on", ">right", "~*", "+@all")
    try:
        for url, text in ((f"redis://127.0.0.1:{redis_server.port}/99", "DB index is out of range"),
                          (f"redis://svc10:wrong@127.0.0.1:{redis_server.port}/0", "invalid username-password")):
            with pytest.raises(CLIError) as e:
                open_store_retrying(url, budget, None, sleep=no_sleep)
            assert text in str(e.value) and e.value.code == 2
            assert "wrong" not in str(e.value)  # the password stays redacted
    finally:
        r.execute_command("ACL", "DELUSER", "svc10")
