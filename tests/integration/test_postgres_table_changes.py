# SPDX-License-Identifier: Apache-2.0
"""The outbox table changes identity or durability under a running relay
(issue 15): ALTER TABLE ... SET UNLOGGED (its rows stop reaching the WAL),
DROP or RENAME (rows go elsewhere), a table swapped in under the name. The
relay's side connection checks each configured name before it confirms and
at least every status interval, and stops (exit 3) without confirming past
what it verified. preflight and check refuse an unlogged table from the
start; sql/outbox.sql's event trigger refuses the DDL at the source.

The event trigger is dropped where a test needs the DDL to happen.
"""

import re

import psycopg2
import pytest
from harness import EXIT_ENV, EXIT_OK, has_ids, insert_rows, run_relay, simple_rows, wait_confirmed
from harness.outbox import in_transaction


def without_guard(case):
    case.query("DROP EVENT TRIGGER IF EXISTS outbox_guard")


def running(case):
    reader = case.reader()
    relay = case.relay()
    conn = case.connect(autocommit=False)
    c = insert_rows(conn, simple_rows("before", 2))
    assert reader.read_until(has_ids(c.work_ids), 30), relay.log
    wait_confirmed(case, c.lsn_before)
    return relay, conn


@pytest.mark.parametrize("ddl,words", [
    ("ALTER TABLE outbox SET UNLOGGED", ["is UNLOGGED now", "not written to the WAL", "SET LOGGED"]),
    ("ALTER TABLE outbox RENAME TO outbox_old", ["no longer exists", "renamed"]),
    ("DROP TABLE outbox", ["no longer exists"]),
    ("ALTER TABLE outbox RENAME TO outbox_old; CREATE TABLE outbox (LIKE outbox_old INCLUDING ALL)",
     ["is another relation now", "OID"]),
], ids=["unlogged", "renamed", "dropped", "swapped"])
def test_table_changes_under_a_running_relay(case, ddl, words):
    without_guard(case)
    relay, conn = running(case)
    # The bound: the WAL insert position inside the DDL's transaction, just
    # before its COMMIT. pg_current_wal_lsn() before the DDL is too early: an
    # idle relay rightly confirms keepalives for other databases' commits
    # written while the DDL runs, all before the DDL's commit record.
    before_ddl = in_transaction(conn, [(ddl, None)])[0].lsn_pre_commit
    assert relay.wait(30) == EXIT_ENV, relay.log
    line = [l for l in relay.log.splitlines() if "error:" in l]
    assert line, relay.log
    for w in words:
        assert w in line[-1], "%r not in: %s" % (w, line[-1])
    assert "nothing after LSN" in line[-1], line[-1]
    # stopped without confirming anything it had not verified before the change
    assert case.confirmed() <= before_ddl, "confirmed past the change"
    conn.close()


def test_rows_inserted_while_unlogged_are_never_confirmed_past(case):
    """The UNLOGGED case in full: rows committed into the unlogged table never
    reach the WAL; the relay stops before confirming any LSN after the
    change, so the slot still points before the rows' time."""
    without_guard(case)
    relay, conn = running(case)
    cur = conn.cursor()
    cur.execute("ALTER TABLE outbox SET UNLOGGED")
    conn.commit()
    after_alter = case.pg.current_wal_lsn()
    lost = insert_rows(conn, simple_rows("unlogged", 3))
    assert relay.wait(30) == EXIT_ENV, relay.log
    assert case.confirmed() < after_alter, "confirmed past the moment the table went unlogged"
    # a restart refuses the unlogged table at preflight, naming the fix
    rc, out = run_relay(case.relay_args(create_slot=False), timeout=60)
    assert rc == EXIT_ENV and "UNLOGGED" in out and "SET LOGGED" in out, out
    conn.close()
    assert lost.work_ids


def test_check_fails_on_an_unlogged_table(case):
    without_guard(case)
    case.query("ALTER TABLE outbox SET UNLOGGED")
    rc, out = run_relay(["check"] + case.relay_args(create_slot=False), timeout=60)
    assert rc == EXIT_ENV, out
    assert re.search(r'^FAIL  table "public"\."outbox": .*UNLOGGED.*SET LOGGED', out, re.M), out


@pytest.mark.parametrize("ddl", ["ALTER TABLE outbox SET UNLOGGED", "ALTER TABLE outbox RENAME TO x",
                                 "CREATE SCHEMA other; ALTER TABLE outbox SET SCHEMA other"],
                         ids=["unlogged", "renamed", "schema"])
def test_event_trigger_refuses_the_ddl(case, ddl):
    with pytest.raises(psycopg2.Error) as e:
        case.query(ddl)
    assert e.value.pgcode == "WK003", (e.value.pgcode, e.value.pgerror)
    assert case.scalar("SELECT relpersistence FROM pg_class WHERE oid = 'outbox'::regclass") == "p"
    # harmless DDL passes
    case.query("ALTER TABLE outbox ADD COLUMN note text")
    case.query("ALTER TABLE outbox REPLICA IDENTITY FULL")
