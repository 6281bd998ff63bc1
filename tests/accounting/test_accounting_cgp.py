"""CGP accounting: distance units, GP ↔ CGP conversions (Liang–Yi (CGP) Lemma 3.6, 3.7 / App. C) and the approximate-GP
filter of Liang–Yi (adaptive budgeting) eq. (10). The minimisations are checked against brute-force grids computed here."""

from __future__ import annotations

import math

import numpy as np
import pytest

from streamdp.accounting.cgp import (
    approx_gp_filter_continue,
    approx_gp_filter_value,
    cgp_to_gp_epsilon,
    cgp_to_gp_epsilon_at,
    cgp_to_gp_epsilon_simple,
    convert_cgp_rho,
    convert_distance,
    convert_gp_epsilon,
    g_delta,
    gp_to_cgp,
    metres_per_unit,
)
from streamdp.noise.generator import unsafe_seeded_generator


def _family_bruteforce(rho: float, delta: float, lam: float) -> float:
    """min over a dense grid of s ∈ (1, 2/δ − 1] of max(g_δ(s)√ρ, sΛρ), written out from Liang–Yi (adaptive budgeting) eq. (10);
    a log-spaced grid of u = s − 1, then two zooms around the best grid point."""
    if rho == 0:
        return 0.0

    def objective(u):
        s = 1.0 + u
        inner = np.maximum(np.log(2.0 / ((s + 1.0) * delta)), 0.0)
        g = s / (s - 1.0) * 2.0 * np.sqrt(inner)
        return np.maximum(g * math.sqrt(rho), s * lam * rho)

    lo, hi = math.log(1e-12), math.log(2.0 / delta - 2.0)
    best = math.inf
    for _ in range(3):
        t = np.linspace(lo, hi, 20001)
        v = objective(np.exp(t))
        i = int(np.argmin(v))
        best = min(best, float(v[i]))
        lo, hi = t[max(i - 1, 0)], t[min(i + 1, t.size - 1)]
    return best


# ------------------------------------------------------------------------------------------------------ units
def test_cgp_rho_metres_to_km_multiplies_by_1e6():
    assert convert_cgp_rho(5e-5, "m", "km") == pytest.approx(50.0, rel=1e-15)
    assert convert_cgp_rho(50.0, "km", "m") == pytest.approx(5e-5, rel=1e-15)
    # ρ·d² is invariant: 5e-5 per m² at 2000 m  ==  50 per km² at 2 km
    km = convert_distance(2000.0, "m", "km")
    assert 5e-5 * 2000.0**2 == pytest.approx(convert_cgp_rho(5e-5, "m", "km") * km**2)
    assert convert_cgp_rho(1.0, "ft", "m") == pytest.approx(1 / 0.3048**2)
    assert convert_cgp_rho(1.0, 1.0, 1000.0) == pytest.approx(1e6)  # numeric units: metres per unit


def test_gp_epsilon_and_distance_units():
    assert convert_gp_epsilon(0.001, "m", "km") == pytest.approx(1.0)  # 0.001 per metre = 1 per km
    assert convert_distance(1500.0, "m", "km") == pytest.approx(1.5)
    assert metres_per_unit("mi") == 1609.344
    with pytest.raises(ValueError, match="unknown distance unit"):
        convert_cgp_rho(1.0, "m", "furlong")
    with pytest.raises(ValueError, match="rho"):
        convert_cgp_rho(-1.0, "m", "km")
    with pytest.raises(ValueError, match="distance unit"):
        metres_per_unit(0.0)


def test_gp_to_cgp():
    assert gp_to_cgp(0.2) == pytest.approx(0.02)  # Liang–Yi (CGP) Lemma 3.6: ε²/2
    assert np.allclose(gp_to_cgp([1.0, 2.0]), [0.5, 2.0])
    with pytest.raises(ValueError, match="epsilon"):
        gp_to_cgp(-0.1)


# ----------------------------------------------------------------------------------------------- CGP → GP
def test_g_delta_formula_and_domain():
    s, d = 3.0, 1e-6
    assert g_delta(s, d) == pytest.approx(s / (s - 1) * 2 * math.sqrt(math.log(2 / ((s + 1) * d))))
    assert g_delta(2 / d - 1, d) == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match="s must be > 1"):
        g_delta(1.0, d)
    with pytest.raises(ValueError, match="2/delta"):
        g_delta(4 / d, d)


@pytest.mark.parametrize("rho,delta,lam", [(5e-5, 1e-10, 10.0), (0.01, 1e-10, 10.0), (1.0, 1e-6, 1.0),
                                           (2.5e-4, 1e-3, 100.0), (1e-3, 0.2, 3.0), (50.0, 1e-12, 0.01)])
