# SPDX-License-Identifier: Apache-2.0
"""One outbox row end to end: the order-103 acknowledgement from the seeds
arrives with the exact key, value, timestamp and CloudEvents headers, and the
slot confirms its commit only once Kafka has it."""

import signal

import pytest
from harness import (CE_HEADERS, EXIT_OK, RFC3339_US, by_id, format_lsn, has_ids, insert_rows,
                     parse_lsn, wait_confirmed)

ORDER_103 = {
    "work_id": "order-103-ack",
    "kind": "order_received",
    "payload": '{"order_id":103,"customer_id":1,"total":"29.00",'
               '"message":"Order received; payment still pending"}',
}


def commit_time(case, xid32):
    """(RFC 3339 UTC text with microseconds, epoch microseconds) of xid's commit."""
    return case.query(
        "SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'), "
        "       (extract(epoch FROM t) * 1000000)::bigint "
        "FROM pg_xact_commit_timestamp(%s::text::xid) AS t", (str(xid32),))[0]


@pytest.mark.smoke
def test_order_103(case):
    relay = case.relay()
    confirmed_before = case.confirmed()
    sysid = case.pg.system_identifier()
    topic = case.topic("order_received")
    reader = case.reader([topic])

    conn = case.connect(autocommit=False)
    commit = insert_rows(conn, [ORDER_103])
    expected_value = case.scalar("SELECT payload::text FROM outbox WHERE work_id = %s",
                                 (ORDER_103["work_id"],))
    ce_time, commit_us = commit_time(case, commit.xid32)

    assert reader.read_until(has_ids(["order-103-ack"]), 30), \
        "order-103-ack did not arrive on %s; read %r" % (topic, reader.records)
    assert reader.drain(timeout=30)
    assert len(reader.records) == 1, "expected exactly one record: %r" % reader.records
    rec = reader.records[0]

    assert rec.topic == topic
    assert rec.key == b"order-103-ack"
    assert rec.value_text == expected_value
    # the value is PostgreSQL's jsonb text, not the text that was inserted
    assert expected_value == ('{"total": "29.00", "message": "Order received; payment still '
                              'pending", "order_id": 103, "customer_id": 1}')

    for name in CE_HEADERS:
        assert rec.header(name) is not None, "header %s missing; have %r" % (name, rec.headers)
    assert rec.header("ce_specversion") == "1.0"
    assert rec.header("ce_id") == "order-103-ack"
    assert rec.header("ce_type") == "order_received"
    assert rec.header("content-type") == "application/json"
    assert rec.header("ce_source") == "postgresql://%s/%s/public.outbox" % (sysid, case.dbname)
    assert rec.header("ce_pgxid") == str(commit.xid32)

    assert RFC3339_US.match(rec.header("ce_time")), rec.header("ce_time")
    assert rec.header("ce_time") == ce_time
    # the record timestamp is when the relay produced it: after the commit (outbox-relay(7)'s record table)
    assert commit_us // 1000 <= rec.timestamp <= commit_us // 1000 + 30000, \
        "record timestamp %d ms is not the produce time after the commit at %d us" % (
            rec.timestamp, commit_us)

    pglsn_text = rec.header("ce_pglsn")
    pglsn = parse_lsn(pglsn_text)
    assert format_lsn(pglsn) == pglsn_text, "ce_pglsn %r is not pg_lsn text" % pglsn_text
    # end of the commit record: after everything the transaction wrote before
    # COMMIT, not after what the server had written once COMMIT returned
    assert commit.lsn_before < pglsn <= commit.lsn_after, \
        "ce_pglsn %s not in (%s, %s]" % (pglsn_text, format_lsn(commit.lsn_before),
                                         format_lsn(commit.lsn_after))
    assert pglsn > confirmed_before
    wait_confirmed(case, pglsn, timeout=30)

    assert relay.stop(signal.SIGTERM) == EXIT_OK, relay.log


@pytest.mark.parametrize("tz", ["UTC", "Asia/Kathmandu", "America/St_Johns"])
def test_ce_time_is_utc_with_six_digits(case, tz):
    """ce_time, and the record timestamp with --record-timestamp=commit, are
    the commit time in UTC whatever the session time zone the relay's
    walsender gets, with exactly six fractional digits (PostgreSQL drops
    trailing zeros, e.g. '.3365+05:45'). 60 separate commits make a commit
    time with trailing zero microseconds all but certain."""
    case.query("ALTER DATABASE %s SET timezone TO '%s'" % (case.dbname, tz))
    relay = case.relay("--record-timestamp=commit")
    conn = case.connect(autocommit=False)
    commits = [insert_rows(conn, [{"work_id": "tz-%d" % i, "kind": "tick",
                                   "payload": '{"i": %d}' % i}]) for i in range(60)]
    reader = case.reader([case.topic("tick")])
    assert reader.read_until(has_ids(c.work_ids[0] for c in commits), 60), case.logs()
    recs = by_id(reader.records)
    for c in commits:
        rec = recs[c.work_ids[0]][0]
        ce_time, commit_us = commit_time(case, c.xid32)
        assert rec.header("ce_time") == ce_time, (tz, c.work_ids)
        assert abs(rec.timestamp * 1000 - commit_us) < 1000, (tz, rec.timestamp, commit_us)
    assert relay.stop() == EXIT_OK, relay.log
