"""Unknown-domain binary mechanism (Rogers (unknown-domain) §4.3 Thm 11, docs/contract.md §3): known-answer parameters recomputed here from
the formulas, validation, sticky selection, noise kept (never redrawn), snapshots and range counts.
Statistical tests of the noise and the Monte Carlo privacy check are in test_binary_tree_stats.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from streamdp.accounting.cost import Cost
from streamdp.mechanisms.binary_tree import (
    HorizonExceeded,
    UnknownDomainBinaryTree,
    binary_tree_cost,
    binary_tree_threshold,
    levels_for_horizon,
    max_prefix_popcount,
    node_sensitivity_sq,
)
from streamdp.noise.generator import unsafe_seeded_generator

CONFIGS = [("gaussian", "plain"), ("gaussian", "optimal"), ("discrete_gaussian", "plain")]


def bits(t):
    return [j for j in range(t.bit_length()) if t >> j & 1]


def ctz(t):
    return (t & -t).bit_length() - 1


# ---------------------------------------------------------------------------------------------- known answers
@pytest.mark.parametrize("L", [1, 2, 3, 4, 5, 7, 8, 9, 100, 1023, 1024, 1025, 4095, 4096, 4097, 10**6])
def test_levels(L):
    assert levels_for_horizon(L) == math.ceil(math.log2(L + 1))


@pytest.mark.parametrize("sigma, L, delta, C", [(3.5, 4096, 1e-9, 1), (1.0, 10, 0.05, 2), (20.0, 100, 1e-6, 3)])
def test_cost_known_answer(sigma, L, delta, C):
    levels = math.ceil(math.log2(L + 1))
    cost = binary_tree_cost(sigma, L, delta, C)
    assert isinstance(cost, Cost)
    # exact Δ2² (tests/mechanisms/test_tree_sensitivity.py recomputes it by enumeration): levels for C = 1,
    # below C²·levels for C > 1 — L = 10, C = 2: 13 (not 16); L = 100, C = 3: windows 1..3 → level 0: {1}, {3} (1 each; {2} is a right child), level 1:
    # (0, 2] (2²), levels 2..6: 3² each → 2 + 4 + 45 = 51
    exact = {1: levels, 2: 13, 3: 51}[C]
    assert node_sensitivity_sq(L, C) == exact
    assert cost.zcdp_rho == pytest.approx(exact / (2 * sigma**2), rel=1e-15)
    assert cost.zcdp_delta == delta
    assert cost.cgp_rho == cost.cgp_delta == cost.emd_alpha == cost.emd_delta == 0


def test_cost_matches_thm11_with_one_item():
    # Rogers (unknown-domain) Thm 11: Δ0·⌈log2(L+1)⌉·ε²/2 with σ = 1/ε; one item (Δ0 = 1), C = 1
    eps, L = 0.3, 365
    assert binary_tree_cost(1 / eps, L, 1e-7).zcdp_rho == pytest.approx(math.ceil(math.log2(L + 1)) * eps**2 / 2)


@pytest.mark.parametrize("sigma, L, delta, C, rel", [(3.5, 4096, 1e-6, 1, 1e-7), (1.0, 10, 0.05, 2, 1e-12),
                                                     (20.0, 100, 1e-3, 3, 1e-10)])
def test_threshold_gaussian_known_answer(sigma, L, delta, C, rel):
    p = max(bin(t).count("1") for t in range(1, L + 1))  # the most nodes a released count sums
    expected = C + sigma * math.sqrt(p) * norm.ppf(1 - delta / L)
    assert binary_tree_threshold(sigma, L, delta, C) == pytest.approx(expected, rel=rel)
    assert binary_tree_threshold(sigma, L, delta, C, "gaussian") == pytest.approx(expected, rel=rel)


@pytest.mark.parametrize("sigma, L, delta, C", [(3.5, 4096, 1e-9, 1), (1.0, 10, 0.05, 2), (0.7, 1, 0.2, 1)])
def test_threshold_discrete_known_answer(sigma, L, delta, C):
    p = max(bin(t).count("1") for t in range(1, L + 1))
    expected = C + sigma * math.sqrt(2 * p * math.log(L / delta))
    assert binary_tree_threshold(sigma, L, delta, C, "discrete_gaussian") == pytest.approx(expected, rel=1e-14)


def test_tree_exposes_its_parameters():
    tr = UnknownDomainBinaryTree(100, 2.0, 1e-6, cap=2)
    assert tr.levels == 7
    assert tr.threshold == binary_tree_threshold(2.0, 100, 1e-6, 2)
    assert tr.cost() == binary_tree_cost(2.0, 100, 1e-6, 2)
    assert tr.t == 0 and tr.n_items == 0 and tr.selected_ids.size == 0


# ------------------------------------------------------------------------------------------------- validation
@pytest.mark.parametrize("kwargs, name", [
    (dict(horizon=0), "horizon"), (dict(horizon=2.5), "horizon"), (dict(horizon=True), "horizon"),
    (dict(sigma=0.0), "sigma"), (dict(sigma=float("nan")), "sigma"), (dict(sigma=-1), "sigma"),
    (dict(delta_item=0.0), "delta_item"), (dict(delta_item=1.0), "delta_item"),
    (dict(horizon=1, delta_item=0.6), "delta_item"), (dict(cap=0), "cap"), (dict(noise="laplace"), "noise"),
    (dict(estimator="best"), "estimator"), (dict(noise="discrete_gaussian", estimator="optimal"), "estimator"),
    (dict(keep_history="yes"), "keep_history"),
])
def test_bad_parameters(kwargs, name):
    args = dict(horizon=16, sigma=1.0, delta_item=1e-3)
    args.update(kwargs)
    with pytest.raises(ValueError, match=name):
        UnknownDomainBinaryTree(**args)


def test_bad_parameters_in_functions():
    with pytest.raises(ValueError, match="sigma"):
        binary_tree_cost(0, 16, 1e-3)
    with pytest.raises(ValueError, match="cap"):
        binary_tree_threshold(1, 16, 1e-3, cap=-1)
    with pytest.raises(ValueError, match="noise"):
        binary_tree_threshold(1, 16, 1e-3, 1, "uniform")
    with pytest.raises(ValueError, match="horizon"):
        levels_for_horizon(0)


def test_bad_batches():
    tr = UnknownDomainBinaryTree(8, 1.0, 1e-3)
    rng = unsafe_seeded_generator(0)
    with pytest.raises(ValueError, match="item_ids"):
        tr.step(np.array([-1]), np.array([1]), rng)
    with pytest.raises(ValueError, match="item_ids"):
        tr.step(np.array([1.5]), np.array([1]), rng)
    with pytest.raises(ValueError, match="item_ids"):
        tr.step(np.array([[1]]), np.array([[1]]), rng)
    with pytest.raises(ValueError, match="increments"):
        tr.step(np.array([1, 2]), np.array([1]), rng)
    with pytest.raises(ValueError, match="increments"):
        tr.step(np.array([1]), np.array([-1]), rng)
    with pytest.raises(ValueError, match="increments"):
        tr.step(np.array([1]), np.array([0.5]), rng)
    with pytest.raises(ValueError, match="item_ids"):
        tr.step(np.array([2**40]), np.array([1]), rng)
    assert tr.t == 0  # nothing was applied


def test_horizon_and_reset():
    tr = UnknownDomainBinaryTree(4, 1.0, 1e-3)
    rng = unsafe_seeded_generator(1)
    for t in range(1, 5):
        assert tr.step(np.array([3]), np.array([1]), rng).t == t
    with pytest.raises(HorizonExceeded):
        tr.step(np.array([3]), np.array([1]), rng)
    tr.reset()
    assert tr.t == 0 and tr.n_items == 0
    assert tr.step([], [], rng).t == 1


def test_empty_windows_and_duplicate_ids_add_up():
    tr = UnknownDomainBinaryTree(8, 1e-3, 0.01, noise="discrete_gaussian")  # tiny σ: N_Z(0, 1e-6) is 0 w.p. ≈1
    rng = unsafe_seeded_generator(2)
    tr.step(np.array([5, 2, 5, 9]), np.array([1, 4, 2, 1]), rng)  # unsorted, repeated id 5
    tr.step(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), rng)
    rel = tr.step(np.array([9, 2]), np.array([1, 1]), rng)
    assert list(tr.item_ids) == [2, 5, 9]  # rows: first-seen window, ascending id within it
    assert dict(zip(rel.selected_ids.tolist(), rel.counts.tolist())) == {2: 5, 5: 3, 9: 2}
    assert rel.counts.dtype == np.int64


# ---------------------------------------------------------------------------------------------- selection
@pytest.mark.parametrize("noise, estimator", CONFIGS)
def test_selection_is_sticky_and_strict(noise, estimator):
    """Items sitting at the threshold: selected ones stay published when their noisy count falls back below T."""
    L = 32
    tr = UnknownDomainBinaryTree(L, 1.0, 0.01, noise=noise, estimator=estimator)
    rng = unsafe_seeded_generator(3)
    ids = np.arange(2000)
    # true count ≈ T: selection flips on noise alone
    tr.step(ids, np.full(2000, math.floor(tr.threshold)), rng)
    prev = set(tr.selected_ids.tolist())
    assert 0 < len(prev) < 2000
    published_below = 0
    for t in range(2, L + 1):
        rel = tr.step([], [], rng)
        cur = rel.selected_ids.tolist()
        assert len(cur) == len(set(cur))
        assert prev <= set(cur)  # sticky
        assert set(rel.new_ids.tolist()) == set(cur) - prev  # new = newly selected
        noisy = tr.noisy_running_counts(rel.selected_ids)
        new_noisy = tr.noisy_running_counts(rel.new_ids)
        assert np.all(new_noisy > tr.threshold)  # strict crossing
        published_below += int(np.sum(noisy <= tr.threshold))
        # the released value is the (rounded) noisy running count
        if noise == "gaussian":
            assert np.array_equal(rel.counts, np.rint(noisy).astype(np.int64))
        else:
            assert np.array_equal(rel.counts, noisy)
        unselected = np.setdiff1d(ids, rel.selected_ids)
        assert np.all(tr.noisy_running_counts(unselected) <= tr.threshold)
        prev = set(cur)
    assert published_below > 100  # stickiness was exercised


# ---------------------------------------------------------------------------------------- noise is kept
@pytest.mark.parametrize("noise, estimator", CONFIGS)
@pytest.mark.parametrize("keep_history", [False, True])
def test_node_noise_never_redrawn(noise, estimator, keep_history):
    """Between windows t and t+1 every decomposition node that stays in use (levels j ∈ bits(t), j > ctz(t+1))
    keeps its exact noise value; levels that left the decomposition are cleared; new items do not disturb old ones."""
    L = 40
    tr = UnknownDomainBinaryTree(L, 2.0, 0.01, noise=noise, estimator=estimator, keep_history=keep_history)
    rng = unsafe_seeded_generator(4)
    prev = None
    for t in range(1, L + 1):
        new_ids = np.arange(10 * t, 10 * t + 5)  # 5 new items each window
        old_ids = np.arange(10, 10 * t, 7)
        ids = np.concatenate([old_ids, new_ids])
        tr.step(ids, np.ones(ids.size, dtype=np.int64), rng)
        cur = tr._noise[:, : tr.n_items].copy()
        for j in range(tr.levels):
            if j not in bits(t):
                assert np.all(cur[j] == 0)
        if prev is not None:
            n_old = prev.shape[1]
            for j in bits(t - 1):
                if j > ctz(t):
                    assert np.array_equal(cur[j, :n_old], prev[j]), (t, j)
        prev = cur


@pytest.mark.parametrize("noise, estimator", CONFIGS)
def test_history_reproduces_every_past_release(noise, estimator):
    """With keep_history, range_count(ids, 1, u) at the end of the horizon equals the release at window u for every
    u (the prefix nodes used at u are the stored ones, never redrawn) — also for items first seen late."""
    L = 24
    tr = UnknownDomainBinaryTree(L, 1.0, 0.2, noise=noise, estimator=estimator, keep_history=True)
    rng = unsafe_seeded_generator(5)
    releases = {}
    for t in range(1, L + 1):
        ids = np.arange(0, 30 + 3 * t)  # items appear over time, all with large counts (selected quickly)
        rel = tr.step(ids, np.full(ids.size, 5), rng)
        releases[t] = rel
    for u, rel in releases.items():
        assert np.array_equal(tr.range_count(rel.selected_ids, 1, u), rel.counts), u


@pytest.mark.parametrize("noise, estimator", CONFIGS)
def test_range_counts(noise, estimator):
    L = 21
    tr = UnknownDomainBinaryTree(L, 1.5, 0.2, noise=noise, estimator=estimator, keep_history=True)
    rng = unsafe_seeded_generator(6)
    data = rng.integers(0, 4, size=(L, 50))
    for t in range(1, L + 1):
        tr.step(np.arange(50), data[t - 1], rng)
    ids = tr.selected_ids
    assert ids.size > 10
    rows = tr._rows_of(ids)
    for s, t in [(1, 21), (3, 9), (8, 8), (9, 16), (5, 21), (17, 20)]:
        noisy = tr._range_noisy(rows, s, t)
        full = tr._range_noisy(rows, 1, t) - (tr._range_noisy(rows, 1, s - 1) if s > 1 else 0)
        assert np.allclose(noisy, full, atol=1e-9)
        out = tr.range_count(ids, s, t)
        assert out.dtype == np.int64
        truth = data[s - 1: t, ids].sum(axis=0)
        assert np.all(np.abs(out - truth) < 12 * 1.5 * math.sqrt(2 * tr.levels))
    with pytest.raises(ValueError, match="s ≤ t"):
        tr.range_count(ids, 5, 4)
    with pytest.raises(ValueError, match="s ≤ t"):
        tr.range_count(ids, 1, 22)
    with pytest.raises(ValueError, match="not seen"):
        tr.range_count(np.array([999]), 1, 2)


def test_range_count_refuses_unselected_and_needs_history():
    rng = unsafe_seeded_generator(7)
    tr = UnknownDomainBinaryTree(8, 1.0, 1e-6, keep_history=True)
    tr.step(np.array([1]), np.array([1]), rng)
    assert tr.selected_ids.size == 0
    with pytest.raises(ValueError, match="unselected"):
        tr.range_count(np.array([1]), 1, 1)
    assert tr.range_count(np.array([1]), 1, 1, unsafe_include_unselected=True).shape == (1,)
    tr2 = UnknownDomainBinaryTree(8, 1.0, 1e-6)
    tr2.step(np.array([1]), np.array([1]), rng)
    with pytest.raises(ValueError, match="keep_history"):
        tr2.range_count(np.array([1]), 1, 1)


# -------------------------------------------------------------------------------------------------- snapshots
@pytest.mark.parametrize("noise, estimator", CONFIGS)
@pytest.mark.parametrize("keep_history", [False, True])
def test_snapshot_round_trip(noise, estimator, keep_history):
    L, cut = 37, 13
    a = UnknownDomainBinaryTree(L, 1.3, 0.05, cap=2, noise=noise, estimator=estimator, keep_history=keep_history)
    rng = unsafe_seeded_generator(8)
    data = unsafe_seeded_generator(9)
    batches = []
    for t in range(L):
        ids = np.unique(data.integers(0, 60 + 10 * t, size=40))
        batches.append((ids, data.integers(0, 3, size=ids.size)))
    for t in range(cut):
        a.step(*batches[t], rng)
    blob = a.to_bytes()
    b = UnknownDomainBinaryTree.from_bytes(blob)
    assert b.to_bytes() == blob
    assert (b.t, b.n_items, b.threshold, b.levels) == (a.t, a.n_items, a.threshold, a.levels)
    assert np.array_equal(b.selected_ids, a.selected_ids)
    ra, rb = unsafe_seeded_generator(10), unsafe_seeded_generator(10)
    for t in range(cut, L):
        x, y = a.step(*batches[t], ra), b.step(*batches[t], rb)
        assert x.t == y.t
        assert np.array_equal(x.selected_ids, y.selected_ids)
        assert np.array_equal(x.counts, y.counts)
        assert np.array_equal(x.new_ids, y.new_ids)
    assert a.to_bytes() == b.to_bytes()
    assert a.selected_ids.size > 0


def test_snapshot_rejects_garbage():
    tr = UnknownDomainBinaryTree(8, 1.0, 1e-3)
    tr.step(np.array([1, 2]), np.array([1, 1]), unsafe_seeded_generator(0))
    blob = tr.to_bytes()
    for bad in (b"nope", blob[:-3], blob + b"\0", blob[:10]):
        with pytest.raises(ValueError):
            UnknownDomainBinaryTree.from_bytes(bad)


def test_snapshot_of_empty_tree():
    tr = UnknownDomainBinaryTree(8, 1.0, 1e-3)
    b = UnknownDomainBinaryTree.from_bytes(tr.to_bytes())
    assert b.t == 0 and b.n_items == 0
    b.step(np.array([4]), np.array([1]), unsafe_seeded_generator(0))
    assert b.n_items == 1


def test_nbytes_is_small_per_item():
    tr = UnknownDomainBinaryTree(4096, 10.0, 1e-9)
    tr.step(np.arange(100_000), np.ones(100_000, dtype=np.int64), unsafe_seeded_generator(0))
    assert tr.nbytes / 100_000 <= 256
