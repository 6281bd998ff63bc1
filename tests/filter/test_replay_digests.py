"""Replay digests in the budget stores (``streamdp/filter/store.py``, "Replay digests"), both stores.

The replay answers (same seq: the first outcome; a later seq in the state: admitted) charge nothing, which is sound
only when the replay asks for the same releases. An admit carrying a digest other than the first one recorded for
its (scope, seq) is charged as a new batch. Expected spends are written out from eq. (7) of Liang–Yi (adaptive budgeting) (spent + cost ≤
budget, componentwise), never read back from the store under test.
"""

from __future__ import annotations

import numpy as np
import pytest

from streamdp.accounting.cost import N_COMPONENTS
from streamdp.filter.memory import MemoryBudgetStore
from streamdp.filter.store import DIGEST_KEEP

A, B, C = "a" * 32, "b" * 32, "c" * 32


def c(x: int) -> list[int]:
    return [x] * N_COMPONENTS


def spent(st, user) -> list[int]:
    return st.get_user(user).spent.tolist()


def test_a_replay_under_the_recorded_digest_gets_the_first_outcome_free(make_store):
    st = make_store(c(10))
    assert st.admit("q", 1, ["u", "v"], [c(3), c(4)], digest=A).tolist() == [True, True]
    # the same batch again (a retry, a faithful replay): first outcome, nothing charged — even if it asked more
    assert st.admit("q", 1, ["u", "v"], [c(3), c(4)], digest=A).tolist() == [True, True]
    assert st.admit("q", 1, ["u"], [c(9)], digest=A).tolist() == [True]
    assert spent(st, "u") == c(3) and spent(st, "v") == c(4)


def test_an_admit_under_another_digest_is_charged_as_a_new_batch(make_store):
    """The bug this closes: a replay whose window held other data (an event late in one run and not in the other)
    was answered "already charged" and released data nobody paid for."""
    st = make_store(c(10))
    assert st.admit("q", 1, ["u"], [c(3)], digest=A).tolist() == [True]
    assert st.admit("q", 1, ["u"], [c(5)], digest=B).tolist() == [True]  # 3 + 5 ≤ 10: charged again
    assert spent(st, "u") == c(8)
    assert st.admit("q", 1, ["u"], [c(5)], digest=C).tolist() == [False]  # 8 + 5 > 10: refused, halted
    assert st.get_user("u").halted and spent(st, "u") == c(8)
    # the first digest stays the recorded one: B is not trusted either
    assert st.admit("q", 1, ["u"], [c(0)], digest=B).tolist() == [False]
    assert spent(st, "u") == c(8)


def test_the_settle_after_a_charge_as_new_lowers_that_charge_only(make_store):
    st = make_store(c(20))
    st.admit("q", 1, ["u"], [c(6)], digest=A)
    st.settle("q", 1, ["u"], [c(2)])  # the lost run's settle: spent 2
    st.admit("q", 1, ["u"], [c(6)], digest=B)  # a different replay: 2 + 6
    assert spent(st, "u") == c(8)
    st.settle("q", 1, ["u"], [c(1)])  # its own settle: 2 + 1
    assert spent(st, "u") == c(3)
    st.settle("q", 1, ["u"], [c(0)])  # settled: a second settle is a no-op
    assert spent(st, "u") == c(3)


def test_a_stale_state_does_not_make_an_untrusted_admit_free(make_store):
    st = make_store(c(10))
    st.admit("q", 1, ["u"], [c(2)], digest=A)
    st.admit("q", 2, ["u"], [c(2)], digest=B)  # u's state is now of seq 2
    assert st.admit("q", 1, ["u"], [c(2)], digest=A).tolist() == [True]  # trusted stale replay: free
    assert spent(st, "u") == c(4)
    assert st.admit("q", 1, ["u"], [c(3)], digest=C).tolist() == [True]  # another batch at seq 1: charged
    assert spent(st, "u") == c(7)


