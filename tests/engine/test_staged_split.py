"""The staged split of every query kind — the count kinds, continual_sums, the geo kinds, the adaptive point kinds
(range_counts, kde_point, knn_point, threshold_count), grid_means (both notions) and the EMD kinds — (streamdp/engine/stage_a_worker.py, coordinator_worker.py, count_halves.py,
staged_messages.py; docs/DECISIONS.md "Scale-out: stage A admits") equals one ReleaseEngine.

N = 1, 2, 3 StageA objects owning a split of 4 user-keyed input partitions and one Coordinator, talking in bytes
through a small deterministic bus (one FIFO per input partition to the coordinator, as an internal topic keyed by
partition; one outcome log every stage reads), against one ReleaseEngine on the same input: byte-identical release
records, identical dead letters, ledger entries and per-user spend. Batch cuts and the interleaving of deliveries
vary; stages crash and restart from their last snapshot (re-reading their input from its offsets), partitions move
between stages mid-stream. Test mode (one seed), so equal records mean equal noise.
"""

from __future__ import annotations

import tomllib
import warnings

import numpy as np
import orjson
import pytest

from streamdp.accounting.cost import budget_vector
from streamdp.config.loader import parse_config
from streamdp.engine.coordinator_worker import Coordinator, PartConflict
from streamdp.engine.count_halves import UnsupportedKind
from streamdp.engine.engine import EngineFailed, ReleaseEngine
from streamdp.engine.stage_a_worker import StageA
from streamdp.engine.staged_messages import (PartContribution, PartitionMarker, QueryPart, WindowOutcome,
                                             decode)
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.filter.store import StoreError
from streamdp.input.events import parse_batch

P = 4

SERVICE = """
[service]
window_seconds = 10.0
horizon = 4
origin = 0.0
allowed_lateness = 3.0
unsafe_test_seed = 7
max_future_seconds = 1e12
[budget]
zcdp_rho = %(rho)s
zcdp_delta = 1e-3
"""

CC = """
[[query]]
id = "cc"
kind = "continual_counts"
sigma = 1.0
delta_item = 1e-6
max_items_per_window = 2
max_per_item = 2
"""
TOPK = """
[[query]]
id = "topk"
kind = "top_k"
epsilon = 3.0
delta = 1e-6
k = 3
kbar = 4
k_star = 9
"""
HIST = """
[[query]]
id = "hist"
kind = "window_histogram"
epsilon = 1.0
delta = 1e-6
max_items_per_window = 2
algorithm = "threshold"
noise = "gaussian"
"""
KBAR = """
[[query]]
id = "kbar"
kind = "window_histogram"
epsilon = 1.0
delta = 1e-6
max_items_per_window = 2
algorithm = "top_kbar"
kbar = 3
"""
SUMS = """
[[query]]
id = "%(id)s"
kind = "continual_sums"
sigma = 1.5
delta_key = 1e-6
max_contributions = 8
max_keys_per_window = 2
max_per_key = 3
noise = "%(noise)s"
"""
VALUES = """value_range = [0.0, 10.0]
value_sigma = 3.0
"""
SUMS_TREE = SUMS % {"id": "sums", "noise": "tree"} + 'estimator = "plain"\n' + VALUES
SUMS_OPTIMAL = SUMS % {"id": "sums_opt", "noise": "tree"} + 'estimator = "optimal"\n'
SUMS_BLT = SUMS % {"id": "sums_blt", "noise": "blt"} + VALUES
GEO_REGION = """units = "degrees"
region = [0.0, 10.0, 0.0, 10.0]
"""
GEO = """
[[query]]
id = "geo"
kind = "geo_locations"
mechanism = "cgp"
rho = 0.5
location = "last"
""" + GEO_REGION
GEO_GP = """
[[query]]
id = "geo_gp"
kind = "geo_locations"
mechanism = "gp"
epsilon = 1.0
neighbourhood = "dist_inf"
location = "mean"
""" + GEO_REGION
KNN = """
[[query]]
id = "knn"
kind = "geo_knn"
k = 3
rho = 20.0
points = [[5.0, 5.0], [2.0, 8.0]]
location = "first"
""" + GEO_REGION
HULL = """
[[query]]
id = "hull"
kind = "geo_convex_hull"
rho = 20.0
k = 16
location = "last"
""" + GEO_REGION
ADAPTIVE_REGION = """units = "km"
projection = "equirectangular"
region = [0.0, 10.0, 0.0, 10.0]
"""
RANGE = """
[[query]]
id = "rc"
kind = "range_counts"
budget_rho = 0.01
rounds = 3
estimator = "pm1"
location = "last"
queries = [ { window = 2, rect = [5.0, 5.0, 400.0, 400.0] }, { window = 4, rect = [3.0, 3.0, 200.0, 200.0] },
            { window = 5, rect = [5.0, 5.0, 600.0, 600.0], angle = 30.0 }, { window = 9, rect = [6.0, 4.0, 300.0, 500.0] } ]
""" + ADAPTIVE_REGION
RANGE_BM = """
[[query]]
id = "rc0"
kind = "range_counts"
budget_rho = 0.01
estimator = "bm0"
reuse_savings = false
location = "mean"
queries = [ { window = 3, rect = [5.0, 5.0, 400.0, 400.0] }, { window = 6, rect = [4.0, 6.0, 500.0, 300.0] } ]
""" + ADAPTIVE_REGION
KDE = """
[[query]]
id = "kde"
kind = "kde_point"
bandwidth = 200.0
budget_rho = 0.01
estimator = "pm0"
split = "doubling"
location = "first"
queries = [{ window = 3, point = [5.0, 5.0] }, { window = 7, point = [2.0, 2.0] }, { window = 10, point = [8.0, 3.0] }]
""" + ADAPTIVE_REGION
KNNP = """
[[query]]
id = "kp"
kind = "knn_point"
k = 3
budget_rho = 0.01
estimator = "pm1"
queries = [{ window = 5, point = [5.0, 5.0] }, { window = 6, point = [1.0, 9.0] }]
""" + ADAPTIVE_REGION
THR = """
[[query]]
id = "thr"
kind = "threshold_count"
rho = 0.5
rounds = 3
queries = [{ window = 2, threshold = 10, item = "i0" }, { window = 5, threshold = 3, item = "i1" },
           { window = 7, threshold = 40, item = "i0" }, { window = 10, threshold = 1, item = "n9-1" }]
"""
GRID_ITEM = """
[[query]]
id = "gm"
kind = "grid_means"
cells = "item"
rho = 0.5
m_ub = 2
upper = 10.0
delta_cell = 1e-5
"""
GRID_LISTED = """
[[query]]
id = "gml"
kind = "grid_means"
cells = "grid"
cell_size = 4.0
rho = 0.25
m_ub = 3
upper = 10.0
cell_selection = "listed"
cell_list = ["0,0", "1,1", "2,2", "-1,0", "7,7"]
"""
GRID_ITEM_LISTED = """
[[query]]
id = "gmil"
kind = "grid_means"
cells = "item"
rho = 0.25
m_ub = 1
upper = 10.0
cell_selection = "listed"
cell_list = ["i1", "i3", "n4-2", "zz"]
"""
GRID_BOUNDED = """
[[query]]
id = "gmb"
kind = "grid_means"
neighbours = "bounded_unsafe_presence"
cells = "grid"
cell_size = 4.0
epsilon = 1.0
upper = 10.0
bounded_budget_rho = 3.0
estimator = "array_averaging"
min_users = 2
"""
GRID_BOUNDED_ITEM = """
[[query]]
id = "gmbi"
kind = "grid_means"
neighbours = "bounded_unsafe_presence"
cells = "item"
epsilon = 1.0
upper = 10.0
bounded_budget_rho = 2.0
estimator = "optimized_quantile"
"""
EMD_LIN = """
[[query]]
id = "el"
kind = "emd_linear"
alpha = 0.5
lipschitz = 3.0
dimensions = ["a", "b"]
features = { i0 = [0.1, 0.7], i1 = [0.35, 0.3333333333333333], i2 = [1.0, 0.0], i3 = [0.2, 0.25], i4 = [0.9, 0.45], i5 = [0.0, 1.0], i6 = [0.6, 0.6], i9 = [0.15, 0.05], "n3-1" = [0.5, 0.3] }
"""
EMD_FREQ = """
[[query]]
id = "ef"
kind = "emd_frequency"
alpha0 = 0.4
gamma = 0.5
max_items = 4
delta = 1e-6
clusters = { c1 = ["i0", "i1", "i2"], c2 = ["i3", "i4", "i5"], c3 = ["i6", "n2-0", "n5-3"] }
"""
CONFIGS = {"continual_counts": CC, "top_k": TOPK, "threshold": HIST, "top_kbar": KBAR,
           "mixed": CC + TOPK + HIST + KBAR, "sums_tree": SUMS_TREE, "sums_optimal": SUMS_OPTIMAL,
           "sums_blt": SUMS_BLT, "mixed_sums": TOPK + SUMS_BLT + CC + SUMS_OPTIMAL,
           "geo": GEO + GEO_GP, "geo_knn": KNN, "geo_hull": HULL, "mixed_geo": CC + GEO + KNN + HULL,
           "range": RANGE + RANGE_BM, "kde": KDE, "knn_point": KNNP, "mixed_adaptive": TOPK + RANGE + GEO + KDE + KNNP,
           "threshold_count": THR + HIST, "mixed_thr": THR + TOPK + RANGE, "grid": GRID_ITEM + GRID_LISTED,
           "grid_bounded": GRID_BOUNDED + GRID_BOUNDED_ITEM + HIST, "mixed_grid": TOPK + GRID_ITEM + GRID_BOUNDED + GEO,
           "emd": EMD_LIN + EMD_FREQ + HIST, "mixed_emd": TOPK + EMD_FREQ + GRID_ITEM_LISTED + RANGE}
