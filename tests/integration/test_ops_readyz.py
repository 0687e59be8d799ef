# SPDX-License-Identifier: Apache-2.0
"""/readyz, the image's health check, as the people who operate the relay
use it: it turns unready when the relay is connected but stuck (broker
frozen with rows waiting), when no broker is connected, and for a warm
standby, and ready again when that ends, with an idle outbox too; /healthz
stays 200 throughout.
"""

import socket
import urllib.error

import pytest
from harness import EXIT_OK, has_ids, insert_rows, procs, simple_rows, wait_confirmed
from harness.http import http_get, scrape, wait_http


@pytest.fixture
def broker(own_broker):
    return own_broker


def test_readyz_follows_broker_and_progress(case, broker):
    port = procs.free_port()
    relay = case.relay("--http", "127.0.0.1:%d" % port, "--ready-timeout", "3",
                       "-X", "message.timeout.ms=300000", brokers=broker.bootstrap)
    conn = case.connect(autocommit=False)
    first = insert_rows(conn, simple_rows("r-before", 2))
    reader = case.reader(bootstrap=broker.bootstrap)
    assert reader.read_until(has_ids(first.work_ids), 60), case.logs()
    procs.wait_until(lambda: scrape(port)["outbox_relay_outstanding_messages"] == 0, 30,
                     what="the first rows acknowledged")
    wait_http(port, "/readyz", 200, 30, "ready")

    # connected but stuck: the broker is frozen while rows wait for acks
    broker.freeze()
    try:
        stuck = insert_rows(conn, simple_rows("r-stuck", 3))
        procs.wait_until(lambda: scrape(port)["outbox_relay_outstanding_messages"] == 3, 30,
                         what="the three rows handed to the frozen broker")
        wait_http(port, "/readyz", 503, 30, "stuck")
        assert http_get(port, "/healthz")[0] == 200
        m = scrape(port)
        assert m["outbox_relay_ready"] == 0
        assert m["outbox_relay_outstanding_messages"] == 3, (m, case.logs())
        assert m["outbox_relay_oldest_unpublished_seconds"] >= 3
        assert m["outbox_relay_seconds_since_last_confirm"] >= 3
        assert case.confirmed() <= stuck.lsn_pre_commit   # never past the unacked commit
    finally:
        broker.thaw()
    wait_confirmed(case, stuck.lsn_before, timeout=60)
    wait_http(port, "/readyz", 200, 30, "ready")

    # no broker at all: unready, though the relay still streams from PostgreSQL
    broker.stop()
    wait_http(port, "/readyz", 503, 60, "no Kafka broker")
    assert relay.alive, relay.log
    assert http_get(port, "/healthz")[0] == 200
    broker.start()
    later = insert_rows(conn, simple_rows("r-after", 1))
    wait_confirmed(case, later.lsn_before, timeout=120)
    wait_http(port, "/readyz", 200, 60, "ready")
    assert relay.stop() == EXIT_OK, relay.log


def test_readyz_standby(case):
    port1, port2 = procs.free_port(), procs.free_port()
    active = case.relay("--http", "127.0.0.1:%d" % port1)
    wait_http(port1, "/readyz", 200, 30, "ready")
    standby = case.relay("--http", "127.0.0.1:%d" % port2, create_slot=False, ready=False)
    wait_http(port2, "/readyz", 503, 60, "standby")
    assert http_get(port2, "/healthz") == (200, "ok\n")
    assert scrape(port2)["outbox_relay_ready"] == 0
    # the standby takes over when the active relay stops
    assert active.stop() == EXIT_OK, active.log
    wait_http(port2, "/readyz", 200, 60, "ready")
    assert standby.stop() == EXIT_OK, standby.log


def readyz(port):
    try:
        return http_get(port, "/readyz")
    except (urllib.error.URLError, socket.timeout, ConnectionError):
        return None, ""     # not answering yet: retry until the deadline


def test_ready_again_after_broker_restart_with_an_idle_outbox(case, broker):
    """The broker goes away and comes back while no row is written: /readyz
    (the image's health check) must turn 200 again without waiting for traffic."""
    port = procs.free_port()
    case.relay("--http", "127.0.0.1:%d" % port, brokers=broker.bootstrap)
    procs.wait_until(lambda: readyz(port)[0] == 200, 60, interval=0.5, what="ready")
    broker.stop()
    procs.wait_until(lambda: readyz(port)[0] == 503, 60, interval=0.5, what="unready")
    broker.start()
    procs.wait_until(lambda: readyz(port)[0] == 200, 60, interval=0.5,
                     what="ready again with an idle outbox (last: %r)" % (readyz(port),))
