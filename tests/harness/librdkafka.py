# SPDX-License-Identifier: Apache-2.0
"""A current librdkafka beside Debian 12's, for building the relay against
both (tests/run-librdkafka.sh).

Debian 12 packages librdkafka 2.0.2; Debian 13 "trixie" packages 2.8.0.
fetch() builds trixie's source package into a prefix of its own:

    apt-get source librdkafka=VERSION      (trixie's deb-src, see below)
    ./configure --prefix=PREFIX; make -C src; make -C src install
    -> PREFIX/lib/librdkafka.so.1, PREFIX/lib/pkgconfig/rdkafka.pc,
       PREFIX/include/librdkafka/rdkafka.h

PREFIX is CACHE/librdkafka-VERSION, CACHE /var/cache/outbox-relay as root,
else ${XDG_CACHE_HOME:-~/.cache}/outbox-relay. Only the C library is built
(not librdkafka++, the examples or the tests), with what Debian 12's 2.0.2
links (zlib, OpenSSL, Cyrus SASL, zstd, lz4) and without libcurl (OIDC token
fetching, which the relay does not use). The build dependencies are in
tests/install-deps.sh; fetch() names the missing ones and stops.

The machine's apt configuration is left as it is: trixie's deb-src line is
in a sources.list of its own, with its own lists and cache directories, all
under CACHE/librdkafka-apt/, given to apt-get with -o options. So no lock of
the machine's apt is taken, and its package lists do not learn of trixie.
The signatures are checked with the keyring Debian 12 already has
(debian-archive-keyring holds trixie's keys).

This module knows Debian's packaging and librdkafka's build, nothing of the
relay.
"""

import os
import shutil
import subprocess
import tempfile

from . import procs
from .pgminor import cache_root as cache_dir   # the fetched PostgreSQL minors' cache root too

# trixie's librdkafka when this was written (2026-12). apt-get source asks for
# exactly this version; when trixie moves on, the error lists what it has, and
# raising it here builds a new prefix beside the old one.
VERSION = "2.8.0-1"
SUITE = "trixie"
MIRROR = "http://deb.debian.org/debian"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
SOURCE = "librdkafka"

# Debian 12 packages that the fetch and the build need, all in tests/install-deps.sh.
BUILD_DEPS = ("dpkg-dev", "make", "gcc", "libc6-dev", "pkg-config", "python3",
              "zlib1g-dev", "libssl-dev", "libsasl2-dev", "libzstd-dev", "liblz4-dev")


def prefix_of(version=VERSION):
    return os.path.join(cache_dir(), "librdkafka-%s" % version)


def upstream_version(version):
    """'2.8.0-1' -> '2.8.0' (no epoch in librdkafka's versions)."""
    return version.split(":", 1)[-1].rsplit("-", 1)[0]


def missing_build_deps():
    missing = []
    for p in BUILD_DEPS:
        cp = subprocess.run(["dpkg-query", "-W", "-f=${Status}", p], capture_output=True,
                            text=True, stdin=subprocess.DEVNULL)
        if cp.stdout.strip() != "install ok installed":
            missing.append(p)
    return missing


def _apt_options(aptdir):
    """-o options that make apt-get read only aptdir's sources.list and keep
    its lists and downloads in aptdir."""
    return ["-o", "Dir::Etc::sourcelist=%s" % os.path.join(aptdir, "sources.list"),
            "-o", "Dir::Etc::sourceparts=%s" % os.path.join(aptdir, "sources.list.d"),
            "-o", "Dir::State::Lists=%s" % os.path.join(aptdir, "lists"),
            "-o", "Dir::Cache=%s" % os.path.join(aptdir, "cache"),
            "-o", "APT::Get::List-Cleanup=false"]


