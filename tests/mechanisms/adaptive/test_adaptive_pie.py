"""PIE-NI / PIE-k (Liang–Yi (adaptive budgeting) Alg. 4/5): known answers, noise laws, elimination guarantees, executed-cost accounting,
and a Monte Carlo check of the adaptive-composition claim behind "pay only executed rounds"."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from streamdp.accounting.cost import Cost
from streamdp.mechanisms.adaptive.pie import (
    MAX_ROUNDS,
    confidence_lambda,
    distance_triple,
    executed_rho,
    gaussian_mechanism,
    gaussian_mechanism_cost,
    pie_cost,
    pie_k,
    pie_ni,
    point_triple,
    privacy_savings,
    split_rounds,
)
from streamdp.noise.generator import unsafe_seeded_generator

P_KS = 1e-6


def _norm(u):
    return np.sqrt(np.einsum("ij,ij->i", u, u))


# ------------------------------------------------------------------------------------------- known answers
@pytest.mark.parametrize("beta", [0.5, 0.05, 1e-3, 1e-9])
def test_lambda_known_answer(beta):
    # Liang–Yi (adaptive budgeting) Lemma 6.1, recomputed here
    assert confidence_lambda(1, beta) == pytest.approx(math.sqrt(2 * math.log(2 / beta)), rel=1e-14)
    assert confidence_lambda(2, beta) == pytest.approx(math.sqrt(2 * math.log(1 / beta)), rel=1e-14)
    for d in (3, 10, 784):
        L = math.log(1 / beta)
        assert confidence_lambda(d, beta) == pytest.approx(math.sqrt(d + 2 * math.sqrt(d * L) + 2 * L), rel=1e-14)


@pytest.mark.parametrize("d", [1, 2, 3, 7, 784])
@pytest.mark.parametrize("beta", [0.3, 1e-2, 1e-6])
def test_lambda_is_a_valid_tail_bound(d, beta):
    # P(‖Z‖ > λ(d, β)) ≤ β exactly, from the χ²_d survival function; equality for d = 2.
    tail = stats.chi2.sf(confidence_lambda(d, beta) ** 2, d)
    assert tail <= beta * (1 + 1e-12)
    if d == 2:
        assert tail == pytest.approx(beta, rel=1e-9)


def test_lambda_vectorised_and_validation():
    b = np.array([0.1, 0.01])
    np.testing.assert_allclose(confidence_lambda(1, b), np.sqrt(2 * np.log(2 / b)))
    for bad in (0.0, 1.0, -0.1, 2.0):
        with pytest.raises(ValueError, match="beta"):
            confidence_lambda(1, bad)
    with pytest.raises(ValueError, match="d must"):
        confidence_lambda(0, 0.1)


def test_even_split_known_answer():
    r = np.array([1.0, 0.3, 1e-4])
    s = split_rounds(r, 4, "even")
    np.testing.assert_allclose(s, np.repeat(r[:, None] / 4, 4, axis=1), rtol=1e-13)
    assert np.all(np.cumsum(s, axis=1)[:, -1] <= r)


@pytest.mark.parametrize("c", [1, 2, 10, 30, 64])
def test_doubling_split_known_answer(c):
    r = np.array([1.0, 0.7, 3e-5, 123.0])
    s = split_rounds(r, c, "doubling")
    j = np.arange(1, c + 1)
    expected = r[:, None] * (2.0 ** (j - 1) / (2.0**c - 1))[None, :]  # Liang–Yi (adaptive budgeting) §7 "log-c"
    np.testing.assert_allclose(s, expected, rtol=1e-12)
    assert np.all(s > 0)
    assert np.all(np.cumsum(s, axis=1)[:, -1] <= r)  # never charged above the reservation
    np.testing.assert_allclose(np.cumsum(s, axis=1)[:, -1], r, rtol=1e-14)


def test_split_sum_never_exceeds_r_over_many_values():
    rng = unsafe_seeded_generator(5)
    r = rng.uniform(1e-6, 10.0, 20000)
    for c in (3, 7, 13, 64):
        for scheme in ("even", "doubling"):
            s = split_rounds(r, c, scheme)
            assert np.all(np.cumsum(s, axis=1)[:, -1] <= r)


def test_split_validation():
    with pytest.raises(ValueError, match="c"):
        split_rounds([1.0], 0)
    with pytest.raises(ValueError, match="c"):
        split_rounds([1.0], MAX_ROUNDS + 1)
    with pytest.raises(ValueError, match="scheme"):
        split_rounds([1.0], 4, "halving")
    with pytest.raises(ValueError, match="r must"):
        split_rounds([1.0, 0.0], 4)
    with pytest.raises(ValueError, match="r must"):
        split_rounds([np.nan], 4)


def test_costs_are_cgp():
    assert gaussian_mechanism_cost(0.25) == Cost.cgp(0.25)
    assert pie_cost(0.125) == Cost(cgp_rho=0.125)


# ----------------------------------------------------------------------------------------- noise laws (b)
def test_gaussian_mechanism_law():
    rng = unsafe_seeded_generator(11)
    rho = np.array([0.02, 0.5, 3.0] * 20000)
    base = np.linspace(-5, 5, rho.size)
    v = gaussian_mechanism(rng, base, rho)
    z = (v - base) * np.sqrt(2 * rho)
    assert stats.kstest(z, "norm").pvalue > P_KS
    # 2-d points
    pts = np.zeros((30000, 2))
    out = gaussian_mechanism(rng, pts, 0.5)
    assert stats.kstest(out.ravel(), "norm").pvalue > P_KS  # σ² = 1/(2·0.5) = 1


@pytest.mark.statistical
@pytest.mark.parametrize("scheme,c", [("even", 4), ("doubling", 10)])
def test_round_noise_and_inverse_variance_combination(scheme, c):
    rng = unsafe_seeded_generator(21)
    n = 20000
    phi = rng.uniform(-3, 3, n)
    r = rng.uniform(0.05, 2.0, n)
    rr = split_rounds(r, c, scheme)
    # ν = (−∞, +∞): nobody can be eliminated, every round is run
    res = pie_ni(rng, distance_triple(phi), rr, beta0=0.1, nu_low=-np.inf, nu_high=np.inf, keep_rounds=True)
    assert res.rounds == c and np.all(res.rounds_run == c)
    z_round = (res.round_values[:, :, 0] - phi[:, None]) * np.sqrt(2 * rr)  # v = φ + N(0, 1/(2ρ_j))
    assert stats.kstest(z_round.ravel(), "norm").pvalue > P_KS
    # Fact 6.2: ȳ = (1/ρ̄) Σ ρ_s v_s ~ N(φ, 1/(2ρ̄))
    rho_bar = rr.sum(axis=1)
    z_bar = (res.mean[:, 0] - phi) * np.sqrt(2 * rho_bar)
    assert stats.kstest(z_bar, "norm").pvalue > P_KS
    assert abs(z_bar.mean()) < 5 / math.sqrt(n)
    assert abs(z_bar.var() - 1) < 5 * math.sqrt(2 / n)
    # the mean is the inverse-variance weighting of the stored rounds
    weighted = (rr * res.round_values[:, :, 0]).sum(axis=1) / rho_bar
    np.testing.assert_allclose(res.mean[:, 0], weighted, rtol=1e-9, atol=1e-9)


@pytest.mark.statistical
def test_point_triple_mean_law():
    rng = unsafe_seeded_generator(22)
    n = 15000
    x = rng.uniform(-10, 10, (n, 2))
    r = np.full(n, 0.3)
    res = pie_ni(rng, point_triple(x, lambda u: u[:, 0]), split_rounds(r, 8, "doubling"), beta0=0.1,
                 nu_low=-np.inf, nu_high=np.inf)
    z = (res.mean - x) * np.sqrt(2 * 0.3)  # x̄ ~ N(x, I/(2ρ)), Liang–Yi (adaptive budgeting) Fact 6.2
    assert stats.kstest(z.ravel(), "norm").pvalue > P_KS
    np.testing.assert_allclose(res.estimate, res.mean[:, 0])  # g0 = φ(x̄)


# ------------------------------------------------------------------------------- elimination guarantees
@pytest.mark.statistical
def test_pie_ni_wrong_elimination_rate_at_most_beta0():
    """Liang–Yi (adaptive budgeting) Lemma 5.2: P(some i ∈ S1 with φ ≥ ν_low, or i ∈ S0 with φ ≤ ν_high) ≤ β0."""
    rng = unsafe_seeded_generator(31)
    n, c, beta0, trials = 200, 4, 0.2, 400
    r = np.full(n, 1.0)
    sigma = 1 / math.sqrt(2.0)
    phi = np.linspace(-4 * sigma, 4 * sigma, n)  # many users hugging the threshold
    rr = split_rounds(r, c)
    failures = 0
    for _ in range(trials):
        res = pie_ni(rng, distance_triple(phi), rr, beta0=beta0, nu_low=0.0, nu_high=0.0)
        wrong = np.any(res.s1 & (phi >= 0)) or np.any(res.s0 & (phi <= 0))
        failures += bool(wrong)
    assert failures <= stats.binom.ppf(1 - 1e-6, trials, beta0)


@pytest.mark.statistical
@pytest.mark.parametrize("kind,c", [("distance", 1), ("point", 1), ("distance", 4)])
def test_pie_ni_first_round_threshold_is_sharp(kind, c):
    """A user just outside (φ = 0⁺) lands in S1 in round 1 iff its round-1 noise is below −λ(dim, β0/(c·n))·σ_1:
    probability Φ(−λ) per user, recomputed here from Liang–Yi (adaptive budgeting) Lemma 6.1 and Alg. 4 line 8."""
    rng = unsafe_seeded_generator(32 + c + (kind == "point"))
    n, beta0, trials, r = 100, 0.99, 4000, 0.5
    beta = beta0 / (c * n)
    if kind == "distance":
        lam = math.sqrt(2 * math.log(2 / beta))
        triple = distance_triple(np.full(n, 1e-12))
    else:
        lam = math.sqrt(2 * math.log(1 / beta))
        # points just right of the line u_x = 0 for the 1-Lipschitz φ(u) = u_x
        triple = point_triple(np.tile([1e-12, 0.0], (n, 1)), lambda u: u[:, 0])
    p = stats.norm.cdf(-lam)
    rr = split_rounds(np.full(n, r), c)
    count = 0
    for _ in range(trials):
        res = pie_ni(rng, triple, rr, beta0=beta0, nu_low=0.0, nu_high=0.0)
        count += int(np.count_nonzero(res.s1 & (res.rounds_run == 1)))
    total = n * trials
    assert stats.binom.cdf(count, total, p) > 1e-6
    assert stats.binom.sf(count - 1, total, p) > 1e-6


@pytest.mark.statistical
def test_pie_k_keeps_the_true_k_nearest():
    """Liang–Yi (adaptive budgeting) Lemma 5.3: with probability ≥ 1 − β0 the k smallest φ are in every G_j."""
    rng = unsafe_seeded_generator(41)
    n, k, c, beta0, trials = 300, 5, 6, 0.2, 300
    phi = np.sort(rng.uniform(0, 30, n))  # φ(x_i) = distances; true k smallest = first k
    rr = split_rounds(np.full(n, 0.5), c)
    failures = 0
    for _ in range(trials):
        res = pie_k(rng, distance_triple(phi), rr, k=k, beta0=beta0)
        assert res.survivors.sum() >= k
        failures += not bool(np.all(res.survivors[:k]))
    assert failures <= stats.binom.ppf(1 - 1e-6, trials, beta0)


# ---------------------------------------------------------------------------- executed-cost accounting
def test_executed_cost_accounting_pie_ni():
    rng = unsafe_seeded_generator(51)
    n, c = 5000, 8
    phi = rng.uniform(-20, 20, n)
    r = rng.uniform(0.1, 1.0, n)
    rr = split_rounds(r, c, "doubling")
    res = pie_ni(rng, distance_triple(phi), rr, beta0=0.05, nu_low=0.0, nu_high=0.0)
    # S0, S1, G partition the users
    assert not np.any(res.s0 & res.s1) and not np.any(res.survivors & (res.s0 | res.s1))
    assert np.all(res.s0 | res.s1 | res.survivors)
    # executed = Σ_{s ≤ rounds_run} r_{i,s}, recomputed here
    cum = np.cumsum(rr, axis=1)
    np.testing.assert_array_equal(res.executed_rho, cum[np.arange(n), res.rounds_run - 1])
    assert np.all(res.executed_rho <= r)
    assert np.all(res.rounds_run[res.survivors] == c)
    np.testing.assert_allclose(res.executed_rho[res.survivors], r[res.survivors], rtol=1e-13)
    eliminated = ~res.survivors
    assert eliminated.sum() > n // 2
    assert np.all(res.executed_rho[res.rounds_run < c] < r[res.rounds_run < c])
    # PIE-NI: every user who stops early was eliminated (the survivors run all c rounds)
    assert res.n_eliminated_early == res.n_stopped_early == int(np.count_nonzero(res.rounds_run < c))
    assert res.n_eliminated == int(eliminated.sum())
    expected_sav = np.mean((res.allocated_rho - res.executed_rho) / res.allocated_rho)
    assert res.privacy_savings == pytest.approx(expected_sav)
    assert 0 < res.privacy_savings < 1


def test_loop_stops_when_everyone_is_eliminated():
    rng = unsafe_seeded_generator(52)
    n, c = 1000, 16
    phi = np.where(np.arange(n) % 2 == 0, -1e3, 1e3)  # all far from the threshold
    r = np.full(n, 1.0)
    res = pie_ni(rng, distance_triple(phi), split_rounds(r, c), beta0=0.1, nu_low=0.0, nu_high=0.0)
    assert res.rounds == 1 and np.all(res.rounds_run == 1)
    np.testing.assert_allclose(res.executed_rho, r / c)
    assert np.array_equal(res.s1, phi < 0) and np.array_equal(res.s0, phi > 0)
    assert res.privacy_savings == pytest.approx(1 - 1 / c)


def test_executed_rho_helper():
    rr = np.array([[1.0, 2.0, 4.0], [0.5, 0.5, 0.5]])
    np.testing.assert_allclose(executed_rho(rr, np.array([2, 0])), [3.0, 0.0])
    assert privacy_savings([], []) == 0.0


def test_pie_k_accounting_and_trivial_case():
    rng = unsafe_seeded_generator(53)
    n, k, c = 2000, 10, 8
    phi = rng.uniform(0, 100, n)
    r = np.full(n, 0.2)
    rr = split_rounds(r, c)
    res = pie_k(rng, distance_triple(phi), rr, k=k, beta0=0.05)
    cum = np.cumsum(rr, axis=1)
    np.testing.assert_array_equal(res.executed_rho, cum[np.arange(n), res.rounds_run - 1])
    assert res.survivors.sum() >= k
    assert np.all(res.rounds_run[res.survivors] == res.rounds)
    assert res.privacy_savings > 0.5
    # |G_0| ≤ k: no round runs, nobody pays
    small = pie_k(rng, distance_triple(phi[:3]), rr[:3], k=3, beta0=0.05)
    assert small.rounds == 0 and np.all(small.executed_rho == 0) and small.survivors.all()


def test_validation_errors():
    rng = unsafe_seeded_generator(54)
    t = distance_triple([0.0, 1.0])
    rr = split_rounds([1.0, 1.0], 2)
    with pytest.raises(ValueError, match="beta0"):
        pie_ni(rng, t, rr, beta0=0.0, nu_low=0, nu_high=0)
    with pytest.raises(ValueError, match="nu_low"):
        pie_ni(rng, t, rr, beta0=0.1, nu_low=1, nu_high=0)
    with pytest.raises(ValueError, match="round_rho"):
        pie_ni(rng, t, rr[:1], beta0=0.1, nu_low=0, nu_high=0)
    with pytest.raises(ValueError, match="round_rho"):
        pie_ni(rng, t, -rr, beta0=0.1, nu_low=0, nu_high=0)
    with pytest.raises(ValueError, match="k must"):
        pie_k(rng, t, rr, k=0, beta0=0.1)
    with pytest.raises(ValueError, match="phi_values"):
        distance_triple([[0.0]])
    with pytest.raises(ValueError, match="points"):
        point_triple([1.0, 2.0], lambda u: u[:, 0])
    with pytest.raises(ValueError, match="phi must"):
        pie_ni(rng, point_triple([[0.0, 0.0]], lambda u: u), split_rounds([1.0], 1), beta0=0.1, nu_low=0, nu_high=0)


# -------------------------------------------------------------------------- Monte Carlo privacy check (c)
@pytest.mark.statistical
@pytest.mark.parametrize("kind", ["distance", "point"])
def test_executed_cost_composes_exactly(kind):
    """Liang–Yi (adaptive budgeting) Thm 4.3/4.4 proof: with L the log-likelihood ratio of a user's executed transcript between inputs at
    distance Δ, Q = exp((α−1)L − α(α−1)Δ²·executed_rho) is a stopped martingale with E[Q] = 1 exactly for Gaussian
    rounds (optional stopping, τ ≤ c). Under-charging one round would give E[Q] ≥ e^{α(α−1)Δ² r_j} > 1; noise too
    small for the stated ρ would blow it up. Also E[e^{(α−1)L}] ≤ e^{α(α−1)Δ² r_i} (the reservation)."""
    rng = unsafe_seeded_generator(61 if kind == "distance" else 62)
    n, c, alpha = 40000, 4, 2.0
    r = np.full(n, 0.5)
    rr = split_rounds(r, c)
    if kind == "distance":
        delta = np.array([1.0])
        u = np.full((n, 1), 8.0)
        triple = distance_triple(u[:, 0])
    else:
        delta = np.array([0.6, -0.8])  # ‖Δ‖ = 1
        u = np.tile([8.0, 3.0], (n, 1))
        triple = point_triple(u, lambda p: p[:, 0])
    res = pie_ni(rng, triple, rr, beta0=0.1, nu_low=0.0, nu_high=0.0, keep_rounds=True)
    assert 0.2 < res.privacy_savings < 0.8  # a real mix of stopping times
    v = res.round_values  # (n, c, dim), NaN where not run
    ran = ~np.isnan(v[:, :, 0])
    u2 = u + delta  # the neighbouring input x' at distance ‖Δ‖ = 1
    ll = rr[:, :, None] * ((v - u2[:, None, :]) ** 2 - (v - u[:, None, :]) ** 2)  # log N(v;u)/N(v;u')
    L = np.where(ran, ll.sum(axis=2), 0.0).sum(axis=1)
    d2 = float(delta @ delta)
    q = np.exp((alpha - 1) * L - alpha * (alpha - 1) * d2 * res.executed_rho)
    se = q.std() / math.sqrt(n)
    assert abs(q.mean() - 1.0) < 6 * se
    assert se < 0.02  # the check has power: missing one round here would shift E[Q] by e^{0.25} − 1 ≈ 0.28
    assert np.mean(np.exp((alpha - 1) * L)) <= math.exp(alpha * (alpha - 1) * d2 * 0.5) + 6 * se * math.e


def test_pie_k_counts_eliminated_and_stopped_users_apart():
    """Review of 2026-12-06: n_eliminated_early also counted PIE-k's selected users — when |G_j| ≤ k ends the loop
    before round c, the k survivors stop early too, but they were selected, not eliminated. Fails on the old
    property (which returned n_stopped_early)."""
    rng = unsafe_seeded_generator(77)
    n, c, k = 400, 8, 3
    phi = np.concatenate([[0.0, 0.1, 0.2], rng.uniform(50, 100, n - 3)])  # 3 clearly nearest
    res = pie_k(rng, distance_triple(phi), split_rounds(np.full(n, 2.0), c, "even"), k=k, beta0=0.05)
    assert res.rounds < c and int(res.survivors.sum()) == k  # the loop ended early with the k selected
    assert res.n_stopped_early == n  # nobody ran all c rounds
    assert res.n_eliminated_early == n - k  # the selected k were not eliminated
