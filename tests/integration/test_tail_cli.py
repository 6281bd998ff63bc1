"""``streamdp tail QUERY`` against a real broker (tansu): prints each release once per record key (a re-published
window — same key, same bytes — is printed once), as JSON or as one line per release, and stops at the end with
``--until-end``; a topic that does not exist is a one-line refusal (exit 2)."""

from __future__ import annotations

import asyncio
import json

import orjson
import pytest

from streamdp.cli.main import main

pytestmark = pytest.mark.integration


def _record(query: str, seq: int, counts: dict) -> bytes:
    return orjson.dumps({"schema_version": 1, "query": query, "kind": "continual_counts", "key": f"{query}/0/{seq}",
                         "epoch": 0, "window": {"seq": seq, "t": seq, "start": 3600.0 * (seq - 1),
                                                "end": 3600.0 * seq},
                         "values": {"counts": counts}, "cost": {"basis": "test"}}, option=orjson.OPT_SORT_KEYS)


def _publish(bootstrap: str, topic: str, records: list[bytes]) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    async def go():
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, 2, 1)])
        finally:
            await admin.close()
        p = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await p.start()
        try:
            for i, r in enumerate(records):
                key = json.loads(r)["key"].encode()
                await p.send_and_wait(topic, r, key=key, partition=i % 2)
        finally:
            await p.stop()

    asyncio.run(go())


def test_tail_prints_each_key_once_and_stops_at_the_end(tansu, topic_prefix, capsys):
    q = "counts"
    recs = [_record(q, 1, {"a": 3}), _record(q, 2, {"a": 5, "b": 1}), _record(q, 3, {"a": 6, "b": 2})]
    _publish(tansu.bootstrap, f"{topic_prefix}out.{q}", recs + [recs[1]])  # window 2 re-published (a crash)
    argv = ["tail", q, "--bootstrap", tansu.bootstrap, "--topic", f"{topic_prefix}out.{q}", "--from-beginning",
            "--until-end", "--timeout", "20"]
    assert main(argv + ["--json"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert sorted(json.loads(x)["key"] for x in out) == ["counts/0/1", "counts/0/2", "counts/0/3"]
    assert sorted(x.encode() for x in out) == sorted(recs)  # as published, byte for byte
    assert main(argv + ["--max", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(x.startswith("counts/0/") and "1970-01-01" in x for x in lines)


def test_tail_of_a_missing_topic_is_one_line(tansu, topic_prefix, capsys):
    rc = main(["tail", "nope", "--bootstrap", tansu.bootstrap, "--topic", f"{topic_prefix}absent", "--until-end",
               "--timeout", "2"])
    err = capsys.readouterr().err
    assert rc == 2 and "does not exist" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
