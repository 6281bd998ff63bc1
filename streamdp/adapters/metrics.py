"""Prometheus metrics of a streamdp worker (``streamdp run --metrics-port``; ``/metrics`` over HTTP).

``streamdp_events_in_total`` counts records consumed from the input topic; the other counters follow the engine's
counters (dead letters by reason, late events, admitted and halted users, windows) as deltas, so they stay monotone across restores; gauges describe the current state (watermark,
held events, checkpoint version, ownership). ``streamdp_release_max_cost_total`` sums, per query and privacy
parameter, the maximum individual cost of every release — an upper bound on what any one user has spent through
that query since the worker started.

Besides ``/metrics`` the endpoint answers ``/ready`` — 200 once the worker has started (connected to Kafka, and for
the roles that use one, restored from its budget store) and while no outage holds it; 503 with the reason during a
Redis or Kafka outage or before the start — and ``/healthz`` (200 while the process serves HTTP). Kubernetes'
readiness probe uses ``/ready``: a pod in an outage leaves the Service's endpoints, and a rolling update waits for
the new pod to reach Kafka and Redis before it stops an old one. ``streamdp_consumer_lag{topic,partition}`` is
the number of records between the worker's fetch position and the partition's high watermark.
"""

from __future__ import annotations

import asyncio
import threading
import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class WorkerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry or CollectorRegistry()
        self.events_in = Counter("streamdp_events_in", "events consumed (valid or not)", registry=r)
        self.dead_letters = Counter("streamdp_dead_letters", "events sent to the dead-letter topic",
                                    ["reason"], registry=r)
        self.late = Counter("streamdp_late_events", "events of an already closed window", registry=r)
        self.admitted = Counter("streamdp_admitted_users", "users admitted by the filter, summed over windows",
                                registry=r)
        self.halted = Counter("streamdp_halted_users", "users refused (and halted) by the filter", registry=r)
        self.windows = Counter("streamdp_windows_closed", "windows closed", registry=r)
        self.releases = Counter("streamdp_releases", "release records published", ["query"], registry=r)
        self.users_charged = Counter("streamdp_users_charged", "users charged, summed over releases", ["query"],
                                     registry=r)
        self.max_cost = Counter("streamdp_release_max_cost", "sum over releases of the max individual cost",
                                ["query", "notion", "param"], registry=r)
        self.close_latency = Histogram(
            "streamdp_window_close_latency_seconds",
            "from the consumed batch whose watermark passed the window end to the release acknowledged as published",
            buckets=LATENCY_BUCKETS, registry=r)
        self.close_compute = Histogram("streamdp_window_close_compute_seconds", "engine time of one window close",
                                       buckets=LATENCY_BUCKETS, registry=r)
        self.checkpoints = Counter("streamdp_checkpoints", "checkpoints written", registry=r)
        self.checkpoint_seconds = Histogram("streamdp_checkpoint_seconds", "time of one checkpoint write",
                                            buckets=LATENCY_BUCKETS, registry=r)
        self.checkpoint_bytes = Gauge("streamdp_checkpoint_bytes", "size of the last checkpoint state", registry=r)
        self.recoveries = Counter("streamdp_recoveries", "restores from the checkpoint after a failure", registry=r)
        self.held_events = Gauge("streamdp_held_events", "events held in open windows", registry=r)
        self.paused_partitions = Gauge("streamdp_paused_partitions",
                                       "input partitions paused for running ahead in event time", registry=r)
        self.watermark = Gauge("streamdp_watermark_seconds", "event-time watermark", registry=r)
        self.last_window = Gauge("streamdp_last_closed_window", "sequence number of the last closed window",
                                 registry=r)
        self.owner = Gauge("streamdp_owner", "1 if this worker owns the input partitions (else standby)",
                           registry=r)
        # the staged topology (forward.py): stage A forwards, the coordinator accepts or drops
        self.forwarded = Counter("streamdp_forward_records", "forward records written by stage A (ingest)",
                                 registry=r)
        self.forward_dropped = Counter("streamdp_forward_dropped",
                                       "forward records dropped by the coordinator (seen: already consumed, gap: "
                                       "beyond the expected offset, foreign: another deployment's, unattributed: "
                                       "format version 1)",
                                       ["why"], registry=r)
        self.ready = Gauge("streamdp_ready", "1 while the worker is started and not held by an outage (/ready)",
                           registry=r)
        self.consumer_lag = Gauge("streamdp_consumer_lag",
                                  "records between the fetch position and the high watermark, per source partition",
                                  ["topic", "partition"], registry=r)
        self._base: dict = {}
        self._ready_lock = threading.Lock()
        self._not_ready = "starting"  # None when ready, else why not
        self._lag_at = 0.0

    # ---- readiness -----------------------------------------------------------------------------------------
    def set_ready(self, why_not: str | None = None) -> None:
        """Ready (``why_not`` None) or not, with the reason ``/ready`` gives (e.g. ``"outage: redis …"``)."""
        with self._ready_lock:
            self._not_ready = why_not
        self.ready.set(0 if why_not else 1)

    def readiness(self) -> tuple[bool, str]:
        with self._ready_lock:
            why = self._not_ready
        return (why is None, "ready" if why is None else f"not ready: {why}")

    async def export_lag(self, consumer, topic: str, every: float = 1.0) -> None:
        """``streamdp_consumer_lag`` of ``consumer``'s partitions of ``topic`` (at most once per ``every`` s): the
        high watermark of the last fetch answer minus the fetch position; partitions no longer assigned vanish."""
        now = time.monotonic()
        if now - self._lag_at < every:
            return
        self._lag_at = now
        lags = {}
        try:
            for tp in consumer.assignment():
                if tp.topic != topic:
                    continue
                hw = consumer.highwater(tp)
                if hw is None:
                    continue
                try:  # a partition without a position yet (just assigned) is skipped, never waited for
                    pos = await asyncio.wait_for(consumer.position(tp), 0.5)
                except asyncio.TimeoutError:
                    continue
                lags[tp.partition] = max(0, int(hw) - int(pos))
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001 - the lag is a metric: it never stops a fetch (nothing exported this time)
            return
        self.consumer_lag.clear()
        for p, lag in sorted(lags.items()):
            self.consumer_lag.labels(topic=topic, partition=str(p)).set(lag)

    def baseline(self, counters) -> None:
        """Remember the engine counters (after a restore) so that only later increments are exported."""
        self._base = {"events_in": counters.events_in, "late": counters.late,
                      "admitted": counters.admitted_users, "halted": counters.halted_users,
                      "windows": counters.windows_closed, "by_reason": dict(counters.by_reason)}

    def update(self, counters) -> None:
        b = self._base or {"events_in": 0, "late": 0, "admitted": 0, "halted": 0, "windows": 0, "by_reason": {}}
        for attr, metric, key in ((counters.late, self.late, "late"),
                                  (counters.admitted_users, self.admitted, "admitted"),
                                  (counters.halted_users, self.halted, "halted"),
                                  (counters.windows_closed, self.windows, "windows")):
            d = attr - b.get(key, 0)
            if d > 0:
                metric.inc(d)
        for reason, n in counters.by_reason.items():
            d = n - b["by_reason"].get(reason, 0)
            if d > 0:
                self.dead_letters.labels(reason=reason).inc(d)
        self.baseline(counters)

    def release(self, rec) -> None:
        self.releases.labels(query=rec.query).inc()
        self.users_charged.labels(query=rec.query).inc((rec.realized or {}).get("users_charged", 0))
        for notion, v in (rec.realized or {}).items():
            if isinstance(v, dict):
                for param, x in v.items():
                    if x:
                        self.max_cost.labels(query=rec.query, notion=notion, param=param).inc(float(x))

    def serve(self, port: int, addr: str = "127.0.0.1"):
        """Start the HTTP endpoint (a daemon thread): ``/ready``, ``/healthz``, and the metrics on every other path
        (as prometheus_client serves them); returns (server, thread)."""
        httpd, thread = start_http_server(port, addr=addr, registry=self.registry)
        metrics_app = httpd.get_app()

        def app(environ, start_response):
            path = environ.get("PATH_INFO", "")
            if path in ("/ready", "/healthz"):
                ok, text = self.readiness() if path == "/ready" else (True, "ok")
                body = (text + "\n").encode()
                start_response("200 OK" if ok else "503 Service Unavailable",
                               [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))])
                return [body]
            return metrics_app(environ, start_response)

        httpd.set_app(app)
        return httpd, thread
