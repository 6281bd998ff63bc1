"""The metrics endpoint's /ready and /healthz (the Kubernetes probes) and the consumer-lag gauge. The worker's use
of them against a real broker and Redis (ready → 503 in a Redis outage → ready again; lag 0 once read to the end)
is in tests/integration/test_kafka_redis_outage.py."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request

from streamdp.adapters.metrics import WorkerMetrics


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_ready_follows_set_ready_and_metrics_still_served():
    m = WorkerMetrics()
    port = free_port()
    httpd, _ = m.serve(port)
    try:
        assert _get(port, "/ready") == (503, "not ready: starting\n")  # before the worker started
        assert _get(port, "/healthz") == (200, "ok\n")
        m.set_ready()
        assert _get(port, "/ready") == (200, "ready\n")
        m.set_ready("outage: StoreError")
        status, body = _get(port, "/ready")
        assert status == 503 and "outage: StoreError" in body
        status, text = _get(port, "/metrics")
        assert status == 200 and "streamdp_ready 0.0" in text and "streamdp_events_in_total" in text
    finally:
        httpd.shutdown()


class _Consumer:
    """Stands in for aiokafka's consumer: assignment(), highwater(tp), async position(tp)."""

    def __init__(self, hw: dict, pos: dict) -> None:
        self.hw, self.pos = hw, pos

    def assignment(self):
        return set(self.hw)

    def highwater(self, tp):
        return self.hw[tp]

    async def position(self, tp):
        return self.pos[tp]


def test_consumer_lag_is_the_high_watermark_minus_the_position_per_partition():
    from aiokafka import TopicPartition

    m = WorkerMetrics()
    a, b, other = TopicPartition("in", 0), TopicPartition("in", 1), TopicPartition("x", 0)
    asyncio.run(m.export_lag(_Consumer({a: 120, b: None, other: 9}, {a: 100, b: 5, other: 0}), "in", every=0))
    got = {s.labels["partition"]: s.value for s in m.consumer_lag.collect()[0].samples}
    assert got == {"0": 20.0}  # b has answered no fetch yet (no high watermark); x is another topic
    asyncio.run(m.export_lag(_Consumer({b: 50}, {b: 50}), "in", every=0))  # a revoked: its gauge goes
    got = {s.labels["partition"]: s.value for s in m.consumer_lag.collect()[0].samples}
    assert got == {"1": 0.0}
