"""Review 10, finding 6: query ids and topic names that Kafka cannot use passed ``config check`` (``id = "my query
ü!"``, ``"a b"``, 400 characters, ``"a\\u0000b"`` — which also crashed the demo with ``embedded null byte`` when it
opened ``releases/<id>.jsonl``). Kafka topic names are 1..249 characters of ``[a-zA-Z0-9._-]`` and not ``.``/``..``;
the output topic is ``<output_prefix><id>``. The loader now refuses every id, topic and prefix that would make an
illegal or colliding topic, naming the field."""

from __future__ import annotations

import glob
import os

import pytest

from streamdp.adapters.kafka.topics import forward_topic, service_topics
from streamdp.cli.main import main
from streamdp.config.kinds import ConfigError, topic_problem
from streamdp.config.loader import load_config, parse_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _parse(qid="q", **kafka):
    return parse_config({"service": {"window_seconds": 60.0, "origin": 0.0}, "kafka": kafka,
                         "query": [{"id": qid, "kind": "continual_counts", "sigma": 1.0}]})


@pytest.mark.parametrize("qid", ["my query ü!", "a b", "a\u0000b", "x" * 400, "x" * 250, "tab\there", "é", "a:b",
                                 "a*", "a\\b", "a+b", "ü"])
def test_a_query_id_kafka_cannot_name_is_refused(qid):
    with pytest.raises(ConfigError, match=r"^query\[0\]\.id: must be a non-empty string without '/' of at most 249 "
                                          r"ASCII letters, digits, '\.', '_' and '-'"):
        _parse(qid)


@pytest.mark.parametrize("qid", ["a", "dest_counts", "top-dest", "v1.2", "A_b-C.9", "x" * 236])
def test_a_legal_query_id_is_kept(qid):
    cfg = _parse(qid)
    assert cfg.build_queries()[0].id == qid


def test_an_id_that_makes_the_output_topic_too_long_names_the_id_and_the_prefix():
    _parse("x" * 236)  # 13 + 236 = 249: the longest
    with pytest.raises(ConfigError, match=r"^query\[0\]\.id \(output topic\): has 250 "
                                          r"characters; a Kafka topic name has at most 249"):
        _parse("x" * 237)
    with pytest.raises(ConfigError, match=r"^query\[0\]\.id \(output topic.*has 250 characters"):
        _parse("abcdefghij", output_prefix="p" * 240)
    with pytest.raises(ConfigError, match=r"^query\[0\]\.id \(output topic.*'\.\.' is not a legal Kafka topic name"):
        _parse("..", output_prefix="")


@pytest.mark.parametrize("key,value,message", [
    ("input_topic", "my events", "may contain only ASCII letters"),
    ("input_topic", "évènements", "may contain only ASCII letters"),
    ("input_topic", "x" * 250, "has 250 characters"),
    ("input_topic", ".", "'.' is not a legal Kafka topic name"),
    ("dead_letter_topic", "dead letters", "may contain only ASCII letters"),
    ("dead_letter_topic", "..", "'..' is not a legal Kafka topic name"),
    ("dead_letter_topic", "d\u0000", "may contain only ASCII letters"),
    ("output_prefix", "out/", "may contain only ASCII letters"),
    ("output_prefix", "out put.", "may contain only ASCII letters"),
    ("internal_prefix", "intern al.", "may contain only ASCII letters"),
    ("internal_prefix", "i" * 244, "has 250 characters"),  # + "parsed"
])
def test_a_topic_or_prefix_kafka_cannot_use_names_the_field(key, value, message):
    with pytest.raises(ConfigError, match=rf"^kafka\.{key}: .*{message}"):
        _parse(**{key: value})


@pytest.mark.parametrize("kafka,qids,field", [
    ({"dead_letter_topic": "streamdp_events"}, ["q"], "kafka.dead_letter_topic"),
    ({"output_prefix": "streamdp.", "input_topic": "streamdp_q"}, ["q"], r"query\[0\]\.id"),
    ({}, ["a.b", "a_b"], r"query\[1\]\.id"),
])
def test_topics_that_differ_only_by_dot_and_underscore_collide(kafka, qids, field):
    with pytest.raises(ConfigError, match=rf"^{field}.*Kafka treats '\.' and '_' in topic names as colliding"):
        parse_config({"service": {"window_seconds": 60.0, "origin": 0.0}, "kafka": kafka,
                      "query": [{"id": q, "kind": "continual_counts", "sigma": 1.0} for q in qids]})


def test_an_empty_output_prefix_is_allowed():
    assert service_topics(_parse("counts", output_prefix="").kafka, ["counts"])[0] == "counts"


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "examples", "*.toml"))
                                        + glob.glob(os.path.join(ROOT, "deploy", "*.toml"))))
def test_every_shipped_config_still_passes_and_names_legal_topics(path):
    cfg = load_config(path)
    topics = service_topics(cfg.kafka, [t["id"] for t in cfg.query_tables]) + [cfg.kafka["input_topic"],
                                                                              forward_topic(cfg.kafka)]
    assert [t for t in topics if topic_problem(t) is not None] == []


def test_config_check_and_demo_refuse_the_nul_id_in_one_line(tmp_path, capsys):
    p = tmp_path / "nul.toml"
    p.write_text('[service]\nwindow_seconds = 60.0\norigin = 0\n[[query]]\nid = "a\\u0000b"\nkind = "continual_counts"\n'
                 "sigma = 3.0\n")
    assert main(["config", "check", str(p)]) == 1
    err = capsys.readouterr().err
    assert "query[0].id: must be a non-empty string" in err and len(err.strip().splitlines()) == 1
    assert main(["demo", "--config", str(p), "--limit", "100", "--out", str(tmp_path / "o"), "--no-plot",
                 "--quiet"]) != 0
    err = capsys.readouterr().err
    assert "query[0].id: must be a non-empty string" in err and "embedded null byte" not in err
    assert not (tmp_path / "o" / "releases").exists()


def test_run_checks_an_overridden_input_topic(capsys, monkeypatch):
    import streamdp.cli.service as service

    def started(*a, **k):
        raise AssertionError("started with an illegal topic")

    monkeypatch.setattr(service, "open_store_retrying", started)
    assert main(["run", "--input-topic", "my events", "--store", "redis://127.0.0.1:1/0"]) == 2
    assert "kafka.input_topic: may contain only ASCII letters" in capsys.readouterr().err


def test_replay_checks_its_topic_flag(tmp_path, capsys):
    f = tmp_path / "e.jsonl"
    f.write_text('{"user": "u", "ts": 1}\n')
    assert main(["replay", str(f), "--topic", "my events"]) == 2
    assert "--topic: may contain only ASCII letters" in capsys.readouterr().err
