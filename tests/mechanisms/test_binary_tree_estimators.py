"""Honaker's streaming variance-optimal estimator (tree_estimators): weights and variances recomputed here from the
inverse-variance recursion, and the streaming estimate checked against a generalised-least-squares solve of the
whole table of completed nodes (Gauss–Markov BLUE), written from scratch in this file."""

from __future__ import annotations

import numpy as np
import pytest

from streamdp.mechanisms.tree_estimators import (
    honaker_refine,
    honaker_spine_coefficients,
    honaker_weights,
    node_variances,
    running_count_variance,
)
from streamdp.noise.generator import unsafe_seeded_generator


def recursion_variances(sigma: float, levels: int) -> list[float]:
    """V_0 = σ²; V_j = (σ² · 2V_{j−1}) / (σ² + 2V_{j−1}) (inverse-variance combination of a node and its children)."""
    v = [sigma**2]
    for _ in range(1, levels):
        c = 2 * v[-1]
        v.append(sigma**2 * c / (sigma**2 + c))
    return v


def test_weights_known_values():
    w = honaker_weights(5)
    assert w[0] == 1.0
    assert w[1] == pytest.approx(2 / 3, rel=1e-15)
    assert w[2] == pytest.approx(4 / 7, rel=1e-15)
    assert w[3] == pytest.approx(8 / 15, rel=1e-15)
    # own weight = 2V_{j−1}/(σ² + 2V_{j−1}) from the recursion
    v = recursion_variances(1.0, 5)
    for j in range(1, 5):
        assert w[j] == pytest.approx(2 * v[j - 1] / (1 + 2 * v[j - 1]), rel=1e-13)


@pytest.mark.parametrize("sigma", [0.5, 1.0, 7.3])
def test_node_variances(sigma):
    assert np.allclose(node_variances(sigma, 13, "optimal"), recursion_variances(sigma, 13), rtol=1e-13)
    assert np.all(node_variances(sigma, 13, "plain") == sigma**2)
    # running count variance: Σ over the set bits of t
    for t in (1, 2, 3, 6, 11, 63, 64, 4095, 4096):
        bits = [j for j in range(t.bit_length()) if t >> j & 1]
        v = recursion_variances(sigma, t.bit_length())
        assert running_count_variance(sigma, t, "plain") == pytest.approx(len(bits) * sigma**2, rel=1e-14)
        assert running_count_variance(sigma, t, "optimal") == pytest.approx(sum(v[j] for j in bits), rel=1e-13)


def test_bad_estimator():
    with pytest.raises(ValueError, match="estimator"):
        node_variances(1.0, 3, "best")
    with pytest.raises(ValueError, match="t must be"):
        running_count_variance(1.0, 0)


@pytest.mark.parametrize("i", [0, 1, 2, 5, 12])
def test_spine_coefficients_match_recursion(i):
    rng = unsafe_seeded_generator(10 + i)
    left = rng.normal(size=(i, 50))
    raw = rng.normal(size=(i + 1, 50))
    a, b = honaker_spine_coefficients(i)
    direct = a @ raw + (b @ left if i else 0.0)
    assert np.allclose(honaker_refine(left, raw), direct, rtol=1e-12, atol=1e-12)
    # variance of the collapsed draw plus the kept left noises is the refined node variance V_i
    v = recursion_variances(1.0, i + 1)
    assert float(np.sum(a * a)) + float(sum(b[j] ** 2 * v[j] for j in range(i))) == pytest.approx(v[i], rel=1e-12)


def dyadic_nodes(t: int):
    """All nodes completed by window t: (level j, start, end) covering windows (start, end]."""
    out = []
    j = 0
    while (1 << j) <= t:
        for k in range(1, t // (1 << j) + 1):
            out.append((j, (k - 1) << j, k << j))
        j += 1
    return out


def gls_prefix_estimate(t: int, y: dict) -> tuple[float, float]:
    """BLUE of Σ_{i≤t} x_i from noisy nodes y[(j, start, end)] (i.i.d. noise): 1ᵀ(AᵀA)⁻¹Aᵀy; and its variance
    factor 1ᵀ(AᵀA)⁻¹1 (times σ²)."""
    nodes = dyadic_nodes(t)
    A = np.zeros((len(nodes), t))
    for r, (_, s, e) in enumerate(nodes):
        A[r, s:e] = 1.0
    yy = np.array([y[nd] for nd in nodes])
    ata_inv = np.linalg.inv(A.T @ A)
    xhat = ata_inv @ A.T @ yy
    return float(xhat.sum()), float(np.ones(t) @ ata_inv @ np.ones(t))


def test_streaming_estimate_is_the_gls_blue():
    """Replay the streaming recursion window by window (keeping only t−1's decomposition nodes, as the tree does)
    and compare the running estimate with the GLS solve over every completed node, for t = 1..40."""
    rng = unsafe_seeded_generator(7)
    T = 40
    x = rng.integers(0, 5, size=T).astype(float)
    noise = {}
    y = {}
    for nd in dyadic_nodes(T):
        noise[nd] = rng.normal()
        y[nd] = x[nd[1]: nd[2]].sum() + noise[nd]
    left = {}  # level -> refined value of the level-j node of the current decomposition
    for t in range(1, T + 1):
        i = (t & -t).bit_length() - 1
        raw = np.array([[y[(j, t - (1 << j), t)]] for j in range(i + 1)])
        lr = np.array([[left[j]] for j in range(i)]) if i else np.zeros((0, 1))
        z = honaker_refine(lr, raw)[0]
        for j in range(i):
            del left[j]
        left[i] = z
        streaming = sum(left.values())
        blue, var_factor = gls_prefix_estimate(t, y)
        assert streaming == pytest.approx(blue, abs=1e-9), t
        assert running_count_variance(1.0, t, "optimal") == pytest.approx(var_factor, rel=1e-9), t
        plain = sum(y[(j, (t >> j << j) - (1 << j), t >> j << j)] for j in range(t.bit_length()) if t >> j & 1)
        assert plain == pytest.approx(x[:t].sum() + sum(
            noise[(j, (t >> j << j) - (1 << j), t >> j << j)] for j in range(t.bit_length()) if t >> j & 1))
        assert var_factor <= bin(t).count("1") + 1e-12
