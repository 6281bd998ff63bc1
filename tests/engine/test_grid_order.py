"""The order in which grid_means (both neighbour notions) hands its users' rows to the release
(streamdp/engine/queries/grid_means.py, module doc "Determinism"; docs/DECISIONS.md "Scale-out: stage A admits"):
users are ordered by their order keys (keyed hashes of query, window and user name under Kb), not by interned user
ids, which follow other users' data and differ between the single engine and a stage A's partition-local tables.
Both the random order of samples tied in event time (add/remove: which random number goes to which row) and the
bounded estimators' order of users in a cell (array averaging groups them in order; the mean sums in order) follow
the users' order.

* the same window releases the same bytes whatever order its users were interned in (fails on the old code, which
  ordered by user id);
* the tie-break is still uniform: over many windows, each of a user's tied values is kept about equally often.
"""

from __future__ import annotations

import tomllib
import warnings

import numpy as np
import orjson
from scipy import stats

from streamdp.accounting.cost import budget_vector
from streamdp.config.loader import parse_config
from streamdp.engine.engine import ReleaseEngine
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.input.events import parse_batch

warnings.simplefilter("ignore")

SERVICE = """
[service]
window_seconds = 10.0
horizon = 4
origin = 0.0
allowed_lateness = 0.0
unsafe_test_seed = 7
max_future_seconds = 1e12
[budget]
zcdp_rho = 100.0
zcdp_delta = 1e-3
"""
GRID = """
[[query]]
id = "gm"
kind = "grid_means"
cells = "item"
rho = 0.5
m_ub = 2
upper = 100.0
delta_cell = 1e-9
"""
BOUNDED = """
[[query]]
id = "%(id)s"
kind = "grid_means"
neighbours = "bounded_unsafe_presence"
cells = "grid"
cell_size = 5.0
epsilon = 1.0
upper = 100.0
bounded_budget_rho = 100.0
estimator = "%(est)s"
"""
CFG = SERVICE + GRID + BOUNDED % {"id": "aa", "est": "array_averaging"} + BOUNDED % {"id": "base", "est": "baseline"}


def _run(first_window_users: list[str], text: str = CFG) -> list[bytes]:
    """Window 1: ``first_window_users`` without values (they only intern user ids); window 2: the same users' rows
    whatever window 1 was — each user 1 to 4 values in one or two cells, some tied in event time."""
    cfg = parse_config(tomllib.loads(text), log_warnings=False)
    e = ReleaseEngine(cfg.engine_config(), cfg.build_queries(), MemoryBudgetStore(budget_vector(cfg.budget)))
    evs = [orjson.dumps({"user": u, "ts": 1.0 + k * 0.1}) for k, u in enumerate(first_window_users)]
    g = np.random.default_rng(3)
    for k in range(12):
        ts = 11.0 + k * 0.1
        for j in range(1 + k % 4):
            cell = "a" if j < 3 else "b"
            evs.append(orjson.dumps({"user": f"u{k}", "ts": ts, "items": [cell], "value": float(g.uniform(0, 100)),
                                     "loc": [1.0 + 5.0 * (j == 3), 2.0]}))
    evs.sort(key=lambda b: orjson.loads(b)["ts"])
    e.ingest(parse_batch(evs)[0], 0)
    return [r.to_bytes() for s in e.flush() for r in s.records]


def test_a_window_releases_the_same_whatever_order_its_users_were_interned_in():
    names = [f"u{k}" for k in range(12)]
    a = _run(names)
    b = _run(names[::-1])
    c = _run(["x"] + names[5:] + names[:5])
    assert len(a) == 6
    w2 = [orjson.loads(r) for r in a[3:]]
    assert w2[0]["values"]["cells"].keys() >= {"a"} and w2[1]["values"]["cells"]["0,0"]["users"] == 12
    assert a == b == c


def test_tied_values_are_kept_uniformly():
    """One user with 3 values tied in event time and m_UB = 1 among others: which value is kept is uniform over
    windows (χ² at a small p): the tie-break draws from the engine generator in the order-key order."""
    text = SERVICE.replace("zcdp_rho = 100.0", "zcdp_rho = 9e6") + GRID.replace("m_ub = 2", "m_ub = 1").replace(
        "rho = 0.5", "rho = 1e4").replace(
        "delta_cell = 1e-9", 'cell_selection = "listed"\ncell_list = ["a"]')
    cfg = parse_config(tomllib.loads(text), log_warnings=False)
    e = ReleaseEngine(cfg.engine_config(), cfg.build_queries(), MemoryBudgetStore(budget_vector(cfg.budget)))
    q = cfg.build_queries()[0]
    kept = []
    vals = [10.0, 50.0, 90.0]
    evs = []
    for w in range(300):
        t = w * 10.0 + 1.0
        evs += [orjson.dumps({"user": "tied", "ts": t, "items": ["a"], "value": v}) for v in vals]
    e.ingest(parse_batch(evs)[0], 0)
    for s in e.flush():
        m = s.records[0].values["cells"]["a"]["mean"]
        kept.append(int(np.argmin([abs(m - v) for v in vals])))
    assert q.mechanism.sum_sd < 5  # the mean identifies the kept value (40 apart)
    counts = np.bincount(kept, minlength=3)
    assert stats.chisquare(counts).pvalue > 1e-4, counts