def test_a_user_refused_at_a_later_seq_is_refused_by_an_untrusted_admit_but_admitted_by_a_trusted_replay(
        make_store):
    """The Redis store caches users refused for good and answers them locally; an untrusted refusal of a user whose
    refusal is of a later seq must not enter that cache, or the trusted replay after it would be refused."""
    st = make_store(c(10))
    st.admit("q", 1, ["u"], [c(6)], digest=A)
    assert st.admit("q", 2, ["u"], [c(6)], digest=B).tolist() == [False]  # halted at 2
    assert st.admit("q", 1, ["u"], [c(1)], digest=C).tolist() == [False]  # untrusted: a halted user is refused
    assert st.admit("q", 1, ["u"], [c(6)], digest=A).tolist() == [True]  # trusted stale replay: admitted
    assert st.admit("q", 2, ["u"], [c(6)], digest=B).tolist() == [False]  # trusted replay of the refusal
    assert spent(st, "u") == c(6)


def test_a_refusal_is_kept_under_any_digest(make_store):
    st = make_store(c(5))
    assert st.admit("q", 1, ["u"], [c(6)], digest=A).tolist() == [False]
    for d in (A, B, None):
        assert st.admit("q", 1, ["u"], [c(0)], digest=d).tolist() == [False]
    assert st.admit("q", 0, ["u"], [c(0)], digest=C).tolist() == [False]
    assert spent(st, "u") == c(0)


def test_without_a_digest_the_replay_answers_apply_unconditionally(make_store):
    st = make_store(c(10))
    st.admit("q", 1, ["u"], [c(3)], digest=A)
    assert st.admit("q", 1, ["u"], [c(5)]).tolist() == [True]
    assert spent(st, "u") == c(3)


def test_digests_are_per_scope(make_store):
    st = make_store(c(10))
    st.admit("q", 1, ["u"], [c(1)], digest=A)
    st.admit("r", 1, ["v"], [c(1)], digest=B)  # another scope records its own digest for seq 1
    assert st.admit("r", 1, ["v"], [c(1)], digest=B).tolist() == [True]
    assert st.admit("q", 1, ["u"], [c(1)], digest=A).tolist() == [True]
    assert spent(st, "u") == c(1) and spent(st, "v") == c(1)


def test_only_the_last_DIGEST_KEEP_seqs_keep_their_digest(make_store):
    """Known answer of the forgetting rule: recording seq s forgets the digests of seqs below s − DIGEST_KEEP; a
    stale replay of a forgotten seq is charged again (never trusted without its digest). A copy — the user's own
    state still at (seq, tag) — needs no digest record: it is free however old."""
    st = make_store(c(100))
    st.admit("q", 1, ["u", "w"], [c(1), c(1)], digest=A)
    st.admit("q", 2, ["u"], [c(1)], digest=C)  # u's state is now of seq 2; w's stays at (1, A)
    st.admit("q", 1 + DIGEST_KEEP, ["v"], [c(1)], digest=B)  # forgets below 1: seq 1 kept
    assert st.admit("q", 1, ["u", "w"], [c(1), c(1)], digest=A).tolist() == [True, True]
    assert spent(st, "u") == c(2) and spent(st, "w") == c(1)  # u: a trusted stale replay; w: a copy
    st.admit("q", 2 + DIGEST_KEEP, ["v"], [c(1)], digest=B)  # forgets below 2: seq 1 forgotten
    assert st.admit("q", 1, ["u", "w"], [c(1), c(1)], digest=A).tolist() == [True, True]
    assert spent(st, "u") == c(3)  # the stale replay is charged again
    assert spent(st, "w") == c(1)  # the copy is still free
    # A is recorded again for seq 1, tainted (later seqs were recorded: a reach-back); u's state is now (1, A), so
    # a further copy of that batch is free: exactly once, even for a batch judged as new
    assert st.admit("q", 1, ["u"], [c(1)], digest=A).tolist() == [True]
    assert spent(st, "u") == c(3)


def test_a_batch_cut_short_by_a_failure_completes_under_its_digest(make_store):
    """Chunks of one batch carry its digest: the first chunk records it, the retry of the whole batch finds the
    applied users' first outcomes and charges the others (the lost chunk is simulated by a shorter admit)."""
    st = make_store(c(10), chunk=2)
    users = [f"u{i}" for i in range(5)]
    st.admit("q", 1, users[:2], [c(4), c(4)], digest=A)
    assert st.admit("q", 1, users, [c(4)] * 5, digest=A).tolist() == [True] * 5
    assert [spent(st, u) for u in users] == [c(4)] * 5


