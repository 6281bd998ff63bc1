"""The worker's store view refuses to close a window whose release is already logged — before anything is drawn
or charged (service review of 2026-11-23, finding 2: a second deployment with the same query ids charged the
window's users, then died on the release-log conflict, and charged them again at every restart)."""

from __future__ import annotations

import copy

import numpy as np
import orjson
import pytest

from streamdp.accounting.cost import budget_vector
from streamdp.adapters.kafka.checkpoint import DeferredReleaseLog
from streamdp.config.loader import parse_config
from streamdp.engine.engine import ReleaseConflict, ReleaseEngine
from streamdp.engine.replay_digest import generator_fingerprint
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.input.events import parse_batch

RAW = {"service": {"window_seconds": 10.0, "horizon": 8, "origin": 0.0},
       "budget": {"zcdp_rho": 50.0, "zcdp_delta": 0.5},
       "query": [{"id": "c", "kind": "continual_counts", "sigma": 1.0, "max_items_per_window": 1},
                 {"id": "k", "kind": "top_k", "epsilon": 1.0, "delta": 1e-6, "k": 2, "kbar": 4}]}


def _engine(store):
    cfg = parse_config(copy.deepcopy(RAW))
    return ReleaseEngine(cfg.engine_config(), cfg.build_queries(), store)


def _events(eng):
    batch, dead = parse_batch([orjson.dumps({"user": f"u{i}", "ts": 1.0 + i, "items": ["a"]}) for i in range(8)]
                              + [orjson.dumps({"user": "u0", "ts": 12.0, "items": ["a"]})])
    assert not dead
    eng.ingest(batch)


@pytest.mark.parametrize("key", ["c/0/1", "k/0/1"])
def test_a_logged_window_is_refused_before_the_admit(key):
    inner = MemoryBudgetStore(budget_vector(parse_config(copy.deepcopy(RAW)).budget))
    inner.put_release(key, b"another deployment's release")
    eng = _engine(DeferredReleaseLog(inner))
    _events(eng)
    rng_before = generator_fingerprint(eng.rng)
    with pytest.raises(ReleaseConflict) as e:
        eng.close_due()
    assert e.value.key == key
    assert list(inner.iter_users()) == []  # nobody charged (nor even known to the store)
    assert generator_fingerprint(eng.rng) == rng_before  # nothing drawn


def test_windows_not_logged_close_and_this_engines_own_pending_releases_do_not_count():
    inner = MemoryBudgetStore(budget_vector(parse_config(copy.deepcopy(RAW)).budget))
    inner.put_release("c/0/2", b"a later window of another deployment")
    dlog = DeferredReleaseLog(inner)
    eng = _engine(dlog)
    _events(eng)
    out = eng.close_due()  # window 1: not logged anywhere
    assert [s.seq for s in out] == [1] and set(dlog.releases) == {"c/0/1", "k/0/1"}
    dlog.refuse_logged(["c/0/1", "k/0/1"])  # pending in this engine's own log: not a conflict
    spent = {u.user: u.spent.copy() for u in inner.iter_users()}
    assert spent and all(s[0] > 0 for s in spent.values())
    with pytest.raises(ReleaseConflict):
        dlog.refuse_logged(["c/0/2"])
    assert np.all([np.array_equal(u.spent, spent[u.user]) for u in inner.iter_users()])
