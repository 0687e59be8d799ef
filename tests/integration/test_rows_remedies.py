# SPDX-License-Identifier: Apache-2.0
"""The operator's remedies after a stop on an unpublishable row, taken from
the stop error line exactly as the relay suggests them:
--skip-transaction=LSN drops exactly that transaction (all of its rows,
including good ones) and nothing else, and --dead-letter-transaction=LSN
dead-letters the unpublishable rows of exactly that transaction under the
default --on-error=stop while its good rows are published. Both are logged
loudly with the user, and counted in /metrics. A second bad transaction
after the remedied one must stop the relay again (exit 4): a remedy is not
a blanket pass.

The bad row is the first row of its transaction, so no row of that
transaction was produced before the stop and "the skipped transaction's rows
do not arrive" is exact.

Also a row Kafka will never take (here: larger than message.max.bytes): the
relay stops with exit 4, confirms nothing from that transaction on, stops
again on every restart, and names the work ID; then --skip-transaction, or
--on-error=dead-letter with a dead-letter topic that takes the whole row,
lets the stream continue.
"""

import getpass
import json
import os
import re

import pytest
from harness import (EXIT_OK, EXIT_UNPUBLISHABLE, by_id, format_lsn, free_port, has_ids,
                     insert_rows, log_lines, parse_lsn, simple_rows, wait_confirmed)
from harness.http import wait_metric
from rows_helpers import REMEDY_DLQ, REMEDY_SKIP, assert_not_confirmed_past, stops_unpublishable


def null_key_row(work_id):
    return {"work_id": work_id, "kind": "order_received", "payload": {"bad": work_id},
            "entity_id": None}


def keyed(prefix, n):
    rows = simple_rows(prefix, n)
    for r in rows:
        r["entity_id"] = "entity-" + r["work_id"]
    return rows


def stuck_relay(case, reader, conn):
    """Publish 'first', then stop on T1 = [bad-1, t1-ok]; T2 and T3 are good.
    Returns (commits, the stop error line)."""
    relay = case.relay("--key-column", "entity_id")
    first = insert_rows(conn, keyed("first", 2))
    assert reader.read_until(has_ids(first.work_ids), 30), case.logs()
    wait_confirmed(case, max(parse_lsn(r.header("ce_pglsn")) for r in reader.records))
    t1 = insert_rows(conn, [null_key_row("bad-1")] + keyed("t1-ok", 1))
    t2 = insert_rows(conn, keyed("t2", 2))
    t3 = insert_rows(conn, keyed("t3", 1))
    line = stops_unpublishable(relay)
    assert_not_confirmed_past(case, t1)
    # restarting without a remedy changes nothing
    again = stops_unpublishable(case.relay("--key-column", "entity_id", create_slot=False,
                                           ready=False))
    assert again == line, (line, again)
    assert_not_confirmed_past(case, t1)
    return first, t1, t2, t3, line


def operator():
    return os.environ.get("USER") or getpass.getuser()


def test_skip_transaction_skips_exactly_one(case):
    reader = case.reader()
    conn = case.connect(autocommit=False)
    first, t1, t2, t3, line = stuck_relay(case, reader, conn)
    lsn = REMEDY_SKIP.findall(line)
    assert len(lsn) == 1, line
    lsn = lsn[0]
    assert t1.lsn_before < parse_lsn(lsn) <= t1.lsn_after, (lsn, line)

    port = free_port()
    relay = case.relay("--key-column", "entity_id", "--skip-transaction=" + lsn,
                       "--metrics-address", "127.0.0.1:%d" % port, create_slot=False)
    assert reader.read_until(has_ids(t2.work_ids + t3.work_ids), 30), case.logs()
    end3 = max(parse_lsn(r.header("ce_pglsn")) for r in by_id(reader.records)["t3-0"])
    wait_confirmed(case, end3)
    samples = wait_metric(port, "outbox_relay_skipped_transactions_total", lambda v: v >= 1)
    assert samples["outbox_relay_skipped_transactions_total"] == 1, samples

    skipping = [l for l in log_lines(relay.log, "SKIPPING")
                if lsn in l and l.startswith("outbox-relay: warning:")]
    assert len(skipping) == 1, "expected one SKIPPING line for %s:\n%s" % (lsn, relay.log)
    assert operator() in skipping[0], "the SKIPPING line should name the user:\n" + skipping[0]

    # a later bad transaction is not covered by the remedy
    t4 = insert_rows(conn, [null_key_row("bad-4")] + keyed("t4-ok", 1))
    line4 = stops_unpublishable(relay)
    assert '"bad-4"' in line4, line4
    assert REMEDY_SKIP.findall(line4) != [lsn], line4
    assert_not_confirmed_past(case, t4)

    assert reader.drain(timeout=30)
    got = by_id(reader.records)
    assert not set(t1.work_ids) & set(got), "rows of the skipped transaction arrived: %s" % (
        sorted(set(t1.work_ids) & set(got)))
    assert "bad-4" not in got
    assert set(first.work_ids + t2.work_ids + t3.work_ids) <= set(got)


