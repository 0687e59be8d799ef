#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Build outbox-relay and run every test: the unit suite and the integration
# suite (real PostgreSQL 15 + wal2json and a real Kafka broker, both started by
# tests/harness). This is the README's test command and what .ci/run calls.
#
#   tests/run-tests.sh [extra meson test arguments, e.g. --suite unit]
#
# Installs missing Debian packages (root or sudo needed then), fetches the
# Kafka and Debezium jars and promtool (from Debian's prometheus package) into
# ${XDG_CACHE_HOME:-~/.cache}/outbox-relay/ and the SQL matrix's PostgreSQL
# 13-18 binaries into /var/cache/outbox-relay/ once, configures build/ with
# -Dwerror=true, compiles, and runs `meson test` in three stages that fail
# fast: the unit suite, the integration smoke tests, the rest of the
# integration suite (in parallel; see tests/integration/meson.build). Exits
# non-zero if any test failed or the integration suite did not run and pass.
# Each stage prints its time; the last line printed is "N passed, N failed".
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
py=/usr/bin/python3     # Debian's python: the one that sees the python3-* packages below
build=${OUTBOX_RELAY_BUILD_DIR:-build}

log() { printf '==> %s\n' "$*"; }

bash "$top/tests/install-deps.sh"

log "fetching the Kafka broker jars (cached after the first run)"
PYTHONPATH="$top/tests" PYTHONDONTWRITEBYTECODE=1 "$py" -m harness fetch-kafka </dev/null
# Prometheus's promtool evaluates the alert rules of outbox-relay(7) (test_ops_alerts.py)
# and the Grafana dashboard's expressions (test_ops_dashboard.py): from Debian's
# prometheus package, unpacked into the cache beside the jars.
log "fetching promtool (cached after the first run)"
PYTHONPATH="$top/tests" PYTHONDONTWRITEBYTECODE=1 "$py" -m harness fetch-promtool </dev/null >/dev/null
# Debezium and Kafka Connect, for the Debezium preset's comparison test
log "fetching the Debezium jars (cached after the first run)"
PYTHONPATH="$top/tests" PYTHONDONTWRITEBYTECODE=1 "$py" -m harness fetch-debezium </dev/null >/dev/null
# PostgreSQL 13, 14, 16, 17 and 18 for the SQL matrix (test_sql_matrix.py),
# from Maven Central into /var/cache/outbox-relay once; a failed fetch stops here.
log "fetching the SQL matrix's PostgreSQL server binaries (cached after the first run)"
PYTHONPATH="$top/tests" PYTHONDONTWRITEBYTECODE=1 "$py" -m harness fetch-postgres --matrix \
        </dev/null >/dev/null

if [ -f "$build/build.ninja" ]; then
        log "reconfiguring $build/"
        meson setup --reconfigure "$build" -Dwerror=true
else
        log "configuring $build/"
        meson setup "$build" -Dwerror=true
fi
log "compiling"
meson compile -C "$build"

# In stages that fail fast: the unit suite (seconds), then the integration
# smoke tests (a minute), then the rest of the integration suite in parallel.
# A stage that fails ends the run; each prints its time. Extra arguments run
# one `meson test` with them instead (e.g. --suite unit).
rm -f "$build"/meson-logs/stage-*.json "$build"/meson-logs/stage-*.txt \
        "$build"/tests/integration/integration*-junit.xml
stage() {
        local name=$1 t0=$SECONDS
        shift
        log "stage $name: meson test $*"
        set +e
        meson test -C "$build" --print-errorlogs --logbase "stage-$name" "$@" </dev/null
        local rc=$?
        set -e
        log "stage $name: exit $rc in $((SECONDS - t0)) s"
        return $rc
}
meson_rc=0
if [ $# -gt 0 ]; then
        stage args "$@" || meson_rc=$?
else
        stage unit --suite unit || meson_rc=$?
        [ $meson_rc -ne 0 ] || stage smoke --suite smoke || meson_rc=$?
        [ $meson_rc -ne 0 ] || stage integration integration || meson_rc=$?
fi

# Summarize from meson's machine-readable log: one line per meson test, plus
# the individual pytest cases of the integration suite from its JUnit file.
set +e
"$py" - "$build" "$meson_rc" "$*" <<'EOF'
import glob, json, os, sys
import xml.etree.ElementTree as ET

build, meson_rc, extra = sys.argv[1], int(sys.argv[2]), sys.argv[3]
passed = failed = skipped = 0
problems = []
results = []
logs = sorted(glob.glob(os.path.join(build, "meson-logs", "stage-*.json")))
if not logs:
    problems.append("no meson test log in %s/meson-logs" % build)
for path in logs:
    with open(path, errors="replace") as f:
        for line in f:
            line = line.strip().strip("\0")
            if not line:
                continue
            try:
                results.append(json.loads(line))
            except ValueError:
                # two meson test runs sharing one build dir garble this file
                problems.append("unreadable line in %s: %r" % (os.path.basename(path), line[:60]))

# the integration suite's meson tests, each with its JUnit file of pytest cases
INTEGRATION = {"integration-smoke": "integration-smoke-junit.xml",
               "integration": "integration-junit.xml"}
ran = {}
for r in results:
    name, result = r.get("name", "?"), r.get("result", "?")
    short = name.split("/")[-1].strip()
    if short in INTEGRATION:
        ran[short] = result
        continue
    if result in ("OK", "EXPECTEDFAIL"):
        passed += 1
    elif result == "SKIP":
        skipped += 1
    else:
        failed += 1
        problems.append("meson test %s: %s" % (name, result))

for test, result in sorted(ran.items()):
    cases = 0
    junit = os.path.join(build, "tests", "integration", INTEGRATION[test])
    if os.path.exists(junit):
        for tc in ET.parse(junit).getroot().iter("testcase"):
            cases += 1
            if tc.find("failure") is not None or tc.find("error") is not None:
                failed += 1
            elif tc.find("skipped") is not None:
                skipped += 1
            else:
                passed += 1
    if result != "OK":
        problems.append("%s: %s" % (test, result))
        if cases == 0:
            failed += 1
    elif cases == 0:
        problems.append("%s passed but ran no test case" % test)
        failed += 1
if "integration" not in ran and not extra.strip():
    problems.append("the integration suite did not run")
    failed += 1

if meson_rc != 0 and not problems:
    problems.append("meson test exited %d" % meson_rc)
if passed + failed == 0:
    problems.append("no test ran")
for p in problems:
    print("run-tests: " + p)
for path in sorted(glob.glob(os.path.join(build, "meson-logs", "stage-*.txt"))):
    for line in open(path, errors="replace"):
        if line.startswith("METRIC "):
            print(line.rstrip())
print("%d passed, %d failed%s" % (passed, failed, ", %d skipped" % skipped if skipped else ""))
sys.exit(1 if problems or failed else 0)
EOF
rc=$?
exit $rc
