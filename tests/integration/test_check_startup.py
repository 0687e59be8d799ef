# SPDX-License-Identifier: Apache-2.0
"""What the relay refuses at start (its preflight; `outbox-relay check`
reports the same items: test_check_command.py): runs that must end on
their own with the documented exit status and one error line naming what
is wrong: 3 for a database, slot or table not usable as configured, 1 for
a database or brokers that cannot be reached (worth retrying). And the
start that must work: a role with REPLICATION and SELECT, not superuser.
"""

import time

import harness
import pytest
from check_helpers import Role
from harness import EXIT_ENV, EXIT_RUNTIME, error_lines, free_port, run_relay, the_error


def test_missing_slot_without_create_slot_exits_3(case):
    rc, out = run_relay(case.relay_args(create_slot=False), timeout=30)
    assert rc == EXIT_ENV, out
    assert "--create-slot" in out, "message should point at --create-slot:\n" + out
    assert case.slot_info() is None, "relay created the slot without --create-slot"


def test_missing_table_exits_3(case):
    rc, out = run_relay(case.relay_args("-t", "public.no_such_outbox"), timeout=30)
    assert rc == EXIT_ENV, out
    assert "no_such_outbox" in out, "message should name the missing table:\n" + out


@pytest.mark.parametrize("option", ["--id-column", "--key-column", "--payload-column"])
def test_missing_column_exits_3(case, option):
    rc, out = run_relay(case.relay_args(option, "no_such_column"), timeout=30)
    assert rc == EXIT_ENV, out
    assert "no_such_column" in out, "message should name the missing column:\n" + out


def test_slot_with_other_plugin_exits_3(case):
    case.query("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (case.slot,))
    rc, out = run_relay(case.relay_args(), timeout=30)
    assert rc == EXIT_ENV, out
    assert case.slot_info()["plugin"] == "test_decoding", "relay replaced the operator's slot"


def test_slot_of_other_database_exits_3(case, pg):
    # same slot name, but created in database 'postgres'
    pg.query("SELECT pg_create_logical_replication_slot(%s, 'wal2json')", (case.slot,))
    rc, out = run_relay(case.relay_args(), timeout=30)
    assert rc == EXIT_ENV, out


def test_non_utf8_database_exits_3(case, pg):
    db = case.dbname + "_ascii"
    pg.query("CREATE DATABASE %s ENCODING 'SQL_ASCII' TEMPLATE template0" % db)
    try:
        pg.psql(file=harness.SCHEMA_SQL, dbname=db)
        args = case.relay_args()
        args[1] = pg.conninfo(db)
        rc, out = run_relay(args, timeout=30)
        assert rc == EXIT_ENV, out
    finally:
        pg.drop_slot(case.slot)
        pg.drop_database(db)


def test_wal_level_replica_exits_3(case):
    # a second, short-lived server without logical decoding
    with harness.Environment(kafka=False, pg_settings={"wal_level": "replica"}) as other:
        other.pg.psql(file=harness.SCHEMA_SQL)
        args = case.relay_args()
        args[1] = other.pg.dsn
        rc, out = run_relay(args, timeout=30)
        assert rc == EXIT_ENV, out
        assert "wal_level" in out, "message should name wal_level:\n" + out


def test_relay_starts_with_replication_role_without_superuser(case):
    """Regression: PostgreSQL hides output_plugin_libraries (15.19 and later) from roles without
    superuser or pg_read_all_settings, and the relay used to stop at startup
    with "cannot read server settings" for exactly the role the README
    recommends (LOGIN REPLICATION, SELECT on the outbox)."""
    role = Role(case, "relay", replication=True, select=True)
    try:
        args = case.relay_args()
        args[1] = role.dsn()
        r = case.env.relay(args, name="%s-relay-role" % case.name)
        case.relays.append(r)
        r.wait_ready(case.pg, case.slot)
        r.stop()
    finally:
        role.drop()


def test_unreachable_brokers_exit_1(case):
    port = free_port()
    brokers = "127.0.0.1:%d" % port
    started = time.monotonic()
    rc, out = run_relay(case.relay_args(brokers=brokers), timeout=40)
    took = time.monotonic() - started
    assert rc == EXIT_RUNTIME, "exit %s\n%s" % (rc, out)
    assert took < 15, "took %.1f s to give up on the brokers" % took
    lines = error_lines(out)
    assert lines and brokers in lines[-1] and "--brokers" in lines[-1], out
    # one clear line, not librdkafka's connection attempts as errors too
    assert the_error(out) == lines[-1]


def test_unreachable_database_exit_1(kafka):
    """The broker answers (the relay checks Kafka before the database, so
    that --create-slot never makes a slot it cannot checkpoint); the database
    does not: exit 1 naming its address."""
    port = free_port()
    started = time.monotonic()
    rc, out = run_relay(["-d", "host=127.0.0.1 port=%d dbname=shop" % port, "-b", kafka.bootstrap],
                        timeout=40)
    assert rc == EXIT_RUNTIME, "exit %s\n%s" % (rc, out)
    assert time.monotonic() - started < 15
    line = the_error(out)
    assert str(port) in line, line


def test_non_utf8_database_names_utf8(case, pg):
    db = case.dbname + "_ascii"
    pg.query("CREATE DATABASE %s ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' "
             "TEMPLATE template0" % db)
    try:
        pg.psql("CREATE TABLE outbox (work_id text PRIMARY KEY, kind text NOT NULL, "
                "payload jsonb NOT NULL)", dbname=db)
        args = case.relay_args()
        args[1] = pg.conninfo(db)
        rc, out = run_relay(args, timeout=30)
        assert rc == EXIT_ENV, "exit %s\n%s" % (rc, out)
        line = the_error(out)
        assert "UTF8" in line and "SQL_ASCII" in line and db in line, line
        assert pg.slot(case.slot) is None, "a slot was created for a database the relay refuses"
    finally:
        pg.drop_slot(case.slot)
        pg.drop_database(db)


@pytest.mark.parametrize("ddl,args,words", [
    ("CREATE TABLE public.no_payload (work_id text PRIMARY KEY, kind text NOT NULL)",
     ["-t", "public.no_payload"], ['"payload"', "no_payload", "--payload-column"]),
    ("CREATE TABLE public.no_id (id text PRIMARY KEY, kind text, payload jsonb)",
     ["-t", "public.no_id"], ['"work_id"', "no_id"]),
    ("CREATE TABLE public.no_entity (LIKE public.outbox INCLUDING ALL); "
     "ALTER TABLE public.no_entity DROP COLUMN entity_id",
     ["-t", "public.outbox", "-t", "public.no_entity", "--key-column", "entity_id"],
     ['"entity_id"', "no_entity", "--key-column"]),
    (None, ["--topic", "outbox.${region}"], ['"region"', "--topic"]),
], ids=["no-payload-column", "no-work-id-column", "second-table-lacks-key", "topic-column"])
def test_table_lacks_a_column_exit_3(case, ddl, args, words):
    if ddl:
        case.query(ddl)
    rc, out = run_relay(case.relay_args(*args), timeout=30)
    assert rc == EXIT_ENV, "exit %s\n%s" % (rc, out)
    line = the_error(out)
    for w in words:
        assert w in line, "%r not in: %s" % (w, line)
    assert case.slot_info() is None, "the slot was created although the relay refused to start"
    assert len(error_lines(out)) == 1