# budgets at which some users are halted part-way and others are not
RHO = {"continual_counts": 60, "top_k": 10, "threshold": 8, "top_kbar": 8, "mixed": 80, "sums_tree": 150,
       "sums_optimal": 20, "sums_blt": 60, "mixed_sums": 150, "geo": 1, "geo_knn": 1, "geo_hull": 1,
       "mixed_geo": 60, "range": 1, "kde": 1, "knn_point": 1, "mixed_adaptive": 40,
       "threshold_count": 10, "mixed_thr": 12, "grid": 2, "grid_bounded": 8, "mixed_grid": 12,
       "emd": 8, "mixed_emd": 12}
# the geo configurations' cgp_rho budget per m² (a few windows' located cost)
CGP = {"geo": 8e-10, "geo_knn": 1.5e-8, "geo_hull": 1.5e-8, "mixed_geo": 3e-8, "range": 2e-8, "kde": 1e-8,
       "knn_point": 1e-8, "mixed_adaptive": 2e-8, "mixed_thr": 2e-8, "mixed_grid": 3e-8,
       "mixed_emd": 2e-8}
# configurations whose stream carries locations without a geo query (grid cells)
LOCATED = {"grid", "grid_bounded"}


def valued(name):
    """The configuration has a query with a value range: its stream carries values."""
    return "value_range" in CONFIGS[name] or 'kind = "grid_means"' in CONFIGS[name]


def located(name):
    """The configuration has a geo query: its stream carries locations."""
    return name in CGP or name in LOCATED


def data(seed, name):
    return stream(seed, values=valued(name), locs=located(name))


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


# the EMD configurations' emd_alpha budget (a few windows' item-wise cost; δ for the shuffle bound)
EMD = {"emd": 9.0, "mixed_emd": 8.0}


def config(name, rho=None):
    text = SERVICE % {"rho": RHO[name] if rho is None else rho} + CONFIGS[name]
    if name in EMD:
        text = text.replace("[budget]\n", f"[budget]\nemd_alpha = {EMD[name]}\nemd_delta = 1e-3\n")
    if name in CGP:
        text = text.replace("[budget]\n", f"[budget]\ncgp_rho = {CGP[name]}\n")
    return parse_config(tomllib.loads(text), log_warnings=False)


