"""The binary-tree selection threshold T by noise kind, as continual_counts publishes it, and the δ_item/L < 1/2
boundary (Rogers (unknown-domain) §4.3 Thm 11; docs/contract.md §3 "Continual counts" and "Noise"; binary_tree.py module doc).

    gaussian:           T = C + σ·√P·Φ⁻¹(1 − δ_item/L)
    discrete_gaussian:  T = C + σ·√(2·P·ln(L/δ_item))       (σ²-sub-Gaussian sum of ≤ P nodes)

with P = max_{t ≤ L} popcount(t) (release rule 2; it was levels + 1 and levels). Values below are worked out by
hand, not read from the code.
"""

from __future__ import annotations

import math

import orjson
import pytest

from streamdp.accounting.cost import Cost, budget_vector
from streamdp.engine.engine import EngineConfig, ReleaseEngine
from streamdp.engine.pipeline import EmbeddedPipeline
from streamdp.engine.queries.continual_counts import ContinualCounts
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.mechanisms.binary_tree import UnknownDomainBinaryTree, binary_tree_cost, binary_tree_threshold
from streamdp.outputs.sinks import ListSink

# σ = 2, L = 8, δ_item = 1e-3, C = 1: levels = ⌈log2 9⌉ = 4, P = popcount(7) = 3
# discrete: T = 1 + 2·√(2·3·ln 8000) = 1 + 2·√(6 · 8.987196820661973) = 1 + 2·7.343240… = 15.686481…
T_DISCRETE = 15.68648
# gaussian: T = 1 + 2·√3·Φ⁻¹(1 − 1.25·10⁻⁴) = 1 + 3.464102·3.662260… = 13.686441…
T_GAUSSIAN = 13.68644


@pytest.mark.parametrize("noise, expected", [("discrete_gaussian", T_DISCRETE), ("gaussian", T_GAUSSIAN)])
def test_continual_counts_publishes_the_threshold_of_its_noise_kind(noise, expected):
    """Guards continual_counts passing ``noise`` to binary_tree_threshold: the threshold it publishes (attribute,
    describe(), and every release record's values["threshold"]) is the one its tree selects with. Dropping the
    noise kind publishes the Gaussian 13.686 for a discrete-Gaussian tree that uses 15.686 (they differ by 2.0,
    far beyond the 1e-4 tolerance)."""
    assert abs(T_DISCRETE - T_GAUSSIAN) > 0.5
    q = ContinualCounts("c", sigma=2.0, horizon=8, delta_item=1e-3, noise=noise)
    assert q.tree.levels == 4
    assert q.tree.threshold == pytest.approx(expected, abs=1e-4)
    assert q.threshold == q.tree.threshold
    assert q.describe()["threshold"] == q.tree.threshold
    # through the engine (test mode, in-memory store, windows of 10 s): window 1's record carries T
    conf = EngineConfig(window_seconds=10.0, horizon=8, origin=0.0, unsafe_test_seed=11)
    e = ReleaseEngine(conf, [q], MemoryBudgetStore(budget_vector(Cost.zcdp(100.0, 1.0))))
    sink = ListSink()
    EmbeddedPipeline(e, [sink]).run([[orjson.dumps({"user": u, "ts": ts, "items": [i]})
                                      for u, ts, i in (("u", 1, "a"), ("late", 15, "z"))]])
    recs = sink.records
    assert recs[0].values["threshold"] == pytest.approx(expected, abs=1e-4)


def test_delta_item_over_horizon_of_one_half_is_refused():
    """Guards the documented δ_item/L < 1/2 (strict): the Gaussian threshold needs Φ⁻¹(1 − δ_item/L) > 0; at
    δ_item/L = 1/2 it is 0 and T = C. L = 1 is the only horizon where δ_item < 1 reaches 1/2, so δ_item = 0.5 must
    raise, in the tree and in both parameter functions. Positive control: δ_item = 0.49 (δ/L just below 1/2) is
    accepted, with T = 1 + 1·Φ⁻¹(0.51) > 1 (levels = ⌈log2 2⌉ = 1, P = popcount(1) = 1), so the refusal is the
    boundary check."""
    msg = r"delta_item/horizon must be < 1/2"
    with pytest.raises(ValueError, match=msg):
        UnknownDomainBinaryTree(horizon=1, sigma=1, delta_item=0.5)
    with pytest.raises(ValueError, match=msg):
        UnknownDomainBinaryTree(horizon=1, sigma=1, delta_item=0.5, noise="discrete_gaussian")
    with pytest.raises(ValueError, match=msg):
        binary_tree_threshold(1.0, 1, 0.5)
    with pytest.raises(ValueError, match=msg):
        binary_tree_cost(1.0, 1, 0.5)
    tree = UnknownDomainBinaryTree(horizon=1, sigma=1, delta_item=0.49)
    assert tree.levels == 1
    # Φ⁻¹(0.51) = 0.0250689…
    assert tree.threshold == pytest.approx(1 + 0.0250689, abs=1e-6)
