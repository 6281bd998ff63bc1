"""grid_means: samples tied in event time are kept by clipping in a uniformly random order, not by value (review of
2026-11-23: ties were broken by value, so clipping kept each user's SMALLEST values of a burst uploaded with one
timestamp — a downward bias of every clipping estimator). Here 60 users each send four readings with the same ts,
in arrival order 90, 90, 90, 10 (true mean 70); array_averaging with m_ub = 1 at a large ε (noise scale
100/60/200 ≈ 0.008) released ≈ 10; a uniformly random kept value gives 70 ± 4.6.
"""
import orjson

from streamdp.accounting.cost import Cost
from streamdp.engine.queries.grid_means_bounded import BoundedGridMeans
from engine_helpers import engine, run


def ev(user, ts, value, loc):
    return orjson.dumps({"user": user, "ts": ts, "items": [], "value": value, "loc": list(loc)})


def test_tied_timestamps_do_not_keep_the_smallest_values():
    q = BoundedGridMeans("g", epsilon=200.0, upper=100.0, estimator="array_averaging", m_ub=1,
                         cells="grid", cell_size=1.0, bounded_budget_rho=1e6)
    e, _ = engine([q], Cost.zcdp(1e9, 1.0), seed=3)
    payloads = []
    for i in range(60):
        for v in (90.0, 90.0, 90.0, 10.0):  # one burst, same event time
            payloads.append(ev(f"u{i}", 1.0 + 0.001 * i, v, (0.5, 0.5)))
    recs = run(e, payloads)
    cell = recs[0].values["cells"]["0,0"]
    assert cell["m_ub"] == 1 and cell["arrays"] == 60
    # each user keeps one of their 4 values uniformly: the mean of 60 draws is 70 ± 4.6 (1 sd); the old code gave ≈ 10
    assert 70.0 - 5 * 4.62 < cell["mean"] < 70.0 + 5 * 4.62, cell["mean"]
