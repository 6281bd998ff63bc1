"""Rogers (unknown-domain) Alg. 4 / Thm 10, pay-what-you-get: k(i) = min(k, k* − used), ⊥ counts, stops for good after k* items,
costs recomputed from the theorem, state round trip, and a Monte Carlo check of the ℓ*·δ term."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from streamdp.accounting.cost import Cost
from streamdp.mechanisms.pay_what_you_get import PayWhatYouGet, PayWhatYouGetExhausted
from streamdp.mechanisms.unknown_domain_gumbel import BOTTOM
from streamdp.noise.generator import unsafe_seeded_generator

EPS, DELTA = 0.8, 1e-6
BIG_IDS = np.arange(10)
BIG_COUNTS = np.arange(10) * 1000.0 + 5000.0  # far above T̃, ordered


def test_stops_after_k_star_items():
    rng = unsafe_seeded_generator(31)
    m = PayWhatYouGet(EPS, DELTA, k_star=5)
    assert m.reserve_cost(2).as_tuple() == pytest.approx(Cost.zcdp(2 * EPS**2 / 8, DELTA).as_tuple(), rel=1e-12)
    assert m.release(rng, BIG_IDS, BIG_COUNTS, k=2, kbar=4) == [9, 8]
    assert (m.used, m.calls, m.remaining) == (2, 1, 3)
    assert m.last_cost.as_tuple() == pytest.approx(Cost.zcdp(2 * EPS**2 / 8, DELTA).as_tuple(), rel=1e-12)
    assert m.release(rng, BIG_IDS, BIG_COUNTS, k=2, kbar=4) == [9, 8]
    assert m.next_k(2) == 1  # k(3) = min(k, k* − used) = 1
    assert m.reserve_cost(2).as_tuple() == pytest.approx(Cost.zcdp(1 * EPS**2 / 8, DELTA).as_tuple(), rel=1e-12)
    assert m.release(rng, BIG_IDS, BIG_COUNTS, k=2, kbar=4) == [9]
    assert m.exhausted and m.used == 5 and m.calls == 3
    assert m.reserve_cost(2).is_zero()
    with pytest.raises(PayWhatYouGetExhausted):
        m.release(rng, BIG_IDS, BIG_COUNTS, k=2, kbar=4)
    assert m.calls == 3  # a refused call is not a call
    # Thm 10: ℓ*·δ-approximate k*·ε²/8-zCDP; settled costs add up to used·ε²/8
    assert m.total_cost().as_tuple() == pytest.approx(Cost.zcdp(5 * EPS**2 / 8, 3 * DELTA).as_tuple(), rel=1e-12)
    assert m.realised_total_cost().zcdp_rho == pytest.approx(5 * EPS**2 / 8)


def test_bottom_counts_as_a_returned_item():
    rng = unsafe_seeded_generator(32)
    m = PayWhatYouGet(EPS, DELTA, k_star=3)
    # an empty histogram: every call returns [⊥] and pays for one item
    for i in range(3):
        assert m.release(rng, [], [], k=5, kbar=5) == [BOTTOM]
        assert m.used == i + 1
        assert m.last_cost.as_tuple() == pytest.approx(Cost.zcdp(EPS**2 / 8, DELTA).as_tuple(), rel=1e-12)
    assert m.exhausted
    # one real item and k = 3: [item, ⊥] pays for 2, not 3 (pay what you get)
    m = PayWhatYouGet(EPS, DELTA, k_star=10)
    assert m.release(rng, ["a"], [10_000], k=3, kbar=3) == ["a", BOTTOM]
    assert m.used == 2 and m.last_cost.zcdp_rho == pytest.approx(2 * EPS**2 / 8)
    assert m.reserve_cost(3).zcdp_rho == pytest.approx(3 * EPS**2 / 8)


def test_state_round_trip_and_validation():
    rng = unsafe_seeded_generator(33)
    m = PayWhatYouGet(EPS, DELTA, k_star=4)
    m.release(rng, BIG_IDS, BIG_COUNTS, k=3, kbar=3)
    r = PayWhatYouGet.from_state(EPS, DELTA, m.state())
    assert r.state() == m.state() == {"k_star": 4, "used": 3, "calls": 1}
    assert r.next_k(3) == 1
    with pytest.raises(ValueError, match="used"):
        PayWhatYouGet.from_state(EPS, DELTA, {"k_star": 2, "used": 3, "calls": 1})
    with pytest.raises(ValueError, match="kbar"):
        m.release(rng, BIG_IDS, BIG_COUNTS, k=3, kbar=0)
    with pytest.raises(ValueError, match="k_star"):
        PayWhatYouGet(EPS, DELTA, k_star=0)


@pytest.mark.statistical
def test_union_over_calls_is_at_most_l_star_delta():
    """ℓ* = 3 calls on {x: 1} (a single user's item), k = k̄ = 1: each call releases x w.p. δ/(1+δ);
    Pr[x ever released] = 1 − (1 − δ/(1+δ))³ ≤ ℓ*·δ (Thm 10 proof, union bound)."""
    rng = unsafe_seeded_generator(34)
    delta, n = 0.03, 6000
    hits = 0
    for _ in range(n):
        m = PayWhatYouGet(1.0, delta, k_star=3)
        seen = False
        while not m.exhausted:
            seen |= "x" in m.release(rng, ["x"], [1], k=1, kbar=1)
        assert m.calls == 3
        hits += seen
    exact = 1 - (1 - delta / (1 + delta)) ** 3
    bound = 3 * delta
    assert exact <= bound
    assert stats.binom.isf(1e-6, n, bound) < stats.binom.ppf(1e-6, n, 2 * bound)
    assert stats.binomtest(hits, n, bound, alternative="greater").pvalue > 1e-6
    assert stats.binomtest(hits, n, exact).pvalue > 1e-6
    assert math.isclose(PayWhatYouGet(1.0, delta, 3).call_cost(1).zcdp_rho, 1 / 8)
