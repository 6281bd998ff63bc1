"""The registry of query kinds: parameters, privacy notion, cost formula and constructor.

``streamdp queries kinds`` prints this registry; the config loader validates every ``[[query]]`` table against it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable


class ConfigError(ValueError):
    """Invalid configuration; the message names the offending field."""


class ConfigErrors(ConfigError):
    """Every problem found in one configuration (``errors``: one message each, naming its field). Its text is all
    of them joined by "; " (one line, the first problem first, for the callers that print one line)."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = list(errors)
        super().__init__("; ".join(self.errors))


def error_list(e: ConfigError) -> list[str]:
    """The messages of a :class:`ConfigError` (several for :class:`ConfigErrors`)."""
    return list(e.errors) if isinstance(e, ConfigErrors) else [str(e)]


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

#: Kafka's rule for topic names (``org.apache.kafka.common.internals.Topic.validate``): 1..249 characters from
#: ``[a-zA-Z0-9._-]``, and not ``.`` or ``..``. A query's output topic is ``<output_prefix><query id>``.
MAX_TOPIC_LEN = 249
_TOPIC_CHARS = re.compile(r"[A-Za-z0-9._-]*")


def topic_chars_problem(text: str) -> str | None:
    """Why ``text`` cannot be (part of) a Kafka topic name because of its characters, or None."""
    if not isinstance(text, str):
        return f"must be a string, got {shown(text)}"
    if not _TOPIC_CHARS.fullmatch(text):
        bad = next(c for c in text if not _TOPIC_CHARS.fullmatch(c))
        return (f"may contain only ASCII letters, digits, '.', '_' and '-' (Kafka topic names), got {shown(text)} "
                f"with {bad!r}")
    return None


def topic_problem(name: str) -> str | None:
    """Why ``name`` is not a legal Kafka topic name, or None."""
    p = topic_chars_problem(name)
    if p is not None:
        return p
    if not name:
        return "must not be empty"
    if name in (".", ".."):
        return f"{name!r} is not a legal Kafka topic name"
    if len(name) > MAX_TOPIC_LEN:
        return f"has {len(name)} characters; a Kafka topic name has at most {MAX_TOPIC_LEN}, got {shown(name)}"
    return None


