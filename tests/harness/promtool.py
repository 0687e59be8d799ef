# SPDX-License-Identifier: Apache-2.0
"""Prometheus's promtool, to evaluate the alert rules of outbox-relay(7) with Prometheus's
own PromQL engine (`promtool test rules`).

It comes from Debian 12's own `prometheus` package (2.42), fetched with
`apt-get download` and unpacked into
${XDG_CACHE_HOME:-~/.cache}/outbox-relay/promtool-<package version>/ by
tests/install-deps.sh (or on first use here), rather than installed with
apt: installing the package would also install and start a Prometheus
server on port 9090 on the user's machine, which the tests do not need.
Only the promtool binary is kept (about 48 MB).

What moving from Prometheus 3's promtool (built with Go before) to 2.42
loses: nothing the tests use. `promtool test rules` with input_series,
promql_expr_test and the ALERTS series behaves the same for the guide's rules
(plain comparisons, rate(), max_over_time(), `for:`), and the rules use no
PromQL function added after 2.42.

A failed fetch raises: tests that need promtool then fail, never skip.
This module knows nothing about the relay.
"""

import glob
import os
import shutil
import tempfile

from . import procs
from .kafka import cache_dir

PACKAGE = "prometheus"


def _installed_binary():
    """A promtool already unpacked into the cache (newest package version first)."""
    for path in sorted(glob.glob(os.path.join(cache_dir(), "promtool-*", "promtool")), reverse=True):
        if os.access(path, os.X_OK):
            return path
    return None


def ensure_promtool():
    """The path of a working promtool binary, unpacked from Debian's package
    on first use. Raises RuntimeError (with apt's output) when the package
    cannot be fetched."""
    path = _installed_binary()
    if path is not None:
        return path
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise RuntimeError("%s not found: promtool comes from Debian's %s package" % (tool, PACKAGE))
    os.makedirs(cache_dir(), exist_ok=True)
    work = tempfile.mkdtemp(prefix="promtool-fetch-", dir=cache_dir())
    try:
        # apt-get download writes into the current directory and needs no root
        cp = procs.run(["sh", "-c", 'cd "$1" && apt-get download -q "$2"', "sh", work, PACKAGE],
                       timeout=600, check=False)
        debs = glob.glob(os.path.join(work, "%s_*.deb" % PACKAGE))
        if cp.returncode != 0 or not debs:
            raise RuntimeError("apt-get download %s failed (run apt-get update first?):\n%s\n%s"
                               % (PACKAGE, cp.stdout, cp.stderr))
        version = os.path.basename(debs[0]).split("_")[1].replace("%3a", ":")
        procs.run(["dpkg-deb", "-x", debs[0], os.path.join(work, "root")], timeout=300)
        built = os.path.join(work, "root", "usr", "bin", "promtool")
        procs.run([built, "--version"], timeout=60)
        dest = os.path.join(cache_dir(), "promtool-%s" % version)
        os.makedirs(dest, exist_ok=True)
        os.replace(built, os.path.join(dest, "promtool"))  # only a working binary lands there
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return os.path.join(dest, "promtool")
