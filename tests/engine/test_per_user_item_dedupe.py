"""At most one count per (user, item) per window — the Δ∞ = 1 that top_k (Rogers (unknown-domain) Alg. 3/4, Thm 9/10) and
window_histogram (Rogers (unknown-domain) Alg. 1, Thm 7) are calibrated for (docs/contract.md §3). Both queries dedupe the window's
(user, item) pairs (``unique_sorted(pair_keys(...))`` in ``prepare``); without it a user who sends the same item in
two events (or twice in one event) counts 2 and pays for 2 items, and the mechanisms' thresholds no longer bound
that user's influence.

Each test repeats ONE user's item and nothing else, so the repeat cannot cancel out (a repeat on both sides of a
comparison — e.g. on the returned item and on c_(k̄+1) — leaves every difference of counts, hence the law,
unchanged). Engines with the in-memory store and the seeded test-mode generator; windows are 10 s from 0, and
an event at ts 15 closes window 1.
"""

import math

import pytest

from streamdp.accounting.cost import Cost
from streamdp.engine.queries.top_k import TopK
from streamdp.engine.queries.window_histogram import WindowHistogram

from engine_helpers import engine, ev, run

# the repeated item, as two events of one user in one window or as one event listing it twice
REPEATS = {
    "two_events": [ev("r", 1, ["a"]), ev("r", 2, ["a"])],
    "one_event_twice": [ev("r", 1, ["a", "a"])],
}
CLOSE = [ev("late", 15, ["z"])]  # window 2: closes window 1, whose record is recs[0]


# ------------------------------------------------------------------------------------------------------ top_k
@pytest.mark.parametrize("shape", list(REPEATS))
def test_top_k_counts_a_repeated_item_once_per_user(shape):
    """Guards top_k's per-(user, item) dedupe. k = k̄ = 1, ε = 50, δ = 0.5: T = 1 + log(k̄/δ)/ε = 1 + (log 2)/50.
    Window 1 holds only item a, so c_(k̄+1) = 0 and (Gumbel difference = Logistic(0, 1/ε), see
    test_noise_through_queries.py)

        P(a returned) = 1/(1 + (k̄/δ)·e^{ε(1 + c_(k̄+1) − c_a)}) = 1/(1 + 2·e^{50(1 − c_a)}).

    Counted once (c_a = 1): P = 1/3. Counted twice (the repeat not deduped, c_a = 2): P = 1/(1 + 2e⁻⁵⁰) ≈ 1.
    20 independent seeds; assert a is NOT returned in all 20. False failure on correct code: (1/3)²⁰ = 2.9·10⁻¹⁰;
    on the double count the assertion fails except with probability 1 − (1 + 2e⁻⁵⁰)⁻²⁰ ≈ 40e⁻⁵⁰ ≈ 8·10⁻²¹.
    Positive control (same seeds): a second distinct user s also holds a (c_a = 2 legitimately), and a is returned
    in all 20 windows (false failure ≈ 8·10⁻²¹) — the setup does see a count of 2."""
    eps, delta, k, kbar, seeds = 50.0, 0.5, 1, 1, range(20)
    p_once = 1.0 / (1.0 + (kbar / delta) * math.exp(eps * (1 + 0 - 1)))
    x = (kbar / delta) * math.exp(eps * (1 + 0 - 2))
    miss_twice = x / (1.0 + x)  # 1 − P(a returned) at c_a = 2, without cancellation
    assert p_once == pytest.approx(1 / 3) and 20 * miss_twice < 1e-20 and p_once**20 < 3e-10

    def returned(payloads):
        outs = []
        for seed in seeds:
            q = TopK("t", epsilon=eps, delta=delta, k=k, kbar=kbar, k_star=10**6)
            assert q.threshold == pytest.approx(1 + math.log(kbar / delta) / eps, rel=1e-12)
            e, _ = engine([q], Cost.zcdp(1e6, 1.0), seed=seed)
            recs = run(e, payloads)
            out = recs[0].values["items"]
            assert out in (["a"], [None]), out
            outs.append(out == ["a"])
        return outs

    repeated = returned(REPEATS[shape] + CLOSE)
    assert not all(repeated), repeated  # c_a = 1: returned w.p. 1/3 per seed
    control = returned([ev("r", 1, ["a"]), ev("s", 2, ["a"])] + CLOSE)
    assert all(control), control  # c_a = 2: returned w.p. 1 − 2e⁻⁵⁰ per seed


# -------------------------------------------------------------------------------------------- window_histogram
@pytest.mark.parametrize("shape", list(REPEATS))
def test_window_histogram_charges_a_repeated_item_once(shape):
    """Guards window_histogram's per-(user, item) dedupe on the charge. Algorithm "threshold", ε = 0.5, δ = 1e-3,
    Δ0 = 4: a user with m_u kept items pays ρ = m_u·ε²/2 and δ = m_u·δ/Δ0 (module doc; Rogers (unknown-domain) Thm 7 per count). r sends
    a twice in window 1 (m_u = 1 ≤ Δ0, so no Δ0 subsetting): ρ = 0.25/2 = 0.125, δ = 10⁻³/4 = 2.5·10⁻⁴. Counting
    the repeat doubles both (0.25, 5·10⁻⁴)."""
    eps, delta, d0 = 0.5, 1e-3, 4
    e, store = engine([WindowHistogram("h", epsilon=eps, delta=delta, max_items_per_window=d0)],
                      Cost.zcdp(100.0, 1.0))
    run(e, REPEATS[shape] + CLOSE)
    c = store.get_user("r").spent_cost()
    assert c.zcdp_rho == pytest.approx(0.125, rel=1e-9)
    assert c.zcdp_delta == pytest.approx(2.5e-4, rel=1e-9)


@pytest.mark.parametrize("shape", list(REPEATS))
def test_window_histogram_counts_a_repeated_item_once(shape):
    """Guards the same dedupe on the released count. Window 1: 40 users v0..v39 hold "a" (so a is far above
    T = 1 + 2·Φ⁻¹(1 − 2.5·10⁻⁴) ≈ 7.96) and r holds a, repeated. With the same seed and the same single positive
    item, the noise draw is the same, so:
    * r's repeat removed (r sends a once): the release must be identical — the repeat adds nothing;
    * positive control: a NEW user s sending a once instead raises the released count of a by exactly 1 (integer
      shift of the same rounded noise), so the comparison can see one extra count."""
    eps, delta, d0, seed = 0.5, 1e-3, 4, 7
    crowd = [ev(f"v{i}", 3 + i * 0.01, ["a"]) for i in range(40)]

    def release(payloads):
        e, _ = engine([WindowHistogram("h", epsilon=eps, delta=delta, max_items_per_window=d0)],
                      Cost.zcdp(100.0, 1.0), seed=seed)
        return run(e, crowd + payloads + CLOSE)[0].values["counts"]

    repeated = release(REPEATS[shape])
    once = release([ev("r", 1, ["a"])])
    extra_user = release([ev("r", 1, ["a"]), ev("s", 2, ["a"])])
    assert set(repeated) == set(once) == set(extra_user) == {"a"}
    assert repeated == once
    assert extra_user["a"] == once["a"] + 1
