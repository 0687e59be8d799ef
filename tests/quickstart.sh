#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Quickstart: build the relay if needed, start a throwaway PostgreSQL 15 (with
# wal2json) and Kafka broker on free loopback ports, create sql/outbox.sql's
# table, run the relay against them, insert order 103's acknowledgement, print
# the Kafka record it becomes, stop the relay with SIGTERM and tear it all down.
#
# Installs missing Debian packages first (tests/install-deps.sh, as root or
# with sudo); the first run downloads the
# Kafka jars (mvn) into ${XDG_CACHE_HOME:-~/.cache}/outbox-relay/.
#
#   tests/quickstart.sh [--keep] [--plugin=pgoutput]
#       --keep leaves the temp dir with all logs; --plugin=pgoutput decodes with
#       PostgreSQL's own output plugin instead of wal2json (same record)
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
py=/usr/bin/python3     # Debian's python sees python3-psycopg2 and python3-confluent-kafka

# A fresh machine gets the packages first (as root, or through sudo).
bash "$top/tests/install-deps.sh"

export OUTBOX_RELAY_BIN=${OUTBOX_RELAY_BIN:-$top/build/src/outbox-relay}
if [ ! -f build/build.ninja ]; then
        echo "==> configuring build/"
        meson setup build >/dev/null
fi
echo "==> building the relay"
meson compile -C build >/dev/null

export PYTHONPATH="$top/tests${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1
exec "$py" -m harness quickstart "$@"
