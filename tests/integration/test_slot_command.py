# SPDX-License-Identifier: Apache-2.0
"""`outbox-relay slot create | drop | status`: a create/drop round trip,
drop refused without --yes and while the slot is active, and the figures of
`slot status` against pg_replication_slots and pg_current_wal_lsn().
"""

import json
import re
import threading
import time

import harness
from harness import (EXIT_ENV, EXIT_OK, EXIT_USAGE, insert_rows, parse_lsn, run_relay, simple_rows,
                     wait_until)

LSN = r"([0-9A-F]+/[0-9A-F]+)"


def slot_cmd(case, action, *extra, timeout=60):
    return run_relay(["slot", action] + case.relay_args(*extra, create_slot=False), timeout=timeout)


def status_json(case):
    rc, out = slot_cmd(case, "status", "--format=json")
    assert rc == EXIT_OK, out
    return json.loads(out)


def test_create_drop_round_trip(case):
    rc, out = slot_cmd(case, "status")
    assert rc == EXIT_ENV and "does not exist" in out and "slot create" in out, out

    rc, out = slot_cmd(case, "create")
    assert rc == EXIT_OK, out
    m = re.search(r'created replication slot "%s" with plugin wal2json in database "%s" at '
                  r"consistent point %s" % (case.slot, case.dbname, LSN), out)
    assert m, out
    info = case.slot_info()
    assert info and info["plugin"] == "wal2json" and info["database"] == case.dbname, info
    assert parse_lsn(m.group(1)) == info["confirmed_flush_lsn"], (out, info)

    rc, out = slot_cmd(case, "create")
    assert rc == EXIT_ENV and "already exists" in out, out

    rc, out = slot_cmd(case, "drop")
    assert rc == EXIT_USAGE, out
    assert "would drop" in out and "--yes" in out and case.slot in out, out
    assert case.slot_info() is not None, "drop without --yes dropped the slot"

    rc, out = slot_cmd(case, "drop", "--yes")
    assert rc == EXIT_OK and 'dropped replication slot "%s"' % case.slot in out, out
    assert case.slot_info() is None, "the slot is still there"

    rc, out = slot_cmd(case, "drop", "--yes")
    assert rc == EXIT_ENV and "does not exist" in out, out


def test_create_warns_about_rows_already_in_the_outbox(case):
    conn = case.connect(autocommit=False)
    insert_rows(conn, simple_rows("old", 3))
    conn.close()
    rc, out = slot_cmd(case, "create")
    assert rc == EXIT_OK, out
    assert "already holds 3 rows" in out and "will not be published" in out, out


def test_drop_refused_while_active(case):
    relay = case.relay()
    pid = case.slot_info()["active_pid"]
    rc, out = slot_cmd(case, "drop", "--yes")
    assert rc == EXIT_ENV, out
    assert "active" in out and "PID %d" % pid in out, out
    assert case.slot_info() is not None, "an active slot was dropped"
    st = status_json(case)
    assert st["active"] is True and st["active_pid"] == pid, st
    relay.stop()


