"""The budget-store contract: per-user privacy filters (Liang–Yi (adaptive budgeting) Alg. 1, filter eq. (7)) with reserve/settle.

Every store (in-memory, Redis) implements exactly this interface and passes the same contract tests
(``tests/filter/test_store_contract.py``).

Semantics (docs/contract.md §3):

* A user's **budget** is a fixed-point vector (see :mod:`streamdp.accounting.cost`): the store's default, or a
  per-user override set by :meth:`BudgetStore.grant`. **Spent** starts at zero.
* :meth:`BudgetStore.admit` is one atomic check-and-charge for a batch: a user is admitted iff they are not
  halted and ``spent + cost ≤ budget`` in **every** component (Liang–Yi (adaptive budgeting) eq. (7), componentwise). Admitted users are
  charged ``cost`` (the reservation). A user who does not fit is **halted for good** (sticky HALT, Liang–Yi (adaptive budgeting) Alg. 1);
  nothing is charged to them. A non-halted user with an all-zero cost is admitted free (Liang–Yi (adaptive budgeting) Alg. 1: R = 0
  returns NULL and charges nothing).
* Each batch is identified by ``(scope, seq)`` where ``seq`` increases per scope (the engine uses its window
  sequence number) and, when it carries one, by its replay ``digest`` (the engine's
  :mod:`streamdp.engine.replay_digest`: a hash of everything the window close depends on).
* **Exactly once per batch, however it is cut.** Every user's outcome of a batch is recorded in the user's own
  record, tagged with the batch: ``(seq, tag)`` where ``tag`` is the first 16 hex digits of the digest (none
  without a digest). An admit that finds the user's state at ``(seq, its tag)`` is a *copy* of a batch already
  applied to that user — a retry after a socket timeout, the late chunk of a stalled connection, another owner's
  replay, the same batch cut into other chunks or with other users left out — and gets the recorded outcome,
  charging nothing. A check-and-charge of one user and the record of its outcome are one atomic step, so two copies
  racing each other charge once. An admit without a digest (administrative callers, tests) takes any state at
  ``seq`` for a copy.
* **Stale replays.** A user whose state in the scope is of a *later* seq, written by an admit that carried a
  digest, is answered "admitted" and charged nothing by a *trusted* admit (below): a refusal halts for good and a
  refused user's state is never rewritten, so a state of a later seq means the user was not refused at ``seq``.
  ("Refused if halted", the first rule, made a replay after a crash drop the data of a user halted in a later
  window that the lost run had closed, and so release something other than what was charged.)
* **Replay digests.** The stale answer is sound only for a replay of the *same* batch. The store records the first
  digest of each ``(scope, seq)`` (keeping those of the last :data:`DIGEST_KEEP` seqs of a scope); the record is
  *tainted* when, as it is made, a later seq of the scope is already recorded (a reach-back replay: the first run of
  ``seq`` left no digest, forgotten or from before digests). An admit is trusted iff its digest is the recorded,
  untainted one of an earlier admit of ``(scope, seq)``; an admit without a digest is always trusted. Everything
  not answered by the copy or the stale rule is judged as a new batch: checked and charged (a user halted for good
  is refused; one whose state is a refusal keeps it), and the user's state becomes ``(seq, tag)`` — so a copy of
  that batch is free again. An unfaithful replay therefore pays, once: never under-charged, never stuck.
* **Fencing.** An admit or settle may carry a :class:`Fence` (``name``, ``epoch``) obtained from
  :meth:`BudgetStore.claim_fence` (the Kafka worker uses its checkpoint's claim). Once a later epoch of the name was
  claimed, an admit or settle under an earlier one is refused with :class:`Fenced`, before anything is written; a
  fence whose record the store no longer holds raises :class:`StoreLost`.
* **Nothing is written before an error.** Each atomic step validates everything it reads (key types, stored
  amounts, the default budget) before its first write. A store that holds no default budget (deleted, evicted,
  lost) raises :class:`DefaultBudgetMissing` — never a refusal or a halt.
* :meth:`BudgetStore.settle` lowers an admitted user's charge for batch ``(scope, seq)`` from the reserved cost to
  the actual cost (``0 ≤ actual ≤ reserved`` componentwise, else :class:`ValueError`). Settling twice, or a batch
  that has no reservation for the user, is a no-op. With a ``digest`` only the reservation of that batch (same
  tag) is settled. Recorded spend never drops below what was executed.
* The **release log** maps an idempotency key (query, epoch, window) to the published record bytes; the first
  write wins and every later write returns the stored bytes. **Retention**: for keys of the engine's form
  ``<query>/<epoch>/<window>`` the store keeps a 128-bit digest (SHA-256) of every record for good, and the record
  itself only for the latest :data:`RELEASE_BODIES_KEPT` windows of each query (by (epoch, window)). A later write
  of a key whose record was dropped returns the given bytes if they hash to the kept digest, else
  :func:`trimmed_marker` (bytes that equal no record: the caller's comparison fails, as for a different record);
  :meth:`BudgetStore.get_release` returns that marker for it. So a logged window is never released again with
  other content (no re-noise), while the log grows by 16 bytes per query and window instead of the records.
* The **ledger** is an append-only list of JSON-able dict entries (releases and administrative changes).
"""

