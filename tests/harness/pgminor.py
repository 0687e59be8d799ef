# SPDX-License-Identifier: Apache-2.0
"""A second PostgreSQL 15 minor beside the installed one, for running the
suites on both sides of output_plugin_libraries.

PostgreSQL 15.19 (with 14.24, 16.15, 17.11 and 18.6, released 2026-08-13)
added output_plugin_libraries: the server refuses every output plugin that
setting does not list, superusers included, while 15.18 and older refuse to
start when the setting appears in their configuration. A machine has one of
the two installed; fetch_other_side() brings the newest Debian package of the
other side, unpacked (never installed) with `apt-get download` and
`dpkg-deb -x`:

    postgresql-15, postgresql-client-15 and postgresql-15-wal2json
    -> CACHE/<version>/root/usr/lib/postgresql/15/bin  (the bindir)

PostgreSQL finds its lib and share directories relative to its executable,
so the unpacked tree runs where it lies; OUTBOX_RELAY_PG_BINDIR points the
harness at it. CACHE is /var/cache/outbox-relay/postgresql as root (outside
root's home, so the 'postgres' user that runs the server can read it), else
${XDG_CACHE_HOME:-~/.cache}/outbox-relay/postgresql.

This module knows Debian's packaging, nothing of the relay.
"""

import os
import re
import shutil
import subprocess
import tempfile

from . import pg, procs

MAJOR = "15"
INSTALLED_BINDIR = "/usr/lib/postgresql/%s/bin" % MAJOR
# The first minor of each major that has output_plugin_libraries.
RESTRICTING_MINOR = {"14": 24, "15": 19, "16": 15, "17": 11, "18": 6}
PACKAGES = ("postgresql-%s" % MAJOR, "postgresql-client-%s" % MAJOR)
WAL2JSON = "postgresql-%s-wal2json" % MAJOR


def cache_root():
    """Where fetched build and server artifacts are kept: /var/cache/outbox-relay
    as root (outside any checkout, kept across clones), else
    ${XDG_CACHE_HOME:-~/.cache}/outbox-relay."""
    if os.geteuid() == 0:
        return "/var/cache/outbox-relay"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "outbox-relay")


def cache_dir():
    return os.path.join(cache_root(), "postgresql")


def _minor(version):
    """'15.20-0+deb12u1' -> 20."""
    m = re.match(r"^(?:\d+:)?%s\.(\d+)" % MAJOR, version)
    if not m:
        raise ValueError("not a PostgreSQL %s package version: %r" % (MAJOR, version))
    return int(m.group(1))


def available_versions():
    """Versions of postgresql-15 that apt can fetch, newest first (apt-cache madison)."""
    out = procs.run(["apt-cache", "madison", PACKAGES[0]], timeout=120, check=False).stdout
    versions = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) >= 2 and parts[0] == PACKAGES[0] and parts[1] not in versions:
            versions.append(parts[1])
    return sorted(versions, key=_minor, reverse=True)


def installed_restricts():
    """Whether the installed server has output_plugin_libraries (asked of the binary)."""
    return pg.restricts_output_plugins(INSTALLED_BINDIR)


def pick_other_side(versions, installed_has_setting):
    """The newest version on the other side of the line from the installed
    server, or None."""
    line = RESTRICTING_MINOR[MAJOR]
    for v in versions:
        if (_minor(v) >= line) != installed_has_setting:
            return v
    return None


def fetch(version, log=print):
    """Unpack postgresql-15=version, its client and wal2json into the cache
    (once); returns the bindir."""
    root = os.path.join(cache_dir(), version, "root")
    bindir = os.path.join(root, "usr", "lib", "postgresql", MAJOR, "bin")
    done = os.path.join(cache_dir(), version, ".complete")
    if os.path.exists(done):
        return bindir
    shutil.rmtree(os.path.join(cache_dir(), version), ignore_errors=True)
    os.makedirs(root)
    # every directory on the way must let the 'postgres' user through
    for d in (os.path.dirname(cache_dir()), cache_dir(), os.path.dirname(root), root):
        os.chmod(d, 0o755)
    with tempfile.TemporaryDirectory(prefix="pg-debs-") as tmp:
        os.chmod(tmp, 0o755)    # apt's _apt sandbox user writes here when it can
        wanted = ["%s=%s" % (p, version) for p in PACKAGES] + [WAL2JSON]
        log("==> apt-get download %s" % " ".join(wanted))
        cp = subprocess.run(["apt-get", "download"] + wanted, cwd=tmp, capture_output=True,
                            text=True, timeout=600, stdin=subprocess.DEVNULL)
        if cp.returncode != 0:
            raise RuntimeError("apt-get download failed (%d):\n%s%s"
                               % (cp.returncode, cp.stdout, cp.stderr))
        for deb in sorted(os.listdir(tmp)):
            if deb.endswith(".deb"):
                procs.run(["dpkg-deb", "-x", os.path.join(tmp, deb), root], timeout=300)
    if not os.path.exists(os.path.join(bindir, "postgres")):
        raise RuntimeError("no postgres binary in %s after unpacking" % bindir)
    if not os.path.exists(os.path.join(root, "usr", "lib", "postgresql", MAJOR, "lib",
                                       "wal2json.so")):
        raise RuntimeError("wal2json.so missing after unpacking %s" % WAL2JSON)
    open(done, "w").close()
    return bindir


def fetch_other_side(log=print):
    """Fetch the newest minor on the other side of output_plugin_libraries
    from the installed one; returns (version, bindir). Raises RuntimeError
    when apt offers none, and when the fetched server turns out not to be on
    the other side (asked of the binary, not assumed from its number)."""
    has = installed_restricts()
    versions = available_versions()
    choice = pick_other_side(versions, has)
    if choice is None:
        log("==> apt-get update (no other minor of %s known yet)" % PACKAGES[0])
        procs.run(["apt-get", "update", "-q"], timeout=600)
        versions = available_versions()
        choice = pick_other_side(versions, has)
    if choice is None:
        raise RuntimeError("apt offers no %s on the other side of output_plugin_libraries "
                           "(installed %s it; apt has %s)"
                           % (PACKAGES[0], "has" if has else "lacks", ", ".join(versions) or "none"))
    bindir = fetch(choice, log)
    if pg.restricts_output_plugins(bindir) == has:
        raise RuntimeError("%s from %s is on the same side of output_plugin_libraries as the "
                           "installed server" % (pg.server_version(bindir), bindir))
    return choice, bindir
