# SPDX-License-Identifier: Apache-2.0
"""Kafka goes away while rows are committed. The slot must not confirm those
commits (confirmed_flush_lsn stays before them for several status intervals),
the relay must keep its replication connection alive meanwhile, and once the
broker is back every row arrives exactly once and the slot moves past them.

Each test runs its own broker so that stopping it cannot disturb other tests.
"""

import time

import pytest
from harness import (EXIT_OK, TopicReader, by_id, format_lsn, has_ids, insert_rows, parse_lsn,
                     simple_rows, wait_confirmed)

OBSERVE_S = 6           # six status intervals with -s 1


@pytest.fixture
def broker(own_broker):
    return own_broker


@pytest.mark.parametrize("outage", ["stop", "kill", "freeze"])
def test_rows_committed_while_broker_down(case, broker, outage):
    # the walsender drops a client that sends no status for wal_sender_timeout
    case.pg.query("ALTER SYSTEM SET wal_sender_timeout = '3s'")
    case.pg.query("SELECT pg_reload_conf()")
    try:
        run_outage(case, broker, outage)
    finally:
        case.pg.query("ALTER SYSTEM RESET wal_sender_timeout")
        case.pg.query("SELECT pg_reload_conf()")


def run_outage(case, broker, outage):
    relay = case.relay("-X", "message.timeout.ms=300000", brokers=broker.bootstrap)
    conn = case.connect(autocommit=False)

    first = insert_rows(conn, simple_rows("before", 1))
    reader = TopicReader(broker.bootstrap, [case.topic_pattern])
    case.readers.append(reader)
    assert reader.read_until(has_ids(first.work_ids), 30), case.logs()
    wait_confirmed(case, parse_lsn(reader.records[0].header("ce_pglsn")))

    {"stop": broker.stop, "kill": broker.kill, "freeze": broker.freeze}[outage]()
    active_pid = case.slot_info()["active_pid"]

    during = [insert_rows(conn, simple_rows("during-%d" % i, 3)) for i in range(5)]
    # no commit made during the outage may be confirmed: the confirmed LSN must
    # stay at or before the WAL position just before the first one's COMMIT
    limit = during[0].lsn_pre_commit
    deadline = time.monotonic() + OBSERVE_S
    samples = 0
    while time.monotonic() < deadline:
        s = case.slot_info()
        assert s["confirmed_flush_lsn"] <= limit, \
            "slot confirmed %s, past %s, while Kafka was down (%s)\n%s" % (
                format_lsn(s["confirmed_flush_lsn"]), format_lsn(limit), outage, case.logs())
        assert relay.alive, "relay exited with %s during the outage\n%s" % (
            relay.returncode, relay.log)
        assert s["active"] and s["active_pid"] == active_pid, \
            "replication connection was lost or replaced during the outage: %r\n%s" % (
                s, case.logs())
        samples += 1
        time.sleep(0.1)  # poll interval: the slot must stay put for the whole outage
    assert samples > 10

    if outage == "freeze":
        broker.thaw()
    else:
        broker.start()

    want = [wid for c in during for wid in c.work_ids]
    assert reader.read_until(has_ids(want), 120), \
        "rows committed during the outage did not arrive after it\n" + case.logs()
    last = max(parse_lsn(r.header("ce_pglsn")) for r in reader.records)
    assert last >= during[-1].lsn_before
    wait_confirmed(case, last, timeout=60)
    assert reader.drain(timeout=30)
    counts = {k: len(v) for k, v in by_id(reader.records).items()}
    assert counts == {wid: 1 for wid in first.work_ids + want}, counts

    assert relay.stop() == EXIT_OK, relay.log