def stream(seed, n_events=700, n_users=40, n_items=12, span=110.0, values=False, locs=False):
    """Per partition its records in offset order (user k on partition k % P); up to four items per event from a
    skewed popularity (a few items pass top_k's threshold), several events per user and window (Δ0 = 2 bites),
    disorder and late events; 11 windows (3 epochs of 4). ``values``: each event a value in [−2, 12] (clamped to
    continual_sums' [0, 10]), 5 % without one (``missing_value`` when they have items), drawn from their own
    generator (the events are those of ``values=False``). ``locs``: 80 % of the events a [lat, lon] in
    [−1, 11]², some outside the geo region [0, 10]² (folded into it), from a third generator."""
    vg = np.random.default_rng(seed + 1000)
    lg = np.random.default_rng(seed + 2000)
    rng = np.random.default_rng(seed)
    pop = 1.0 / np.arange(1, n_items + 1) ** 1.5
    pop /= pop.sum()
    parts = [[] for _ in range(P)]
    t = 0.0
    for _ in range(n_events):
        t += rng.exponential(span / n_events)
        u = int(rng.integers(n_users))
        ts = round(max(0.0, t - rng.uniform(0, 8)), 3)
        items = [f"i{j}" for j in rng.choice(n_items, rng.integers(0, 5), replace=False, p=pop)]
        if rng.random() < 0.3:  # items new in their window, first seen in a different order on each partition
            items.append(f"n{int(ts // 10)}-{int(rng.integers(6))}")
        d = {"user": f"u{u}", "ts": ts, "items": list(dict.fromkeys(items))}
        if values and vg.random() >= 0.05:
            d["value"] = round(float(vg.uniform(-2.0, 12.0)), int(vg.integers(0, 7)))
        if locs and lg.random() < 0.8:
            d["loc"] = [round(float(x), 4) for x in lg.uniform(-1.0, 11.0, 2)]
        parts[u % P].append(orjson.dumps(d))
    return parts


class CountingStore(MemoryBudgetStore):
    """Counts the admits of each (scope, window)."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.admits = {}

    def admit_ids(self, scope, seq, user_ids, costs, table, digest=None, fence=None):
        self.admits[(scope, seq)] = self.admits.get((scope, seq), 0) + 1
        return super().admit_ids(scope, seq, user_ids, costs, table, digest=digest, fence=fence)


class FlakyStore(MemoryBudgetStore):
    """Fails (StoreError) with probability ``flaky`` at an admit, settle, release-log write or ledger append:
    before the call, or after it took effect (a lost reply)."""

    def __init__(self, *a, flaky=0.0, seed=0, **k):
        super().__init__(*a, **k)
        self.flaky, self.g = flaky, np.random.default_rng(seed)

    def _call(self, fn, *a, **k):
        r = self.g.random()
        if r < self.flaky / 2:
            raise StoreError("unreachable (before)")
        out = fn(*a, **k)
        if r < self.flaky:
            raise StoreError("reply lost (after)")
        return out

    def admit_ids(self, *a, **k):
        return self._call(super().admit_ids, *a, **k)

    def settle_ids(self, *a, **k):
        return self._call(super().settle_ids, *a, **k)

    def put_release(self, *a, **k):
        return self._call(super().put_release, *a, **k)

    def append_ledger(self, *a, **k):
        return self._call(super().append_ledger, *a, **k)


def spend_of(store):
    return {u.user: (u.spent.tolist(), bool(u.halted)) for u in store.iter_users()}


def ledger_of(store):
    return [{k: v for k, v in e.items() if k != "ts"} for e in store.ledger()]


def once(ledger):
    """The ledger with repeats dropped: a restarted coordinator appends the entries of the windows it closes again
    (as a restarted engine does); a repeat must equal the first entry."""
    first = {}
    for e in ledger:
        assert first.setdefault(e["key"], e) == e
    return list(first.values())


def reference(name, parts, rho=None):
    """One ReleaseEngine: every partition, batches of 9 round robin, windows closed after each batch, then the end
    of input. (records, dead letters, ledger, spend)."""
    cfg = config(name, rho)
    store = MemoryBudgetStore(budget_vector(cfg.budget))
    e = ReleaseEngine(cfg.engine_config(), cfg.build_queries(), store)
    e.register_partitions(range(P))
    pos = [0] * P
    records, dead = [], []
    while any(pos[p] < len(parts[p]) for p in range(P)):
        for p in range(P):
            chunk = parts[p][pos[p]:pos[p] + 9]
            if not chunk:
                continue
            b, bad = parse_batch(chunk)
            assert not bad
            dead += [(p, pos[p] + int(b.source_rows[r]), why) for r, why in e.ingest(b, p)]
            pos[p] += len(chunk)
            records += [r.to_bytes() for s in e.close_due() for r in s.records]
    records += [r.to_bytes() for s in e.flush() for r in s.records]
    return records, sorted(dead), ledger_of(store), spend_of(store)


class Bus:
    """N StageA + one Coordinator over one store, driven by a seeded scheduler. Internal topic: one FIFO per input
    partition (its parts and markers in order, whoever owns it); outcome topic: one log, a read position per
    stage. Snapshots record the input offsets (stage A) and the internal-topic positions (coordinator)."""

    def __init__(self, name, parts, owners, seed, rho=None, stores=None, crash=0.0, rebalance=False, max_batch=12,
                 early_flush=False):
        """``stores``: a function giving each stage and the coordinator its own client of one store (as separate
        processes have); default one in-memory store shared by all."""
        cfg = config(name, rho)
        self.cfg, self.parts, self.owners = cfg, parts, [list(o) for o in owners]
        if stores is None:
            shared = MemoryBudgetStore(budget_vector(cfg.budget))
            stores = lambda: shared  # noqa: E731
        self.new_store = stores
        self.store = stores()
        self.early_flush = early_flush
        self.g = np.random.default_rng(seed)
        self.crash, self.rebalance, self.max_batch = crash, rebalance, max_batch
        self.stages = []
        for o in self.owners:
            s = StageA(cfg.engine_config(), cfg.build_queries(), self.new_store())
            s.assign(o)
            self.stages.append(s)
        self.coord = Coordinator(cfg.engine_config(), cfg.build_queries(), self.new_store())
        self.coord.register_partitions(range(P))
        self.pos = [0] * P  # input offsets
        self.topic = [[] for _ in range(P)]  # internal topic, one FIFO per input partition
        self.read = [0] * P  # the coordinator's positions in it
        self.outcomes: list[bytes] = []
        self.opos = [0] * len(self.stages)
        self.records: dict[str, bytes] = {}
        self.order: list[str] = []
        self.dead: set = set()
        self.snaps = [self._stage_snap(i) for i in range(len(self.stages))]
        self.csnap = self._coord_snap()
        self.crashes = self.failures = 0
        self.moved = False

    # -- snapshots and crashes
    def _stage_snap(self, i):
        return self.stages[i].snapshot(), {p: self.pos[p] for p in self.owners[i]}

    def _coord_snap(self):
        return self.coord.snapshot(), list(self.read)

    def _restore_stage(self, i):
        blob, offsets = self.snaps[i]
        s = StageA(self.cfg.engine_config(), self.cfg.build_queries(), self.new_store())
        s.restore(blob)
        assert s.partitions == sorted(self.owners[i])
        self.stages[i] = s
        for p, off in offsets.items():
            self.pos[p] = off
        self.opos[i] = 0  # re-read the outcome topic (repeats are ignored)
        self.crashes += 1

    def _restore_coord(self):
        blob, read = self.csnap
        c = Coordinator(self.cfg.engine_config(), self.cfg.build_queries(), self.new_store())
        c.restore(blob)
        self.coord, self.read = c, list(read)
        self.crashes += 1

    # -- actions
    def _publish(self, i):
        for m in self.stages[i].poll():
            self.topic[decode(m).partition].append(m)

    def _owner(self, p):
        return next(i for i, o in enumerate(self.owners) if p in o)

    def ingest(self, p):
        i = self._owner(p)
        n = int(self.g.integers(1, self.max_batch + 1))
        chunk = self.parts[p][self.pos[p]:self.pos[p] + n]
        b, bad = parse_batch(chunk)
        assert not bad
        self.dead |= {(p, self.pos[p] + int(b.source_rows[r]), why) for r, why in self.stages[i].ingest(b, p)}
        self.pos[p] += len(chunk)
        self._publish(i)

    def to_coord(self, p):
        m = self.topic[p][self.read[p]]
        self.read[p] += 1
        for s in self.coord.receive(m):
            for r in s.records:
                body = r.to_bytes()
                if r.key in self.records:
                    assert self.records[r.key] == body  # a coordinator's replay releases the same bytes
                else:
                    self.records[r.key] = body
                    self.order.append(r.key)
        self.outcomes += self.coord.poll()

    def to_stage(self, i):
        self.stages[i].on_outcome(self.outcomes[self.opos[i]])
        self.opos[i] += 1
        self._publish(i)

    def flush(self, i):
        self.stages[i].flush()
        self._publish(i)

    def move(self):
        """A rebalance: one partition's state goes from one stage to another (snapshots of both right after)."""
        i = max(range(len(self.owners)), key=lambda k: len(self.owners[k]))
        if len(self.stages) < 2 or not self.owners[i]:
            return
        j = (i + 1) % len(self.stages)
        p = self.owners[i][-1]
        blob = self.stages[i].release(p)
        self.owners[i].remove(p)
        self.owners[j].append(p)
        flaky, self.store.flaky = getattr(self.store, "flaky", 0.0), 0.0  # (a failed adopt would lose p here)
        self.stages[j].adopt(blob)
        self.store.flaky = flaky
        self.opos[j] = 0  # the new owner reads the outcomes its new partition has not applied
        self._publish(j)
        self.snaps[i], self.snaps[j] = self._stage_snap(i), self._stage_snap(j)
        self.moved = True

    def run(self):
        steps = 0
        while True:
            steps += 1
            assert steps < 200_000
            acts = [("in", p) for p in range(P) if self.pos[p] < len(self.parts[p])]
            acts += [("c", p) for p in range(P) if self.read[p] < len(self.topic[p])]
            acts += [("s", i) for i in range(len(self.stages)) if self.opos[i] < len(self.outcomes)]
            if self.early_flush:  # a stage whose partitions are read to the end may end its input before the others
                acts += [("f", i) for i, s in enumerate(self.stages)
                         if all(self.pos[p] == len(self.parts[p]) for p in self.owners[i])
                         and not all(st.flushing for st in s.parts.values())]
            if not acts:
                idle = [i for i, s in enumerate(self.stages)
                        if not all(st.flushing for st in s.parts.values())]
                if not idle:
                    return self
                for i in idle:  # the end of input, once each stage has read its partitions to the end
                    try:
                        self.flush(i)
                    except StoreError:
                        self.failures += 1
                        self._restore_stage(i)
                continue
            kind, k = acts[int(self.g.integers(len(acts)))]
            try:
                {"in": self.ingest, "c": self.to_coord, "s": self.to_stage, "f": self.flush}[kind](k)
            except StoreError:  # a failure part-way: the failed stage restarts from its last snapshot
                self.failures += 1
                if kind == "c":
                    self._restore_coord()
                else:
                    self._restore_stage(k if kind != "in" else self._owner(k))
                continue
            r = self.g.random()
            if self.rebalance and not self.moved and steps > 40 and r < 0.05:
                self.move()
            elif r < 0.08:
                i = int(self.g.integers(len(self.stages)))
                self.snaps[i] = self._stage_snap(i)
            elif r < 0.1:
                self.csnap = self._coord_snap()
            elif r < 0.1 + self.crash:
                if self.g.random() < 0.5:
                    self._restore_stage(int(self.g.integers(len(self.stages))))
                else:
                    self._restore_coord()

    def result(self):
        return ([self.records[k] for k in self.order], sorted(self.dead), ledger_of(self.store),
                spend_of(self.store))


