"""Helpers of the Redis-outage test: a redis-server that keeps its data across SIGKILL and restarts on the same
port, end offsets of topics, the worker's JSON log lines, and a metrics scrape."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PersistentRedis:
    """A redis-server whose every write is fsynced to its append-only file before the reply
    (``--appendonly yes --appendfsync always``): ``kill()`` (SIGKILL, no shutdown save) loses nothing that was
    acknowledged, and ``start()`` brings it back on the SAME port with the SAME data directory.

    A missing ``redis-server`` is a test failure, never a skip (docs/contract.md §5)."""

    def __init__(self) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            pytest.fail("redis-server is not installed (apt-get install redis-server); integration tests need it")
        self.dir = tempfile.mkdtemp(prefix="streamdp-redis-outage-")
        self.port = free_port()
        self.args = [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir, "--daemonize", "no",
                     "--protected-mode", "no", "--save", "", "--appendonly", "yes", "--appendfsync", "always"]
        self.log = os.path.join(self.dir, "redis.log")
        self.proc: subprocess.Popen | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 30.0) -> None:
        import redis

        out = open(self.log, "ab")
        try:
            self.proc = subprocess.Popen(self.args, stdout=out, stderr=subprocess.STDOUT)
        finally:
            out.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"redis-server exited with code {self.proc.returncode} (log: {self.log})")
            try:
                c = redis.Redis(port=self.port, socket_connect_timeout=0.2)
                try:
                    c.ping()  # answers LOADING until the append-only file is read
                    return
                finally:
                    c.close()
            except Exception:
                time.sleep(0.02)
        pytest.fail(f"redis-server did not answer within {timeout} s (log: {self.log})")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def positions(bootstrap: str, topic: str, n: int) -> dict[int, int]:
    """After ``n`` records were produced to ``topic``: each partition's next offset (read from the records
    themselves: tansu's ListOffsets answers lag behind the records it serves)."""
    from kafka_helpers import read_topic

    recs = read_topic(bootstrap, topic, n)
    assert len(recs) == n, f"{topic}: {len(recs)} records, expected {n}"
    out: dict[int, int] = {}
    for p, off, _, _ in recs:
        out[p] = max(out.get(p, 0), off + 1)
    return out


def records(bootstrap: str, topics: list[str], min_count: int = 0) -> list[tuple]:
    """Every record of ``topics``: sorted (topic, partition, offset, key, value)."""
    from kafka_helpers import read_topic

    out = []
    for t in topics:
        out += [(t, *r) for r in read_topic(bootstrap, t, min_count)]
    return sorted(out)


def log_lines(path) -> list[dict]:
    """The worker's JSON log lines (other lines — e.g. the test-seed warning — are skipped)."""
    out = []
    try:
        with open(path, "rb") as f:
            for line in f:
                line = line.strip()
                if line.startswith(b"{"):
                    try:
                        out.append(json.loads(line))
                    except ValueError:  # a line being written
                        pass
    except FileNotFoundError:
        pass
    return out


def count_msg(path, msg: str) -> int:
    return sum(1 for d in log_lines(path) if d.get("msg") == msg)


def scrape_metric(port: int, name: str) -> float | None:
    """The value of an unlabelled metric on the worker's Prometheus endpoint (None: not exported)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None