def test_dead_letter_transaction_remedy(case):
    reader = case.reader()
    conn = case.connect(autocommit=False)
    dlq = case.topic("dlq")
    first, t1, t2, t3, line = stuck_relay(case, reader, conn)
    lsn = REMEDY_DLQ.findall(line)
    assert len(lsn) == 1, line
    lsn = lsn[0]
    assert t1.lsn_before < parse_lsn(lsn) <= t1.lsn_after, (lsn, line)

    port = free_port()
    relay = case.relay("--key-column", "entity_id", "--dead-letter-transaction=" + lsn,
                       "--dead-letter-topic=" + dlq, "--metrics-address", "127.0.0.1:%d" % port,
                       create_slot=False)
    assert reader.read_until(has_ids(t1.work_ids + t2.work_ids + t3.work_ids), 30), case.logs()
    end3 = max(parse_lsn(r.header("ce_pglsn")) for r in by_id(reader.records)["t3-0"])
    wait_confirmed(case, end3)
    samples = wait_metric(port, "outbox_relay_dead_lettered_total", lambda v: v >= 1)
    assert samples["outbox_relay_dead_lettered_total"] == 1, samples
    loud = [l for l in log_lines(relay.log, "--dead-letter-transaction")
            if lsn in l and l.startswith("outbox-relay: warning:")]
    assert loud and operator() in loud[0], \
        "the log should say who asked for --dead-letter-transaction=%s:\n%s" % (lsn, relay.log)

    # the remedy covers only that transaction: the next bad row stops the relay
    t4 = insert_rows(conn, [null_key_row("bad-4")] + keyed("t4-ok", 1))
    line4 = stops_unpublishable(relay)
    assert '"bad-4"' in line4, line4
    assert_not_confirmed_past(case, t4)

    assert reader.drain(timeout=30)
    got = by_id(reader.records)
    dead = [r for r in reader.records if r.topic == dlq]
    assert [r.header("ce_id") for r in dead] == ["bad-1"], [(r.header("ce_id"), r.headers)
                                                             for r in dead]
    assert dead[0].header("outbox_relay_error_code") == "NULL_VALUE", dead[0].headers
    assert re.search(r"key column .entity_id. is NULL", dead[0].header("outbox_relay_error")), \
        dead[0].headers
    assert dead[0].key is None and dead[0].value_text == case.scalar(
        "SELECT payload::text FROM outbox WHERE work_id = 'bad-1'")
    good_t1 = [r for r in got["t1-ok-0"] if r.topic != dlq]
    assert good_t1 and good_t1[0].topic == case.topic("order_received"), got["t1-ok-0"]
    assert set(first.work_ids + t2.work_ids + t3.work_ids) <= set(got)
    assert "bad-4" not in got


BIG = 2 * 1000 * 1000       # bytes: above librdkafka's default message.max.bytes (1,000,000)


def big_row(work_id):
    return {"work_id": work_id, "kind": "order_received",
            "payload": json.dumps({"blob": "x" * BIG})}