def test_family_minimum_matches_bruteforce(rho, delta, lam):
    eps = cgp_to_gp_epsilon(rho, delta, lam)
    brute = _family_bruteforce(rho, delta, lam)
    assert eps <= brute * (1 + 1e-12)
    assert eps == pytest.approx(brute, rel=1e-9)
    assert eps <= cgp_to_gp_epsilon_simple(rho, delta, lam)
    # the closed form's own s (Liang–Yi (CGP) App. C) is a family member below the closed form
    s = 1 + 2 * math.sqrt(rho * math.log(1 / delta)) / (rho * lam)
    if s <= 2 / delta - 1:
        assert cgp_to_gp_epsilon_at(s, rho, delta, lam) <= cgp_to_gp_epsilon_simple(rho, delta, lam) * (1 + 1e-12)


def test_simple_form_and_paper_anchor():
    # Liang–Yi (CGP) §3.3: "ρ ≈ 0.01-CGP is at least as strong as (ε = 1, δ = 1e-10, Δ ≈ 10)-GP".
    simple = cgp_to_gp_epsilon_simple(0.01, 1e-10, 10.0)
    assert simple == pytest.approx(0.01 * 10 + 2 * math.sqrt(0.01 * math.log(1e10)))
    assert 1.0 < cgp_to_gp_epsilon(0.01, 1e-10, 10.0) < 1.03 < simple
    assert cgp_to_gp_epsilon(0.0, 1e-6, 5.0) == 0.0
    with pytest.raises(ValueError, match="Delta"):
        cgp_to_gp_epsilon(0.1, 1e-6, float("inf"))


# ------------------------------------------------------------------------------------------- filter eq. (10)
def test_approx_gp_filter_against_bruteforce():
    rng = unsafe_seeded_generator(20240501)
    n, checked = 60, 0
    sum_r = 10 ** rng.uniform(-6, 0, n)
    delta = 10 ** rng.uniform(-12, -2, n)
    lam = 10 ** rng.uniform(-1, 2, n)
    values = approx_gp_filter_value(sum_r, delta, lam)
    for i in range(n):
        brute = _family_bruteforce(sum_r[i], delta[i], lam[i])
        assert values[i] == pytest.approx(brute, rel=1e-9)
        for B in (brute * 0.98, brute * 1.02, 10 ** rng.uniform(-3, 1)):
            if abs(B - brute) < 1e-6 * brute:
                continue  # too close to the boundary for a grid to decide
            assert bool(approx_gp_filter_continue(sum_r[i], B, delta[i], lam[i])) == (brute <= B)
            checked += 1
    assert checked >= 2 * n
    # vectorised call == element-wise calls
    B = np.full(n, 0.5)
    vec = approx_gp_filter_continue(sum_r, B, delta, lam)
    assert vec.dtype == bool and vec.shape == (n,)
    assert list(vec) == [approx_gp_filter_continue(sum_r[i], 0.5, delta[i], lam[i]) for i in range(n)]


def test_filter_edges_and_monotonicity():
    assert approx_gp_filter_continue(0.0, 0.0, 1e-6, 1.0) is True  # nothing spent: CONT even at B = 0
    assert approx_gp_filter_continue(1e-9, 0.0, 1e-6, 1.0) is False
    v = approx_gp_filter_value(np.geomspace(1e-6, 10, 50), 1e-8, 2.0)
    assert np.all(np.diff(v) > 0)
    # the filter is the CGP → GP family with ρ = Σr and Δ = Λ
    assert approx_gp_filter_value(0.03, 1e-8, 2.0) == cgp_to_gp_epsilon(0.03, 1e-8, 2.0)
    # HALT exactly where the family minimum crosses B
    b = cgp_to_gp_epsilon(0.03, 1e-8, 2.0)
    assert approx_gp_filter_continue(0.03, b * (1 + 1e-9), 1e-8, 2.0)
    assert not approx_gp_filter_continue(0.03, b * (1 - 1e-9), 1e-8, 2.0)
    with pytest.raises(ValueError, match="Lambda"):
        approx_gp_filter_continue(0.1, 1.0, 1e-6, float("inf"))
    with pytest.raises(ValueError, match="Lambda"):
        approx_gp_filter_continue(0.1, 1.0, 1e-6, 0.0)
    with pytest.raises(ValueError, match="sum_r"):
        approx_gp_filter_continue(-0.1, 1.0, 1e-6, 1.0)
    with pytest.raises(ValueError, match="budget_eps"):
        approx_gp_filter_continue(0.1, -1.0, 1e-6, 1.0)
    with pytest.raises(ValueError, match="delta"):
        approx_gp_filter_continue(0.1, 1.0, 1.0, 1.0)
