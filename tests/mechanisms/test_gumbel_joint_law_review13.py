"""(Review of 2026-11-23.) the FULL output law of Rogers (unknown-domain) Alg. 3 (UnknownDomainGumbel),
threshold binding, ⊥ included.

All noises (T̃'s and the items') are i.i.d. Gumbel(β), so the order of the noisy scores {c_i + G_i} ∪ {T + c_(k̄+1)
+ G_0} is Plackett–Luce with weights exp(score/β). The released list is the items before the threshold in that
order (at most k of them), followed by ⊥ iff fewer than k. Exact probabilities computed here from that definition;
χ² at fixed seed. Existing tests only check the order far above T̃ and the single-item crossing rate.
"""

import itertools
import math

import numpy as np
from scipy import stats

from streamdp.mechanisms.unknown_domain_gumbel import BOTTOM, UnknownDomainGumbel
from streamdp.noise.generator import unsafe_seeded_generator

P = 1e-6


def pl_prefix_prob(weights, prefix):
    """Plackett–Luce probability that the first len(prefix) picks are exactly `prefix`."""
    rem = dict(weights)
    p = 1.0
    for x in prefix:
        p *= rem[x] / sum(rem.values())
        del rem[x]
    return p


def exact_law(counts, eps, delta, k, kbar):
    T = 1 + math.log(kbar / delta) / eps
    order = sorted(range(len(counts)), key=lambda i: (-counts[i], i))
    top = order[:kbar]
    c_next = counts[order[kbar]] if len(counts) > kbar else 0.0
    w = {i: math.exp(eps * counts[i]) for i in top}
    w["T"] = math.exp(eps * (T + c_next))
    law = {}
    for m in range(0, k + 1):
        for prefix in itertools.permutations(top, m):
            if m < k:
                # m items then the threshold
                law[tuple(prefix) + (BOTTOM,)] = pl_prefix_prob(w, list(prefix) + ["T"])
            else:
                law[tuple(prefix)] = pl_prefix_prob(w, list(prefix))
    return law


def test_alg3_full_output_law_with_binding_threshold():
    eps, delta, k, kbar = 1.0, 0.2, 2, 3
    # 5 items: the top 3 are considered, c_(4) = 2 lifts T̃; T + c_next ≈ 1 + log(15) + 2 ≈ 5.7
    counts = [7.0, 6.0, 5.0, 2.0, 1.0]
    law = exact_law(counts, eps, delta, k, kbar)
    assert abs(sum(law.values()) - 1) < 1e-12
    m = UnknownDomainGumbel(eps, delta, k, kbar)
    rng = unsafe_seeded_generator(9101)
    n = 60_000
    obs = dict.fromkeys(law, 0)
    ids = np.arange(len(counts))
    for _ in range(n):
        out = tuple(m.release(rng, ids, np.array(counts)))
        assert out in obs, out
        obs[out] += 1
    keys = list(law)
    exp = np.array([law[x] for x in keys]) * n
    o = np.array([obs[x] for x in keys], dtype=float)
    big = exp >= 5
    assert (~big).sum() == 0 or exp[~big].sum() >= 5 or o[~big].sum() == 0
    o2, e2 = o[big], exp[big]
    assert o[~big].sum() <= 5
    assert stats.chisquare(o2, e2).pvalue > P
    # power: the law with the threshold NOT lifted by c_(k̄+1) is rejected
    bad = exact_law(counts[:3], eps, delta, k, kbar)  # only 3 items: c_next = 0
    eb = np.array([bad.get(x, 0.0) for x in keys]) * n
    eb2 = eb[big]
    assert stats.chisquare(o2, eb2 * o2.sum() / eb2.sum()).pvalue < P
