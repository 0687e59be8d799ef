#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Quickstart: build the relay if needed, start a throwaway PostgreSQL 15 (with
# wal2json) and Kafka broker on free loopback ports, create sql/outbox.sql's
# table, run the relay against them, insert order 103's acknowledgement, print
# the Kafka record it becomes, stop the relay with SIGTERM and tear it all down.
#
# Needs the packages tests/run-tests.sh installs; the first run downloads the
# Kafka jars (mvn) into ${XDG_CACHE_HOME:-~/.cache}/outbox-relay/.
#
#   tests/quickstart.sh [--keep]     --keep leaves the temp dir with all logs
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
py=/usr/bin/python3     # Debian's python sees python3-psycopg2 and python3-confluent-kafka

missing=()
for cmd in meson ninja java /usr/lib/postgresql/15/bin/postgres; do
        command -v "$cmd" >/dev/null 2>&1 || missing+=("$cmd")
done
[ -f /usr/lib/postgresql/15/lib/wal2json.so ] || missing+=(wal2json)
"$py" -c 'import psycopg2, confluent_kafka' 2>/dev/null || missing+=(python3-psycopg2/python3-confluent-kafka)
if [ ${#missing[@]} -gt 0 ]; then
        echo "quickstart: missing ${missing[*]}; install them with tests/run-tests.sh (as root) or:" >&2
        echo "  apt-get install meson ninja-build pkg-config gcc libpq-dev librdkafka-dev libcjson-dev \\" >&2
        echo "    postgresql-15 postgresql-15-wal2json python3-psycopg2 python3-confluent-kafka \\" >&2
        echo "    openjdk-17-jre-headless maven" >&2
        exit 3
fi

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
