"""End to end through the engine: continual counts and pay-what-you-get top-k with the in-memory store."""

import numpy as np
import orjson
import pytest
from scipy import stats

from streamdp.accounting.cost import Cost, budget_vector
from streamdp.engine.queries.continual_counts import ContinualCounts
from streamdp.engine.queries.top_k import TopK

from engine_helpers import engine, run


def ev(user, ts, items):
    return orjson.dumps({"user": user, "ts": ts, "items": items})


def test_continual_counts_charge_first_contribution_only_and_halt_at_budget():
    sigma, L, d = 2.0, 8, 1e-3
    rho_item = 1 * 4 / (2 * sigma**2)  # C² ⌈log2(L+1)⌉ / (2σ²) with L = 8 → 4 levels
    q = ContinualCounts("c", sigma=sigma, horizon=L, delta_item=d, max_items_per_window=2, max_per_item=1)
    # budget fits exactly 3 first contributions
    e, store = engine([q], Cost.zcdp(3 * rho_item, 1.0))
    events = [ev("u", 1, ["a", "b"]),  # 2 first contributions
              ev("u", 11, ["a"]),  # repeat: free (C = 1: dropped by the cap, charged nothing)
              ev("u", 21, ["c"]),  # 3rd: exactly at budget
              ev("u", 31, ["d"])]  # 4th: does not fit → HALT; dropped
    run(e, events)
    u = store.get_user("u")
    assert u.halted
    assert u.spent_cost().zcdp_rho == pytest.approx(3 * rho_item, rel=1e-9)
    assert u.spent_cost().zcdp_delta == pytest.approx(3 * d, rel=1e-9)
    assert u.spent_cost().zcdp_rho <= 3 * rho_item + 1e-12


def test_halted_users_later_events_change_no_output():
    q = lambda: ContinualCounts("c", sigma=1.0, horizon=8, delta_item=0.2, max_items_per_window=1)  # noqa: E731
    rho = 4 / 2
    base = [ev(f"v{i}", 1 + i * 0.01, ["pop"]) for i in range(40)]
    heavy = [ev("h", 2, ["x"]), ev("h", 12, ["y"]), ev("h", 22, ["pop"]), ev("h", 32, ["z"])]
    tail = [ev(f"w{i}", 35 + i * 0.01, ["pop"]) for i in range(5)] + [ev("end", 79, ["q"])]
    e1, s1 = engine([q()], Cost.zcdp(1 * rho, 1.0))
    r1 = run(e1, base + heavy + tail)
    assert s1.get_user("h").halted
    e2, _ = engine([q()], Cost.zcdp(1 * rho, 1.0))
    r2 = run(e2, base + heavy[:1] + tail)  # the halted user's later events removed
    assert [r.to_bytes() for r in r1] == [r.to_bytes() for r in r2]
    # the same removal that the halted case ignores: h's window-3 "pop" event alone
    no_pop = heavy[:2] + heavy[3:]
    e3, _ = engine([q()], Cost.zcdp(1 * rho, 1.0))
    assert [r.to_bytes() for r in run(e3, base + no_pop + tail)] == [r.to_bytes() for r in r1]

    # Positive control: the same events, h granted room for all four first contributions (the crowd keeps the
    # default budget). Removing only h's "pop" event at window 3 leaves the tree's rows as they are (x, y and z
    # still enter it; pop is a row from window 1) and no user exceeds Δ0 = 1 (the bounder draws nothing), so both
    # runs draw the same noise for every node: the releases differ exactly by pop's true running count, +1 at
    # every window t ≥ 3 (a window's running count covers windows 1..t), and by nothing else.
    def granted(events):
        e, s = engine([q()], Cost.zcdp(1 * rho, 1.0))
        s.grant("h", budget_vector(Cost.zcdp(100 * rho, 1.0)))
        return run(e, events), s

    r4, s4 = granted(base + heavy + tail)
    r5, _ = granted(base + no_pop + tail)
    h = s4.get_user("h")
    assert not h.halted
    assert h.spent_cost().zcdp_rho == pytest.approx(4 * rho, rel=1e-9)  # x, y, pop, z: all admitted and charged
    assert [r.t for r in r4] == [r.t for r in r5] == list(range(1, 9))
    for a, b in zip(r4, r5):
        if a.t < 3:
            assert a.to_bytes() == b.to_bytes()
            continue
        ca, cb = a.values["counts"], b.values["counts"]
        assert ca.keys() == cb.keys() and "pop" in ca
        assert {k: ca[k] - cb[k] for k in ca} == {k: int(k == "pop") for k in ca}
        assert {k: v for k, v in a.values.items() if k != "counts"} == \
            {k: v for k, v in b.values.items() if k != "counts"}


