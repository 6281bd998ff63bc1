"""Privacy review 13 (2026-11-23), finding F2: the Prometheus endpoint carries private counts (users charged,
admitted and halted per window, the max individual cost) and used to bind 0.0.0.0. It now binds
``[kafka] metrics_host`` (default 127.0.0.1), overridden by ``--metrics-host``; an empty or unbindable address
refuses the start with one line naming where it came from (exit 2). Checked without a broker: the worker and the
store are replaced by recorders; the metrics endpoint is real where the test says so."""

from __future__ import annotations

import contextlib
import socket
import types
import urllib.request

import pytest

from streamdp.adapters.metrics import WorkerMetrics
from streamdp.cli.main import CLIError, main
from streamdp.cli.service import _serve_metrics
from streamdp.config.loader import parse_config

CONFIG = """store = "redis://cfg-host:6379/3"
[service]
window_seconds = 60.0
origin = 0.0
[budget]
zcdp_rho = 1.0
zcdp_delta = 1e-6
[kafka]
bootstrap = "cfg-broker:9092"
metrics_port = {port}
{host_line}
[[query]]
id = "c"
kind = "continual_counts"
sigma = 1.0
"""


def _raw(port: int = 0, host: str | None = None) -> dict:
    import tomllib

    return tomllib.loads(CONFIG.format(port=port, host_line="" if host is None else f"metrics_host = {host!r}"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _non_loopback_address() -> str | None:
    """An IPv4 address of this host that is not loopback, if it has one (no packet is sent)."""
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.1", 9))  # TEST-NET-1: only picks the outgoing interface
        addr = s.getsockname()[0]
        if not addr.startswith("127.") and addr != "0.0.0.0":
            return addr
    return None


@pytest.fixture
def served(monkeypatch):
    """The real ``WorkerMetrics.serve``, recording the servers it started (stopped after the test)."""
    servers = []
    real = WorkerMetrics.serve

    def serve(self, port, addr="0.0.0.0"):
        out = real(self, port, addr=addr)
        servers.append(out[0])
        return out

    monkeypatch.setattr(WorkerMetrics, "serve", serve)
    yield servers
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def _scrape(host: str, port: int) -> str:
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5) as r:
        assert r.status == 200
        return r.read().decode()


def test_the_default_bind_is_loopback(served):
    cfg = parse_config(_raw(), log_warnings=False)
    assert cfg.kafka["metrics_host"] == "127.0.0.1"
    port = _free_port()
    metrics = _serve_metrics(types.SimpleNamespace(metrics_port=port, metrics_host=None), cfg)
    (srv,) = served
    assert srv.socket.getsockname()[:2] == ("127.0.0.1", port)
    metrics.events_in.inc(3)
    assert "streamdp_events_in_total 3.0" in _scrape("127.0.0.1", port)
    other = _non_loopback_address()
    if other is not None:  # reachable on loopback only: another address of this host is refused
        with pytest.raises(OSError), socket.create_connection((other, port), timeout=2):
            pass


@pytest.mark.parametrize("flag,config_host,want", [
    ("0.0.0.0", None, "0.0.0.0"),  # the flag over the default
    (None, "0.0.0.0", "0.0.0.0"),  # the config over the default
    ("127.0.0.1", "0.0.0.0", "127.0.0.1"),  # the flag over the config
])
def test_metrics_host_and_the_flag_override_the_default_bind(flag, config_host, want, served):
    cfg = parse_config(_raw(host=config_host), log_warnings=False)
    port = _free_port()
    _serve_metrics(types.SimpleNamespace(metrics_port=port, metrics_host=flag), cfg)
    (srv,) = served
    assert srv.socket.getsockname()[:2] == (want, port)
    assert "streamdp_events_in_total" in _scrape("127.0.0.1", port)


@pytest.fixture
def recorders(tmp_path, monkeypatch):
    """``run`` with a recording store opener, worker and metrics endpoint: returns (config writer, seen)."""
    import streamdp.adapters.kafka.ingest as ingest
    import streamdp.adapters.kafka.logs as logs
    import streamdp.adapters.kafka.worker as worker
    import streamdp.cli.service as service

    seen: dict = {"opened": 0, "started": 0, "served": []}

    class FakeStore:
        def __init__(self, budget):
            self.budget = budget

        def default_budget(self):
            return self.budget

        def close(self):
            pass

    def fake_open(url, budget, wait):
        seen["opened"] += 1
        return FakeStore(budget)

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

    def config(port: int = 9108, host: str | None = None) -> str:
        path = tmp_path / "c.toml"
        host_line = "" if host is None else f"metrics_host = {host!r}"
        path.write_text(CONFIG.format(port=port, host_line=host_line))
        return str(path)

    return config, seen


@pytest.mark.parametrize("role", ["all", "ingest"])
@pytest.mark.parametrize("flag,config_host,want", [
    (None, None, "127.0.0.1"),
    (None, "0.0.0.0", "0.0.0.0"),
    ("0.0.0.0", None, "0.0.0.0"),
    ("::1", "0.0.0.0", "::1"),
])
def test_run_binds_the_flag_else_the_config_else_loopback(role, flag, config_host, want, recorders, monkeypatch):
    config, seen = recorders
    monkeypatch.setattr(WorkerMetrics, "serve", lambda self, port, addr="0.0.0.0": seen["served"].append((port, addr)))
    argv = ["run", "--role", role, "--config", config(host=config_host)]
    if flag is not None:
        argv += ["--metrics-host", flag]
    assert main(argv) == 0
    assert seen["served"] == [(9108, want)] and seen["started"] == 1


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_metrics_host_flag_is_a_usage_error(value, recorders, capsys):
    config, seen = recorders
    with pytest.raises(SystemExit) as e:
        main(["run", "--config", config(), "--metrics-host", value])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "argument --metrics-host: expected a non-empty value" in err and "Traceback" not in err
    assert seen == {"opened": 0, "started": 0, "served": []}


@pytest.mark.parametrize("value,message", [('""', "kafka.metrics_host: must not be empty"),
                                           ('" "', "kafka.metrics_host: must not be empty"),
                                           ("5", "kafka.metrics_host: must be a string")])
def test_a_bad_metrics_host_in_the_config_names_the_key(value, message, recorders, tmp_path, capsys):
    config, seen = recorders
    path = tmp_path / "bad.toml"
    path.write_text(CONFIG.format(port=9108, host_line=f"metrics_host = {value}"))
    assert main(["run", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("streamdp: error: invalid configuration: ") and message in err
    assert seen == {"opened": 0, "started": 0, "served": []}
    assert main(["config", "check", str(path)]) != 0
    assert message in capsys.readouterr().err


def _foreign_address() -> str | None:
    """A documentation address (RFC 5737) that this host cannot bind (EADDRNOTAVAIL): not one of its own."""
    for addr in ("203.0.113.77", "198.51.100.77", "192.0.2.77"):
        with socket.socket() as s:
            try:
                s.bind((addr, 0))
            except OSError:
                return addr
    return None


# an address of another host (EADDRNOTAVAIL), and a name with a DNS label longer than 63 characters (refused before
# any lookup)
UNBINDABLE = [h for h in (_foreign_address(), "a" * 64 + ".example") if h is not None]


@pytest.mark.parametrize("role", ["all", "ingest"])
@pytest.mark.parametrize("host", UNBINDABLE)
def test_an_unbindable_metrics_host_from_the_flag_is_one_line_and_exit_2(role, host, recorders, capsys):
    config, seen = recorders
    assert main(["run", "--role", role, "--config", config(port=_free_port()), "--metrics-host", host]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("streamdp: error: cannot serve metrics on address ")
    assert "(--metrics-host)" in err and host[:40] in err and "Traceback" not in err
    assert seen == {"opened": 0, "started": 0, "served": []}  # refused before the store and the worker


@pytest.mark.parametrize("host", UNBINDABLE)
def test_an_unbindable_metrics_host_from_the_config_names_the_key(host, recorders, capsys):
    config, seen = recorders
    assert main(["run", "--config", config(port=_free_port(), host=host)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "(kafka.metrics_host)" in err and host[:40] in err
    assert "--metrics-host ADDRESS" in err  # how to give this worker another address
    assert seen == {"opened": 0, "started": 0, "served": []}


def test_serve_metrics_raises_cli_error_naming_the_setting():
    cfg = parse_config(_raw(host=UNBINDABLE[0]), log_warnings=False)
    with pytest.raises(CLIError, match=r"kafka\.metrics_host") as e:
        _serve_metrics(types.SimpleNamespace(metrics_port=_free_port(), metrics_host=None), cfg)
    assert e.value.code == 2
    with pytest.raises(CLIError, match=r"--metrics-host"):
        _serve_metrics(types.SimpleNamespace(metrics_port=_free_port(), metrics_host=UNBINDABLE[0]), cfg)
