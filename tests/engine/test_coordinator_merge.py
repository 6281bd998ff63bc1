"""The coordinator's merge of the partitions' admissions refuses parts that do not cover the window's users once
each (scale-out review, 2026-12-07: a user in two parts and another in none passed the count check, and the later
part's answer won — a refusal could become an admission)."""

from __future__ import annotations

import numpy as np
import pytest

from streamdp.accounting.cost import N_COMPONENTS
from streamdp.engine.coordinator import merge_admissions
from streamdp.engine.stage_a import AdmittedPart


def part(p: int, users, admitted) -> AdmittedPart:
    users = np.asarray(users, dtype=np.int64)
    return AdmittedPart(seq=3, partition=p, scope=f"s/p{p}", digest="d", users=users,
                        costs=np.zeros((users.size, N_COMPONENTS), dtype=np.int64),
                        admitted=np.asarray(admitted, dtype=bool))


def test_disjoint_parts_give_each_users_own_answer():
    mask = merge_admissions(np.array([1, 2, 5, 7]), [part(1, [2, 7], [True, False]), part(0, [1, 5], [False, True])])
    assert mask.tolist() == [False, True, True, False]


def test_a_user_in_two_parts_is_refused_even_when_the_count_matches():
    # user 2 twice (refused by p0, admitted by p1), user 5 in no part: 3 answers for 3 users
    with pytest.raises(ValueError, match="twice"):
        merge_admissions(np.array([1, 2, 5]), [part(0, [1, 2], [True, False]), part(1, [2], [True])])


def test_a_user_in_no_part_is_refused():
    with pytest.raises(ValueError, match="cover"):
        merge_admissions(np.array([1, 2, 5]), [part(0, [1, 2], [True, True])])


def test_a_part_naming_a_user_outside_the_window_is_refused():
    with pytest.raises(ValueError, match="outside"):
        merge_admissions(np.array([1, 2]), [part(0, [1, 3], [True, True])])
