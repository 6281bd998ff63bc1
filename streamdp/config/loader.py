"""Service configuration (TOML). Invalid configuration fails at start with a message naming the field.

```toml
[service]
window_seconds = 86400        # tumbling window length (event time)
horizon = 64                  # L: windows per epoch of the continual-count tree
origin = 1356998400           # required: event time (Unix seconds, or a TOML date-time with Z or an offset,
                              # e.g. 2013-01-01T00:00:00Z) where window 1 starts
allowed_lateness = 0          # seconds
unsafe_test_seed = 7          # TEST MODE ONLY: deterministic noise (never in production)

[budget]                      # default per-user budgets, per notion
zcdp_rho = 1.0
zcdp_delta = 1e-6
cgp_rho = 0.0
emd_alpha = 0.0

[kafka]                       # used by `streamdp run`
bootstrap = "localhost:9092"
input_topic = "streamdp.events"
output_prefix = "streamdp.out."
dead_letter_topic = "streamdp.dead"

[[query]]
id = "dest_counts"
kind = "continual_counts"
sigma = 4.0
```
"""

from __future__ import annotations

import datetime as _dt
import math
import tomllib
from dataclasses import dataclass, field
from typing import Any

from streamdp.accounting.cost import (COMPONENTS, INT64_MAX, LOSS_SCALE, NOTIONS, SCALES, Cost, budget_vector,
                                      check_budget_range)
from streamdp.config.kinds import (ConfigError, ConfigErrors, Param, build_query, error_list, shown,
                                   topic_chars_problem, topic_problem)
from streamdp.input.events import MAX_TS

STORE_SCHEMES = ("redis://", "rediss://", "unix://")  # the stores `streamdp run` accepts (cli/service.py)

_UNIX_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


@dataclass(frozen=True)
class _TimeParam(Param):
    """An event time: Unix seconds (a number), or a TOML offset date-time (``2013-01-01T00:00:00Z``,
    ``2013-01-01T00:00:00-05:00``), which names one instant and is converted to Unix seconds (exact to the
    microsecond, TOML's precision here). A local date-time, date or time (no ``Z`` or offset) names no instant —
    the same text is another time in every time zone — so it is refused, with the forms that are accepted, rather
    than read as UTC: windows that silently start hours off are the operator's own time zone's offset wrong."""

    def check(self, where: str, value: Any) -> Any:
        if isinstance(value, _dt.datetime) and value.tzinfo is not None:
            value = (value - _UNIX_EPOCH) / _dt.timedelta(seconds=1)
        elif isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
            what = ("a local date-time" if isinstance(value, _dt.datetime) else
                    "a local date" if isinstance(value, _dt.date) else "a local time")
            raise ConfigError(f"{where}.{self.name}: {what} ({value.isoformat()}) names no instant (no time zone); "
                              f"write Unix seconds or a date-time with Z or an offset, e.g. "
                              f"{_example_instant(value)}")
        return super().check(where, value)


def _example_instant(value) -> str:
    if isinstance(value, _dt.datetime):
        return value.replace(tzinfo=None).isoformat() + "Z (UTC)"
    if isinstance(value, _dt.date):
        return f"{value.isoformat()}T00:00:00Z (midnight UTC)"
    return "2013-01-01T00:00:00Z"

SERVICE_PARAMS = (
    # ≥ 1 ms: window numbers of any accepted event time (< MAX_TS) then fit in int64
    Param("window_seconds", "float", "tumbling window length in seconds of event time", required=True, min=1e-3),
    Param("horizon", "int", "L: windows per epoch of the continual-count tree", default=64, min=1, max=1 << 20),
    _TimeParam("origin", "float", "event time of the start of window 1: Unix seconds, or a TOML date-time with Z or "
               "an offset (2013-01-01T00:00:00Z)", required=True, min=0.0, lt=MAX_TS),
    # ≤ the whole accepted time range: past it no window ever closes, and past ~10¹³ s the float sum end + lateness
    # is too coarse for 1 ms windows
    Param("allowed_lateness", "float", "seconds the watermark trails the max event time", default=0.0, min=0,
          max=MAX_TS),
    Param("idle_timeout", "float", "seconds after which an idle partition no longer holds the watermark",
          default=None, gt=0),
    Param("max_future_seconds", "float", "events this far ahead of the newest earlier time of their partition, or "
          "of the current time, are dead-lettered (default: 1,000 windows, within 7 to 30 days)",
          default=None, gt=0),
    Param("unsafe_test_seed", "int", "TEST MODE: deterministic noise — releases are NOT private", default=None,
          min=0),
)

