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


class RedisClusterServers:
    """A throwaway Redis Cluster of three primaries (no replicas, no persistence) on loopback: three
    ``redis-server --cluster-enabled yes`` joined by ``redis-cli --cluster create``. Ports are picked below 55000 so
    that each node's cluster bus (port + 10000) is a valid port too; both must be free."""

    N = 3

    def __init__(self) -> None:
        exe, cli = shutil.which("redis-server"), shutil.which("redis-cli")
        if exe is None or cli is None:
            pytest.fail("redis-server and redis-cli are required (apt-get install redis-server); the Redis Cluster "
                        "tests need them")
        self.dir = tempfile.mkdtemp(prefix="streamdp-cluster-")
        self.ports = self._ports()
        self.procs: list[subprocess.Popen] = []
        for p in self.ports:
            self.procs.append(subprocess.Popen(
                [exe, "--port", str(p), "--bind", "127.0.0.1", "--cluster-enabled", "yes", "--cluster-config-file",
                 f"nodes-{p}.conf", "--cluster-node-timeout", "5000", "--save", "", "--appendonly", "no", "--dir",
                 self.dir, "--daemonize", "no", "--protected-mode", "no"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        import redis

        deadline = time.time() + 10
        for p in self.ports:
            while True:
                try:
                    redis.Redis(port=p, socket_connect_timeout=0.2).ping()
                    break
                except Exception:
                    if time.time() > deadline:
                        self.stop()
                        raise RuntimeError("cluster nodes did not start")
                    time.sleep(0.05)
        res = subprocess.run([cli, "--cluster", "create", *[f"127.0.0.1:{p}" for p in self.ports],
                              "--cluster-replicas", "0", "--cluster-yes"], capture_output=True, text=True, timeout=60)
        if res.returncode != 0:
            self.stop()
            raise RuntimeError(f"redis-cli --cluster create failed: {res.stdout}{res.stderr}")
        deadline = time.time() + 30
        while True:  # every node sees every slot assigned and the cluster ok
            infos = [redis.Redis(port=p).cluster("info") for p in self.ports]
            if all(i.get("cluster_state") == "ok" and int(i.get("cluster_slots_ok", 0)) == 16384 for i in infos):
                break
            if time.time() > deadline:
                self.stop()
                raise RuntimeError(f"the cluster did not become ok: {infos}")
            time.sleep(0.1)

    @staticmethod
    def _ports() -> list[int]:
        """Three ports P < 55000 with P and P + 10000 free."""
        import random

        rng = random.Random()
        out: list[int] = []
        for _ in range(2000):
            p = rng.randrange(20000, 55000)
            if p in out:
                continue
            ok = True
            for q in (p, p + 10000):
                with socket.socket() as s:
                    try:
                        s.bind(("127.0.0.1", q))
                    except OSError:
                        ok = False
                        break
            if ok:
                out.append(p)
                if len(out) == RedisClusterServers.N:
                    return out
        raise RuntimeError("no free ports for a Redis Cluster")

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.ports[0]}"

    def flushall(self) -> None:
        import redis

        for p in self.ports:
            redis.Redis(port=p).flushall()

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_cluster():
    """A 3-primary Redis Cluster for the session (started on first use)."""
    c = RedisClusterServers()
    yield c
    c.stop()


@pytest.fixture
def redis_cluster_url(redis_cluster):
    """A clean Redis Cluster (every primary flushed): ``redis+cluster://127.0.0.1:P``."""
    redis_cluster.flushall()
    yield redis_cluster.url
    try:
        redis_cluster.flushall()
    except Exception:
        pass


@pytest.fixture(autouse=True)
def _quiet_unsafe_seed_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnsafeSeedWarning)
        yield
