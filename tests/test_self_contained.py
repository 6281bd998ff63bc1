"""Nothing in the repository refers outside it: a clone has no ../shared/, no design document of that name and no
folder of seed papers, and papers are cited by author and title (docs/BIBLIOGRAPHY.md), never by a seed number such
as "001 Alg. 4". Every text file tracked by git is read (this one excepted: it names what it looks for)."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FORBIDDEN = ("../shared", "DESIGN" + ".md", "seeds" + "/", "notes/00")
# a seed number used as a citation: "001 Alg. 4", "(003)", "004's", "paper 002"
SEED_CITATION = re.compile(r"(?<![\w.,/\-:$%#'\"])(?<!\d )00[0-4](?=\s(?:Alg|Thm|Theorem|Lemma|Def|Cor|§|eq|App|Prop|"
                           r"Remark|Fact|Fig)|'s\b|\))|\bpaper 00[0-4]\b")


def _text_files() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    files = []
    for name in out.decode().split("\0"):
        if not name or name == "tests/test_self_contained.py":
            continue
        path = os.path.join(ROOT, name)
        if not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            head = f.read(4096)
        if b"\0" in head:  # binary
            continue
        files.append(name)
    return files


def test_the_git_listing_is_readable():
    files = _text_files()
    assert "README.md" in files and "docs/contract.md" in files and len(files) > 100


@pytest.mark.parametrize("needle", FORBIDDEN)
def test_no_file_refers_outside_the_repository(needle):
    hits = []
    for name in _text_files():
        with open(os.path.join(ROOT, name), encoding="utf-8", errors="replace") as f:
            for i, line in enumerate(f, 1):
                if needle in line:
                    hits.append(f"{name}:{i}: {line.strip()[:100]}")
    assert not hits, "\n".join(hits[:20])


def test_papers_are_cited_by_author_and_title_not_by_seed_number():
    hits = []
    for name in _text_files():
        with open(os.path.join(ROOT, name), encoding="utf-8", errors="replace") as f:
            for i, line in enumerate(f, 1):
                if SEED_CITATION.search(line):
                    hits.append(f"{name}:{i}: {line.strip()[:100]}")
    assert not hits, "\n".join(hits[:20])


def test_the_bibliography_names_every_short_form_used():
    with open(os.path.join(ROOT, "docs", "BIBLIOGRAPHY.md"), encoding="utf-8") as f:
        bib = f.read()
    for short in ("Liang–Yi (adaptive budgeting)", "Rogers (unknown-domain)", "Rameshwar–Tandon (IoT means)",
                  "Liang–Yi (CGP)", "Imola et al. (EMD)"):
        assert f"**{short}**" in bib, short
