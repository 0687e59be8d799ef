# SPDX-License-Identifier: Apache-2.0
"""The relay's slot is lost.

- Dropped while the relay is down: a start without --create-slot is exit 3,
  says why, and creates nothing.
- Dropped while the relay runs but is disconnected (walsender terminated,
  slot dropped before it reconnects): exit 3, "is gone", and no new slot.
- Dropped in the middle of the relay's reconnect, after its slot check and
  before START_REPLICATION (held there by a frozen broker while it reads the
  slot's checkpoint): the same exit 3 and "is gone", not a bare SQLSTATE.

What the operator does then is the runbook of outbox-relay(7): test_ops_runbook.py.
"""

from harness import EXIT_ENV, EXIT_OK, run_relay, wait_until
from harness.faults import Load, collector, heal_broker, say, spare_broker, start_relay


def test_slot_dropped_while_relay_down(case):
    relay = start_relay(case)
    assert relay.stop() == EXIT_OK, relay.log
    assert case.pg.drop_slot(case.slot)
    rc, out = run_relay(case.relay_args(create_slot=False), timeout=60)
    assert rc == EXIT_ENV, "exit %s without the slot and without --create-slot:\n%s" % (rc, out)
    assert case.slot in out and "does not exist" in out and "--create-slot" in out, out
    assert case.slot_info() is None, "the relay created a slot without --create-slot"


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
