"""Stage A as an object of its own: windows, bounding and admission of the input partitions it owns, talking to the
coordinator in bytes only (docs/DECISIONS.md, "Scale-out: stage A admits"; messages in
:mod:`streamdp.engine.staged_messages`, the query halves in :mod:`streamdp.engine.count_halves`).

Pure core: the only outside object is the :class:`~streamdp.filter.store.BudgetStore` it is given. Its state is
PER INPUT PARTITION (:class:`PartitionState`): the held events of open windows, the partition's watermark, its user
and item names, each query's stage-A half (continual_counts' epoch counters, top_k's PWYG counter as of the last
outcome, continual_sums' record history and selected keys, the adaptive kinds' B_i and C_i, bounded grid_means'
per-user spend and halts), the replay-digest chain, the bounding key Kb, the last outcome applied and the reservations awaiting
their settle — so a partition's state can move to another StageA on a rebalance (:meth:`StageA.release` /
:meth:`StageA.adopt`) and be checkpointed with that partition's input offset.

Per partition p and window t, in order:

1. :meth:`StageA.ingest` judges p's events exactly as :meth:`ReleaseEngine.ingest` does (the same dead letters:
   reasons and rows) and holds the accepted ones;
2. once p's watermark has passed t's end AND t − 1's outcome was applied (the ordering rule: a user's spend at the
   admit of t must not depend on timing), p's events of t are interned in p's own name tables, every query's half
   prepares (bounding priorities keyed by Kb, :class:`~streamdp.engine.stage_a.BoundingDraws`), p's users are
   admitted in one batch (:func:`~streamdp.engine.stage_a.admit_partition`, scope ``partition_scope(admission_scope
   (…), p)`` as the single engine) under p's own replay digest, and the :class:`PartContribution` goes out,
   followed by p's marker;
3. the window's outcome settles p's admitted users of t (when the coordinator says so) and brings the halves up to
   date; then p may admit t + 1.

Bounding key Kb: in test mode (``unsafe_test_seed``) ``bounding_key(make_generator(seed))``, the single engine's;
otherwise 32 bytes from the OS per partition state, kept in its snapshot (a replay draws the same subsets). Kb
need not derive from the noise key at all, so stage A holds nothing of the release noise.

Not yet: ``idle_timeout`` (refused, :func:`count_halves.check_staged`), a user on two
partitions in one window (each partition admits its own events of them; the single engine lets the lowest
partition own them — not from a user-keyed topic whose partition count stayed put), ingest after :meth:`flush`.
"""

from __future__ import annotations

import hashlib
import math
import os

import numpy as np
import orjson

from streamdp.accounting.cost import N_COMPONENTS
from streamdp.arrays import unique_sorted
from streamdp.engine import state_codec
from streamdp.engine.append_log import AppendLog
from streamdp.engine.count_halves import check_staged, stage_a_half
from streamdp.engine.engine import EngineConfig, EngineCounters, EngineFailed, _add_rows, admission_scope
from streamdp.engine.query import Names, WindowData, WindowQuery
from streamdp.engine.release_parameters import canonical, check_unchanged, release_parameters
from streamdp.engine.replay_digest import GENESIS, window_digest
from streamdp.engine.stage_a import BoundingDraws, admit_partition, partition_scope
from streamdp.engine.staged_messages import PartContribution, PartitionMarker, QueryPart, WindowOutcome
from streamdp.filter.store import BudgetStore
from streamdp.input.events import EventBatch
from streamdp.noise.generator import bounding_key, make_generator
from streamdp.windows.held import HeldEvents
from streamdp.windows.judge import judge_and_hold
from streamdp.windows.held import take_rows as take_events
from streamdp.windows.tumbling import TumblingWindows

STATE_VERSION = 1
_NO_WINDOW = 0


def _kb_id(kb: bytes) -> bytes:
    """A one-way name of Kb for the replay digest (Kb itself is secret)."""
    return hashlib.blake2b(kb, digest_size=16, person=b"streamdp-kbid").digest()