def shown(value: Any) -> str:
    """``repr(value)`` for an error message, shortened: a 400-digit TOML integer is named by its length."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**30:
        return f"an integer of {len(str(abs(value)))} digits"
    r = repr(value)
    return r if len(r) <= 120 else f"{r[:100]}… ({len(r)} characters)"


def _too_large(value: Any, path: str = "") -> str | None:
    """The position of the first integer inside ``value`` (nested lists and tables) that no float can hold (the
    query constructors convert numbers with ``float()``, which raises OverflowError past ≈1.8e308), else None."""
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            float(value)
        except OverflowError:
            return path or "value"
        return None
    if isinstance(value, list):
        items = enumerate(value)
    elif isinstance(value, dict):
        items = value.items()
    else:
        return None
    for k, v in items:
        bad = _too_large(v, f"{path}[{k!r}]" if isinstance(k, str) else f"{path}[{k}]")
        if bad is not None:
            return bad
    return None


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
                raise ConfigError(f"{where}.{self.name}: must be a number, got {shown(value)}")
            if t == "int":
                if isinstance(value, float) and not value.is_integer():
                    raise ConfigError(f"{where}.{self.name}: must be an integer, got {value!r}")
                value = int(value)
                if not INT64_MIN <= value <= INT64_MAX:  # TOML integers have no bound in tomllib
                    raise ConfigError(f"{where}.{self.name}: must fit a 64-bit integer "
                                      f"(|value| < 9.22e18), got {shown(value)}")
            else:
                try:
                    value = float(value)
                except OverflowError:  # a TOML integer of more than 308 digits
                    raise ConfigError(f"{where}.{self.name}: must be a finite number (at most about 1.8e308), "
                                      f"got {shown(value)}") from None
                if not math.isfinite(value):
                    raise ConfigError(f"{where}.{self.name}: must be finite, got {value!r}")
            if self.gt is not None and not value > self.gt:
                raise ConfigError(f"{where}.{self.name}: must be > {self.gt}, got {shown(value)}")
            if self.lt is not None and not value < self.lt:
                raise ConfigError(f"{where}.{self.name}: must be < {self.lt}, got {shown(value)}")
            if self.min is not None and value < self.min:
                raise ConfigError(f"{where}.{self.name}: must be ≥ {self.min}, got {shown(value)}")
            if self.max is not None and value > self.max:
                raise ConfigError(f"{where}.{self.name}: must be ≤ {self.max}, got {shown(value)}")
        elif t == "str":
            if not isinstance(value, str):
                raise ConfigError(f"{where}.{self.name}: must be a string, got {value!r}")
        elif t == "bool":
            if not isinstance(value, bool):
                raise ConfigError(f"{where}.{self.name}: must be true or false, got {value!r}")
        elif t == "list":
            if not isinstance(value, list):
                raise ConfigError(f"{where}.{self.name}: must be a list, got {shown(value)}")
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
    # the most one window can charge one user, computed from the built query's parameters by the query's own cost
    # code, with what it bounds; None where no per-window bound follows from the parameters alone (the config
    # loader warns when it exceeds the default budget: such users are halted at their first window)
    window_cost: Callable[[Any], tuple[Any, str]] | None = field(default=None, compare=False)
    # the parameters these arguments make meaningless, each with why: one the user sets anyway is refused (a
    # setting that silently does nothing is a misconfiguration the user cannot see); defaults are fine
    unused: Callable[[dict], dict[str, str]] | None = field(default=None, compare=False)

    def describe(self) -> dict:
        return {"kind": self.kind, "source": self.source, "notion": self.notion, "cost": self.cost,
                "doc": self.doc, "needs": list(self.needs), "params": [p.describe() for p in self.params]}


def public_window_cost(q) -> tuple[Any, str]:
    """``window_cost`` of a query whose ``public_cost`` — the most a user can be charged for one release, shown in
    the published record — depends on its parameters only (not on the released values)."""
    return q.public_cost(None), q.public_cost_basis


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
    """Validate one ``[[query]]`` table and construct its query object. Every problem of the table's id, kind and
    parameters is reported (:class:`ConfigErrors`); the kind's own checks and constructor run once those pass."""
    reg = kinds()
    errors: list[str] = []
    qid = table.get("id")
    # the id names the output topic <output_prefix><id>, the release keys id/epoch/window and the demo's files
    if "id" not in table:
        errors.append(f"{where}.id: is required")
    elif not isinstance(qid, str) or not qid or "/" in qid:
        errors.append(f"{where}.id: must be a non-empty string without '/', got {shown(qid)}")
    elif topic_chars_problem(qid) is not None or len(qid) > MAX_TOPIC_LEN:
        errors.append(f"{where}.id: must be a non-empty string without '/' of at most {MAX_TOPIC_LEN} ASCII "
                      f"letters, digits, '.', '_' and '-' (it names the Kafka topic <output_prefix><id>), got "
                      f"{shown(qid)}")
    kind = table.get("kind")
    if kind not in reg:
        errors.append(f"{where}.kind: unknown query kind {kind!r}; known: {sorted(reg)}")
        raise ConfigErrors(errors)  # the parameters cannot be judged without a kind
    k = reg[kind]
    known = {p.name for p in k.params} | {"id", "kind"}
    for name in sorted(set(table) - known, key=str):
        errors.append(f"{where}.{name}: unknown parameter for kind {kind!r} "
                      f"(known: {sorted(known - {'id', 'kind'})})")
    args = {}
    for p in k.params:
        if p.name in table:
            try:
                args[p.name] = p.check(where, table[p.name])
            except ConfigError as e:
                errors.append(str(e))
                continue
            bad = _too_large(args[p.name])
            if bad is not None:  # inside a list or table: the constructors' float() would raise OverflowError
                errors.append(f"{where}.{p.name}{'' if bad == 'value' else bad}: a number too large for a "
                              "float (at most about 1.8e308)")
        elif p.required:
            errors.append(f"{where}.{p.name}: is required for kind {kind!r}")
        else:
            args[p.name] = p.default
    if errors:
        raise ConfigErrors(errors)
    if k.unused is not None:
        for name, why in k.unused(args).items():
            if name in table:
                errors.append(f"{where}.{name}: {why}; this setting would be ignored, remove it")
        if errors:
            raise ConfigErrors(errors)
    try:
        if k.validate is not None:
            k.validate(where, args)
        q = k.build(qid, horizon=horizon, **args)
    except ConfigError:
        raise
    except (ValueError, ArithmeticError) as e:  # e.g. a cost beyond the fixed-point range: one line, at start
        raise ConfigError(f"{where}: kind {kind!r} refuses these parameters: {e}") from None
    q.config_params = {"kind": kind, **args}  # the release parameters (engine/release_parameters.py)
    return q
