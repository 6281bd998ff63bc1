import numpy as np
import pytest
from scipy import stats

from streamdp.bounding.contribution import ContributionBounder
from streamdp.noise.generator import unsafe_seeded_generator


def test_delta0_keeps_at_most_delta0_distinct_items_per_user():
    b = ContributionBounder(max_items_per_window=3, max_per_item=1)
    users = np.array([0] * 10 + [1] * 2 + [2] * 5)
    items = np.array(list(range(10)) + [0, 0] + [5, 5, 6, 7, 8])  # user 1 repeats item 0; user 2 has 4 distinct
    w = b.bound(users, items, unsafe_seeded_generator(1))
    per_user = np.bincount(w.user_ids, minlength=3)
    assert per_user.tolist() == [3, 1, 3]
    assert len(set(zip(w.user_ids.tolist(), w.item_ids.tolist()))) == w.user_ids.size  # distinct pairs
    assert w.first.all()
    assert w.dropped_pairs == (10 - 3) + (4 - 3)


def test_subset_is_uniform():
    """A user with 5 items and Δ0 = 2 keeps each item with probability 2/5 (χ², p = 1e-6)."""
    b = ContributionBounder(2, 1)
    rng = unsafe_seeded_generator(7)
    counts = np.zeros(5)
    n = 4000
    for _ in range(n):
        w = b.bound(np.zeros(5, dtype=np.int64), np.arange(5), rng)
        counts += np.bincount(w.item_ids, minlength=5)
    assert counts.sum() == 2 * n
    p = stats.chisquare(counts, np.full(5, 2 * n / 5)).pvalue
    assert p > 1e-6


def test_cap_over_horizon_and_first_flag():
    b = ContributionBounder(max_items_per_window=10, max_per_item=2)
    rng = unsafe_seeded_generator(0)
    u, i = np.array([0, 0, 1]), np.array([5, 6, 5])
    w1 = b.bound(u, i, rng)
    assert w1.first.tolist() == [True, True, True]
    b.commit(w1.user_ids, w1.item_ids)
    w2 = b.bound(u, i, rng)
    assert w2.user_ids.size == 3 and not w2.first.any()  # second contribution: free
    b.commit(w2.user_ids, w2.item_ids)
    w3 = b.bound(np.array([0, 0, 1, 2]), np.array([5, 7, 5, 5]), rng)
    # (0,5) and (1,5) are at C = 2: dropped; (0,7) and (2,5) are first contributions
    assert sorted(zip(w3.user_ids.tolist(), w3.item_ids.tolist())) == [(0, 7), (2, 5)]
    assert w3.first.all()
    b.reset()
    assert b.bound(u, i, rng).first.all()


def test_uncommitted_pairs_are_not_counted():
    b = ContributionBounder(4, 1)
    rng = unsafe_seeded_generator(0)
    b.bound(np.array([0]), np.array([1]), rng)  # never committed (e.g. the user was halted)
    assert b.bound(np.array([0]), np.array([1]), rng).first.all()


def test_state_round_trip():
    b = ContributionBounder(4, 3)
    b.commit(np.array([1, 2, 2]), np.array([9, 9, 8]))
    b2 = ContributionBounder.from_state(b.state())
    assert b2.n_pairs == 3
    w = b2.bound(np.array([2]), np.array([9]), unsafe_seeded_generator(0))
    assert not w.first.any()


def test_bad_parameters():
    with pytest.raises(ValueError):
        ContributionBounder(0)
    with pytest.raises(ValueError):
        ContributionBounder(1, 0)


def test_state_is_an_append_only_commit_log():
    """The snapshot is the epoch's commit log: each later state extends the earlier one (checkpoints append),
    a reset starts a new log, and loading it gives the very counters (counts = occurrences, C respected)."""
    from streamdp.engine.append_log import AppendLog

    b = ContributionBounder(3, 2)
    rng = unsafe_seeded_generator(4)
    g = np.random.default_rng(9)
    seen = [b.state()["log"]]
    for _ in range(12):
        users, items = g.integers(0, 40, 60), g.integers(0, 15, 60)
        w = b.bound(users, items, rng)
        b.commit_bounded(w, g.random(w.user_ids.size) < 0.7)
        log = b.state()["log"]
        assert isinstance(log, AppendLog) and log.startswith(seen[-1]) and len(log) % 8 == 0
        seen.append(log)
        back = ContributionBounder.from_state(b.state())
        for k in ("keys", "counts"):
            np.testing.assert_array_equal(back.counters()[k], b.counters()[k])
        assert back.state() == b.state()
    assert int(b.counters()["counts"].max()) == 2  # some pair reached C
    b.reset()
    assert b.state()["log"] == b""
    with pytest.raises(ValueError, match="above C"):
        ContributionBounder.from_state({"delta0": 3, "cap": 1, "log": np.array([5, 5], dtype="<i8").tobytes()})


def test_version_1_state_loads():
    """Snapshots written before the commit log (sorted keys + counts) still load, to the same counters."""
    b = ContributionBounder(4, 3)
    b.commit(np.array([1, 2, 2]), np.array([9, 9, 8]))
    b.commit(np.array([2]), np.array([9]))
    old = {"delta0": 4, "cap": 3, **b.counters()}
    b2 = ContributionBounder.from_state(old)
    for k in ("keys", "counts"):
        np.testing.assert_array_equal(b2.counters()[k], b.counters()[k])
    assert dict(zip(b2.counters()["keys"].tolist(), b2.counters()["counts"].tolist()))[(2 << 32) | 9] == 2
