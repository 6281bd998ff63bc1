"""``config check --explain`` for ``top_k`` now that ⊥ does not count towards k* (docs/DECISIONS.md): a user present
in a run of [⊥] windows pays ε²/8 and δ in each of them and the query never stops, so the schedule charges δ in every
window and ρ up to min(N·k, k* + N − 1) items' ε²/8 through window N. It assumed ⊥ counted (ρ for ⌈k*/k⌉ windows,
δ for k*) and said a user with ρ = 100, δ = 1e-5 is never halted; a user alone in 15 quiet windows is halted in
window 11 (11·10⁻⁶ > 10⁻⁵)."""

from __future__ import annotations

import numpy as np
import pytest

from streamdp.accounting.cost import Cost
from streamdp.config.explain import explain, query_schedule
from streamdp.config.loader import parse_config
from streamdp.engine.queries.top_k import TopK
from streamdp.mechanisms.pay_what_you_get import PayWhatYouGet
from streamdp.mechanisms.unknown_domain_gumbel import BOTTOM
from streamdp.noise.generator import unsafe_seeded_generator

from engine_helpers import RecordingStore, engine, ev, run

EPS, DELTA, K, K_STAR = 1.0, 1e-6, 3, 10


def _cfg(rho: float, delta: float):
    return parse_config({"service": {"window_seconds": 10.0, "origin": 0, "horizon": 64},
                         "budget": {"zcdp_rho": rho, "zcdp_delta": delta},
                         "query": [{"id": "top", "kind": "top_k", "epsilon": EPS, "delta": DELTA, "k": K,
                                    "kbar": 4, "k_star": K_STAR}]})


class AdmitRecordingStore(RecordingStore):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.ok = {}

    def admit(self, scope, seq, users, costs, digest=None):
        ok = super().admit(scope, seq, users, costs, digest=digest)
        self.ok[seq] = dict(zip(users, np.asarray(ok).tolist()))
        return ok


def test_explain_halts_no_later_than_a_user_alone_in_quiet_windows():
    cfg = _cfg(100.0, 1e-5)
    info = explain(cfg)
    e, store = engine([TopK("top", epsilon=EPS, delta=DELTA, k=K, kbar=4, k_star=K_STAR)], Cost.zcdp(100.0, 1e-5),
                      horizon=64, store_cls=AdmitRecordingStore)
    recs = run(e, [ev("a", 10.0 * w + 1.0, ["x"]) for w in range(15)] + [ev("z", 200.0, ["y"])])
    assert all(r.values["items"] == [None] for r in recs[:15])  # one user's count of 1 is below T ≈ 16
    admitted = [w for w in range(1, 16) if store.ok[w].get("a")]
    assert admitted == list(range(1, 11))  # δ: 10·10⁻⁶ spent, the 11th window's 10⁻⁶ does not fit
    # the explanation's worst case must not promise more windows than this realised run gives
    assert info["halted_in_window"] is not None and info["halted_in_window"] <= 11
    assert (info["halted_in_window"], info["limited_by"]) == (11, "zcdp_delta")


def test_the_top_k_schedule_is_the_supremum_of_the_realised_charges():
    """S(N) = min(N·k, k* + N − 1) items: every realisable sequence of lists stays below it, and one reaches it."""
    (q,) = _cfg(100.0, 0.5).build_queries()
    s = query_schedule(q)
    unit = int(Cost.zcdp(EPS**2 / 8).to_fixed()[0])
    cum = np.cumsum([int(s.at(w)[0]) for w in range(1, 41)])
    for n in range(1, 41):
        assert cum[n - 1] == min(n * K, K_STAR + n - 1) * unit
    assert all(int(s.at(w)[1]) == int(Cost.zcdp(0, DELTA).to_fixed()[1]) for w in range(1, 200))
    # a realised run reaching it: k − 1 items and ⊥ while the counter allows, then ⊥ for ever
    m = PayWhatYouGet(EPS, DELTA, K_STAR, count_bottom=False)
    rng = unsafe_seeded_generator(5)
    paid = 0
    for n in range(1, 41):
        ki = m.next_k(K)
        ids = np.arange(ki - 1)
        out = m.release(rng, ids, np.full(ki - 1, 1e6), K, 4)  # far above T: ki − 1 items pass, then ⊥
        assert out[-1] is BOTTOM and len(out) == ki
        paid += len(out)
        assert paid == min(n * K, K_STAR + n - 1)


def test_total_cost_is_refused_when_bottom_is_not_counted():
    m = PayWhatYouGet(EPS, DELTA, K_STAR, count_bottom=False)
    with pytest.raises(ValueError, match="Thm 10 needs ⊥ counted"):
        m.total_cost()
    with pytest.raises(ValueError, match="Thm 10 needs ⊥ counted"):
        m.realised_total_cost()
    assert PayWhatYouGet(EPS, DELTA, K_STAR).total_cost().zcdp_rho == pytest.approx(K_STAR * EPS**2 / 8)