def _apt_dir(log):
    """CACHE/librdkafka-apt with trixie's deb-src line and fresh lists."""
    aptdir = os.path.join(cache_dir(), "librdkafka-apt")
    for d in ("sources.list.d", "lists/partial", "cache/archives/partial"):
        os.makedirs(os.path.join(aptdir, d), exist_ok=True)
    # apt downloads as its _apt user where it can: let it through to lists/partial
    for d in (cache_dir(), aptdir, os.path.join(aptdir, "lists")):
        os.chmod(d, 0o755)
    with open(os.path.join(aptdir, "sources.list"), "w") as f:
        f.write("# %s's sources for tests/harness/librdkafka.py; the machine's apt does not "
                "read this file\n" % SUITE)
        f.write("deb-src [signed-by=%s] %s %s main\n" % (KEYRING, MIRROR, SUITE))
    log("==> apt-get update (%s deb-src only, lists in %s)" % (SUITE, aptdir))
    _run(["apt-get", "-q"] + _apt_options(aptdir) + ["update"], timeout=600)
    return aptdir


def _run(argv, *, cwd=None, timeout, env=None):
    cp = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                        timeout=timeout, stdin=subprocess.DEVNULL)
    if cp.returncode != 0:
        raise RuntimeError("%s failed (exit %d):\n%s%s" % (" ".join(argv), cp.returncode,
                                                          cp.stdout[-4000:], cp.stderr[-4000:]))
    return cp


def fetch(version=VERSION, log=print):
    """Build trixie's librdkafka source package `version` into its prefix
    (once); returns the prefix. A later call finds the prefix complete and
    returns at once. Raises RuntimeError when a build dependency is missing,
    when trixie has no such version (naming the one it has), or when a step
    fails (with its output)."""
    prefix = prefix_of(version)
    done = os.path.join(prefix, ".complete")
    if os.path.exists(done):
        return prefix
    missing = missing_build_deps()
    if missing:
        raise RuntimeError("building librdkafka %s needs %s (tests/install-deps.sh installs them)"
                           % (version, " ".join(missing)))
    shutil.rmtree(prefix, ignore_errors=True)
    aptdir = _apt_dir(log)
    work = tempfile.mkdtemp(prefix="librdkafka-build-", dir=cache_dir())
    try:
        os.chmod(work, 0o755)   # apt-get source downloads into it as _apt where it can
        log("==> apt-get source %s=%s" % (SOURCE, version))
        cp = subprocess.run(["apt-get", "-q"] + _apt_options(aptdir)
                            + ["source", "%s=%s" % (SOURCE, version)],
                            cwd=work, capture_output=True, text=True, timeout=600,
                            stdin=subprocess.DEVNULL)
        if cp.returncode != 0:
            has = subprocess.run(["apt-cache"] + _apt_options(aptdir) + ["showsrc", SOURCE],
                                 capture_output=True, text=True, stdin=subprocess.DEVNULL).stdout
            versions = [line.split(":", 1)[1].strip() for line in has.splitlines()
                        if line.startswith("Version:")]
            raise RuntimeError("apt-get source %s=%s failed (exit %d; %s has %s):\n%s%s"
                               % (SOURCE, version, cp.returncode, SUITE,
                                  ", ".join(versions) or "none", cp.stdout, cp.stderr))
        src = os.path.join(work, "%s-%s" % (SOURCE, upstream_version(version)))
        if not os.path.isdir(src):
            raise RuntimeError("apt-get source left no %s" % src)
        jobs = str(os.cpu_count() or 1)
        # --no-download: mklove fetches nothing; every dependency comes from Debian 12's -dev packages
        log("==> ./configure --prefix=%s; make -C src; make -C src install" % prefix)
        _run(["./configure", "--prefix=%s" % prefix, "--no-download", "--disable-curl",
              "--enable-zlib", "--enable-ssl", "--enable-gssapi", "--enable-zstd",
              "--enable-lz4-ext"], cwd=src, timeout=600)
        _run(["make", "-j", jobs, "-C", "src"], cwd=src, timeout=1800)
        _run(["make", "-C", "src", "install"], cwd=src, timeout=600)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    lib = os.path.join(prefix, "lib", "librdkafka.so.1")
    pc = os.path.join(prefix, "lib", "pkgconfig", "rdkafka.pc")
    if not (os.path.exists(lib) and os.path.exists(pc)):
        raise RuntimeError("no %s or %s after make install" % (lib, pc))
    got = procs.run(["pkg-config", "--modversion", pc], timeout=30).stdout.strip()
    if got != upstream_version(version):
        raise RuntimeError("%s says version %s, not %s" % (pc, got, upstream_version(version)))
    open(done, "w").close()
    return prefix
