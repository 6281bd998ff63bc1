"""grid_means with min_users > 1: a user the filter refuses changes nobody's admission and no release (review of
2026-11-23). contract §3: a refused user's data "is dropped before any mechanism reads it". Cells used to be reserved
only when they had ≥ min_users users BEFORE admission, so a refused user X sharing cell b with u1 made b count,
raised u1's reservation past u1's budget and halted u1 for good (and changed the published `suppressed`). Every
user now reserves each cell they have values in (their own data only); cells are released, and users settled, by
the admitted users' counts."""
import numpy as np
import pytest

from streamdp.accounting.cost import LOSS_SCALE, N_COMPONENTS, Cost
from streamdp.engine.queries.grid_means import GridMeans

from engine_helpers import engine, ev, run


def _run(with_x: bool, budget: float):
    q = GridMeans("g", epsilon=1.0, upper=100.0, estimator="baseline", cells="item", min_users=2)
    e, store = engine([q], Cost.zcdp(budget, 1.0))  # one cell costs ε²/2 = 0.5
    store.grant("X", np.zeros(N_COMPONENTS, dtype=np.int64))  # X can afford nothing: refused (halted) at once
    p = [ev("u1", 1.0, ["a"], 10.0), ev("u2", 1.1, ["a"], 20.0),  # cell a: u1, u2
         ev("u1", 1.2, ["b"], 30.0)]  # cell b: u1 alone among the admitted → suppressed
    if with_x:
        p.append(ev("X", 1.3, ["b"], 40.0))  # refused: must not make b count
    recs = run(e, p)
    return recs, store


@pytest.mark.parametrize("budget", [0.75, 1.25])
def test_a_refused_user_changes_no_admission_and_no_release(budget):
    with_x, s1 = _run(True, budget)
    without_x, s2 = _run(False, budget)
    assert s1.get_user("X").halted
    assert s1.get_user("u1").halted == s2.get_user("u1").halted
    assert [r.to_bytes() for r in with_x] == [r.to_bytes() for r in without_x]


def test_reservation_covers_every_cell_of_the_user_and_settles_to_the_released_ones():
    # budget 1.25 holds u1's worst case (2 cells = 1.0): u1 is admitted, pays for cell a only (b suppressed)
    recs, store = _run(True, 1.25)
    (w1,) = recs
    assert list(w1.values["cells"]) == ["a"] and w1.meta == {"selected": 1, "suppressed": 1}
    assert not store.get_user("u1").halted
    assert store.get_user("u1").spent[0] == store.get_user("u2").spent[0] == round(0.5 * LOSS_SCALE)
    # budget 0.75 does not hold u1's worst case: u1 is refused (with or without X), cell a falls to 1 user
    recs, store = _run(False, 0.75)
    assert store.get_user("u1").halted and recs[0].values["cells"] == {}
    assert int(store.get_user("u2").spent[0]) == 0  # settled back: a was not released
