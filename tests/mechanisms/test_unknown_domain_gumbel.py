"""Rogers (unknown-domain) Alg. 3 (Thm 9), unknown-domain Gumbel top-k: threshold and costs recomputed from the theorem, ⊥ handling,
ranked output without counts, the peeling law of the order (χ² against exact exponential-mechanism
probabilities), and a Monte Carlo check that a count held by a single user crosses T̃ with probability ≤ δ."""

from __future__ import annotations

import itertools
import math
import pickle

import numpy as np
import pytest
from scipy import stats

from streamdp.accounting.cost import Cost
from streamdp.mechanisms.unknown_domain_gumbel import (
    BOTTOM,
    Bottom,
    UnknownDomainGumbel,
    gumbel_topk_cost,
    gumbel_topk_threshold,
)
from streamdp.noise.generator import unsafe_seeded_generator

P = 1e-6
N_TRIALS = 10_000


@pytest.mark.parametrize("eps,delta,k,kbar", [(1.0, 1e-6, 3, 10), (0.25, 1e-9, 1, 1), (2.0, 0.05, 5, 5)])
def test_threshold_and_costs_thm9(eps, delta, k, kbar):
    m = UnknownDomainGumbel(eps, delta, k, kbar)
    assert gumbel_topk_threshold(eps, delta, kbar) == pytest.approx(1 + math.log(kbar / delta) / eps)
    assert m.threshold == pytest.approx(1 + math.log(kbar / delta) / eps)
    assert m.beta == pytest.approx(1 / eps)
    expected = Cost.zcdp(rho=k * eps**2 / 8, delta=delta).as_tuple()
    assert m.cost().as_tuple() == pytest.approx(expected, rel=1e-12)
    assert gumbel_topk_cost(eps, delta, k).as_tuple() == pytest.approx(expected, rel=1e-12)
    for n in range(k + 1):  # pay-what-you-get view: |I|·ε²/8 (⊥ counts) and δ
        assert m.realised_cost(n).as_tuple() == pytest.approx(Cost.zcdp(rho=n * eps**2 / 8, delta=delta).as_tuple(),
                                                              rel=1e-12)
    with pytest.raises(ValueError, match="n_returned"):
        m.realised_cost(k + 1)


def test_bad_parameters():
    with pytest.raises(ValueError, match="k must be ≤ kbar"):
        UnknownDomainGumbel(1.0, 1e-6, 4, 3)
    with pytest.raises(ValueError, match="k must be"):
        UnknownDomainGumbel(1.0, 1e-6, 0, 3)
    with pytest.raises(ValueError, match="delta"):
        UnknownDomainGumbel(1.0, 1.5, 1, 3)
    with pytest.raises(ValueError, match="epsilon"):
        UnknownDomainGumbel(-1.0, 1e-6, 1, 3)


def test_bottom_singleton():
    assert Bottom() is BOTTOM
    assert pickle.loads(pickle.dumps(BOTTOM)) is BOTTOM
    assert repr(BOTTOM) == "⊥"
    assert BOTTOM != None  # noqa: E711 — ⊥ is not "no value"
    assert BOTTOM not in ["a", 0, None]


def test_ranked_ids_without_counts_and_bottom():
    rng = unsafe_seeded_generator(21)
    m = UnknownDomainGumbel(1.0, 1e-6, k=3, kbar=5)
    ids = np.array(["low", "top", "mid", "zero"])
    counts = np.array([100, 1000, 500, 0])
    # gaps ≫ Gumbel noise: only 3 real items exist (the zero count is not an item), k = 3, no ⊥
    assert m.release(rng, ids, counts) == ["top", "mid", "low"]
    assert all(isinstance(x, str) for x in m.release(rng, ids, counts))  # ids only: no counts, no noisy values
    # fewer than k items pass → ⊥ appended, |I| ≤ k
    assert m.release(rng, ["a"], [1000]) == ["a", BOTTOM]
    assert m.release(rng, [], []) == [BOTTOM]
    assert m.release(rng, ["a", "b"], [0, 0]) == [BOTTOM]
    # integer ids come back as Python ints
    assert m.release(rng, np.array([7, 3]), np.array([1000, 2000])) == [3, 7, BOTTOM]
    # more than k pass: exactly k, no ⊥
    out = m.release(rng, np.arange(5), np.array([1000, 2000, 3000, 4000, 5000]))
    assert out == [4, 3, 2]


