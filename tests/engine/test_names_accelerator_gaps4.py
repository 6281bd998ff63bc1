"""Interned names → ids (``streamdp.engine.query.Names``) past the sizes the other tests reach (mutation round 4).

The vectorised accelerator keeps the hashes of the interned names in two sorted tables: ``recent`` and ``main``;
``recent`` is merged into ``main`` once it holds more than 2^14 names (and a quarter of ``main``), i.e. in every
engine that has seen more than 16 384 distinct users (or items), and no unit test went past that merge. A name
mapped to the wrong id charges and releases the wrong user (docs/contract.md §3), a crash in the lookup stops the
service, and a lookup that silently falls back to the dict for every name loses the accelerator's whole point.

Known answers: ids are dense and assigned in order of first appearance, so after interning ``u0, u1, …`` the id of
``u{i}`` is ``i``. The hash is replaced by a fixed injective one (a multiplicative permutation of the suffix, or
the suffix itself) so that the tables' layout does not depend on the interpreter's hash seed.
"""

from __future__ import annotations

import numpy as np
import pytest

from streamdp.engine import query as query_mod
from streamdp.engine.query import Names

_MERGE_AT = 1 << 14  # the module's merge threshold of the recent table (documented in Names._sync)


@pytest.fixture(autouse=True)
def _accelerator_from_small_sizes(monkeypatch):
    """The service asks the accelerator only past ``_ACCEL_MIN_INTERNED`` interned names (below, the dict is
    faster); these tests exercise its tables at the sizes where they merge, so it answers from 256 names on."""
    monkeypatch.setattr(query_mod, "_ACCEL_MIN_INTERNED", query_mod._VECTOR_MIN)


def _spread_hash(s: str) -> int:
    """Injective on u<i> (odd multiplier modulo 2^64), spread over the whole signed 64-bit range."""
    return (int(s[1:]) * 0x9E3779B97F4A7C15) % (1 << 64) - (1 << 63)


class _CountingIndex(dict):
    """``Names.index`` that counts its ``get`` calls (the dict path of a lookup)."""

    gets = 0

    def get(self, key, default=None):
        type(self).gets += 1
        return super().get(key, default)


def test_lookups_after_the_recent_table_is_merged_use_the_accelerator_and_give_the_right_ids(monkeypatch):
    monkeypatch.setattr(query_mod, "_name_hash", _spread_hash)
    n = Names()
    first = 20_000  # > 2^14: the first large lookup merges them all into the main table
    assert first > _MERGE_AT
    np.testing.assert_array_equal(n.ids([f"u{i}" for i in range(first)]), np.arange(first))
    rng = np.random.default_rng(41)  # only picks which interned names are looked up
    pick = rng.choice(first, size=600, replace=False)
    np.testing.assert_array_equal(n.ids([f"u{i}" for i in pick]), pick)  # merged table
    second = 17_000  # > 2^14 again: merged into the non-empty main table (the merge's positions matter now)
    np.testing.assert_array_equal(n.ids([f"u{i}" for i in range(first, first + second)]),
                                  np.arange(first, first + second))
    pick2 = first + rng.choice(second, size=600, replace=False)
    np.testing.assert_array_equal(n.ids([f"u{i}" for i in pick2]), pick2)  # second merge
    more = second + 700  # the last 700 are interned after it: the recent table
    np.testing.assert_array_equal(n.ids([f"u{i}" for i in range(first + second, first + more)]),
                                  np.arange(first + second, first + more))
    mixed = np.concatenate([pick[:200], pick2[:200], first + second + rng.choice(700, size=200, replace=False)])
    rng.shuffle(mixed)
    names = [f"u{i}" for i in mixed]
    np.testing.assert_array_equal(n.ids(names), mixed)  # both tables in one lookup (also syncs the recent one)
    assert n.names(mixed) == names

    # every one of these names is interned: the accelerator answers them all, the dict is never asked
    n.index = _CountingIndex(n.index)
    _CountingIndex.gets = 0
    np.testing.assert_array_equal(n.ids(names), mixed)
    assert _CountingIndex.gets == 0

    # new names among known ones: only the new ones go to the dict; their ids follow in order of appearance
    fresh = [f"u{i}" for i in (10**6, 10**6 + 7, 10**6)]
    ids = n.ids(names[:200] + fresh + names[200:])
    np.testing.assert_array_equal(ids[:200], mixed[:200])
    assert ids[200:203].tolist() == [first + more, first + more + 1, first + more]
    np.testing.assert_array_equal(ids[203:], mixed[200:])
    assert len(n) == first + more + 2


def test_a_new_name_hashing_above_every_interned_name_gets_a_new_id(monkeypatch):
    """A lookup's binary search lands one past the table's end for a hash above every key; that position must be
    clamped, not read (IndexError). With the suffix as the hash, u5000 is above all of u0..u299."""
    monkeypatch.setattr(query_mod, "_name_hash", lambda s: int(s[1:]))
    n = Names()
    n.ids([f"u{i}" for i in range(300)])
    names = [f"u{i}" for i in range(299, -1, -1)] + ["u5000", "u-7"]
    got = n.ids(names)
    assert got.tolist() == list(range(299, -1, -1)) + [300, 301]
    assert n.names([300, 301]) == ["u5000", "u-7"]
