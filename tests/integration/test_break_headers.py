# SPDX-License-Identifier: Apache-2.0
"""The headers column against the in-flight byte bound: header values are
bytes librdkafka holds until the acknowledgement just as keys and values
are, so rows with a tiny payload and large headers must be bounded by
--max-inflight-bytes too, or a frozen broker lets the relay queue every
row of the outbox in memory."""

import pytest
from harness import EXIT_OK, procs
from helpers import has_ids, insert_rows, wait_confirmed
from prometheus_client.parser import text_string_to_metric_families
import urllib.request


def scrape(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as r:
        text = r.read().decode()
    return {s.name: s.value for fam in text_string_to_metric_families(text)
            for s in fam.samples if set(s.labels) == {"slot"}}


@pytest.fixture
def broker(own_broker):
    return own_broker


def test_header_bytes_count_against_the_inflight_bound(case, broker):
    port = procs.free_port()
    bound = 256 * 1024
    relay = case.relay("--http", "127.0.0.1:%d" % port, "--max-inflight-bytes", str(bound),
                       "-X", "message.timeout.ms=300000", brokers=broker.bootstrap)
    conn = case.connect(autocommit=False)
    reader = case.reader([case.topic("hb")], bootstrap=broker.bootstrap)
    warm = insert_rows(conn, [{"work_id": "hb-warm", "kind": "hb", "payload": {}}])
    assert reader.read_until(has_ids(warm.work_ids), 60), case.logs()

    big = "x" * (100 * 1024)   # one header value of 100 KiB, a payload of two bytes
    rows = [{"work_id": "hb-%d" % i, "kind": "hb", "payload": {}, "headers": {"baggage": big}}
            for i in range(20)]
    broker.freeze()
    try:
        commit = insert_rows(conn, rows)
        # The relay reads until the bound is reached: a few rows, not all twenty.
        m = procs.wait_until(lambda: (lambda m: m if m["outbox_relay_outstanding_messages"] >= 3
                                      else None)(scrape(port)), 30, what="rows handed to Kafka")
        # settle: it must stop there (poll until two scrapes 1 s apart agree)
        seen = []

        def steady():
            seen.append(scrape(port)["outbox_relay_outstanding_messages"])
            return len(seen) >= 2 and seen[-1] == seen[-2]
        procs.wait_until(steady, 30, interval=1, what="a steady count")
        m = scrape(port)
        assert m["outbox_relay_outstanding_messages"] <= bound // len(big) + 1, m
        assert m["outbox_relay_inflight_bytes"] >= 2 * len(big), m
    finally:
        broker.thaw()
    assert reader.read_until(has_ids(commit.work_ids), 120), case.logs()
    wait_confirmed(case, commit.lsn_before, timeout=60)
    procs.wait_until(lambda: scrape(port)["outbox_relay_inflight_bytes"] == 0, 30,
                     what="in-flight bytes back to 0")
    assert relay.stop() == EXIT_OK, relay.log


def test_inflight_bytes_return_to_zero_after_dead_letters(case):
    """Rows dead-lettered for their headers column, between good rows with
    headers: once everything is acknowledged the in-flight byte count is 0
    again (what a message adds, its delivery report subtracts, dead-letter
    headers included), so it cannot creep up into permanent backpressure."""
    case.query("ALTER TABLE outbox DROP CONSTRAINT outbox_headers_check")  # a writer without the kit
    port = procs.free_port()
    relay = case.relay("--http", "127.0.0.1:%d" % port, "--on-error", "dead-letter",
                       "--dead-letter-topic", case.prefix + ".dlq")
    conn = case.connect(autocommit=False)
    rows = []
    for i in range(30):
        headers = {"ce_id": "spoofed"} if i % 3 == 0 else {"trace": "t" * (i * 100)}
        rows.append({"work_id": "dl-%d" % i, "kind": "hb", "payload": {"i": i}, "headers": headers})
    commit = insert_rows(conn, rows)
    wait_confirmed(case, commit.lsn_before, timeout=60)
    m = procs.wait_until(lambda: (lambda m: m if m["outbox_relay_acknowledged_total"] >= 30
                                  else None)(scrape(port)), 30, what="30 acknowledgements")
    assert m["outbox_relay_dead_lettered_total"] == 10, m
    assert m["outbox_relay_outstanding_messages"] == 0, m
    assert m["outbox_relay_inflight_bytes"] == 0, m
    assert relay.stop() == EXIT_OK, relay.log