class PartitionState:
    """Everything stage A holds for one input partition (see the module doc)."""

    def __init__(self, partition: int, config: EngineConfig, queries: list[WindowQuery], kb: bytes) -> None:
        self.partition = int(partition)
        self.windows = TumblingWindows(config.window_seconds, config.origin, config.allowed_lateness, None)
        self.windows.register([self.partition], 0.0)
        self.held = HeldEvents()
        self.users, self.items = Names(), Names()
        self.halves = [stage_a_half(q) for q in queries]
        self._bind()
        self.epoch = 0
        self.kb = kb
        self.history, self.history_users, self.history_items = GENESIS, 0, 0
        self.through = _NO_WINDOW  # every window ≤ through is done for this partition (part sent or no events)
        self.applied = _NO_WINDOW  # the last window outcome applied
        self.pending: dict[int, dict] = {}  # window → its admitted users' reservations awaiting the outcome
        self.flushing = False  # end of input: every held window goes out, then a final marker
        self.sent: tuple | None = None  # the last marker sent (through, watermark_through, final)

    def _bind(self) -> None:
        for h in self.halves:
            h.bind(self.items)

    def watermark_through(self) -> int:
        """The last window the partition's watermark has passed (0: none) — its events alone, never how far the
        partition has marked itself: a flushed partition marks windows its watermark has not passed, and those
        close ``end_of_input``."""
        wm = self.windows.partition_watermark(self.partition)
        return max(0, self.windows.last_ended(wm)) if math.isfinite(wm) else 0

    def state(self) -> dict:
        return {
            "version": STATE_VERSION,
            "partition": self.partition,
            "windows": self.windows.state(),
            "held": self.held.state(),
            "users": AppendLog(orjson.dumps(self.users.state())[:-1]),
            "items": AppendLog(orjson.dumps(self.items.state())[:-1]),
            "halves": [h.state() for h in self.halves],
            "epoch": self.epoch,
            "kb": self.kb,
            "history": {"digest": self.history, "users": self.history_users, "items": self.history_items},
            "through": self.through,
            "applied": self.applied,
            "pending": {str(t): p for t, p in self.pending.items()},
            "flushing": self.flushing,
            "sent": list(self.sent) if self.sent is not None else None,
        }

    @classmethod
    def from_state(cls, st: dict, config: EngineConfig, queries: list[WindowQuery]) -> "PartitionState":
        if st.get("version") != STATE_VERSION:
            raise ValueError(f"unsupported stage-A partition state version {st.get('version')}")
        s = cls(st["partition"], config, queries, bytes(st["kb"]))
        s.windows = TumblingWindows.from_state(st["windows"], 0.0)
        s.held = HeldEvents()
        s.held.load_state(st["held"])
        s.users = Names.from_state(orjson.loads(bytes(st["users"]) + b"]"))
        s.items = Names.from_state(orjson.loads(bytes(st["items"]) + b"]"))
        s._bind()
        for h, d in zip(s.halves, st["halves"]):
            h.load_state(d)
        s.epoch = st["epoch"]
        hist = st["history"]
        s.history, s.history_users, s.history_items = bytes(hist["digest"]), hist["users"], hist["items"]
        s.through, s.applied = st["through"], st["applied"]
        s.pending = {int(t): p for t, p in st["pending"].items()}
        s.flushing = st["flushing"]
        s.sent = tuple(st["sent"]) if st["sent"] is not None else None
        return s


