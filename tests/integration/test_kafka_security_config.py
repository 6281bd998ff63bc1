"""Kafka security settings (SASL/SSL) pass from the TOML config to aiokafka's clients (issue 5, item 7).

No SASL/SSL broker can run here (tansu is plaintext), so this checks the translation and that aiokafka's real
client classes accept the result; a wrong combination fails at start with a message that names the setting.
"""

import subprocess

import pytest

from streamdp.adapters.kafka.broker_config import client_kwargs, redacted
from streamdp.config.kinds import ConfigError
from streamdp.config.loader import parse_config

BASE = {"service": {"window_seconds": 60.0, "origin": 0.0},
        "query": [{"id": "c", "kind": "continual_counts", "sigma": 1.0}]}


@pytest.fixture(scope="module")
def cafile(tmp_path_factory):
    d = tmp_path_factory.mktemp("ca")
    cert, key = d / "ca.pem", d / "ca.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=streamdp-test-ca"], check=True, capture_output=True)
    return str(cert)


def kafka_section(**kw):
    return parse_config({**BASE, "kafka": kw}).kafka


def test_sasl_ssl_settings_reach_aiokafka(cafile):
    k = kafka_section(bootstrap="broker:9093", security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                      sasl_username="streamdp", sasl_password="s3cret", ssl_cafile=cafile)
    kw = client_kwargs(k, client_id="w1")
    assert kw["security_protocol"] == "SASL_SSL" and kw["sasl_mechanism"] == "SCRAM-SHA-512"
    assert kw["sasl_plain_username"] == "streamdp" and kw["sasl_plain_password"] == "s3cret"
    ctx = kw["ssl_context"]
    subjects = [dict(x[0] for x in c["subject"]).get("commonName") for c in ctx.get_ca_certs()]
    assert ctx.check_hostname and "streamdp-test-ca" in subjects  # our CA, not only the system's
    r = redacted(kw)
    assert r["sasl_plain_password"] == "***" and "s3cret" not in repr(r)
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def construct():  # aiokafka's own constructors accept these settings (they validate, not connect)
        AIOKafkaProducer(**kw)
        AIOKafkaConsumer("t", **kw)

    asyncio.run(construct())


def test_plaintext_default():
    kw = client_kwargs(kafka_section())
    assert kw["security_protocol"] == "PLAINTEXT" and "ssl_context" not in kw and "sasl_mechanism" not in kw


@pytest.mark.parametrize("settings,field", [
    ({"security_protocol": "SASL_PLAINTEXT", "sasl_username": "u"}, "sasl_password"),
    ({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "GSSAPI", "sasl_username": "u",
      "sasl_password": "p"}, "sasl_mechanism"),
    ({"sasl_username": "u", "sasl_password": "p"}, "sasl_mechanism"),
    ({"ssl_cafile": "/x.pem"}, "ssl_cafile"),
])
def test_inconsistent_security_settings_name_the_field(settings, field, tmp_path, capsys):
    # refused when the configuration is read (so `streamdp config check` says it, not only `streamdp run`) ...
    with pytest.raises(ConfigError, match=field):
        kafka_section(**settings)
    # ... and by the client settings themselves
    defaults = kafka_section()
    with pytest.raises(ValueError, match=field):
        client_kwargs({**defaults, **settings})
    from streamdp.cli.main import main

    lines = [f"{k} = {v!r}" for k, v in settings.items()]
    cfg = tmp_path / "c.toml"
    cfg.write_text("[kafka]\n" + "\n".join(lines).replace("'", '"') + "\n[service]\nwindow_seconds = 60\norigin = 0\n"
                   "[[query]]\nid = 'c'\nkind = 'continual_counts'\nsigma = 1.0\n")
    assert main(["config", "check", str(cfg)]) == 1
    assert field in capsys.readouterr().err


def test_unknown_protocol_is_a_config_error():
    with pytest.raises(ConfigError, match="kafka.security_protocol"):
        kafka_section(security_protocol="TLS")


def test_fetch_settings_pass_from_config_to_worker_options():
    from streamdp.adapters.kafka.worker import WorkerOptions

    o = WorkerOptions.from_config(kafka_section(fetch_max_bytes=32768, max_partition_fetch_bytes=8192,
                                                prefetch_batches=2, batch_max_records=400, step_max_records=800,
                                                lean_fetch=False, max_partition_skew_seconds=0.0))
    assert (o.fetch_max_bytes, o.max_partition_fetch_bytes, o.prefetch_batches, o.batch_max_records,
            o.step_max_records, o.lean_fetch, o.max_partition_skew_seconds) == (32768, 8192, 2, 400, 800, False, 0.0)
    d = WorkerOptions.from_config(kafka_section())
    assert (d.fetch_max_bytes, d.max_partition_fetch_bytes, d.prefetch_batches, d.step_max_records,
            d.lean_fetch) == (1 << 20, 1 << 20, 8, 20000, True)
    with pytest.raises(ConfigError, match=r"kafka\.step_max_records"):
        kafka_section(step_max_records=0)
    with pytest.raises(ConfigError, match=r"kafka\.lean_fetch"):
        kafka_section(lean_fetch="yes")
    with pytest.raises(ConfigError, match=r"kafka\.max_partition_skew_seconds"):
        kafka_section(max_partition_skew_seconds=-1.0)
    assert d.max_partition_skew_seconds is None  # the worker takes two windows
    with pytest.raises(ConfigError, match=r"kafka\.fetch_max_bytes"):
        kafka_section(fetch_max_bytes=10)
    with pytest.raises(ConfigError, match=r"kafka\.prefetch_batches"):
        kafka_section(prefetch_batches=0)


def test_internal_fetch_wait_passes_from_config_to_worker_options():
    """``[kafka] internal_fetch_wait_ms`` (the split's parts and outcomes consumers' fetch wait): 50 ms unless set,
    1–500 (aiokafka's default, 500 ms, made every window of a backlog wait ≈ 0.3 s on tansu: BENCHMARKS.md, "The
    split as processes")."""
    from streamdp.adapters.kafka.worker import WorkerOptions

    assert WorkerOptions.from_config(kafka_section()).internal_fetch_wait_ms == 50
    assert WorkerOptions.from_config(kafka_section(internal_fetch_wait_ms=7)).internal_fetch_wait_ms == 7
    for bad in (0, 501):
        with pytest.raises(ConfigError, match=r"kafka\.internal_fetch_wait_ms"):
            kafka_section(internal_fetch_wait_ms=bad)
