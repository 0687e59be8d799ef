# SPDX-License-Identifier: Apache-2.0
"""The relay's slot is lost.

- Dropped while the relay is down: a start without --create-slot is exit 3,
  says why, and creates nothing. A start with --create-slot left on (as a
  container's first-start setting stays) makes the slot anew, then stops
  with exit 3 too: the rows committed between the dropped slot's
  checkpoint and the new slot were decoded by no slot.
- Dropped while the relay runs but is disconnected (walsender terminated,
  slot dropped before it reconnects): exit 3, "is gone", and no new slot.
- Dropped in the middle of the relay's reconnect, after its slot check and
  before START_REPLICATION (held there by a frozen broker while it reads the
  slot's checkpoint): the same exit 3 and "is gone", not a bare SQLSTATE.

What the operator does then is the runbook of outbox-relay(7): test_ops_runbook.py.
"""

import pytest

from eos_helpers import EOS
from harness import (EXIT_ENV, EXIT_OK, format_lsn, insert_rows, run_relay, simple_rows,
                     wait_confirmed, wait_until)
from harness.faults import (KIND, Load, collector, heal_broker, say, spare_broker, start_relay,
                            verify_exactly_once)
from harness.relay import the_error


def test_slot_dropped_while_relay_down(case):
    relay = start_relay(case)
    assert relay.stop() == EXIT_OK, relay.log
    assert case.pg.drop_slot(case.slot)
    rc, out = run_relay(case.relay_args(create_slot=False), timeout=60)
    assert rc == EXIT_ENV, "exit %s without the slot and without --create-slot:\n%s" % (rc, out)
    assert case.slot in out and "does not exist" in out and "--create-slot" in out, out
    assert case.slot_info() is None, "the relay created a slot without --create-slot"


@pytest.mark.parametrize("mode", ["at-least-once", "exactly-once"])
def test_slot_dropped_while_relay_down_is_not_made_anew_in_silence(case, mode):
    """The slot is dropped while the relay is down, rows are committed, and
    the relay starts again with --create-slot still given. It once made the
    slot anew at the current WAL and streamed on: the rows in between were
    lost without a word (found by a test of faults while the relay is down).
    Now it stops with exit 3 naming both LSNs, keeps the new slot, and runs
    once the operator republished those rows and accepted the new slot's
    position. Every row arrives once, for a read_committed consumer."""
    extra = EOS if mode == "exactly-once" else []
    coll = collector(case, isolation="read_committed")
    relay = start_relay(case, *extra)
    conn = case.connect(autocommit=False)
    before = insert_rows(conn, simple_rows("before", 2, kind=KIND))
    wait_until(lambda: set(before.work_ids) <= coll.ids(), 60, what="the rows before", tick=coll.poll)
    wait_confirmed(case, before.lsn_after)
    assert relay.stop() == EXIT_OK, relay.log

    assert case.pg.drop_slot(case.slot)
    gap = insert_rows(conn, simple_rows("gap", 3, kind=KIND))
    rc, out = run_relay(case.relay_args(*extra), timeout=90)
    assert rc == EXIT_ENV, "exit %s for a slot made anew over a dropped one:\n%s" % (rc, out)
    assert case.slot_info() is not None, "the new slot was not kept"
    start = format_lsn(case.confirmed())
    error = the_error(out)
    assert "was created by this start" in error and "decoded by no slot" in error, error
    assert "--accept-slot-position=%s" % start in error and "A lost slot" in error, error
    assert error.endswith("first start only"), error
    # started again as it was, it stops again: the slot is past the checkpoint, for the same reason
    rc, out = run_relay(case.relay_args(*extra), timeout=90)
    assert rc == EXIT_ENV, out
    error = the_error(out)
    assert "dropped and made anew" in error and "--accept-slot-position=%s" % start in error, error

    # the runbook: republish what was committed since the loss, accept the new slot
    cur = conn.cursor()
    cur.execute("WITH gone AS (DELETE FROM outbox WHERE work_id = ANY(%s) RETURNING *) "
                "INSERT INTO outbox SELECT * FROM gone", (gap.work_ids,))
    assert cur.rowcount == 3
    conn.commit()
    relay = start_relay(case, *extra, "--accept-slot-position=" + start, create_slot=False)
    after = insert_rows(conn, simple_rows("after", 2, kind=KIND))
    conn.close()
    verify_exactly_once(case, coll, before.work_ids + gap.work_ids + after.work_ids,
                        "slot_made_anew_%s" % mode.replace("-", "_"), relays=[relay])
    assert relay.stop() == EXIT_OK, relay.log


