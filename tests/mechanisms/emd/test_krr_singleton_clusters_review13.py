"""The clustered k-RR with singleton clusters (g = 1) is the plain k-RR: γ is unused. A small γ used to be refused
by the inverse's separation check on 1 − e^{−α0·γ}, and the estimator divided by p − q, a quantity that does not
exist when no two items share a cluster (review of 2026-11-23)."""
import numpy as np
import pytest
from scipy import stats

from streamdp.mechanisms.emd.freq_est import ClusteredKRR, apply_clustered_inverse, clustered_krr_matrix
from streamdp.noise.generator import unsafe_seeded_generator


@pytest.mark.parametrize("gamma", [1e-12, 0.3, 1.0])
def test_singleton_clusters_are_plain_krr_whatever_gamma(gamma):
    c, a0 = 6, 0.7
    krr = ClusteredKRR(c, 1, gamma, a0)  # accepted for any γ in (0, 1]
    z = 1 + (c - 1) * np.exp(-a0)  # plain k-RR: keep w.p. 1/Z, each other item w.p. e^{−α0}/Z
    assert krr.p == pytest.approx(1 / z, rel=1e-15) and krr.r == pytest.approx(np.exp(-a0) / z, rel=1e-15)
    t = clustered_krr_matrix(c, 1, gamma, a0)
    assert np.allclose(t, np.where(np.eye(c) > 0, 1 / z, np.exp(-a0) / z), rtol=1e-14, atol=0)
    v = np.arange(1.0, c + 1.0)
    assert np.allclose(apply_clustered_inverse(t @ v, c, 1, gamma, a0), v, rtol=1e-12, atol=1e-12)
    # the sampler's law: χ² of 2·10⁵ reports of item 0 against (1/Z, e^{−α0}/Z, …) at p = 1e-6
    y = krr.randomize(unsafe_seeded_generator(4), np.zeros(200_000, dtype=np.int64))
    obs = np.bincount(y, minlength=c)
    assert stats.chisquare(obs, y.size * t[:, 0]).pvalue > 1e-6
