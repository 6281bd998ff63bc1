"""Filter throughput through Redis (DESIGN.md §7: users admitted per second in batches, target ≥ 200k/s).

Starts its own redis-server (no persistence) on a free loopback port and measures, for batches of 1000 / 5000 /
10000 users, in the same run:

* ``admit``        — RedisBudgetStore.admit (the Lua check-and-charge of 000 eq. (7)), one cost vector per batch;
* ``admit mixed``  — the same with ~50 distinct cost vectors per batch (index path of the script);
* ``settle``       — RedisBudgetStore.settle of the admitted batch to a lower actual cost;
* ``HINCRBY py``   — baseline: one HINCRBY per user in a redis-py pipeline (no check, no idempotency);
* ``HINCRBY raw``  — the same pipeline packed by hand (what the store's own packer does), i.e. server-bound.

Each figure is users per second, the best of ``--repeats`` runs of ``--rounds`` batches (fresh seq per batch).

    .venv/bin/python benchmarks/bench_filter_redis.py [--rounds 20] [--repeats 3] [--chunk 10000]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
import redis

from streamdp.accounting.cost import N_COMPONENTS
from streamdp.filter.redis_store import RedisBudgetStore, _pack


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis() -> tuple[subprocess.Popen, str, str]:
    exe = shutil.which("redis-server")
    if exe is None:
        sys.exit("redis-server is not installed")
    d = tempfile.mkdtemp(prefix="bench-redis-")
    port = free_port()
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", d, "--protected-mode", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    for _ in range(200):
        try:
            redis.Redis.from_url(url).ping()
            return proc, url, d
        except redis.exceptions.ConnectionError:
            time.sleep(0.05)
    proc.kill()
    sys.exit("redis-server did not start")


def best_rate(fn, n_users: int, rounds: int, repeats: int) -> float:
    best = float("inf")
    for rep in range(repeats):
        t = time.perf_counter()
        for i in range(rounds):
            fn(rep * rounds + i + 1)
        best = min(best, time.perf_counter() - t)
    return n_users * rounds / best


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,5000,10000")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=None, help="users per script call (default: the store's)")
    args = ap.parse_args(argv)
    sizes = [int(x) for x in args.sizes.split(",")]

    proc, url, d = start_redis()
    try:
        r = redis.Redis.from_url(url)
        info = r.info("server")
        print(f"# redis {info['redis_version']} | {platform.python_implementation()} {platform.python_version()} | "
              f"{os.cpu_count()} cores | {platform.processor() or platform.machine()} | "
              f"load avg {os.getloadavg()[0]:.2f}")
        rows = []
        for n in sizes:
            r.flushall()
            kw = {} if args.chunk is None else {"chunk": args.chunk}
            budget = np.array([10**15, 10**15, 0, 0, 0, 0], dtype=np.int64)
            st = RedisBudgetStore.from_url(url, default_budget=budget, **kw)
            users = [f"user-{i:07d}" for i in range(n)]
            cost = np.array([1000, 7, 0, 0, 0, 0], dtype=np.int64)
            mixed = np.zeros((n, N_COMPONENTS), dtype=np.int64)
            mixed[:, 0] = 1000 + (np.arange(n) % 50)
            mixed[:, 1] = 7
            st.admit("warm", 1, users, cost)  # creates the users' hashes

            def admit(seq):
                st.admit("bench", seq, users, cost)

            def admit_mixed(seq):
                st.admit("mixed", seq, users, mixed)

            settle_seq = iter(range(1, 10**9))

            def settle(_seq):
                s = next(settle_seq)
                st.admit("pwyg", s, users, cost)
                t0 = time.perf_counter()
                st.settle("pwyg", s, users, cost // 2)
                settle.time += time.perf_counter() - t0

            settle.time = 0.0
            keys = [f"sdp:{{u:{u}}}".encode() for u in users]

            def hincr_py(_seq):
                pipe = r.pipeline(transaction=False)
                for k in keys:
                    pipe.hincrby(k, "s0", 1000)
                pipe.execute()

            conn = r.connection_pool.get_connection()

            def hincr_raw(_seq):
                conn.send_packed_command([b"".join(_pack([b"HINCRBY", k, b"s0", b"1000"]) for k in keys)],
                                         check_health=False)
                for _ in keys:
                    conn.read_response()

            a = best_rate(admit, n, args.rounds, args.repeats)
            am = best_rate(admit_mixed, n, args.rounds, args.repeats)
            settle.time = 0.0
            best_rate(settle, n, args.rounds, 1)
            se = n * args.rounds / settle.time
            hp = best_rate(hincr_py, n, args.rounds, args.repeats)
            hr = best_rate(hincr_raw, n, args.rounds, args.repeats)
            r.connection_pool.release(conn)
            # sanity: the benchmark really charged
            u0 = st.get_user(users[0])
            assert u0.spent[0] > 0 and not u0.halted
            rows.append((n, st.chunk, a, am, se, hp, hr))
            st.close()
        hdr = ("batch", "chunk", "admit/s", "admit mixed/s", "settle/s", "HINCRBY py/s", "HINCRBY raw/s")
        print(" | ".join(f"{h:>13}" for h in hdr))
        for row in rows:
            print(" | ".join([f"{row[0]:>13d}", f"{row[1]:>13d}"] + [f"{x:>13,.0f}" for x in row[2:]]))
        print(f"# best of {args.repeats} × {args.rounds} batches; users per second; target admit ≥ 200,000/s")
    finally:
        proc.terminate()
        proc.wait(5)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
