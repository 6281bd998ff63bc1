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
  sequence number). Idempotency: a repeated admit of the same ``(scope, seq)`` returns, for every user it already
  applied to, the first outcome and charges nothing; a user whose last applied seq in that scope is *greater*
  than ``seq`` (a stale replay) is answered "admitted" and charged nothing. (A refusal halts the user for good,
  and a refused user's state is never rewritten, so a state of a later seq means the user was not refused at
  ``seq``: the first outcome, if they took part, was an admission. "Refused if halted", the first rule, made a
  replay after a crash drop the data of a user halted in a later window that the lost run had closed, and so
  release something other than what was charged.)
* **Replay digests.** Those replay answers are sound only for a replay of the *same* batch. An admit may carry a
  ``digest`` (the engine's :mod:`streamdp.engine.replay_digest`: a hash of everything the window close depends on).
  The store records the first digest of each ``(scope, seq)`` (keeping those of the last :data:`DIGEST_KEEP` seqs
  of a scope) and gives the replay answers above only to a later admit (another call) carrying that digest, and
  only if the record is *clean*. The admit that records the digest, an admit carrying another digest, and any admit
  under a *tainted* record are judged as a new batch: every user is checked and charged as if they had no state for
  that seq (a user halted for good is refused; one whose state is a refusal keeps it). A record is tainted when,
  as it is recorded, a later seq of the scope is already recorded, or one of the batch's users has a state of a
  later seq (admission or refusal) or an admission at that seq: the batch replays a seq whose first run left no
  digest (forgotten, or from before digests), so its users' states cannot say what that run charged, and the stale
  rule would contradict the recording call's own answers (it refuses a user halted at a later seq). An unfaithful replay therefore pays
  again: never under-charged, never stuck. An admit without a digest (``None``: administrative callers, tests of
  the rules above) gets the replay answers unconditionally.
* :meth:`BudgetStore.settle` lowers an admitted user's charge for batch ``(scope, seq)`` from the reserved cost to
  the actual cost (``0 ≤ actual ≤ reserved`` componentwise, else :class:`ValueError`). Settling twice, or a batch
  that has no reservation for the user, is a no-op. Recorded spend never drops below what was executed.
* The **release log** maps an idempotency key (query, epoch, window) to the published record bytes; the first
  write wins and every later write returns the stored bytes.
* The **ledger** is an append-only list of JSON-able dict entries (releases and administrative changes).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np

from streamdp.accounting.cost import COMPONENTS, N_COMPONENTS, Cost, fixed_to_cost


#: Per scope, the replay digests of the last ``DIGEST_KEEP`` batch seqs are kept (an admit of seq ``s`` forgets
#: those of seqs below ``s - DIGEST_KEEP``): a replay reaching further back than that is charged again.
DIGEST_KEEP = 16384


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


@dataclass
class UserBudget:
    user: str
    halted: bool
    spent: np.ndarray  # int64[N_COMPONENTS], fixed point
    budget: np.ndarray  # int64[N_COMPONENTS], fixed point
    extra: dict = field(default_factory=dict)

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
    def admit(self, scope: str, seq: int, users: Sequence[str], costs, digest: str | None = None) -> np.ndarray:
        """Atomic check-and-charge of a batch; returns a bool mask of admitted users (see module doc; ``digest``:
        the batch's replay digest)."""

    @abc.abstractmethod
    def settle(self, scope: str, seq: int, users: Sequence[str], actual) -> None:
        """Lower reservations of batch ``(scope, seq)`` to the actual costs (see module doc)."""

    # ---- admission by interned ids (optional fast path) ----------------------------------------------------
    def admit_ids(self, scope: str, seq: int, user_ids: np.ndarray, costs, table,
                  digest: str | None = None) -> np.ndarray:
        """:meth:`admit` of the users ``table.names(user_ids)``, same semantics and result.

        ``table`` is the caller's name table (the engine's :class:`streamdp.engine.query.Names`): ``len(table)``
        names with dense ids, ``table.names(ids)`` → names, append-only (an id keeps its name for the life of the
        table object). A store may cache ``table`` id → its own user record to skip the name lookups; the default
        converts the ids to names and calls :meth:`admit`."""
        return self.admit(scope, seq, table.names(user_ids), costs, digest=digest)

    def settle_ids(self, scope: str, seq: int, user_ids: np.ndarray, actual, table) -> None:
        """:meth:`settle` of the users ``table.names(user_ids)`` (see :meth:`admit_ids`)."""
        self.settle(scope, seq, table.names(user_ids), actual)

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