def test_status_figures_match_pg_replication_slots(case):
    rc, out = slot_cmd(case, "create")
    assert rc == EXIT_OK, out
    # write WAL the slot has to retain: nobody consumes it
    conn = case.connect(autocommit=False)
    for i in range(5):
        insert_rows(conn, simple_rows("wal%d" % i, 200))
    conn.close()

    before = case.pg.current_wal_lsn()
    st = status_json(case)
    after = case.pg.current_wal_lsn()
    row = case.query(
        "SELECT plugin, slot_type, database, active, active_pid, confirmed_flush_lsn::text, "
        "restart_lsn::text, wal_status, safe_wal_size FROM pg_replication_slots "
        "WHERE slot_name = %s", (case.slot,))[0]
    plugin, slot_type, database, active, active_pid, confirmed, restart, wal_status, safe = row
    confirmed, restart = parse_lsn(confirmed), parse_lsn(restart)

    assert st["slot"] == case.slot
    assert (st["plugin"], st["slot_type"], st["database"]) == (plugin, slot_type, database)
    assert st["active"] is active is False and st["active_pid"] is None is active_pid, st
    # an inactive slot does not move: its LSNs are exactly the catalog's
    assert parse_lsn(st["confirmed_flush_lsn"]) == confirmed, (st, confirmed)
    assert parse_lsn(st["restart_lsn"]) == restart, (st, restart)
    current = parse_lsn(st["current_wal_lsn"])
    # the server may write a little WAL of its own meanwhile (running-xacts records)
    assert before <= current <= after, (before, current, after)
    assert st["retained_bytes"] == current - restart, st
    assert st["lag_bytes"] == current - confirmed, st
    assert before - restart <= st["retained_bytes"] <= after - restart, (st, before, after)
    assert st["retained_bytes"] > 100000, "1000 rows written, yet %d bytes retained" % st["retained_bytes"]
    assert st["wal_status"] == wal_status, st
    # the harness leaves max_slot_wal_keep_size at -1: unlimited
    assert safe is None and st["safe_wal_size"] is None, (st, safe)

    # the text format says the same
    rc, out = slot_cmd(case, "status")
    assert rc == EXIT_OK, out
    fields = dict(re.match(r"^([a-z_]+):\s+(\S+)", line).groups() for line in out.splitlines())
    assert fields["slot"] == case.slot and fields["plugin"] == "wal2json", out
    assert fields["active"] == "no" and fields["active_pid"] == "-", out
    assert fields["confirmed_flush_lsn"] == st["confirmed_flush_lsn"], out
    assert fields["restart_lsn"] == st["restart_lsn"], out
    assert int(fields["retained_bytes"]) >= st["retained_bytes"], out
    assert fields["wal_status"] == wal_status and fields["safe_wal_size"] == "unlimited", out


def test_status_of_an_invalidated_slot(case):
    """A slot invalidated by max_slot_wal_keep_size has no restart_lsn: status
    shows "-" (text) and null (JSON), not 0/0 and -1 bytes, and wal_status lost;
    the runbook's first step, slot create, refuses while it exists."""
    import harness
    with harness.Environment(kafka=False, pg_settings={"max_slot_wal_keep_size": "'1MB'"}) as other:
        other.pg.psql(file=harness.SCHEMA_SQL)
        dsn = other.pg.dsn
        args = ["-d", dsn, "-S", "lost_one", "-b", case.kafka.bootstrap]
        rc, out = run_relay(["slot", "create"] + args, timeout=60)
        assert rc == EXIT_OK, out

        def lost():
            # write and switch WAL segments past the 1 MB the slot may keep, then checkpoint
            other.pg.query("CREATE TABLE IF NOT EXISTS filler (b text)")
            other.pg.query("INSERT INTO filler SELECT repeat('x', 1000) FROM generate_series(1, 3000)")
            other.pg.query("SELECT pg_switch_wal()")
            other.pg.query("CHECKPOINT")
            return other.pg.scalar("SELECT wal_status FROM pg_replication_slots "
                                   "WHERE slot_name = 'lost_one'") == "lost"
        harness.wait_until(lost, 60, interval=0.2, what="the slot to be invalidated")

        rc, out = run_relay(["slot", "status", "--format=json"] + args, timeout=60)
        assert rc == EXIT_OK, out
        st = json.loads(out)
        assert st["wal_status"] == "lost", st
        assert st["restart_lsn"] is None and st["retained_bytes"] is None, st
        rc, out = run_relay(["slot", "status"] + args, timeout=60)
        assert rc == EXIT_OK, out
        assert re.search(r"^restart_lsn:\s+- ", out, re.M), out
        assert re.search(r"^retained_bytes:\s+-$", out, re.M), out
        rc, out = run_relay(["slot", "create"] + args, timeout=60)
        assert rc == EXIT_ENV and "already exists" in out, out
        assert "invalidated" in out and "slot drop --yes" in out, out
        rc, out = run_relay(["slot", "drop"] + args, timeout=60)
        assert rc == EXIT_USAGE and "restart_lsn - (invalidated)" in out, out
        rc, out = run_relay(["slot", "drop", "--yes"] + args, timeout=60)
        assert rc == EXIT_OK, out