@dataclass(frozen=True)
class _BudgetParam(Param):
    """A default budget: a finite number ≥ 0 that the fixed-point accounting holds. Past INT64_MAX/scale
    (≈ 9.22e6 for ρ and α) ``budget_to_fixed`` would map it to the *unlimited* sentinel: refused instead."""

    scale: int = LOSS_SCALE

    def check(self, where: str, value: Any) -> Any:
        value = super().check(where, value)
        try:
            return check_budget_range(value, self.scale, "budget")
        except ValueError as e:
            raise ConfigError(f"{where}.{self.name}: {e}; a [budget] is finite — an unlimited default budget is "
                              "set with `streamdp budget set-default --rho inf`") from None


# a δ budget of 1 or more guarantees nothing (and would silently meet the int64 fixed-point ceiling, ≈ 9.22)
BUDGET_PARAMS = tuple(_BudgetParam(c, "float", f"default budget: {c}", default=0.0, min=0,
                                   lt=1.0 if c.endswith("_delta") else None, scale=sc)
                      for c, sc in zip(COMPONENTS, SCALES))
# the approximate-GP filter of Liang & Yi (Adaptive Privacy Budgeting, eq. (10)) as a cgp budget: CONT iff
# min_s max(g_δ(s)√R, sΛR) ≤ ε is R ≤ R*(ε, δ, Λ) (accounting.cgp.approx_gp_budget), so these three set cgp_rho
GP_BUDGET_KEYS = ("gp_epsilon_per_km", "gp_delta", "gp_within_km")
BUDGET_PARAMS = BUDGET_PARAMS + (
    Param("gp_epsilon_per_km", "float", "approximate-GP target ε per km (sets cgp_rho by the approximate-GP filter; "
          "with gp_delta and gp_within_km)", default=None, gt=0),
    Param("gp_delta", "float", "δ of the approximate-GP target", default=None, gt=0, lt=1),
    Param("gp_within_km", "float", "Λ: the target holds for locations at most this far apart (km)", default=None,
          gt=0),
)


def _gp_budget(raw_budget: dict, budget: dict) -> None:
    """Replace the three approximate-GP keys of ``budget`` by the ``cgp_rho`` they set (per m², the ledger's unit)."""
    gp = {k: budget.pop(k) for k in GP_BUDGET_KEYS}
    given = [k for k, v in gp.items() if v is not None]
    if not given:
        return
    missing = [k for k in GP_BUDGET_KEYS if gp[k] is None]
    if missing:
        raise ConfigError(f"budget.{missing[0]}: is required with {', '.join(given)} (an approximate-GP budget is "
                          "ε per km, δ and the distance Λ it holds within)")
    if "cgp_rho" in raw_budget:
        raise ConfigError("budget.cgp_rho: set either cgp_rho or the approximate-GP target (gp_epsilon_per_km, "
                          "gp_delta, gp_within_km), which sets cgp_rho")
    from streamdp.accounting.cgp import approx_gp_budget, convert_cgp_rho

    per_km2 = approx_gp_budget(gp["gp_epsilon_per_km"], gp["gp_delta"], gp["gp_within_km"])
    per_m2 = float(convert_cgp_rho(per_km2, "km", "m"))
    try:
        budget["cgp_rho"] = check_budget_range(per_m2, LOSS_SCALE, "budget")
    except ValueError as e:
        raise ConfigError(f"budget.gp_epsilon_per_km: the cgp_rho it sets, {per_m2!r} per m², {e}") from None

