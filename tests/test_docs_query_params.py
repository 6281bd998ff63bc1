"""Every parameter table of the query docs (``docs/query_*.md``) agrees with the query-kind registry: each
documented parameter exists in the kind the table documents, and a default written as a literal (``4``,
``"km"``, ``true``, ``1e-6``) or as ``required`` equals the registry's. Free-text defaults ("region middle",
"—") are only checked to name an optional parameter, as are documented values of a parameter whose registry
default is None (the query derives it, e.g. ``grid_means.origin`` = ``[0, 0]``). The kind of a table is the one named in backticks in the
nearest heading above it that names one. Every parameter of every registered kind has a row in some table of that
kind (a parameter added to the registry must be documented). Positive controls: doctored copies with a wrong
default, an unknown parameter and a required parameter shown with a default are reported, and so are a docs text
missing one row and a registry with one undocumented parameter."""

from __future__ import annotations

import glob
import os
import re
import tomllib
from dataclasses import replace

from streamdp.config.kinds import Param, kinds

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = sorted(glob.glob(os.path.join(ROOT, "docs", "query_*.md")))
_CELL = re.compile(r"^`([^`]+)`$")


def _kind_of(heading: str, registry) -> str | None:
    names = [n for n in re.findall(r"`([a-z_]+)`", heading) if n in registry]
    return names[0] if names else None


def _literal(text: str):
    """The TOML value of a cell like ``4``, ``"km"``, `` `true` `` or ``[0, 0]``; None when it is free text."""
    t = text.strip()
    m = _CELL.match(t)
    if m:
        t = m.group(1)
    try:
        return True, tomllib.loads(f"v = {t}")["v"]
    except tomllib.TOMLDecodeError:
        return False, None


def rows(text: str, registry):
    """(kind, parameter, default cell) of every row of every parameter table; kind None when no heading above the
    table names one."""
    kind, header = None, None
    for line in text.splitlines():
        if line.startswith("#"):
            kind = _kind_of(line, registry) or kind  # a heading without a kind keeps the one above it
            header = None
            continue
        if not line.startswith("|"):
            header = None if not line.strip() else header
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = [c.lower() for c in cells]
            continue
        if set(line) <= set("|-: ") or "parameter" not in header or "default" not in header:
            continue
        m = _CELL.match(cells[header.index("parameter")])
        if not m:
            continue
        yield kind, m.group(1), cells[header.index("default")]


def check(text: str, registry) -> tuple[list[str], int]:
    """Problems found, and the number of (kind, parameter) rows checked."""
    problems, checked = [], 0
    for k, name, default in rows(text, registry):
        if k is None:
            problems.append(f"{name}: no query kind named above its table")
            continue
        params = {p.name: p for p in registry[k].params}
        checked += 1
        if name not in params:
            problems.append(f"{k}.{name}: documented but not a parameter of {k}")
            continue
        p = params[name]
        if default.lower() == "required":
            if not p.required:
                problems.append(f"{k}.{name}: documented as required, registry default {p.default!r}")
            continue
        if p.required:
            problems.append(f"{k}.{name}: required in the registry, documented default {default!r}")
            continue
        ok, value = _literal(default)
        if p.default is None:  # None stands for a default the query derives (e.g. grid_means.origin: [0, 0])
            continue
        if ok and value != p.default and not (isinstance(p.default, tuple) and list(p.default) == value):
            problems.append(f"{k}.{name}: documented default {value!r}, registry {p.default!r}")
    return problems, checked


def undocumented(texts, registry) -> list[str]:
    """``kind.parameter`` of every registry parameter without a row in a table of its kind in any of ``texts``."""
    documented = {(k, name) for text in texts for k, name, _ in rows(text, registry)}
    return [f"{k}.{p.name}" for k in sorted(registry) for p in registry[k].params if (k, p.name) not in documented]


def _read_docs() -> list[str]:
    out = []
    for path in DOCS:
        with open(path, encoding="utf-8") as f:
            out.append(f.read())
    return out


def test_query_docs_agree_with_the_registry():
    registry = kinds()
    total = 0
    for path in DOCS:
        with open(path, encoding="utf-8") as f:
            problems, checked = check(f.read(), registry)
        assert problems == [], f"{os.path.basename(path)}: {problems}"
        total += checked
    assert total >= 40  # the tables really were read (5 pages, one per family)


def test_the_new_page_documents_every_parameter_of_its_two_kinds():
    registry = kinds()
    with open(os.path.join(ROOT, "docs", "query_counts_top_k.md"), encoding="utf-8") as f:
        text = f.read()
    for k in ("continual_counts", "top_k"):
        for p in registry[k].params:
            assert f"| `{p.name}` |" in text, (k, p.name)


def test_drift_is_reported():
    registry = kinds()
    page = ("## `top_k`\n\n| parameter | meaning | default |\n|---|---|---|\n"
            "| `epsilon` | e | required |\n| `k` | k | `5` |\n")
    assert check(page, registry) == ([], 2)
    assert check(page.replace("`5`", "`6`"), registry)[0] == ["top_k.k: documented default 6, registry 5"]
    assert check(page + "| `kk` | typo | `1` |\n", registry)[0] == ["top_k.kk: documented but not a parameter of top_k"]
    assert check(page.replace("| required |", "| `1.0` |"), registry)[0] == [
        "top_k.epsilon: required in the registry, documented default '`1.0`'"]
    assert check(page.replace("`5`", "required"), registry)[0] == ["top_k.k: documented as required, registry default 5"]


def test_every_registry_parameter_is_documented():
    registry = kinds()
    assert undocumented(_read_docs(), registry) == []


def test_an_undocumented_parameter_is_reported():
    registry = kinds()
    texts = _read_docs()
    # a docs text missing one row
    row = "| `k` | items returned per window at most | `5` |\n"
    doctored = [t.replace(row, "") for t in texts]
    assert doctored != texts
    assert undocumented(doctored, registry) == ["top_k.k"]
    # a registry with a parameter nobody documented
    top_k = registry["top_k"]
    grown = {**registry, "top_k": replace(top_k, params=top_k.params + (Param("new_knob", "int", "x", default=1),))}
    assert undocumented(texts, grown) == ["top_k.new_knob"]
    # a row counts only for the kind named in the heading above its table
    misplaced = "\n## `continual_counts`\n\n| parameter | meaning | default |\n|---|---|---|\n| `k` | k | `5` |\n"
    assert undocumented(doctored[:-1] + [doctored[-1] + misplaced], registry) == ["top_k.k"]