@pytest.mark.parametrize("bad", ["", "abc", "A" * 32, "g" * 32, " " + "a" * 31, "a" * 129, 123, b"a" * 32])
def test_malformed_digests_are_refused_and_charge_nothing(make_store, bad):
    st = make_store(c(10))
    with pytest.raises(ValueError, match="digest"):
        st.admit("q", 1, ["u"], [c(1)], digest=bad)
    assert st.get_user("u") is None or spent(st, "u") == c(0)
    from streamdp.engine.query import Names
    table = Names()
    ids = table.ids(["w"])
    with pytest.raises(ValueError, match="digest"):
        st.admit_ids("q", 1, ids, np.ones((1, N_COMPONENTS), np.int64), table, digest=bad)
    assert st.get_user("w") is None or spent(st, "w") == c(0)


def test_admit_ids_and_admit_by_name_share_the_digest_rules(make_store):
    from streamdp.engine.query import Names
    st = make_store(c(10))
    table = Names()
    ids = table.ids(["u", "v"])
    assert st.admit_ids("q", 1, ids, np.array([c(3), c(3)]), table, digest=A).tolist() == [True, True]
    assert st.admit("q", 1, ["u"], [c(3)], digest=A).tolist() == [True]  # by name, trusted
    assert st.admit_ids("q", 1, ids[1:], np.array([c(3)]), table, digest=B).tolist() == [True]  # charged
    assert spent(st, "u") == c(3) and spent(st, "v") == c(6)


def test_the_file_backed_memory_store_keeps_its_digests(tmp_path):
    path = str(tmp_path / "store.json")
    st = MemoryBudgetStore(np.array(c(10), dtype=np.int64), path=path)
    st.admit("q", 1, ["u"], [c(3)], digest=A)
    st.admit("q", 2, ["u"], [c(3)], digest=B)
    st.save()
    back = MemoryBudgetStore.load(path)
    assert back.admit("q", 1, ["u"], [c(3)], digest=A).tolist() == [True]  # trusted: free
    assert spent(back, "u") == c(6)
    assert back.admit("q", 2, ["u"], [c(3)], digest=C).tolist() == [True]  # another batch: charged
    assert spent(back, "u") == c(9)
    back.admit("q", 3 + DIGEST_KEEP, ["v"], [c(1)], digest=A)  # the loaded heap forgets seqs 1 and 2
    assert back.admit("q", 1, ["u"], [c(1)], digest=A).tolist() == [True]
    assert spent(back, "u") == c(10)


def test_through_the_engine_a_replay_with_other_data_is_charged_and_a_faithful_one_is_not(make_store):
    """The engine's crash replay (checkpoint = the snapshot before the close, with the generator state) against
    both stores: identical → nothing charged twice; one more event in the replayed window → charged again."""
    import orjson

    from streamdp.accounting.cost import COMPONENTS, budget_vector
    from streamdp.adapters.kafka.checkpoint import DeferredReleaseLog
    from streamdp.config.loader import parse_config
    from streamdp.engine.engine import ReleaseEngine
    from streamdp.input.events import parse_batch

    t0, rho = 1.7e9, COMPONENTS.index("zcdp_rho")
    cfg = parse_config({"service": {"window_seconds": 60.0, "origin": t0, "horizon": 8, "unsafe_test_seed": 3},
                        "budget": {"zcdp_rho": 1000.0, "zcdp_delta": 1e-3},
                        "query": [{"id": "counts", "kind": "continual_counts", "sigma": 1.0,
                                   "max_items_per_window": 4}]})
    events = [{"user": "u", "ts": t0 + 1, "items": ["x"]}, {"user": "v", "ts": t0 + 2, "items": ["x"]},
              {"user": "w", "ts": t0 + 70, "items": ["x"]}]

    def parsed(evs):
        return parse_batch([orjson.dumps(e) for e in evs])[0]

    def run(store, extra=()):
        eng = ReleaseEngine(cfg.engine_config(), cfg.build_queries(), DeferredReleaseLog(store))
        eng.ingest(parsed(events))
        snap = eng.snapshot(include_rng=True)
        eng.close_due()
        once = {u: int(store.get_user(u).spent[rho]) for u in ("u", "v")}
        again = ReleaseEngine(cfg.engine_config(), cfg.build_queries(), DeferredReleaseLog(store))
        again.restore(snap)
        if extra:  # another partition's events (one partition's own late events are late in every run)
            again.ingest(parsed(extra), 1)
        again.close_due()
        return once, {u: int(store.get_user(u).spent[rho]) for u in ("u", "v")}

    once, after = run(make_store(budget_vector(cfg.budget)))
    assert once["u"] > 0 and after == once  # faithful: charged once
    once, after = run(make_store(budget_vector(cfg.budget)), extra=[{"user": "u", "ts": t0 + 3, "items": ["y"]},
                                                                     {"user": "x", "ts": t0 + 65, "items": []}])
    assert after["v"] == 2 * once["v"]  # the same reservation, but another batch: charged again
    assert after["u"] > 2 * once["u"]  # and u's larger one on top of the lost run's


