"""Per-user privacy filters: the budget-store contract and its stores (in-memory, Redis)."""

from streamdp.filter.memory import MemoryBudgetStore
from streamdp.filter.store import BudgetStore, StoreError, UserBudget

__all__ = ["BudgetStore", "MemoryBudgetStore", "StoreError", "UserBudget", "open_store"]


def open_store(url: str | None, default_budget=None) -> BudgetStore:
    """Open a store from a URL: ``redis://`` / ``rediss://`` (Redis), ``memory://`` or None (in-memory),
    anything else is a local file path for the embedded store (created if missing)."""
    import os

    if url is None or url == "memory://":
        return MemoryBudgetStore(default_budget)
    if url.startswith(("redis://", "rediss://", "unix://")):
        from streamdp.filter.redis_store import RedisBudgetStore

        return RedisBudgetStore.from_url(url, default_budget=default_budget)
    if "://" in url:
        raise ValueError(f"unsupported store URL scheme: {url!r} (use redis://, rediss://, memory:// or a file path)")
    if os.path.exists(url):
        st = MemoryBudgetStore.load(url)
        return st
    st = MemoryBudgetStore(default_budget, path=url)
    return st
