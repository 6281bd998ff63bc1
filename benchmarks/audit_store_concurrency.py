"""A randomized concurrency audit of the Redis budget store: several OS processes admitting, settling and granting
against one redis-server (or a Redis Cluster), the outcome checked against a model of the filter
(Liang & Yi, Adaptive Privacy Budgeting, Alg. 1 with filter eq. (7), componentwise).

Workload (all drawn from ``--seed``): ``--scopes`` deployments, each with its own admission scope and a list of
``--seqs`` window batches over a shared pool of ``--users`` users (so deployments compete for the same budgets).
Every deployment runs as TWO processes — an *owner* and a *successor* that replays the very same batches (same
seqs, same digests) in another order, cut into other chunk sizes, at the same time: the store must charge every
batch once however its copies interleave. The owner claims the deployment's fence at start; the successor replays
unfenced for a while, then claims the fence, after which the owner's calls must be refused (and the owner stops,
as the Kafka worker does). A share of batches is settled (to half the reservation) by whichever process gets there;
one more process, the operator, raises random users' budgets (grants) all along. Chunk sizes are small and random,
so a batch is many script calls.

Checks (every process logs each call: start/end times on the machine's monotonic clock, answers, errors):

1. **each (scope, seq) charged once**: every copy of a batch answers every user the same;
2. **spent = the sum of the charges**: a user's final spend equals, over the batches that admitted them, the
   reservation — or the settled half of it where the batch was settled — in every component;
3. **no user over budget**: spent ≤ budget at the end (budgets only grow here), and a user never granted anything
   is within the default;
4. **halts sticky**: a user refused by a batch is halted at the end, and no batch whose every copy (or attempt
   that was fenced part-way) started after that refusal was answered admitted the user;
5. **fencing**: after the successor's claim returned, no owner call that started later succeeded.

Run from the repository's root; it starts its own redis-server (``--cluster``: a 3-primary cluster) on loopback:

    .venv/bin/python benchmarks/audit_store_concurrency.py [--scopes 6] [--seqs 300] [--users 5000] [--seeds 1,2,3]

``tests/filter/test_store_concurrency_audit.py`` runs :func:`run_audit` at CI size (a few seconds).
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing as mp
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import numpy as np

N = 6  # cost components (streamdp.accounting.cost.N_COMPONENTS)
COSTS = np.array([[3, 1, 0, 0, 0, 0], [5, 0, 2, 0, 0, 0], [2, 2, 0, 0, 1, 1], [8, 3, 0, 0, 0, 0]], dtype=np.int64)
DEFAULT = np.array([60, 20, 10, 5, 4, 4], dtype=np.int64)


@dataclass
class Plan:
    scopes: int = 2
    seqs: int = 40
    users: int = 1500
    batch: int = 300
    settle_share: float = 0.3
    grants: int = 60
    seed: int = 1


def batches(plan: Plan, scope: int) -> list[tuple[int, str, list[str], np.ndarray, bool]]:
    """Scope ``scope``'s batches: (seq, digest, users, costs, settled?), the same in every process."""
    rng = np.random.Generator(np.random.PCG64([plan.seed, scope]))  # workload data only, no noise
    out = []
    for seq in range(1, plan.seqs + 1):
        n = int(rng.integers(plan.batch // 2, plan.batch + 1))
        ids = np.sort(rng.choice(plan.users, size=n, replace=False))
        costs = COSTS[rng.integers(0, len(COSTS), size=n)]
        digest = hashlib.blake2b(f"{plan.seed}/{scope}/{seq}".encode(), digest_size=16).hexdigest()
        out.append((seq, digest, [f"u{i}" for i in ids], costs, bool(rng.random() < plan.settle_share)))
    return out


def _open(url: str, chunk: int):
    from streamdp.filter.redis_store import RedisBudgetStore

    return RedisBudgetStore.from_url(url, chunk=chunk)


def _deployment(url: str, plan: Plan, scope: int, role: str, q, start) -> None:
    """One process: the owner or the successor of deployment ``scope``."""
    from streamdp.filter.store import Fenced

    rng = np.random.Generator(np.random.PCG64([plan.seed, scope, 1 if role == "owner" else 2]))
    st = _open(url, int(rng.integers(7, 120)))
    name = f"ckpt:audit:{scope}"
    fence = st.claim_fence(name) if role == "owner" else None
    claim_at = int(rng.integers(plan.seqs // 4, 3 * plan.seqs // 4 + 1)) if role == "successor" else -1
    log: list = []
    start.wait()
    for seq, digest, users, costs, settled in batches(plan, scope):
        if role == "successor" and seq == claim_at:
            t0 = time.monotonic()
            fence = st.claim_fence(name)
            log.append(("claim", seq, t0, time.monotonic()))
        order = rng.permutation(len(users)) if role == "successor" else np.arange(len(users))
        us, cs = [users[i] for i in order], costs[order]
        st.chunk = int(rng.integers(7, 120))
        t0 = time.monotonic()
        try:
            mask = st.admit(f"audit:{scope}", seq, us, cs, digest=digest, fence=fence)
        except Fenced:  # refused — possibly after some of its slot groups or chunks were applied
            log.append(("fenced", seq, t0, time.monotonic()))
            break
        t1 = time.monotonic()
        back = np.empty(len(users), dtype=bool)
        back[order] = mask
        log.append(("admit", seq, t0, t1, back))
        if settled and back.any():
            adm = [u for u, ok in zip(us, mask) if ok]
            try:
                st.settle(f"audit:{scope}", seq, adm, cs[mask] // 2, digest=digest, fence=fence)
            except Fenced:
                log.append(("fenced", seq, t0, time.monotonic()))
                break
        if rng.random() < 0.2:
            time.sleep(float(rng.random()) * 0.004)  # let the other copy overtake now and then
    st.close()
    q.put((scope, role, log))


def _operator(url: str, plan: Plan, q, start) -> None:
    rng = np.random.Generator(np.random.PCG64([plan.seed, 999]))
    st = _open(url, 100)
    granted = {}
    start.wait()
    for _ in range(plan.grants):
        u = f"u{int(rng.integers(plan.users))}"
        rec = st.get_user(u)
        cur = DEFAULT if rec is None else rec.budget
        new = cur + rng.integers(0, 6, size=N)  # budgets only grow here
        st.grant(u, new, actor="audit")
        granted[u] = new.tolist()
        time.sleep(float(rng.random()) * 0.01)
    st.close()
    q.put((-1, "operator", granted))


def run_audit(url: str, plan: Plan, *, timeout: float = 600.0) -> dict:
    """Run the workload of ``plan`` against the store at ``url`` (flushed first) and check it; returns figures.
    Raises AssertionError naming the first violation."""
    import redis

    from streamdp.filter.redis_store import RedisBudgetStore

    if url.startswith("redis+cluster://"):
        from redis.cluster import RedisCluster

        rc = RedisCluster.from_url(url.replace("+cluster", ""))
        for n in rc.get_primaries():
            rc.get_redis_connection(n).flushall()
        rc.close()
    else:
        redis.Redis.from_url(url).flushall()
    RedisBudgetStore.from_url(url, default_budget=DEFAULT).close()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    start = ctx.Barrier(2 * plan.scopes + 1)
    procs = [ctx.Process(target=_deployment, args=(url, plan, s, role, q, start))
             for s in range(plan.scopes) for role in ("owner", "successor")]
    procs.append(ctx.Process(target=_operator, args=(url, plan, q, start)))
    t0 = time.monotonic()
    for p in procs:
        p.start()
    logs, granted = {}, {}
    for _ in procs:
        scope, role, payload = q.get(timeout=timeout)
        if role == "operator":
            granted = payload
        else:
            logs[(scope, role)] = payload
    for p in procs:
        p.join(30)
        assert p.exitcode == 0, f"a process failed (exit {p.exitcode})"
    wall = time.monotonic() - t0
    return check(url, plan, logs, granted, wall)


def check(url: str, plan: Plan, logs: dict, granted: dict, wall: float) -> dict:
    from streamdp.filter.redis_store import RedisBudgetStore

    expected = {}  # user -> expected spent
    refusals = {}  # user -> earliest end time of a call that answered "refused" in a new batch
    admitted_after = []  # (user, earliest start of the batch's copies) of admitted users
    n_admit = n_copies = n_refused = n_settled = n_fenced = 0
    for scope in range(plan.scopes):
        owner, succ = logs[(scope, "owner")], logs[(scope, "successor")]
        claims = [e for e in succ if e[0] == "claim"]
        assert claims, f"scope {scope}: the successor never claimed the fence"
        claim_end = claims[0][3]
        for e in owner:  # 5. fencing: no owner call started after the claim returned succeeded
            if e[0] == "admit":
                assert e[2] <= claim_end, f"scope {scope} seq {e[1]}: the owner's admit started after the " \
                                          "successor's claim returned and was not refused"
        n_fenced += sum(e[0] == "fenced" for e in owner)
        copies: dict[int, list] = {}
        tried: dict[int, float] = {}  # seq → the earliest start of any attempt (a fenced one may have applied part)
        for e in owner + succ:
            if e[0] == "admit":
                copies.setdefault(e[1], []).append(e)
            if e[0] in ("admit", "fenced"):
                tried[e[1]] = min(tried.get(e[1], np.inf), e[2])
        for seq, digest, users, costs, settled in batches(plan, scope):
            cs = copies.get(seq, [])
            assert cs, f"scope {scope} seq {seq}: no copy of the batch completed"
            first = cs[0][4]
            for e in cs[1:]:  # 1. every copy answers every user the same
                bad = np.flatnonzero(e[4] != first)
                assert bad.size == 0, f"scope {scope} seq {seq}: copies disagree on {users[bad[0]]}"
            n_copies += len(cs)
            start = tried[seq]
            end_refused = min(e[3] for e in cs)
            for i, u in enumerate(users):
                if first[i]:
                    c = costs[i] // 2 if settled else costs[i]
                    expected[u] = expected.get(u, 0) + c
                    admitted_after.append((u, start, scope, seq))
                    n_admit += 1
                else:
                    refusals[u] = min(refusals.get(u, np.inf), end_refused)
                    n_refused += 1
            n_settled += settled and bool(first.any())
    st = RedisBudgetStore.from_url(url)
    recs = {r.user: r for r in st.iter_users()}
    st.close()
    over = 0
    for u, r in recs.items():
        want = expected.get(u, np.zeros(N, dtype=np.int64))
        assert r.spent.tolist() == np.asarray(want).tolist(), \
            f"{u}: spent {r.spent.tolist()} but the admitted batches charged {np.asarray(want).tolist()}"  # 2.
        assert (r.spent <= r.budget).all(), f"{u}: spent {r.spent.tolist()} > budget {r.budget.tolist()}"  # 3.
        if u not in granted:
            assert (r.spent <= DEFAULT).all() and r.budget.tolist() == DEFAULT.tolist(), u
        assert r.halted == (u in refusals), f"{u}: halted {r.halted}, refused {u in refusals}"  # 4.
        over += int((r.spent > r.budget).any())
    for u in expected:
        assert u in recs, f"{u}: charged by the log, unknown to the store"
    for u, start, scope, seq in admitted_after:  # 4. halts sticky: nothing admitted after a refusal
        assert not start > refusals.get(u, np.inf), \
            f"{u}: admitted by scope {scope} seq {seq}, whose copies all started after a refusal of {u}"
    return {"wall_s": wall, "users": len(recs), "admissions": n_admit, "refusals": n_refused,
            "batch_copies": n_copies, "settled_batches": n_settled, "owner_calls_fenced": n_fenced,
            "halted": sum(r.halted for r in recs.values()), "grants": len(granted)}


# ---- command line: own servers, longer runs ---------------------------------------------------------------------
def _free_port(hi: int = 65535) -> int:
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        if p < hi:
            return p
    raise RuntimeError("no free port")


def _start_servers(cluster: bool) -> tuple[str, list, str]:
    import redis

    exe = shutil.which("redis-server")
    if exe is None:
        sys.exit("redis-server is not installed")
    d = tempfile.mkdtemp(prefix="audit-redis-")
    ports = [_free_port(55000) for _ in range(3 if cluster else 1)]
    procs = []
    for p in ports:
        args = [exe, "--port", str(p), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", d,
                "--protected-mode", "no"]
        if cluster:
            args += ["--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{p}.conf"]
        procs.append(subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    for p in ports:
        for _ in range(200):
            try:
                redis.Redis(port=p).ping()
                break
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
    if not cluster:
        return f"redis://127.0.0.1:{ports[0]}/0", procs, d
    subprocess.run(["redis-cli", "--cluster", "create", *[f"127.0.0.1:{p}" for p in ports], "--cluster-replicas",
                    "0", "--cluster-yes"], check=True, capture_output=True)
    for _ in range(300):
        if all(redis.Redis(port=p).cluster("info").get("cluster_state") == "ok" for p in ports):
            break
        time.sleep(0.1)
    return f"redis+cluster://127.0.0.1:{ports[0]}", procs, d


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scopes", type=int, default=6)
    ap.add_argument("--seqs", type=int, default=300)
    ap.add_argument("--users", type=int, default=5000)
    ap.add_argument("--batch", type=int, default=600)
    ap.add_argument("--grants", type=int, default=400)
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--cluster", action="store_true", help="against a 3-primary Redis Cluster")
    args = ap.parse_args(argv)
    url, procs, d = _start_servers(args.cluster)
    try:
        print(f"# budget-store concurrency audit | {'cluster' if args.cluster else 'single redis'} | "
              f"{2 * args.scopes + 1} processes | {os.cpu_count()} cores | load {os.getloadavg()[0]:.2f}")
        for seed in [int(s) for s in args.seeds.split(",")]:
            plan = Plan(scopes=args.scopes, seqs=args.seqs, users=args.users, batch=args.batch, grants=args.grants,
                        seed=seed)
            res = run_audit(url, plan)
            print(f"seed {seed}: OK " + " ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}"
                                                 for k, v in res.items()))
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
