# SPDX-License-Identifier: Apache-2.0
"""Prometheus's promtool, to evaluate README's alert rules with Prometheus's
own PromQL engine (`promtool test rules`).

Debian 12 packages no promtool new enough to matter here, so it is built
once from the Go module proxy (`go install
github.com/prometheus/prometheus/cmd/promtool@PROMETHEUS_MODULE`) and the
binary is cached beside the Kafka jars, in
${XDG_CACHE_HOME:-~/.cache}/outbox-relay/promtool-<version>/promtool; the
module and build caches of that build are removed afterwards (about 3.6 GB).
It needs `go` on PATH or in /usr/local/go/bin. The first build took 245 s on
the 2-core CI machine with cold Go caches; later runs find the binary.

A failed build raises: tests that need promtool then fail, never skip.
This module knows nothing about the relay.
"""

import os
import shutil
import tempfile

from . import procs
from .kafka import cache_dir

# github.com/prometheus/prometheus's Go module version of Prometheus 3.x.
PROMETHEUS_MODULE = "v0.316.0"


def _go():
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.access("/usr/local/go/bin/go", os.X_OK)
                                else None)
    if go is None:
        raise RuntimeError("go not found: it is needed once to build promtool %s into %s"
                           % (PROMETHEUS_MODULE, binary_path()))
    return go


def binary_path(version=PROMETHEUS_MODULE):
    return os.path.join(cache_dir(), "promtool-%s" % version, "promtool")


def ensure_promtool(version=PROMETHEUS_MODULE):
    """The path of a working promtool binary, built on first use."""
    path = binary_path(version)
    if os.access(path, os.X_OK):
        return path
    go = _go()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    work = tempfile.mkdtemp(prefix="promtool-build-", dir=os.path.dirname(path))
    env = dict(os.environ, GOBIN=os.path.join(work, "bin"), GOPATH=os.path.join(work, "gopath"),
               GOMODCACHE=os.path.join(work, "mod"), GOCACHE=os.path.join(work, "cache"),
               GOFLAGS="-modcacherw", CGO_ENABLED="0")
    try:
        procs.run([go, "install", "github.com/prometheus/prometheus/cmd/promtool@%s" % version],
                  env=env, timeout=1800)
        built = os.path.join(work, "bin", "promtool")
        procs.run([built, "--version"], timeout=60)
        os.replace(built, path)     # only a complete, working binary lands at path
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return path
