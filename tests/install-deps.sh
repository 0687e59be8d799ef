#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Install the Debian packages that building the relay, the quickstart and
# the test suites need, if any is missing (as root, or through sudo). Used by
# tests/run-tests.sh and tests/quickstart.sh. Does nothing when all are there.
set -euo pipefail

log() { printf '==> %s\n' "$*"; }

packages=(
        gcc libc6-dev pkg-config meson ninja-build
        libpq-dev librdkafka-dev libcjson-dev libmicrohttpd-dev libinih-dev
        libsystemd-dev   # sd_notify: Type=notify, STATUS=, WATCHDOG=1 (test_process_systemd.py)
        postgresql-15 postgresql-15-wal2json pgbouncer kafkacat
        python3 python3-pytest python3-pytest-xdist python3-psycopg2 python3-confluent-kafka python3-prometheus-client
        python3-yaml   # parses docker/kubernetes/ and docker/compose.yaml in the tests
        systemd   # systemd-analyze verify reads docker/outbox-relay.service (test_environment_docker.py)
        scdoc man-db groff-base   # the man pages: built from src/man/*.scd, rendered by man -l
        # librdkafka 2.8 built from Debian 13's source package (python3 -m harness
        # fetch-librdkafka, tests/run-librdkafka.sh): what Debian 12's 2.0.2 links
        make dpkg-dev zlib1g-dev libssl-dev libsasl2-dev libzstd-dev liblz4-dev
)
command -v java >/dev/null 2>&1 || packages+=(openjdk-17-jre-headless)
# mvn fetches the Kafka jars and the SQL matrix's PostgreSQL binaries (once each)
command -v mvn >/dev/null 2>&1 || packages+=(maven)

missing=()
for p in "${packages[@]}"; do
        status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
        [ "$status" = "install ok installed" ] || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
        log "installing ${missing[*]}"
        sudo=()
        if [ "$(id -u)" -ne 0 ]; then
                command -v sudo >/dev/null 2>&1 || {
                        echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2
                        exit 1
                }
                sudo=(sudo)
        fi
        export DEBIAN_FRONTEND=noninteractive
        "${sudo[@]}" apt-get update -q </dev/null
        "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
fi

