"""window_histogram (Rogers (unknown-domain) Alg. 1 / Thm 7 and Alg. 2 / Thm 8) through the engine with the in-memory store:
thresholds and costs against the paper's formulas written out here, the released noise's law, the single-holder
crossing probability δ/Δ0, the Δ0 subset, and a user at budget dropped."""

import math

import numpy as np
import pytest
from scipy import stats

from streamdp.accounting.cost import Cost, budget_vector
from streamdp.config.kinds import ConfigError, build_query
from streamdp.engine.query import WindowData
from streamdp.engine.queries.window_histogram import WindowHistogram
from streamdp.noise.generator import unsafe_seeded_generator

from engine_helpers import engine, ev, run


def wh(**kw):
    return WindowHistogram("h", **kw)


# ------------------------------------------------------------------------------------------ known answers
def test_thresholds_are_001_thm7_and_thm8():
    eps, delta, d0 = 0.5, 1e-7, 2
    # Thm 7, Gaussian: T = Δ∞ + (Δ∞/ε)·Φ⁻¹(1 − δ/Δ0), Δ∞ = 1; Φ⁻¹(1 − 5·10⁻⁸) = 5.326723886…
    assert stats.norm.isf(delta / d0) == pytest.approx(5.326723886, abs=1e-8)
    assert wh(epsilon=eps, delta=delta, max_items_per_window=d0).threshold == pytest.approx(
        1 + 2 * 5.326723886, abs=1e-7)
    # Thm 7, Laplace: T = Δ∞ + (Δ∞/ε)·log(Δ0/(2δ)) = 1 + 2·log(10⁷)
    assert wh(epsilon=eps, delta=delta, max_items_per_window=d0, noise="laplace").threshold == pytest.approx(
        1 + 2 * 7 * math.log(10), rel=1e-12)
    # Thm 8: T = Δ∞ + (√2·Δ∞/ε)·Φ⁻¹(1 − δ/Δ0)
    assert wh(epsilon=eps, delta=delta, max_items_per_window=d0, algorithm="top_kbar").threshold == pytest.approx(
        1 + math.sqrt(2) * 2 * 5.326723886, abs=1e-7)


@pytest.mark.parametrize("algorithm", ["threshold", "top_kbar"])
def test_each_present_user_pays_the_thm7_thm8_cost(algorithm):
    """threshold: m_u·ε²/2 and m_u·δ/Δ0 for the user's m_u ≤ Δ0 kept items; top_kbar: Δ0·ε²/2 and δ each."""
    eps, delta, d0 = 0.5, 1e-3, 2
    e, store = engine([wh(epsilon=eps, delta=delta, max_items_per_window=d0, algorithm=algorithm)],
                      Cost.zcdp(100.0, 1.0))
    run(e, [ev("one", 1, ["a"]), ev("two", 2, ["a", "b"]), ev("two", 3, ["a"]),  # 2 distinct items
            ev("four", 4, ["a", "b", "c", "d"]),  # capped to Δ0 = 2
            ev("none", 5, []),  # no item: not in the histogram, pays nothing
            ev("late", 15, ["z"])])  # closes window 1
    per_item = (eps**2 / 2, delta / d0)  # ρ, δ per kept item (module doc: Thm 4 / Thm 7 per count)
    full = (d0 * eps**2 / 2, delta)  # Rogers (unknown-domain) Thm 7 / Thm 8
    for user, m in (("one", 1), ("two", 2), ("four", 2)):
        c = store.get_user(user).spent_cost()
        want = (m * per_item[0], m * per_item[1]) if algorithm == "threshold" else full
        assert c.zcdp_rho == pytest.approx(want[0], rel=1e-9), user
        assert c.zcdp_delta == pytest.approx(want[1], rel=1e-9), user
    u = store.get_user("none")
    assert u is None or u.spent_cost().zcdp_rho == 0


def test_published_cost_is_the_theorem_cost_and_records_hold_integers():
    e, _ = engine([wh(epsilon=1.0, delta=1e-3, max_items_per_window=3)], Cost.zcdp(100.0, 1.0))
    recs = run(e, [ev(f"u{i}", 1, ["pop"]) for i in range(50)] + [ev("t", 15, ["z"])])
    r = recs[0]
    assert r.cost["zcdp"] == {"rho": pytest.approx(3 * 1.0 / 2), "delta": pytest.approx(1e-3)}
    assert list(r.values["counts"]) == ["pop"] and isinstance(r.values["counts"]["pop"], int)


def test_bad_configurations_are_refused_with_the_field_named():
    with pytest.raises(ConfigError, match="noise"):
        build_query("query[0]", {"id": "h", "kind": "window_histogram", "epsilon": 1.0, "algorithm": "top_kbar",
                                 "noise": "laplace"}, horizon=8)
    with pytest.raises(ConfigError, match="delta"):
        build_query("query[0]", {"id": "h", "kind": "window_histogram", "epsilon": 1.0, "noise": "laplace",
                                 "delta": 0.6, "max_items_per_window": 1}, horizon=8)
    with pytest.raises(ConfigError, match="algorithm"):
        build_query("query[0]", {"id": "h", "kind": "window_histogram", "epsilon": 1.0, "algorithm": "all"},
                    horizon=8)
    with pytest.raises(ConfigError, match="epsilon"):
        build_query("query[0]", {"id": "h", "kind": "window_histogram", "epsilon": 0.0}, horizon=8)


