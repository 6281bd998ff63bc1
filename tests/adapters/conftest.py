"""Fixtures of the adapter tests."""

from __future__ import annotations

import pytest

from streamdp.adapters.kafka.checkpoint import RedisCheckpoint
from streamdp.filter.redis_store import RedisBudgetStore


@pytest.fixture(params=["redis", "cluster"])
def ckpt(request):
    """A claimed checkpoint of group "g" over topic "events" in a real redis-server (the session's), or in the
    session's 3-primary Redis Cluster (every key of the checkpoint in the store's hash slot)."""
    store = RedisBudgetStore.from_url(request.getfixturevalue("redis_url" if request.param == "redis"
                                                              else "redis_cluster_url"))
    c = RedisCheckpoint(store, "g", "events")
    c.claim("w1")
    yield c
    store.close()
