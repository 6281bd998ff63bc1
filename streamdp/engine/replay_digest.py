"""Replay digests: what a window's admission was computed from, so that the budget store can tell a faithful replay
from a different batch under the same (scope, window).

The store answers a second admit of (scope, seq) with the first outcome and charges nothing (docs/contract.md §3: a retry
after a crash must not charge twice). That is sound only if the second admit asks for the same releases as the first
— the same data, the same engine state and the same randomness, so that reservations, releases and actual costs all
repeat. Replays are deterministic only under conditions (:mod:`streamdp.adapters.kafka.ordering`: disorder within
``allowed_lateness``, no idle timeout firing): outside them an event may fall into a window
in one run and not in the other, and a replay answered "already charged" would publish a release whose cost nobody
paid.

The engine therefore chains, window by window, a digest of everything a window close depends on::

    D_seq = BLAKE2b-128(D_prev ‖ seq ‖ noise-generator state before the close ‖ user and item names interned
                        since the previous close ‖ the window's events (interned ids, times, items, values,
                        locations) ‖ the admitted batch (user ids; reservations per used cost component))

(``D`` of a fresh engine is 16 zero bytes; the snapshot carries ``D`` and how many names it covers.) The engine's
state at a close is a function of the snapshot it started from and of the chain's inputs since, so equal digests
mean equal closes: the names say which user each id is, the generator state says which noise and which bounding
subsets are drawn. A secure engine restored without its generator state (re-keyed from the OS) never repeats a
digest; the Kafka worker restores the generator state stored with its checkpoint, so its faithful replays do.

The store records the first digest of each (scope, seq) and trusts a replay (first outcome, no charge) only when its
digest is that one; any other admit of the same (scope, seq) is charged as a new batch (never under-charged; an
unfaithful replay pays twice). See :mod:`streamdp.filter.store`.

The digest is an unkeyed 128-bit BLAKE2b: two different closes collide with probability about 2⁻¹²⁸ (finding a
collision on purpose takes about 2⁶⁴ work, and a crash at the right moment besides), and the generator's key enters
it only through a preimage-resistant hash (the checkpoint holds that key in Redis anyway).
"""

from __future__ import annotations

import hashlib

import numpy as np
import orjson

GENESIS = bytes(16)  # the digest before the first window close


def generator_fingerprint(rng: np.random.Generator) -> bytes:
    """The noise generator's full state (bit-generator name, key, counter, buffered output) as canonical bytes."""
    state = rng.bit_generator.state
    try:
        return orjson.dumps(state, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_SORT_KEYS)
    except TypeError:  # a bit generator whose state holds integers beyond 64 bits (PCG64): its full repr
        with np.printoptions(threshold=np.inf):
            return repr(state).encode()


def _array(h, a: np.ndarray) -> None:
    a = np.ascontiguousarray(a)
    h.update(b"%s%s|" % (a.dtype.str.encode(), repr(a.shape).encode()))
    h.update(a.reshape(-1).view(np.uint8))


def window_digest(prev: bytes, seq: int, generator_state: bytes, new_users: list[str], new_items: list[str],
                  arrays, all_users: np.ndarray, reservations: np.ndarray) -> bytes:
    """``D_seq`` of the module doc. ``arrays``: the window's event arrays in a fixed order (see
    :meth:`streamdp.engine.engine.ReleaseEngine.close_window`). Every part is length-prefixed, so no two different
    inputs hash the same byte string."""
    h = hashlib.blake2b(digest_size=16, person=b"streamdp-replay")
    h.update(prev)
    h.update(b"%d|" % seq)
    h.update(b"%d|" % len(generator_state))
    h.update(generator_state)
    for names in (new_users, new_items):
        blob = orjson.dumps(names)
        h.update(b"%d|" % len(blob))
        h.update(blob)
    for a in arrays:
        _array(h, a)
    _array(h, all_users)
    # the reservations by cost component, the all-zero components left out (a deployment's queries use few of them:
    # hashing them would cost more than the rest of the reservations), each kept one named by its index
    by_component = np.ascontiguousarray(np.asarray(reservations).T)
    used = np.flatnonzero(by_component.any(axis=1))
    _array(h, used)
    _array(h, by_component[used])
    return h.digest()


def partition_digest(window: bytes, partition: int, lo: int, end: int, users: np.ndarray) -> bytes:
    """``D_{p,seq}``: the replay digest of input partition ``p``'s admission of a window (its own batch in its own
    scope, streamdp.engine.stage_a). ``window`` is the window's ``D_seq`` above, which covers the engine's state,
    the generator's, every name, all of the window's events and its whole batch with the reservations; what it does
    not say is the cut: the partition's rows ``[lo, end)`` of the window's events and its ``users``. Two partitions
    of one window never share a digest."""
    h = hashlib.blake2b(digest_size=16, person=b"streamdp-part")
    h.update(window)
    h.update(b"%d|%d|%d|" % (int(partition), int(lo), int(end)))
    _array(h, np.asarray(users, dtype=np.int64))
    return h.digest()
