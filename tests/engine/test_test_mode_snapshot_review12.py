"""A snapshot written in test mode (``unsafe_test_seed``) is not continued by a secure engine, nor the other way
round (twelfth-session noise review).

A test-mode snapshot carries its generator's state, whose ChaCha key is derived from the fixed seed. A secure
engine restoring it used to load that state: its next windows were noised from a stream anyone who knows the seed
can reproduce (reviewer's repro: the production worker's key was exactly ``ChaCha(seed=7)``'s), with no warning,
since the seed was not among the release parameters. Now test mode is one (``noise``), the seed's value is not,
and a secure engine's parameters (hence its admission scope) are what they were before.
"""

from __future__ import annotations

import copy

import numpy as np
import orjson
import pytest

from streamdp.accounting.cost import budget_vector
from streamdp.config.loader import parse_config
from streamdp.engine.engine import ReleaseEngine
from streamdp.engine.release_parameters import ParametersChanged
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.input.events import parse_batch
from streamdp.noise.generator import unsafe_seeded_generator

# max_future_seconds: the default of before 2026-12-07 (one-minute windows now default to 7 days), so that the
# scope below is the one computed before test mode was a parameter
BASE = {"service": {"window_seconds": 60.0, "origin": 1.7e9, "horizon": 8, "max_future_seconds": 2592000.0},
        "budget": {"zcdp_rho": 100.0, "zcdp_delta": 1e-3},
        "query": [{"id": "counts", "kind": "continual_counts", "sigma": 2.0, "noise": "discrete_gaussian"}]}


def _engine(seed) -> ReleaseEngine:
    raw = copy.deepcopy(BASE)
    if seed is not None:
        raw["service"]["unsafe_test_seed"] = seed
    c = parse_config(raw, log_warnings=False)
    return ReleaseEngine(c.engine_config(), c.build_queries(), MemoryBudgetStore(budget_vector(c.budget)))


def _snapshot(seed) -> bytes:
    eng = _engine(seed)
    eng.ingest(parse_batch([orjson.dumps({"user": f"u{i}", "ts": 1.7e9 + 10.0 + 60 * (i % 3), "items": ["x"]})
                            for i in range(30)])[0])
    eng.flush()
    return eng.snapshot()


def test_a_secure_engine_refuses_a_test_mode_snapshot():
    snap = _snapshot(7)
    prod = _engine(None)
    with pytest.raises(ParametersChanged, match="written in test mode"):
        prod.restore(snap)
    # nothing of the seeded stream was loaded
    seeded_key = unsafe_seeded_generator(7).bit_generator.state["state"]["keysetup"]
    assert not np.array_equal(prod.rng.bit_generator.state["state"]["keysetup"], seeded_key)


def test_a_test_mode_engine_refuses_a_secure_snapshot():
    with pytest.raises(ParametersChanged, match="this worker is in test mode"):
        _engine(3).restore(_snapshot(None))


def test_same_mode_restores_and_the_seed_value_is_not_a_parameter():
    _engine(None).restore(_snapshot(None))
    _engine(8).restore(_snapshot(7))  # another seed: still test mode on both sides


def test_a_secure_engine_has_the_parameters_and_scope_of_before():
    prod, test = _engine(None), _engine(7)
    assert "noise" not in prod.parameters
    # computed with the code before test mode was a parameter (engine:79ea95f3cb24), then with continual_counts'
    # release_rule = 2 in the parameters (2026-12-07: a new rule is a new scope: engine:6fdb6a82ed56), then 3
    # (Honaker's estimator charged over every completed node)
    assert prod.scope == "engine:3ca749945b19"
    assert test.parameters["noise"] == "unsafe_test_seed"
    assert prod.scope != test.scope


def test_a_test_mode_snapshot_from_before_the_noise_parameter_is_refused_too():
    """Closing review: the ``noise`` parameter only marks snapshots written since it exists. A test-mode snapshot
    written before (its parameters without ``noise``) still carries the seeded generator's state, and a secure
    engine continued it. A secure engine now refuses any persisted snapshot that carries generator state."""
    import json

    from streamdp.engine import state_codec

    tree = state_codec.decode(_snapshot(7))
    params = json.loads(tree["parameters"])
    params.pop("noise")  # as written before the parameter existed
    tree["parameters"] = json.dumps(params, sort_keys=True, separators=(",", ":"))
    assert tree["rng"] is not None
    prod = _engine(None)
    with pytest.raises(ParametersChanged, match="written in test mode"):
        prod.restore_tree(tree)
    seeded_key = unsafe_seeded_generator(7).bit_generator.state["state"]["keysetup"]
    assert not np.array_equal(prod.rng.bit_generator.state["state"]["keysetup"], seeded_key)


def test_the_own_retry_snapshot_of_a_secure_engine_still_restores_its_generator():
    eng = _engine(None)
    snap = eng.snapshot(include_rng=True)
    with pytest.raises(ParametersChanged):
        _engine(None).restore(snap)  # a persisted one would be refused …
    other = _engine(None)
    other.restore(snap, own_retry=True)  # … close_due's own retry restores it (same noise on the retry)
    a, b = other.rng.bit_generator.state["state"], eng.rng.bit_generator.state["state"]
    assert all(np.array_equal(a[k], b[k]) for k in a)
