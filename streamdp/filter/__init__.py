"""Per-user privacy filters: the budget-store contract and its stores (in-memory, Redis)."""

from streamdp.filter.memory import MemoryBudgetStore
from streamdp.filter.store import BudgetStore, StoreError, UserBudget

__all__ = ["BudgetStore", "MemoryBudgetStore", "StoreError", "UserBudget", "open_store"]


def open_store(url: str | None, default_budget=None, *, lock: bool = False) -> BudgetStore:
    """Open a store from a URL: ``redis://`` / ``rediss://`` / ``unix://`` (Redis), ``redis+cluster://`` /
    ``rediss+cluster://`` (a Redis Cluster), ``memory://`` or None (in-memory),
    anything else is a local file path for the embedded store (created if missing). ``lock``: a file store is
    opened for writing — its lock (:mod:`~streamdp.filter.file_lock`) is taken before the file is read and held
    until ``close()``; :class:`~streamdp.filter.file_lock.StoreBusy` if another process holds it."""
    import os

    from streamdp.filter.file_lock import StoreFileLock

    if url is None or url == "memory://":
        return MemoryBudgetStore(default_budget)
    if url.startswith(("redis://", "rediss://", "unix://", "redis+cluster://", "rediss+cluster://")):
        from streamdp.filter.redis_store import RedisBudgetStore

        return RedisBudgetStore.from_url(url, default_budget=default_budget)
    if "://" in url:
        raise ValueError(f"unsupported store URL scheme: {url!r} (use redis://, rediss://, redis+cluster://, memory:// "
                         "or a file path)")
    from streamdp.filter.memory import check_store_file

    check_store_file(url)  # a device or FIFO is refused before anything (its lock file) is created
    held = StoreFileLock(url).acquire() if lock else None
    try:
        st = MemoryBudgetStore.load(url) if os.path.exists(url) else MemoryBudgetStore(default_budget, path=url)
    except BaseException:
        if held is not None:
            held.release()
        raise
    st.file_lock = held
    return st