def test_a_first_admit_meeting_an_admission_at_its_seq_or_later_is_charged_once(make_store):
    """A reach-back: seq 5 was admitted without a digest (before digests), so seq 3's first digest is recorded by a
    replay; b's untagged state cannot say what seq 3 charged, so b is charged as new (chunk 2 is not made free by
    chunk 1's record). A later copy of the same batch is then free: b's state is now (3, A) — before batch tags the
    record was tainted and every copy charged again (the budget-store audit of 2026-12-07)."""
    st = make_store(c(20), chunk=1)
    st.admit("q", 5, ["b"], [c(2)])  # no digest: b's state is an admission at seq 5
    assert st.admit("q", 3, ["a", "b"], [c(3), c(3)], digest=A).tolist() == [True, True]
    assert spent(st, "a") == c(3) and spent(st, "b") == c(5)  # b's stale state does not make chunk 2 free
    assert st.admit("q", 3, ["a", "b"], [c(3), c(3)], digest=A).tolist() == [True, True]
    assert spent(st, "a") == c(3) and spent(st, "b") == c(5)  # copies: charged once


def test_every_chunk_of_the_recording_call_is_judged_as_new(make_store):
    """The first version's bug: chunk 1 recorded the digest, chunk 2 found it and gave the replay answers."""
    st = make_store(c(20), chunk=2)
    st.admit("q", 4, ["c"], [c(1)], digest=B)  # c: a state at seq 4 … and seq 4 recorded: a later seq
    assert st.admit("q", 2, ["a", "b", "c"], [c(2), c(2), c(2)], digest=A).tolist() == [True] * 3
    assert [spent(st, u) for u in "abc"] == [c(2), c(2), c(3)]


def test_a_clean_record_is_trusted_by_the_next_call(make_store):
    st = make_store(c(20), chunk=1)
    st.admit("q", 1, ["a", "b"], [c(2), c(2)], digest=A)
    st.admit("q", 2, ["a", "b"], [c(2), c(2)], digest=B)
    assert st.admit("q", 1, ["a", "b"], [c(2), c(2)], digest=A).tolist() == [True, True]  # stale, trusted: free
    assert [spent(st, u) for u in "ab"] == [c(4), c(4)]


def test_a_refusal_at_a_later_seq_taints_the_record(make_store):
    """Found by the mutation audit (2026-11-23): b was refused (halted) at seq 5 before digests; the first call at seq
    3 under A refuses b (halted) and recorded A clean, so the next call under A gave b the stale answer, admitted
    free — not the recording call's answer, and b's data released at no charge. A state of a later seq, refusal
    or admission, now taints the record."""
    st = make_store(c(10))
    assert st.admit("q", 5, ["b"], [c(11)]).tolist() == [False]  # no digest: b refused and halted at 5
    first = st.admit("q", 3, ["a", "b"], [c(2), c(2)], digest=A).tolist()
    assert first == [True, False]
    assert st.admit("q", 3, ["a", "b"], [c(2), c(2)], digest=A).tolist() == [True, False]  # b: refused again
    assert spent(st, "a") == c(2) and spent(st, "b") == c(0)  # a: a copy, free
