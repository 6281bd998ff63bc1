"""continual_counts charges the tree nodes its estimator reads (release rule 3): the prefix nodes for ``plain``,
every completed node for Honaker's ``optimal`` (docs/query_counts_top_k.md, "Cost per user")."""

from __future__ import annotations

import pytest

from streamdp.config.kinds import build_query


@pytest.mark.parametrize("estimator, d2", [("plain", 29), ("optimal", 30)])
def test_the_item_cost_counts_the_nodes_the_estimator_reads(estimator, d2):
    # L = 128, C = 2: windows 1 and 2 share a node at levels 1..7 (4 each); at level 0 plain reads window 1's node
    # only (window 2's is a right child), Honaker reads both: 1 + 28 = 29 against 2 + 28 = 30
    sigma = 2.0
    q = build_query("query[0]", {"id": "c", "kind": "continual_counts", "sigma": sigma, "max_per_item": 2,
                                 "estimator": estimator}, horizon=128)
    assert q.item_cost.zcdp_rho == pytest.approx(d2 / (2 * sigma**2), rel=1e-15)
    assert q.tree.cost() == q.item_cost
    assert q.describe()["rho_per_item"] == pytest.approx(d2 / 8)
    assert q.parameters()["release_rule"] == 3