def test_running_count_error_has_mean_zero_and_std_sigma_sqrt_popcount():
    """Released minus true count over many items: mean ≈ 0, std ≈ σ√popcount(t) (KS, p = 1e-6)."""
    sigma, L = 3.0, 8
    n_items = 900  # < MAX_ITEMS per event
    q = ContinualCounts("c", sigma=sigma, horizon=L, delta_item=1e-3, max_items_per_window=n_items)
    e, _ = engine([q], Cost.zcdp(1e9, 5.0), seed=5)  # T ≈ 25.5 < 60: every item selected at t = 1
    # 60 users each contribute to every item in window 1: true count 60 for all items, far above T
    payloads = [ev(f"u{j}", 1.0, [f"i{i}" for i in range(n_items)]) for j in range(60)]
    payloads += [ev("tick", 10 * t + 1, ["other"]) for t in range(1, L)]
    recs = run(e, payloads)
    for r in recs:
        t = r.t
        c = np.array([v for k, v in r.values["counts"].items() if k.startswith("i")], dtype=float)
        assert c.size == n_items  # all selected, sticky
        err = c - 60
        sd = sigma * np.sqrt(bin(t).count("1"))
        assert abs(err.mean()) < 5 * sd / np.sqrt(n_items)
        # the released error is round(N(0, σ²·popcount(t))): χ² against its exact pmf Φ((k+½)/sd) − Φ((k−½)/sd)
        ks = np.arange(-int(6 * sd) - 1, int(6 * sd) + 2)
        p = stats.norm.cdf((ks + 0.5) / sd) - stats.norm.cdf((ks - 0.5) / sd)
        p[0] += stats.norm.cdf((ks[0] - 0.5) / sd)
        p[-1] += stats.norm.sf((ks[-1] + 0.5) / sd)
        obs = np.array([(np.clip(err, ks[0], ks[-1]) == k).sum() for k in ks], dtype=float)
        exp = p * n_items
        # merge sparse tail cells so every expected count is ≥ 5
        lo = np.searchsorted(np.cumsum(exp), 5)
        hi = len(exp) - 1 - np.searchsorted(np.cumsum(exp[::-1]), 5)
        o = np.concatenate([[obs[:lo + 1].sum()], obs[lo + 1:hi], [obs[hi:].sum()]])
        x = np.concatenate([[exp[:lo + 1].sum()], exp[lo + 1:hi], [exp[hi:].sum()]])
        assert stats.chisquare(o, x * o.sum() / x.sum()).pvalue > 1e-6
        # and a 25% larger σ is rejected by the same test (the test has power)
        p2 = stats.norm.cdf((ks + 0.5) / (1.25 * sd)) - stats.norm.cdf((ks - 0.5) / (1.25 * sd))
        p2[0] += stats.norm.cdf((ks[0] - 0.5) / (1.25 * sd))
        p2[-1] += stats.norm.sf((ks[-1] + 0.5) / (1.25 * sd))
        x2 = p2 * n_items
        x2 = np.concatenate([[x2[:lo + 1].sum()], x2[lo + 1:hi], [x2[hi:].sum()]])
        assert stats.chisquare(o, x2 * o.sum() / x2.sum()).pvalue < 1e-2


def test_top_k_reserve_and_settle_and_pwyg_stop():
    eps, delta, k, kbar, k_star = 1.0, 1e-3, 2, 4, 5
    q = TopK("t", epsilon=eps, delta=delta, k=k, kbar=kbar, k_star=k_star)
    assert q.threshold == pytest.approx(1 + np.log(kbar / delta) / eps)
    e, store = engine([q], Cost.zcdp(100, 1.0))
    payloads = []
    for w in range(6):
        payloads += [ev(f"u{j}", 10 * w + 1, ["big"]) for j in range(200)]
        payloads += [ev(f"x{w}", 10 * w + 2, ["rare"])]
    recs = run(e, payloads)
    used = [r.values["pwyg_used"] for r in recs]
    assert used[-1] == k_star and all(b >= a for a, b in zip(used, used[1:]))
    # window 1: "big" (count 200) passes for sure; "rare" (1 user) cannot beat T by chance at δ = 1e-3 …
    assert recs[0].values["items"][0] == "big"
    # exact settlement: each present user pays |I|·ε²/8 and δ per window, not the k·ε²/8 reserved
    spent = store.get_user("u0").spent_cost()
    expect_rho = sum(len(r.values["items"]) * eps**2 / 8 for r in recs if r.values["items"])
    n_calls = sum(1 for r in recs if r.values["items"])
    assert spent.zcdp_rho == pytest.approx(expect_rho, rel=1e-9)
    assert spent.zcdp_delta == pytest.approx(n_calls * delta, rel=1e-9)
    # after the stop nobody pays
    stopped = [r for r in recs if r.values["stopped"] and not r.values["items"]]
    assert stopped and all(r.realized["users_charged"] == 0 for r in stopped)


