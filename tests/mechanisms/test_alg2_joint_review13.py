"""(Review of 2026-11-23.) Rogers (unknown-domain) Alg. 2 (TopKbarGaussianHistogram) uses ONE noisy threshold
T̃ = T + c_(k̄+1) + N(0, σ²) shared by all items of the window. The existing tests check the single-item crossing
rate and the noise law of released counts; this checks the joint pass law of two items (correlated through the
shared threshold noise): Pr[both], Pr[only 1], Pr[only 2], Pr[none] computed by quadrature from the definition.
A mechanism drawing a fresh threshold per item, or forgetting c_(k̄+1), is rejected.
"""

import math

import numpy as np
from scipy import integrate, stats

from streamdp.mechanisms.unknown_domain_histogram import TopKbarGaussianHistogram, topkbar_gaussian_threshold
from streamdp.noise.generator import unsafe_seeded_generator

P = 1e-6


def joint(c1, c2, tbase, sigma):
    f = lambda z, a, b: stats.norm.pdf(z) * a(z) * b(z)  # noqa: E731
    s1 = lambda z: stats.norm.sf((tbase + sigma * z - c1) / sigma)  # noqa: E731
    s2 = lambda z: stats.norm.sf((tbase + sigma * z - c2) / sigma)  # noqa: E731
    n1 = lambda z: 1 - s1(z)  # noqa: E731
    n2 = lambda z: 1 - s2(z)  # noqa: E731
    q = lambda a, b: integrate.quad(lambda z: f(z, a, b), -12, 12, epsabs=1e-13)[0]  # noqa: E731
    return {"both": q(s1, s2), "1": q(s1, n2), "2": q(n1, s2), "none": q(n1, n2)}


def test_alg2_two_items_joint_pass_law():
    eps, delta, d0, kbar = 1.0, 0.3, 2, 2
    sigma = 1.0 / eps
    T = topkbar_gaussian_threshold(eps, delta, d0, 1.0)
    counts = np.array([9.0, 8.0, 4.0])  # top-2 = items 0, 1; c_(3) = 4
    tbase = T + 4.0
    law = joint(9.0, 8.0, tbase, sigma)
    assert abs(sum(law.values()) - 1) < 1e-9
    m = TopKbarGaussianHistogram(eps, delta, kbar, d0, 1.0, integer_output=False)
    rng = unsafe_seeded_generator(4242)
    n = 100_000
    obs = dict.fromkeys(law, 0)
    for _ in range(n):
        ids, _ = m.release(rng, np.arange(3), counts)
        s = set(ids.tolist())
        assert 2 not in s
        obs["both" if s == {0, 1} else "1" if s == {0} else "2" if s == {1} else "none"] += 1
    keys = list(law)
    o = np.array([obs[x] for x in keys], float)
    e = np.array([law[x] for x in keys]) * n
    assert stats.chisquare(o, e).pvalue > P
    # power: independent thresholds per item give another joint law
    p1 = stats.norm.sf((tbase - 9.0) / (sigma * math.sqrt(2)))
    p2 = stats.norm.sf((tbase - 8.0) / (sigma * math.sqrt(2)))
    ind = np.array([p1 * p2, p1 * (1 - p2), (1 - p1) * p2, (1 - p1) * (1 - p2)]) * n
    assert stats.chisquare(o, ind).pvalue < P
