# SPDX-License-Identifier: Apache-2.0
"""/metrics and the HTTP server's answers, as the people who operate the
relay use them (/readyz: test_ops_readyz.py).

/metrics is parsed with the Prometheus client library's own text parser (so a
format slip fails the test), and its counters, per-topic series (bounded by
--metrics-max-topics), delivery errors by code and commit-to-ack histogram
must move with the rows published. An unknown path is 404 naming the
endpoints, another method 405.
"""

import urllib.error
import urllib.request

import pytest
from harness import EXIT_OK, has_ids, insert_rows, procs, simple_rows, wait_confirmed
from harness.http import http_get, scrape, wait_http


def test_metrics_move_with_rows(case):
    port = procs.free_port()
    relay = case.relay("--http", "127.0.0.1:%d" % port, "--metrics-max-topics", "3",
                       "--stats-interval", "1")
    conn = case.connect(autocommit=False)
    wait_http(port, "/readyz", 200, 30, "ready")
    before = scrape(port)
    assert before["outbox_relay_commit_to_ack_seconds_count"] == 0

    kinds = ["k1", "k2", "k3", "k4", "k5"]
    commits = [insert_rows(conn, simple_rows("m-" + k, 4, kind=k)) for k in kinds]
    reader = case.reader()
    ids = [w for c in commits for w in c.work_ids]
    assert reader.read_until(has_ids(ids), 60), case.logs()
    wait_confirmed(case, commits[-1].lsn_before)

    def settled():
        m = scrape(port)
        return m if m["outbox_relay_acknowledged_total"] >= 20 and \
            m["outbox_relay_confirmed_flush_lsn"] >= commits[-1].lsn_before else None
    m = procs.wait_until(settled, 30, interval=0.2, what="metrics to show 20 acks")

    assert m["outbox_relay_published_total"] == 20
    assert m["outbox_relay_acknowledged_total"] == 20
    # three topics get their own series, the other two fold into "_other"
    per_topic = m.by("outbox_relay_rows_published_total", "topic")
    assert len(per_topic) == 4, per_topic
    assert per_topic["_other"] == 8, per_topic
    assert sorted(v for t, v in per_topic.items() if t != "_other") == [4, 4, 4], per_topic
    assert set(per_topic) - {"_other"} <= {case.topic(k) for k in kinds}
    # one latency observation per acknowledged message, cumulative buckets
    assert m["outbox_relay_commit_to_ack_seconds_count"] == 20
    assert m.value("outbox_relay_commit_to_ack_seconds_bucket", le="+Inf") == 20
    assert 0 < m["outbox_relay_commit_to_ack_seconds_sum"] < 20 * 60
    # LSN gauges agree with the server
    confirmed = case.confirmed()
    assert m["outbox_relay_confirmed_flush_lsn"] >= confirmed or \
        abs(m["outbox_relay_confirmed_flush_lsn"] - confirmed) < 1 << 20
    assert m["outbox_relay_server_wal_end_lsn"] >= commits[-1].lsn_before
    assert m["outbox_relay_received_lsn"] >= commits[0].lsn_before
    assert 0 <= m["outbox_relay_seconds_since_last_confirm"] < 30
    assert m["outbox_relay_kafka_brokers_up"] in (-1, 1)
    assert m["outbox_relay_ready"] == 1
    assert m["outbox_relay_status_updates_total"] > before["outbox_relay_status_updates_total"]
    assert m["outbox_relay_outstanding_messages"] == 0
    # the periodic stats line at info level
    procs.wait_until(lambda: "stats: " in relay.log, 10, what="a stats line in the log")
    assert relay.stop() == EXIT_OK, relay.log


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