KAFKA_PARAMS = (
    Param("bootstrap", "str", "Kafka bootstrap servers", default="localhost:9092"),
    Param("input_topic", "str", "topic of raw JSON events keyed by user", default="streamdp.events"),
    Param("output_prefix", "str", "prefix of the per-query output topics", default="streamdp.out."),
    Param("dead_letter_topic", "str", "topic of rejected events", default="streamdp.dead"),
    Param("internal_prefix", "str", "prefix of the staged topology's internal topics (<prefix>parsed; with "
          "stage_a = \"admit\": <prefix>parts, <prefix>outcomes)", default="streamdp.internal."),
    Param("stage_a", "str", "what the ingest workers of the staged topology do: forward (parse and forward events "
          "to the coordinator) or admit (window, bound and admit through the filter, send the "
          "coordinator what each kind needs: per-item counts, per-key sums, admitted users' bounded values)", default="forward", choices=("forward", "admit")),
    Param("group_id", "str", "consumer group", default="streamdp"),
    Param("partitions", "int", "partitions of the internal/output topics created at start", default=4, min=1),
    Param("security_protocol", "str", "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL", default="PLAINTEXT",
          choices=("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")),
    Param("sasl_mechanism", "str", "SASL mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)", default=None),
    Param("sasl_username", "str", "SASL user", default=None),
    Param("sasl_password", "str", "SASL password", default=None),
    Param("ssl_cafile", "str", "CA bundle for SSL", default=None),
    Param("batch_max_records", "int", "max records per consumer fetch", default=5000, min=1),
    Param("fetch_max_bytes", "int", "max bytes of one fetch response (all partitions)", default=1024 * 1024,
          min=1024),
    Param("max_partition_fetch_bytes", "int", "max bytes per partition in one fetch response",
          default=1024 * 1024, min=1024),
    Param("prefetch_batches", "int", "fetched and parsed batches queued ahead of the processor", default=8,
          min=1),
    Param("step_max_records", "int", "one processing step takes queued fetched batches up to this many records "
          "(steps grow only when the worker is behind)", default=20000, min=1),
    Param("max_partition_skew_seconds", "float", "pause input partitions whose events run this many seconds of "
          "event time ahead of the others (bounds held events; default two windows, 0 = off)", default=None,
          min=0),
    Param("lean_fetch", "bool", "read fetched records as runs per record batch, not aiokafka ConsumerRecords "
          "(faster; falls back by itself where it cannot install)", default=True),
    Param("metrics_port", "int", "Prometheus metrics port (0 = off)", default=0, min=0, max=65535),
    # loopback by default: the metrics carry private counts (users charged/admitted/halted, the max individual
    # cost), so the endpoint is for the operator's scraper only (deploy/OPERATIONS.md, "Who may read what")
    Param("metrics_host", "str", "address the Prometheus metrics endpoint binds (127.0.0.1: this host only; "
          "0.0.0.0: every interface, for a scraper outside the host or pod)", default="127.0.0.1"),
    Param("checkpoint_seconds", "float", "checkpoint at least this often (seconds) even without window closes",
          default=5.0, gt=0),
    Param("checkpoint_batches", "int", "checkpoint at least every N consumed batches", default=100, min=1),
    Param("session_timeout_ms", "int", "consumer-group session timeout", default=10000, min=1000),
    Param("internal_fetch_wait_ms", "int", "with stage_a = \"admit\": how long the broker may hold a fetch of "
          "<internal_prefix>parts or <internal_prefix>outcomes without data (each window of a backlog waits for "
          "one read of each)", default=50, min=1, max=500),
    Param("standalone", "bool", "one worker without a consumer group", default=False),
)


@dataclass
class ServiceConfig:
    service: dict
    budget: Cost
    kafka: dict
    query_tables: list[dict]
    store: str | None = None
    raw: dict = field(default_factory=dict)
    #: budget warnings (:func:`budget_warnings`): the config is valid, but users would be halted
    warnings: list[str] = field(default_factory=list)

    def engine_config(self):
        from streamdp.engine.engine import EngineConfig

        s = self.service
        return EngineConfig(window_seconds=s["window_seconds"], horizon=s["horizon"], origin=s["origin"],
                            allowed_lateness=s["allowed_lateness"], idle_timeout=s["idle_timeout"],
                            max_future_seconds=("auto" if s["max_future_seconds"] is None
                                                else s["max_future_seconds"]),
                            unsafe_test_seed=s["unsafe_test_seed"])

    def build_queries(self) -> list:
        return [build_query(f"query[{i}]", t, horizon=self.service["horizon"])
                for i, t in enumerate(self.query_tables)]


_WHY_REQUIRED = {
    ("service", "origin"): (
        " (the event time where window 1 starts, e.g. a midnight UTC in Unix seconds: windows are numbered from a"
        " configured, public time, because an origin taken from the first event would put that one event's time"
        " into every published window's bounds; docs/contract.md §2)"),
}


