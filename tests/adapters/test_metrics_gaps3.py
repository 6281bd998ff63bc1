"""The worker's Prometheus counters (``adapters/metrics.py``) without a broker: hand-set engine counters and
hand-made release records, known totals.

The counters follow the engine's counters as DELTAS from the last baseline (a restore sets the baseline), so a
value must be counted once — not again on the next update, not with the restored history, not under another name.
"""

from __future__ import annotations

import pytest

from streamdp.adapters.metrics import WorkerMetrics
from streamdp.engine.engine import EngineCounters
from streamdp.outputs.records import ReleaseRecord


def value(m: WorkerMetrics, name: str, **labels) -> float:
    v = m.registry.get_sample_value(name, labels or None)
    return 0.0 if v is None else v


def totals(m: WorkerMetrics) -> dict:
    return {"late": value(m, "streamdp_late_events_total"), "admitted": value(m, "streamdp_admitted_users_total"),
            "halted": value(m, "streamdp_halted_users_total"), "windows": value(m, "streamdp_windows_closed_total")}


def test_counters_after_a_restore_export_only_later_increments_once():
    m = WorkerMetrics()
    # restored from a checkpoint: this history was exported by the previous process, not by this one
    c = EngineCounters(late=5, admitted_users=40, halted_users=2, windows_closed=3,
                       by_reason={"late": 5, "malformed_json": 1})
    m.baseline(c)
    m.update(c)
    assert totals(m) == {"late": 0, "admitted": 0, "halted": 0, "windows": 0}
    assert value(m, "streamdp_dead_letters_total", reason="late") == 0

    c.late, c.admitted_users, c.halted_users, c.windows_closed = 7, 55, 3, 4
    c.by_reason = {"late": 7, "malformed_json": 1, "missing_user": 4}
    m.update(c)
    assert totals(m) == {"late": 2, "admitted": 15, "halted": 1, "windows": 1}
    assert value(m, "streamdp_dead_letters_total", reason="late") == 2
    assert value(m, "streamdp_dead_letters_total", reason="missing_user") == 4
    assert value(m, "streamdp_dead_letters_total", reason="malformed_json") == 0

    m.update(c)  # nothing new happened: nothing is counted again
    assert totals(m) == {"late": 2, "admitted": 15, "halted": 1, "windows": 1}
    assert value(m, "streamdp_dead_letters_total", reason="missing_user") == 4

    c.late, c.halted_users = 8, 10
    c.by_reason = {"late": 8, "malformed_json": 1, "missing_user": 5}
    m.update(c)
    assert totals(m) == {"late": 3, "admitted": 15, "halted": 8, "windows": 1}
    assert value(m, "streamdp_dead_letters_total", reason="missing_user") == 5
    assert value(m, "streamdp_dead_letters_total", reason="late") == 3


def test_a_fresh_worker_counts_from_zero():
    m = WorkerMetrics()
    c = EngineCounters(late=1, admitted_users=9, halted_users=0, windows_closed=2, by_reason={"late": 1})
    m.update(c)
    assert totals(m) == {"late": 1, "admitted": 9, "halted": 0, "windows": 2}
    assert value(m, "streamdp_dead_letters_total", reason="late") == 1


def _rec(query: str, seq: int, realized: dict) -> ReleaseRecord:
    return ReleaseRecord(query=query, kind="continual_counts", epoch=0, t=seq, seq=seq, start=10.0 * (seq - 1),
                         end=10.0 * seq, values={"counts": {"a": 3}, "new_items": ["a"], "threshold": 2.5},
                         cost={"basis": "per user"}, meta={}, realized=realized)


def test_release_counters_sum_per_query_and_parameter():
    m = WorkerMetrics()
    m.release(_rec("q", 1, {"zcdp": {"rho": 0.25, "delta": 1e-6}, "users_charged": 7}))
    m.release(_rec("q", 2, {"zcdp": {"rho": 0.5, "delta": 2e-6}, "users_charged": 3}))
    m.release(_rec("other", 1, {"users_charged": 0}))  # nobody charged: a release all the same
    assert value(m, "streamdp_releases_total", query="q") == 2
    assert value(m, "streamdp_releases_total", query="other") == 1
    assert value(m, "streamdp_users_charged_total", query="q") == 10
    assert value(m, "streamdp_users_charged_total", query="other") == 0
    assert value(m, "streamdp_release_max_cost_total", query="q", notion="zcdp", param="rho") == pytest.approx(0.75)
    assert value(m, "streamdp_release_max_cost_total", query="q", notion="zcdp",
                 param="delta") == pytest.approx(3e-6)
