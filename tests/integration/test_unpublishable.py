# SPDX-License-Identifier: Apache-2.0
"""A row Kafka will never take (here: larger than message.max.bytes) is exit 4:
the relay stops, confirms nothing from that transaction on, stops again on
every restart, and names the work ID. The operator's remedies then let the
stream continue: skip that one transaction, or dead-letter its rows.
"""

import json

import pytest
from harness import EXIT_OK, EXIT_UNPUBLISHABLE, format_lsn, parse_lsn
from helpers import by_id, has_ids, insert_rows, simple_rows, wait_confirmed

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
    assert case.confirmed() <= big.lsn_before, "the unpublishable transaction was confirmed"
    return reader, ok, big, after


def test_unpublishable_row_is_exit_4_on_every_start(case, stuck):
    reader, ok, big, after = stuck
    relay2 = case.relay(create_slot=False, ready=False)
    stops_with_4(case, relay2)
    assert case.confirmed() <= big.lsn_before
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
