"""Release parameters (``streamdp/engine/release_parameters.py``), gaps found by mutation (round 4).

* The restore check names EVERY difference, including a parameter present on one side only (a checkpoint written
  by a version that had a parameter this one does not, or the reverse): comparing only the keys of one side lets
  the other side's parameter change silently.
* :func:`canonical` gives ONE text per set of parameters. It is hashed into the admission scope and compared at
  restore, so a value whose text depends on the process (a set's iteration order follows the per-process string
  hash) would change the scope at every restart — replayed windows charged again, every snapshot refused — and a
  numpy integer, which ``json`` cannot write, would stop the engine from starting.
"""

from __future__ import annotations

import numpy as np
import pytest

from streamdp.engine.release_parameters import ParametersChanged, canonical, check_unchanged

W = {"window_seconds": 60.0, "horizon": 8, "origin": 1.7e9, "allowed_lateness": 0.0, "idle_timeout": None,
     "max_future_seconds": 3600.0}


def test_a_parameter_on_one_side_only_is_a_difference_both_ways():
    stored = canonical({"windows": W, "queries": {"q": {"kind": "top_k", "epsilon": 1.0, "old_only": 3}}})
    current = {"windows": W, "queries": {"q": {"kind": "top_k", "epsilon": 1.0, "new_only": 4}}}
    with pytest.raises(ParametersChanged) as e:
        check_unchanged(stored, current)
    msg = str(e.value)
    assert "query 'q' old_only: 3 in the checkpoint, '(unset)' now" in msg
    assert "query 'q' new_only: '(unset)' in the checkpoint, 4 now" in msg
    assert "epsilon" not in msg  # unchanged parameters are not named


def test_a_window_field_on_one_side_only_is_a_difference_both_ways():
    old_w = {**W, "retired_field": 1}
    new_w = {k: v for k, v in W.items() if k != "horizon"}
    with pytest.raises(ParametersChanged) as e:
        check_unchanged(canonical({"windows": old_w, "queries": {}}), {"windows": new_w, "queries": {}})
    msg = str(e.value)
    assert "service.retired_field: 1 in the checkpoint, '(unset)' now" in msg
    assert "service.horizon: 8 in the checkpoint, '(unset)' now" in msg
    check_unchanged(canonical({"windows": W, "queries": {}}), {"windows": dict(W), "queries": {}})  # control


def test_canonical_text_of_numpy_scalars_tuples_and_sets():
    params = {"n": np.int64(3), "f": np.float64(0.5), "b": np.bool_(True), "t": (1, 2.5),
              "s": {"gamma", "alpha", "beta"}, "fs": frozenset({3, 1, 2})}
    assert canonical(params) == '{"b":true,"f":0.5,"fs":[1,2,3],"n":3,"s":["alpha","beta","gamma"],"t":[1,2.5]}'
    with pytest.raises(TypeError, match="not JSON"):
        canonical({"x": object()})