def _section(raw: dict, name: str, params: tuple[Param, ...], errors: list[str]) -> dict | None:
    """The section's validated settings (defaults filled in), or None when it has a problem; every problem is
    appended to ``errors``."""
    sec = raw.get(name, {})
    if not isinstance(sec, dict):
        errors.append(f"{name}: must be a table")
        return None
    known = {p.name for p in params}
    before = len(errors)
    for extra in sorted(set(sec) - known, key=str):
        errors.append(f"{name}.{extra}: unknown setting (known: {sorted(known)})")
    out = {}
    for p in params:
        if p.name in sec:
            try:
                out[p.name] = p.check(name, sec[p.name])
            except ConfigError as e:
                errors.append(str(e))
        elif p.required:
            errors.append(f"{name}.{p.name}: is required{_WHY_REQUIRED.get((name, p.name), '')}")
        else:
            out[p.name] = p.default
    return out if len(errors) == before else None


def parse_config(raw: dict, *, log_warnings: bool = True) -> ServiceConfig:
    """Validate a parsed TOML document. Every problem found is reported at once (:class:`ConfigErrors`, one
    message per problem, each naming its field): the sections and every query table are all checked; the checks
    that need valid parts (topics, the budget's worst cases) run on the parts that are. ``cfg.warnings`` lists what
    is valid but halts users (see :func:`budget_warnings`); they are logged on ``streamdp.config`` unless
    ``log_warnings`` is False (for callers that print or log them themselves)."""
    errors: list[str] = []
    known = {"service", "budget", "kafka", "query", "store"}
    for extra in sorted(set(raw) - known, key=str):
        errors.append(f"{extra}: unknown section (known: {sorted(known)})")
    service = _section(raw, "service", SERVICE_PARAMS, errors)
    budget = _section(raw, "budget", BUDGET_PARAMS, errors)
    if budget is not None:
        try:
            _gp_budget(raw.get("budget", {}), budget)
        except ConfigError as e:
            errors.append(str(e))
            budget = None
    kafka = _section(raw, "kafka", KAFKA_PARAMS, errors)
    if kafka is not None and not kafka["metrics_host"].strip():
        errors.append("kafka.metrics_host: must not be empty (the address the metrics endpoint binds: "
                      "127.0.0.1, the default, or 0.0.0.0 for every interface)")
        kafka = None
    queries = raw.get("query", [])
    ids: list = []
    if not isinstance(queries, list) or not all(isinstance(q, dict) for q in queries):
        errors.append("query: must be an array of tables ([[query]])")
        queries = None
    elif not queries:
        errors.append("query: at least one [[query]] is required")
    else:
        ids = [q.get("id") for q in queries]
        for i, q in enumerate(ids):
            if q is not None and ids.index(q) != i:
                errors.append(f"query[{i}].id: duplicate id {q!r}")
    store = raw.get("store")
    if store is not None and not isinstance(store, str):
        errors.append("store: must be a URL string")
    elif store is not None and not store.startswith(STORE_SCHEMES):  # `streamdp run` refuses it at start
        errors.append(f"store: must be a Redis URL ({', '.join(s + '…' for s in STORE_SCHEMES)}), got "
                      f"{shown(store)}: it is the service's budget store (the demo keeps budgets in memory "
                      "unless given --store)")
    # every query table is validated (and constructed once); a bad [service] horizon: judged at the default
    horizon = (service["horizon"] if service is not None else
               next(p.default for p in SERVICE_PARAMS if p.name == "horizon"))
    queries_built: list | None = [] if queries else None
    for i, table in enumerate(queries or []):
        try:
            q = build_query(f"query[{i}]", table, horizon=horizon)
        except ConfigError as e:
            errors.extend(error_list(e))
            queries_built = None
        else:
            if queries_built is not None:
                queries_built.append(q)
    duplicate = len(set(map(str, ids))) < len(ids)
    if kafka is not None and queries_built and not duplicate:  # a bad or repeated id is reported once, above
        try:
            check_topics(kafka, ids)
        except ConfigError as e:
            errors.extend(error_list(e))
    if kafka is not None and kafka.get("stage_a") == "admit" and queries_built and service is not None:
        errors.extend(stage_a_admit_problems(queries_built, service))
    if kafka is not None:
        from streamdp.adapters.kafka.broker_config import check_security

        try:
            check_security(kafka)  # `streamdp run` would refuse these at start; `config check` says so now
        except ValueError as e:
            errors.append(str(e))
    warnings: list[str] = []
    if budget is not None and queries_built:
        try:
            warnings = budget_warnings(Cost(**budget), queries_built)
        except ConfigError as e:
            errors.extend(error_list(e))
    if errors:
        raise ConfigErrors(errors)
    cfg = ServiceConfig(service=service, budget=Cost(**budget), kafka=kafka, query_tables=queries, store=store,
                        raw=raw)
    cfg.warnings = warnings
    if log_warnings:
        import logging

        for w in cfg.warnings:
            logging.getLogger("streamdp.config").warning("config warning: %s", w)
    return cfg


