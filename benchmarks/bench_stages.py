"""Per-stage CPU of a window close, in one process (issue 29 item 6, a sketch before the Kafka wiring): what stage A
(per input partition: judge and hold events, bound, admit) and the coordinator (release, release log, settle) cost
per input event, and the bytes of stage A's admission messages per event.

Workload: ``bench_ingest``'s synthetic events (10⁵ users, Zipf items, 1–3 items per event, 20k events per 10 s
window) keyed to ``--partitions`` input partitions by user, parsed once outside the timings; the queries of
``bench_ingest`` (continual counts with Δ0 = 4, pay-what-you-get top-k) in the in-memory filter, secure noise. The
engine is the single-process ``ReleaseEngine``, whose close is already cut as the staged topology will run it
(docs/DECISIONS.md "Scale-out: stage A admits"); its functions are timed by the stage they belong to:

* stage A: ``ReleaseEngine.ingest`` (judging each event against its partition's watermark, holding it), every query's
  ``prepare`` (bounding, reservations), ``stage_a.admit_partition`` (one atomic admit per partition);
* names: interning at the close (users will be interned by stage A, items by the coordinator: not split yet);
* digest: the replay digests (the window's and the partitions');
* coordinator: every query's ``release``, the release log and ledger writes, ``coordinator.settle_parts``;
* other: the rest of the close (window data, merging, counters).

The admission messages are encoded only to count their bytes; that time is left out of every figure. "counts B/ev"
estimates the count kinds' contribution messages of the DECISIONS table (per partition and window, the distinct
items of the admitted bounded contributions: name and an 8-byte count), which do not exist yet.

Thread CPU time (``time.thread_time``), so other jobs on the machine do not inflate it. Message bytes: each
``AdmittedPart.to_bytes`` (user names, the used cost columns, the admitted bits), outside the timings; the
per-kind contribution messages (DECISIONS table) do not exist yet, so the coordinator here still reads the
window's events from memory.

    .venv/bin/python benchmarks/bench_stages.py [--events 400000] [--partitions 4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time
import warnings

import numpy as np

import streamdp.engine.engine as engine_mod
from streamdp.input.events import parse_batch

from bench_ingest import build_engine, make_payloads

warnings.simplefilter("ignore")

STAGES = ("stage_a", "names", "digest", "coordinator", "other")


class Clock:
    """CPU seconds of this thread (``time.thread_time``) per stage, by wrapping functions (``bench_kafka_worker
    --stages`` uses it with its own stage names)."""

    def __init__(self, stages=STAGES) -> None:
        self.t = {k: 0.0 for k in tuple(stages) + ("close", "measure")}
        self.stack: list[str] = []

    def wrap(self, stage: str, fn):
        """``fn`` timed as ``stage``; time spent in a nested timed call counts for the nested stage only."""
        def timed(*a, **kw):
            t0 = time.thread_time()
            self.stack.append(stage)
            try:
                return fn(*a, **kw)
            finally:
                self.stack.pop()
                dt = time.thread_time() - t0
                self.t[stage] = self.t.get(stage, 0.0) + dt
                if self.stack:
                    self.t[self.stack[-1]] -= dt
        return timed


def partitioned(payloads: list[bytes], n_parts: int, batch: int):
    """Per partition, its parsed batches (user-keyed: user k on partition k mod n)."""
    out = []
    per = [[] for _ in range(n_parts)]
    for p in payloads:
        u = int(p[p.index(b'"user":"user') + 12:p.index(b'"', p.index(b'"user":"user') + 12)])
        per[u % n_parts].append(p)
    for k, ps in enumerate(per):
        for i in range(0, len(ps), batch):
            b, dead = parse_batch(ps[i:i + batch])
            assert not dead
            out.append((k, b))
    # interleave the partitions by event time: the batches in the order their first event's time
    out.sort(key=lambda kb: float(kb[1].ts[0]))
    return out


def count_message_bytes(res, admitted, owners, items) -> int:
    """What the count kinds' (window, partition) contribution messages of the DECISIONS table would weigh: per
    partition, its distinct items among the admitted bounded pairs, each as its name (UTF-8, with a 2-byte length)
    and an 8-byte count. top_k: the bounded (user, item) keys; continual_counts: the admitted first contributions."""
    private = res.private
    if private is None:
        return 0
    if isinstance(private, np.ndarray):  # top_k / window_histogram: user << 32 | item keys
        users, item_ids = private >> np.int64(32), private & np.int64(0xFFFFFFFF)
    elif hasattr(private, "first"):  # continual_counts: the bounded window
        users, item_ids = private.user_ids[private.first], private.item_ids[private.first]
    else:
        return 0
    keep = admitted[users]
    users, item_ids = users[keep], item_ids[keep]
    if users.size == 0:
        return 0
    pair = np.unique(np.stack([owners[users], item_ids], axis=1), axis=0)  # distinct (partition, item)
    return int(sum(len(n.encode()) + 2 + 8 for n in items.names(pair[:, 1])))


def run(batches, n_parts: int) -> dict:
    engine = build_engine()
    engine.register_partitions(range(n_parts))
    clock = Clock()
    msg_bytes = [0]
    count_bytes = [0]
    owners = []  # the close's user → partition map (engine_mod.UserPartitions, captured below)
    for q in engine.queries:
        q.prepare = clock.wrap("stage_a", q.prepare)
        q.release = clock.wrap("coordinator", q.release)
        release = q.release

        def counted(w, res, admitted, rng, items, _release=release):
            count_bytes[0] += count_message_bytes(res, admitted, owners[-1], items)  # off the clock
            return _release(w, res, admitted, rng, items)

        q.release = clock.wrap("measure", counted)
    for names in (engine.users, engine.items):
        for meth in ("ids", "ids_coded"):
            setattr(names, meth, clock.wrap("names", getattr(names, meth)))
    store = engine.store
    store.put_release = clock.wrap("coordinator", store.put_release)
    store.append_ledger = clock.wrap("coordinator", store.append_ledger)
    engine.ingest = clock.wrap("stage_a", engine.ingest)
    saved = {k: getattr(engine_mod, k) for k in ("admit_partition", "settle_parts", "window_digest",
                                                  "partition_digest", "UserPartitions") if hasattr(engine_mod, k)}

    def capture(*a, **kw):
        owners.append(saved["UserPartitions"](*a, **kw))
        return owners[-1]

    engine_mod.UserPartitions = capture
    timed_admit = clock.wrap("stage_a", saved["admit_partition"])
    encode = clock.wrap("measure", lambda part: part.to_bytes(engine.users))  # off every reported stage

    def admit_and_measure(*a, **kw):
        part = timed_admit(*a, **kw)
        msg_bytes[0] += len(encode(part))
        return part

    engine_mod.admit_partition = admit_and_measure
    engine_mod.settle_parts = clock.wrap("coordinator", saved["settle_parts"])
    engine_mod.window_digest = clock.wrap("digest", saved["window_digest"])
    engine_mod.partition_digest = clock.wrap("digest", saved["partition_digest"])
    close = clock.wrap("close", engine.close_due)
    try:
        gc.collect()
        c0 = time.thread_time()
        for k, b in batches:
            engine.ingest(b, k)
            close()
        clock.wrap("close", engine.flush)()
        cpu = time.thread_time() - c0
    finally:
        for k, v in saved.items():
            setattr(engine_mod, k, v)
    # time inside a close that no stage claimed; the messages' encoding (measured for their bytes) is left out
    clock.t["other"] = clock.t.pop("close")
    n = engine.counters.events_in
    return {"n": n, "cpu": cpu - clock.t.pop("measure"), "windows": engine.counters.windows_closed, "bytes": msg_bytes[0],
            "count_bytes": count_bytes[0],
            "users": engine.counters.admitted_users, **clock.t}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=400_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--batch", type=int, default=5_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    payloads = make_payloads(args.events)
    batches = partitioned(payloads, args.partitions, args.batch)
    print(f"# {args.events} events, {args.partitions} partitions, batches of ≤ {args.batch} per partition; "
          f"cpus allowed {sorted(os.sched_getaffinity(0))} of {os.cpu_count()}; load1 {os.getloadavg()[0]:.2f}")
    print(f"{'run':>4} {'µs/ev':>7} " + " ".join(f"{k:>11}" for k in STAGES)
          + f" {'msg B/ev':>9} {'msg B/user':>10} {'counts B/ev':>11}")
    rows = []
    for r in range(args.repeats):
        o = run(batches, args.partitions)
        rows.append(o)
        per = {k: 1e6 * o[k] / o["n"] for k in STAGES}
        print(f"{r:>4} {1e6 * o['cpu'] / o['n']:>7.2f} " + " ".join(f"{per[k]:>11.2f}" for k in STAGES)
              + f" {o['bytes'] / o['n']:>9.2f} {o['bytes'] / max(1, o['users']):>10.2f}"
              + f" {o['count_bytes'] / o['n']:>11.2f}")
    med = {k: statistics.median(1e6 * o[k] / o["n"] for o in rows) for k in STAGES + ("cpu",)}
    print(f"median µs/event: total {med['cpu']:.2f}; " + ", ".join(f"{k} {med[k]:.2f}" for k in STAGES))
    a, c = med["stage_a"], med["coordinator"] + med["other"]
    print(f"stage A share {a / med['cpu']:.2f}; coordinator (release, log, settle, rest of the close) share "
          f"{c / med['cpu']:.2f}; names + digest {(med['names'] + med['digest']) / med['cpu']:.2f}")


if __name__ == "__main__":
    main()
