# SPDX-License-Identifier: Apache-2.0
"""The relay's HTTP endpoints, as the people who operate it use them.

/metrics is parsed with the Prometheus client library's own text parser (so a
format slip fails the test), and its counters, per-topic series (bounded by
--metrics-max-topics), delivery errors by code and commit-to-ack histogram
must move with the rows published. /readyz must turn unready when the relay
is connected but stuck (broker frozen with rows waiting), when no broker is
connected, and for a warm standby; /healthz stays 200 throughout.
"""

import time
import urllib.error
import urllib.request

import pytest
from harness import EXIT_OK, procs
from helpers import has_ids, insert_rows, simple_rows, wait_confirmed
from prometheus_client.parser import text_string_to_metric_families


def http_get(port, path):
    """(status, body) of GET path; a 503 is an answer, not an exception."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def scrape(port):
    """{(name, frozen labels without slot): value}, parsed by prometheus_client."""
    status, text = http_get(port, "/metrics")
    assert status == 200, text
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = tuple(sorted((k, v) for k, v in s.labels.items() if k != "slot"))
            out[(s.name, labels)] = s.value
    return out


def wait_http(port, path, want_status, timeout, contains=""):
    def ok():
        try:
            st, body = http_get(port, path)
        except urllib.error.URLError:
            return None     # not listening yet: the relay is still starting
        return (st, body) if st == want_status and contains in body else None
    try:
        return procs.wait_until(ok, timeout, interval=0.2, what="%s -> %d" % (path, want_status))
    except TimeoutError:
        raise AssertionError("%s did not answer %d%s within %d s" % (
            path, want_status, " with %r" % contains if contains else "", timeout))


def test_metrics_move_with_rows(case):
    port = procs.free_port()
    relay = case.relay("--http", "127.0.0.1:%d" % port, "--metrics-max-topics", "3",
                       "--stats-interval", "1")
    conn = case.connect(autocommit=False)
    wait_http(port, "/readyz", 200, 30, "ready")
    before = scrape(port)
    assert before[("outbox_relay_commit_to_ack_seconds_count", ())] == 0

    kinds = ["k1", "k2", "k3", "k4", "k5"]
    commits = [insert_rows(conn, simple_rows("m-" + k, 4, kind=k)) for k in kinds]
    reader = case.reader()
    ids = [w for c in commits for w in c.work_ids]
    assert reader.read_until(has_ids(ids), 60), case.logs()
    wait_confirmed(case, commits[-1].lsn_before)

    def settled():
        m = scrape(port)
        return m if m[("outbox_relay_acknowledged_total", ())] >= 20 and \
            m[("outbox_relay_confirmed_flush_lsn", ())] >= commits[-1].lsn_before else None
    m = procs.wait_until(settled, 30, interval=0.2, what="metrics to show 20 acks")

    assert m[("outbox_relay_published_total", ())] == 20
    assert m[("outbox_relay_acknowledged_total", ())] == 20
    # three topics get their own series, the other two fold into "_other"
    per_topic = {dict(lbl)["topic"]: v for (name, lbl), v in m.items()
                 if name == "outbox_relay_rows_published_total"}
    assert len(per_topic) == 4, per_topic
    assert per_topic["_other"] == 8, per_topic
    assert sorted(v for t, v in per_topic.items() if t != "_other") == [4, 4, 4], per_topic
    assert set(per_topic) - {"_other"} <= {case.topic(k) for k in kinds}
    # one latency observation per acknowledged message, cumulative buckets
    assert m[("outbox_relay_commit_to_ack_seconds_count", ())] == 20
    assert m[("outbox_relay_commit_to_ack_seconds_bucket", (("le", "+Inf"),))] == 20
    assert 0 < m[("outbox_relay_commit_to_ack_seconds_sum", ())] < 20 * 60
    # LSN gauges agree with the server
    confirmed = case.confirmed()
    assert m[("outbox_relay_confirmed_flush_lsn", ())] >= confirmed or \
        abs(m[("outbox_relay_confirmed_flush_lsn", ())] - confirmed) < 1 << 20
    assert m[("outbox_relay_server_wal_end_lsn", ())] >= commits[-1].lsn_before
    assert m[("outbox_relay_received_lsn", ())] >= commits[0].lsn_before
    assert 0 <= m[("outbox_relay_seconds_since_last_confirm", ())] < 30
    assert m[("outbox_relay_kafka_brokers_up", ())] in (-1, 1)
    assert m[("outbox_relay_ready", ())] == 1
    assert m[("outbox_relay_status_updates_total", ())] > before[("outbox_relay_status_updates_total", ())]
    assert m[("outbox_relay_outstanding_messages", ())] == 0
    # the periodic stats line at info level
    procs.wait_until(lambda: "stats: " in relay.log, 10, what="a stats line in the log")
    assert relay.stop() == EXIT_OK, relay.log


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
    procs.wait_until(lambda: scrape(port)[("outbox_relay_outstanding_messages", ())] == 0, 30,
                     what="the first rows acknowledged")
    wait_http(port, "/readyz", 200, 30, "ready")

    # connected but stuck: the broker is frozen while rows wait for acks
    broker.freeze()
    try:
        stuck = insert_rows(conn, simple_rows("r-stuck", 3))
        procs.wait_until(lambda: scrape(port)[("outbox_relay_outstanding_messages", ())] == 3, 30,
                         what="the three rows handed to the frozen broker")
        wait_http(port, "/readyz", 503, 30, "stuck")
        assert http_get(port, "/healthz")[0] == 200
        m = scrape(port)
        assert m[("outbox_relay_ready", ())] == 0
        assert m[("outbox_relay_outstanding_messages", ())] == 3, (m, case.logs())
        assert m[("outbox_relay_oldest_unpublished_seconds", ())] >= 3
        assert m[("outbox_relay_seconds_since_last_confirm", ())] >= 3
        assert case.confirmed() <= stuck.lsn_before   # never past the unacked commit
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
    assert scrape(port2)[("outbox_relay_ready", ())] == 0
    # the standby takes over when the active relay stops
    assert active.stop() == EXIT_OK, active.log
    wait_http(port2, "/readyz", 200, 60, "ready")
    assert standby.stop() == EXIT_OK, standby.log


def test_unknown_path_and_method(case):
    port = procs.free_port()
    relay = case.relay("--http", "127.0.0.1:%d" % port)
    st, body = http_get(port, "/nope")
    assert st == 404 and "/readyz" in body
    req = urllib.request.Request("http://127.0.0.1:%d/metrics" % port, method="POST", data=b"x")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=5)
    assert e.value.code == 405
    assert relay.stop() == EXIT_OK, relay.log
