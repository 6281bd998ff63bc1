"""Snapshot → restore mid-window equals an undisturbed run, for every query kind (review of 2026-11-23).

Random streams (disorder, late events, users halted at small budgets, epoch rollovers over horizon 4), cut into
random batches; a snapshot at a random batch boundary (usually mid-window) is restored into a FRESH engine which
continues. 'plain': the releases are byte-identical to the undisturbed run's. 'replay': the original engine runs
on past the snapshot (charging the store, logging releases) and is lost; the restored engine replays from the
snapshot against the advanced store: the same releases and the same final spend and halts (nothing charged twice).
Test mode (one seed), so equal releases mean equal noise."""
import tomllib
import warnings

import numpy as np
import orjson
import pytest

from streamdp.accounting.cost import budget_vector
from streamdp.config.loader import parse_config
from streamdp.engine import state_codec
from streamdp.engine.append_log import join_logs, split_logs
from streamdp.engine.engine import ReleaseEngine
from streamdp.engine.pipeline import EmbeddedPipeline
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.outputs.sinks import ListSink

CFG = """
[service]
window_seconds = 10.0
horizon = 4
origin = 0.0
allowed_lateness = 3.0
unsafe_test_seed = 7
max_future_seconds = 1e12
[budget]
zcdp_rho = %(rho)s
zcdp_delta = 1e-4
cgp_rho = 1.0
emd_alpha = 30.0
emd_delta = 1e-6

[[query]]
id = "cc"
kind = "continual_counts"
sigma = 1.0
delta_item = 1e-6
max_items_per_window = 2
max_per_item = 2

[[query]]
id = "topk"
kind = "top_k"
epsilon = 1.0
delta = 1e-6
k = 2
kbar = 4
k_star = 40

[[query]]
id = "hist"
kind = "window_histogram"
epsilon = 1.0
delta = 1e-6
max_items_per_window = 2
algorithm = "threshold"
noise = "gaussian"

[[query]]
id = "hist2"
kind = "window_histogram"
epsilon = 1.0
delta = 1e-6
max_items_per_window = 2
algorithm = "top_kbar"
kbar = 3

[[query]]
id = "gm"
kind = "grid_means"
cells = "item"
rho = 0.125
m_ub = 2
upper = 100.0
delta_cell = 1e-9

[[query]]
id = "gmb"
kind = "grid_means"
neighbours = "bounded_unsafe_presence"
cells = "item"
estimator = "baseline"
epsilon = 0.5
upper = 100.0
min_users = 2
bounded_budget_rho = 1.0

[[query]]
id = "geo"
kind = "geo_locations"
mechanism = "cgp"
rho = 0.01
units = "degrees"
region = [0.0, 10.0, 0.0, 10.0]
location = "last"

[[query]]
id = "hull"
kind = "geo_convex_hull"
rho = 40.0
units = "degrees"
region = [0.0, 10.0, 0.0, 10.0]
location = "last"

[[query]]
id = "emd"
kind = "emd_linear"
alpha = 0.5
lipschitz = 20.0
dimensions = ["a", "b"]
[query.features]
i0 = [0.0, 1.0]
i1 = [3.0, 4.0]
i2 = [5.0, 9.0]
"""

CFG2 = """
[service]
window_seconds = 10.0
horizon = 4
origin = 0.0
allowed_lateness = 3.0
unsafe_test_seed = 7
max_future_seconds = 1e12
[budget]
zcdp_rho = %(rho)s
zcdp_delta = 1e-4
cgp_rho = 1e-7
emd_alpha = 30.0
emd_delta = 1e-6

[[query]]
id = "knn"
kind = "geo_knn"
k = 2
rho = 0.01
points = [[2.0, 2.0], [8.0, 8.0]]
select_share = 0.5
units = "degrees"
region = [0.0, 10.0, 0.0, 10.0]

[[query]]
id = "rc"
kind = "range_counts"
budget_rho = 0.01
units = "km"
projection = "equirectangular"
ref_lat = 5.0
region = [0.0, 10.0, 0.0, 10.0]
location = "last"
reuse_savings = true
rounds = 3
split = "even"
estimator = "pm1"
beta = 0.1
queries = [ { window = 2, rect = [5.0, 5.0, 400.0, 400.0] }, { window = 4, rect = [3.0, 3.0, 200.0, 200.0] }, { window = 6, rect = [5.0, 5.0, 600.0, 600.0] } ]

[[query]]
id = "kde"
kind = "kde_point"
bandwidth = 200.0
budget_rho = 0.01
units = "km"
projection = "equirectangular"
ref_lat = 5.0
region = [0.0, 10.0, 0.0, 10.0]
estimator = "pm0"
queries = [{ window = 3, point = [5.0, 5.0] }, { window = 7, point = [2.0, 2.0] }]

[[query]]
id = "kp"
kind = "knn_point"
k = 2
budget_rho = 0.01
units = "km"
projection = "equirectangular"
ref_lat = 5.0
region = [0.0, 10.0, 0.0, 10.0]
estimator = "pm1"
queries = [{ window = 5, point = [5.0, 5.0] }]

[[query]]
id = "thr"
kind = "threshold_count"
rho = 0.05
rounds = 3
queries = [{ window = 2, threshold = 3, item = "i0" }, { window = 5, threshold = 2, item = "i1" }]

[[query]]
id = "ef"
kind = "emd_frequency"
alpha0 = 1.5
gamma = 0.5
max_items = 3
delta = 0.0
[query.clusters]
c1 = ["i0", "i1"]
c2 = ["i2", "i3"]
"""


