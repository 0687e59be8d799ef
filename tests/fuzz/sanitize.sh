#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Configure a second build directory with AddressSanitizer (LeakSanitizer
# included) and UBSan, warnings as errors, and run meson's tests in it. Any
# sanitizer report fails the test that produced it.
#
#   tests/fuzz/sanitize.sh [BUILDDIR] [MESON-TEST-ARGS...]
#
# BUILDDIR: build-asan in the source tree unless given (a path relative to
# the current directory). MESON-TEST-ARGS go to `meson test`; without a
# --suite among them the unit suite runs, e.g.
#
#   tests/fuzz/sanitize.sh                             unit tests
#   tests/fuzz/sanitize.sh build-asan --suite integration
#   tests/fuzz/sanitize.sh build-asan --suite unit --suite integration
#
# The unit suite includes the fuzz targets' replays of tests/fuzz/corpus/
# and tests/fuzz/regressions/. CC=clang (on a new BUILDDIR) builds with
# clang instead of the default compiler.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
builddir=$root/build-asan
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then
        builddir=$1
        shift
fi

# gcc's UBSan reports and carries on unless told otherwise; halt_on_error
# makes the test exit non-zero. Whatever the caller adds comes after, so it
# can add suppressions (and could undo these: don't).
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export ASAN_OPTIONS="detect_leaks=1:halt_on_error=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"

# b_lundef=false: clang's sanitizer runtimes leave symbols for the executable.
opts=(-Db_sanitize=address,undefined -Db_lundef=false -Dwerror=true)
if [ -f "$builddir/meson-private/coredata.dat" ]; then
        meson configure "$builddir" "${opts[@]}"
else
        meson setup "$builddir" "$root" "${opts[@]}"
fi

args=("$@")
suite_given=0
for a in "${args[@]}"; do
        case $a in
        --suite | --suite=*) suite_given=1 ;;
        esac
done
if [ "$suite_given" = 0 ]; then
        args=(--suite unit "${args[@]}")
fi
exec meson test -C "$builddir" --print-errorlogs "${args[@]}"