class StageA:
    """Stage A over the input partitions it owns (module doc). Messages for the coordinator accumulate in order and
    are taken with :meth:`poll`; outcomes come in through :meth:`on_outcome`."""

    def __init__(self, config: EngineConfig, queries: list[WindowQuery], store: BudgetStore) -> None:
        check_staged(queries, config)
        self.config = config
        self.queries = list(queries)
        self.store = store
        self.parameters = release_parameters(config, self.queries)
        self.scope = admission_scope(config.scope, [q.id for q in self.queries], canonical(self.parameters))
        self.parts: dict[int, PartitionState] = {}
        self.counters = EngineCounters()
        self._out: list[bytes] = []
        self._outcomes: dict[int, WindowOutcome] = {}  # received, not yet applied by every owned partition
        self._needs_value = [q.id for q in self.queries if getattr(q, "requires_value", False)]
        self._settles = any(h.settles for h in (stage_a_half(q) for q in self.queries))
        self._failed: str | None = None  # why a step failed part-way (EngineFailed until a restore)

    def _guard(self, step, *args):
        """Run a step that may admit, settle or send; a failure part-way (the store unreachable, a reply lost)
        leaves the partitions' state mid-close, so every later call is refused (:class:`EngineFailed`) until
        :meth:`restore` — the caller restores its checkpoint and re-reads its input from its offsets, as the
        Kafka worker does for the single engine; the replayed admits are copies (no second charge)."""
        if self._failed is not None:
            raise EngineFailed(f"a stage-A step failed ({self._failed}) and was not restored since: restore a "
                               "snapshot (the last checkpoint) and re-read the input from its offsets")
        try:
            return step(*args)
        except BaseException as e:
            self._failed = f"{type(e).__name__}: {e}"
            raise

    # ---- ownership -------------------------------------------------------------------------------------------
    def _new_kb(self) -> bytes:
        if self.config.unsafe_test_seed is not None:
            return bounding_key(make_generator(self.config.unsafe_test_seed))  # the single engine's Kb
        return os.urandom(32)

    def assign(self, partitions) -> None:
        """Own these input partitions from their beginning (fresh state)."""
        for p in partitions:
            p = int(p)
            if p in self.parts:
                raise ValueError(f"partition {p} is already owned here")
            self.parts[p] = PartitionState(p, self.config, self.queries, self._new_kb())

    def partition_snapshot(self, partition: int) -> bytes:
        """One owned partition's state as bytes (what :meth:`adopt` takes): a per-partition checkpoint, to be
        stored with that partition's input offset."""
        if self._failed is not None:
            raise EngineFailed(f"a stage-A step failed ({self._failed}): its state is mid-close, not a checkpoint")
        st = self.parts[int(partition)]
        return state_codec.encode({"parameters": canonical(self.parameters), "partition": st.state()})

    def release(self, partition: int) -> bytes:
        """Stop owning ``partition``; its state as bytes for another StageA's :meth:`adopt` (a rebalance)."""
        blob = self.partition_snapshot(partition)
        del self.parts[int(partition)]
        return blob

    def adopt(self, data: bytes) -> None:
        """Own a partition from the state another StageA released (or checkpointed)."""
        d = state_codec.decode(data)
        check_unchanged(d.get("parameters"), self.parameters)
        st = PartitionState.from_state(d["partition"], self.config, self.queries)
        if st.partition in self.parts:
            raise ValueError(f"partition {st.partition} is already owned here")
        self.parts[st.partition] = st
        self._guard(self._advance, st)

    @property
    def partitions(self) -> list[int]:
        return sorted(self.parts)

    def applied(self, partition: int) -> int:
        """The last window outcome ``partition`` applied (outcomes after it must be delivered again after a
        restore or an adopt)."""
        return self.parts[int(partition)].applied

    def poll(self) -> list[bytes]:
        """The messages for the coordinator produced since the last poll, in order."""
        out, self._out = self._out, []
        return out

    # ---- ingest ----------------------------------------------------------------------------------------------
    def ingest(self, batch: EventBatch, partition: int, now: float | None = None) -> list[tuple[int, str]]:
        """Judge a parsed batch of ONE owned input partition, as :meth:`ReleaseEngine.ingest` does (the same
        (row, reason) dead letters), hold the accepted events, and send what became due."""
        st = self.parts.get(int(partition))
        if st is None:
            raise ValueError(f"partition {partition} is not owned by this stage A (owned: {self.partitions})")
        if st.flushing:
            raise ValueError(f"partition {partition} was flushed (end of input): no more events")
        return self._guard(self._ingest, batch, st, now)

    def _ingest(self, batch: EventBatch, st: PartitionState, now: float | None) -> list[tuple[int, str]]:
        n = len(batch)
        if n == 0:
            return []
        self.counters.events_in += n
        no_value = (np.isnan(batch.value) & (np.diff(batch.item_offsets) > 0)) if self._needs_value else None
        if no_value is not None and no_value.any():
            self.counters.dead("missing_value", int(no_value.sum()))
            kept = np.flatnonzero(~no_value)
            head = [(int(i), "missing_value") for i in np.flatnonzero(no_value).tolist()]
            if kept.size == 0:
                st.windows.touch(st.partition, now)
                return head
            sub = self._judge(st, take_events(batch, kept), now)
            out = sorted(head + [(int(kept[i]), r) for i, r in sub])
        else:
            out = self._judge(st, batch, now)
        self._advance(st)
        return out

    def _judge(self, st: PartitionState, batch: EventBatch, now: float | None) -> list[tuple[int, str]]:
        return judge_and_hold(st.windows, st.held, self.counters, batch, st.partition,
                              self.config.max_future_seconds, now)
        rows = None if ok.all() else np.flatnonzero(ok)
        tw = t if rows is None else t[rows]
        lo, hi = int(tw.min()), int(tw.max())
        if lo == hi:
            st.held.add(lo, st.partition, batch if rows is None else take_events(batch, rows))
        else:
            order = np.argsort(tw, kind="stable")
            cuts = np.flatnonzero(np.diff(tw[order])) + 1
            for grp in np.split(order, cuts):
                sel = np.sort(grp) if rows is None else rows[np.sort(grp)]
                st.held.add(int(tw[grp[0]]), st.partition, take_events(batch, sel))
        return rejected

    def flush(self) -> None:
        """End of a bounded input on every owned partition: each sends its held windows (still one window after
        the other's outcome), then a final marker — the coordinator then closes what the single engine's
        :meth:`~ReleaseEngine.flush` closes (``closed_by: end_of_input`` past the watermark)."""
        self._guard(self._flush)

    def _flush(self) -> None:
        for p in self.partitions:
            st = self.parts[p]
            st.flushing = True
            self._advance(st)

    # ---- the window close of one partition -------------------------------------------------------------------
    def _advance(self, st: PartitionState) -> None:
        """Apply the outcomes ``st`` can apply and send every part and marker of ``st`` that is due (module doc,
        steps 2 and 3)."""
        wm_through = st.watermark_through()
        while True:
            # outcome(t) is applied once the partition has done window t itself: after a restore the outcomes of
            # windows it is about to redo are known already, and applying one early would prepare those windows
            # against a later PWYG counter and lose their settle (the replayed part would differ from the first)
            o = self._outcomes.get(st.applied + 1)
            if o is not None and st.through >= o.seq:
                self._apply(st, o)
                continue
            n = st.through + 1
            held = [t for t in st.held.windows if t >= n]
            nxt = min(held) if held else None
            if nxt == n:
                if (not st.flushing and n > wm_through) or st.applied < n - 1:
                    break
                self._admit(st, n)
                continue
            target = wm_through if not st.flushing else max(wm_through, st.through)
            if nxt is not None:
                target = nxt - 1 if st.flushing else min(target, nxt - 1)
            if target < n:
                break
            st.through = target
            st.windows.last_closed = max(st.windows.last_closed, target)
        final = st.flushing and not st.held.windows
        mark = (st.through, wm_through, final)
        if mark != st.sent:
            st.sent = mark
            self._out.append(PartitionMarker(st.partition, *mark).to_bytes())

    def _window_data(self, st: PartitionState, t: int) -> WindowData:
        L = self.config.horizon
        start, end = st.windows.bounds(t)
        b = st.held.peek(t)
        ucodes, icodes = getattr(b, "user_codes", None), getattr(b, "item_codes", None)
        user_ids = st.users.ids_coded(b.user_dict, ucodes) if ucodes is not None else st.users.ids(b.users)
        item_ids = st.items.ids_coded(b.item_dict, icodes) if icodes is not None else st.items.ids(b.items)
        return WindowData(seq=t, epoch=(t - 1) // L, t=(t - 1) % L + 1, start=start, end=end, user_ids=user_ids,
                          ts=np.asarray(b.ts, dtype=np.float64),
                          item_offsets=np.asarray(b.item_offsets, dtype=np.int64), item_ids=item_ids,
                          value=np.asarray(b.value, dtype=np.float64),
                          loc=np.asarray(b.loc, dtype=np.float64).reshape(-1, 2))

    def _admit(self, st: PartitionState, t: int) -> None:
        p = st.partition
        w = self._window_data(st, t)
        if w.epoch != st.epoch:
            for h in st.halves:
                h.new_epoch()
            st.epoch = w.epoch
        draws = BoundingDraws(st.kb, t, st.users, st.items)
        reservations = [h.prepare(w, draws.for_query(q.id)) for h, q in zip(st.halves, self.queries)]
        present = unique_sorted(w.user_ids)
        all_users = unique_sorted(np.concatenate([present] + [r.users for r in reservations]))
        total = np.zeros((all_users.size, N_COMPONENTS), dtype=np.int64)
        for r in reservations:  # the queries' costs add (zCDP composition, Rogers et al. Thm 6)
            if r.users.size:
                _add_rows(total, all_users, r.users, r.costs, subset=True)
        arrays = (w.user_ids, w.ts, w.item_offsets, w.item_ids, w.value, w.loc)
        # p's own replay chain: its previous digest, Kb's name, p's names interned since, its events, its batch
        digest = window_digest(st.history, t, b"stage-a|p%d|" % p + _kb_id(st.kb),
                               st.users.since(st.history_users), st.items.since(st.history_items), arrays,
                               all_users, total)
        st.history, st.history_users, st.history_items = digest, len(st.users), len(st.items)
        part = admit_partition(self.store, self.scope, t, p, all_users, total, st.users, digest.hex())
        mask = part.admitted
        admitted = np.zeros(len(st.users), dtype=bool)
        admitted[all_users[mask]] = True
        n_refused = int(mask.size - np.count_nonzero(mask))
        dropped = int((~admitted[w.user_ids]).sum()) if n_refused else 0
        # the window's item dictionary: every item of p's events in t, in order of first appearance
        uniq, first = np.unique(w.item_ids, return_index=True)
        order = np.argsort(first, kind="stable")
        code_of = np.empty(uniq.size, dtype=np.int64)
        code_of[order] = np.arange(uniq.size, dtype=np.int64)
        dictionary = st.items.names(uniq[order])
        qparts, settle = [], {}
        adm_users = all_users[mask]
        for qi, (h, q, r) in enumerate(zip(st.halves, self.queries, reservations)):
            ids, counts, extra = h.contribution(r, admitted)
            ints = extra.get("point_ints")
            if h.point_code_column is not None and ints is not None and ints.shape[0]:
                ints = ints.copy()  # item ids → codes into the window's dictionary
                col = h.point_code_column
                ints[:, col] = code_of[np.searchsorted(uniq, ints[:, col])]
            keep = admitted[r.users] if r.users.size else np.zeros(0, dtype=bool)
            rows = r.costs[keep]
            qp = QueryPart(q.id, code_of[np.searchsorted(uniq, ids)] if ids.size else np.zeros(0, np.int64),
                           np.asarray(counts, dtype=np.int64), admitted=int(rows.shape[0]),
                           charged=int((rows > 0).any(axis=1).sum()) if rows.size else 0,
                           sums=extra.get("sums"), points=extra.get("points"), order=extra.get("order"),
                           point_ints=ints, info=extra.get("info"))
            if rows.shape[0]:
                qp.max_cost, qp.min_cost = rows.max(axis=0), rows.min(axis=0)
            qparts.append(qp)
            if h.settles and rows.shape[0]:
                settle[str(qi)] = {"pos": np.searchsorted(adm_users, r.users[keep]), "res": rows}
        if self._settles and adm_users.size:
            st.pending[t] = {"users": adm_users, "total": total[mask], "settle": settle}
        c = self.counters
        c.windows_closed += 1
        c.admitted_users += int(adm_users.size)
        c.halted_users += n_refused
        c.dropped_halted_events += dropped
        msg = PartContribution(seq=t, partition=p, events=w.n_events, admitted=int(adm_users.size),
                               refused=n_refused, dropped_events=dropped, items=dictionary, queries=qparts)
        self._out.append(msg.to_bytes())
        st.held.drop(t)
        st.through = t
        st.windows.last_closed = max(st.windows.last_closed, t)

    # ---- outcomes --------------------------------------------------------------------------------------------
    def on_outcome(self, data: bytes) -> None:
        """Window t's outcome from the coordinator: every owned partition applies the outcomes it has not applied,
        in order (a gap waits for the missing one) and each only once it has done that window itself, and sends
        what became due. Repeats are ignored."""
        self._guard(self._on_outcome, data)

    def _on_outcome(self, data: bytes) -> None:
        o = WindowOutcome.from_bytes(data)
        if not self.parts or o.seq > min(st.applied for st in self.parts.values()):
            self._outcomes.setdefault(o.seq, o)
        for p in self.partitions:
            self._advance(self.parts[p])
        if self.parts:
            low = min(st.applied for st in self.parts.values())
            for t in [t for t in self._outcomes if t <= low]:
                del self._outcomes[t]

    def _apply(self, st: PartitionState, o: WindowOutcome) -> None:
        pend = st.pending.pop(o.seq, None)
        if pend is not None:
            actual = np.array(pend["total"], dtype=np.int64, copy=True)
            for qi, s in pend["settle"].items():
                info = o.queries.get(self.queries[int(qi)].id)
                pos = np.asarray(s["pos"], dtype=np.int64)
                res = np.asarray(s["res"], dtype=np.int64)
                rows = st.halves[int(qi)].settle_rows(info, st.partition, np.asarray(pend["users"])[pos], res)
                if rows is not None:
                    actual[pos] += rows - res
        if pend is not None and o.settle:
            sc = partition_scope(self.scope, st.partition)
            settle_ids = getattr(self.store, "settle_ids", None)
            if settle_ids is not None:
                settle_ids(sc, o.seq, pend["users"], actual, st.users)
            else:
                self.store.settle(sc, o.seq, st.users.names(pend["users"]), actual)
        for h, q in zip(st.halves, self.queries):
            h.apply_outcome(o.queries.get(q.id), o.seq)
        st.applied = o.seq

    # ---- snapshot --------------------------------------------------------------------------------------------
    def snapshot(self) -> bytes:
        """Every owned partition's state (each movable on its own: :meth:`release`), and the counters."""
        if self._failed is not None:
            raise EngineFailed(f"a stage-A step failed ({self._failed}): its state is mid-close, not a checkpoint")
        return state_codec.encode({
            "version": STATE_VERSION,
            "parameters": canonical(self.parameters),
            "partitions": {str(p): st.state() for p, st in self.parts.items()},
            "counters": dict(self.counters.__dict__),
        })

    def restore(self, data: bytes) -> None:
        d = state_codec.decode(data)
        if d.get("version") != STATE_VERSION:
            raise ValueError(f"unsupported stage-A snapshot version {d.get('version')}")
        check_unchanged(d.get("parameters"), self.parameters)
        self.parts = {int(p): PartitionState.from_state(s, self.config, self.queries)
                      for p, s in d["partitions"].items()}
        self.counters = EngineCounters(**d["counters"])
        self._out, self._outcomes, self._failed = [], {}, None
