"""Same input, same releases, against tansu and Redis (issue 32): one topic read as a backlog and read live, with 1
and 3 partitions and a SIGKILL mid-run, gives exactly what the engine gives when fed each partition's records —
releases byte for byte (``closed_by`` included), dead letters and every user's spend — and a subscriber reading an
output topic partition by partition sees the windows in order.

Before 2026-12-07 the worker decided lateness per processing step: the same topic read as a backlog let events in
that a live run dead-lettered as ``late`` (0 against 24 of 24 in the outside check), and with three partitions the
partitions read first let their late events into releases."""

from __future__ import annotations

import asyncio
import collections
import time

import orjson
import pytest

from streamdp.adapters.kafka.broker_config import client_kwargs
from streamdp.adapters.kafka.topics import ensure_topics
from streamdp.filter.redis_store import RedisBudgetStore
from streamdp.noise.generator import synthetic_data_generator

from kafka_helpers import (engine_reference, produce, read_topic, service_config, spent_by_user, start_worker,
                           wait_for, wait_or_kill, write_config)

pytestmark = pytest.mark.integration

H = 3600.0
ORIGIN = 1_700_000_000.0
SERVICE = {"window_seconds": H, "horizon": 16, "origin": ORIGIN, "allowed_lateness": 600.0}
QUERIES = [{"id": "c", "kind": "continual_counts", "sigma": 1.0, "max_items_per_window": 2},
           {"id": "k", "kind": "top_k", "epsilon": 1.0, "delta": 1e-6, "k": 3, "kbar": 8, "k_star": 200}]
BUDGET = {"zcdp_rho": 100.0}  # users reach their budget after a few windows, not at once
ARGS = ["--standalone", "--drain-idle", "2", "--close-open-windows", "--checkpoint-batches", "1"]


def _events() -> list[bytes]:
    """≈ 7 hourly windows of 1,400 events (70 users) with disorder inside the lateness, 12 events one and two
    windows behind (late in their partition whatever the cut) and two bad records."""
    g = synthetic_data_generator(11)
    out = []
    for i in range(1400):
        ts = ORIGIN + i * 18.0 + float(g.uniform(-500.0, 0.0))
        items = [f"i{int(x)}" for x in g.integers(0, 20, int(g.integers(1, 3)))]
        out.append(orjson.dumps({"user": f"u{int(g.integers(0, 70))}", "ts": ts, "items": items}))
    for k in range(12):
        at = 300 + 90 * k
        ts = orjson.loads(out[at])["ts"] - (1 + k % 2) * H
        out.insert(at, orjson.dumps({"user": f"u{k}", "ts": ts, "items": ["late"]}))
    out.insert(50, b'{"user": "u1", "ts": "yesterday"}')
    out.insert(60, orjson.dumps({"user": "u2", "ts": ORIGIN - 50.0, "items": []}))
    return out


EVENTS = _events()


def _outcome(bootstrap: str, raw: dict, url: str, n_records: int):
    per_key: dict[str, set[bytes]] = collections.defaultdict(set)
    order: dict[str, list[tuple[int, int]]] = {}
    for q in raw["query"]:
        rows = read_topic(bootstrap, raw["kafka"]["output_prefix"] + q["id"], n_records // len(raw["query"]))
        for _, _, k, v in rows:
            per_key[k.decode()].add(v)
        order[q["id"]] = [(p, orjson.loads(v)["window"]["seq"]) for p, _, _, v in rows]
    dead = {(d["partition"], d["offset"], d["reason"])
            for d in (orjson.loads(v) for *_, v in read_topic(bootstrap, raw["kafka"]["dead_letter_topic"], 1))}
    return per_key, dead, spent_by_user(RedisBudgetStore.from_url(url)), order


def _check(got, ref) -> None:
    per_key, dead, spend, order = got
    records, ref_dead, ref_spend = ref
    assert {k: len(v) for k, v in per_key.items() if len(v) != 1} == {}  # a key re-published carries equal bytes
    assert {k: next(iter(v)) for k, v in per_key.items()} == records
    assert dead == ref_dead
    assert spend == ref_spend
    for q, rows in order.items():  # one partition per output topic, windows in order (re-deliveries repeat)
        assert {p for p, _ in rows} == {0}, q
        seqs = [s for _, s in rows]
        firsts = [s for i, s in enumerate(seqs) if s not in seqs[:i]]
        assert firsts == sorted(firsts) == list(range(1, len(firsts) + 1)), (q, seqs)


def _produce_live(bootstrap: str, topic: str, partitions: int, chunks: int = 5, pause: float = 0.7) -> None:
    step = -(-len(EVENTS) // chunks)
    for i in range(0, len(EVENTS), step):
        produce(bootstrap, topic, EVENTS[i:i + step], partitions)
        time.sleep(pause)


@pytest.mark.parametrize("partitions", [1, 3])
def test_backlog_live_and_a_sigkill_give_what_the_engine_gives(tansu, redis_server, tmp_path, topic_prefix,
                                                               partitions):
    import redis

    ref = engine_reference(service_config("x.", tansu.bootstrap, partitions=partitions, service=SERVICE,
                                          queries=QUERIES, budget=BUDGET), EVENTS, partitions)
    records, ref_dead, _ = ref
    assert sum(r == "late" for *_, r in ref_dead) >= 8 and len(records) >= 2 * 7
    n = len(records)
    db = 2
    for mode in ("backlog", "live") if partitions == 1 else ("backlog", "live+kill"):
        raw = service_config(f"{topic_prefix}{partitions}{mode[:4]}.", tansu.bootstrap, partitions=partitions,
                             service=SERVICE, queries=QUERIES, budget=BUDGET)
        cfg = write_config(tmp_path / f"{mode}.toml", raw)
        url = redis_server.url.rsplit("/", 1)[0] + f"/{db}"
        db += 1
        redis.Redis.from_url(url).flushdb()
        topic = raw["kafka"]["input_topic"]
        log = tmp_path / f"{mode}.log"
        if mode == "backlog":
            if partitions == 3:  # an output topic of before 2026-12-07, with 3 partitions: only partition 0 written
                asyncio.run(ensure_topics(client_kwargs({"bootstrap": tansu.bootstrap}),
                                          [raw["kafka"]["output_prefix"] + "c"], 3))
            assert produce(tansu.bootstrap, topic, EVENTS, partitions) == len(EVENTS)
            assert wait_or_kill(start_worker(["--config", cfg, "--store", url, *ARGS], log_path=str(log)), 90) == 0, \
                log.read_text()[-3000:]
            if partitions == 3:
                assert "has 3 partitions: releases are published on its partition 0 only" in log.read_text()
        else:
            env = {"STREAMDP_CRASH_POINT": "after_checkpoint:3"} if "kill" in mode else None
            w = start_worker(["--config", cfg, "--store", url, *ARGS], env, str(log))
            wait_for(lambda: "worker started" in log.read_text(), 60, "the worker to start", w)
            _produce_live(tansu.bootstrap, topic, partitions)
            rc = wait_or_kill(w, 90)
            if "kill" in mode:
                assert rc == -9, log.read_text()[-3000:]  # killed after its 3rd checkpoint, mid-stream
                rc = wait_or_kill(start_worker(["--config", cfg, "--store", url, *ARGS], log_path=str(log)), 90)
            assert rc == 0, log.read_text()[-3000:]
        _check(_outcome(tansu.bootstrap, raw, url, n), ref)
