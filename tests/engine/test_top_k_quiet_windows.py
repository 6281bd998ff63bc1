"""Top-k does not count ⊥ towards k* (issue 26: quiet windows — one far-future event closes thousands at once —
used to end top_k for good), while every user present still pays for ⊥ (Rogers, Unknown-Domain Algorithms,
Thm 10: |I(i)|·ε²/8 and δ per call, ⊥ included). ``PayWhatYouGet(count_bottom=True)`` keeps Alg. 4 as written."""

from __future__ import annotations

import numpy as np
import pytest

from streamdp.accounting.cost import COMPONENTS, SCALES, Cost
from streamdp.engine.queries.top_k import TopK
from streamdp.mechanisms.pay_what_you_get import PayWhatYouGet
from streamdp.mechanisms.unknown_domain_gumbel import BOTTOM
from streamdp.noise.generator import unsafe_seeded_generator

from engine_helpers import RecordingStore, engine, ev, run

EPS, DELTA = 1.0, 1e-6
RHO = COMPONENTS.index("zcdp_rho")


def test_quiet_windows_do_not_end_top_k():
    """k* = 5 and 40 windows, 38 of them quiet (an event in window 1 and one in window 40, nothing between): every
    quiet window publishes [⊥] and the query is still running at window 40 (Alg. 4 as written would have stopped
    at window 5)."""
    e, _ = engine([TopK("t", epsilon=EPS, delta=DELTA, k=2, kbar=4, k_star=5)], Cost.zcdp(100.0, 1.0), horizon=64)
    recs = run(e, [ev("a", 1.0, ["x"]), ev("b", 395.0, ["y"])])
    assert [r.seq for r in recs] == list(range(1, 41))
    quiet = recs[1:39]
    assert all(r.values["items"] == [None] and r.values["bottom"] for r in quiet)
    assert not any(r.values["stopped"] for r in recs)
    assert recs[-1].values["pwyg_used"] == 0  # no item released: nothing counted (a 1-user count stays below T)


def test_a_present_user_still_pays_for_bottom():
    """One user alone in a window: Alg. 3 returns [⊥] (a count of 1 is below T = 1 + log(k̄/δ)/ε ≈ 16), and the user
    is charged one item's ε²/8 and δ — 1/8 and 10⁻⁶, in the store's fixed point."""
    e, store = engine([TopK("t", epsilon=EPS, delta=DELTA, k=3, kbar=4, k_star=5)], Cost.zcdp(100.0, 1.0),
                      store_cls=RecordingStore)
    recs = run(e, [ev("a", 1.0, ["x"])])
    assert recs[0].values["items"] == [None]
    charged = store.charged(1, "a")
    assert charged[RHO] == round(EPS ** 2 / 8 * SCALES[RHO])
    assert charged[RHO + 1] == round(DELTA * SCALES[RHO + 1])


@pytest.mark.parametrize("count_bottom,used", [(True, 3), (False, 0)])
def test_the_mechanism_counts_bottom_only_when_asked(count_bottom, used):
    m = PayWhatYouGet(EPS, DELTA, k_star=3, count_bottom=count_bottom)
    rng = unsafe_seeded_generator(3)
    for _ in range(3):
        assert m.release(rng, [], [], k=2, kbar=2) == [BOTTOM]
    assert (m.used, m.calls, m.exhausted) == (used, 3, count_bottom)
    # a call that returns items counts them either way
    m2 = PayWhatYouGet(EPS, DELTA, k_star=3, count_bottom=count_bottom)
    assert m2.release(rng, np.arange(3), np.array([9e4, 8e4, 7e4]), k=2, kbar=2) == [0, 1]
    assert m2.used == 2