def _component_text(values: dict) -> str:
    return ", ".join(f"{c} {v:.6g}" for c, v in values.items())


def budget_warnings(budget: Cost, queries: list) -> list[str]:
    """What a valid config does that halts users for good (HALT is permanent, contract §3), with ``budget`` as the
    default budget: a query charged in a notion whose default ρ (α for emd) budget is 0 halts every user at their
    first event; a query whose per-window worst-case cost — where its kind computes one from the parameters
    (``QueryKind.window_cost``: the query's own cost code) — exceeds the default budget in some component halts
    every user who reaches that worst case in their first window. Compared in fixed point, rounded as admission
    rounds (costs up, budgets down)."""
    from streamdp.config.kinds import kinds

    reg = kinds()
    bvec = budget_vector(budget)
    out = []
    total = [0] * len(COMPONENTS)  # the sum of the per-window worst cases (the engine admits against the sum)
    summed: list[str] = []
    single_over = set()
    for i, q in enumerate(queries):
        kind = (q.config_params or {}).get("kind", q.kind)
        k = reg.get(kind)
        notion = q.notion  # the built query's (a kind may have variants in another notion)
        if notion not in NOTIONS:  # a notion the budget store does not hold (grid_means, bounded): its own budget
            continue
        main = f"{notion}_alpha" if notion == "emd" else f"{notion}_rho"
        where = f"query[{i}] {q.id!r} ({kind}, notion {notion})"
        cost = cvec = None
        if k is not None and k.window_cost is not None:
            cost, basis = k.window_cost(q)
            try:
                cvec = cost.to_fixed()
            except (OverflowError, ValueError) as e:  # no admission could ever charge it: refuse now, not mid-run
                raise ConfigError(f"query[{i}] {q.id!r}: the worst-case cost of one window ({basis}) does not fit "
                                  f"the fixed-point ledger ({e}); lower the parameters that raise it (e.g. "
                                  "max_items_per_window) or the per-release cost") from None
        if bvec[COMPONENTS.index(main)] == 0:
            out.append(f"{where}: the default budget [budget] {main} is 0, so every user would be halted (for good) "
                       f"at their first event of this query; set [budget] {main} (or the store's default: "
                       "`streamdp budget set-default`)")
            continue
        if cvec is None:
            continue
        over = [j for j, c in enumerate(COMPONENTS) if c.split("_")[0] == notion and cvec[j] > bvec[j]]
        if over:
            names = [COMPONENTS[j] for j in over]
            out.append(f"{where}: one window can cost a user {_component_text({c: cost.as_dict()[c] for c in names})} "
                       f"({basis}), more than the default budget {_component_text({c: budget.as_dict()[c] for c in names})}"
                       "; users who reach it are halted (for good) in their first window")
            single_over.update(over)
        total = [a + int(b) for a, b in zip(total, cvec)]
        summed.append(f"query[{i}] {q.id!r}")
    # a user's admit per window charges the SUM of every query's cost (engine.close_window): queries that each fit can
    # together exceed the budget (config review of 2026-11-23, F6), or the ledger's range (the engine then charges
    # INT64_MAX, which no finite budget admits: refused here, at start, instead of halting everyone)
    wide = [j for j in range(len(COMPONENTS)) if total[j] > INT64_MAX]
    if wide:
        raise ConfigError(f"together, the per-window worst cases of {', '.join(summed)} do not fit the fixed-point "
                          f"ledger in {', '.join(COMPONENTS[j] for j in wide)} (their sum passes "
                          f"{INT64_MAX / SCALES[wide[0]]:.6g} {COMPONENTS[wide[0]]}); lower the per-release costs")
    over = [j for j in range(len(COMPONENTS)) if total[j] > bvec[j] and j not in single_over]
    if over and len(summed) > 1:
        names = [COMPONENTS[j] for j in over]
        tot = {COMPONENTS[j]: total[j] / SCALES[j] for j in over}
        out.append(f"together, the per-window worst cases of {', '.join(summed)} add up to {_component_text(tot)}, "
                   f"more than the default budget {_component_text({c: budget.as_dict()[c] for c in names})} (one "
                   "admission per window charges the sum); users who reach it are halted (for good) in their first "
                   "window")
    return out


