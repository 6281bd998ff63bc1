"""The count kinds cut in two: what stage A keeps and computes per input partition, and what the coordinator keeps
(docs/DECISIONS.md, "Scale-out: stage A admits").

A query of a count kind (window_histogram — both algorithms —, top_k, continual_counts) is one object in the single
engine. Split, it becomes:

* a **stage-A half** per (query, input partition) — this module's :class:`StageAHalf` subclasses: the bounding, the
  per-user state (continual_counts' epoch counters of (user, item) pairs, :class:`ContributionBounder`), the
  reservation (``prepare``) and, once the filter answered, the per-item counts of the ADMITTED users'
  contributions (``contribution``), which are all the coordinator needs of the data. Each half reads the query
  object for its configuration only (costs, Δ0, C, k), never for its mechanism state;
* the **coordinator half** — the query object itself, whose mechanism state (the binary-mechanism tree of Dwork et
  al., "Differential privacy under continual observation", in the unknown-domain form of Rogers et al.,
  "Unknown-domain algorithms"; the pay-what-you-get counter of Rogers et al.'s Alg. 4) advances only through
  ``release_counts`` over the merged per-item counts.

What flows back: top_k's stage A prepares window t against the PWYG counter after window t − 1's release (k(i) =
min(k, k* − used) and the stop), which it receives with t − 1's outcome (:func:`outcome_info`,
:meth:`TopKStageA.apply_outcome`), and it settles its own users to the actual cost row the outcome carries
(Rogers et al. Thm 10: (n·ε²/8, δ) per admitted user, n the items returned). The other two kinds settle nothing and
need nothing back.

Any other kind is refused by the staged objects (:func:`check_staged`): its "what crosses" (DECISIONS table) is
not built yet.
"""

from __future__ import annotations

import numpy as np

from streamdp.bounding.contribution import ContributionBounder
from streamdp.engine.query import QueryRelease, Reservation, WindowData, WindowQuery
from streamdp.mechanisms.pay_what_you_get import PayWhatYouGet

SUPPORTED_KINDS = ("window_histogram", "top_k", "continual_counts")


class UnsupportedKind(ValueError):
    """A query kind without stage-A/coordinator halves was given to a staged object."""


def check_staged(queries: list[WindowQuery], config=None) -> None:
    """Refuse what the staged objects cannot run yet: kinds without halves (naming the supported ones) and the idle
    timeout (a wall-clock close decision the coordinator does not take yet)."""
    bad = [f"{q.id!r} ({q.kind})" for q in queries if q.kind not in SUPPORTED_KINDS]
    if bad:
        raise UnsupportedKind(f"the staged stage A / coordinator split supports the count kinds "
                              f"{', '.join(SUPPORTED_KINDS)} only; not: {', '.join(bad)} (run them in one "
                              "ReleaseEngine)")
    ids = [q.id for q in queries]
    if len(set(ids)) != len(ids):
        raise ValueError(f"query ids must be unique, got {ids}")
    if config is not None and getattr(config, "idle_timeout", None) is not None:
        raise ValueError("idle_timeout is not supported by the staged stage A / coordinator split yet: the "
                         "coordinator would have to decide a wall-clock close from the partitions' idle markers")


class StageAHalf:
    """The stage-A half of one query for one input partition (see the module doc)."""

    #: the query settles after its release (reserve and settle): stage A keeps its admitted users' reservations
    #: of the window until the window's outcome
    settles = False

    def __init__(self, query: WindowQuery) -> None:
        self.q = query

    def prepare(self, w: WindowData, draws) -> Reservation:
        return self.q.prepare(w, draws)

    def contribution(self, res: Reservation, admitted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per item (sorted partition-local item ids) the count of admitted contributions; advances the per-user
        state with the admitted users' contributions."""
        return self.q.admitted_counts(res, admitted)

    def new_epoch(self) -> None:
        pass

    def apply_outcome(self, info: dict | None) -> None:
        pass

    def state(self) -> dict:
        return {}

    def load_state(self, d: dict) -> None:
        pass


class HistogramStageA(StageAHalf):
    """window_histogram (Rogers et al., "Unknown-domain algorithms", Alg. 1 and 2): stateless; the reservation is
    m_u·(ε²/2, δ/Δ0) (threshold) or Thm 8's (Δ0·ε²/2, δ) per present user, from the user's own bounded items."""


class TopKStageA(StageAHalf):
    """top_k (pay-what-you-get, Rogers et al. Alg. 3/4): a copy of the PWYG counter as of the last outcome
    applied; reserves k(i)·ε²/8 and δ per present user (Thm 10) and settles to the outcome's actual row."""

    settles = True

    def __init__(self, query: WindowQuery) -> None:
        super().__init__(query)
        p = query.pwyg
        self.pwyg = PayWhatYouGet(p.epsilon, p.delta, p.k_star, count_bottom=False)

    def prepare(self, w: WindowData, draws) -> Reservation:
        return self.q.prepare_under(w, self.pwyg)

    def apply_outcome(self, info: dict | None) -> None:
        if info is not None:
            self.pwyg = PayWhatYouGet.from_state(self.pwyg.epsilon, self.pwyg.delta, info["pwyg"],
                                                 count_bottom=False)

    def state(self) -> dict:
        return {"pwyg": self.pwyg.state()}

    def load_state(self, d: dict) -> None:
        self.apply_outcome(d)


class ContinualCountsStageA(StageAHalf):
    """continual_counts: the partition's epoch counters of (user, item) pairs (≤ C contributions per pair per
    epoch, the first one costly); committed with the admitted pairs right after the admit."""

    def __init__(self, query: WindowQuery) -> None:
        super().__init__(query)
        self.bounder = ContributionBounder(query.bounder.delta0, query.bounder.cap)

    def prepare(self, w: WindowData, draws) -> Reservation:
        return self.q.prepare_with(w, draws, self.bounder)

    def contribution(self, res: Reservation, admitted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.q.admitted_counts(res, admitted, self.bounder)

    def new_epoch(self) -> None:
        self.bounder.reset()

    def state(self) -> dict:
        return {"bounder": self.bounder.state()}

    def load_state(self, d: dict) -> None:
        self.bounder = ContributionBounder.from_state(d["bounder"])


_HALVES = {"window_histogram": HistogramStageA, "top_k": TopKStageA, "continual_counts": ContinualCountsStageA}


def stage_a_half(query: WindowQuery) -> StageAHalf:
    """A fresh stage-A half of ``query`` (one per input partition)."""
    check_staged([query])
    return _HALVES[query.kind](query)


def outcome_info(query: WindowQuery, rel: QueryRelease, row: np.ndarray | None) -> dict | None:
    """What stage A needs of this query's release of window t (in the window's outcome): top_k the PWYG counter
    after the release, the items returned n and the actual cost row of each admitted user (None: nothing to
    settle, the counter was exhausted before the call); None for the kinds that need nothing back."""
    if query.kind != "top_k":
        return None
    return {"pwyg": query.pwyg.state(), "n": int(rel.meta.get("items_returned", 0)),
            "actual": None if row is None else [int(x) for x in row]}
