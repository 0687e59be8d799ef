#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Build the libFuzzer targets of tests/fuzz/ with clang, AddressSanitizer and
# UBSan, straight from the modules in src/ that they test (no meson, no libpq,
# no librdkafka), and fuzz each for a while. CI runs this on its own; it is
# not a meson test, so that `meson test` stays fast.
#
#   tests/fuzz/run.sh [TARGET...]      default: wal2json replmsg record ledger headers envelope pgoutput
#
# For each target: first replay tests/fuzz/regressions/, tests/fuzz/corpus/
# and tests/data/ (a known crash fails here, with its note); then fuzz for
# FUZZ_SECONDS, starting from those inputs copied into a scratch directory,
# so the repository is never written to. Exits 1 if any target failed, and
# prints each crashing input in the form tests/fuzz/regressions/ keeps
# (C string literals), ready to be saved there as NAME.txt with a note.
#
# Environment:
#   FUZZ_SECONDS   seconds of fuzzing per target (60)
#   FUZZ_JOBS      targets fuzzed at a time (the number of cores)
#   FUZZ_TARGETS   targets, if none are given as arguments
#   FUZZ_CC        the compiler (clang); it must ship libFuzzer
#   FUZZ_SRC_DIR   the modules to test (src/ of this tree), e.g. a tree with
#                  a fix in progress
#   FUZZ_WORKDIR   scratch directory (a new one under $TMPDIR); kept if given,
#                  so its corpus grows from run to run
#   FUZZ_KEEP=1    keep the scratch directory even when everything passed
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
src=${FUZZ_SRC_DIR:-$root/src}
seconds=${FUZZ_SECONDS:-60}
cc=${FUZZ_CC:-clang}
if [ $# -gt 0 ]; then
        targets=("$@")
else
        read -r -a targets <<<"${FUZZ_TARGETS:-wal2json replmsg record ledger headers envelope pgoutput}"
fi

# Which modules each target links, the longest input worth trying, its dictionary.
sources_of() {
        case $1 in
        wal2json) echo "wal2json.c lsn.c" ;;
        replmsg) echo "replmsg.c" ;;
        record | headers) echo "record.c pgjson.c wal2json.c lsn.c" ;;
        envelope) echo "envelope.c record.c pgjson.c wal2json.c lsn.c" ;;
        ledger) echo "ledger.c lsn.c" ;;
        pgoutput) echo "pgoutput.c" ;;
        *) return 1 ;;
        esac
}
max_len_of() {
        case $1 in
        replmsg) echo 512 ;;
        pgoutput) echo 8192 ;;
        *) echo 4096 ;;
        esac
}
dict_of() {
        case $1 in
        wal2json | record | headers) echo "$here/wal2json.dict" ;;
        esac
}

for t in "${targets[@]}"; do
        sources_of "$t" >/dev/null || { echo "run.sh: unknown target \"$t\"" >&2; exit 2; }
done
if ! command -v "$cc" >/dev/null; then
        echo "run.sh: \"$cc\" not found; install clang and libclang-rt-dev (libFuzzer)" >&2
        exit 2
fi

if [ -n "${FUZZ_WORKDIR:-}" ]; then
        work=$FUZZ_WORKDIR
        keep=1
        mkdir -p "$work"
else
        work=$(mktemp -d "${TMPDIR:-/tmp}/outbox-relay-fuzz.XXXXXX")
        keep=${FUZZ_KEEP:-0}
fi
mkdir -p "$work/bin"

# UBSan findings must end the run, leaks too (LeakSanitizer is part of ASan).
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export ASAN_OPTIONS="detect_leaks=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"

read -r -a cjson_cflags <<<"$(pkg-config --cflags libcjson)"
read -r -a cjson_libs <<<"$(pkg-config --libs libcjson)"
cflags=(-std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer -Wall -Wextra
        -fno-sanitize-recover=undefined -I"$here" -I"$src" "${cjson_cflags[@]}")

# The sanitizer report of a log: from the first error line to SUMMARY, at most 60 lines.
report() {
        awk '/ERROR: |runtime error|fuzz property violated|deadly signal/ { on = 1 }
             on && n < 60 { sub(/ \(BuildId: [0-9a-f]+\)/, ""); print "    " $0; n++ }
             on && /^SUMMARY/ { exit }' "$1"
}

