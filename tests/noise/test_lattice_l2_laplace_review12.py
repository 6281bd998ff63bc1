"""The lattice ℓ2-Laplace sampler (review 12): Z on ℤ^d with Pr[z] ∝ exp(−‖z‖₂/τ), by rejection from d independent
discrete Laplaces Lap_Z(√d·τ) (streamdp.noise.discrete.lattice_l2_laplace).

The expected laws are written out here from their formulas, never taken from the code under test: for small τ the
exact pmf ∝ exp(−‖z‖₂/τ) on a box [−B, B]^d that carries all but < 10⁻¹⁰ of the mass (χ²); for large τ the law of
‖Z‖/τ, which tends to Gamma(shape d, scale 1) — the norm law of the density ∝ exp(−‖x‖₂) on ℝ^d — to within O(√d/τ)
(KS). Fixed seeds, rejection below p = 1e-6, and power checks (a wrong τ, the proposal without its rejection step,
and the Gamma(d+1) radius are rejected).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from noise_gof import P_MIN, ks_pvalue
from streamdp.noise import samplers
from streamdp.noise.generator import unsafe_seeded_generator


def box_pmf(d: int, tau: float, B: int) -> np.ndarray:
    """The exact law ∝ exp(−‖z‖₂/τ) on [−B, B]^d, normalised over the box, as a flat array (C order of the
    d-dimensional box, cell z ↦ ravel_multi_index(z + B))."""
    axis2 = np.arange(-B, B + 1, dtype=np.float64) ** 2
    sq = np.zeros((1,) * d)
    for j in range(d):
        sq = sq + axis2.reshape((1,) * j + (-1,) + (1,) * (d - j - 1))
    w = np.exp(-np.sqrt(sq) / tau).ravel()
    return w / w.sum()


def lattice_chi2(samples: np.ndarray, d: int, tau: float, B: int) -> float:
    """χ² p-value of int samples (n, d) against ∝ exp(−‖z‖₂/τ) on [−B, B]^d. Cells are taken by decreasing pmf
    (increasing norm) and pooled consecutively into bins expecting ≥ 5; a sample outside the box fails."""
    samples = np.asarray(samples).reshape(-1, d)
    n = samples.shape[0]
    assert np.all(np.abs(samples) <= B), "a sample outside the box (its mass is < 1e-10)"
    pmf = box_pmf(d, tau, B)
    cell = np.ravel_multi_index(tuple((samples + B).T), (2 * B + 1,) * d)
    order = np.argsort(-pmf, kind="stable")
    exp_sorted = n * pmf[order]
    bins = np.floor(np.cumsum(exp_sorted) / 5.0).astype(np.int64)  # a cell expecting > 5 skips bin numbers:
    bins = np.unique(bins, return_inverse=True)[1].ravel()  # renumber the bins actually used 0, 1, …
    bin_of_cell = np.empty(pmf.size, dtype=np.int64)
    bin_of_cell[order] = bins
    nb = int(bins.max()) + 1
    expected = np.bincount(bins, weights=exp_sorted, minlength=nb)
    observed = np.bincount(bin_of_cell[cell], minlength=nb)
    if expected[-1] < 5.0:  # the last bin may expect < 5: merge it into its neighbour
        expected[-2] += expected[-1]
        observed[-2] += observed[-1]
        expected, observed = expected[:-1], observed[:-1]
    return float(stats.chisquare(observed, expected * (n / expected.sum())).pvalue)


SMALL = [(1, 0.7), (1, 1.5), (1, 3.0), (2, 0.7), (2, 1.5), (2, 3.0), (3, 0.7), (3, 1.5), (3, 3.0)]


def box_side(d: int, tau: float) -> int:
    # the box contains the ball of radius B, and Pr[‖Z‖ > 30τ + 5] < 10⁻¹⁰ for d ≤ 3 (‖Z‖/τ is about Gamma(d, 1))
    return int(math.ceil(30 * tau)) + 5


@pytest.mark.parametrize("d,tau", SMALL)
def test_law_is_exactly_exp_minus_l2_norm_on_the_lattice(d, tau):
    rng = unsafe_seeded_generator(4100 + 10 * d + int(10 * tau))
    n = 200_000
    z = samplers.lattice_l2_laplace(rng, d, tau, n)
    assert z.shape == (n, d) and z.dtype == np.int64
    p = lattice_chi2(z, d, tau, box_side(d, tau))
    assert p > P_MIN, f"d={d} τ={tau}: χ² p = {p:.2e}"


@pytest.mark.parametrize("d,tau", [(2, 1.5), (3, 1.5)])
def test_chi2_has_power(d, tau):
    """A wrong τ (+15 %) and the proposal without its rejection step are both rejected by the same test."""
    rng = unsafe_seeded_generator(4200 + d)
    n = 200_000
    B = box_side(d, 1.15 * tau)
    wrong_tau = samplers.lattice_l2_laplace(rng, d, 1.15 * tau, n)
    assert lattice_chi2(wrong_tau, d, tau, B) < P_MIN
    proposal = samplers.discrete_laplace(rng, math.sqrt(d) * tau, (n, d))  # ∝ exp(−‖z‖₁/(√d·τ))
    proposal = proposal[np.all(np.abs(proposal) <= B, axis=1)]
    assert lattice_chi2(proposal, d, tau, B) < P_MIN


@pytest.mark.parametrize("d,n", [(1, 20_000), (2, 20_000), (3, 20_000), (16, 3_000)])
def test_large_tau_norm_is_gamma_d(d, n):
    """τ = 1.5·2³⁶ (the granular mechanism's range): ‖Z‖/τ ~ Gamma(d, 1) (‖Z‖·g vs Gamma(d, s) with s = τ·g)."""
    rng = unsafe_seeded_generator(4300 + d)
    tau = 1.5 * 2.0**36
    z = samplers.lattice_l2_laplace(rng, d, tau, n).astype(np.float64)
    r = np.sqrt((z * z).sum(axis=1)) / tau
    assert ks_pvalue(r, stats.gamma(d).cdf) > P_MIN
    # power: a τ off by 10 % and the Gamma(d+1) radius (the K-norm's R before the ball's Beta(d, 1)) are rejected
    assert ks_pvalue(r / 1.1, stats.gamma(d).cdf) < P_MIN
    assert ks_pvalue(r, stats.gamma(d + 1).cdf) < P_MIN
    # symmetry: the first coordinate's sign is fair
    assert abs(np.mean(z[:, 0] > 0) - 0.5) < 5 * 0.5 / math.sqrt(n)


def test_small_tau_d1_is_the_discrete_laplace():
    """At d = 1 the law is Lap_Z(τ) and the acceptance probability is exp(0) = 1."""
    rng = unsafe_seeded_generator(4400)
    z = samplers.lattice_l2_laplace(rng, 1, 1.5, 100_000)[:, 0]
    support = np.arange(-80, 81)
    pmf = np.exp(-np.abs(support) / 1.5)
    from noise_gof import chi2_pvalue
    assert chi2_pvalue(z, support, pmf) > P_MIN


def test_every_dimension_up_to_32_works_and_33_is_refused():
    rng = unsafe_seeded_generator(4500)
    for d in (4, 8, 24, 32):
        z = samplers.lattice_l2_laplace(rng, d, 2.0**36, 3)
        assert z.shape == (3, d)
    assert samplers.lattice_l2_laplace(rng, 32, 2.0**37 - 1).shape == (32,)  # √32·τ just below 2^39.5
    with pytest.raises(ValueError, match="d must be ≤ 32"):
        samplers.lattice_l2_laplace(rng, 33, 10.0)
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="d must be a positive integer"):
            samplers.lattice_l2_laplace(rng, bad, 10.0)
    for bad in (0.0, -1.0, math.inf, math.nan, "3"):
        with pytest.raises(ValueError):
            samplers.lattice_l2_laplace(rng, 2, bad)
    with pytest.raises(ValueError, match="sqrt"):  # the proposal's scale √d·τ must be ≤ 2⁴⁰
        samplers.lattice_l2_laplace(rng, 4, 2.0**39 + 1.0)