def commit_end_lsn(case, xid32):
    """End LSN of transaction xid32 as wal2json reports it ('nextlsn'), read
    with a peek that does not move the (inactive) slot."""
    for (data,) in case.query(
            "SELECT data FROM pg_logical_slot_peek_changes(%s, NULL, NULL, "
            "'format-version', '2', 'include-lsn', '1', 'include-xids', '1')", (case.slot,)):
        msg = json.loads(data)
        if msg["action"] == "C" and msg["xid"] == xid32:
            return msg["nextlsn"]
    raise AssertionError("transaction %d not found in slot %s" % (xid32, case.slot))


def stops_with_4(case, relay):
    try:
        rc = relay.wait(timeout=60)
    except Exception:
        raise AssertionError("relay did not stop on an unpublishable row\n" + relay.log)
    assert rc == EXIT_UNPUBLISHABLE, "exit %s\n%s" % (rc, relay.log)


@pytest.fixture
def stuck(case):
    """A relay that published 'ok-*', then stopped on 'big-0'; 'after-*' follows."""
    conn = case.connect(autocommit=False)
    reader = case.reader()
    relay = case.relay()
    ok = insert_rows(conn, simple_rows("ok", 3))
    assert reader.read_until(has_ids(ok.work_ids), 30), case.logs()
    wait_confirmed(case, max(parse_lsn(r.header("ce_pglsn")) for r in reader.records))
    big = insert_rows(conn, [big_row("big-0")])
    after = insert_rows(conn, simple_rows("after", 3))
    stops_with_4(case, relay)
    assert "big-0" in relay.log, "the log should name the work ID it cannot publish"
    assert case.confirmed() <= big.lsn_pre_commit, "the unpublishable transaction was confirmed"
    return reader, ok, big, after


def test_unpublishable_row_is_exit_4_on_every_start(case, stuck):
    reader, ok, big, after = stuck
    relay2 = case.relay(create_slot=False, ready=False)
    stops_with_4(case, relay2)
    assert case.confirmed() <= big.lsn_pre_commit
    reader.drain(timeout=30)
    assert set(by_id(reader.records)) == set(ok.work_ids), "nothing after the bad row may be sent"


def test_skip_transaction_remedy(case, stuck):
    reader, ok, big, after = stuck
    lsn = commit_end_lsn(case, big.xid32)
    relay2 = case.relay("--skip-transaction=%s" % lsn, create_slot=False)
    assert reader.read_until(has_ids(after.work_ids), 60), case.logs()
    wait_confirmed(case, max(parse_lsn(r.header("ce_pglsn")) for r in reader.records))
    assert relay2.stop() == EXIT_OK, relay2.log
    reader.drain(timeout=30)
    counts = {k: len(v) for k, v in by_id(reader.records).items()}
    assert counts == {w: 1 for w in ok.work_ids + after.work_ids}, counts
    assert parse_lsn(lsn) > big.lsn_before, format_lsn(big.lsn_before)


def test_dead_letter_remedy(case, stuck):
    """The dead-letter topic takes the whole row, so it must accept larger
    records than the row's own topic (the relay's error message says how);
    a dead-letter publish that fails too is exit 4, tested elsewhere."""
    reader, ok, big, after = stuck
    dlq = case.topic("dead-letter")
    case.kafka.create_topic(dlq, partitions=1, config={"max.message.bytes": str(3 * BIG)})
    relay2 = case.relay("--on-error=dead-letter", "--dead-letter-topic=" + dlq,
                        "-X", "message.max.bytes=%d" % (3 * BIG), create_slot=False)
    assert reader.read_until(has_ids(after.work_ids), 60), case.logs()
    assert reader.read_until(lambda recs: any(r.topic == dlq for r in recs), 30), \
        "nothing on the dead-letter topic\n" + case.logs()
    wait_confirmed(case, max(parse_lsn(r.header("ce_pglsn")) for r in reader.records))
    assert relay2.stop() == EXIT_OK, relay2.log
    reader.drain(timeout=30)
    dead = [r for r in reader.records if r.topic == dlq]
    assert len(dead) == 1, dead
    assert dead[0].header("ce_id") == "big-0"
    assert dead[0].value_text == case.scalar("SELECT payload::text FROM outbox WHERE work_id = 'big-0'")
    live = by_id(r for r in reader.records if r.topic != dlq)
    assert {k: len(v) for k, v in live.items()} == {w: 1 for w in ok.work_ids + after.work_ids}
