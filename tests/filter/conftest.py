"""Fixtures of the budget-store tests.

* ``make_store`` — one factory parametrised over BOTH stores (docs/contract.md §5: the in-memory store passes the same
  contract tests as the Redis one, which runs against a real redis-server).
* ``spawn_redis`` — start extra redis-servers with custom arguments (AOF persistence, AUTH, unix socket, TLS).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

from streamdp.filter.memory import MemoryBudgetStore
from streamdp.filter.redis_store import RedisBudgetStore


@pytest.fixture(params=["memory", "redis", "cluster"])
def make_store(request):
    """``make_store(default_budget=None, chunk=None)`` → a fresh, empty store of the parametrised kind: in memory, on
    the session's redis-server, or on the session's 3-primary Redis Cluster (``redis+cluster://``)."""
    made = []
    if request.param == "memory":
        def make(default_budget=None, chunk=None):
            return MemoryBudgetStore(default_budget)
    else:
        url = request.getfixturevalue("redis_url" if request.param == "redis" else "redis_cluster_url")

        def make(default_budget=None, chunk=None):
            kw = {} if chunk is None else {"chunk": chunk}
            st = RedisBudgetStore.from_url(url, default_budget=default_budget, **kw)
            made.append(st)
            return st
    make.kind = request.param
    yield make
    for st in made:
        st.close()


def _free_port(max_port: int = 65535) -> int:
    """A free loopback port ≤ max_port (cluster mode also binds port + 10000 for its bus)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port <= max_port:
            return port
    with socket.socket() as s:  # the kernel's ephemeral range is all above max_port: scan below it
        for port in range(20000, max_port):
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise RuntimeError("no free port")


class CustomRedis:
    """A redis-server with extra arguments, for one test.

    ``kill()`` sends SIGKILL (no shutdown save); ``start()`` starts it again on the same port, directory and
    socket, so with ``persistent=True`` (``--appendonly yes --appendfsync always``: every write is fsynced before
    its reply) the data survives the kill.
    """

    def __init__(self, *, persistent: bool = False, password: str | None = None, unix: bool = False,
                 tls: bool = False, extra: tuple[str, ...] = ()) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            pytest.fail("redis-server is not installed; integration tests need it")
        self.dir = tempfile.mkdtemp(prefix="streamdp-redis-x-")
        # cluster mode binds a bus on port + 10000, which must stay ≤ 65535
        self.port = _free_port(55535 if "--cluster-enabled" in extra else 65535)
        self.password = password
        self.socket = os.path.join(self.dir, "redis.sock") if unix else None
        self.tls = tls
        args = [exe, "--bind", "127.0.0.1", "--dir", self.dir, "--daemonize", "no", "--protected-mode", "no",
                "--save", ""]
        args += ["--appendonly", "yes", "--appendfsync", "always"] if persistent else ["--appendonly", "no"]
        if password:
            args += ["--requirepass", password]
        if unix:
            args += ["--unixsocket", self.socket, "--unixsocketperm", "700"]
        if tls:
            self.cert = os.path.join(self.dir, "cert.pem")
            key = os.path.join(self.dir, "key.pem")
            subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out",
                            self.cert, "-days", "1", "-subj", "/CN=localhost", "-addext",
                            "subjectAltName=IP:127.0.0.1,DNS:localhost"], check=True, capture_output=True)
            args += ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", self.cert, "--tls-key-file",
                     key, "--tls-ca-cert-file", self.cert, "--tls-auth-clients", "no"]
        else:
            args += ["--port", str(self.port)]
        self.args = args + list(extra)
        self.proc: subprocess.Popen | None = None
        self.start()

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        if self.socket:
            return f"unix://{auth}{self.socket}?db=0"
        if self.tls:
            return f"rediss://{auth}127.0.0.1:{self.port}/0?ssl_ca_certs={self.cert}"
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> None:
        import redis

        self.proc = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                c = redis.Redis.from_url(self.url, socket_connect_timeout=0.2)
                c.ping()
                c.close()
                return
            except redis.exceptions.ResponseError as e:  # still loading the AOF
                if "LOADING" not in str(e):
                    return
            except Exception:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited: {' '.join(self.args)}")
            time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def spawn_redis():
    """``spawn_redis(persistent=…, password=…, unix=…, tls=…)`` → a running :class:`CustomRedis` (stopped at the
    end of the test)."""
    servers: list[CustomRedis] = []

    def spawn(**kw) -> CustomRedis:
        srv = CustomRedis(**kw)
        servers.append(srv)
        return srv

    yield spawn
    for s in servers:
        s.stop()
