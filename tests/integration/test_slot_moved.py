# SPDX-License-Identifier: Apache-2.0
"""Someone else moves the slot (issue 15): whatever consumes the relay's
slot while the relay is away, the rows it took were never published, and
the relay must stop loudly (exit 3) naming the LSN range instead of
resuming from the new position; a relay configured differently must not
share the slot. The evidence is the checkpoint record in Kafka, so a
restart, a warm standby taking over, or a fresh process all see it.

Each test first shows the rows really were consumed (the problem exists),
then what the relay does, then the operator's remedy from outbox-relay(7).
"""

import os
import re
import subprocess
import time

import harness
import pytest
from harness import (EXIT_ENV, EXIT_OK, TopicReader, format_lsn, has_ids, insert_rows, procs,
                     simple_rows, wait_confirmed)

REPUBLISH = ("WITH gone AS (DELETE FROM outbox WHERE work_id = ANY(%s) RETURNING *) "
             "INSERT INTO outbox SELECT * FROM gone")


def published_then_stopped(case, tag="first", n=3):
    """A relay publishes n rows, confirms them and stops; returns the reader."""
    reader = case.reader()
    relay = case.relay()
    conn = case.connect(autocommit=False)
    c = insert_rows(conn, simple_rows(tag, n))
    conn.close()
    assert reader.read_until(has_ids(c.work_ids), 30), case.logs()
    wait_confirmed(case, c.lsn_before)
    assert relay.stop() == EXIT_OK, relay.log
    return reader


def consume(case, how):
    """Consume the slot the way a stray client would; returns the new confirmed LSN."""
    if how == "get_changes":
        case.query("SELECT count(*) FROM pg_logical_slot_get_changes(%s, NULL, NULL)", (case.slot,))
    else:
        case.query("SELECT pg_replication_slot_advance(%s, pg_current_wal_lsn())", (case.slot,))
    return case.confirmed()


@pytest.mark.parametrize("how", ["get_changes", "advance"])
def test_slot_consumed_while_the_relay_is_stopped(case, how):
    reader = published_then_stopped(case)
    conn = case.connect(autocommit=False)
    taken = insert_rows(conn, simple_rows("taken", 4))
    before = case.confirmed()
    moved_to = consume(case, how)
    assert moved_to > before and moved_to >= taken.lsn_before, (before, moved_to)

    # check predicts it (a FAIL, not "safe to start")
    rc, out = harness.run_relay(["check"] + case.relay_args(create_slot=False), timeout=60)
    assert rc == EXIT_ENV, out
    assert re.search(r'^FAIL  checkpoint of slot "%s": the slot is confirmed up to LSN %s, beyond the '
                     r'newest checkpoint' % (case.slot, re.escape(format_lsn(moved_to))), out, re.M), out

    relay = case.relay(create_slot=False, ready=False)
    assert relay.wait(60) == EXIT_ENV, relay.log
    m = re.search(r"is confirmed up to LSN (\S+), beyond the newest checkpoint of any relay of this "
                  r"slot, LSN (\S+)", relay.log)
    assert m, relay.log
    assert m.group(1) == format_lsn(moved_to), relay.log
    assert "--accept-slot-position=%s" % format_lsn(moved_to) in relay.log, relay.log
    assert "streaming from slot" not in relay.log, "it streamed from the moved slot\n" + relay.log
    assert reader.drain(30)
    assert not any(r.header("ce_id") in taken.work_ids for r in reader.records), \
        "the taken rows were published after all"

    # the remedy: republish the taken rows from the outbox table, accept the position once
    cur = conn.cursor()
    cur.execute(REPUBLISH, (taken.work_ids,))
    assert cur.rowcount == 4
    conn.commit()
    relay = case.relay("--accept-slot-position=%s" % format_lsn(moved_to), create_slot=False)
    assert reader.read_until(has_ids(taken.work_ids), 30), relay.log
    assert "accepting replication slot" in relay.log, relay.log
    assert relay.stop() == EXIT_OK, relay.log
    # accepted once: the next start needs no option and no longer complains
    relay = case.relay(create_slot=False)
    assert relay.stop() == EXIT_OK, relay.log
    conn.close()


