"""Release laws measured through the engine: top_k (Rogers (unknown-domain) Alg. 3/4, Thm 9) and knn_point (Liang–Yi (adaptive budgeting) Alg. 8, Fact 6.2).

Every trial is one window closed by ReleaseEngine over a MemoryBudgetStore with the seeded test-mode generator;
several engines with different seeds supply independent trials. The exact laws are worked out here from the
papers' formulas (comments), not read from the code under test; each goodness-of-fit test runs at p = 1e-6 and is
shown to reject a nearby wrong law (power).

Top-k (Rogers (unknown-domain) Alg. 3, Thm 9; docs/contract.md §3 "Top-k"): with β = 1/ε and T = 1 + log(k̄/δ)/ε,

    T̃ = T + c_(k̄+1) + G0,   c̃_i = c_i + G_i (top-k̄ items),   item i is returned iff c̃_i > T̃,

all G ~ Gumbel(0, β) independent. The difference of two independent Gumbel(0, β) variables is Logistic(0, β):
P(G_i − G0 > x) = 1/(1 + e^{x/β}). With k = 1 and a single candidate item i (k̄ = 1, or no other positive count),

    P(i returned) = P(G_i − G0 > T + c_(k̄+1) − c_i) = 1/(1 + e^{ε(T + c_(k̄+1) − c_i)})
                  = 1/(1 + (k̄/δ)·e^{ε(1 + c_(k̄+1) − c_i)}),

and for c_i = 1, c_(k̄+1) = 0 (one user, one item, nothing else): P = 1/(1 + k̄/δ) = δ/(δ + k̄).
"""

import math

import numpy as np
import orjson
import pytest
from scipy import stats

from streamdp.accounting.cost import Cost, budget_vector
from streamdp.engine.queries.adaptive_point import KNNPoint
from streamdp.engine.queries.top_k import TopK

from engine_helpers import engine, run

P_MIN = 1e-6


def ev(user, ts, items=(), loc=None):
    d = {"user": user, "ts": ts, "items": list(items)}
    if loc is not None:
        d["loc"] = [float(loc[0]), float(loc[1])]
    return orjson.dumps(d)


def p_returned(eps, delta, kbar, c_item, c_next, shift=0.0):
    """P(the single top-k̄ item beats T̃) from the logistic law above; ``shift`` moves T by that many counts."""
    T = 1.0 + math.log(kbar / delta) / eps + shift
    return 1.0 / (1.0 + math.exp(eps * (T + c_next - c_item)))


def top_k_trials(eps, delta, k, kbar, seeds, windows, per_window, budget=Cost.zcdp(10.0, 1.0)):
    """Run one TopK engine per seed over ``windows`` windows whose payloads are ``per_window(w)``; the records,
    and the engines' stores. Users must be fresh per window: the budget is per user (δ is charged per window)."""
    recs, stores = [], []
    for seed in seeds:
        q = TopK("t", epsilon=eps, delta=delta, k=k, kbar=kbar, k_star=10**7)  # never stops here
        assert q.threshold == pytest.approx(1 + math.log(kbar / delta) / eps, rel=1e-12)
        e, store = engine([q], budget, seed=seed, horizon=64)
        payloads = [p for w in range(windows) for p in per_window(w)]
        rs = run(e, payloads)
        assert len(rs) == windows
        recs += rs
        stores.append(store)
    return recs, stores


def two_sided_p(hits, n, p):
    return stats.binomtest(hits, n, p).pvalue


@pytest.mark.statistical
def test_top_k_single_user_single_item_release_rate_is_delta_over_delta_plus_kbar():
    """One user holding one item, nothing else in the window: the item comes out with probability exactly
    δ/(δ + k̄) (module derivation, c_i = 1, c_(k̄+1) = 0 since only one item is positive). Two-sided exact binomial
    test at 1e-6; the same test rejects a threshold off by ±log 2 and a Gumbel scale β = ε instead of 1/ε."""
    eps, delta, k, kbar = 2.0, 0.25, 1, 2  # ε ≠ 1 so that β = 1/ε and β = ε differ
    recs, _ = top_k_trials(eps, delta, k, kbar, seeds=(71, 72, 73), windows=1000,
                           per_window=lambda w: [ev(f"u{w}", 10 * w + 1, ["x"])])
    outs = [r.values["items"] for r in recs]
    assert all(o in (["x"], [None]) for o in outs)  # k = 1: the item or ⊥, never anything else
    assert all(r.values["bottom"] == (o == [None]) for r, o in zip(recs, outs))
    n = len(outs)
    hits = sum(o == ["x"] for o in outs)
    p0 = delta / (delta + kbar)
    assert p0 == pytest.approx(p_returned(eps, delta, kbar, 1, 0))
    assert two_sided_p(hits, n, p0) > P_MIN, (hits, n, p0)
    # power: T ± log 2 (p = 1/(1 + (k̄/δ)·2^{±ε})), and β = ε (P = 1/(1 + (k̄/δ)^{1/ε²}))
    for alt in (p_returned(eps, delta, kbar, 1, 0, math.log(2)), p_returned(eps, delta, kbar, 1, 0, -math.log(2)),
                1.0 / (1.0 + (kbar / delta) ** (1 / eps**2))):
        assert two_sided_p(hits, n, alt) < P_MIN, (hits, n, alt)


