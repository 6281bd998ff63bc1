"""Replay digests in the budget stores: cases the first tests left open (mutation audit, 2026-11-23).

Each test pins one rule of ``streamdp/filter/store.py`` ("Replay digests") that a plausible one-line bug broke without
any test failing: the taint of a record whose batch meets an admission at exactly its seq, the taint of a record
made while a later seq is recorded (a batch of users with no state at all), the highest recorded seq surviving a
reload of the file-backed store, the digest length bounds, the forgetting distance written out as a number, and a
Redis batch answered wholly from the client's halted cache still recording its digest. Expected spends are worked
out by hand from eq. (7) of Liang–Yi (adaptive budgeting) (spent + cost ≤ budget), never read back from the store under test.
"""

from __future__ import annotations

import numpy as np

from streamdp.accounting.cost import N_COMPONENTS
from streamdp.filter.memory import MemoryBudgetStore

A, B, C = "a" * 32, "b" * 32, "c" * 32


def c(x: int) -> list[int]:
    return [x] * N_COMPONENTS


def spent(st, user) -> list[int]:
    return st.get_user(user).spent.tolist()


def test_an_admission_at_exactly_the_recorded_seq_is_charged_as_new_once(make_store):
    """b was admitted at seq 3 without a digest (a run before digests): its untagged state cannot say what that run
    charged, so the first admit of seq 3 under A charges b as new; a later copy under A is then free (b's state is
    (3, A)), where the tainted record of the first design charged every copy again."""
    st = make_store(c(20))
    st.admit("q", 3, ["b"], [c(2)])  # no digest: b's state is an admission at seq 3
    assert st.admit("q", 3, ["a", "b"], [c(3), c(3)], digest=A).tolist() == [True, True]
    assert spent(st, "a") == c(3) and spent(st, "b") == c(2 + 3)  # judged as new
    assert st.admit("q", 3, ["a", "b"], [c(3), c(3)], digest=A).tolist() == [True, True]
    assert spent(st, "a") == c(3) and spent(st, "b") == c(5)  # copies: charged once


def test_a_record_made_while_a_later_seq_is_recorded_is_tainted_even_for_users_without_state(make_store):
    """Seqs 1 and 5 are recorded; the first digest of seq 3 comes later (a reach-back). Its users have no state at
    all, so only "a later seq of the scope is already recorded" can taint it — and that later seq is 5, not the
    first one recorded (1)."""
    st = make_store(c(20))
    st.admit("q", 1, ["x"], [c(1)], digest=B)
    st.admit("q", 5, ["y"], [c(1)], digest=B)
    assert st.admit("q", 3, ["a"], [c(3)], digest=A).tolist() == [True]
    st.admit("q", 4, ["a"], [c(1)], digest=C)  # a's state is now of a later seq
    assert st.admit("q", 3, ["a"], [c(3)], digest=A).tolist() == [True]
    assert spent(st, "a") == c(3 + 1 + 3)  # the stale replay is charged again: the record is tainted
    # the control: a seq above every recorded one gets a clean record, trusted by the next call
    assert st.admit("q", 6, ["d"], [c(3)], digest=A).tolist() == [True]
    st.admit("q", 7, ["d"], [c(1)], digest=C)
    assert st.admit("q", 6, ["d"], [c(3)], digest=A).tolist() == [True]
    assert spent(st, "d") == c(3 + 1)


def test_the_file_backed_store_keeps_the_highest_recorded_seq_across_a_reload(tmp_path):
    path = str(tmp_path / "store.json")
    st = MemoryBudgetStore(np.array(c(20), dtype=np.int64), path=path)
    st.admit("q", 5, ["y"], [c(1)], digest=B)
    st.save()
    back = MemoryBudgetStore.load(path)
    back.admit("q", 3, ["a"], [c(3)], digest=A)  # seq 5 is recorded: a reach-back, tainted
    back.admit("q", 4, ["a"], [c(1)], digest=C)
    assert back.admit("q", 3, ["a"], [c(3)], digest=A).tolist() == [True]
    assert spent(back, "a") == c(3 + 1 + 3)  # tainted: the stale replay is not trusted


def test_digests_of_8_and_of_128_hex_digits_are_accepted(make_store):
    st = make_store(c(20))
    for seq, d in ((1, "0123abcd"), (2, "0123456789abcdef" * 8)):
        assert len(d) in (8, 128)
        assert st.admit("q", seq, ["u"], [c(1)], digest=d).tolist() == [True]
        assert st.admit("q", seq, ["u"], [c(1)], digest=d).tolist() == [True]  # trusted under it
    assert spent(st, "u") == c(2)


def test_a_scope_keeps_the_digests_of_16384_seqs(make_store):
    """The documented distance (docs/DECISIONS.md, consequence 4: the last 16,384 seqs), written out as a number:
    recording seq 16385 keeps seq 1's digest, recording seq 16386 forgets it."""
    st = make_store(c(100))
    st.admit("q", 1, ["u"], [c(1)], digest=A)
    st.admit("q", 2, ["u"], [c(1)], digest=C)  # u's state is of seq 2: a replay of seq 1 is a stale one
    st.admit("q", 16385, ["v"], [c(1)], digest=B)
    assert st.admit("q", 1, ["u"], [c(1)], digest=A).tolist() == [True]
    assert spent(st, "u") == c(2)  # still trusted
    st.admit("q", 16386, ["v"], [c(1)], digest=B)
    assert st.admit("q", 1, ["u"], [c(1)], digest=A).tolist() == [True]
    assert spent(st, "u") == c(3)  # forgotten: charged again


def test_a_batch_answered_wholly_from_the_halted_cache_still_records_its_digest(make_store):
    """u is refused for good at seq 2 (the Redis client caches that and answers later seqs locally). The admit of
    seq 3 under A asks Redis about nobody, yet it is the first admit of (q, 3) with a digest and must record A: a
    later call under B is then another batch, and a call under A is trusted."""
    st = make_store(c(10))
    assert st.admit("q", 2, ["u"], [c(11)]).tolist() == [False]  # 11 > 10: refused, halted
    assert st.admit("q", 3, ["u"], [c(1)], digest=A).tolist() == [False]
    st.admit("q", 4, ["x"], [c(2)], digest=C)  # x's state is of seq 4: a replay of seq 3 is a stale one
    assert st.admit("q", 3, ["x"], [c(2)], digest=A).tolist() == [True]  # A recorded, clean: trusted, free
    assert spent(st, "x") == c(2)
    assert st.admit("q", 3, ["x"], [c(2)], digest=B).tolist() == [True]  # not A: charged as new
    assert spent(st, "x") == c(4)


def test_a_refusal_at_exactly_the_recorded_seq_does_not_taint_the_record(make_store):
    """b was refused at seq 3 without a digest: b's state says what that run answered (refused), so the record
    stays clean — the next call under A gives b that refusal and a its first outcome, free."""
    st = make_store(c(10))
    assert st.admit("q", 3, ["b"], [c(11)]).tolist() == [False]  # 11 > 10: refused, halted at 3
    if make_store.kind != "memory":  # a restarted worker: the client's halted cache is empty, Redis is asked
        st = make_store(c(10))
    assert st.admit("q", 3, ["a", "b"], [c(2), c(2)], digest=A).tolist() == [True, False]
    assert st.admit("q", 3, ["a", "b"], [c(2), c(2)], digest=A).tolist() == [True, False]
    assert spent(st, "a") == c(2) and spent(st, "b") == c(0)
