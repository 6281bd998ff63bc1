"""emd_frequency when its item names are not bound at prepare time (module docs of streamdp/engine/queries/emd.py).

The engine binds its name table before every prepare (``ReleaseEngine.close_window``), so through the engine every
item id is resolvable and this path never runs; a query used without ``bind_names`` (or after its table was
swapped) must still reserve enough. These tests call the query's ``prepare``/``release`` directly on a hand-made
window. Expected costs from Imola et al. (EMD)'s item-wise composition: a user with m items in the domain pays α = m·α0, δ = 0
(``delta`` = 0; Imola et al. (EMD) §4.2, Thm 4.4 local model), so with α0 = 0.4 and max_items = 3:

    α(1) = 0.4, α(2) = 0.8, α(3) = 1.2;  a user with more than max_items items is left out and pays nothing.

A user whose ids are unresolved may turn out to have any size up to min(#items, max_items) in the domain, so the
reservation must be the largest cost over those sizes: ≥ α(2) = 2·0.4 for 2 unresolved items (α(1) = 0.4 would
under-reserve), α(3) for 4 unresolved items.
"""

import math

import numpy as np
import pytest

from streamdp.accounting.cost import COMPONENTS, LOSS_SCALE, N_COMPONENTS
from streamdp.engine.queries.emd import EMDFrequency
from streamdp.engine.query import Names, Reservation, WindowData
from streamdp.noise.generator import unsafe_seeded_generator

ALPHA = COMPONENTS.index("emd_alpha")
DELTA = COMPONENTS.index("emd_delta")
CL = {"A": ["a1", "a2"], "B": ["b1", "b2"]}
A0 = 0.4


def fixed_up(x, scale=LOSS_SCALE):
    v = math.ceil(x * scale)
    return v + 1 if v / scale < x else v


def window(events):
    """A WindowData of ``events`` = [(user id, [item ids])], one event per entry."""
    n = len(events)
    counts = [len(items) for _, items in events]
    return WindowData(seq=1, epoch=0, t=1, start=0.0, end=10.0,
                      user_ids=np.array([u for u, _ in events], dtype=np.int64),
                      ts=np.arange(1.0, n + 1.0),
                      item_offsets=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
                      item_ids=np.array([i for _, items in events for i in items], dtype=np.int64),
                      value=np.full(n, np.nan), loc=np.full((n, 2), np.nan))


def names():
    """The engine's name table: ids 0 = a1, 1 = b1, 2 = zz (outside the domain), 3 = a2."""
    t = Names()
    assert t.ids(["a1", "b1", "zz", "a2"]).tolist() == [0, 1, 2, 3]
    return t


# user 0: 2 items (a1, b1); user 1: 1 item (zz, outside); user 2: 4 items (a1, b1, a2, a1); user 3: no items
EVENTS = [(0, [0]), (0, [1]), (1, [2]), (2, [0, 1, 3]), (2, [0]), (3, [])]


def test_unresolved_items_reserve_the_largest_cost_over_every_size_still_possible():
    q = EMDFrequency("fr", alpha0=A0, clusters=CL, gamma=0.5, max_items=3)
    res = q.prepare(window(EVENTS), unsafe_seeded_generator(4401))  # no bind_names: every id is unresolved
    assert res.users.tolist() == [0, 1, 2]  # user 3 has no items
    alpha = dict(zip(res.users.tolist(), res.costs[:, ALPHA].tolist()))
    assert alpha[0] >= fixed_up(2 * A0)  # both may be in the domain: at least α(2) = 2·0.4
    assert alpha[0] == fixed_up(2 * A0)  # the largest over sizes 0, 1, 2 is α(2) (α grows with m)
    assert alpha[1] == fixed_up(A0)  # one item: α(1)
    assert alpha[2] == fixed_up(3 * A0)  # 4 items: sizes ≤ max_items = 3 can still be charged: α(3) = 1.2
    assert not res.costs[:, DELTA].any()
    # with the names bound, the same window reserves the exact sizes (user 1's zz is outside: no reservation;
    # user 2 has 4 items > max_items: left out, no reservation)
    q.bind_names(names())
    res_b = q.prepare(window(EVENTS), unsafe_seeded_generator(4401))
    assert res_b.users.tolist() == [0] and res_b.costs[0, ALPHA] == fixed_up(2 * A0)


def test_after_an_unresolved_prepare_release_settles_to_the_exact_size_and_leaves_out_oversized_users():
    """Release with the names: user 0 has 2 domain items → included, charged α(2) (= its reservation); user 1's
    only item is outside the domain → not charged; user 2 has 4 domain items > max_items → left out and not
    charged, although it holds a reservation of α(3)."""
    q = EMDFrequency("fr", alpha0=A0, clusters=CL, gamma=0.5, max_items=3)
    w = window(EVENTS)
    res = q.prepare(w, unsafe_seeded_generator(4402))
    rel = q.release(w, res, np.ones(4, dtype=bool), unsafe_seeded_generator(4403), names())
    assert rel.values["users"] == 1
    assert rel.users.tolist() == [0]
    assert rel.actual[:, ALPHA].tolist() == [fixed_up(2 * A0)] and not rel.actual[:, DELTA].any()
    assert sum(rel.values["frequencies"].values()) == pytest.approx(1.0)


def test_a_user_whose_exact_cost_exceeds_the_reservation_is_left_out():
    """The release never charges more than reserved: if user 0 (exact α(2) = 0.8) was reserved only α(1) = 0.4, it
    is left out of the estimate and not charged; user 4 (1 domain item, reserved α(1)) is released and charged α(1).
    Positive control: with α(2) reserved, user 0 is released and charged α(2)."""
    q = EMDFrequency("fr", alpha0=A0, clusters=CL, gamma=0.5, max_items=3)
    q.bind_names(names())
    w = window([(0, [0, 1]), (4, [3])])

    def reservation(alpha_user0):
        costs = np.zeros((2, N_COMPONENTS), dtype=np.int64)
        costs[:, ALPHA] = [fixed_up(alpha_user0), fixed_up(A0)]
        return Reservation(np.array([0, 4], dtype=np.int64), costs)

    rel = q.release(w, reservation(A0), np.ones(5, dtype=bool), unsafe_seeded_generator(4404), names())
    assert rel.values["users"] == 1 and rel.users.tolist() == [4]
    assert rel.actual[:, ALPHA].tolist() == [fixed_up(A0)]
    ok = q.release(w, reservation(2 * A0), np.ones(5, dtype=bool), unsafe_seeded_generator(4404), names())
    assert ok.values["users"] == 2 and ok.users.tolist() == [0, 4]
    assert ok.actual[:, ALPHA].tolist() == [fixed_up(2 * A0), fixed_up(A0)]