from __future__ import annotations

import abc
import hashlib
import re
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np

from streamdp.accounting.cost import COMPONENTS, N_COMPONENTS, Cost, fixed_to_cost


#: Per scope, the replay digests of the last ``DIGEST_KEEP`` batch seqs are kept (an admit of seq ``s`` forgets
#: those of seqs below ``s - DIGEST_KEEP``): a replay reaching further back than that is charged again.
DIGEST_KEEP = 16384

#: The release log keeps the records of the latest this many windows of each query (their digests for good).
RELEASE_BODIES_KEPT = 1024

_RELEASE_KEY = re.compile(r"^(.+)/([0-9]{1,15})/([0-9]{1,15})$")


def release_parts(key: str) -> tuple[str, int, int] | None:
    """(query, epoch, window) of a release key of the engine's form ``<query>/<epoch>/<window>`` (1 ≤ window < 2²¹ —
    a horizon is at most 2²⁰ —, epoch < 2³¹), else None (such keys keep their record for good)."""
    m = _RELEASE_KEY.match(key)
    if m is None or not 1 <= int(m.group(3)) < 1 << 21 or int(m.group(2)) >= 1 << 31:
        return None
    return m.group(1), int(m.group(2)), int(m.group(3))


def release_digest(record: bytes) -> bytes:
    """The 16-byte digest the release log keeps of a record: SHA-256 truncated to 128 bits."""
    return hashlib.sha256(record).digest()[:16]


def trimmed_marker(digest: bytes) -> bytes:
    """What the release log answers for a record it dropped (retention): no record starts with a NUL byte."""
    return b"\x00streamdp: release record dropped by the release log's retention; sha256/128 " + digest.hex().encode()


def check_digest(digest) -> str | None:
    """A replay digest: ``None`` or 8–128 lowercase hex digits."""
    if digest is None:
        return None
    if (not isinstance(digest, str) or not 8 <= len(digest) <= 128
            or any(c not in "0123456789abcdef" for c in digest)):
        raise ValueError(f"digest must be 8-128 lowercase hex digits, got {digest!r:.40}")
    return digest


class StoreError(RuntimeError):
    """The budget store cannot be reached or answered wrongly; nothing was charged or published."""


class DefaultBudgetMissing(StoreError):
    """The store holds no default budget (deleted, evicted, or lost in a restart without persistence): admission
    cannot decide anything and writes nothing. Restore it with ``streamdp budget set-default``."""


class Fenced(RuntimeError):
    """A later owner claimed the fence (or the checkpoint) this writer holds: it must stop writing. Not a
    :class:`StoreError`: retrying cannot help."""


class StoreLost(RuntimeError):
    """The store no longer holds a record this writer created (its fence, its checkpoint): the store lost its
    state (flushed, restarted without persistence). Not a :class:`StoreError`: retrying cannot help."""


@dataclass(frozen=True)
class Fence:
    """An owner's claim on ``name`` (see :meth:`BudgetStore.claim_fence`): admits and settles under it are refused
    once a later epoch was claimed."""

    name: str
    epoch: int


def digest_tag(digest: str | None) -> str:
    """The tag of a batch in a user's state: the first 16 hex digits of its digest ('' without one). 64 bits: two
    different batches of one (scope, seq) share a tag with probability 2⁻⁶⁴."""
    return "" if digest is None else digest[:16]


def check_fence(fence) -> "Fence | None":
    if fence is None:
        return None
    if (not isinstance(fence, Fence) or not isinstance(fence.name, str) or not fence.name
            or any(c in fence.name for c in "{}") or isinstance(fence.epoch, bool)
            or not isinstance(fence.epoch, int) or not 0 < fence.epoch < 2**53):
        raise ValueError(f"fence must be a Fence(name, epoch) with a name free of braces and 0 < epoch < 2**53, "
                         f"got {fence!r:.80}")
    return fence


@dataclass
class UserBudget:
    user: str
    halted: bool
    spent: np.ndarray  # int64[N_COMPONENTS], fixed point
    budget: np.ndarray  # int64[N_COMPONENTS], fixed point
    extra: dict = field(default_factory=dict)  # "override": the budget is the user's own (a grant), not the default

    def spent_cost(self) -> Cost:
        return fixed_to_cost(self.spent)

    def budget_cost(self) -> Cost:
        return fixed_to_cost(self.budget)

    def remaining(self) -> np.ndarray:
        return self.budget - self.spent