OWNERS = {1: [[0, 1, 2, 3]], 2: [[0, 2], [1, 3]], 3: [[3], [0, 1], [2]]}


def _check_reference_is_interesting(name, ref):
    records, dead, ledger, spend = ref
    assert len(records) >= 11 * len(CONFIGS[name].split("[[query]]")[1:]) and dead
    halted = [u for u, (_, h) in spend.items() if h]
    assert halted and len(halted) < len(spend), (name, len(halted), len(spend))
    if 'kind = "top_k"' in CONFIGS[name]:
        tk = [orjson.loads(r) for r in records if orjson.loads(r)["kind"] == "top_k"]
        assert tk[-1]["values"]["stopped"]  # k* reached: later windows return nothing and charge nothing
        assert any(e.get("kind") == "top_k" and e.get("users_charged") for e in ledger)


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize("n", [1, 2, 3])
def test_n_stages_and_a_coordinator_equal_one_engine(name, n):
    parts = data(1, name)
    ref = reference(name, parts)
    _check_reference_is_interesting(name, ref)
    for seed in range(2):
        got = Bus(name, parts, OWNERS[n], seed=10 * n + seed, max_batch=[1, 12][seed]).run().result()
        assert got[0] == ref[0], (name, n, seed)
        assert got[1:] == ref[1:], (name, n, seed)


@pytest.mark.parametrize("name", ["mixed", "top_k", "continual_counts", "sums_blt", "mixed_sums", "mixed_geo",
                                  "range", "mixed_adaptive", "mixed_thr", "grid_bounded", "mixed_grid", "emd",
                                  "mixed_emd"])