def build(text, rho, store=None):
    cfg = parse_config(tomllib.loads(text % {"rho": rho}), log_warnings=False)
    st = store if store is not None else MemoryBudgetStore(budget_vector(cfg.budget))
    return ReleaseEngine(cfg.engine_config(), cfg.build_queries(), st), st


def stream(rng, n_events, n_users, n_items=5, span=80.0):
    out, t = [], 0.0
    for _ in range(n_events):
        t += rng.exponential(span / n_events)
        ts = max(0.0, t - rng.uniform(0, 8))  # some disorder, some late
        d = {"user": f"u{rng.integers(n_users)}", "ts": round(ts, 3),
             "items": [f"i{j}" for j in rng.choice(n_items, rng.integers(0, 4), replace=False)],
             "value": float(rng.uniform(-10, 120))}
        if rng.random() < 0.8:
            d["loc"] = [float(rng.uniform(-2, 12)), float(rng.uniform(-2, 12))]
        out.append(orjson.dumps(d))
    return out


def batches(events, rng):
    cuts = sorted(set(rng.integers(1, len(events), rng.integers(1, 15)).tolist()))
    return [events[a:b] for a, b in zip([0] + cuts, cuts + [len(events)])]


def run(e, bs, flush=True):
    sink = ListSink()
    p = EmbeddedPipeline(e, [sink])
    for b in bs:
        p.feed(b)
    if flush:
        p._emit(e.flush())
    return [r.to_bytes() for r in sink.records]


def spent(store, users):
    return {u: (store.get_user(u).spent.tolist(), store.get_user(u).halted) for u in users}


def one(text, seed, mode):
    rng = np.random.default_rng(seed)
    n_users = int(rng.integers(3, 20))
    ev = stream(rng, n_events=int(rng.integers(50, 400)), n_users=n_users)
    bs = batches(ev, rng)
    rho = float(rng.choice([20, 60, 200]))
    ref_e, ref_s = build(text, rho)
    ref = run(ref_e, bs)
    cut = int(rng.integers(0, len(bs) + 1))
    e, s = build(text, rho)
    first = run(e, bs[:cut], flush=False)
    base, logs = split_logs(e.state_tree())
    blob = state_codec.encode(base)
    if mode == "replay":
        run(e, bs[cut:int(rng.integers(cut, len(bs) + 1))], flush=False)  # the lost run charges and logs
    r, _ = build(text, rho, store=s)
    r.restore_tree(join_logs(state_codec.decode(blob), logs))
    got = first + run(r, bs[cut:])
    assert got == ref, (seed, mode, cut, next((i for i, (a, b) in enumerate(zip(got, ref)) if a != b), None))
    users = [f"u{i}" for i in range(n_users)]
    assert spent(s, users) == spent(ref_s, users), (seed, mode)
    return len(ref)


@pytest.mark.parametrize("text", [CFG, CFG2], ids=["counts-means-geo-emd", "adaptive-knn-frequency"])
@pytest.mark.parametrize("mode", ["plain", "replay"])
def test_restore_mid_window_equals_the_undisturbed_run(text, mode):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        released = sum(one(text, seed, mode) for seed in range(15))
    assert released > 15 * 8  # the runs release something to compare
