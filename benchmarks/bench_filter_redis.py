"""Filter throughput through Redis (docs/contract.md §7: users admitted per second in batches, target ≥ 200k/s).

Starts its own redis-server (no persistence) on a free loopback port and measures, for batches of 1000 / 5000 /
10000 users, in the same run:

* ``admit``        — RedisBudgetStore.admit (the Lua check-and-charge of Liang–Yi (adaptive budgeting) eq. (7)), one cost vector per batch;
* ``admit mixed``  — the same with ~50 distinct cost vectors per batch (index path of the script);
* ``admit ids``    — ``admit_ids`` by the engine's interned ids (its name table), one cost vector per batch,
                     with a replay digest per batch as the engine sends (when the code under test takes one);
* ``distinct``     — one cost vector, but every user has a different spent value (no two users share an
                     outcome: the script's per-value memo never hits — its worst case; it switches the memo off
                     after 512 users);
* ``m = n``        — every user its own cost vector (the script's memo is off);
* ``settle``       — RedisBudgetStore.settle of the admitted batch to a lower actual cost (two components change);
* ``HINCRBY py``   — baseline: one HINCRBY per user in a redis-py pipeline (no check, no idempotency);
* ``HINCRBY raw``  — the same pipeline packed by hand (what the store's own packer does), i.e. server-bound.

and a **stream workload** like the Kafka worker benchmark's (``--stream-users 50000``, 19 windows of 9000 users
drawn afresh from them, 3 cost vectors, a budget that halts a user after ~2–3 windows, fresh store; admitted by
``admit_ids`` as the engine does): users per second and Redis script µs per user-window, both stores in the same
window-by-window interleaving.

Each figure is users per second, the best of ``--repeats`` runs of ``--rounds`` batches (fresh seq per batch),
after one warm-up run that is not recorded.
``µs/user`` columns are the Redis-side script time per user-window (``INFO commandstats``: EVALSHA usec / users,
best run), i.e. the server CPU the Lua scripts cost.

``--baseline REV`` also loads ``redis_store.py`` / ``redis_scripts.py`` of git revision REV (``git show``; nothing
in the work tree changes) and runs the same cases on it, interleaved with the current code (separate namespaces
on the same server), so old and new are compared under the same load.

``--cluster`` runs the same cases (but the HINCRBY baselines) against a 3-primary Redis Cluster on loopback that the
script starts itself (``redis+cluster://``: one script per hash-slot group of a batch; no baseline — earlier code
had no cluster support).

``--release-log`` measures the release log instead: the nycflights13 year (365 daily windows, the demo's two
queries) through the engine and the Kafka worker's checkpoint into a fresh Redis, once keeping every record (the
rule before retention) and once with the retention of ``--keep`` records per query, and prints the Redis memory of
the release log (``MEMORY USAGE`` of its keys) per window, plus the per-user sizes (a user's hash, the interned
name in the checkpoint).

    .venv/bin/python benchmarks/bench_filter_redis.py [--rounds 20] [--repeats 3] [--chunk 10000] [--baseline HEAD]
    .venv/bin/python benchmarks/bench_filter_redis.py --cluster
    .venv/bin/python benchmarks/bench_filter_redis.py --release-log [--keep 64]
"""

from __future__ import annotations

import argparse
import inspect
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import types

import numpy as np
import redis