def test_create_names_a_prepared_transaction_and_leaves_no_slot(case):
    """A forgotten PREPARE TRANSACTION holds a slot's creation up until it is
    committed or rolled back. `slot create` gives up after
    --slot-create-timeout, names the prepared transaction (gid, owner,
    database) and leaves no slot; once it is rolled back the slot is made."""
    with harness.Environment(kafka=False, pg_settings={"max_prepared_transactions": "5"}) as other:
        other.pg.create_database("shop")
        other.pg.psql(file=harness.SCHEMA_SQL, dbname="shop")
        conn = other.pg.connect("shop", autocommit=False)
        cur = conn.cursor()
        cur.execute("INSERT INTO outbox (work_id, kind, payload) VALUES ('p-1', 'k', '{}')")
        cur.execute("PREPARE TRANSACTION 'forgotten-order-7'")
        conn.close()
        args = ["slot", "create", "-d", other.pg.conninfo("shop"), "-S", "slot_prepared",
                "-b", case.kafka.bootstrap, "--slot-create-timeout=2"]
        started = time.monotonic()
        rc, out = run_relay(args, timeout=60)
        took = time.monotonic() - started
        assert rc == EXIT_ENV, out
        for w in ("no consistent point within 2 s", "'forgotten-order-7'", 'owner "postgres"',
                  'database "shop"', "ROLLBACK PREPARED", "--slot-create-timeout"):
            assert w in out, "%r not in: %s" % (w, out)
        assert took < 30, took
        assert other.pg.slot("slot_prepared") is None, "a half-made slot was left behind"
        other.pg.query("ROLLBACK PREPARED 'forgotten-order-7'", dbname="shop")
        rc, out = run_relay(args, timeout=60)
        assert rc == EXIT_OK, out
        assert other.pg.slot("slot_prepared")["plugin"] == "wal2json"


def test_a_killed_create_leaves_no_slot(case):
    """The server bounds the creation itself (statement_timeout for that
    statement): `slot create` killed while it waits leaves no slot once the
    timeout has passed, so the next `slot create` does not find a half-made
    one."""
    conn = case.connect(autocommit=False)
    try:
        conn.cursor().execute("SELECT txid_current()")     # holds an XID: creation waits
        relay = case.env.relay(["slot", "create"] + case.relay_args(
            "--slot-create-timeout=3", create_slot=False), name=case.name + "-create")
        case.relays.append(relay)
        wait_until(lambda: case.slot_info() is not None, 20, what="the slot to be in creation")
        relay.kill()
        wait_until(lambda: case.slot_info() is None, 20, what="the server to drop the half-made slot")
    finally:
        conn.rollback()
        conn.close()
    rc, out = slot_cmd(case, "create")
    assert rc == EXIT_OK, out


