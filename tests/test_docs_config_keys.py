"""deploy/OPERATIONS.md's "Configuration keys" tables agree with the loader (``streamdp/config/loader.py``): every
Param of ``SERVICE_PARAMS``, ``BUDGET_PARAMS`` and ``KAFKA_PARAMS`` has a row in its section's table (with the
Param's type and default), and every key the tables list exists — a key removed from the doc, a Param added
without a doc line, or a documented key that the loader does not accept fails here. The checks run once on the
real document and once on doctored copies (positive controls: each kind of drift is reported)."""

from __future__ import annotations

import os
import re

from streamdp.config.kinds import ConfigError, Param
from streamdp.config.loader import BUDGET_PARAMS, KAFKA_PARAMS, SERVICE_PARAMS, parse_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPERATIONS = os.path.join(ROOT, "deploy", "OPERATIONS.md")
HEADING = "## Configuration keys"
TOP_LEVEL = "Top level"  # subsection of the keys outside any [section] (`store`, `query`)
SECTIONS = {"`[service]`": SERVICE_PARAMS, "`[budget]`": BUDGET_PARAMS, "`[kafka]`": KAFKA_PARAMS}
# the smallest configuration the loader accepts: probes for top-level keys are added to it
MINIMAL = {"service": {"window_seconds": 60.0}, "query": [{"id": "c", "kind": "continual_counts", "sigma": 3.0}]}


def _read() -> str:
    with open(OPERATIONS, encoding="utf-8") as f:
        return f.read()


def _slice(text: str, heading: str) -> str:
    """The lines after ``heading`` (a whole line, exactly once) up to the next heading of the same or a higher
    level (fenced code blocks skipped)."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == heading]
    assert len(starts) == 1, f"{heading!r} must occur exactly once as a heading, found {len(starts)}"
    out, fenced = [], False
    for line in lines[starts[0] + 1:]:
        if line.startswith("```"):
            fenced = not fenced
        m = None if fenced else re.match(r"(#+) ", line)
        if m and len(m.group(1)) <= level:
            break
        out.append(line)
    return "\n".join(out)


def _subsections(section: str) -> dict[str, str]:
    subs: dict[str, list[str]] = {}
    current = None
    for line in section.splitlines():
        m = re.match(r"### (.+)$", line)
        if m:
            current = m.group(1).strip()
            assert current not in subs, f"subsection {current!r} twice"
            subs[current] = []
        elif current is not None:
            subs[current].append(line)
    return {k: "\n".join(v) for k, v in subs.items()}


def _rows(body: str) -> list[list[str]]:
    """Data rows of the markdown tables in ``body`` (header and separator rows left out)."""
    rows, header_done = [], False
    for line in body.splitlines():
        if not line.startswith("|"):
            header_done = False
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if all(re.fullmatch(r":?-+:?", c) for c in cells):
            header_done = True
            continue
        if header_done:
            rows.append(cells)
    return rows


def _key(cell: str) -> str | None:
    m = re.fullmatch(r"`([^`]+)`", cell)
    return m.group(1) if m else None


def _literal(v) -> str:
    """The TOML literal of a Param default as the table writes it."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _top_level_key_accepted(key: str) -> bool:
    raw = {k: (list(v) if isinstance(v, list) else dict(v)) for k, v in MINIMAL.items()}
    raw.setdefault(key, "redis://localhost:6379/0")
    try:
        parse_config(raw)
    except ConfigError as e:
        return "unknown section" not in str(e)
    return True


def _problems(text: str, sections: dict[str, tuple[Param, ...]]) -> list[str]:
    section = _slice(text, HEADING)
    problems = []
    all_params = [p for ps in sections.values() for p in ps]
    for p in all_params:
        if f"`{p.name}`" not in section:
            problems.append(f"{p.name}: not in the {HEADING!r} section")
    subs = _subsections(section)
    for title, params in sections.items():
        if title not in subs:
            problems.append(f"subsection ### {title} missing")
            continue
        rows = _rows(subs[title])
        keys = [_key(r[0]) for r in rows]
        by_name = {p.name: p for p in params}
        for k in sorted(set(by_name) - set(keys)):
            problems.append(f"{title}: Param {k} has no row")
        for row, k in zip(rows, keys):
            if k is None:
                problems.append(f"{title}: first cell {row[0]!r} is not a `key`")
            elif keys.count(k) > 1:
                problems.append(f"{title}: {k} listed {keys.count(k)} times")
            elif k not in by_name:
                problems.append(f"{title}: {k} is not a Param of this section")
            else:
                p = by_name[k]
                if len(row) != 4:
                    problems.append(f"{title}: {k} row has {len(row)} cells, not key/type/default/meaning")
                    continue
                if row[1] != p.type:
                    problems.append(f"{title}: {k} type {row[1]!r}, the Param says {p.type!r}")
                d = row[2]
                if p.required:
                    ok = d == "required"
                elif p.default is None:
                    ok = d.startswith("none")
                else:
                    ok = d.startswith(f"`{_literal(p.default)}`")
                if not ok:
                    want = "required" if p.required else ("none…" if p.default is None else _literal(p.default))
                    problems.append(f"{title}: {k} default {d!r}, the Param says {want}")
    known = set(sections) | {TOP_LEVEL}
    for title in sorted(set(subs) - known):
        problems.append(f"subsection ### {title} is not a known section")
    if TOP_LEVEL not in subs:
        problems.append(f"subsection ### {TOP_LEVEL} missing")
    else:
        for row in _rows(subs[TOP_LEVEL]):
            k = _key(row[0])
            if k is None or not _top_level_key_accepted(k):
                problems.append(f"{TOP_LEVEL}: {row[0]} is not a top-level key the loader accepts")
    return problems


def test_configuration_keys_tables_match_the_loader_params():
    assert _problems(_read(), SECTIONS) == []


def test_the_check_reports_each_kind_of_drift():
    """Positive controls: the same check on doctored copies of the document and of the Params fails."""
    text = _read()
    # a key removed from the doc
    row = next(line for line in text.splitlines() if line.startswith("| `horizon` |"))
    assert any("horizon" in p for p in _problems(text.replace(row + "\n", ""), SECTIONS))
    # a key the loader does not have
    fake = "| `no_such_key` | int | `1` | invented |\n"
    assert any("no_such_key" in p for p in _problems(text.replace(row + "\n", row + "\n" + fake), SECTIONS))
    # a new Param without a doc line
    grown = dict(SECTIONS, **{"`[kafka]`": KAFKA_PARAMS + (Param("new_knob", "int", "new", default=1),)})
    assert any("new_knob" in p for p in _problems(text, grown))
    # a wrong default or type
    assert any("horizon default" in p for p in _problems(text.replace(row, row.replace("`64`", "`65`")), SECTIONS))
    assert any("horizon type" in p for p in _problems(text.replace(row, row.replace("| int |", "| float |")),
                                                          SECTIONS))
    # a top-level key the loader refuses (the probe itself can say no)
    assert not _top_level_key_accepted("no_such_section")
    top = "| `store` |"
    assert any("`stores`" in p for p in _problems(text.replace(top, "| `stores` |"), SECTIONS))
