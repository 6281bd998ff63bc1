"""(Review of 2026-11-23.) the JOINT law over time of the running-count noise of an item
that first appears at a later window T (Rogers (unknown-domain) §4.3: "fresh noise to each prior partial sum for the new item", drawn
once and kept). The existing tests check the marginal law at each t and that stored values are never redrawn; this
checks the whole covariance matrix across t = T..L, which catches a past node drawn for the wrong level, a node
re-used across levels, or nodes of the late item shared with (or correlated to) an early item's nodes.

Expected covariances written from the definitions (not from the code):
* plain: Cov(err(t), err(t')) = σ²·|nodes(t) ∩ nodes(t')|, nodes(u) = the dyadic decomposition of (0, u];
* optimal: coefficients over raw nodes from Honaker's recursion z = w·y + (1 − w)(z_l + z_r), w_j = 2V/(σ²+2V).
"""

import math

import numpy as np
import pytest
from scipy import stats

from streamdp.mechanisms.binary_tree import UnknownDomainBinaryTree
from streamdp.noise.generator import unsafe_seeded_generator

P_EACH = 1e-7


def chain(t):
    out = []
    while t > 0:
        out.append(t)
        t &= t - 1
    return out


def node(p):
    j = (p & -p).bit_length() - 1
    return (j, p >> j)


def vopt(j):
    v = 1.0
    for _ in range(j):
        v = 2 * v / (1 + 2 * v)
    return v


def refined(j, k, est):
    if est == "plain" or j == 0:
        return {(j, k): 1.0}
    c = 2 * vopt(j - 1)
    w = c / (1 + c)
    out = {(j, k): w}
    for ch in ((j - 1, 2 * k - 1), (j - 1, 2 * k)):
        for nd, v in refined(*ch, est).items():
            out[nd] = out.get(nd, 0.0) + (1 - w) * v
    return out


def coef(u, est):
    out = {}
    for p in chain(u):
        for nd, v in refined(*node(p), est).items():
            out[nd] = out.get(nd, 0.0) + v
    return out


def theory_cov(ts, sigma, est):
    cs = [coef(t, est) for t in ts]
    m = np.zeros((len(ts), len(ts)))
    for a in range(len(ts)):
        for b in range(len(ts)):
            m[a, b] = sigma**2 * sum(v * cs[b].get(nd, 0.0) for nd, v in cs[a].items())
    return m


@pytest.mark.parametrize("noise, est, T", [("gaussian", "plain", 6), ("discrete_gaussian", "plain", 6),
                                            ("gaussian", "optimal", 6), ("gaussian", "plain", 11),
                                            ("gaussian", "optimal", 13)])
@pytest.mark.parametrize("keep_history", [False, True])
def test_late_item_noise_covariance_over_time(noise, est, T, keep_history):
    sigma, L, n = 2.0, 16, 20_000
    tr = UnknownDomainBinaryTree(L, sigma, 1e-9, noise=noise, estimator=est, keep_history=keep_history)
    rng = unsafe_seeded_generator(7000 + T + 100 * keep_history + 10 * (est == "optimal") + (noise != "gaussian"))
    early, late = np.arange(n), np.arange(n, 2 * n)
    ts = list(range(T, L + 1))
    errs_late, errs_early = [], []
    for t in range(1, L + 1):
        ids = early if t == 1 else (late if t == T else np.zeros(0, dtype=np.int64))
        tr.step(ids, np.ones(ids.size, dtype=np.int64), rng)
        if t >= T:
            errs_late.append(tr.noisy_running_counts(late) - 1.0)
            errs_early.append(tr.noisy_running_counts(early) - 1.0)
    X = np.array(errs_late, dtype=float)  # [len(ts), n]
    Y = np.array(errs_early, dtype=float)
    S = np.cov(X)
    th = theory_cov(ts, sigma, est)
    d = np.sqrt(np.diag(th))
    zmax = stats.norm.isf(P_EACH / 2)
    for a in range(len(ts)):
        for b in range(a, len(ts)):
            se = math.sqrt((th[a, a] * th[b, b] + th[a, b] ** 2) / n)
            z = (S[a, b] - th[a, b]) / se
            assert abs(z) < zmax, (ts[a], ts[b], S[a, b], th[a, b])
    # late and early items' noises are independent (no node shared across items)
    C = (X - X.mean(1, keepdims=True)) @ (Y - Y.mean(1, keepdims=True)).T / (n - 1)
    for a in range(len(ts)):
        for b in range(len(ts)):
            se = d[a] * d[b] / math.sqrt(n)
            assert abs(C[a, b]) / se < zmax, (ts[a], ts[b], C[a, b])
