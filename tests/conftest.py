"""Shared fixtures. Integration fixtures start REAL servers (redis-server, tansu) on free loopback ports.

A missing server binary is a test failure, not a skip (docs/contract.md §5; CI sets STREAMDP_REQUIRE_SERVERS=1).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
import warnings

import pytest

from streamdp.noise.generator import UnsafeSeedWarning


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A throwaway redis-server with no persistence."""

    def __init__(self) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            pytest.fail("redis-server is not installed (apt-get install redis-server); integration tests need it")
        self.exe = exe
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="streamdp-redis-")
        self.proc: subprocess.Popen | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.dir, "--daemonize", "no", "--protected-mode", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        import redis

        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                redis.Redis(port=self.port, socket_connect_timeout=0.2).ping()
                return
            except Exception:
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
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_server():
    srv = RedisServer()
    yield srv
    srv.stop()


@pytest.fixture
def redis_url(redis_server):
    """A clean database on the session's redis-server."""
    import redis

    r = redis.Redis.from_url(redis_server.url)
    r.flushall()
    yield redis_server.url
    try:
        r.flushall()
    except Exception:
        pass


@pytest.fixture(autouse=True)
def _quiet_unsafe_seed_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnsafeSeedWarning)
        yield
