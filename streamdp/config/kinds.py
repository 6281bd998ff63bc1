"""The registry of query kinds: parameters, privacy notion, cost formula and constructor.

``streamdp queries kinds`` prints this registry; the config loader validates every ``[[query]]`` table against it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable


class ConfigError(ValueError):
    """Invalid configuration; the message names the offending field."""


@dataclass(frozen=True)
class Param:
    name: str
    type: str  # "float", "int", "str", "bool", "list"
    doc: str
    default: Any = None
    required: bool = False
    min: float | None = None  # inclusive
    max: float | None = None  # inclusive
    gt: float | None = None  # exclusive lower bound
    lt: float | None = None  # exclusive upper bound
    choices: tuple | None = None

    def check(self, where: str, value: Any) -> Any:
        t = self.type
        if t in ("float", "int"):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f"{where}.{self.name}: must be a number, got {value!r}")
            if t == "int":
                if isinstance(value, float) and not value.is_integer():
                    raise ConfigError(f"{where}.{self.name}: must be an integer, got {value!r}")
                value = int(value)
            else:
                value = float(value)
                if not math.isfinite(value):
                    raise ConfigError(f"{where}.{self.name}: must be finite, got {value!r}")
            if self.gt is not None and not value > self.gt:
                raise ConfigError(f"{where}.{self.name}: must be > {self.gt}, got {value!r}")
            if self.lt is not None and not value < self.lt:
                raise ConfigError(f"{where}.{self.name}: must be < {self.lt}, got {value!r}")
            if self.min is not None and value < self.min:
                raise ConfigError(f"{where}.{self.name}: must be ≥ {self.min}, got {value!r}")
            if self.max is not None and value > self.max:
                raise ConfigError(f"{where}.{self.name}: must be ≤ {self.max}, got {value!r}")
        elif t == "str":
            if not isinstance(value, str):
                raise ConfigError(f"{where}.{self.name}: must be a string, got {value!r}")
        elif t == "bool":
            if not isinstance(value, bool):
                raise ConfigError(f"{where}.{self.name}: must be true or false, got {value!r}")
        elif t == "list":
            if not isinstance(value, list):
                raise ConfigError(f"{where}.{self.name}: must be a list, got {value!r}")
        if self.choices is not None and value not in self.choices:
            raise ConfigError(f"{where}.{self.name}: must be one of {list(self.choices)}, got {value!r}")
        return value

    def describe(self) -> dict:
        d = {"name": self.name, "type": self.type, "doc": self.doc, "required": self.required}
        if not self.required:
            d["default"] = self.default
        for k in ("min", "max", "gt", "lt"):
            if getattr(self, k) is not None:
                d[k] = getattr(self, k)
        if self.choices:
            d["choices"] = list(self.choices)
        return d


@dataclass(frozen=True)
class QueryKind:
    kind: str
    source: str
    notion: str
    cost: str
    doc: str
    params: tuple[Param, ...]
    build: Callable[..., Any] = field(compare=False)
    needs: tuple[str, ...] = ()  # event fields the query reads
    validate: Callable[[str, dict], None] | None = field(default=None, compare=False)

    def describe(self) -> dict:
        return {"kind": self.kind, "source": self.source, "notion": self.notion, "cost": self.cost,
                "doc": self.doc, "needs": list(self.needs), "params": [p.describe() for p in self.params]}


_REGISTRY: dict[str, QueryKind] = {}


def register(kind: QueryKind) -> QueryKind:
    _REGISTRY[kind.kind] = kind
    return kind


def kinds() -> dict[str, QueryKind]:
    _load_builtin()
    return dict(_REGISTRY)


def _load_builtin() -> None:
    """Import every ``streamdp.config.kinds_*`` module: each registers the query kinds of one family."""
    import importlib
    import pkgutil

    import streamdp.config as pkg

    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if info.name.startswith("kinds_"):
            importlib.import_module(f"streamdp.config.{info.name}")


def build_query(where: str, table: dict, *, horizon: int):
    """Validate one ``[[query]]`` table and construct its query object."""
    reg = kinds()
    if "id" not in table:
        raise ConfigError(f"{where}.id: is required")
    qid = table["id"]
    if not isinstance(qid, str) or not qid or "/" in qid:
        raise ConfigError(f"{where}.id: must be a non-empty string without '/', got {qid!r}")
    kind = table.get("kind")
    if kind not in reg:
        raise ConfigError(f"{where}.kind: unknown query kind {kind!r}; known: {sorted(reg)}")
    k = reg[kind]
    known = {p.name for p in k.params} | {"id", "kind"}
    extra = sorted(set(table) - known)
    if extra:
        raise ConfigError(f"{where}.{extra[0]}: unknown parameter for kind {kind!r} (known: {sorted(known - {'id', 'kind'})})")
    args = {}
    for p in k.params:
        if p.name in table:
            args[p.name] = p.check(where, table[p.name])
        elif p.required:
            raise ConfigError(f"{where}.{p.name}: is required for kind {kind!r}")
        else:
            args[p.name] = p.default
    if k.validate is not None:
        k.validate(where, args)
    try:
        q = k.build(qid, horizon=horizon, **args)
    except ConfigError:
        raise
    except (ValueError, ArithmeticError) as e:  # e.g. a cost beyond the fixed-point range: one line, at start
        raise ConfigError(f"{where}: kind {kind!r} refuses these parameters: {e}") from None
    q.config_params = {"kind": kind, **args}  # the release parameters (engine/release_parameters.py)
    return q
