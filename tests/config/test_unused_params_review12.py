"""A parameter that the chosen options make meaningless is refused when it is set (twelfth-session review).

Before, ``window_histogram.kbar`` with ``algorithm = "threshold"``, ``rounds`` / ``split`` / ``beta`` with the
baseline estimators (bm0 / bm1) of ``range_counts`` / ``kde_point`` / ``knn_point``, ``shift`` with the point
privatisation (pm0 / bm0), and ``geo_convex_hull``'s ``k_min`` / ``k_max`` with an explicit ``k`` were accepted and
silently did nothing: the operator believed a setting was in force that was not. Defaults left unset are fine.

The mechanism-level tests at the end show that these parameters are in fact not read by those paths (a refusal of a
parameter that did something would be a defect of its own).
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from streamdp.config.kinds import ConfigError
from streamdp.config.loader import parse_config
from streamdp.mechanisms.adaptive import range_count as rc

US = [24.0, 50.0, -125.0, -66.0]
_FRAME = {"budget_rho": 0.01, "units": "km", "projection": "equirectangular", "ref_lat": 37.0, "region": US}
RANGE = {"kind": "range_counts", **_FRAME, "queries": [{"window": 2, "rect": [33.6, -84.4, 400.0, 400.0]}]}
KDE = {"kind": "kde_point", **_FRAME, "bandwidth": 150.0, "queries": [{"window": 2, "point": [33.6, -84.4]}]}
KNN = {"kind": "knn_point", **_FRAME, "k": 3, "queries": [{"window": 2, "point": [33.6, -84.4]}]}
HULL = {"kind": "geo_convex_hull", "rho": 40.0, "units": "degrees", "region": US}
HIST = {"kind": "window_histogram", "epsilon": 1.0}


def _build(query: dict):
    (q,) = parse_config({"service": {"window_seconds": 60.0, "origin": 0.0, "horizon": 8},
                         "query": [{"id": "q", **query}]}).build_queries()
    return q


@pytest.mark.parametrize("query,field", [
    ({**HIST, "kbar": 10}, "kbar"),
    ({**HIST, "algorithm": "threshold", "kbar": 20}, "kbar"),  # the default value written out: still ignored
    *[({**base, "estimator": est, name: value}, name)
      for base in (RANGE, KDE, KNN) for est in ("bm0", "bm1")
      for name, value in (("rounds", 8), ("split", "doubling"), ("beta", 0.05))],
    ({**RANGE, "estimator": "pm0", "shift": False}, "shift"),
    ({**RANGE, "estimator": "bm0", "shift": True}, "shift"),
    ({**HULL, "k": 32, "k_min": 8}, "k_min"),
    ({**HULL, "k": 32, "k_max": 64}, "k_max"),
])
def test_a_parameter_the_options_ignore_is_refused(query, field):
    with pytest.raises(ConfigError, match=rf"query\[0\]\.{field}: .*would be ignored, remove it"):
        _build(query)


@pytest.mark.parametrize("query", [
    {**HIST, "algorithm": "top_kbar", "kbar": 10},
    {**HIST},  # kbar left at its default with threshold
    *[{**base, "estimator": est, "rounds": 8, "split": "doubling", "beta": 0.05}
      for base in (RANGE, KDE, KNN) for est in ("pm0", "pm1")],
    {**RANGE, "estimator": "bm0"},
    {**RANGE, "estimator": "pm1", "shift": False},
    {**RANGE, "estimator": "bm1", "shift": False},
    {**HULL, "k": 0, "k_min": 8, "k_max": 64},
    {**HULL, "k": 32},
])
def test_the_parameters_the_options_read_are_accepted(query):
    _build(query)


def test_the_baselines_take_no_rounds_split_or_beta():
    params = set(inspect.signature(rc.range_count_baseline).parameters)
    assert not params & {"c", "rounds", "split", "beta", "beta0"}
    from streamdp.mechanisms.adaptive import kde_baseline

    assert not set(inspect.signature(kde_baseline).parameters) & {"c", "rounds", "split", "beta", "beta0"}


@pytest.mark.parametrize("fn,kw", [(rc.range_count_pie, {"c": 3}), (rc.range_count_baseline, {})])
def test_shift_changes_nothing_under_point_privatisation_but_does_under_distance(fn, kw):
    x = np.random.default_rng(0).uniform(-3, 3, size=(400, 2))
    rect = rc.Rectangle(0.0, 0.0, 2.0, 2.0)

    def run(priv, shift):
        return fn(np.random.default_rng(7), x, rect, 0.05, privatization=priv, shift=shift, **kw).estimate

    assert run("point", True) == run("point", False)
    # under distance privatisation the App. B shift moves the threshold: the same draws give another count
    assert any(fn(np.random.default_rng(s), x, rect, 0.05, privatization="distance", shift=True, **kw).estimate
               != fn(np.random.default_rng(s), x, rect, 0.05, privatization="distance", shift=False, **kw).estimate
               for s in range(5))
