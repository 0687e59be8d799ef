# SPDX-License-Identifier: Apache-2.0
"""The in-flight bounds (--max-inflight-messages, --max-inflight-bytes)
while Kafka is slow or down.

A relay blocked on a full in-flight window while Kafka is down still sends
standby status, so the walsender does not drop it (STYLE.md anti-pattern
3). Header values are bytes librdkafka holds until the acknowledgement just
as keys and values are, so rows with a tiny payload and large headers must
be bounded by --max-inflight-bytes too, or a frozen broker lets the relay
queue every row of the outbox in memory; and what a message adds to the
in-flight bytes, its delivery report subtracts, dead letters included.
Memory for one huge transaction: test_stream_volume.py.
"""

import pytest
from harness import (EXIT_OK, TopicReader, format_lsn, has_ids, insert_rows, parse_lsn, procs,
                     simple_rows, wait_confirmed)
from harness.faults import observe, wal_sender_timeout
from harness.http import scrape


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
    # The relay's own checkpoint records count too and may still be in
    # flight at this scrape; their reports come within a second. A leak
    # never reaches 0.
    m = procs.wait_until(lambda: (lambda m: m if m["outbox_relay_inflight_bytes"] == 0
                                  else None)(scrape(port)), 15, what="in-flight bytes back at 0")
    assert m["outbox_relay_outstanding_messages"] == 0, m
    assert relay.stop() == EXIT_OK, relay.log


WAL_SENDER_TIMEOUT_S = 3


def relay_with_broker_stopped(case, broker, inflight):
    """A relay with --max-inflight-messages=inflight whose first row has
    arrived, then its broker stopped. Returns (relay, reader, conn, the
    walsender's PID)."""
    relay = case.relay("-X", "message.timeout.ms=300000", "--max-inflight-messages=%d" % inflight,
                       brokers=broker.bootstrap)
    conn = case.connect(autocommit=False)
    first = insert_rows(conn, simple_rows("first", 1))
    reader = TopicReader(broker.bootstrap, [case.topic_pattern])
    case.readers.append(reader)
    assert reader.read_until(has_ids(first.work_ids), 30), case.logs()
    broker.stop()
    return relay, reader, conn, case.slot_info()["active_pid"]


def same_walsender(case, relay, pid, what):
    """A check for observe(): the relay runs and walsender pid still serves
    its slot. Returns the slot's row."""
    def check():
        s = case.slot_info()
        assert relay.alive, relay.log
        assert s["active"] and s["active_pid"] == pid, \
            "walsender dropped the relay while %s\n%s" % (what, relay.log)
        return s
    return check


def test_full_inflight_window_still_sends_status(case, broker):
    with wal_sender_timeout(case.pg, "%ds" % WAL_SENDER_TIMEOUT_S):
        relay, reader, conn, pid = relay_with_broker_stopped(case, broker, 5)
        stuck = [insert_rows(conn, simple_rows("stuck-%d" % i, 10)) for i in range(10)]
        serving = same_walsender(case, relay, pid, "its in-flight window was full")

        def held():
            s = serving()
            assert s["confirmed_flush_lsn"] <= stuck[0].lsn_pre_commit, format_lsn(
                s["confirmed_flush_lsn"])
        observe(8, held)
        broker.start()
        ids = [w for c in stuck for w in c.work_ids]
        assert reader.read_until(has_ids(ids), 120), case.logs()
        wait_confirmed(case, max(parse_lsn(r.header("ce_pglsn")) for r in reader.records), 60)
        assert relay.stop() == EXIT_OK, relay.log


def test_socket_full_still_sends_status(case, broker):
    """Kafka down while the application keeps writing: the relay stops
    reading at its in-flight bound, and the replication connection fills
    until the walsender waits on it (wait event WalSenderWriteData: some 40
    MB decoded, where the socket buffers hold a few). The relay's standby
    status updates must still reach the server through the full connection,
    so the walsender outlives wal_sender_timeout four times over, and the
    rows arrive once Kafka is back. The test above fills the in-flight
    window only, with a hundred rows; here the connection itself is full."""
    rows = 40000
    with wal_sender_timeout(case.pg, "%ds" % WAL_SENDER_TIMEOUT_S):
        relay, reader, conn, pid = relay_with_broker_stopped(case, broker, 50)
        # About 1 KiB of payload each.
        conn.cursor().execute("INSERT INTO outbox (work_id, kind, payload) SELECT 'full-' || g, %s, "
                              "jsonb_build_object('pad', repeat('x', 1000)) FROM generate_series(1, %s) g",
                              ("order_received", rows))
        conn.commit()
        serving = same_walsender(case, relay, pid, "the replication connection was full")
        procs.wait_until(lambda: serving() and case.pg.scalar(
            "SELECT wait_event FROM pg_stat_activity WHERE pid = %s", (pid,)) == "WalSenderWriteData",
            60, interval=0.05, what="the walsender to wait on the full replication connection")
        observe(4 * WAL_SENDER_TIMEOUT_S, serving)
        broker.start()
        ids = ["full-%d" % i for i in range(1, rows + 1)]
        assert reader.read_until(has_ids(ids), 180), case.logs()
        assert relay.stop() == EXIT_OK, relay.log