def test_crashes_and_a_rebalance_give_the_same_releases_and_charge_once(name):
    """Stages and the coordinator restart from their last snapshots at random points (stage A re-reads its input
    from the snapshot's offsets, the coordinator the internal topic from its positions); one partition moves
    between stages. The same releases and the same spend: every replayed admit is a copy, nothing charged twice."""
    parts = data(2, name)
    ref = reference(name, parts)
    crashes = replayed = 0
    for seed in range(3):
        store = CountingStore(budget_vector(config(name).budget))
        bus = Bus(name, parts, OWNERS[3 if seed != 1 else 2], seed=100 + seed, crash=0.03, rebalance=True,
                  stores=lambda: store).run()
        records, dead, ledger, spend = bus.result()
        crashes += bus.crashes
        replayed += sum(n - 1 for n in store.admits.values())
        assert bus.moved
        assert records == ref[0] and spend == ref[3] and dead == ref[1], (name, seed)
        assert once(ledger) == ref[2], (name, seed)
    assert crashes >= 5 and replayed >= 5  # windows were admitted again after restarts, and charged nothing


@pytest.mark.parametrize("name", ["mixed", "top_k", "sums_tree", "mixed_geo", "mixed_adaptive", "mixed_thr",
                                  "mixed_grid", "mixed_emd"])
def test_store_failures_part_way_are_restored_and_charge_once(name):
    """The store fails at random admits, settles, release-log writes and ledger appends — before the call or after
    it took effect (a lost reply). The failed stage refuses further work until restored (EngineFailed), restarts
    from its last snapshot and re-reads its input: the same releases and spend as one engine."""
    parts = data(5, name)
    ref = reference(name, parts)
    failures = 0
    for seed in range(3):
        store = FlakyStore(budget_vector(config(name).budget), flaky=0.05, seed=seed)
        bus = Bus(name, parts, OWNERS[1 + seed], seed=400 + seed, rebalance=seed > 0, stores=lambda: store).run()
        records, dead, ledger, spend = bus.result()
        failures += bus.failures
        assert records == ref[0] and spend == ref[3] and dead == ref[1], (name, seed)
        assert once(ledger) == ref[2], (name, seed)
    assert failures >= 5


def test_a_failed_step_refuses_further_work_until_restored():
    cfg = config("threshold")
    store = FlakyStore(budget_vector(cfg.budget))
    a = StageA(cfg.engine_config(), cfg.build_queries(), store)
    a.assign([0])
    snap = a.snapshot()
    evs = [orjson.dumps({"user": f"u{k}", "ts": 1.0 + k, "items": ["x"]}) for k in range(3)]
    store.flaky = 1.0
    with pytest.raises(StoreError):
        a.ingest(parse_batch(evs + [orjson.dumps({"user": "u0", "ts": 30.0, "items": []})])[0], 0)  # window 1 due
    with pytest.raises(EngineFailed):
        a.ingest(parse_batch(evs)[0], 0)
    with pytest.raises(EngineFailed):
        a.snapshot()
    store.flaky = 0.0
    a.restore(snap)
    assert a.ingest(parse_batch(evs)[0], 0) == []


@pytest.mark.parametrize("name", ["mixed", "top_k", "mixed_sums", "mixed_geo", "mixed_adaptive", "mixed_grid",
                                  "mixed_emd"])
def test_stages_ending_their_input_at_different_times_close_alike(name):
    """A stage whose partitions are read to the end flushes (final markers) while the others still ingest: the
    windows past its watermark close as the engine's flush closes them (closed_by end_of_input), no earlier."""
    parts = data(3, name)
    ref = reference(name, parts)
    assert any(orjson.loads(r)["closed_by"] == "end_of_input" for r in ref[0])
    for seed in range(3):
        got = Bus(name, parts, OWNERS[3], seed=200 + seed, early_flush=True, crash=0.02 * seed).run().result()
        assert got[0] == ref[0] and got[1] == ref[1] and got[3] == ref[3], (name, seed)


def pump(stages, coord):
    """Deliver every message until quiet (in order); the release records."""
    records = []
    while True:
        msgs = [m for a in stages for m in a.poll()]
        if not msgs:
            return records
        for m in msgs:
            records += [r.to_bytes() for s in coord.receive(m) for r in s.records]
        for o in coord.poll():
            for a in stages:
                a.on_outcome(o)


def test_a_flushed_partition_jumping_an_empty_window_does_not_claim_its_watermark_passed_it():
    """Partition 0 ends its input (flush) holding window 5 with window 4 empty and its watermark in window 4: it
    marks itself through 4 at once, but its watermark stays at 3, so window 4 is closed ``end_of_input`` as by the
    engine's flush — not ``watermark`` once partition 1's watermark passes it (a first version reported the
    partition's last closed window as its watermark after the next outcome)."""
    cfg = config("threshold")
    ev = lambda u, t: orjson.dumps({"user": u, "ts": t, "items": ["x"]})  # noqa: E731
    p0 = [ev("a", 1.0), ev("a", 41.0)]  # windows 1 and 5; watermark 38: window 3 passed, not 4
    p1a = [ev("b", 2.0), ev("b", 11.0), ev("b", 21.0), ev("b", 31.0)]
    p1b = [ev("b", 60.0)]
    store = MemoryBudgetStore(budget_vector(cfg.budget))
    e = ReleaseEngine(cfg.engine_config(), cfg.build_queries(), store)
    e.register_partitions([0, 1])
    e.ingest(parse_batch(p0)[0], 0)
    e.ingest(parse_batch(p1a)[0], 1)
    e.ingest(parse_batch(p1b)[0], 1)
    ref = [r.to_bytes() for s in e.close_due() + e.flush() for r in s.records]
    assert [orjson.loads(r)["closed_by"] for r in ref] == ["watermark"] * 3 + ["end_of_input"] * 4
    store = MemoryBudgetStore(budget_vector(cfg.budget))
    a, b = (StageA(cfg.engine_config(), cfg.build_queries(), store) for _ in range(2))
    a.assign([0])
    b.assign([1])
    c = Coordinator(cfg.engine_config(), cfg.build_queries(), store)
    c.register_partitions([0, 1])
    a.ingest(parse_batch(p0)[0], 0)
    a.flush()
    records = pump([a, b], c)
    b.ingest(parse_batch(p1a)[0], 1)
    records += pump([a, b], c)
    b.ingest(parse_batch(p1b)[0], 1)
    records += pump([a, b], c)
    b.flush()
    records += pump([a, b], c)
    assert records == ref