def test_top_k_single_user_item_released_with_probability_at_most_delta():
    """Monte Carlo: an item held by one user (count 1) next to nothing else comes out w.p. ≤ δ (Thm 9)."""
    from streamdp.mechanisms.unknown_domain_gumbel import BOTTOM, UnknownDomainGumbel
    from streamdp.noise.generator import unsafe_seeded_generator

    eps, delta, k, kbar = 1.0, 0.05, 1, 3
    m = UnknownDomainGumbel(eps, delta, k, kbar)
    rng = unsafe_seeded_generator(123)
    n = 20000
    hits = sum(m.release(rng, np.array([7]), np.array([1]))[0] is not BOTTOM for _ in range(n))
    # a 2× violation (rate 2δ) would give ≥ ~2000 hits; binomial test at 1e-6 against δ
    assert stats.binomtest(hits, n, delta, alternative="greater").pvalue > 1e-6


def test_published_cost_is_a_public_bound_not_the_realised_cost():
    """The number of users charged and the realised max cost depend on private data: they go to the ledger only;
    the published record carries the configuration's per-user bound (identical whatever the data)."""
    def recs_for(n_users):
        q = ContinualCounts("c", sigma=2.0, horizon=8, delta_item=1e-3, max_items_per_window=3)
        e, store = engine([q], Cost.zcdp(100, 1.0))
        rs = run(e, [ev(f"u{i}", 1, ["a"]) for i in range(n_users)] + [ev("z", 15, ["b"])])
        return rs, store

    r1, s1 = recs_for(1)
    r2, _ = recs_for(7)
    assert r1[0].cost == r2[0].cost and "users_charged" not in r1[0].to_dict()["cost"]
    assert r1[0].cost["zcdp"]["rho"] == pytest.approx(3 * 4 / (2 * 2.0**2))  # Δ0 · C²·levels/(2σ²)
    assert r1[0].realized["users_charged"] == 1 and r2[0].realized["users_charged"] == 7
    led = [x for x in s1.ledger() if x.get("type") == "release"]
    assert led[0]["users_charged"] == 1 and led[0]["zcdp_rho_max"] == pytest.approx(4 / 8)


def test_continual_counts_range_count_is_free_post_processing_of_stored_nodes():
    q = ContinualCounts("c", sigma=1.0, horizon=8, delta_item=1e-3, max_items_per_window=2, keep_history=True)
    e, _ = engine([q], Cost.zcdp(1e9, 5.0))
    payloads = []
    for w in range(5):
        payloads += [ev(f"u{w}_{j}", 10 * w + 1, ["a", "b"]) for j in range(40)]
    recs = run(e, payloads)
    last = recs[-1]
    # the range 1..t reproduces the released running count at t; ranges add up
    assert q.range_count(["a", "b"], 1, last.t, e.items) == {k: last.values["counts"][k] for k in ("a", "b")}
    r13, r45 = q.range_count(["a"], 1, 3, e.items)["a"], q.range_count(["a"], 4, 5, e.items)["a"]
    assert abs(r13 + r45 - last.values["counts"]["a"]) <= 1  # rounding of two halves
    with pytest.raises(ValueError):
        q.range_count(["nope"], 1, 2, e.items)


def test_optimal_estimator_with_discrete_noise_is_a_config_error():
    from streamdp.config.kinds import ConfigError, build_query

    with pytest.raises(ConfigError, match="estimator"):
        build_query("query[0]", {"id": "c", "kind": "continual_counts", "sigma": 1.0, "noise": "discrete_gaussian",
                                 "estimator": "optimal"}, horizon=8)
