"""streamdp: differentially private continual releases from event streams.

The library surface (docs/python_api.md), loaded on first use so that ``import streamdp`` stays cheap:

* :class:`Pipeline` — the release engine of a service configuration, fed with events as dicts, JSON strings or
  bytes; :class:`InvalidEvent` / :class:`RejectedEvents` for bad input; :class:`ConfigError` for bad configuration;
  :func:`query_kinds` — the query kinds a configuration can name, with their parameters and cost formulas.
* Budget stores: :class:`MemoryBudgetStore`, :class:`RedisBudgetStore` (per-user filters, the same contract).
* Accounting: :class:`Cost`; :func:`zcdp_to_dp` and :func:`cks_epsilon` (zCDP → (ε, δ), Canonne–Kamath–Steinke),
  :func:`gaussian_exact_epsilon` (one Gaussian mechanism's exact ε), :func:`cgp_to_gp_epsilon` (CGP → GP).
* Mechanisms: :class:`GaussianMechanism`, :class:`LaplaceMechanism` — noise from the secure generator (any other
  only with ``unsafe_rng=True``), integers stay integers and reals are released on a public grid, as the service
  releases; :func:`secure_generator`.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "Pipeline": "streamdp.api",
    "InvalidEvent": "streamdp.api",
    "RejectedEvents": "streamdp.api",
    "ConfigError": "streamdp.config.kinds",
    "MemoryBudgetStore": "streamdp.filter.memory",
    "RedisBudgetStore": "streamdp.filter.redis_store",
    "Cost": "streamdp.accounting.cost",
    "zcdp_to_dp": "streamdp.accounting.zcdp",
    "cks_epsilon": "streamdp.accounting.zcdp",
    "gaussian_exact_epsilon": "streamdp.accounting.zcdp",
    "cgp_to_gp_epsilon": "streamdp.accounting.cgp",
    "GaussianMechanism": "streamdp.mechanisms.gaussian",
    "LaplaceMechanism": "streamdp.mechanisms.laplace",
    "secure_generator": "streamdp.noise.generator",
}

__all__ = sorted([*_EXPORTS, "query_kinds", "__version__"])


def query_kinds() -> dict[str, dict]:
    """Every query kind a configuration's ``[[query]]`` can name: its notion, cost formula, source and parameters
    (``streamdp queries kinds`` prints the same)."""
    from streamdp.config.kinds import kinds

    return {name: k.describe() for name, k in sorted(kinds().items())}


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'streamdp' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
