"""Independent cross-checks of streamdp's accounting and samplers against two other libraries (test-only
dependencies in the ``test`` extra): OpenDP (the Rust library behind ``opendp``) and Google's ``dp-accounting``.

* zCDP → (ε, δ): :func:`~streamdp.accounting.zcdp.cks_epsilon` against OpenDP's ``make_zCDP_to_approxDP``
  (Canonne–Kamath–Steinke 2020's conversion, as ours) — equal to 1e-9 — and against dp-accounting's RDP
  accountant fed a ``ZCDpEvent`` (RDP(α) = αρ, the same CKS conversion at a fixed grid of orders α, so never
  below ours, and within 1 % of it); :func:`~streamdp.accounting.zcdp.cks_delta` against OpenDP's δ(ε).
* The exact Gaussian ε (Balle–Wang's analytic Gaussian): :func:`~streamdp.accounting.zcdp.gaussian_exact_epsilon`
  against dp-accounting's ``get_epsilon_gaussian`` (same curve, their own root finding) and its PLD accountant
  (a pessimistic discretisation of the privacy-loss distribution: never below the exact ε, within 1 %).
* Samplers: ``streamdp.noise.discrete`` N_Z(0, σ²) and Lap_Z(t) against OpenDP's integer Gaussian and Laplace
  mechanisms (CKS's exact samplers), two-sample χ² homogeneity and KS. Our side uses fixed seeds; OpenDP draws
  from the operating system and cannot be seeded, so each comparison is a test at level 10⁻⁶ (a false failure
  once in a million runs). A positive control (σ off by 5 %) shows the test can fail.
* Rogers' Alg. 1 thresholds (Unknown-Domain Algorithms, Thm 7) against OpenDP's ``make_gaussian_threshold`` /
  ``make_laplace_threshold``. The mapping: our Alg. 1 with ε, δ, Δ0, Δ∞ adds N(0, σ²) with σ = Δ∞/ε (Laplace:
  b = Δ∞/ε) and keeps counts above T; OpenDP's threshold measurement with ``scale`` = σ (b) and ``threshold`` = T
  on a map of float counts, with d_in = (Δ0, Δ∞·√Δ0, Δ∞) for the Gaussian (ℓ0, ℓ2, ℓ∞) and (Δ0, Δ0·Δ∞, Δ∞) for
  the Laplace (ℓ0, ℓ1, ℓ∞), reports its (loss, δ). With p = Pr[Δ∞ + noise > T] for one count, we bound δ by the
  union bound Δ0·p (Rogers' proof) and OpenDP by 1 − (1 − p)^Δ0 (the counts' noises are independent): at our T,
  p = δ/Δ0, so OpenDP's δ must be 1 − (1 − δ/Δ0)^Δ0 ≤ δ (equal for Δ0 = 1). The loss coincides for the Gaussian (ρ = Δ0ε²/2 both); for the Laplace OpenDP states pure
  ε-DP by the ℓ1 sensitivity (Δ0·ε) while we state zCDP composed per differing count (Δ0·ε²/2): they coincide
  for Δ0 = 1, where pure ε gives ε²/2 (Bun–Steinke).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

dp = pytest.importorskip("opendp.prelude", reason="opendp is in the test extra: pip install -e '.[test]'")
dp_accounting = pytest.importorskip("dp_accounting", reason="dp-accounting is in the test extra")

from streamdp.accounting.zcdp import cks_delta, cks_epsilon, gaussian_exact_epsilon  # noqa: E402
from streamdp.mechanisms.unknown_domain_histogram import (  # noqa: E402
    gaussian_histogram_threshold,
    laplace_histogram_threshold,
    unknown_domain_histogram_cost,
)
from streamdp.noise.discrete import discrete_gaussian, discrete_laplace  # noqa: E402
from streamdp.noise.generator import unsafe_seeded_generator  # noqa: E402

dp.enable_features("contrib")

RHOS = [1e-5, 1e-3, 0.05, 0.5, 2.0, 10.0, 200.0]
DELTAS = [1e-2, 1e-6, 1e-10, 1e-15]
P_MIN = 1e-6


def _opendp_gaussian_profile(rho: float):
    """OpenDP's zCDP Gaussian with σ = 1/√(2ρ) at d_in = 1, converted to a privacy profile; and its ρ (OpenDP's
    own rounding of 1/(2σ²))."""
    sigma = 1.0 / math.sqrt(2.0 * rho)
    meas = dp.m.make_gaussian(dp.atom_domain(T=float, nan=False), dp.absolute_distance(T=float), scale=sigma)
    return dp.c.make_zCDP_to_approxDP(meas).map(1.0), float(meas.map(1.0))


# ----------------------------------------------------------------------------------------- zCDP → (ε, δ)
@pytest.mark.parametrize("rho", RHOS)
def test_zcdp_to_dp_equals_opendp(rho):
    profile, rho_opendp = _opendp_gaussian_profile(rho)
    assert rho_opendp == pytest.approx(rho, rel=1e-12)
    for delta in DELTAS:
        theirs = profile.epsilon(delta)
        ours = cks_epsilon(rho_opendp, delta)
        assert ours == pytest.approx(theirs, rel=1e-9, abs=1e-12), (rho, delta)


@pytest.mark.parametrize("rho", RHOS)
def test_zcdp_delta_of_epsilon_equals_opendp(rho):
    profile, rho_opendp = _opendp_gaussian_profile(rho)
    for delta in DELTAS:
        eps = cks_epsilon(rho_opendp, delta)
        assert cks_delta(rho_opendp, eps) == pytest.approx(profile.delta(eps), rel=1e-6), (rho, delta)


@pytest.mark.parametrize("rho", RHOS)
def test_zcdp_to_dp_against_dp_accounting_rdp(rho):
    """dp-accounting's RDP accountant converts at a grid of orders only: never tighter than our optimum over every
    real order, and close to it on a dense grid (its default grid is up to 4 % looser at the ends of RHOS)."""
    acc = dp_accounting.rdp.RdpAccountant(orders=list(1.0 + np.logspace(-5, 5, 4001)))
    acc.compose(dp_accounting.ZCDpEvent(rho))
    for delta in DELTAS:
        theirs = acc.get_epsilon(delta)
        ours = cks_epsilon(rho, delta)
        assert ours <= theirs * (1 + 1e-12) + 1e-12, (rho, delta)
        assert theirs <= ours * 1.002 + 1e-9, (rho, delta)


# --------------------------------------------------------------------------------- exact Gaussian ε
@pytest.mark.parametrize("sigma", [0.3, 1.0, 4.0, 30.0])
def test_exact_gaussian_epsilon_against_dp_accounting(sigma):
    rho = 1.0 / (2.0 * sigma * sigma)  # sensitivity 1
    for delta in (1e-3, 1e-6, 1e-10):
        theirs = dp_accounting.get_epsilon_gaussian(sigma, delta, tol=1e-14)
        ours = gaussian_exact_epsilon(rho, delta)
        assert ours == pytest.approx(theirs, rel=1e-6, abs=1e-9), (sigma, delta)
        # the exact curve is below the conversion that knows only ρ
        assert ours <= cks_epsilon(rho, delta)


@pytest.mark.parametrize("sigma", [0.5, 2.0, 8.0])
def test_exact_gaussian_epsilon_against_the_pld_accountant(sigma):
    rho = 1.0 / (2.0 * sigma * sigma)
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dp_accounting.GaussianDpEvent(sigma))
    for delta in (1e-3, 1e-6):
        pld = acc.get_epsilon(delta)
        ours = gaussian_exact_epsilon(rho, delta)
        assert ours <= pld + 1e-9 and pld <= ours * 1.01 + 1e-3, (sigma, delta, ours, pld)


# -------------------------------------------------------------------------------------------- samplers
def _opendp_integer_noise(kind: str, scale: float, n: int) -> np.ndarray:
    vd = dp.vector_domain(dp.atom_domain(T=int))
    if kind == "gaussian":
        meas = dp.m.make_gaussian(vd, dp.l2_distance(T=int), scale=scale)
    else:
        meas = dp.m.make_laplace(vd, dp.l1_distance(T=int), scale=scale)
    return np.asarray(meas([0] * n), dtype=np.int64)


def _homogeneity_pvalue(a: np.ndarray, b: np.ndarray) -> float:
    """χ² test that two integer samples have one law: cells are the values, the tails pooled so that every cell
    expects ≥ 20 draws in each sample."""
    lo, hi = np.percentile(np.concatenate([a, b]), [0.2, 99.8])
    lo, hi = int(math.floor(lo)), int(math.ceil(hi))
    edges = np.arange(lo, hi + 2)
    ca = np.histogram(np.clip(a, lo, hi), bins=edges)[0]
    cb = np.histogram(np.clip(b, lo, hi), bins=edges)[0]
    # merge sparse cells left to right
    rows, acc_a, acc_b = [], 0, 0
    for x, y in zip(ca, cb):
        acc_a += x
        acc_b += y
        if acc_a + acc_b >= 40:
            rows.append((acc_a, acc_b))
            acc_a = acc_b = 0
    if acc_a + acc_b:
        rows[-1] = (rows[-1][0] + acc_a, rows[-1][1] + acc_b)
    table = np.array(rows).T
    return float(stats.chi2_contingency(table)[1])


SAMPLER_CASES = [("gaussian", 0.8), ("gaussian", 3.5), ("gaussian", 40.25),
                 ("laplace", 0.7), ("laplace", 3.5), ("laplace", 25.0)]


@pytest.mark.statistical
@pytest.mark.parametrize("kind, scale", SAMPLER_CASES)
def test_discrete_samplers_have_opendps_law(kind, scale):
    n = 40_000
    theirs = _opendp_integer_noise(kind, scale, n)
    rng = unsafe_seeded_generator(4100 + SAMPLER_CASES.index((kind, scale)))
    ours = discrete_gaussian(rng, scale, n) if kind == "gaussian" else discrete_laplace(rng, scale, n)
    assert _homogeneity_pvalue(ours, theirs) > P_MIN
    assert stats.ks_2samp(ours, theirs).pvalue > P_MIN
    # positive control: a 10 % larger scale on our side is told apart (the test can fail)
    if scale >= 3.5:
        wrong = (discrete_gaussian(rng, scale * 1.1, n) if kind == "gaussian"
                 else discrete_laplace(rng, scale * 1.1, n))
        assert _homogeneity_pvalue(wrong, theirs) < 1e-3


# ------------------------------------------------------------------------------------------ thresholds
THRESHOLD_CASES = [(1.0, 1e-6, 1, 1.0), (0.5, 1e-9, 4, 2.0), (2.0, 1e-5, 3, 1.0), (0.1, 1e-3, 10, 5.0)]


def _float_count_map():
    return dp.map_domain(dp.atom_domain(T=str), dp.atom_domain(T=float, nan=False))


@pytest.mark.parametrize("eps, delta, l0, linf", THRESHOLD_CASES)
def test_gaussian_threshold_against_opendp(eps, delta, l0, linf):
    sigma = linf / eps
    T = gaussian_histogram_threshold(eps, delta, l0, linf)
    meas = dp.m.make_gaussian_threshold(_float_count_map(), dp.l02inf_distance(dp.absolute_distance(T=float)),
                                        scale=sigma, threshold=T)
    rho, d = meas.map((l0, math.sqrt(l0) * linf, linf))
    cost = unknown_domain_histogram_cost(eps, delta, l0)
    assert rho == pytest.approx(cost.zcdp_rho, rel=1e-9)
    assert d == pytest.approx(-math.expm1(l0 * math.log1p(-delta / l0)), rel=1e-4) and d <= delta * (1 + 1e-4)
    # control: a threshold one σ lower has a much larger δ in OpenDP's accounting too
    lower = dp.m.make_gaussian_threshold(_float_count_map(), dp.l02inf_distance(dp.absolute_distance(T=float)),
                                         scale=sigma, threshold=T - sigma)
    assert lower.map((l0, math.sqrt(l0) * linf, linf))[1] > 10 * delta


@pytest.mark.parametrize("eps, delta, l0, linf", THRESHOLD_CASES)
def test_laplace_threshold_against_opendp(eps, delta, l0, linf):
    b = linf / eps
    T = laplace_histogram_threshold(eps, delta, l0, linf)
    meas = dp.m.make_laplace_threshold(_float_count_map(), dp.l01inf_distance(dp.absolute_distance(T=float)),
                                       scale=b, threshold=T)
    eps_pure, d = meas.map((l0, l0 * linf, linf))
    assert d == pytest.approx(-math.expm1(l0 * math.log1p(-delta / l0)), rel=1e-4) and d <= delta * (1 + 1e-4)
    assert eps_pure == pytest.approx(l0 * eps, rel=1e-9)  # OpenDP's ℓ1 route
    if l0 == 1:  # the models coincide: pure ε ⇒ ε²/2-zCDP, our per-count composition gives the same
        assert unknown_domain_histogram_cost(eps, delta, l0).zcdp_rho == pytest.approx(eps_pure**2 / 2, rel=1e-12)
