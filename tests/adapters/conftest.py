"""Fixtures of the adapter tests."""

from __future__ import annotations

import pytest

from streamdp.adapters.kafka.checkpoint import RedisCheckpoint
from streamdp.filter.redis_store import RedisBudgetStore


@pytest.fixture
def ckpt(redis_url):
    """A claimed checkpoint of group "g" over topic "events" in a real redis-server (the session's)."""
    store = RedisBudgetStore.from_url(redis_url)
    c = RedisCheckpoint(store, "g", "events")
    c.claim("w1")
    yield c
    store.close()
