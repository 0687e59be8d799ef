# SPDX-License-Identifier: Apache-2.0
"""The relay process itself fails.

- A keepalive arrives while an acknowledgement is pending, then the relay is
  killed: the broker is frozen so the ack of one outbox row stays pending,
  other WAL (and the walsender's keepalives) carry the stream well past that
  row's commit, and for several status intervals the slot must not confirm
  that commit. After SIGKILL, a thawed broker and a restart, the restarted
  relay publishes the row again (its own published counter says so) and the
  row arrives.
- Two relays on one slot: the second waits as a warm standby and logs the PID
  holding the slot; when the first is killed it takes over, and nothing
  committed meanwhile is lost.
- A crash prints the stack of the thread it hit on stderr, then the process
  dies of the signal as before.
"""

import re
import signal
import time

import pytest
from harness import EXIT_OK, format_lsn, insert_rows, parse_lsn, wait_until
from harness.faults import (KIND, NO_TIMEOUT, Load, collector, commit_record_lsn, heal_broker,
                            mark, metrics_args, observe, say, sigkill, sized, spare_broker,
                            start_relay, verify)
from harness.http import scrape

ROWS = sized(6000, 30000)
RATE = 500


@pytest.fixture
def broker(env):
    b = spare_broker(env)
    yield b
    heal_broker(b)


def sent_lsn(case, pid):
    return case.pg.scalar("SELECT sent_lsn::text FROM pg_stat_replication WHERE pid = %s", (pid,))


def test_keepalive_while_ack_pending_then_killed(case, broker):
    coll = collector(case, broker=broker)
    case.query("CREATE TABLE side_table (id bigserial PRIMARY KEY, note text)")
    port, margs = metrics_args()
    relay = start_relay(case, *NO_TIMEOUT, *margs, brokers=broker.bootstrap)
    conn = case.connect(autocommit=False)
    insert_rows(conn, [{"work_id": "ka-first", "kind": KIND, "payload": {"n": 0}}])
    wait_until(lambda: "ka-first" in coll.ids(), 60, what="the first row", tick=coll.poll)
    first_end = coll.copies["ka-first"][0][2]
    wait_until(lambda: case.confirmed() >= first_end, 30, what="the first row to be confirmed")

    broker.freeze()
    try:
        row = insert_rows(conn, [{"work_id": "ka-pending", "kind": KIND,
                                  "payload": {"n": 1, "note": "its ack stays pending"}}])
        wait_until(lambda: scrape(port)["outbox_relay_published_total"] >= 2, 30,
                   what="the relay to hand the row to the frozen broker")
        commit_at = commit_record_lsn(case.pg, row.xid32, row.lsn_before, row.lsn_after)
        walsender = case.slot_info()["active_pid"]
        # WAL elsewhere: transactions on another table, then idle (keepalives)
        for i in range(20):
            case.query("INSERT INTO side_table (note) VALUES (%s)", ("after the row %d" % i,))
        side_end = case.pg.current_wal_lsn()
        wait_until(lambda: parse_lsn(sent_lsn(case, walsender) or "0/0") >= side_end, 60,
                   what="the walsender to send past the other table's WAL")
        status_before = scrape(port)["outbox_relay_status_updates_total"]
        seen = []

        def not_confirmed():
            s = case.slot_info()
            assert relay.alive and s["active_pid"] == walsender, case.logs()
            seen.append(s["confirmed_flush_lsn"])
            assert seen[-1] <= commit_at, \
                "the slot confirmed %s, past the start of the pending row's commit record " \
                "(%s)\n%s" % (format_lsn(seen[-1]), format_lsn(commit_at), case.logs())
        observe(4, not_confirmed)       # four status intervals (-s 1)
        status_sent = scrape(port)["outbox_relay_status_updates_total"] - status_before
        say("ack pending for ka-pending (its commit record starts at %s); stream went on to %s; "
            "slot stayed at %s; %d status updates meanwhile" % (
                format_lsn(commit_at), format_lsn(side_end), format_lsn(max(seen)),
                status_sent))
        assert status_sent >= 2, "the relay sent no standby status while the ack was pending"
        sigkill(relay)
        wait_until(lambda: not case.slot_info()["active"], 30, what="the slot to be released")
        at_kill = case.confirmed()
        assert at_kill <= commit_at, "confirmed %s at the kill, past the pending row's commit " \
            "at %s" % (format_lsn(at_kill), format_lsn(commit_at))
    finally:
        broker.thaw()

    port2, margs2 = metrics_args()
    relay2 = start_relay(case, *NO_TIMEOUT, *margs2, brokers=broker.bootstrap, create_slot=False)
    wait_until(lambda: scrape(port2)["outbox_relay_acknowledged_total"] >= 1, 60,
               what="the restarted relay to publish the pending row again", tick=coll.poll)
    wait_until(lambda: "ka-pending" in coll.ids(), 60, what="the pending row to arrive",
               tick=coll.poll)
    coll.drain()
    copies = coll.copies["ka-pending"]
    end_lsn = copies[0][2]
    assert max(seen) < end_lsn, "the slot confirmed %s while the transaction ending at %s was " \
        "unacknowledged" % (format_lsn(max(seen)), format_lsn(end_lsn))
    extra = sum(len(c) - 1 for c in coll.copies.values())
    say("ka-pending arrived %d times (transaction ending at %s); the restarted relay published "
        "%d message(s)" % (len(copies), format_lsn(end_lsn),
                          scrape(port2)["outbox_relay_published_total"]))
    case.metric("keepalive_pending_duplicates", extra)
    assert set(coll.ids()) == {"ka-first", "ka-pending"}
    assert len(coll.copies["ka-first"]) == 1, "the confirmed first row was sent again"
    assert relay2.stop() == EXIT_OK, relay2.log


