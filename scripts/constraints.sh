#!/usr/bin/env bash
# Regenerates constraints.txt: the exact versions of everything the test and benchmark extras install, frozen from
# a fresh venv (the file CI and scripts/{demo,test}.sh install with: pip install -c constraints.txt …).
set -euo pipefail
cd "$(dirname "$0")/.."
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
"${PYTHON:-python3}" -m venv "$tmp/venv"
"$tmp/venv/bin/python" -m pip install -q --disable-pip-version-check ".[test,bench]"
{
  echo "# Pinned versions of everything streamdp's extras install (test, bench ⊇ kafka, demo), from a working venv."
  echo "# Regenerate with scripts/constraints.sh; scripts/_venv.sh installs with -c constraints.txt."
  "$tmp/venv/bin/python" -m pip freeze --disable-pip-version-check --exclude streamdp | grep -v '^pip==\|^setuptools=='
} > constraints.txt
echo "constraints.txt: $(grep -vc '^#' constraints.txt) pins"
