# SPDX-License-Identifier: Apache-2.0
"""The HTTP endpoint against clients a production network has: connections
that are opened and never send a request (a port scanner, a half-dead load
balancer, a slowloris). They must not keep /healthz from answering: the
connection timeout (10 s) has to be enforced even when no other HTTP event
wakes the relay, and rows keep flowing meanwhile."""

import socket
import threading
import time
import urllib.error

from harness import has_ids, insert_rows, procs, simple_rows, wait_confirmed
from harness.http import http_get


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
        cpu0, wall0 = procs.cpu_seconds(relay.pid), time.monotonic()

        def healthy():
            try:
                return http_get(port, "/healthz", timeout=2) == (200, "ok\n")
            except (urllib.error.URLError, socket.timeout, ConnectionError):
                return False    # still locked out: retry until the deadline
        procs.wait_until(healthy, 25, interval=0.5, what="/healthz behind 20 idle connections")
        cpu, wall = procs.cpu_seconds(relay.pid) - cpu0, time.monotonic() - wall0
        assert cpu < 0.5 * wall, "relay used %.1f s of CPU in %.1f s" % (cpu, wall)
    finally:
        for s in idle:
            s.close()


def test_dripping_connections_do_not_lock_out_healthz(case):
    """A slowloris: more connections than the limit, each sending its request
    one byte every 2 s, so the 10 s idle timeout never fires. A connection
    gets 10 s in all for its one request; /healthz answers once they are cut."""
    port = procs.free_port()
    case.relay("--http", "127.0.0.1:%d" % port)
    assert http_get(port, "/healthz") == (200, "ok\n")
    socks = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(20)]
    request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"X-Drip: y\r\n" * 1000
    stop = threading.Event()

    def drip():
        for i in range(len(request)):
            for s in socks:
                try:
                    s.send(request[i:i + 1])
                except OSError:
                    pass    # cut by the relay: what the test waits for
            if stop.wait(2):    # poll interval of the drip
                return
    dripper = threading.Thread(target=drip)
    dripper.start()
    try:
        def healthy():
            try:
                return http_get(port, "/healthz", timeout=2) == (200, "ok\n")
            except (urllib.error.URLError, socket.timeout, ConnectionError):
                return False    # still locked out: retry until the deadline
        procs.wait_until(healthy, 30, interval=0.5, what="/healthz behind 20 dripping connections")
    finally:
        stop.set()
        dripper.join()
        for s in socks:
            s.close()


def test_clients_that_do_not_read_do_not_stall_streaming(case):
    """Eight clients ask for /metrics with a tiny receive buffer and never read
    the answer: rows still flow and are confirmed, standby status updates go on."""
    port = procs.free_port()
    # many topics make /metrics large enough not to fit the socket buffers;
    # made beforehand: 600 topics created on first use by one broker on a
    # busy 2-core machine can outlast librdkafka's topic.metadata.propagation.max.ms
    # (30 s), and this test is about HTTP clients, not topic creation
    case.kafka.create_topics([case.topic("w%03d" % i) for i in range(600)])
    case.relay("--http", "127.0.0.1:%d" % port, "--metrics-max-topics", "1024")
    conn = case.connect(autocommit=False)
    insert_rows(conn, [{"work_id": "wide-%d" % i, "kind": "w%03d" % i, "payload": {}}
                       for i in range(600)])
    procs.wait_until(lambda: http_get(port, "/metrics")[1].count('topic="') >= 600, 60,
                     what="600 topic series")
    assert len(http_get(port, "/metrics")[1]) > 80000
    stuck = []
    try:
        for _ in range(8):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
            s.connect(("127.0.0.1", port))
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            stuck.append(s)

        def updates():
            text = http_get(port, "/metrics")[1]
            line = [ln for ln in text.splitlines() if ln.startswith("outbox_relay_status_updates_total")]
            return float(line[0].rsplit(" ", 1)[1])
        before = updates()
        commits = [insert_rows(conn, simple_rows("nr%d" % i, 50, kind="nr")) for i in range(10)]
        wait_confirmed(case, commits[-1].lsn_before, timeout=60)
        procs.wait_until(lambda: updates() >= before + 3, 30, what="standby status updates going on")
    finally:
        for s in stuck:
            s.close()


def test_healthz_answers_while_new_topics_limits_are_read(case, own_broker):
    """Before its first record to a topic the relay reads the topic's
    max.message.bytes (DescribeConfigs). A broker that does not answer
    (frozen here) makes each read last up to a status interval (1 s in the
    tests): a transaction naming eight new topics took eight seconds in which
    the relay answered no HTTP request, and a liveness probe that gives up
    after a second or two (Kubernetes' default timeoutSeconds is 1) would
    have the relay restarted. The reads now wait in the relay's one wait,
    which answers HTTP: every probe meanwhile gets its answer. Then the broker
    thaws and every row arrives."""
    port = procs.free_port()
    case.relay("--http", "127.0.0.1:%d" % port, "-X", "message.timeout.ms=300000",
               brokers=own_broker.bootstrap)
    conn = case.connect(autocommit=False)
    first = insert_rows(conn, simple_rows("lim-before", 1, kind="k0"))
    wait_confirmed(case, first.lsn_before, timeout=60)
    kinds = ["k%d" % i for i in range(1, 9)]
    own_broker.freeze()
    try:
        rows = insert_rows(conn, [{"work_id": "lim-%s" % k, "kind": k, "payload": {}} for k in kinds])
        # The relay meets the new topics now; probe while it reads their limits.
        probes, failed = 0, []
        end = time.monotonic() + 5
        while time.monotonic() < end:
            t0 = time.monotonic()
            try:
                status, _ = http_get(port, "/healthz", timeout=1.5)
                if status != 200:
                    failed.append("status %d" % status)
            except OSError as e:
                failed.append("no answer in %.1f s (%s)" % (time.monotonic() - t0, e))
            probes += 1
            time.sleep(0.2)   # a probe's period: time itself is the condition
        assert probes >= 10 and not failed, (probes, failed, case.logs())
    finally:
        own_broker.thaw()
    reader = case.reader([case.topic(k) for k in kinds], bootstrap=own_broker.bootstrap)
    assert reader.read_until(has_ids(rows.work_ids), 90), case.logs()
    wait_confirmed(case, rows.lsn_before, timeout=60)
