"""The randomized concurrency audit of ``benchmarks/audit_store_concurrency.py`` at CI size: 5 OS processes (two
deployments, each an owner and a successor replaying the same batches in other orders and cuts, the owner fenced
part-way; and an operator granting) against the session's redis-server and its 3-primary Redis Cluster, checked
against a model of the filter — each (scope, seq) charged once, spent = the sum of the charges, nobody over
budget, halts sticky, fenced calls refused. The longer run is the script itself (BENCHMARKS.md)."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "benchmarks"))

from audit_store_concurrency import Plan, run_audit  # noqa: E402

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("seed", [1, 2])
def test_concurrent_owners_successors_and_an_operator_against_redis(redis_url, seed):
    res = run_audit(redis_url, Plan(scopes=2, seqs=40, users=1500, batch=300, grants=60, seed=seed), timeout=120)
    assert res["admissions"] > 1000 and res["refusals"] > 50 and res["halted"] > 10  # both branches exercised
    assert res["owner_calls_fenced"] >= 1 and res["settled_batches"] > 5


def test_concurrent_owners_successors_and_an_operator_against_a_cluster(redis_cluster_url):
    res = run_audit(redis_cluster_url, Plan(scopes=2, seqs=25, users=1000, batch=200, grants=40, seed=3),
                    timeout=120)
    assert res["admissions"] > 500 and res["refusals"] > 20 and res["owner_calls_fenced"] >= 1
