# SPDX-License-Identifier: Apache-2.0
"""The HTTP endpoint against clients a production network has: connections
that are opened and never send a request (a port scanner, a half-dead load
balancer, a slowloris). They must not keep /healthz from answering: the
connection timeout (10 s) has to be enforced even when no other HTTP event
wakes the relay, and rows keep flowing meanwhile."""

import os
import socket
import time
import urllib.error
import urllib.request

from harness import procs
from helpers import has_ids, insert_rows, simple_rows, wait_confirmed


def http_get(port, path, timeout=5):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_idle_connections_do_not_lock_out_healthz(case):
    port = procs.free_port()
    relay = case.relay("--http", "127.0.0.1:%d" % port)
    assert http_get(port, "/healthz") == (200, "ok\n")

    # More idle connections than the limit of 16; none sends a byte.
    idle = []
    try:
        for _ in range(20):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            idle.append(s)
        conn = case.connect(autocommit=False)
        commit = insert_rows(conn, simple_rows("idle", 5, kind="idle"))
        reader = case.reader([case.topic("idle")])
        assert reader.read_until(has_ids(commit.work_ids), 60), case.logs()
        wait_confirmed(case, commit.lsn_before)

        # The idle ones time out after 10 s: /healthz must answer by then (plus slack),
        # and the loop must not spin meanwhile.
        cpu0, wall0 = cpu_seconds(relay.pid), time.monotonic()

        def healthy():
            try:
                return http_get(port, "/healthz", timeout=2) == (200, "ok\n")
            except (urllib.error.URLError, socket.timeout, ConnectionError):
                return False    # still locked out: retry until the deadline
        procs.wait_until(healthy, 25, interval=0.5, what="/healthz behind 20 idle connections")
        cpu, wall = cpu_seconds(relay.pid) - cpu0, time.monotonic() - wall0
        assert cpu < 0.5 * wall, "relay used %.1f s of CPU in %.1f s" % (cpu, wall)
    finally:
        for s in idle:
            s.close()
