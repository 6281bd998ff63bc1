"""Range counting (Liang–Yi (adaptive budgeting) Alg. 6): Proj_Γ (App. A), the App. B shift, PM vs BM, costs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from streamdp.accounting.cost import Cost
from streamdp.mechanisms.adaptive.range_count import (
    Rectangle,
    count_error,
    eta_threshold,
    range_count_baseline,
    range_count_baseline_cost,
    range_count_pie,
    range_count_pie_cost,
    shift_coefficient,
    true_range_count,
)
from streamdp.mechanisms.adaptive.synthetic import random_squares, synthetic_trajectories
from streamdp.noise.generator import unsafe_seeded_generator


# --------------------------------------------------------------------------------------- Proj_Γ (App. A)
def app_a_proj(x, u, v, w, z):
    """Liang–Yi (adaptive budgeting) App. A, literally: projection parameters a onto the four edge lines, inside iff all in [0, 1];
    distance = min over the edges of ‖c u + (1 − c) v − x‖ with c = clip(a, 0, 1); negated inside."""
    x = np.asarray(x, float)
    edges = [(u, v), (u, w), (v, z), (w, z)]
    inside = True
    dist = math.inf
    for p, q in edges:
        p, q = np.asarray(p, float), np.asarray(q, float)
        a = ((x[0] - q[0]) * (p[0] - q[0]) + (x[1] - q[1]) * (p[1] - q[1])) / ((p[0] - q[0]) ** 2 + (p[1] - q[1]) ** 2)
        inside &= 0.0 <= a <= 1.0
        cc = min(max(a, 0.0), 1.0)
        dist = min(dist, float(np.hypot(*(cc * p + (1 - cc) * q - x))))
    return -dist if inside else dist


SQUARE = Rectangle.axis_aligned(0.0, 0.0, 4.0, 2.0)  # l = 4 along x, w = 2 along y


@pytest.mark.parametrize(
    "pt,expected",
    [
        ((2.0, 1.0), -1.0),  # centre: nearest edges are the long ones, 1 away
        ((0.5, 1.0), -0.5),  # inside, near the left edge
        ((3.9, 0.2), -0.1),  # inside, nearest the right edge
        ((5.0, 1.0), 1.0),  # outside, beyond the right edge
        ((2.0, -3.0), 3.0),  # outside, below
        ((7.0, 6.0), 5.0),  # outside near the corner (4, 2): 3-4-5
        ((-3.0, -4.0), 5.0),  # outside near the corner (0, 0)
        ((4.0, 2.0), 0.0),  # at a corner
        ((0.0, 1.3), 0.0),  # on an edge
    ],
)
def test_proj_known_answers(pt, expected):
    got = SQUARE.proj(np.array([pt]))[0]
    assert got == pytest.approx(expected, abs=1e-12)
    assert app_a_proj(pt, (0, 0), (4, 0), (0, 2), (4, 2)) == pytest.approx(expected, abs=1e-12)


def test_proj_matches_app_a_on_rotated_rectangles():
    rng = unsafe_seeded_generator(1)
    for _ in range(20):
        c = rng.uniform(-10, 10, 2)
        l, w, ang = rng.uniform(0.5, 8), rng.uniform(0.5, 8), rng.uniform(-math.pi, math.pi)
        e1 = np.array([math.cos(ang), math.sin(ang)])
        e2 = np.array([-math.sin(ang), math.cos(ang)])
        u = c - l / 2 * e1 - w / 2 * e2
        v = u + l * e1
        w_ = u + w * e2
        z = v + w * e2
        rect = Rectangle.from_vertices(u, v, w_, z)
        assert rect.length == pytest.approx(l) and rect.width == pytest.approx(w)
        pts = c + rng.uniform(-10, 10, (200, 2))
        got = rect.proj(pts)
        ref = np.array([app_a_proj(p, u, v, w_, z) for p in pts])
        np.testing.assert_allclose(got, ref, atol=1e-9)
        np.testing.assert_array_equal(rect.contains(pts), got <= 0)


def test_proj_is_one_lipschitz():
    rng = unsafe_seeded_generator(2)
    rect = Rectangle(1.0, -2.0, 3.0, 0.5, 0.7)
    a = rng.uniform(-6, 6, (20000, 2))
    b = a + rng.normal(0, 1.0, a.shape) * rng.uniform(0, 3, (20000, 1))
    lhs = np.abs(rect.proj(a) - rect.proj(b))
    rhs = np.hypot(*(a - b).T)
    assert np.all(lhs <= rhs + 1e-12)  # Liang–Yi (adaptive budgeting) Lemma 6.3
    assert np.max(lhs / np.maximum(rhs, 1e-300)) > 0.99  # and the constant 1 is attained


def test_rectangle_validation():
    with pytest.raises(ValueError, match="length"):
        Rectangle(0, 0, 0.0, 1.0)
    with pytest.raises(ValueError, match="width"):
        Rectangle(0, 0, 1.0, -1.0)
    with pytest.raises(ValueError, match="xmin"):
        Rectangle.axis_aligned(1, 0, 0, 1)
    with pytest.raises(ValueError, match="rectangle"):
        Rectangle.from_vertices((0, 0), (1, 0), (0.2, 1), (1, 1))  # a parallelogram
    with pytest.raises(ValueError, match="points"):
        SQUARE.proj(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="points"):
        SQUARE.proj(np.array([[np.nan, 0.0]]))


# ----------------------------------------------------------------------------------------- App. B shift
def _band_areas(a, g, l, w):
    outer = (l + 2 * (1 - a) * g) * (w + 2 * (1 - a) * g) - l * w
    inner = l * w - max(l - 2 * (1 + a) * g, 0) * max(w - 2 * (1 + a) * g, 0)
    if not (l > 2 * g and w > 2 * g):
        inner = l * w  # App. B: R1 has zero area in this case
    return outer, inner


@pytest.mark.parametrize("g,l,w", [(1.0, 10.0, 6.0), (0.3, 1.0, 1.0), (70.0, 1000.0, 2000.0), (2.0, 3.0, 10.0),
                                   (5.0, 1.0, 2.0), (224.0, 100.0, 100.0)])
def test_shift_coefficient_known_answer(g, l, w):
    a = shift_coefficient(g, l, w)
    if l > 2 * g and w > 2 * g:
        expected = (4 * g * (l + w) - 4 * g * math.sqrt((l + w) ** 2 - 16 * g * g)) / (16 * g * g)
    else:
        expected = (8 * g * g + 2 * g * (l + w) - 2 * g * math.sqrt((l + w) ** 2 + 4 * l * w)) / (8 * g * g)
    assert a == pytest.approx(expected, rel=1e-12)
    assert 0.0 <= a <= 1.0
    outer, inner = _band_areas(a, g, l, w)
    assert outer == pytest.approx(inner, rel=1e-9)  # the defining equation of App. B


@pytest.mark.parametrize(
    "g,l,w,a_hand",
    [
        # l, w > 2γ: a solves 2γa² − (l+w)a + 2γ = 0; γ = 2, l + w = 17: √(17² − 64) = 15, a = (17 − 15)/8 = 1/4
        (2.0, 8.5, 8.5, 0.25),
        (2.0, 10.0, 7.0, 0.25),
        # γ = 1, l + w = 5: √(25 − 16) = 3, a = (5 − 3)/4 = 1/2
        (1.0, 2.5, 2.5, 0.5),
        # 2γ ≥ l: 4γ²(1−a)² + 2γ(l+w)(1−a) = lw; γ = 5, l = 4, w = 6: 100(1−a)² + 100(1−a) = 24 ⇒ 1 − a = 1/5
        (5.0, 4.0, 6.0, 0.8),
        # only one side ≤ 2γ (still the second case): γ = 5, l = 4, w = 21: 100(1−a)² + 250(1−a) = 84 ⇒ 1 − a = 3/10
        (5.0, 4.0, 21.0, 0.7),
        (5.0, 21.0, 4.0, 0.7),
        # γ = 1/2, l = w = 1: (1−a)² + 2(1−a) = 1 ⇒ 1 − a = √2 − 1, a = 2 − √2
        (0.5, 1.0, 1.0, 2.0 - math.sqrt(2.0)),
    ],
)
def test_shift_coefficient_hand_values(g, l, w, a_hand):
    assert shift_coefficient(g, l, w) == pytest.approx(a_hand, rel=1e-12)


def _paper_eta(gamma, l, w):
    """η(γ) of Liang–Yi (adaptive budgeting) App. B, the final case display, literally (no a(γ) in between):
    l, w > 2γ: −(4γ(l+w) − 4γ√((l+w)² − 16γ²))/(16γ);  else: −(8γ² + 2γ(l+w) − 2γ√((l+w)² + 4lw))/(8γ)."""
    if l > 2 * gamma and w > 2 * gamma:
        return -(4 * gamma * (l + w) - 4 * gamma * math.sqrt((l + w) ** 2 - 16 * gamma**2)) / (16 * gamma)
    return -(8 * gamma**2 + 2 * gamma * (l + w) - 2 * gamma * math.sqrt((l + w) ** 2 + 4 * l * w)) / (8 * gamma)


def test_eta_threshold_known_answer():
    """η_i = η(1/√(2ρ_i)) (Liang–Yi (adaptive budgeting) App. B, last paragraph: γ = the std of the Gaussian noise Z/√(2ρ_i) on Proj_Γ)."""
    # hand values: ρ = 1/8 ⇒ γ = 2, l = w = 8.5 ⇒ a = 1/4, η = −1/2;
    #              ρ = 1/50 ⇒ γ = 5, (l, w) = (4, 6) ⇒ a = 4/5, η = −4
    assert eta_threshold(1 / 8, 8.5, 8.5) == pytest.approx(-0.5, rel=1e-12)
    assert eta_threshold(1 / 50, 4.0, 6.0) == pytest.approx(-4.0, rel=1e-12)
    assert eta_threshold(1 / 50, 4.0, 21.0) == pytest.approx(-3.5, rel=1e-12)  # a = 7/10 (one side ≤ 2γ)
    # vectorised, both branches (γ = 1/√(2ρ) ≈ 707 > 150 = w/2 for ρ = 1e-6): the paper's display, written out
    rho = np.array([1e-6, 1e-4, 1e-2, 1.0])
    expected = np.array([_paper_eta(1 / math.sqrt(2 * r), 500.0, 300.0) for r in rho])
    got = eta_threshold(rho, 500.0, 300.0)
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert np.all(got <= 0)


# --------------------------------------------------------------------------------------- mechanisms
def test_costs_are_cgp():
    assert range_count_baseline_cost(0.3) == Cost.cgp(0.3)
    assert range_count_pie_cost(0.1) == Cost.cgp(0.1)


@pytest.mark.statistical
def test_bm1_noise_law():
    rng = unsafe_seeded_generator(7)
    n, rho = 20000, 0.02
    x = np.column_stack([np.linspace(-20, 20, n), np.zeros(n)])
    rect = Rectangle.square((0.0, 0.0), 10.0)
    # BM1 without shift counts ỹ_i < 0: for each user P = Φ(−Proj_Γ(x_i)·√(2ρ)); compare mean and variance
    p = stats.norm.cdf(-rect.proj(x) * math.sqrt(2 * rho))
    ests = [range_count_baseline(rng, x, rect, rho, privatization="distance", shift=False).estimate for _ in range(300)]
    mean, var = p.sum(), (p * (1 - p)).sum()
    assert abs(np.mean(ests) - mean) < 5 * math.sqrt(var / 300)
    assert 0.7 * var < np.var(ests) < 1.4 * var


def test_everyone_far_from_the_boundary_is_counted_exactly_with_savings():
    rng = unsafe_seeded_generator(8)
    inside = rng.uniform(40, 60, (300, 2))
    outside = rng.uniform(200, 300, (700, 2))
    x = np.vstack([inside, outside])
    rect = Rectangle.axis_aligned(0, 0, 100, 100)
    for priv in ("point", "distance"):
        res = range_count_pie(rng, x, rect, 1.0, privatization=priv, c=4)
        assert res.estimate == 300 and res.s1_count == 300 and res.survivors == 0 and res.rounds == 1
        np.testing.assert_allclose(res.executed_rho, 0.25)
        assert res.privacy_savings == pytest.approx(0.75)
        assert res.n_eliminated_early == 1000


@pytest.mark.parametrize("privatization", ["point", "distance"])
def test_elimination_thresholds_are_the_boundary(privatization):
    """ν_low = ν_high = 0 (Alg. 6 line 1): with tiny noise, users 0.5 inside / outside are categorised at once."""
    rng = unsafe_seeded_generator(12)
    x = np.array([[0.5, 1.0], [-0.5, 1.0], [3.5, 1.0], [4.5, 0.5]] * 50)
    res = range_count_pie(rng, x, SQUARE, 1e4, privatization=privatization, c=4)
    assert res.survivors == 0 and res.rounds == 1
    assert res.s1_count == 100 and res.estimate == 100


@pytest.mark.statistical
def test_pm_close_to_bm_with_savings():
    """Liang–Yi (adaptive budgeting) §7.1: PM errors ≈ BM errors while PrivSav > 0 (synthetic trajectories, 2 km squares).

    Absolute count errors averaged over 20 ranges × 8 repetitions per ρ (relative errors of ranges holding one
    or two users are too noisy to compare at this size)."""
    rng = unsafe_seeded_generator(9)
    x = synthetic_trajectories(rng, 3000, 1)[0]
    rects = random_squares(rng, x, 2000.0, 20)
    for rho in (1e-5, 1e-4):
        errs = {k: [] for k in ("BM0", "PM0", "BM1", "PM1")}
        sav = {"PM0": [], "PM1": []}
        for rect in rects:
            truth = true_range_count(x, rect)
            for _ in range(8):
                for priv in ("point", "distance"):
                    b = range_count_baseline(rng, x, rect, rho, privatization=priv)
                    p = range_count_pie(rng, x, rect, rho, privatization=priv, c=8, split="doubling")
                    errs[b.method].append(abs(b.estimate - truth))
                    errs[p.method].append(abs(p.estimate - truth))
                    sav[p.method].append(p.privacy_savings)
                    assert np.all(p.executed_rho <= rho) and np.all(b.executed_rho == rho)
        for bm, pm in (("BM0", "PM0"), ("BM1", "PM1")):
            e_b, e_p = np.mean(errs[bm]), np.mean(errs[pm])
            assert e_p <= 1.2 * e_b, (rho, bm, e_b, pm, e_p)  # no worse (PM may be better: see report)
            assert np.mean(sav[pm]) > 0.5


@pytest.mark.statistical
def test_shift_reduces_overcount_at_small_rho():
    """Liang–Yi (adaptive budgeting) App. B: uniform density around Γ, ỹ < 0 over-counts (more area outside); the shift fixes it."""
    rng = unsafe_seeded_generator(10)
    x = rng.uniform(-3000, 3000, (20000, 2))
    rect = Rectangle.square((0.0, 0.0), 1000.0)
    truth = true_range_count(x, rect)
    rho = 2e-6  # σ = 500
    no = [range_count_baseline(rng, x, rect, rho, shift=False).estimate for _ in range(60)]
    yes = [range_count_baseline(rng, x, rect, rho, shift=True).estimate for _ in range(60)]
    assert np.mean(no) - truth > 5 * np.std(no) / math.sqrt(60)  # biased upwards
    assert abs(np.mean(yes) - truth) < abs(np.mean(no) - truth) / 3


def test_range_count_validation_and_empty():
    rng = unsafe_seeded_generator(11)
    rect = SQUARE
    with pytest.raises(ValueError, match="privatization"):
        range_count_pie(rng, np.zeros((2, 2)), rect, 1.0, privatization="both")
    with pytest.raises(ValueError, match="rho"):
        range_count_pie(rng, np.zeros((2, 2)), rect, [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="rho"):
        range_count_baseline(rng, np.zeros((2, 2)), rect, 0.0)
    with pytest.raises(ValueError, match="beta"):
        range_count_pie(rng, np.zeros((2, 2)), rect, 1.0, beta=1.5)
    with pytest.raises(ValueError, match="x must"):
        range_count_pie(rng, np.zeros((2, 3)), rect, 1.0)
    with pytest.raises(ValueError, match="truth"):
        count_error(3, 0)
    empty = range_count_pie(rng, np.zeros((0, 2)), rect, 1.0)
    assert empty.estimate == 0 and empty.privacy_savings == 0.0
    assert range_count_baseline(rng, np.zeros((0, 2)), rect, 1.0).estimate == 0