def test_two_relays_on_one_slot(case):
    coll = collector(case)
    first = start_relay(case, *NO_TIMEOUT)
    holder = case.slot_info()["active_pid"]
    load = Load(case, "standby", ROWS, rate=RATE).start()
    try:
        second = case.relay(*NO_TIMEOUT, create_slot=False, ready=False)
        wait_until(lambda: "PID %d" % holder in second.log, 60,
                   what="the second relay to log the holder's PID %d" % holder, tick=coll.poll)
        # it waits: alive, and the slot stays with the first relay's walsender
        def waiting():
            coll.poll(0)
            assert second.alive, "standby exited with %s\n%s" % (second.returncode, second.log)
            assert case.slot_info()["active_pid"] == holder, \
                "the standby took the slot from a live relay\n" + case.logs()
        observe(3, waiting)
        say("standby waiting: %s" % [ln for ln in second.log.splitlines()
                                     if "PID %d" % holder in ln][0])
        load.wait_rows(ROWS // 2, 300, tick=coll.poll, relays=[first, second])
        marks = [mark(case, coll, "first relay SIGKILL")]
        sigkill(first)
        killed_at = time.monotonic()
        wait_until(lambda: case.slot_info()["active_pid"] not in (None, holder), 60,
                   what="the standby to take the slot over", tick=coll.poll)
        took = time.monotonic() - killed_at
        say("standby took over %.1f s after the first relay was killed" % took)
        case.metric("standby_takeover_seconds", "%.1f" % took)
        expected = load.finish(tick=coll.poll, relays=[second])
    finally:
        load.stop()
    verify(case, coll, expected, marks, "two_relays", relays=[second])
    assert "streaming from slot" in second.log
    assert second.stop() == EXIT_OK, second.log


def test_crash_prints_its_stack(case):
    """A crash (here a SIGSEGV sent to a relay waiting in its loop) writes
    one line naming the signal and the stack, one frame a line, to stderr
    (journald's log of the unit), then dies of the signal: a segfault seen
    once in CI (`slot create`, stop 34) left no trace to find its cause."""
    relay = start_relay(case)
    rc = relay.stop(signal.SIGSEGV)
    log = relay.log
    if "AddressSanitizer" in log:
        # The ASan build leaves crashes to ASan's own report (main.c, CRASH_HANDLER).
        assert "SEGV" in log and "#1 " in log, log
        return
    assert rc == -signal.SIGSEGV, (rc, log)
    assert "outbox-relay: fatal: crashed with signal 11 (SIGSEGV)" in log, log
    # the main thread's frames, by name (the executable exports its symbols)
    assert re.search(r"outbox-relay\(relay_run\+0x[0-9a-f]+\)", log), log
    assert re.search(r"outbox-relay\(main\+0x[0-9a-f]+\)", log), log
