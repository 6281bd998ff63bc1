"""The coordinator as an object of its own: it sees the partitions' parts and markers (bytes), closes each window
exactly once, releases from the merged per-item counts and answers every stage A with the window's outcome
(docs/DECISIONS.md, "Scale-out: stage A admits"; messages in :mod:`streamdp.engine.staged_messages`).

Pure core: the only outside object is the :class:`~streamdp.filter.store.BudgetStore` (release log and ledger; it
never admits nor settles — stage A does). State: the registered input partitions and their last markers, the parts
of open windows, the item names (interned window by window in partition order, as the single engine interns them),
each query's mechanism state (the query objects: the coordinator halves, :func:`count_halves.release_merged`), the
noise generator, and the recent outcomes (stage A may ask for them again after a restore or a rebalance).

Window t closes when every registered partition has marked t (a partition that never spoke holds it back, as in
:meth:`~streamdp.windows.tumbling.TumblingWindows.register`), or — end of input — when every partition sent its
final marker, up to the newest window any part holds (``closed_by: end_of_input`` past the partitions' watermarks).
The close, in the single engine's order: the release log is checked (:class:`ReleaseConflict` before anything is
drawn, as the engine does), the parts' item dictionaries are interned in partition order, every query releases in
query order from the merged counts (the noise generator ``make_generator(seed)``, as the engine), the records go to
the release log (first write wins; a different record is a ReleaseConflict), the ledger gets one entry per release
(realised costs merged from the parts' statistics: users charged add, maxima take the maximum), and the
:class:`WindowOutcome` goes out.

A part sent again (a stage A restored or rebalanced) is dropped when equal to the one held (or to the one a closed
window used, for the last :data:`KEEP_WINDOWS` windows); a different one for the same (window, partition) is
refused (:class:`PartConflict`).
"""

from __future__ import annotations

import hashlib
import math
import time

import numpy as np
import orjson

from streamdp.accounting.cost import N_COMPONENTS
from streamdp.engine import state_codec
from streamdp.engine.append_log import AppendLog
from streamdp.engine.count_halves import check_staged, outcome_info, point_code_column, release_merged
from streamdp.engine.engine import EngineConfig, EngineFailed, ReleaseConflict, WindowSummary, admission_scope
from streamdp.engine.query import Names, WindowData, WindowQuery
from streamdp.engine.release_parameters import canonical, check_unchanged, release_parameters
from streamdp.engine.staged_messages import PART, PartContribution, PartitionMarker, WindowOutcome
from streamdp.filter.store import BudgetStore
from streamdp.noise.generator import make_generator
from streamdp.outputs.records import ReleaseRecord, realised_summary, release_key
from streamdp.windows.tumbling import TumblingWindows

STATE_VERSION = 1
#: outcomes and the digests of closed windows' parts are kept for this many windows
KEEP_WINDOWS = 4096


class PartConflict(RuntimeError):
    """A stage A sent a part for a (window, partition) that differs from the one already held or used: the two runs
    of that partition's close disagree (restore the stage A's matching checkpoint)."""


def merge_parts(qps: list, gids: list, partitions: list | None = None, code_column: int | None = None
                ) -> tuple[np.ndarray, np.ndarray, dict]:
    """One query's per-item arrays over the window's parts (in partition order; ``gids`` each part's dictionary
    as coordinator ids): (sorted item ids, summed counts, {"sums": summed sum increments, "points" and "order":
    the points and their order keys concatenated in partition order, "point_ints" their integer columns (the
    ``code_column``, if any, mapped from the part's dictionary codes to coordinator item ids), "info": the parts'
    info objects summed by key} — the entries the parts carry). Integer sums: exact in any order; the geo release
    orders the points by their keys (partition order is irrelevant)."""
    z = np.zeros(0, dtype=np.int64)
    ids = np.concatenate([g[qp.codes] for g, qp in zip(gids, qps)]) if qps else z
    counts = np.concatenate([qp.counts for qp in qps]) if qps else z
    with_sums = any(qp.sums is not None for qp in qps)
    sums = np.concatenate([qp.sums if qp.sums is not None else np.zeros(qp.codes.size, np.int64) for qp in qps]) \
        if with_sums else None
    if len(qps) > 1:
        ids, inv = np.unique(ids, return_inverse=True)
        merged = np.zeros(ids.size, dtype=np.int64)
        np.add.at(merged, inv, counts)
        counts = merged
        if sums is not None:
            ms = np.zeros(ids.size, dtype=np.int64)
            np.add.at(ms, inv, sums)
            sums = ms
    elif ids.size:
        order = np.argsort(ids, kind="stable")
        ids, counts = ids[order], counts[order]
        sums = None if sums is None else sums[order]
    extra = {}
    if sums is not None:
        extra["sums"] = sums
    pts = [k for k, qp in enumerate(qps) if qp.points is not None]
    if pts:
        extra["points"] = np.concatenate([qps[k].points for k in pts], axis=0)
        extra["order"] = np.concatenate([qps[k].order for k in pts])
        if partitions is not None:  # which partition sent each point (in order): per-point answers go back to it
            extra["point_parts"] = [(int(partitions[k]), int(qps[k].points.shape[0])) for k in pts]
        if any(qps[k].point_ints is not None for k in pts):
            ints = [qps[k].point_ints for k in pts]
            if code_column is not None:
                ints = [i.copy() for i in ints]
                for k, i in zip(pts, ints):
                    i[:, code_column] = gids[k][i[:, code_column]]
            extra["point_ints"] = np.concatenate(ints, axis=0)
    infos = [qp.info for qp in qps if qp.info]
    if infos:
        extra["info"] = {}
        for d in infos:
            for key, v in d.items():
                extra["info"][key] = extra["info"].get(key, 0) + v
    return ids, counts, extra


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


