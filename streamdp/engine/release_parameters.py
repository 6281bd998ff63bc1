"""An engine's release parameters: what fixes each release's privacy cost and what its state was built under.

They are the window structure (``EngineConfig``: window length, origin, horizon L, allowed lateness, idle timeout,
future limit — which events land in which window), every query's validated parameters (σ, ε, δ, k, bounds…),
in the order of the queries (the engine draws their noise in that order), and, in test mode only, ``noise`` (a
test-mode snapshot carries a generator keyed from the fixed seed: a secure engine must not continue it).

They are used twice (docs/contract.md §3: a retry charges nothing, and never publishes fresh noise):

* **The admission scope digests them** (:func:`streamdp.engine.engine.admission_scope`). The budget store answers
  a second admit of the same (scope, window) with the first outcome and charges nothing; that is right only when
  both admits are for the same releases. With the query ids alone in the scope, a worker that crashed after a
  window's admit and restarted with a smaller σ under the same query id released the window at the new cost while
  its users had paid the old one (reproduced: ρ = 0.5 charged for a release costing ρ = 8). Now any change of the
  parameters is a new scope, so replayed windows are charged again (never less).
* **A snapshot records them, and restoring it under other parameters is refused** (:class:`ParametersChanged`):
  the state was built under them (a continual-count tree keeps the σ and horizon it was made with, the windows
  their length, origin and lateness), so the restored engine would either release with the old noise while
  charging the new cost, or silently ignore the new setting. Removing a query is allowed (the others are
  unchanged; the scope changes). Adding one is refused: its state would start in the middle of an epoch.

Snapshots written before this check carry no parameters and restore unchecked.
"""

from __future__ import annotations

import json

import numpy as np

#: the ``EngineConfig`` fields that decide which events land in which window (and the tree's horizon L)
WINDOW_FIELDS = ("window_seconds", "horizon", "origin", "allowed_lateness", "idle_timeout", "max_future_seconds")


#: ``noise`` of the release parameters of an engine in test mode (``unsafe_test_seed``); a secure engine has none
SEEDED = "unsafe_test_seed"


class ParametersChanged(ValueError):
    """A snapshot is being restored under release parameters other than those it was written under."""


def release_parameters(config, queries) -> dict:
    """The release parameters of an engine with ``config`` (an ``EngineConfig``) and ``queries``."""
    params = {"windows": {f: getattr(config, f) for f in WINDOW_FIELDS},
              "queries": [[q.id, q.parameters()] for q in queries]}  # in engine order: noise is drawn in that order
    if getattr(config, "unsafe_test_seed", None) is not None:
        # test mode is a release parameter (its releases are not private), the seed's value is not; absent for a
        # secure engine, so production scopes and checkpoints are those of before this field
        params["noise"] = SEEDED
    return params


def _plain(x):
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, (tuple, set, frozenset)):
        return sorted(x) if isinstance(x, (set, frozenset)) else list(x)
    raise TypeError(f"release parameter of type {type(x).__name__} is not JSON: {x!r}")


def canonical(params: dict) -> str:
    """One text per set of parameters: JSON with sorted keys, no spaces (floats by their shortest repr)."""
    return json.dumps(params, sort_keys=True, separators=(",", ":"), default=_plain)


def _changes(old: dict, new: dict) -> list[str]:
    return [f"{k}: {old.get(k, '(unset)')!r} in the checkpoint, {new.get(k, '(unset)')!r} now"
            for k in sorted(set(old) | set(new)) if old.get(k, "(unset)") != new.get(k, "(unset)")]


def removed_queries(stored: str | None, current: dict) -> list[str]:
    """The ids of the queries in the parameters ``stored`` (:func:`canonical` text) that ``current`` lacks."""
    if stored is None:
        return []
    now = {q for q, _ in current["queries"]}
    old = json.loads(stored)["queries"]
    return [q for q in (old if isinstance(old, dict) else [q for q, _ in old]) if q not in now]


def check_unchanged(stored: str | None, current: dict, removed=()) -> None:
    """Refuse (:class:`ParametersChanged`, naming every difference) to restore a snapshot written under the
    parameters ``stored`` (:func:`canonical` text; ``None``: an older snapshot, not checked) into an engine with
    the parameters ``current``. ``removed``: ids of queries an earlier restart removed from this deployment (their
    state is gone, so putting one back is refused with that reason)."""
    if stored is None:
        return
    old = json.loads(stored)
    new = json.loads(canonical(current))
    diffs = [f"service.{c}" for c in _changes(old["windows"], new["windows"])]
    was_seeded, now_seeded = old.get("noise") == SEEDED, new.get("noise") == SEEDED
    if was_seeded and not now_seeded:
        diffs.append("noise: the checkpoint was written in test mode (unsafe_test_seed): its noise generator's key "
                     "is derived from a fixed seed that anyone can reproduce, and its releases are not "
                     "differentially private; a secure worker does not continue it")
    elif now_seeded and not was_seeded:
        diffs.append("noise: this worker is in test mode (unsafe_test_seed) and the checkpoint is not: test mode "
                     "would publish non-private releases of this deployment's data")
    old_q, new_q = dict(old["queries"]), dict(new["queries"])  # (a dict: the first form, without the order)
    for qid, params in new_q.items():
        if qid not in old_q and qid in removed:
            diffs.append(f"query {qid!r} was removed from this deployment by an earlier restart and its state is "
                         "gone: it cannot come back (give it a new id in a new deployment, or leave it out)")
        elif qid not in old_q:
            diffs.append(f"query {qid!r} is not in the checkpoint (a query cannot be added to a running "
                         "deployment: its state would start in the middle of an epoch)")
        else:
            diffs += [f"query {qid!r} {c}" for c in _changes(old_q[qid], params)]
    if isinstance(old["queries"], list):
        was = [q for q, _ in old["queries"] if q in new_q]
        now = [q for q, _ in new["queries"] if q in old_q]
        if was != now:
            diffs.append(f"query order: {was} in the checkpoint, {now} now (the engine draws noise in query order)")
    if diffs:
        raise ParametersChanged(
            "the checkpoint was written under other release parameters: " + "; ".join(diffs) + ". Its state was "
            "built under them: restoring it would release with the old noise while charging the new cost. Revert "
            "the configuration, or start a new deployment (a new consumer group and new query ids)")