def test_in_production_each_partition_draws_its_own_bounding_key_and_keeps_it():
    """Without ``unsafe_test_seed`` Kb is 32 OS-random bytes per partition state, not derived from any noise key;
    it travels with the partition's state (a snapshot, a rebalance), so a replay draws the same subsets."""
    cfg = config("mixed")
    conf = cfg.engine_config()
    conf.unsafe_test_seed = None
    store = MemoryBudgetStore(budget_vector(cfg.budget))
    a, b = (StageA(conf, cfg.build_queries(), store) for _ in range(2))
    a.assign([0, 1])
    kb0, kb1 = a.parts[0].kb, a.parts[1].kb
    assert len(kb0) == 32 and kb0 != kb1
    b.adopt(a.release(1))
    assert b.parts[1].kb == kb1
    c = StageA(conf, cfg.build_queries(), store)
    c.restore(a.snapshot())
    assert c.parts[0].kb == kb0 and c.partitions == [0]


@pytest.mark.integration
@pytest.mark.parametrize("name", ["mixed", "mixed_sums", "mixed_geo", "mixed_adaptive", "mixed_grid", "mixed_emd"])
def test_on_a_redis_cluster_the_stages_equal_one_engine_on_the_memory_store(redis_cluster_url, name):
    """Each stage and the coordinator with its own client of a 3-primary Redis Cluster (as separate processes),
    with a crash and a rebalance, against one engine on the in-memory store."""
    from streamdp.filter.redis_store import RedisBudgetStore

    parts = data(4, name)
    ref = reference(name, parts)
    budget = budget_vector(config(name).budget)
    bus = Bus(name, parts, OWNERS[3], seed=300, crash=0.02, rebalance=True,
              stores=lambda: RedisBudgetStore.from_url(redis_cluster_url, default_budget=budget)).run()
    records, dead, ledger, spend = bus.result()
    assert bus.moved and records == ref[0] and dead == ref[1] and spend == ref[3]
    assert once(ledger) == ref[2]


def test_a_different_part_for_a_window_is_refused_and_an_equal_one_dropped():
    cfg = config("mixed")
    store = MemoryBudgetStore(budget_vector(cfg.budget))
    c = Coordinator(cfg.engine_config(), cfg.build_queries(), store)
    c.register_partitions([0, 1])
    qs = [QueryPart(q.id, np.array([0]), np.array([1])) for q in cfg.build_queries()]
    part = PartContribution(seq=1, partition=0, events=1, admitted=1, refused=0, dropped_events=0, items=["a"],
                            queries=qs)
    c.receive(part.to_bytes())
    c.receive(part.to_bytes())  # equal: dropped
    other = PartContribution(seq=1, partition=0, events=1, admitted=1, refused=0, dropped_events=0,
                             items=["b"], queries=qs)
    with pytest.raises(PartConflict):
        c.receive(other.to_bytes())
    c.receive(PartitionMarker(0, 1, 1).to_bytes())
    assert c.receive(PartitionMarker(1, 1, 1).to_bytes())  # window 1 closes
    c.receive(part.to_bytes())  # the closed window's part again: dropped
    with pytest.raises(PartConflict):
        c.receive(other.to_bytes())
    c.receive(PartitionMarker(0, 2, 2).to_bytes())
    late = PartContribution(seq=2, partition=0, events=1, admitted=1, refused=0, dropped_events=0, items=["a"],
                            queries=qs)
    with pytest.raises(PartConflict):  # a part after its partition marked the window closed
        c.receive(late.to_bytes())


def test_a_user_at_budget_is_dropped_end_to_end():
    """One user spends their budget in window 1; from then on their events reach no release: the per-item counts
    stage A sends leave them out (and the coordinator never sees them)."""
    cfg = config("threshold", rho=1.5)  # threshold: ρ = 0.5 per item and window; greedy pays 1.0 per window
    store = MemoryBudgetStore(budget_vector(cfg.budget))
    a = StageA(cfg.engine_config(), cfg.build_queries(), store)
    a.assign([0])
    c = Coordinator(cfg.engine_config(), cfg.build_queries(), store)
    c.register_partitions([0])
    evs = [orjson.dumps({"user": "greedy", "ts": 1.0 + w * 10, "items": ["x", "y"]}) for w in range(3)]
    evs += [orjson.dumps({"user": f"u{k}", "ts": 2.0 + w * 10, "items": ["x"]}) for w in range(3) for k in range(3)]
    evs.sort(key=lambda b: orjson.loads(b)["ts"])
    a.ingest(parse_batch(evs)[0], 0)
    a.flush()
    parts = []
    while True:
        msgs = a.poll()
        if not msgs:
            break
        for m in msgs:
            if isinstance(decode(m), PartContribution):
                parts.append(decode(m))
            c.receive(m)
        for o in c.poll():
            a.on_outcome(o)
    assert [p.seq for p in parts] == [1, 2, 3]
    assert [(p.admitted, p.refused, p.dropped_events) for p in parts] == [(4, 0, 0), (3, 1, 1), (3, 1, 1)]
    # window 1: x held by 4 users, y by greedy; later: x by the 3 others only, y by nobody
    assert [sorted(zip([p.items[k] for k in p.queries[0].codes], p.queries[0].counts.tolist())) for p in parts] \
        == [[("x", 4), ("y", 1)], [("x", 3)], [("x", 3)]]
    assert store.get_user("greedy").halted and not store.get_user("u0").halted


def test_every_kind_is_supported_and_only_the_idle_timeout_is_refused():
    from streamdp.config.kinds import kinds
    from streamdp.engine.count_halves import SUPPORTED_KINDS, check_staged

    assert sorted(SUPPORTED_KINDS) == sorted(kinds())
    cfg = config("mixed")
    store = MemoryBudgetStore(budget_vector(cfg.budget))
    conf = cfg.engine_config()
    conf.idle_timeout = 5.0
    for cls in (StageA, Coordinator):
        with pytest.raises(ValueError, match="idle_timeout"):
            cls(conf, cfg.build_queries(), store)
    q = cfg.build_queries()[0]
    q.kind = "no_such_kind"
    with pytest.raises(UnsupportedKind, match="window_histogram, top_k, continual_counts, continual_sums"):
        check_staged([q])