class Coordinator:
    """The staged topology's coordinator (module doc). Feed it every message with :meth:`receive`; take the
    outcomes for the stage As with :meth:`poll`."""

    def __init__(self, config: EngineConfig, queries: list[WindowQuery], store: BudgetStore) -> None:
        check_staged(queries, config)
        self.config = config
        self.queries = list(queries)
        self.store = store
        self.parameters = release_parameters(config, self.queries)
        self.scope = admission_scope(config.scope, [q.id for q in self.queries], canonical(self.parameters))
        self.rng = make_generator(config.unsafe_test_seed)
        self.windows = TumblingWindows(config.window_seconds, config.origin)  # window bounds only
        self.items = Names()
        self.epoch = 0
        self.last_closed = 0
        self.markers: dict[int, tuple[int, int, bool]] = {}  # partition → (through, watermark_through, final)
        self.parts: dict[int, dict[int, bytes]] = {}  # open window → partition → its part
        self.used_parts: dict[int, dict[int, str]] = {}  # closed window → partition → digest of its part
        self.outcomes: dict[int, bytes] = {}  # closed window → its outcome
        self._out: list[bytes] = []
        self._logged_here: set[str] = set()
        self._failed: str | None = None  # why a close failed part-way (EngineFailed until a restore)

    # ---- input -----------------------------------------------------------------------------------------------
    def register_partitions(self, partitions) -> None:
        """Every partition of the input topic: each holds every window back until it has marked it."""
        for p in partitions:
            self.markers.setdefault(int(p), (0, 0, False))

    def receive(self, data: bytes) -> list[WindowSummary]:
        """One message from a stage A (a part or a marker); closes the windows that became due."""
        if self._failed is not None:
            raise EngineFailed(f"a window close failed ({self._failed}) and the coordinator was not restored since")
        if bytes(data[:4]) == PART:
            self._take_part(data)
            return []
        m = PartitionMarker.from_bytes(data)
        if m.partition not in self.markers:
            raise ValueError(f"marker of partition {m.partition}, which is not registered")
        through, wm, final = self.markers[m.partition]
        self.markers[m.partition] = (max(through, m.through), max(wm, m.watermark_through), final or m.final)
        return self.close_due()

    def _take_part(self, data: bytes) -> None:
        part = PartContribution.from_bytes(data)  # validates
        t, p = part.seq, part.partition
        if p not in self.markers:
            raise ValueError(f"part of partition {p}, which is not registered")
        if t <= self.last_closed:
            used = self.used_parts.get(t, {})
            if t in self.used_parts and used.get(p) != _digest(data):
                raise PartConflict(f"partition {p} sent another part for window {t} than the one it was closed with")
            return  # a repeat of a closed window's part
        held = self.parts.setdefault(t, {})
        if p in held:
            if held[p] != data:
                raise PartConflict(f"partition {p} sent two different parts for window {t}")
            return
        if self.markers[p][0] >= t:
            raise PartConflict(f"partition {p} sent a part for window {t} after marking it closed")
        held[p] = data

    def poll(self) -> list[bytes]:
        """The outcomes produced since the last poll, in window order."""
        out, self._out = self._out, []
        return out

    def outcomes_since(self, seq: int) -> list[bytes]:
        """The kept outcomes of windows after ``seq``, in order (for a stage A restored or adopting a partition)."""
        return [self.outcomes[t] for t in sorted(self.outcomes) if t > seq]

    # ---- close -----------------------------------------------------------------------------------------------
    def _watermark_through(self) -> int:
        return min((wm for _, wm, _ in self.markers.values()), default=0)

    def close_target(self) -> int:
        """The last window that can close now (≥ :attr:`last_closed`)."""
        if not self.markers:
            return self.last_closed
        live = [through for through, _, final in self.markers.values() if not final]
        if live:
            return max(self.last_closed, min(live))
        top = max(self.parts) if self.parts else 0  # end of input everywhere: up to the newest window held
        return max(self.last_closed, self._watermark_through(), top)

    def close_due(self) -> list[WindowSummary]:
        """Close every window that can close, in order. A failure part-way (the store unreachable at the release
        log or the ledger) leaves the close half done: every later call is refused (:class:`EngineFailed`) until
        :meth:`restore` (the caller restores its checkpoint and re-reads the internal topic from its offsets; in
        test mode the repeated close draws the same noise and finds its records logged)."""
        if self._failed is not None:
            raise EngineFailed(f"a window close failed ({self._failed}) and the coordinator was not restored since")
        out = []
        try:
            while self.last_closed < self.close_target():
                out.append(self.close_window(self.last_closed + 1))
        except BaseException as e:
            self._failed = f"{type(e).__name__}: {e}"
            raise
        return out

    def _refuse_released(self, keys: list[str]) -> None:
        """As :meth:`ReleaseEngine._refuse_released`: a key already logged by another run is a ReleaseConflict before
        anything is drawn (test mode: a re-run with the same seed draws the same noise and is let through)."""
        refuse_logged = getattr(self.store, "refuse_logged", None)
        if refuse_logged is not None:
            refuse_logged(keys)
            return
        if self.config.unsafe_test_seed is not None:
            return
        for k in keys:
            if k not in self._logged_here and self.store.get_release(k) is not None:
                raise ReleaseConflict(k)

    def close_window(self, seq: int) -> WindowSummary:
        t0 = time.perf_counter()
        L = self.config.horizon
        epoch, t = (seq - 1) // L, (seq - 1) % L + 1
        closed_by = "watermark" if seq <= self._watermark_through() else "end_of_input"
        self._refuse_released([release_key(q.id, epoch, t) for q in self.queries])
        blobs = self.parts.get(seq, {})
        parts = [PartContribution.from_bytes(blobs[p]) for p in sorted(blobs)]
        gids = [self.items.ids(part.items) for part in parts]  # partition order: the single engine's ids
        start, end = self.windows.bounds(seq)
        z = np.zeros(0, dtype=np.int64)
        w = WindowData(seq=seq, epoch=epoch, t=t, start=start, end=end, user_ids=z, ts=np.zeros(0),
                       item_offsets=np.zeros(1, dtype=np.int64), item_ids=z, value=np.zeros(0),
                       loc=np.zeros((0, 2)), closed_by=closed_by)
        if epoch != self.epoch:
            for q in self.queries:
                q.new_epoch()
            self.epoch = epoch
        released = []
        for qi, q in enumerate(self.queries):
            qps = [part.queries[qi] for part in parts]
            if any(qp.query != q.id for qp in qps):
                raise ValueError(f"window {seq}: a part's queries are not this coordinator's {[x.id for x in self.queries]}")
            ids, counts, extra = merge_parts(qps, gids, [part.partition for part in parts], point_code_column(q))
            extra["seq"] = seq
            rel, row = release_merged(q, ids, counts, extra, self.rng, self.items)
            released.append((q, qps, rel, row))
        records, infos, settle = [], {}, False
        for q, qps, rel, row in released:
            n_adm = sum(qp.admitted for qp in qps)
            if isinstance(row, dict):  # per-user actual costs (the adaptive kinds): the ledger's and settle's rows
                actual = np.asarray(row["actual"], dtype=np.int64).reshape(-1, N_COMPONENTS)
                charged = int((actual > 0).any(axis=1).sum())
                mx = actual.max(axis=0) if actual.size else np.zeros(N_COMPONENTS, dtype=np.int64)
                settle = settle or not np.array_equal(actual, row["reserved"])
            elif row is not None:  # settled to the same row for every admitted user of the query
                row = np.asarray(row, dtype=np.int64)
                charged = n_adm if (row > 0).any() else 0
                mx = row if n_adm else np.zeros(N_COMPONENTS, dtype=np.int64)
                settle = settle or any(qp.admitted and not (np.array_equal(qp.max_cost, row)
                                                            and np.array_equal(qp.min_cost, row)) for qp in qps)
            else:
                charged = sum(qp.charged for qp in qps)
                mx = np.max([qp.max_cost for qp in qps], axis=0) if qps else np.zeros(N_COMPONENTS, np.int64)
            rec = ReleaseRecord.build(q, w, rel, np.zeros((0, N_COMPONENTS), dtype=np.int64),
                                      test_mode=self.config.unsafe_test_seed is not None)
            rec.realized = realised_summary(charged, mx)
            body = rec.to_bytes()
            self._logged_here.add(rec.key)
            if self.store.put_release(rec.key, body) != body:
                raise ReleaseConflict(rec.key)
            records.append(rec)
            info = outcome_info(q, rel, row)
            if info is not None:
                infos[q.id] = info
        for rec in records:
            self.store.append_ledger(rec.ledger_entry())
        outcome = WindowOutcome(seq=seq, closed_by=closed_by, settle=settle, queries=infos).to_bytes()
        self.outcomes[seq] = outcome
        self.used_parts[seq] = {p: _digest(b) for p, b in blobs.items()}
        for old in [k for k in self.outcomes if k <= seq - KEEP_WINDOWS]:
            del self.outcomes[old]
            self.used_parts.pop(old, None)
        self.parts.pop(seq, None)
        self.last_closed = seq
        self._out.append(outcome)
        n_adm = sum(part.admitted for part in parts)
        return WindowSummary(seq=seq, epoch=epoch, t=t, start=start, end=end,
                             events=sum(part.events for part in parts), users=n_adm + sum(p.refused for p in parts),
                             admitted=n_adm, refused=sum(part.refused for part in parts), records=records,
                             seconds=time.perf_counter() - t0)

    # ---- snapshot --------------------------------------------------------------------------------------------
    def snapshot(self, include_rng: bool = False) -> bytes:
        """The whole state as bytes. The noise generator's state only in test mode (or ``include_rng``, for an
        in-memory retry: never to be persisted), as :meth:`ReleaseEngine.state_tree`."""
        if self._failed is not None:
            raise EngineFailed(f"a window close failed ({self._failed}): the state is mid-close, not a checkpoint")
        return state_codec.encode({
            "version": STATE_VERSION,
            "parameters": canonical(self.parameters),
            "items": AppendLog(orjson.dumps(self.items.state())[:-1]),
            "epoch": self.epoch,
            "last_closed": self.last_closed,
            "markers": {str(p): list(m) for p, m in self.markers.items()},
            "parts": {str(t): {str(p): b for p, b in ps.items()} for t, ps in self.parts.items()},
            "used_parts": {str(t): {str(p): d for p, d in ps.items()} for t, ps in self.used_parts.items()},
            "outcomes": {str(t): b for t, b in self.outcomes.items()},
            "queries": {q.id: q.state() for q in self.queries},
            "rng": (self.rng.bit_generator.state
                    if include_rng or self.config.unsafe_test_seed is not None else None),
        })

    def restore(self, data: bytes) -> None:
        d = state_codec.decode(data)
        if d.get("version") != STATE_VERSION:
            raise ValueError(f"unsupported coordinator snapshot version {d.get('version')}")
        check_unchanged(d.get("parameters"), self.parameters)
        self.items = Names.from_state(orjson.loads(bytes(d["items"]) + b"]"))
        self.epoch, self.last_closed = d["epoch"], d["last_closed"]
        self.markers = {int(p): (int(m[0]), int(m[1]), bool(m[2])) for p, m in d["markers"].items()}
        self.parts = {int(t): {int(p): bytes(b) for p, b in ps.items()} for t, ps in d["parts"].items()}
        self.used_parts = {int(t): {int(p): v for p, v in ps.items()} for t, ps in d["used_parts"].items()}
        self.outcomes = {int(t): bytes(b) for t, b in d["outcomes"].items()}
        for q in self.queries:
            q.load_state(d["queries"][q.id])
        if d["rng"] is not None:
            self.rng.bit_generator.state = d["rng"]
        self._out = []
        self._logged_here = set()
        self._failed = None
