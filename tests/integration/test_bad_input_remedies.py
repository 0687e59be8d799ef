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
"""

import getpass
import os
import re

from bad_input_helpers import (REMEDY_DLQ, REMEDY_SKIP, assert_not_confirmed_past,
                               log_lines, stops_unpublishable, wait_metric)
from harness import free_port, parse_lsn
from helpers import by_id, has_ids, insert_rows, simple_rows, wait_confirmed


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
