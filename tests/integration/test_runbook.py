# SPDX-License-Identifier: Apache-2.0
"""The README runbook's recovery procedures, done as written.

A lost slot (dropped, invalidated, or missing on a promoted standby) loses
the WAL of every row not yet published. The relay refuses to create a new
slot by itself (exit 3); the operator creates one with `outbox-relay slot
create` and republishes the rows written since before the incident by
deleting and re-inserting them in one statement, which PostgreSQL logs as
fresh inserts. Every row must then reach Kafka; rows sent twice are allowed
(consumers deduplicate by work ID), rows missing are not.
"""

from harness import EXIT_ENV, EXIT_OK, run_relay
from helpers import by_id, has_ids, insert_rows, simple_rows, wait_confirmed

REPUBLISH = ("WITH gone AS (DELETE FROM outbox WHERE created_at >= %s RETURNING *) "
             "INSERT INTO outbox SELECT * FROM gone")


def test_lost_slot_recovery(case):
    reader = case.reader()
    relay = case.relay()
    conn = case.connect(autocommit=False)
    before = insert_rows(conn, simple_rows("before", 3))
    assert reader.read_until(has_ids(before.work_ids), 30), case.logs()
    wait_confirmed(case, before.lsn_before)
    assert relay.stop() == EXIT_OK, relay.log

    # the incident: rows committed while no relay runs, then the slot is lost
    incident = case.scalar("SELECT clock_timestamp()")
    during = insert_rows(conn, simple_rows("during", 4))
    case.pg.drop_slot(case.slot)

    # the relay will not paper over it
    rc, out = run_relay(case.relay_args(create_slot=False), timeout=60)
    assert rc == EXIT_ENV, out
    assert case.slot in out and "--create-slot" in out, out

    # the runbook: a new slot, then republish everything since the incident
    rc, out = run_relay(["slot", "create", "-d", case.dsn, "-S", case.slot], timeout=60)
    assert rc == EXIT_OK, out
    cur = conn.cursor()
    cur.execute(REPUBLISH, (incident,))
    assert cur.rowcount == 4
    conn.commit()
    relay2 = case.relay(create_slot=False)
    after = insert_rows(conn, simple_rows("after", 2))

    want = before.work_ids + during.work_ids + after.work_ids
    assert reader.read_until(has_ids(want), 60), case.logs()
    assert relay2.stop() == EXIT_OK, relay2.log
    assert reader.drain(timeout=10)
    counts = {k: len(v) for k, v in by_id(reader.records).items()}
    # nothing lost; the rows before the incident were not sent again
    assert set(counts) == set(want), counts
    assert all(counts[w] == 1 for w in before.work_ids), counts