def lagging_slot(case):
    """A second logical slot nobody consumes: Debezium's, held back."""
    old = case.slot + "_dbz"
    case.query("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (old,))
    return old


def test_create_after_a_lagging_slot_waits_for_it(case):
    """Cutting over from Debezium: rows committed before the new slot's
    consistent point are Debezium's to publish, and its slot is confirmed
    only up to where it got. `slot create --after-slot` waits until that
    slot has confirmed past the consistent point, and says when the old
    consumer may stop; `check --after-slot` FAILs until then. A slot that
    never catches up ends the wait with exit 3, naming both LSNs and the fix,
    the new slot kept."""
    from check_helpers import check_args, run_check

    old = lagging_slot(case)
    try:
        conn = case.connect(autocommit=False)
        insert_rows(conn, simple_rows("gap", 3))   # committed after the old slot's position
        behind = case.pg.slot(old)["confirmed_flush_lsn"]
        rc, out = slot_cmd(case, "create", "--after-slot=" + old, "--after-slot-timeout=1")
        assert rc == EXIT_ENV, out
        mine = case.slot_info()
        assert mine is not None, "the new slot must stay"
        m = re.search(r'slot "%s" \(plugin test_decoding, held by no process: its consumer is not '
                      r'running, start it again\) is confirmed up to LSN %s, (\d+) bytes before the new '
                      r'slot "%s"\'s consistent point %s' % (old, LSN, case.slot, LSN), out)
        assert m, out
        assert parse_lsn(m.group(1)) == behind, (out, behind)
        assert parse_lsn(m.group(3)) == mine["confirmed_flush_lsn"], (out, mine)
        assert "heartbeat.interval.ms" in out and "check --after-slot=%s" % old in out, out
        assert "the old consumer may stop" not in out.lower(), out

        item = 'cut-over from slot "%s"' % old
        rc, out, items = run_check(check_args(case, "--after-slot=" + old))
        assert rc == EXIT_ENV and items[item][0] == "FAIL", out
        assert "published by neither" in items[item][1], out

        # again, and this time the old consumer catches up while the command waits
        assert case.pg.drop_slot(case.slot)
        result = {}
        waiter = threading.Thread(target=lambda: result.update(
            zip(("rc", "out"), slot_cmd(case, "create", "--after-slot=" + old,
                                        "--after-slot-timeout=60", timeout=90))))
        waiter.start()
        wait_until(lambda: case.slot_info(), 30, what="the new slot")
        assert waiter.is_alive(), result
        case.query("SELECT pg_replication_slot_advance(%s, pg_current_wal_lsn())", (old,))
        waiter.join(90)
        assert result["rc"] == EXIT_OK, result["out"]
        assert re.search(r'slot "%s" is confirmed up to %s, past the consistent point %s of slot "%s"'
                         % (old, LSN, LSN, case.slot), result["out"]), result["out"]
        assert "Stop the old consumer now" in result["out"], result["out"]
        rc, out, items = run_check(check_args(case, "--after-slot=" + old))
        assert items[item][0] == "PASS" and "may stop" in items[item][1], out
    finally:
        case.pg.drop_slot(old)


def test_create_warns_of_another_consumer_that_deletes_its_rows(case):
    """Debezium's insert-then-delete leaves the outbox empty, so the count of
    rows already there cannot warn of anything: `slot create` without
    --after-slot names the database's other logical slots instead, and says
    the empty table means nothing; so does the relay's own --create-slot."""
    old = lagging_slot(case)
    try:
        case.query("INSERT INTO outbox (work_id, kind, payload) VALUES ('x', 'k', '{}'); "
                   "DELETE FROM outbox")
        wait_until(lambda: case.scalar("SELECT n_tup_ins FROM pg_stat_user_tables WHERE relname = "
                                       "'outbox'") > 0, 30, what="the insert in the statistics")
        rc, out = slot_cmd(case, "create")
        assert rc == EXIT_OK, out
        assert "already holds" not in out, out
        assert 'has other logical slots ("%s")' % old in out, out
        assert "it is empty, yet rows were inserted into it" in out and "--after-slot" in out, out
        # the relay's own --create-slot says the same, on a slot of another name: made
        # anew under this one's, it would meet this one's checkpoint and stop (exit 3)
        assert case.pg.drop_slot(case.slot)
        own = case.slot + "_own"
        case.extra_slots.append(own)
        relay = case.relay(slot=own)
        assert 'has other logical slots ("%s")' % old in relay.log, relay.log
        assert "it is empty, yet rows were inserted into it" in relay.log, relay.log
        assert relay.stop() == EXIT_OK, relay.log
    finally:
        case.pg.drop_slot(old)