# ------------------------------------------------------------------------------------------ noise
def _rounded_pmf(cdf, ks):
    """P[rint(Z) = k] = F(k + ½) − F(k − ½), the end cells taking the tails."""
    p = cdf(ks + 0.5) - cdf(ks - 0.5)
    p[0] += cdf(ks[0] - 0.5)
    p[-1] += 1 - cdf(ks[-1] + 0.5)
    return p


def _chi2_p(obs_err, ks, p):
    obs = np.array([(np.clip(obs_err, ks[0], ks[-1]) == k).sum() for k in ks], dtype=float)
    exp = p * obs_err.size
    lo = int(np.searchsorted(np.cumsum(exp), 5))  # merge sparse tail cells: every expected count ≥ 5
    hi = len(exp) - 1 - int(np.searchsorted(np.cumsum(exp[::-1]), 5))
    o = np.concatenate([[obs[:lo + 1].sum()], obs[lo + 1:hi], [obs[hi:].sum()]])
    x = np.concatenate([[exp[:lo + 1].sum()], exp[lo + 1:hi], [exp[hi:].sum()]])
    return stats.chisquare(o, x * o.sum() / x.sum()).pvalue


@pytest.mark.parametrize("noise", ["gaussian", "laplace"])
def test_released_count_minus_truth_is_rounded_noise_of_scale_one_over_epsilon(noise):
    """30 items of count 60 (far above T) in each of 40 windows: released − 60 = rint(Z), Z ~ N(0, (1/ε)²) or
    Lap(1/ε) (Rogers (unknown-domain) Alg. 1, Δ∞ = 1); χ² at p = 1e-6 against the exact pmf, and a 25 % larger scale is rejected."""
    eps, n_items, n_users, windows = 0.5, 30, 60, 40
    q = wh(epsilon=eps, delta=1e-3, max_items_per_window=n_items, noise=noise)
    assert q.threshold < 25
    e, _ = engine([q], Cost.zcdp(1e9, 10.0), seed=7)
    items = [f"i{k}" for k in range(n_items)]
    payloads = [ev(f"u{j}", 10 * w + 1, items) for w in range(windows) for j in range(n_users)]
    recs = run(e, payloads + [ev("end", 10 * windows + 5, ["z"])])  # its window closes at the end of the run
    assert len(recs) == windows + 1
    recs = recs[:windows]
    err = np.array([v - n_users for r in recs for v in r.values["counts"].values()], dtype=float)
    assert err.size == windows * n_items  # every count released
    b = 1 / eps
    ks = np.arange(-12, 13)
    if noise == "gaussian":
        cdf = lambda s: (lambda x: stats.norm.cdf(x / s))  # noqa: E731
    else:
        cdf = lambda s: (lambda x: stats.laplace.cdf(x / s))  # noqa: E731
    assert abs(err.mean()) < 5 * b * math.sqrt(2) / math.sqrt(err.size)
    assert _chi2_p(err, ks, _rounded_pmf(cdf(b), ks)) > 1e-6
    assert _chi2_p(err, ks, _rounded_pmf(cdf(1.25 * b), ks)) < 1e-2  # power


@pytest.mark.parametrize("noise", ["gaussian", "laplace"])
def test_an_item_held_by_one_user_is_released_with_probability_exactly_delta_over_delta0(noise):
    """The δ of Thm 7, per item: a count of 1 (= Δ∞) crosses T w.p. δ/Δ0 — Gaussian P[1 + Z/ε > T] = δ/Δ0 by
    T's definition, Laplace ½·exp(−ε(T − 1)) = δ/Δ0. 3000 single-holder items in one window, two-sided binomial
    at p = 1e-6; the rate δ (Δ0 not divided out) is rejected."""
    eps, delta, d0, n = 1.0, 0.1, 2, 3000
    e, _ = engine([wh(epsilon=eps, delta=delta, max_items_per_window=d0, noise=noise)], Cost.zcdp(1e9, 10.0),
                  seed=3)
    recs = run(e, [ev(f"u{i}", 1, [f"solo{i}"]) for i in range(n)] + [ev("end", 15, ["z"])])
    released = len(recs[0].values["counts"])
    assert stats.binomtest(released, n, delta / d0).pvalue > 1e-6
    assert stats.binomtest(released, n, delta).pvalue < 1e-6


