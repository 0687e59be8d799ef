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
# Kafka jars and promtool into ${XDG_CACHE_HOME:-~/.cache}/outbox-relay/ and the SQL
# matrix's PostgreSQL 13-18 binaries into /var/cache/outbox-relay/ once, configures
# build/ with -Dwerror=true, compiles, runs `meson test`, and exits non-zero
# if any test failed or the integration suite did not run and pass. The last
# line printed is "N passed, N failed".
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
py=/usr/bin/python3     # Debian's python: the one that sees the python3-* packages below
build=${OUTBOX_RELAY_BUILD_DIR:-build}

log() { printf '==> %s\n' "$*"; }

bash "$top/tests/install-deps.sh"

log "fetching the Kafka broker jars (cached after the first run)"
PYTHONPATH="$top/tests" PYTHONDONTWRITEBYTECODE=1 "$py" -m harness fetch-kafka </dev/null
# Prometheus's promtool evaluates README's alert rules (test_ops_alerts.py): built
# once from the Go module proxy (about 4 min cold), cached beside the jars.
log "fetching promtool (cached after the first run)"
PYTHONPATH="$top/tests" PYTHONDONTWRITEBYTECODE=1 "$py" -m harness fetch-promtool </dev/null
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

log "running meson test"
rm -f "$build/meson-logs/testlog.json" "$build/tests/integration/integration-junit.xml"
set +e
meson test -C "$build" --print-errorlogs "$@" </dev/null
meson_rc=$?
set -e

# Summarize from meson's machine-readable log: one line per meson test, plus
# the individual pytest cases of the integration suite from its JUnit file.
set +e
"$py" - "$build" "$meson_rc" "$*" <<'EOF'
import json, os, sys
import xml.etree.ElementTree as ET

build, meson_rc, extra = sys.argv[1], int(sys.argv[2]), sys.argv[3]
passed = failed = skipped = 0
integration = None
problems = []
results = []
try:
    with open(os.path.join(build, "meson-logs", "testlog.json"), errors="replace") as f:
        for line in f:
            line = line.strip().strip("\0")
            if not line:
                continue
            try:
                results.append(json.loads(line))
            except ValueError:
                # two meson test runs sharing one build dir garble this file
                problems.append("unreadable line in testlog.json: %r" % line[:60])
except OSError as e:
    problems.append("no meson test log: %s" % e)

for r in results:
    name, result = r.get("name", "?"), r.get("result", "?")
    suites = r.get("suite") or []
    is_integration = name.split("/")[-1].strip() == "integration" or any(
        s.endswith(":integration") or s == "integration" for s in suites)
    if is_integration:
        integration = result
        continue
    if result in ("OK", "EXPECTEDFAIL"):
        passed += 1
    elif result == "SKIP":
        skipped += 1
    else:
        failed += 1
        problems.append("meson test %s: %s" % (name, result))

junit = os.path.join(build, "tests", "integration", "integration-junit.xml")
if integration is not None:
    cases = 0
    if os.path.exists(junit):
        for tc in ET.parse(junit).getroot().iter("testcase"):
            cases += 1
            if tc.find("failure") is not None or tc.find("error") is not None:
                failed += 1
            elif tc.find("skipped") is not None:
                skipped += 1
            else:
                passed += 1
    if integration != "OK":
        problems.append("integration suite: %s" % integration)
        if cases == 0:
            failed += 1
    elif cases == 0:
        problems.append("integration suite passed but ran no test case")
        failed += 1
elif "--suite" not in extra and "--no-suite" not in extra:
    problems.append("the integration suite did not run")
    failed += 1

if meson_rc != 0 and not problems:
    problems.append("meson test exited %d" % meson_rc)
if passed + failed == 0:
    problems.append("no test ran")
for p in problems:
    print("run-tests: " + p)
for line in open(os.path.join(build, "meson-logs", "testlog.txt"), errors="replace") \
        if os.path.exists(os.path.join(build, "meson-logs", "testlog.txt")) else []:
    if line.startswith("METRIC "):
        print(line.rstrip())
print("%d passed, %d failed%s" % (passed, failed, ", %d skipped" % skipped if skipped else ""))
sys.exit(1 if problems or failed else 0)
EOF
rc=$?
exit $rc