def test_only_top_kbar_considered():
    rng = unsafe_seeded_generator(22)
    m = UnknownDomainGumbel(1.0, 1e-6, k=2, kbar=2)
    ids = np.arange(6)
    counts = np.array([1000, 990, 980, 970, 960, 950])
    for _ in range(200):
        out = m.release(rng, ids, counts)
        assert set(out) <= {0, 1, BOTTOM}


@pytest.mark.statistical
def test_order_frequencies_are_exponential_mechanism_peeling():
    """4 items far above T̃ (no threshold effect), k = 2: Pr[(i, j)] = w_i/W · w_j/(W − w_i), w = exp(ε c)."""
    rng = unsafe_seeded_generator(23)
    eps = 0.5
    counts = np.array([100.0, 101.0, 102.0, 103.0])
    m = UnknownDomainGumbel(eps, 1e-6, k=2, kbar=4)
    assert m.threshold + 0.0 < 100 - 40  # T̃ = T + 0 + Gumbel(2): never binding here
    w = np.exp(eps * counts)
    W = w.sum()
    pairs = list(itertools.permutations(range(4), 2))
    expected = np.array([w[i] / W * w[j] / (W - w[i]) for i, j in pairs])
    n = 20_000
    obs = dict.fromkeys(pairs, 0)
    for _ in range(n):
        i, j = m.release(rng, np.arange(4), counts)
        obs[(i, j)] += 1
    observed = np.array([obs[p] for p in pairs])
    assert stats.chisquare(observed, n * expected).pvalue > P
    # the same data reject the law of a wrong scale (the test has power)
    w_bad = np.exp(1.5 * eps * counts)
    bad = np.array([w_bad[i] / w_bad.sum() * w_bad[j] / (w_bad.sum() - w_bad[i]) for i, j in pairs])
    assert stats.chisquare(observed, n * bad).pvalue < P


def _assert_release_rate(hits, n, delta, exact):
    assert stats.binom.isf(P, n, delta) < stats.binom.ppf(P, n, 2 * delta)  # a 2× violation would be caught
    assert stats.binomtest(hits, n, delta, alternative="greater").pvalue > P, (hits, n, delta)
    assert exact <= delta
    assert stats.binomtest(hits, n, exact).pvalue > P, (hits, n, exact)


@pytest.mark.statistical
@pytest.mark.parametrize("kbar", [1, 4])
def test_single_user_item_crosses_noisy_threshold_with_prob_le_delta(kbar):
    """h' = common items (≤ k̄ − 1 of them, so c_(k̄+1) = 0), h adds one user's new item of count 1:
    released iff 1 + G_x > T + G_0, i.e. a Logistic(β) variable exceeds log(k̄/δ)/ε: Pr = δ/(k̄ + δ) ≤ δ."""
    rng = unsafe_seeded_generator(24 + kbar)
    eps, delta = 1.0, 0.1
    m = UnknownDomainGumbel(eps, delta, k=kbar, kbar=kbar)
    common = [f"c{j}" for j in range(kbar - 1)]
    ids = np.array(common + ["x"])
    counts = np.array([1000.0] * len(common) + [1.0])
    hits = sum("x" in m.release(rng, ids, counts) for _ in range(N_TRIALS))
    exact = 1.0 / (1.0 + math.exp((m.threshold - 1.0) / m.beta))
    assert exact == pytest.approx(delta / (kbar + delta), rel=1e-12)
    _assert_release_rate(hits, N_TRIALS, delta, exact)
