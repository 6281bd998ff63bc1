"""``streamdp tail QUERY``: print the releases of one query from its output topic (``<output_prefix><QUERY>``).

A subscriber's view: it reads only the output topic, with no consumer group (partitions assigned by hand, nothing
committed), and prints each release once per record key (``query/epoch/window``) — a worker that crashed between
publishing and checkpointing publishes a window again with the same key and the same bytes, and a compacted topic
may still hold both copies. Records of one key with different bytes (which streamdp never writes) are reported.

    streamdp tail dest_counts --bootstrap localhost:9092 --from-beginning --until-end
    streamdp tail dest_counts --json | jq .values.counts.ATL

Needs the ``kafka`` extra.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import sys

from streamdp.cli.arguments import nonempty, positive_int


def register(sub) -> None:
    p = sub.add_parser(
        "tail", help="print a query's releases from its output topic (deduplicated by record key)",
        description="Print the releases of QUERY from its output topic <output_prefix><QUERY>, once per record "
                    "key (query/epoch/window). Reads as a subscriber does: no consumer group, nothing committed. "
                    "Needs the 'kafka' extra.",
        epilog="exit codes: 0 done (--until-end, --max, or Ctrl-C); 2 refused (usage, configuration, the topic "
               "does not exist, no broker answered within --timeout)")
    p.add_argument("query", metavar="QUERY", type=nonempty, help="the query id (its output topic is read)")
    p.add_argument("--json", action="store_true", help="print each record as one line of JSON, as published")
    p.add_argument("--from-beginning", action="store_true",
                   help="start at the oldest record the topic keeps (default: only releases published from now on)")
    p.add_argument("--until-end", action="store_true",
                   help="stop once the records present at the start are read (default: follow, until Ctrl-C)")
    p.add_argument("--max", type=positive_int, metavar="N", help="stop after N releases")
    p.add_argument("--bootstrap", type=nonempty, help="Kafka bootstrap servers (overrides kafka.bootstrap)")
    p.add_argument("--config", type=nonempty,
                   help="TOML configuration, for kafka.* (bootstrap, output_prefix, security settings)")
    p.add_argument("--topic", type=nonempty, help="read this topic instead of <output_prefix><QUERY>")
    p.add_argument("--timeout", type=float, default=30.0, metavar="SECONDS",
                   help="give up when the broker does not answer or the topic does not appear (default 30)")
    p.set_defaults(func=run_tail)


def run_tail(args) -> int:
    from streamdp.cli.extras import require
    from streamdp.cli.main import CLIError

    require("kafka", "`streamdp tail`", ("aiokafka",))
    cfg = _kafka_config(args)
    topic = args.topic or f"{cfg['output_prefix']}{args.query}"
    from streamdp.config.kinds import topic_problem

    problem = topic_problem(topic)
    if problem is not None:
        raise CLIError(f"output topic {topic!r}: {problem}")
    from streamdp.adapters.kafka.broker_config import client_kwargs

    try:
        kw = client_kwargs(cfg, client_id="streamdp-tail")
    except ValueError as e:
        raise CLIError(f"invalid configuration: {e}") from None
    printer = Printer(args.json)
    try:
        asyncio.run(tail(topic, kw, printer, from_beginning=args.from_beginning, until_end=args.until_end,
                         limit=args.max, timeout=args.timeout))
    except TailError as e:
        raise CLIError(str(e)) from None
    except KeyboardInterrupt:
        pass
    sys.stdout.flush()
    return 0


def _kafka_config(args) -> dict:
    from streamdp.cli.main import CLIError
    from streamdp.config.kinds import ConfigError
    from streamdp.config.loader import KAFKA_PARAMS, load_config

    if args.config is not None:
        try:
            kafka = dict(load_config(args.config, log_warnings=False).kafka)
        except ConfigError as e:
            raise CLIError(f"invalid configuration: {e}") from None
    else:
        kafka = {p.name: p.default for p in KAFKA_PARAMS}
    if args.bootstrap is not None:
        kafka["bootstrap"] = args.bootstrap
    from streamdp.config.secrets import fill_kafka_secrets

    try:
        return fill_kafka_secrets(kafka)
    except ConfigError as e:
        raise CLIError(f"invalid configuration: {e}") from None


class TailError(Exception):
    pass


class Printer:
    """Prints each key once; counts duplicates (same bytes) and conflicts (different bytes for a key)."""

    def __init__(self, as_json: bool, out=None) -> None:
        self.as_json = as_json
        self.out = out or sys.stdout
        self.seen: dict[bytes, int] = {}  # key → hash of the value printed
        self.printed = 0
        self.duplicates = 0

    def record(self, key: bytes | None, value: bytes | None) -> bool:
        """Print the record unless its key was printed already; True when printed."""
        if value is None:
            return False
        k = key if key is not None else value
        h = hash(value)
        old = self.seen.get(k)
        if old is not None:
            self.duplicates += 1
            if old != h:
                print(f"streamdp: warning: record key {k.decode(errors='replace')} carries a second, different "
                      "release (not printed): the topic has writers other than one streamdp deployment",
                      file=sys.stderr)
            return False
        self.seen[k] = h
        self.printed += 1
        if self.as_json:
            self.out.write(value.decode(errors="replace") + "\n")
        else:
            self.out.write(summary_line(value) + "\n")
        self.out.flush()
        return True


def _ts(x) -> str:
    try:
        return dt.datetime.fromtimestamp(float(x), dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    except (TypeError, ValueError, OverflowError, OSError):
        return str(x)


def _compact(v, depth: int = 0) -> str:
    if isinstance(v, dict):
        items = list(v.items())
        shown = ", ".join(f"{k}: {_compact(x, depth + 1)}" for k, x in items[:6])
        more = f", … ({len(items)} in all)" if len(items) > 6 else ""
        return "{" + shown + more + "}"
    if isinstance(v, list):
        shown = ", ".join(_compact(x, depth + 1) for x in v[:6])
        more = f", … ({len(v)} in all)" if len(v) > 6 else ""
        return "[" + shown + more + "]"
    if v is None:
        return "⊥"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def summary_line(value: bytes) -> str:
    """One line for a person: key, window bounds (UTC), then the released values, shortened."""
    try:
        r = json.loads(value)
        w = r["window"]
        head = f"{r['key']}  {_ts(w['start'])} → {_ts(w['end'])}"
        body = _compact(r.get("values"))
    except (ValueError, KeyError, TypeError):
        return value.decode(errors="replace")
    line = f"{head}  {body}"
    return line if len(line) <= 400 else line[:399] + "…"


async def tail(topic: str, client_kw: dict, printer: Printer, *, from_beginning: bool, until_end: bool,
               limit: int | None, timeout: float) -> None:
    import time

    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.errors import KafkaError

    c = AIOKafkaConsumer(**client_kw, enable_auto_commit=False, group_id=None,
                         auto_offset_reset="earliest" if from_beginning else "latest")
    try:
        await asyncio.wait_for(c.start(), timeout)
    except (asyncio.TimeoutError, KafkaError, OSError) as e:
        try:
            await c.stop()
        except Exception:  # noqa: BLE001
            pass
        raise TailError(f"no Kafka broker answered at {client_kw.get('bootstrap_servers')} within {timeout:g} s "
                        f"({type(e).__name__}: {e})") from None
    try:
        t0 = time.monotonic()
        parts = c.partitions_for_topic(topic)
        while not parts:
            if time.monotonic() - t0 > timeout:
                raise TailError(f"topic {topic!r} does not exist (waited {timeout:g} s): is the query id right, and "
                                "has a worker started? (`--topic` reads another topic)")
            await c._client.force_metadata_update()
            parts = c.partitions_for_topic(topic)
            if not parts:
                await asyncio.sleep(0.3)
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        c.assign(tps)
        if from_beginning:
            await c.seek_to_beginning(*tps)
        else:
            await c.seek_to_end(*tps)
        end = await c.end_offsets(tps) if until_end else None
        while True:
            if end is not None:
                pos = {tp: await c.position(tp) for tp in tps}
                if all(pos[tp] >= end[tp] for tp in tps):
                    return
            res = await c.getmany(timeout_ms=500, max_records=1000)
            for tp in sorted(res, key=lambda t: t.partition):
                for m in res[tp]:
                    if end is not None and m.offset >= end[tp]:
                        continue
                    printer.record(m.key, m.value)
                    if limit is not None and printer.printed >= limit:
                        return
    finally:
        await c.stop()
