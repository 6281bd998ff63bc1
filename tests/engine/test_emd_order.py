"""emd_linear's mean over users is a function of the multiset of the users' q_f(D_i), not of the order of their
interned ids (streamdp/engine/queries/emd.py ``release_means``; docs/DECISIONS.md "Scale-out: stage A admits"):
the float sum over users depends on the order it adds in, and interned ids follow other users' data (and differ
between the single engine and a stage A's partition-local tables). The rows are sorted before the sum.

Fails on the old code (which summed in user-id order): the exact mean handed to the noise differs in its last bits
when the same window's users were interned in another order.
"""

from __future__ import annotations

import tomllib
import warnings

import numpy as np
import orjson

import streamdp.mechanisms.emd.linear as linear
from streamdp.accounting.cost import budget_vector
from streamdp.config.loader import parse_config
from streamdp.engine.engine import ReleaseEngine
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.input.events import parse_batch

warnings.simplefilter("ignore")

FEATURES = {f"x{k}": [round(0.1 * k + 1 / 3, 15), round(1 / (k + 7), 15)] for k in range(9)}
CFG = """
[service]
window_seconds = 10.0
horizon = 4
origin = 0.0
allowed_lateness = 0.0
unsafe_test_seed = 7
max_future_seconds = 1e12
[budget]
emd_alpha = 100.0
[[query]]
id = "el"
kind = "emd_linear"
alpha = 1.0
lipschitz = 2.0
features = { %s }
""" % ", ".join(f"{k} = {v}" for k, v in FEATURES.items())


def _run(first_window_users: list[str], monkeypatch) -> tuple[list[bytes], list]:
    """Window 1: ``first_window_users`` without items (they only intern ids); window 2: the same 40 users' items.
    (records, the exact means handed to the noise)."""
    seen = []
    monkeypatch.undo()
    real = linear.granular_l2_laplace

    def spy(rng, q, scale):
        seen.append(np.asarray(q, dtype=np.float64).tobytes())
        return real(rng, q, scale)

    monkeypatch.setattr(linear, "granular_l2_laplace", spy)
    cfg = parse_config(tomllib.loads(CFG), log_warnings=False)
    e = ReleaseEngine(cfg.engine_config(), cfg.build_queries(), MemoryBudgetStore(budget_vector(cfg.budget)))
    evs = [orjson.dumps({"user": u, "ts": 1.0 + k * 0.01}) for k, u in enumerate(first_window_users)]
    g = np.random.default_rng(5)
    for k in range(40):
        items = [f"x{int(j)}" for j in g.integers(0, 9, 1 + k % 5)]
        evs.append(orjson.dumps({"user": f"u{k}", "ts": 11.0 + k * 0.01, "items": items}))
    e.ingest(parse_batch(evs)[0], 0)
    return [r.to_bytes() for s in e.flush() for r in s.records], seen


def test_the_mean_over_users_does_not_depend_on_the_interning_order(monkeypatch):
    names = [f"u{k}" for k in range(40)]
    g = np.random.default_rng(1)
    runs = [_run(order, monkeypatch) for order in (names, names[::-1], list(g.permutation(names)),
                                                   ["x"] + names[7:] + names[:7])]
    assert orjson.loads(runs[0][0][1])["values"]["users"] == 40
    assert all(r[1] == runs[0][1] for r in runs)  # bit-identical exact means
    assert all(r[0] == runs[0][0] for r in runs)  # and records