def test_shapes_and_empty_size():
    rng = unsafe_seeded_generator(4600)
    assert samplers.lattice_l2_laplace(rng, 2, 5.0).shape == (2,)
    assert samplers.lattice_l2_laplace(rng, 3, 5.0, (4, 5)).shape == (4, 5, 3)
    assert samplers.lattice_l2_laplace(rng, 2, 5.0, 0).shape == (0, 2)


def test_acceptance_rate_formula():
    """d!·vol(B₂^d)/(2√d)^d: 1, 0.785, 0.0175 at d = 1, 2, 16 — the figures quoted in the docstrings."""
    from streamdp.noise.discrete import lattice_l2_acceptance_rate
    for d, want in [(1, 1.0), (2, math.pi / 4), (16, 0.0174928)]:
        got = lattice_l2_acceptance_rate(d)
        vol = math.pi ** (d / 2) / math.gamma(d / 2 + 1)
        assert got == pytest.approx(math.factorial(d) * vol / (2 * math.sqrt(d)) ** d, rel=1e-12)
        assert got == pytest.approx(want, rel=1e-5)


def test_combinations_of_signs_are_symmetric_small_tau():
    """Sanity on d = 2, τ = 1.5: the 4 sign quadrants of non-axis points are equally likely (a symmetric law)."""
    rng = unsafe_seeded_generator(4700)
    z = samplers.lattice_l2_laplace(rng, 2, 1.5, 100_000)
    z = z[np.all(z != 0, axis=1)]
    counts = [np.sum((np.sign(z[:, 0]) == a) & (np.sign(z[:, 1]) == b))
              for a, b in itertools.product((-1, 1), repeat=2)]
    assert stats.chisquare(counts).pvalue > P_MIN