def test_messages_round_trip_compactly_and_refuse_other_versions():
    qp = QueryPart("q", np.array([2, 0, 1]), np.array([5, 1, 7]), admitted=3, charged=2,
                   max_cost=np.arange(6), min_cost=np.zeros(6, dtype=np.int64))
    part = PartContribution(seq=12, partition=3, events=40, admitted=3, refused=1, dropped_events=4,
                            items=["a", "b", "ç"], queries=[qp])
    blob = part.to_bytes()
    back = decode(blob)
    assert back.items == ["a", "b", "ç"] and back.queries[0].codes.tolist() == [2, 0, 1]
    assert back.queries[0].counts.tolist() == [5, 1, 7] and back.queries[0].max_cost.tolist() == list(range(6))
    assert (back.seq, back.partition, back.events, back.admitted, back.refused, back.dropped_events) == \
        (12, 3, 40, 3, 1, 4)
    assert back.to_bytes() == blob
    assert len(blob) < 230
    assert back.queries[0].sums is None and back.queries[0].points is None
    # continual_sums' signed sum increments (int64) and the geo kinds' points (float64 pairs) ride along
    qs = QueryPart("s", np.array([1, 0]), np.array([3, 2]), sums=np.array([-(2 ** 40), 7]))
    qg = QueryPart("g", np.zeros(0, np.int64), np.zeros(0, np.int64), points=np.array([[0.1, -2.5], [1e300, 3.0]]),
                   order=np.array([2 ** 64 - 1, 5], dtype=np.uint64))
    qe = QueryPart("e", np.zeros(0, np.int64), np.zeros(0, np.int64), points=np.zeros((0, 2)))
    two = PartContribution(seq=1, partition=0, events=5, admitted=2, refused=0, dropped_events=0, items=["a", "b"],
                           queries=[qs, qg, qe])
    back = decode(two.to_bytes())
    assert back.queries[0].sums.tolist() == [-(2 ** 40), 7] and back.queries[1].sums is None
    assert back.queries[1].points.tolist() == [[0.1, -2.5], [1e300, 3.0]]
    assert back.queries[1].order.tolist() == [2 ** 64 - 1, 5] and back.queries[2].order.size == 0
    assert back.queries[1].point_ints is None
    qa = QueryPart("a", np.zeros(0, np.int64), np.zeros(0, np.int64), points=np.array([[1.0, 2.0]]),
                   order=np.array([9], dtype=np.uint64), point_ints=np.array([[2 ** 62, -3]]))
    three = PartContribution(seq=1, partition=0, events=1, admitted=1, refused=0, dropped_events=0, items=[],
                             queries=[qa])
    assert decode(three.to_bytes()).queries[0].point_ints.tolist() == [[2 ** 62, -3]]
    with pytest.raises(ValueError, match="point_ints"):
        PartContribution(seq=1, partition=0, events=1, admitted=1, refused=0, dropped_events=0, items=[],
                         queries=[QueryPart("a", np.zeros(0, np.int64), np.zeros(0, np.int64),
                                            point_ints=np.array([[1, 2]]))]).to_bytes()
    assert back.queries[2].points.shape == (0, 2) and back.queries[0].points is None
    assert back.to_bytes() == two.to_bytes()
    assert PartContribution.VERSION == 3
    # version 3: any number of float columns per point (0: integer-only rows) and a per-query info object
    qm = QueryPart("m", np.zeros(0, np.int64), np.zeros(0, np.int64), points=np.arange(12.0).reshape(4, 3) / 7,
                   order=np.arange(4, dtype=np.uint64), info={"halted": 2})
    qr = QueryPart("r", np.zeros(0, np.int64), np.zeros(0, np.int64), points=np.zeros((3, 0)),
                   order=np.zeros(3, dtype=np.uint64), point_ints=np.array([[4, 0], [1, 0], [2, 1]]))
    four = PartContribution(seq=2, partition=1, events=3, admitted=2, refused=0, dropped_events=0, items=[],
                            queries=[qm, qr])
    back = decode(four.to_bytes())
    assert back.queries[0].points.tolist() == (np.arange(12.0).reshape(4, 3) / 7).tolist()
    assert back.queries[0].info == {"halted": 2} and back.queries[1].info is None
    assert back.queries[1].points.shape == (3, 0) and back.queries[1].point_ints.tolist() == [[4, 0], [1, 0], [2, 1]]
    assert back.to_bytes() == four.to_bytes()
    m = PartitionMarker(3, 9, 11, True)
    assert decode(m.to_bytes()) == m and len(m.to_bytes()) == 31
    o = WindowOutcome(4, "watermark", True, {"topk": {"n": 2, "pwyg": {"k_star": 9, "used": 2, "calls": 1},
                                                      "actual": [1, 2, 0, 0, 0, 0]}})
    assert decode(o.to_bytes()) == o
    for b in (blob, m.to_bytes(), o.to_bytes()):
        with pytest.raises(ValueError, match="version"):
            decode(b[:4] + b"\x09\x00" + b[6:])


def _engine_and_staged(cfg, by_partition, owners):
    """One engine and StageAs (``owners``) + a Coordinator on the same per-partition input (one batch each, then
    the end of input): (engine records, engine spend, staged records, staged spend, staged parts)."""
    store = MemoryBudgetStore(budget_vector(cfg.budget))
    e = ReleaseEngine(cfg.engine_config(), cfg.build_queries(), store)
    e.register_partitions(range(len(by_partition)))
    for p, evs in enumerate(by_partition):
        e.ingest(parse_batch(evs)[0], p)
    ref = [r.to_bytes() for s in e.close_due() + e.flush() for r in s.records]
    ref_spend = spend_of(store)
    store = MemoryBudgetStore(budget_vector(cfg.budget))
    stages = []
    for o in owners:
        a = StageA(cfg.engine_config(), cfg.build_queries(), store)
        a.assign(o)
        stages.append(a)
    c = Coordinator(cfg.engine_config(), cfg.build_queries(), store)
    c.register_partitions(range(len(by_partition)))
    for p, evs in enumerate(by_partition):
        next(a for a in stages if p in a.partitions).ingest(parse_batch(evs)[0], p)
    for a in stages:
        a.flush()
    records, parts = [], []
    while True:
        msgs = [m for a in stages for m in a.poll()]
        if not msgs:
            break
        for m in msgs:
            if isinstance(decode(m), PartContribution):
                parts.append(decode(m))
            records += [r.to_bytes() for s in c.receive(m) for r in s.records]
        for o in c.poll():
            for a in stages:
                a.on_outcome(o)
    return ref, ref_spend, records, spend_of(store), parts