@pytest.mark.statistical
def test_top_k_threshold_carries_the_kbar_plus_first_count_and_counts_users_once():
    """k = k̄ = 1, item a held by 3 users, item b by 2: only a gets noise (top-k̄), T̃ = T + c_b + G0, so a comes out
    with probability 1/(1 + (k̄/δ)·e^{ε(1 + 2 − 3)}) = 1/(1 + k̄/δ) and b never does. One holder of a repeats it in
    a second event: the histogram counts users (≤ 1 per user and item), so the law is unchanged. The repeat is
    one-sided on purpose: only the law of c_a − c_(k̄+1) is observable, so a repeat of b as well would shift both
    counts by 1 under a missing dedupe and hide it. The test rejects the laws of c_(k̄+1) dropped (T̃ = T + G0), of
    a counted 4 times (the repeat counted: 1/(1 + (k̄/δ)·e^{−ε})), and of T off by ±log 2. Fresh users every window
    (a present user pays δ per window, and the δ budget is capped by the fixed-point grid)."""
    eps, delta, k, kbar = 2.0, 0.25, 1, 1

    def window(w):
        t = 10 * w + 1
        a0, a1, a2, b0, b1 = (f"{s}_{w}" for s in ("a0", "a1", "a2", "b0", "b1"))
        return [ev(a0, t, ["a"]), ev(a1, t, ["a"]), ev(a2, t, ["a"]), ev(a0, t + 1, ["a"]),
                ev(b0, t, ["b"]), ev(b1, t, ["b"])]  # b not repeated: see the docstring

    recs, _ = top_k_trials(eps, delta, k, kbar, seeds=(81, 82), windows=800, per_window=window)
    outs = [r.values["items"] for r in recs]
    assert all(o in (["a"], [None]) for o in outs)  # b is not in the top k̄ = 1: it is never even noised
    n, hits = len(outs), sum(o == ["a"] for o in outs)
    p0 = p_returned(eps, delta, kbar, 3, 2)
    assert p0 == pytest.approx(1 / (1 + kbar / delta))  # = 0.2
    assert two_sided_p(hits, n, p0) > P_MIN, (hits, n, p0)
    for alt in (p_returned(eps, delta, kbar, 3, 0),  # c_(k̄+1) left out of T̃
                p_returned(eps, delta, kbar, 4, 2),  # a0's second event counted
                p_returned(eps, delta, kbar, 3, 2, math.log(2)), p_returned(eps, delta, kbar, 3, 2, -math.log(2))):
        assert two_sided_p(hits, n, alt) < P_MIN, (hits, n, alt)


@pytest.mark.statistical
def test_top_k_halted_users_items_do_not_enter_the_histogram():
    """Per window a fresh user u_w holds x and a fresh user h_w holds y. The default budget (δ = 0.1) is below the
    per-window reservation δ = 0.25, so only users granted a budget are admitted. Run 1 grants only the u_w: every
    h_w is refused (halted) and y must not compete, so x comes out with probability δ/(δ + k̄) as if alone.
    Positive control, run 2 — the same payloads and seed, the h_w granted too: y (count 1, interned after x, so x
    wins the top-k̄ tie) is c_(k̄+1) = 1 and x's rate drops to 1/(1 + (k̄/δ)e^{ε}). Each run's rate is consistent
    with its own law and rejects the other's."""
    eps, delta, k, kbar, windows, seed = 2.0, 0.25, 1, 1, 800, 91
    alone, with_y = p_returned(eps, delta, kbar, 1, 0), p_returned(eps, delta, kbar, 1, 1)
    assert alone == pytest.approx(delta / (delta + kbar)) and with_y < alone / 4
    payloads = [p for w in range(windows) for p in (ev(f"u{w}", 10 * w + 1, ["x"]), ev(f"h{w}", 10 * w + 2, ["y"]))]
    rich = budget_vector(Cost.zcdp(10.0, 1.0))

    def one_run(grant_h):
        q = TopK("t", epsilon=eps, delta=delta, k=k, kbar=kbar, k_star=10**7)
        e, store = engine([q], Cost.zcdp(10.0, 0.1), seed=seed, horizon=64)
        for w in range(windows):
            store.grant(f"u{w}", rich)
            if grant_h:
                store.grant(f"h{w}", rich)
        recs = run(e, payloads)
        assert len(recs) == windows
        assert all(store.get_user(f"h{w}").halted != grant_h for w in range(windows))
        assert not any(store.get_user(f"u{w}").halted for w in range(windows))
        outs = [r.values["items"] for r in recs]
        assert all(o in (["x"], [None]) for o in outs)
        return sum(o == ["x"] for o in outs)

    hits = one_run(grant_h=False)
    assert two_sided_p(hits, windows, alone) > P_MIN, (hits, windows, alone)
    assert two_sided_p(hits, windows, with_y) < P_MIN, (hits, windows, with_y)
    hits = one_run(grant_h=True)
    assert two_sided_p(hits, windows, with_y) > P_MIN, (hits, windows, with_y)
    assert two_sided_p(hits, windows, alone) < P_MIN, (hits, windows, alone)