def as_cost_matrix(costs, n: int) -> np.ndarray:
    """Validate/convert a batch of fixed-point cost vectors to an ``(n, N_COMPONENTS)`` int64 array."""
    arr = np.asarray(costs, dtype=np.int64)
    if arr.ndim == 1 and arr.shape[0] == N_COMPONENTS:
        arr = np.broadcast_to(arr, (n, N_COMPONENTS))
    if arr.shape != (n, N_COMPONENTS):
        raise ValueError(f"costs must have shape ({n}, {N_COMPONENTS}), got {arr.shape}")
    if (arr < 0).any():
        raise ValueError("costs must be ≥ 0")
    return np.ascontiguousarray(arr)


class BudgetStore(abc.ABC):
    """Per-user privacy filters. All amounts are fixed-point int64 vectors in the order of ``COMPONENTS``."""

    components = COMPONENTS

    # ---- budgets -------------------------------------------------------------------------------------------
    @abc.abstractmethod
    def default_budget(self) -> np.ndarray: ...

    @abc.abstractmethod
    def set_default_budget(self, budget: np.ndarray, *, actor: str = "operator", reason: str = "",
                           components: Sequence[int] | None = None) -> None:
        """Set the default budget (administrative; writes an audit entry to the ledger). ``components``: only
        these indices of ``budget`` are set, the others keep the value they hold when the change is applied
        (atomically: a concurrent change of another notion is not undone by a vector read before it)."""

    @abc.abstractmethod
    def grant(self, user: str, budget: np.ndarray, *, actor: str = "operator", reason: str = "",
              components: Sequence[int] | None = None) -> None:
        """Set a per-user budget override (administrative; audit entry). Does not un-halt a user. An override
        holds every component: those not in ``components`` keep the user's budget at the moment of the change
        (their override, else the default then) and no longer follow the default."""

    # ---- admission -----------------------------------------------------------------------------------------
    @abc.abstractmethod
    def admit(self, scope: str, seq: int, users: Sequence[str], costs, digest: str | None = None,
              fence: Fence | None = None) -> np.ndarray:
        """Atomic check-and-charge of a batch; returns a bool mask of admitted users (see module doc; ``digest``:
        the batch's replay digest; ``fence``: the owner's claim)."""

    @abc.abstractmethod
    def settle(self, scope: str, seq: int, users: Sequence[str], actual, digest: str | None = None,
               fence: Fence | None = None) -> None:
        """Lower reservations of batch ``(scope, seq)`` to the actual costs (see module doc)."""

    @abc.abstractmethod
    def claim_fence(self, name: str) -> Fence:
        """A new epoch of the fence ``name``: admits and settles under any earlier one are refused from now on."""

    # ---- admission by interned ids (optional fast path) ----------------------------------------------------
    def admit_ids(self, scope: str, seq: int, user_ids: np.ndarray, costs, table,
                  digest: str | None = None, fence: Fence | None = None) -> np.ndarray:
        """:meth:`admit` of the users ``table.names(user_ids)``, same semantics and result.

        ``table`` is the caller's name table (the engine's :class:`streamdp.engine.query.Names`): ``len(table)``
        names with dense ids, ``table.names(ids)`` → names, append-only (an id keeps its name for the life of the
        table object). A store may cache ``table`` id → its own user record to skip the name lookups; the default
        converts the ids to names and calls :meth:`admit`."""
        kw = {} if fence is None else {"fence": fence}  # (a subclass written before fences takes no fence)
        return self.admit(scope, seq, table.names(user_ids), costs, digest=digest, **kw)

    def settle_ids(self, scope: str, seq: int, user_ids: np.ndarray, actual, table, digest: str | None = None,
                   fence: Fence | None = None) -> None:
        """:meth:`settle` of the users ``table.names(user_ids)`` (see :meth:`admit_ids`)."""
        kw = {k: v for k, v in (("digest", digest), ("fence", fence)) if v is not None}
        self.settle(scope, seq, table.names(user_ids), actual, **kw)

    # ---- release log and ledger ----------------------------------------------------------------------------
    @abc.abstractmethod
    def put_release(self, key: str, record: bytes) -> bytes:
        """Store ``record`` under ``key`` unless present; return the stored bytes (first write wins)."""

    @abc.abstractmethod
    def get_release(self, key: str) -> bytes | None: ...

    @abc.abstractmethod
    def append_ledger(self, entry: dict) -> None: ...

    @abc.abstractmethod
    def ledger(self, *, query: str | None = None, since: float | None = None) -> list[dict]: ...

    # ---- inspection ----------------------------------------------------------------------------------------
    @abc.abstractmethod
    def get_user(self, user: str) -> UserBudget | None:
        """The user's record, or ``None`` if the store has never seen them."""

    @abc.abstractmethod
    def iter_users(self) -> Iterator[UserBudget]: ...

    def close(self) -> None:  # pragma: no cover - trivial
        pass