def test_continual_sums_keys_selected_while_a_partition_was_silent_are_known_to_it():
    """Key "k" is selected in window 5 (epoch 1) from partition 0's users; partition 1 has no events from window 2
    to 5 and touches "k" in window 6: it must know "k" is selected (no δ_key charge, as in the engine), although
    its stage A applied window 5's outcome before its first admit of the epoch (a first version of the half
    that reset the selection at the partition's first admit of an epoch would charge δ_key)."""
    cfg = config("sums_optimal", rho=1000)
    ev = lambda u, t, items: orjson.dumps({"user": u, "ts": t, "items": items})  # noqa: E731
    p0 = [ev(f"a{k}", 41.0 + k * 0.1, ["k"]) for k in range(30)] + [ev("a0", 95.0, [])]
    p1 = [ev("b", 1.0, ["x"]), ev("b", 51.0, ["k"]), ev("b", 95.0, [])]
    ref, ref_spend, got, spend, _ = _engine_and_staged(cfg, [p0, p1], [[0], [1]])
    assert any(orjson.loads(r)["values"]["new_keys"] == ["k"] and orjson.loads(r)["window"]["seq"] == 5 for r in ref)
    assert ref_spend["b"][0][1] == cfg.build_queries()[0]._delta_key_fixed  # δ_key once: "x" in window 1 only
    assert got == ref and spend == ref_spend


def test_continual_sums_a_user_at_budget_is_dropped_end_to_end():
    """A user whose window-2 charge (two keys, value 10, the tree's G) does not fit their budget is refused and
    reaches no later release: the per-key count and sum increments stage A sends leave them out, and the
    releases and spend equal the engine's."""
    cfg = config("sums_tree", rho=40)
    ev = lambda u, t, items, v: orjson.dumps({"user": u, "ts": t, "items": items, "value": v})  # noqa: E731
    evs = [ev("greedy", 1.0 + w * 10, ["x", "y"], 10.0) for w in range(3)]
    evs += [ev(f"u{k}", 2.0 + w * 10, ["x"], 1.0) for w in range(3) for k in range(3)]
    evs.sort(key=lambda b: orjson.loads(b)["ts"])
    ref, ref_spend, got, spend, parts = _engine_and_staged(cfg, [evs], [[0]])
    assert got == ref and spend == ref_spend
    assert ref_spend["greedy"][1] and not ref_spend["u0"][1]
    assert [(p.admitted, p.refused) for p in parts] == [(4, 0), (3, 1), (3, 1)]
    for p in parts[1:]:  # only the three others' x, value 1 each
        q = p.queries[0]
        assert [p.items[c] for c in q.codes] == ["x"] and q.counts.tolist() == [3]
        assert q.sums.tolist() == [3 * round(1.0 / cfg.build_queries()[0].grid)]


def test_geo_a_user_at_budget_is_dropped_end_to_end():
    """The budget holds one window's location cost (and a half): a user located in every window is refused from
    window 2 on, and their point no longer crosses — the parts carry the admitted users' points only, no user id;
    the releases and spend equal the engine's."""
    name = "geo"
    cfg = config(name)
    cost = cfg.build_queries()[0].cost.cgp_rho * 2  # the two geo queries of the configuration
    text = (SERVICE % {"rho": 1} + CONFIGS[name]).replace("[budget]\n", f"[budget]\ncgp_rho = {1.5 * cost!r}\n")
    cfg = parse_config(tomllib.loads(text), log_warnings=False)
    ev = lambda u, t, loc: orjson.dumps({"user": u, "ts": t, "loc": loc})  # noqa: E731
    evs = [ev("greedy", 1.0 + w * 10, [5.0, 5.0]) for w in range(3)]
    evs += [ev(f"u{w}-{k}", 2.0 + w * 10 + k, [1.0 + k, 2.0 + w]) for w in range(3) for k in range(3)]
    evs.sort(key=lambda b: orjson.loads(b)["ts"])
    ref, ref_spend, got, spend, parts = _engine_and_staged(cfg, [evs[:7], evs[7:]], [[0], [1]])
    assert got == ref and spend == ref_spend
    assert ref_spend["greedy"][1] and not any(h for u, (_, h) in ref_spend.items() if u != "greedy")
    greedy_windows = {p.seq: p for p in parts if [5.0, 5.0] in p.queries[0].points.tolist()}
    assert sorted(greedy_windows) == [1]  # greedy's point crossed in window 1 only
    assert sum(p.queries[0].points.shape[0] for p in parts) == 10 and all(p.queries[0].order.size ==
                                                                         p.queries[0].points.shape[0] for p in parts)


def test_adaptive_per_index_executed_costs_reach_their_users():
    """range_counts over two partitions with several users each: PIE eliminates users far from the rectangle early
    (they execute less than r_i); the outcome's per-partition executed costs, matched by local index, settle each
    user and update their B_i in stage A, so the next query's allocations (r_i from the savings, Alg. 3), the
    releases and the spend equal the engine's — a shuffled index would move savings between users."""
    cfg = config("range", rho=1)
    ev = lambda u, t, loc: orjson.dumps({"user": u, "ts": t, "loc": loc})  # noqa: E731
    g = np.random.default_rng(8)
    by_p = [[], []]
    for w in (2, 3, 4, 5, 6):  # nobody at window 9: the last query does not take what the users saved
        for k in range(10):
            loc = [[float(g.uniform(0, 10)), 0.5], [5.0 + g.normal(0, 0.3), 5.0],  # far, deep inside, on the border
                   [5.0 + 1.8 + g.normal(0, 0.05), 5.0]][k % 3]
            by_p[k % 2].append(ev(f"u{k}", (w - 1) * 10 + 1.0 + k * 0.1, [round(x, 4) for x in loc]))
    by_p[0].append(ev("u0", 120.0, None))
    ref, ref_spend, got, spend, parts = _engine_and_staged(cfg, by_p, [[0], [1]])
    recs = [orjson.loads(r) for r in ref if orjson.loads(r)["values"].get("query_index")]
    assert any(r["values"]["eliminated_early"] for r in recs)
    assert len({tuple(v[0]) for v in ref_spend.values()}) > 1  # users executed different amounts
    assert got == ref and spend == ref_spend
