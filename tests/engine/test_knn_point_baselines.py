"""knn_point through the engine (in-memory store): the one-shot baselines BM1 / BM0 (Liang–Yi (adaptive budgeting) §6.4.1) and the n ≤ k rule.

Closes gaps of the mutation audit in ``streamdp/engine/queries/adaptive_point.py`` (``KNNPoint._run``). Expected
values are worked out here from Liang–Yi (adaptive budgeting), never read from the query object:

* Alg. 3 with m = 1: r_i = B_i (implementation notes on Liang–Yi (adaptive budgeting); γ_l is undefined for m = 1), so a fresh user reserves the whole
  sequence budget B; with m = 2 at l = 2, γ_2 = 1 and again r_i = B_i.
* BM1 / BM0 (Liang–Yi (adaptive budgeting) §6.4.1): ONE release per user with the whole r_i — ỹ_i = len_p(x_i) + N(0, 1/(2r_i)) (len_p is
  1-Lipschitz) or x̃_i = x_i + N(0, 1/(2r_i)·I₂) (Liang–Yi (adaptive budgeting) Lemma 3.4, K = 1: σ = 1/√(2ρ)). The executed cost is r_i:
  nothing is saved (contract §3 "reserve and settle": settle to the executed cost, here the reservation).
* A user at p (len_p = 0): BM1 releases N(0, σ²); BM0 releases ‖x̃_i − p‖ ~ Rayleigh(σ).
* units = "m" is the ledger's canonical CGP unit: the store sees the fixed-point ρ (1e-12 grid) unchanged.
"""

import math

import numpy as np
import pytest
from scipy import stats

from streamdp.accounting.cost import COMPONENTS, Cost
from streamdp.engine.queries.adaptive_point import KNNPoint

from engine_helpers import RecordingStore as SharedRecordingStore, engine, ev_at as ev, run

CGP = COMPONENTS.index("cgp_rho")
GRID = 10**12  # fixed point: 1 unit = 1e-12 ρ per m²
P_MIN = 1e-6


class RecordingStore(SharedRecordingStore):
    """Records the CGP component of every reservation and settle, as a plain int."""

    project = staticmethod(lambda c: int(c[CGP]))


@pytest.mark.statistical
@pytest.mark.parametrize("estimator", ["bm1", "bm0"])
def test_knn_point_baseline_charges_the_whole_r_i_and_its_noise_has_sigma_1_over_sqrt_2rho(estimator):
    """m = 1, B = 2 ρ per m² (2·10¹² grid units): every user reserves and pays r_i = B (Alg. 3 with m = 1; one
    release with the whole r_i). σ = 1/√(2·2) = 0.5.

    K = 3000 users exactly at p = (0, 0) and one user at (10⁶, 0) (its noisy distance ~10⁶ never ranks among the
    K smallest): the K released values are every near user's estimate, sorted — as a multiset an iid sample of
    N(0, 0.5²) (BM1) or Rayleigh(0.5) (BM0). KS accepts it at p > 1e-6, and rejects the law of a release at 2ρ
    (σ = 1/√8, the audit's mutant) at p < 1e-6 on the same sample. The stated noise_std is 0.5 for every one."""
    K, B = 3000, 2 * GRID
    q = KNNPoint("n", queries=[{"window": 1, "point": [0.0, 0.0]}], k=K, budget_rho=2.0, units="m",
                 estimator=estimator)
    e, store = engine([q], Cost(cgp_rho=10.0), seed=4201, store_cls=RecordingStore)
    pl = [ev(f"u{i}", 1.0 + 1e-4 * i, (0.0, 0.0)) for i in range(K)] + [ev("far", 2.0, (1e6, 0.0))]
    (rec,) = [r for r in run(e, pl) if r.query == "n"]
    v = rec.values
    assert v["estimator"] == estimator.upper() and v["k"] == K and v["users"] == K + 1 and v["rounds"] == 1
    users = [f"u{i}" for i in range(K)] + ["far"]
    assert all(store.admits[1][u] == B for u in users)  # reserve r_i = B_i = B
    assert all(store.charged(1, u) == B for u in users)  # settle to the executed cost: all of r_i
    assert all(int(store.get_user(u).spent[CGP]) == B for u in users)
    assert v["privacy_savings"] == pytest.approx(0.0, abs=1e-12)
    sigma = 1.0 / math.sqrt(2 * 2.0)
    assert v["noise_std"] == pytest.approx([sigma] * K, rel=1e-12)
    d = np.array(v["distances"])
    assert d.size == K and np.all(np.diff(d) >= 0) and d.max() < 100.0  # the far user is not among them
    wrong_sigma = 1.0 / math.sqrt(2 * 2 * 2.0)
    law, wrong = ((stats.norm(scale=sigma), stats.norm(scale=wrong_sigma)) if estimator == "bm1"
                  else (stats.rayleigh(scale=sigma), stats.rayleigh(scale=wrong_sigma)))
    assert stats.kstest(d, law.cdf).pvalue > P_MIN
    assert stats.kstest(d, wrong.cdf).pvalue < P_MIN


def test_knn_point_with_exactly_k_located_users_releases_nothing_and_charges_nobody():
    """n == k (Liang–Yi (adaptive budgeting) Alg. 8 has nothing to select: every located user is among the k nearest): the release carries no
    distance (k = n = 2, distances = []) and nobody pays, so their B_i is intact for the next query.

    m = 2, B = 100 ρ per m² = 10¹⁴ grid units, estimator pm1 (PIE-k, c = 4 even rounds). Window 1: a, b located
    (n = k = 2). Window 2 (l = 2 = m, γ_2 = 1): r_i = B_i — so a and b, who paid nothing, reserve the whole B
    again, as does the newcomer c. Positive control: in window 2, n = 3 > k, the query runs and every user pays at
    least their first round, r_i/4 = B/4 (even split, Liang–Yi (adaptive budgeting) §7)."""
    B = 100 * GRID
    q = KNNPoint("n", queries=[{"window": 1, "point": [0.0, 0.0]}, {"window": 2, "point": [0.0, 0.0]}], k=2,
                 budget_rho=100.0, units="m", estimator="pm1", rounds=4, split="even")
    e, store = engine([q], Cost(cgp_rho=1000.0), seed=4202, store_cls=RecordingStore)
    pl = [ev("a", 1.0, (3.0, 4.0)), ev("b", 2.0, (50.0, 0.0)),
          ev("a", 11.0, (3.0, 4.0)), ev("b", 12.0, (50.0, 0.0)), ev("c", 13.0, (0.0, 400.0))]
    r1, r2 = [r for r in run(e, pl) if r.query == "n"]
    v1 = r1.values
    assert v1["query_index"] == 1 and v1["users"] == 2
    assert v1["k"] == 2 and v1["distances"] == [] and v1["noise_std"] == []
    assert r1.realized["users_charged"] == 0
    assert store.admits[1] == {"a": B // 2, "b": B // 2}  # l = 1 of m = 2: γ_1 = 3/4, r = 3/4·(B − B) + B/2
    assert store.charged(1, "a") == 0 and store.charged(1, "b") == 0
    # window 2: B_i = B for everyone, r_i = B_i at l = m
    assert store.admits[2] == {"a": B, "b": B, "c": B}
    v2 = r2.values
    assert v2["k"] == 2 and len(v2["distances"]) == 2 and r2.realized["users_charged"] == 3
    assert all(store.charged(2, u) >= B // 4 for u in ("a", "b", "c"))
    assert {u: int(store.get_user(u).spent[CGP]) for u in "abc"} == {u: store.charged(2, u) for u in "abc"}