def stage_a_admit_problems(queries: list, service: dict) -> list[str]:
    """``[kafka] stage_a = "admit"`` runs the staged split (stage A admits, the coordinator sees per-item counts),
    which has halves for the kinds in ``count_halves.SUPPORTED_KINDS`` only and takes no idle timeout yet (``count_halves.check_staged``)."""
    from streamdp.engine.count_halves import SUPPORTED_KINDS

    out = []
    bad = [f"{q.id!r} ({q.kind})" for q in queries if q.kind not in SUPPORTED_KINDS]
    if bad:
        out.append(f"kafka.stage_a = \"admit\" supports the kinds {', '.join(SUPPORTED_KINDS)} only; not: "
                   f"{', '.join(bad)} (use stage_a = \"forward\" for them)")
    if service.get("idle_timeout") is not None:
        out.append("kafka.stage_a = \"admit\" does not support service.idle_timeout yet (the coordinator closes a "
                   "window only once every input partition marked it)")
    return out


def check_topics(kafka: dict, query_ids: list) -> None:
    """Every topic the service reads or writes is a legal Kafka topic name (1..249 of ``[a-zA-Z0-9._-]``, not
    ``.``/``..``: a broker refuses others when the worker creates or reads them), named and distinct: a dead-letter
    topic equal to the input would read its own dead letters back forever, an output topic equal to the input would
    consume releases as events. Kafka also refuses to create a topic that differs from an existing one only by '.'
    versus '_' (both map to the same metric names), so such pairs count as equal. Called again after command-line
    overrides (``streamdp run --input-topic``)."""
    from streamdp.adapters.kafka.topics import forward_topic, output_topic

    errors: list[str] = []
    for key in ("bootstrap", "input_topic", "dead_letter_topic", "group_id"):
        if not kafka[key]:
            errors.append(f"kafka.{key}: must not be empty")
    for key in ("output_prefix", "internal_prefix"):  # empty is allowed: the topic is then the id / "parsed"
        problem = topic_chars_problem(kafka.get(key, ""))
        if problem is not None:
            errors.append(f"kafka.{key}: {problem}")
    if errors:  # the topic names below are built from these
        raise ConfigErrors(errors)
    from streamdp.adapters.kafka.topics import outcomes_topic, parts_topic

    named = [("kafka.input_topic", kafka["input_topic"]), ("kafka.dead_letter_topic", kafka["dead_letter_topic"]),
             ("kafka.internal_prefix", forward_topic(kafka))]
    if kafka.get("stage_a") == "admit":
        named += [("kafka.internal_prefix (parts)", parts_topic(kafka)),
                  ("kafka.internal_prefix (outcomes)", outcomes_topic(kafka))]
    named += [(f"query[{i}].id (output topic)", output_topic(kafka, q))
              for i, q in enumerate(query_ids)]
    seen: dict[str, tuple[str, str]] = {}
    for where, topic in named:
        problem = topic_problem(topic)
        if problem is not None:
            errors.append(f"{where}: {problem}")
            continue
        norm = topic.replace(".", "_")
        if norm in seen:
            other_where, other = seen[norm]
            same = "" if other == topic else (f" (Kafka treats '.' and '_' in topic names as colliding: "
                                              f"{other!r} and {topic!r})")
            errors.append(f"{where}: topic {topic!r} is also {other_where}'s{same}; every topic must be distinct")
            continue
        seen[norm] = (where, topic)
    if errors:
        raise ConfigErrors(errors)


class ConfigFileError(ConfigError):
    """The config file cannot be read as TOML at all; the message starts with the file's path (callers that name
    the file themselves do not repeat it)."""


def load_config(path: str, *, log_warnings: bool = True) -> ServiceConfig:
    try:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigFileError(f"{path}: config file not found") from None
    except IsADirectoryError:
        raise ConfigFileError(f"{path}: is a directory, not a TOML config file") from None
    except UnicodeDecodeError as e:  # tomllib decodes the whole file as UTF-8 first
        raise ConfigFileError(f"{path}: not valid TOML: not UTF-8 text (byte {e.object[e.start:e.start + 1]!r} at "
                              f"offset {e.start})") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigFileError(f"{path}: not valid TOML: {e}") from None
    except RecursionError:  # arrays or inline tables nested thousands deep
        raise ConfigFileError(f"{path}: not valid TOML: arrays or tables nested too deeply") from None
    except OSError as e:  # permission denied, an unreadable device, …
        raise ConfigFileError(f"{path}: cannot read the config file: {e.strerror or e}") from None
    return parse_config(raw, log_warnings=log_warnings)


def is_finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)
