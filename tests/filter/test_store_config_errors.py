"""A budget store whose server is misconfigured is refused at open as a configuration error (exit 2 at once, the
URL named without credentials), never retried as an outage — against real redis-servers:

* an eviction policy other than ``noeviction`` (issue: budgets and the release log are keys without expiry; under
  ``allkeys-*`` / ``volatile-*`` an evicted key resets a user's budget or lets a release be re-noised); where
  ``CONFIG GET`` is not allowed, the operator's ``assume_noeviction=1`` is needed;
* TLS/protocol mismatches: ``rediss://`` against a plain port, ``redis://`` against a TLS port, a certificate the
  client does not trust (the 2026-12-06 campaign: retried forever as an outage, while AUTH errors exit 2).
"""

from __future__ import annotations

import time

import pytest

from streamdp.cli.main import CLIError, main
from streamdp.filter.redis_store import RedisBudgetStore, StoreConfigError

pytestmark = pytest.mark.integration

B = [10, 10, 0, 0, 0, 0]


def _budget(capsys, url: str) -> tuple[int, str]:
    try:
        rc = main(["budget", "list", "--store", url])
    except SystemExit as e:
        rc = e.code
    return rc, capsys.readouterr().err


def _open_for_run(url: str):
    """`streamdp run`'s opening of its store (retried with backoff while unreachable, wait=None: forever); a
    configuration error must end it at once, so sleeping is a failure."""
    from streamdp.cli.service import open_store_retrying

    def no_sleep(_s):
        raise AssertionError("a configuration error was retried as an outage")

    return open_store_retrying(url, B, None, sleep=no_sleep)


@pytest.mark.parametrize("policy", ["allkeys-lru", "volatile-lru", "allkeys-random", "volatile-ttl"])
def test_an_evicting_redis_is_refused(spawn_redis, capsys, policy):
    srv = spawn_redis(password="pw", extra=("--maxmemory-policy", policy))
    with pytest.raises(StoreConfigError, match=f"maxmemory-policy {policy}") as ei:
        RedisBudgetStore.from_url(srv.url, default_budget=B)
    assert "noeviction" in str(ei.value) and "pw" not in str(ei.value)
    with pytest.raises(StoreConfigError):  # the operator's flag does not override what the server says
        RedisBudgetStore.from_url(srv.url + "?assume_noeviction=1")
    rc, err = _budget(capsys, srv.url)
    assert rc == 2 and "maxmemory-policy" in err and err.count("\n") == 1
    with pytest.raises(CLIError) as ei:
        _open_for_run(srv.url)
    assert ei.value.code == 2 and "maxmemory-policy" in str(ei.value)


def test_a_noeviction_redis_is_accepted(spawn_redis):
    srv = spawn_redis(extra=("--maxmemory-policy", "noeviction", "--maxmemory", "100mb"))
    st = RedisBudgetStore.from_url(srv.url, default_budget=B)
    assert st.admit("q", 1, ["a"], [1, 1, 0, 0, 0, 0]).tolist() == [True]
    _open_for_run(srv.url).close()


def test_without_config_get_the_operator_must_confirm_noeviction(spawn_redis, capsys):
    """Managed Redis often disables CONFIG: the message says how to confirm the policy and which flag to give."""
    srv = spawn_redis(extra=("--rename-command", "CONFIG", ""))
    with pytest.raises(StoreConfigError, match="assume_noeviction=1") as ei:
        RedisBudgetStore.from_url(srv.url, default_budget=B)
    assert "maxmemory-policy" in str(ei.value) and "provider" in str(ei.value)
    rc, err = _budget(capsys, srv.url)
    assert rc == 2 and "assume_noeviction" in err
    st = RedisBudgetStore.from_url(srv.url + "?assume_noeviction=1", default_budget=B)
    assert st.admit("q", 1, ["a"], [1, 1, 0, 0, 0, 0]).tolist() == [True]
    RedisBudgetStore.from_url(srv.url, assume_noeviction=True).close()
    rc, _ = _budget(capsys, srv.url + "?assume_noeviction=1")
    assert rc == 0
    with pytest.raises(ValueError, match="assume_noeviction"):
        RedisBudgetStore.from_url(srv.url + "?assume_noeviction=maybe")


def test_rediss_against_a_plain_port_is_a_configuration_error(spawn_redis, capsys):
    srv = spawn_redis(password="pw")
    url = f"rediss://:pw@127.0.0.1:{srv.port}/0"
    t = time.monotonic()
    with pytest.raises(StoreConfigError, match="answers plain RESP, not TLS: use redis://") as ei:
        RedisBudgetStore.from_url(url, default_budget=B)
    assert "pw" not in str(ei.value) and time.monotonic() - t < 10
    rc, err = _budget(capsys, url)
    assert rc == 2 and "use redis://" in err and "pw" not in err
    with pytest.raises(CLIError) as ei:
        _open_for_run(url)
    assert ei.value.code == 2


def test_redis_against_a_tls_port_is_a_configuration_error(spawn_redis, capsys):
    srv = spawn_redis(tls=True, password="pw")
    url = f"redis://:pw@127.0.0.1:{srv.port}/0"
    with pytest.raises(StoreConfigError, match="speaks TLS: use rediss://") as ei:
        RedisBudgetStore.from_url(url, default_budget=B, connect_timeout=1.0, socket_timeout=1.0)
    assert "pw" not in str(ei.value)
    rc, err = _budget(capsys, url)
    assert rc == 2 and "use rediss://" in err
    with pytest.raises(CLIError) as ei:
        _open_for_run(url)
    assert ei.value.code == 2


def test_an_untrusted_certificate_is_a_configuration_error(spawn_redis, capsys):
    srv = spawn_redis(tls=True, password="pw")
    url = f"rediss://:pw@127.0.0.1:{srv.port}/0"  # the self-signed certificate's CA not given
    with pytest.raises(StoreConfigError, match="certificate is not trusted") as ei:
        RedisBudgetStore.from_url(url, default_budget=B)
    assert "ssl_ca_certs" in str(ei.value) and "pw" not in str(ei.value)
    rc, err = _budget(capsys, url)
    assert rc == 2 and "not trusted" in err
    with pytest.raises(CLIError) as ei:
        _open_for_run(url)
    assert ei.value.code == 2
    st = RedisBudgetStore.from_url(srv.url, default_budget=B)  # with its CA: fine
    assert st.admit("q", 1, ["a"], [1, 1, 0, 0, 0, 0]).tolist() == [True]


def test_a_server_that_is_down_is_still_an_outage(capsys):
    """The probes that tell a wrong scheme from an outage do not turn a server that is down into a configuration
    error: `streamdp run` keeps retrying it (the budget commands report it unreachable, exit 1)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for url in (f"redis://127.0.0.1:{port}/0", f"rediss://127.0.0.1:{port}/0"):
        rc, err = _budget(capsys, url)
        assert rc == 1 and "unreachable" in err
        from streamdp.cli.service import open_store_retrying

        slept = []
        with pytest.raises(CLIError) as ei:
            open_store_retrying(url, B, 5.0, sleep=slept.append, clock=iter(range(100)).__next__)
        assert slept and "retried" in str(ei.value)