from streamdp.accounting.cost import N_COMPONENTS
from streamdp.engine.query import Names
from streamdp.filter.redis_store import RedisBudgetStore, _pack
from streamdp.noise.generator import unsafe_seeded_generator

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(cluster: bool = False) -> tuple[list[subprocess.Popen], str, str]:
    """A redis-server (or three joined into a cluster) with no persistence on loopback: (processes, URL, dir)."""
    exe = shutil.which("redis-server")
    if exe is None:
        sys.exit("redis-server is not installed")
    d = tempfile.mkdtemp(prefix="bench-redis-")
    ports = []
    while len(ports) < (3 if cluster else 1):
        p = free_port()
        if not cluster or (p < 55000 and p not in ports):  # a cluster node's bus listens on port + 10000
            ports.append(p)
    procs = []
    for port in ports:
        args = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", d,
                "--protected-mode", "no"]
        if cluster:
            args += ["--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf"]
        procs.append(subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    for port in ports:
        for _ in range(200):
            try:
                redis.Redis(port=port).ping()
                break
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        else:
            for p in procs:
                p.kill()
            sys.exit("redis-server did not start")
    if not cluster:
        return procs, f"redis://127.0.0.1:{ports[0]}/0", d
    subprocess.run(["redis-cli", "--cluster", "create", *[f"127.0.0.1:{p}" for p in ports], "--cluster-replicas", "0",
                    "--cluster-yes"], check=True, capture_output=True)
    for _ in range(300):
        if all(redis.Redis(port=p).cluster("info").get("cluster_state") == "ok" for p in ports):
            break
        time.sleep(0.1)
    return procs, f"redis+cluster://127.0.0.1:{ports[0]}", d


class _Servers:
    """The INFO/FLUSHALL view of every server of the store (the one server, or each primary of a cluster)."""

    def __init__(self, url: str) -> None:
        if url.startswith("redis+cluster://"):
            from redis.cluster import RedisCluster

            rc = RedisCluster.from_url(url.replace("+cluster", ""))
            self.nodes = [rc.get_redis_connection(n) for n in rc.get_primaries()]
        else:
            self.nodes = [redis.Redis.from_url(url)]

    def info(self, section: str) -> dict:
        if section != "commandstats":
            return self.nodes[0].info(section)
        out: dict = {}
        for n in self.nodes:
            for k, v in n.info("commandstats").items():
                acc = out.setdefault(k, {"calls": 0, "usec": 0})
                acc["calls"] += v["calls"]
                acc["usec"] += v["usec"]
        return out

    def flushall(self) -> None:
        for n in self.nodes:
            n.flushall()


def load_baseline(rev: str) -> type:
    """RedisBudgetStore of git revision ``rev`` (its redis_store.py with its own redis_scripts.py)."""
    def show(path: str) -> str:
        return subprocess.run(["git", "-C", REPO, "show", f"{rev}:{path}"], check=True, capture_output=True,
                              text=True).stdout

    scripts = types.ModuleType("baseline_redis_scripts")
    exec(compile(show("streamdp/filter/redis_scripts.py"), f"{rev}:redis_scripts.py", "exec"), scripts.__dict__)
    src = show("streamdp/filter/redis_store.py")
    imp = "from streamdp.filter import redis_scripts\n"
    if imp not in src:
        sys.exit(f"cannot load the baseline of {rev}: its redis_store.py does not import redis_scripts as expected")
    store = types.ModuleType("baseline_redis_store")
    store.__dict__["redis_scripts"] = scripts
    sys.modules[store.__name__] = store
    exec(compile(src.replace(imp, ""), f"{rev}:redis_store.py", "exec"), store.__dict__)
    cls = store.RedisBudgetStore
    cls.__abstractmethods__ = frozenset()  # methods the interface gained since (fences) are not exercised here
    return cls


def digest_kw(cls, seq: int) -> dict:
    """A replay digest for the engine-path cases (``admit ids``, the stream workload), as the engine sends one per
    window, when the implementation takes one (a baseline from before replay digests does not)."""
    if "digest" in inspect.signature(cls.admit_ids).parameters:
        return {"digest": f"{seq:032x}"}
    return {}


def script_usec(r) -> tuple[int, int]:
    s = r.info("commandstats").get("cmdstat_evalsha", {"calls": 0, "usec": 0})
    return s["calls"], s["usec"]


class Case:
    """Times ``fn(seq)`` over rounds; keeps the best rate and the best script µs per user."""

    def __init__(self) -> None:
        self.rate = 0.0
        self.us = float("inf")

    def run(self, r, fn, n_users: int, rounds: int, seq0: int, timed=None, record: bool = True) -> None:
        u0 = script_usec(r)[1]
        t = time.perf_counter()
        for i in range(rounds):
            fn(seq0 + i)
        wall = time.perf_counter() - t
        if timed is not None:  # fn measured its own timed part (and the script time of it)
            wall, us = timed()
        else:
            us = script_usec(r)[1] - u0
        if not record:
            return
        self.rate = max(self.rate, n_users * rounds / wall)
        self.us = min(self.us, us / (n_users * rounds))


def stream_workload(r, url: str, impls, n_users: int, windows: int = 19, per_window: int = 9000) -> list[tuple]:
    """The Kafka-like workload: every implementation on its own namespace of one fresh server, window by window
    (alternating which goes first). Returns (name, users/s, script µs per user-window, refused fraction)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rng = unsafe_seeded_generator(20240611)  # workload data only (no noise is drawn here)
    r.flushall()
    budget = np.array([4 * 10**12, 10**14, 0, 0, 0, 0], dtype=np.int64)
    vectors = np.array([[2_375_000_000_000, 3 * 10**12, 0, 0, 0, 0], [1_500_000_000_000, 2 * 10**12, 0, 0, 0, 0],
                        [625_000_000_000, 10**12, 0, 0, 0, 0]], dtype=np.int64)
    names = [f"u{i}" for i in range(n_users)]
    per_window = min(per_window, n_users)
    batches = []
    for _ in range(windows):
        ids = np.sort(rng.choice(n_users, size=per_window, replace=False))
        batches.append((ids, vectors[rng.choice(3, size=per_window, p=[0.80, 0.17, 0.03])]))
    acc = {}
    for k, (name, cls) in enumerate(impls):
        table = Names()
        table.ids(names)
        acc[name] = [cls.from_url(url, default_budget=budget, namespace=f"s{k}"), table, 0.0, 0, 0, 0]
    for w, (ids, costs) in enumerate(batches):
        for name in (list(acc) if w % 2 == 0 else list(acc)[::-1]):
            a = acc[name]
            u0 = script_usec(r)[1]
            t = time.perf_counter()
            mask = a[0].admit_ids("engine", w + 1, ids, costs, a[1], **digest_kw(type(a[0]), w + 1))
            a[2] += time.perf_counter() - t
            a[3] += script_usec(r)[1] - u0
            a[4] += ids.size
            a[5] += int(ids.size - np.count_nonzero(mask))
    out = []
    for name, a in acc.items():
        out.append((name, a[4] / a[2], a[3] / a[4], a[5] / a[4]))
        a[0].close()
    refused = {x[3] for x in out}
    assert len(refused) == 1, f"the implementations disagree: {out}"
    return out


def release_log_sizes(url: str, keep: int) -> None:
    """The release log's Redis memory per window: the nycflights13 year through the engine and the worker's
    checkpoint, keeping every record (the rule before retention) and keeping ``keep`` per query."""
    import warnings

    from streamdp.adapters.kafka.checkpoint import DeferredReleaseLog, RedisCheckpoint
    from streamdp.cli.demo import DEFAULT_NYC_CONFIG
    from streamdp.config.loader import parse_config
    from streamdp.engine.engine import ReleaseEngine
    from streamdp.input.events import parse_batch
    from streamdp.input.sources import nycflights13_events

    events = list(nycflights13_events())
    rows = []
    for label, kept in (("every record (before)", 10**9), (f"retention, {keep} kept per query", keep)):
        _Servers(url).flushall()
        raw = dict(DEFAULT_NYC_CONFIG, service=dict(DEFAULT_NYC_CONFIG["service"], unsafe_test_seed=1))
        cfg = parse_config(raw)
        from streamdp.accounting.cost import budget_vector

        store = RedisBudgetStore.from_url(url, default_budget=budget_vector(cfg.budget))
        store.release_bodies_kept = kept
        ck = RedisCheckpoint(store, "bench", "events")
        ck.claim("bench")
        view = DeferredReleaseLog(store, fence=lambda: ck.fence)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            eng = ReleaseEngine(cfg.engine_config(), cfg.build_queries(), view)
        sizes = []
        for lo in range(0, len(events), 5000):
            eng.ingest(parse_batch(events[lo:lo + 5000])[0])
            eng.close_due()
            rel, led = view.take()
            ck.write({"n": lo}, {0: lo}, [], rel, led, {})
            sizes.append((eng.windows.last_closed, _release_log_bytes(store)))
        n_users = len(eng.users)
        w_end, b_end = sizes[-1]
        w_mid, b_mid = next((w, b) for w, b in sizes if w >= w_end - 100)
        rows.append((label, w_end, b_end, (b_end - b_mid) / max(1, w_end - w_mid), n_users))
        user_bytes = _user_bytes(store, eng)
        store.close()
    print("\n# release log: the nycflights13 year (365 daily windows, 2 queries), through the engine and the worker's"
          " checkpoint; Redis MEMORY USAGE of the release-log keys")
    print(" | ".join(f"{h:>32}" for h in ("rule", "windows", "bytes at the end", "bytes per window (last 100)")))
    for label, w, b, per, _ in rows:
        print(f"{label:>32} | {w:>32d} | {b:>32,d} | {per:>32,.1f}")
    print(f"# per user ({rows[-1][4]} users): {user_bytes}")


def _release_log_bytes(store) -> int:
    nodes = _Servers(store.url).nodes
    total = 0
    for n in nodes:
        for pat in ("rel:*", "reld:*", "relq:*"):
            for k in n.scan_iter(match=store._meta.replace("{", "\\{").replace("}", "\\}") + pat, count=1000):
                total += n.memory_usage(k, samples=0) or 0
    return total


def _user_bytes(store, eng) -> str:
    """A user's Redis hash (one scope's state, tagged) and the interned name in the checkpoint, averaged."""
    n = _Servers(store.url).nodes[0]
    keys = list(n.scan_iter(match=store._user_prefix.replace("{", "\\{") + "*", count=1000))[:2000]
    avg = sum(n.memory_usage(k, samples=0) for k in keys) / max(1, len(keys))
    names = sum(len(u.encode()) for u in eng.users.names(np.arange(len(eng.users))))
    return (f"Redis hash {avg:.0f} B on average over {len(keys)} users; their names {names / len(eng.users):.1f} B "
            f"on average in the checkpoint's name log")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,5000,10000")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=None, help="users per script call (default: the store's)")
    ap.add_argument("--baseline", default=None, metavar="REV",
                    help="also run the store of this git revision, interleaved (e.g. HEAD)")
    ap.add_argument("--stream-users", type=int, default=50_000, help="users of the stream workload (0: skip it)")
    ap.add_argument("--cluster", action="store_true", help="against a 3-primary Redis Cluster (started here)")
    ap.add_argument("--release-log", action="store_true", help="measure the release log's size per window instead")
    ap.add_argument("--keep", type=int, default=64, help="--release-log: records kept per query with retention")
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")]
    impls = [("current", RedisBudgetStore)]
    if args.baseline:
        if args.cluster:
            sys.exit("--baseline: code before the cluster support cannot run on a cluster")
        impls.append((f"base {args.baseline}"[:13], load_baseline(args.baseline)))

    procs, url, d = start_redis(cluster=args.cluster)
    try:
        r = _Servers(url)
        info = r.info("server")
        load0 = os.getloadavg()[0]
        print(f"# redis {info['redis_version']}{' cluster of 3 primaries' if args.cluster else ''} | "
              f"{platform.python_implementation()} {platform.python_version()} | "
              f"{os.cpu_count()} cores | {platform.processor() or platform.machine()} | load avg {load0:.2f}")
        if args.release_log:
            release_log_sizes(url, args.keep)
            return
        rows = []
        for n in sizes:
            r.flushall()
            kw = {} if args.chunk is None else {"chunk": args.chunk}
            budget = np.array([10**15, 10**15, 0, 0, 0, 0], dtype=np.int64)
            users = [f"user-{i:07d}" for i in range(n)]
            table = Names()
            table.ids(users)
            ids = np.arange(n, dtype=np.int64)
            cost = np.array([1000, 7, 0, 0, 0, 0], dtype=np.int64)
            mixed = np.zeros((n, N_COMPONENTS), dtype=np.int64)
            mixed[:, 0] = 1000 + (np.arange(n) % 50)
            mixed[:, 1] = 7
            own = np.zeros((n, N_COMPONENTS), dtype=np.int64)
            own[:, 0] = 1000 + np.arange(n)
            own[:, 1] = 7
            setups = []
            for k, (name, cls) in enumerate(impls):
                st = cls.from_url(url, default_budget=budget, namespace=f"b{k}", **kw)
                st.admit("warm", 1, users, cost)  # creates the users' hashes
                # the "distinct" users: every one with a different spent value
                dusers = [f"d-{u}" for u in users]
                st.admit("warm", 1, dusers, own)
                setups.append((name, st, dusers, {c: Case() for c in
                                                  ("admit", "mixed", "ids", "distinct", "own", "settle")}))
            seq = 10
            for rep in range(-1, args.repeats):  # rep -1: warm-up, not recorded
                rec = {"record": rep >= 0}
                for name, st, dusers, cases in setups:  # interleaved: every implementation once per repeat
                    acc = [0.0, 0]  # settle's own wall time and script usec (the admits before it are not timed)

                    def settle_round(s, st=st, acc=acc):
                        st.admit("pwyg", s, users, cost)
                        u0 = script_usec(r)[1]
                        t0 = time.perf_counter()
                        st.settle("pwyg", s, users, cost // 2)
                        acc[0] += time.perf_counter() - t0
                        acc[1] += script_usec(r)[1] - u0

                    def settle_timed(acc=acc):
                        out = (acc[0], acc[1])
                        acc[0], acc[1] = 0.0, 0
                        return out

                    cases["admit"].run(r, lambda s, st=st: st.admit("bench", s, users, cost), n, args.rounds, seq,
                                       **rec)
                    cases["mixed"].run(r, lambda s, st=st: st.admit("mixed", s, users, mixed), n, args.rounds, seq,
                                       **rec)
                    cases["ids"].run(r, lambda s, st=st: st.admit_ids("ids", s, ids, cost, table,
                                                                      **digest_kw(type(st), s)),
                                     n, args.rounds, seq, **rec)
                    cases["distinct"].run(r, lambda s, st=st, du=dusers: st.admit("bench", s, du, cost), n,
                                          args.rounds, seq, **rec)
                    cases["own"].run(r, lambda s, st=st, du=dusers: st.admit("own", s, du, own), n, args.rounds,
                                     seq, **rec)
                    cases["settle"].run(r, settle_round, n, args.rounds, seq, timed=settle_timed, **rec)
                seq += args.rounds
            for name, st, dusers, cases in setups:
                u0 = st.get_user(users[0])  # sanity: the benchmark really charged
                assert u0.spent[0] > 0 and not u0.halted
                rows.append((n, name, st.chunk, cases))
                st.close()

            if args.cluster:  # the HINCRBY baselines pipeline on one connection: single server only
                continue
            r1 = r.nodes[0]
            keys = [f"sdp:{{u:{u}}}".encode() for u in users]

            def hincr_py(_seq):
                pipe = r1.pipeline(transaction=False)
                for k in keys:
                    pipe.hincrby(k, "s0", 1000)
                pipe.execute()

            conn = r1.connection_pool.get_connection()

            def hincr_raw(_seq):
                conn.send_packed_command([b"".join(_pack([b"HINCRBY", k, b"s0", b"1000"]) for k in keys)],
                                         check_health=False)
                for _ in keys:
                    conn.read_response()

            hp, hr = Case(), Case()
            for rep in range(-1, args.repeats):
                hp.run(r, hincr_py, n, args.rounds, 0, record=rep >= 0)
                hr.run(r, hincr_raw, n, args.rounds, 0, record=rep >= 0)
            r1.connection_pool.release(conn)
            rows.append((n, "HINCRBY", 0, {"py": hp, "raw": hr}))
        cols = [("admit", "admit/s"), ("mixed", "mixed/s"), ("ids", "admit ids/s"), ("distinct", "distinct/s"),
                ("own", "m = n/s"), ("settle", "settle/s")]
        hdr = ["batch", "code", "chunk"] + [h for _, h in cols] + ["µs/user admit", "µs/user mixed",
                                                                   "µs/user dist.", "µs/user m=n", "µs/user settle"]
        print(" | ".join(f"{h:>13}" for h in hdr))
        for n, name, chunk, cases in rows:
            if name == "HINCRBY":
                print(f"{n:>13d} | {'HINCRBY':>13} | {'':>13} | py {cases['py'].rate:>10,.0f} | "
                      f"raw {cases['raw'].rate:>9,.0f}")
                continue
            cells = [f"{n:>13d}", f"{name:>13}", f"{chunk:>13d}"]
            cells += [f"{cases[c].rate:>13,.0f}" for c, _ in cols]
            cells += [f"{cases[c].us:>13.2f}" for c in ("admit", "mixed", "distinct", "own", "settle")]
            print(" | ".join(cells))
        print(f"# best of {args.repeats} × {args.rounds} batches; users per second (Python client + server); "
              f"µs/user = Redis script time per user-window (INFO commandstats); target admit ≥ 200,000/s; "
              f"load avg {load0:.2f} before, {os.getloadavg()[0]:.2f} after")
        if args.stream_users:
            res = stream_workload(r, url, impls, args.stream_users)
            print(f"\n# stream workload: 19 windows × {min(9000, args.stream_users)} of {args.stream_users} users, "
                  f"admit_ids, fresh store; refused {res[0][3]:.0%} of user-windows")
            print(" | ".join(f"{h:>16}" for h in ("code", "users/s", "µs/user-window")))
            for name, rate, us, _ in res:
                print(f"{name:>16} | {rate:>16,.0f} | {us:>16.2f}")
            print(f"# load avg {os.getloadavg()[0]:.2f}")
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(5)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
