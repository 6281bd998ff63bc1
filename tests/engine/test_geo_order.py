"""The order in which the geo kinds and the adaptive point kinds (range_counts, kde_point, knn_point) hand their
users' points to the mechanism (streamdp/engine/queries/geo.py ``canonical_points``, range_counts.py
``release_window``, streamdp/engine/stage_a.py ``user_order_key``; docs/DECISIONS.md "Scale-out: stage A admits",
geo kinds): ascending keyed hashes of (query, window, user name) under Kb — not the interned user ids, which follow
other users' data (and differ between the single engine and a stage A's partition-local tables).

* known answer: the order key recomputed with hashlib from the documented recipe;
* the same window releases the same bytes whatever order its users were interned in (fails on the old code, which
  handed the points over in user-id order);
* the order is a uniformly random permutation independent of the values (χ² over the rank of one user).
"""

from __future__ import annotations

import hashlib
import tomllib
import warnings

import numpy as np
import orjson
import pytest
from scipy import stats

from streamdp.accounting.cost import budget_vector
from streamdp.config.loader import parse_config
from streamdp.engine.engine import ReleaseEngine
from streamdp.engine.queries.geo import canonical_points
from streamdp.engine.query import Names
from streamdp.engine.stage_a import BoundingDraws, user_order_key
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.input.events import parse_batch

warnings.simplefilter("ignore")

CFG = """
[service]
window_seconds = 10.0
horizon = 4
origin = 0.0
allowed_lateness = 0.0
unsafe_test_seed = 7
max_future_seconds = 1e12
[budget]
cgp_rho = 1.0
[[query]]
id = "geo"
kind = "geo_locations"
mechanism = "cgp"
rho = 0.01
units = "degrees"
region = [0.0, 10.0, 0.0, 10.0]
location = "last"
[[query]]
id = "knn"
kind = "geo_knn"
k = 2
rho = 40.0
points = [[5.0, 5.0]]
units = "degrees"
region = [0.0, 10.0, 0.0, 10.0]
[[query]]
id = "hull"
kind = "geo_convex_hull"
rho = 40.0
k = 16
units = "degrees"
region = [0.0, 10.0, 0.0, 10.0]
"""


ADAPTIVE = """
[[query]]
id = "rc"
kind = "range_counts"
budget_rho = 0.01
units = "km"
projection = "equirectangular"
region = [0.0, 10.0, 0.0, 10.0]
rounds = 3
queries = [ { window = 2, rect = [5.0, 5.0, 400.0, 400.0] } ]
[[query]]
id = "kde"
kind = "kde_point"
bandwidth = 200.0
budget_rho = 0.01
units = "km"
projection = "equirectangular"
region = [0.0, 10.0, 0.0, 10.0]
queries = [{ window = 2, point = [5.0, 5.0] }]
[[query]]
id = "kp"
kind = "knn_point"
k = 2
budget_rho = 0.01
units = "km"
projection = "equirectangular"
region = [0.0, 10.0, 0.0, 10.0]
queries = [{ window = 2, point = [5.0, 5.0] }]
"""


def recipe(kb: bytes, query: str, seq: int, user: str) -> int:
    parts = [query.encode(), seq.to_bytes(8, "little", signed=True), user.encode()]
    msg = b"".join(len(x).to_bytes(4, "little") + x for x in parts)
    return int.from_bytes(hashlib.blake2b(msg, key=kb, digest_size=8, person=b"streamdp-order").digest(), "big")


def test_the_order_key_is_the_documented_keyed_hash():
    kb = bytes(range(32))
    users = Names()
    ids = users.ids(["alice", "bob", "çé"])
    d = BoundingDraws(kb, 5, users, Names()).for_query("geo")
    got = d.user_order_keys(ids)
    assert got.dtype == np.uint64
    assert got.tolist() == [recipe(kb, "geo", 5, u) for u in ("alice", "bob", "çé")]
    assert got.tolist() == [user_order_key(kb, "geo", 5, u) for u in ("alice", "bob", "çé")]
    assert d.user_order_keys(ids[::-1]).tolist() == got[::-1].tolist()  # per user, not per position
    assert BoundingDraws(kb, 6, users, Names()).for_query("geo").user_order_keys(ids).tolist() != got.tolist()


def _run(first_window_users: list[str], text: str = CFG) -> list[bytes]:
    """Window 1: ``first_window_users`` without locations (they only intern user ids); window 2: the same located
    users whatever window 1 was."""
    cfg = parse_config(tomllib.loads(text), log_warnings=False)
    e = ReleaseEngine(cfg.engine_config(), cfg.build_queries(), MemoryBudgetStore(budget_vector(cfg.budget)))
    evs = [orjson.dumps({"user": u, "ts": 1.0 + k}) for k, u in enumerate(first_window_users)]
    g = np.random.default_rng(3)
    evs += [orjson.dumps({"user": f"u{k}", "ts": 11.0 + k * 0.1, "loc": [float(g.uniform(1, 9)),
                                                                         float(g.uniform(1, 9))]})
            for k in range(12)]
    e.ingest(parse_batch(evs)[0], 0)
    return [r.to_bytes() for s in e.flush() for r in s.records]


def test_a_window_releases_the_same_whatever_order_its_users_were_interned_in():
    names = [f"u{k}" for k in range(12)]
    a = _run(names)
    b = _run(names[::-1])
    c = _run(["x"] + names[5:] + names[:5])
    assert len(a) == 6 and orjson.loads(a[3])["values"]["users"] == 12
    assert a == b == c


def test_an_adaptive_window_releases_the_same_whatever_order_its_users_were_interned_in():
    text = CFG[:CFG.index("[[query]]")] + ADAPTIVE
    names = [f"u{k}" for k in range(12)]
    a = _run(names, text)
    assert len(a) == 6 and [orjson.loads(r)["values"]["users"] for r in a[3:]] == [12, 12, 12]
    assert a == _run(names[::-1], text) == _run(["x"] + names[5:] + names[:5], text)


def test_the_canonical_order_is_a_uniform_permutation_independent_of_the_values():
    """One point far from the others: its rank after ordering is uniform over 0..n−1 across windows (χ²)."""
    n, reps = 8, 4000
    users = Names()
    ids = users.ids([f"u{k}" for k in range(n)])
    xy = np.column_stack([np.arange(n, dtype=float), np.zeros(n)])
    xy[0] = [1e6, 1e6]
    ranks = np.zeros(n, dtype=np.int64)
    kb = bytes(32)
    for t in range(reps):
        keys = BoundingDraws(kb, t, users, Names()).for_query("geo").user_order_keys(ids)
        out = canonical_points(xy, keys)
        ranks[int(np.flatnonzero(out[:, 0] == 1e6)[0])] += 1
    assert stats.chisquare(ranks).pvalue > 1e-3


def test_ties_of_order_keys_fall_back_to_the_values():
    xy = np.array([[2.0, 1.0], [1.0, 5.0], [1.0, 2.0]])
    keys = np.array([7, 7, 3], dtype=np.uint64)
    assert canonical_points(xy, keys).tolist() == [[1.0, 2.0], [1.0, 5.0], [2.0, 1.0]]
    with pytest.raises(ValueError):
        canonical_points(xy, keys[:2])