@pytest.mark.statistical
def test_knn_point_released_distances_of_all_round_survivors_are_gaussian_with_inverse_variance_sigma():
    """knn_point, estimator pm1 (Liang–Yi (adaptive budgeting) Alg. 8: PIE-k on len_p with distance privatisation), c = 4 rounds, doubling
    split, reuse_savings = false (Liang–Yi (adaptive budgeting) §5.1: r_i = B/m for every query, so every fresh user gets ρ_i = B/m).

    Round s releases ṽ_s = len_p(x_i) + Z_s/√(2 r_s) (Liang–Yi (adaptive budgeting) Lemma 3.4), r_s = 2^{s−1}/(2^c − 1)·ρ_i; the estimate of
    a user who ran all c rounds is the inverse-variance mean (Liang–Yi (adaptive budgeting) Fact 6.2)
        ȳ = (1/ρ̄) Σ_s r_s ṽ_s,  ρ̄ = Σ_s r_s = ρ_i,  Var = Σ_s r_s²/(2 r_s)/ρ̄² = 1/(2ρ̄)  →  σ² = 1/(2ρ_i).
    (An unweighted mean of the rounds would have variance (1/c²)Σ_s 1/(2 r_s), 1.76× larger here, and the last
    round alone 1/(2 r_c) = 1.875/(2ρ_i): the doubling split makes the three laws differ.)

    Setting, per window: K users at distance d from p (on a circle) and F users at d + 9σ. PIE-k keeps the far
    users through rounds 1–3 (their gap 9σ is below 2h̄ ≈ 12σ at round 3, h̄ = λ/√(2ρ̄)), so round 4 runs for
    everyone and the K near users survive every round; a far user outranks a near one at the end with probability
    ≈ Φ(−9/√2) ≈ 1e-10, so the K released distances are exactly the near users' ȳ (sorted: the multiset of errors is
    still K iid draws). Released − d ~ N(0, σ²): KS at 1e-6 plus mean and variance (χ²) checks; KS rejects the
    unweighted-mean and last-round laws."""
    K, F, M, c = 10, 15, 250, 4
    rho_i = 0.5  # per m² → σ = 1 m
    sigma = 1.0 / math.sqrt(2 * rho_i)
    d_near, gap = 50.0, 9.0 * sigma
    ang = np.linspace(0, 2 * np.pi, K + F, endpoint=False)
    near = d_near * np.column_stack([np.cos(ang[:K]), np.sin(ang[:K])])
    far = (d_near + gap) * np.column_stack([np.cos(ang[K:]), np.sin(ang[K:])])
    assert np.allclose(np.hypot(near[:, 0], near[:, 1]), d_near, rtol=0, atol=1e-12)
    errs = []
    for seed in (301, 302):
        q = KNNPoint("n", queries=[{"window": w, "point": [0.0, 0.0]} for w in range(1, M + 1)], k=K,
                     budget_rho=rho_i * M, units="m", reuse_savings=False, rounds=c, split="doubling",
                     estimator="pm1", beta=0.1)
        e, store = engine([q], Cost(cgp_rho=1.0), seed=seed, horizon=64)
        payloads = []
        for w in range(M):  # fresh users per window: each has its whole B and gets r_i = B/m
            t = 10 * w + 1
            payloads += [ev(f"n{w}_{i}", t, loc=p) for i, p in enumerate(near)]
            payloads += [ev(f"f{w}_{i}", t, loc=p) for i, p in enumerate(far)]
        recs = run(e, payloads)
        assert len(recs) == M
        for r in recs:
            v = r.values
            assert v["estimator"] == "PM1" and v["k"] == K and v["users"] == K + F
            assert v["rounds"] == c  # every round ran: the near users survived all c rounds
            assert v["noise_std"] == pytest.approx([sigma] * K, rel=1e-9)  # 1/√(2ρ̄), ρ̄ = ρ_i
            errs.append(np.array(v["distances"]) - d_near)
    err = np.concatenate(errs)
    n = err.size
    assert n == 2 * M * K
    assert stats.kstest(err, stats.norm(0, sigma).cdf).pvalue > P_MIN
    assert abs(err.mean()) < 5 * sigma / math.sqrt(n)  # |z| < 5 ≈ two-sided 1e-6
    chi = (n - 1) * err.var(ddof=1) / sigma**2  # ~ χ²_{n−1}
    assert min(stats.chi2.cdf(chi, n - 1), stats.chi2.sf(chi, n - 1)) > P_MIN / 2
    # power: the unweighted mean of the rounds, and the last round alone
    r_s = rho_i * np.exp2(np.arange(c)) / (2**c - 1)
    for var_alt in (np.sum(1 / (2 * r_s)) / c**2, 1 / (2 * r_s[-1])):
        assert var_alt > 1.7 * sigma**2
        assert stats.kstest(err, stats.norm(0, math.sqrt(var_alt)).cdf).pvalue < P_MIN
