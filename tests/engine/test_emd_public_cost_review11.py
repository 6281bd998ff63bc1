"""The published cost of an emd_frequency release bounds what ANY user of it can be charged, in every component
(privacy review of 2026-11-23, F1: with delta > 0 the charged δ is not monotone in the item count m, and the cost
at max_items understated a smaller user's δ by 12 %)."""

import numpy as np

from streamdp.accounting.cost import DELTA_SCALE
from streamdp.engine.queries.emd import EMDFrequency


def _clusters(c, g):
    return {f"c{i}": [f"i{i}_{j}" for j in range(g)] for i in range(c)}


def test_published_cost_bounds_every_item_count_componentwise():
    q = EMDFrequency("f", alpha0=0.02, clusters=_clusters(5, 4), gamma=0.5, max_items=5000, delta=1e-4)
    pub = q.public_cost(None).to_fixed()
    costs = np.array([q.cost(m).to_fixed() for m in range(1, q.max_items + 1)])
    assert (costs <= np.asarray(pub)).all()
    # the δ the old bound published (at max_items) is below what a user with fewer items is charged
    assert costs[:, 5].max() > costs[-1, 5]
    assert q.public_cost(None).emd_delta == costs[:, 5].max() / DELTA_SCALE
    # and the bound is tight: each component is reached by some item count
    assert (costs.max(axis=0) == np.asarray(pub)).all()


def test_composition_only_publishes_the_cost_at_max_items():
    q = EMDFrequency("f", alpha0=0.1, clusters=_clusters(3, 2), gamma=0.5, max_items=8, delta=0.0)
    assert list(q.public_cost(None).to_fixed()) == list(q.cost(8).to_fixed())
    assert q.public_cost(None).emd_delta == 0.0