def test_users_over_delta0_keep_a_uniform_random_subset():
    """A user with 4 items and Δ0 = 2 keeps each of the C(4, 2) = 6 pairs with probability 1/6 (χ², p = 1e-6)."""
    q = wh(epsilon=1.0, delta=1e-3, max_items_per_window=2)
    w = WindowData(seq=1, epoch=0, t=1, start=0.0, end=10.0, user_ids=np.array([5], dtype=np.int64),
                   ts=np.array([1.0]), item_offsets=np.array([0, 4], dtype=np.int64),
                   item_ids=np.array([0, 1, 2, 3], dtype=np.int64), value=np.array([np.nan]),
                   loc=np.full((1, 2), np.nan))
    rng = unsafe_seeded_generator(21)
    seen = {}
    n = 3000
    for _ in range(n):
        res = q.prepare(w, rng)
        kept = tuple(sorted((res.private & 0xFFFFFFFF).tolist()))
        assert len(kept) == 2 and res.users.tolist() == [5]
        seen[kept] = seen.get(kept, 0) + 1
    assert len(seen) == 6
    assert stats.chisquare(list(seen.values())).pvalue > 1e-6


# ------------------------------------------------------------------------------------------ HALT end to end
@pytest.mark.parametrize("algorithm", ["threshold", "top_kbar"])
def test_user_at_budget_is_halted_and_their_later_events_change_no_release(algorithm):
    eps, delta = 1.0, 0.05
    q = lambda: wh(epsilon=eps, delta=delta, max_items_per_window=1, algorithm=algorithm, kbar=3)  # noqa: E731
    one_window = Cost.zcdp(eps**2 / 2, delta)  # Δ0 = 1: exactly one window's cost, either algorithm
    crowd = lambda w: [ev(f"v{i}", 10 * w + 1 + i * 0.01, ["pop"]) for i in range(40)]  # noqa: E731
    h_first, h_later = [ev("h", 2, ["x"])], [ev("h", 12, ["pop"]), ev("h", 22, ["pop"])]
    tail = [ev("end", 45, ["q"])]
    payloads = crowd(0) + h_first + crowd(1) + h_later + crowd(2) + tail

    def counts(recs):
        return [r.values["counts"].get("pop") for r in recs]

    def limited(budget):  # everyone has plenty; h has ``budget``
        e, store = engine([q()], Cost.zcdp(100.0, 1.0))
        store.grant("h", budget_vector(budget))
        return e, store

    # h's budget covers window 1 only: halted at window 2, their later events are dropped before any mechanism
    e1, s1 = limited(one_window)
    r1 = run(e1, payloads)
    h = s1.get_user("h")
    assert h.halted
    assert h.spent_cost().zcdp_rho == pytest.approx(eps**2 / 2, rel=1e-9)
    e2, _ = limited(one_window)
    r2 = run(e2, crowd(0) + h_first + crowd(1) + crowd(2) + tail)  # the halted user's later events removed
    assert [r.to_bytes() for r in r1] == [r.to_bytes() for r in r2]
    # positive control: with budget, the same events are counted (same noise: one more user on "pop")
    e3, s3 = limited(Cost.zcdp(100.0, 1.0))
    r3 = run(e3, payloads)
    assert not s3.get_user("h").halted
    c2, c3 = counts(r2), counts(r3)
    assert c2[0] == c3[0] and None not in c2[1:3]  # windows 1–3 (4 is empty, 5 holds "end")
    assert [b - a for a, b in zip(c2[1:3], c3[1:3])] == [1, 1]


# ------------------------------------------------------------------------------------------ state
def test_snapshot_and_state_tree_restore_continue_identically():
    """Windows are independent (the query's state is empty), but the engine around it is not: a restore from either
    snapshot form mid-stream continues with the same releases and charges as an undisturbed run."""
    from streamdp.engine.pipeline import EmbeddedPipeline
    from streamdp.outputs.sinks import ListSink

    mk = lambda: wh(epsilon=1.0, delta=1e-3, max_items_per_window=2)  # noqa: E731
    events = [ev(f"u{i % 9}", i * 0.7, [f"it{i % 5}", f"it{(i * 3) % 7}"]) for i in range(120)]
    e1, s1 = engine([mk()], Cost.zcdp(3.0, 1.0))
    full = [r.to_bytes() for r in run(e1, events)]
    for form in ("bytes", "tree"):
        e2, store = engine([mk()], Cost.zcdp(3.0, 1.0))
        head = ListSink()
        EmbeddedPipeline(e2, [head]).feed(events[:60])
        snap = e2.snapshot(include_rng=True) if form == "bytes" else e2.state_tree()
        e3, _ = engine([mk()], Cost.zcdp(3.0, 1.0))
        e3.store = store
        if form == "bytes":
            e3.restore(snap)
        else:
            e3.restore_tree(snap)
            e3.rng.bit_generator.state = e2.rng.bit_generator.state
        tail = ListSink()
        EmbeddedPipeline(e3, [tail]).run([events[60:]])
        assert [r.to_bytes() for r in head.records + tail.records] == full, form
    assert any(s1.get_user(f"u{i}").halted for i in range(9))  # budgets ran out along the way: halts included