# One target: build, replay, fuzz. Prints to stdout (the caller sends it to
# $work/$t.out); its last line is "RESULT ok|FAIL <summary>".
run_target() {
        local t=$1 s srcs=() fuzz replay inputs dict status execs n
        for s in $(sources_of "$t"); do
                srcs+=("$src/$s")
        done
        fuzz=$work/bin/fuzz_$t
        replay=$work/bin/replay_$t
        inputs=("$here/regressions" "$here/corpus/$t" "$root/tests/data")

        echo "== $t: building"
        "$cc" "${cflags[@]}" -fsanitize=fuzzer,address,undefined \
                "$here/fuzz_$t.c" "${srcs[@]}" "${cjson_libs[@]}" -o "$fuzz" ||
                { echo "RESULT FAIL $t: the fuzz target does not build"; return; }
        "$cc" "${cflags[@]}" -fsanitize=address,undefined -DFUZZ_TARGET="\"$t\"" \
                "$here/fuzz_replay.c" "$here/fuzz_$t.c" "${srcs[@]}" "${cjson_libs[@]}" -o "$replay" ||
                { echo "RESULT FAIL $t: the replay program does not build"; return; }

        echo "== $t: replaying regressions and seeds"
        if ! "$replay" "${inputs[@]}" >"$work/$t.replay.log" 2>&1; then
                echo "FAIL $t: a saved input crashes (fix src/ first; fuzzing skipped):"
                grep -E '\((.*bytes)\)$' "$work/$t.replay.log" | tail -1 | sed 's/^/    input: /'
                report "$work/$t.replay.log"
                echo "RESULT FAIL $t: saved input fails, not fuzzed"
                return
        fi
        tail -1 "$work/$t.replay.log" | sed 's/^/    /'

        # libFuzzer adds what it finds to this copy, never to the repository.
        rm -rf "${work:?}/corpus/$t"
        mkdir -p "$work/corpus/$t" "$work/artifacts/$t"
        "$replay" --write-raw "$work/corpus/$t" "${inputs[@]}" >/dev/null
        dict=$(dict_of "$t")
        echo "== $t: fuzzing for ${seconds}s"
        status=0
        "$fuzz" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
                -max_len="$(max_len_of "$t")" -use_value_profile=1 -print_final_stats=1 \
                -artifact_prefix="$work/artifacts/$t/" ${dict:+-dict="$dict"} \
                "$work/corpus/$t" >"$work/$t.log" 2>&1 || status=$?
        execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$t.log" | tail -1)
        if [ "$status" -eq 0 ]; then
                n=$(find "$work/corpus/$t" -type f | wc -l)
                echo "ok   $t: ${execs:-?} executions, $n corpus inputs"
                echo "RESULT ok $t: ok, ${execs:-?} executions"
                return
        fi
        echo "FAIL $t: libFuzzer exited $status after ${execs:-?} executions; log $work/$t.log"
        report "$work/$t.log"
        for a in "$work/artifacts/$t"/*; do
                [ -f "$a" ] || continue
                echo "    reproduce: $fuzz $a"
                echo "    save as tests/fuzz/regressions/$t-NAME.txt, with a note on what broke:"
                "$replay" --print "$a" | sed 's/^/        /'
        done
        echo "RESULT FAIL $t: FAILED after ${execs:-?} executions"
}

# FUZZ_JOBS targets at a time (one per core by default): each libFuzzer
# process is single-threaded, so each target still gets FUZZ_SECONDS of a
# core of its own. Outputs are printed whole, in the order given.
jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
echo "run.sh: fuzzing ${targets[*]} for ${seconds}s each, $jobs at a time; sources $src; scratch $work"
running=0
for t in "${targets[@]}"; do
        if [ "$running" -ge "$jobs" ]; then
                wait -n || true
                running=$((running - 1))
        fi
        (set +e; run_target "$t" >"$work/$t.out" 2>&1 || echo "RESULT FAIL $t: build failed") &
        running=$((running + 1))
done
wait

failed=()
summary=()
for t in "${targets[@]}"; do
        grep -v '^RESULT ' "$work/$t.out" || true
        result=$(sed -n 's/^RESULT //p' "$work/$t.out" | tail -1)
        [ -n "$result" ] || result="FAIL $t: no result (see $work/$t.out)"
        summary+=("${result#* }")
        [ "${result%% *}" = ok ] || failed+=("$t")
done

echo "== summary"
printf '    %s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
        echo "run.sh: failed: ${failed[*]}; logs, binaries and crashing inputs kept in $work"
        exit 1
fi
if [ "$keep" = 1 ]; then
        echo "run.sh: scratch directory kept: $work"
else
        rm -rf "$work"
fi