DROP_AFTER_TERMINATE = """
DO $$
DECLARE p int;
BEGIN
    SELECT active_pid INTO p FROM pg_replication_slots WHERE slot_name = %(slot)s;
    IF p IS NULL OR NOT pg_terminate_backend(p, 10000) THEN
        RAISE EXCEPTION 'slot %% not active', %(slot)s;
    END IF;
    PERFORM pg_drop_replication_slot(%(slot)s);
END $$"""


def test_slot_dropped_while_relay_disconnected(case):
    coll = collector(case)
    relay = start_relay(case)
    load = Load(case, "gone", 300, writers=1, rate=300).start()
    try:
        load.finish(tick=coll.poll, relays=[relay])
    finally:
        load.stop()
    # terminate the walsender and drop the slot in one statement, before the
    # relay's reconnect (100 ms or more) finds it; a reconnect that wins the
    # race makes the drop fail, so try again
    def dropped():
        try:
            case.pg.query(DROP_AFTER_TERMINATE, {"slot": case.slot})
            return True
        except Exception as e:
            say("retrying the drop: %s" % str(e).strip())
            return False
    wait_until(dropped, 60, what="dropping the slot between the relay's sessions")
    try:
        rc = relay.wait(timeout=60)
    except Exception:
        raise AssertionError("relay still running 60 s after its slot was dropped\n" + relay.log)
    assert rc == EXIT_ENV, "exit %s after the slot was dropped\n%s" % (rc, relay.log)
    assert "is gone" in relay.log, relay.log
    assert case.slot_info() is None, "the relay recreated the slot"


# The relay's replication connection, idle after reading its slot (preflight.c
# preflight_read_slot) and before START_REPLICATION.
CHECKED_NOT_STREAMING = """
SELECT pid FROM pg_stat_activity
WHERE backend_type = 'walsender' AND datname = %(db)s AND state = 'idle'
  AND query LIKE '%%FROM pg_catalog.pg_replication_slots s%%'
  AND NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = %(slot)s AND active)"""


def test_slot_dropped_between_check_and_start_replication(case, env):
    broker = spare_broker(env)
    coll = collector(case, broker=broker)
    relay = start_relay(case, brokers=broker.bootstrap)
    load = Load(case, "race", 100, writers=1, rate=200).start()
    try:
        load.finish(tick=coll.poll, relays=[relay])
    finally:
        load.stop()
    try:
        # Kafka answers nothing: the reconnect stops at reading the slot's
        # checkpoint, after its slot check, with the slot still inactive
        broker.freeze()
        assert case.pg.scalar("SELECT pg_terminate_backend(active_pid, 10000) FROM "
                              "pg_replication_slots WHERE slot_name = %s", (case.slot,))
        wait_until(lambda: case.pg.query(CHECKED_NOT_STREAMING, {"db": case.dbname, "slot": case.slot}),
                   60, what="the relay to check its slot on reconnecting")
        case.pg.query("SELECT pg_drop_replication_slot(%s)", (case.slot,))
    finally:
        heal_broker(broker)
    try:
        rc = relay.wait(timeout=90)
    except Exception:
        raise AssertionError("relay still running 90 s after its slot was dropped\n" + relay.log)
    assert rc == EXIT_ENV, "exit %s after the slot was dropped\n%s" % (rc, relay.log)
    assert "is gone" in relay.log and "--create-slot" in relay.log, relay.log
    assert case.slot_info() is None, "the relay recreated the slot"
