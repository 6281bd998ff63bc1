"""``ExponentialMechanism.select_ranked`` returns its k indices RANKED (peeling order), for any k.

The χ² peeling test in test_basic_mechanisms.py uses k = 2 of 4 scores, where ``np.argpartition`` happens to
return the top k already sorted, so dropping the explicit sort went unseen (mutation audit). numpy promises no
order for ``argpartition``; at 100,000 scores and k = 1,000 it returns them unsorted (measured), so this test
fails without the sort.

Known answer by hand: scores 100·i are 100 apart while the Gumbel noise has scale β = Δ/ε = 1 (ε = 1, Δ = 1), so
the ranking is the scores' order except with probability ≤ n·P(G₁ − G₂ > 100) = n / (1 + e¹⁰⁰) (the difference
of two Gumbel(β) variables is logistic with scale β): the top k are n−1, n−2, …, n−k in that order.
"""

import numpy as np

from streamdp.mechanisms.exponential import ExponentialMechanism
from streamdp.noise.generator import unsafe_seeded_generator


def test_select_ranked_is_in_rank_order_at_large_k():
    n, k = 100_000, 1_000
    rng = unsafe_seeded_generator(23)
    perm = unsafe_seeded_generator(24).permutation(n)  # the scores in no particular order in the array
    scores = np.empty(n)
    scores[perm] = 100.0 * np.arange(n)
    got = ExponentialMechanism(1.0).select_ranked(rng, scores, k)
    assert got.tolist() == perm[n - 1:n - k - 1:-1].tolist()


def test_select_ranked_with_k_equal_to_size_ranks_everything():
    rng = unsafe_seeded_generator(25)
    scores = 100.0 * np.array([3, 0, 4, 1, 2])
    assert ExponentialMechanism(1.0).select_ranked(rng, scores, 5).tolist() == [2, 0, 4, 3, 1]
