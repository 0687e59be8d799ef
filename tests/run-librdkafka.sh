#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Build the relay against librdkafka 2.8.0 (Debian 13 "trixie"'s, built from
# its source package) in a second build directory, and run there the unit
# suite and the integration tests marked exactly_once: the tests that lean on
# librdkafka's transactions API. build/ and the rest of the suites use Debian
# 12's packaged 2.0.2; this is the check that the relay also builds and keeps
# exactly-once with a current librdkafka.
#
#   tests/run-librdkafka.sh [BUILDDIR] [PYTEST-ARGS...]
#
# BUILDDIR: build-rdkafka28 in the source tree unless given (a path relative
# to the current directory). PYTEST-ARGS go to the integration run, after
# `-m exactly_once -n auto` (e.g. -k coordinator, or -n 2).
#
# `python3 -m harness fetch-librdkafka` builds the library once into
# /var/cache/outbox-relay/librdkafka-<version> (about 40 s; its packages are
# in tests/install-deps.sh, which runs first). BUILDDIR finds it through
# meson's pkg_config_path and links it with an rpath to its lib/; ldd must
# then show every binary of BUILDDIR that links librdkafka linking that copy,
# or the script stops before any test (a test run against 2.0.2 by mistake
# would pass and prove nothing). The integration tests run the BUILDDIR relay
# through OUTBOX_RELAY_BIN, as meson's integration tests do in their build
# directory (tests/integration/meson.build), on conftest.py's 4 workers.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
py=/usr/bin/python3     # Debian's python: the one that sees the python3-* packages
builddir=$root/build-rdkafka28
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
        builddir=$1
        shift
fi

log() { printf '==> %s\n' "$*"; }

bash "$root/tests/install-deps.sh"
log "fetching librdkafka 2.8 (built once into the cache)"
prefix=$(PYTHONPATH="$root/tests" PYTHONDONTWRITEBYTECODE=1 "$py" -m harness fetch-librdkafka \
        </dev/null | tail -n 1)
libdir=$prefix/lib
log "librdkafka $(pkg-config --modversion "$libdir/pkgconfig/rdkafka.pc") in $prefix"

opts=(-Dwerror=true "-Dpkg_config_path=$libdir/pkgconfig" "-Dc_link_args=-Wl,-rpath,$libdir")
if [ -f "$builddir/meson-private/coredata.dat" ]; then
        meson configure "$builddir" "${opts[@]}"
else
        meson setup "$builddir" "$root" "${opts[@]}"
fi
meson compile -C "$builddir"

# Every ELF binary of the build dir that links librdkafka must resolve it to
# the prefix: the relay, the unit tests (librdkafka's mock cluster), the rest.
relay=$builddir/src/outbox-relay
checked=0
while IFS= read -r -d '' f; do
        line=$(ldd "$f" 2>/dev/null | grep 'librdkafka\.so' || true)
        [ -n "$line" ] || continue
        case $line in
        *"=> $libdir/librdkafka.so.1 "*) checked=$((checked + 1)) ;;
        *)
                echo "run-librdkafka: $f does not link $libdir/librdkafka.so.1:" >&2
                echo "$line" >&2
                exit 1
                ;;
        esac
done < <(find "$builddir" -type f -perm -u+x ! -name '*.so*' ! -path '*/meson-*' -print0)
# ldd's whole output is read before it is searched: under pipefail, grep -q
# quits at the first match and ldd, still writing, dies of SIGPIPE, which
# failed this check on a relay that did link the prefix (CI of stop 40).
relay_ldd=$(ldd "$relay")
case $relay_ldd in
*"=> $libdir/librdkafka.so.1 "*) ;;
*)
        echo "run-librdkafka: $relay does not link $libdir/librdkafka.so.1:" >&2
        echo "$relay_ldd" >&2
        exit 1
        ;;
esac
log "ldd: $checked binaries of $builddir link $libdir/librdkafka.so.1"

t0=$SECONDS
log "unit suite against librdkafka 2.8"
meson test -C "$builddir" --print-errorlogs --suite unit </dev/null
log "unit suite: $((SECONDS - t0)) s"

t0=$SECONDS
log "integration tests marked exactly_once against librdkafka 2.8"
mkdir -p "$builddir/tests/integration"
rc=0
(
        cd "$root"
        OUTBOX_RELAY_BIN=$relay PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
                exec "$py" -m pytest -v -p no:cacheprovider -rfE -m exactly_once -n auto \
                --dist loadgroup --durations=10 \
                --junitxml="$builddir/tests/integration/exactly-once-junit.xml" \
                tests/integration "$@" </dev/null
) || rc=$?
log "integration tests marked exactly_once: exit $rc in $((SECONDS - t0)) s"
exit $rc