def test_slot_taken_over_by_pg_recvlogical_while_the_relay_waits(case):
    """The walsender is terminated and pg_recvlogical grabs the slot before the
    relay reconnects: the relay waits as a warm standby, pg_recvlogical
    consumes and confirms rows, then lets go. Before, the relay resumed
    from the new position and those rows were lost."""
    reader = case.reader()
    relay = case.relay()
    conn = case.connect(autocommit=False)
    first = insert_rows(conn, simple_rows("first", 2))
    assert reader.read_until(has_ids(first.work_ids), 30), relay.log
    wait_confirmed(case, first.lsn_before)

    out = os.path.join(case.env.base_dir, case.name + "-recvlogical.out")
    recv = None
    deadline = time.monotonic() + 30

    def holder(p):
        """Who holds the slot now: 'pg_recvlogical', 'lost' (it exited: the
        relay was back first), or None (nobody yet)."""
        if p.poll() is not None:
            return "lost"
        rows = case.query("SELECT a.application_name FROM pg_replication_slots s "
                          "JOIN pg_stat_replication a ON a.pid = s.active_pid "
                          "WHERE s.slot_name = %s", (case.slot,))
        return "pg_recvlogical" if rows and rows[0][0] == "pg_recvlogical" else None

    # The race under test: the walsender goes, and pg_recvlogical takes the
    # slot in the moment the relay's reconnect backoff leaves. When the relay
    # is back first, pg_recvlogical (--no-loop) exits and the round repeats.
    while recv is None:
        case.query("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                   "WHERE slot_name = %s AND active_pid IS NOT NULL", (case.slot,))
        p = subprocess.Popen([os.path.join(harness.pg.PG_BINDIR, "pg_recvlogical"), "-d", case.dsn,
                              "-S", case.slot, "--start", "--no-loop", "-f", out, "-s", "1",
                              "-F", "1"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if procs.wait_until(lambda: holder(p), 30, what="pg_recvlogical to hold the slot or exit") \
                == "pg_recvlogical":
            recv = p
        elif time.monotonic() > deadline:
            raise AssertionError("pg_recvlogical never got the slot: %s" % p.stderr.read())
    try:
        taken = insert_rows(conn, simple_rows("taken", 3))
        procs.wait_until(lambda: (case.confirmed() or 0) >= taken.lsn_after, 30,
                         what="pg_recvlogical to confirm the taken rows")
        assert relay.alive, relay.log
    finally:
        recv.terminate()
        recv.wait(10)
    assert relay.wait(60) == EXIT_ENV, relay.log
    assert "someone else consumed the slot" in relay.log, relay.log
    assert reader.drain(30)
    assert not any(r.header("ce_id") in taken.work_ids for r in reader.records), \
        "the taken rows were published after all"
    conn.close()


def test_relay_with_another_table_set_refuses_the_slot(case):
    """A second relay of the same slot with a different --table set (say,
    a newer deployment) stops at once instead of taking turns with the
    first: each would confirm rows of tables only the other publishes."""
    case.query("CREATE TABLE outbox2 (LIKE outbox INCLUDING ALL)")
    relay = case.relay()
    other = case.relay("-t", "public.outbox", "-t", "public.outbox2", create_slot=False, ready=False)
    assert other.wait(60) == EXIT_ENV, other.log
    assert "another table set or row mapping" in other.log, other.log
    assert "tables=public.outbox,public.outbox2" in other.log, other.log
    assert relay.alive
    # the same configuration is welcome as a warm standby
    standby = case.relay(create_slot=False, ready=False)
    procs.wait_until(lambda: "warm standby" in standby.log, 30, what="the standby to wait")
    assert relay.stop() == EXIT_OK, relay.log
    standby.wait_ready(case.pg, case.slot)
    assert standby.stop() == EXIT_OK, standby.log
    # after the operator's deliberate change, once
    changed = case.relay("-t", "public.outbox", "-t", "public.outbox2", "--accept-config-change",
                         create_slot=False)
    assert "accepting a new table set or row mapping" in changed.log, changed.log
    assert changed.stop() == EXIT_OK, changed.log
