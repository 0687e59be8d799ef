# SPDX-License-Identifier: Apache-2.0
"""Command line and preflight checks: cheap runs of the relay that must end on
their own with the documented exit code (0 help, 2 usage, 3 environment)."""

import os

import harness
import pytest
from harness import EXIT_ENV, EXIT_OK, EXIT_USAGE, run_relay


def test_help_exits_0():
    rc, out = run_relay(["--help"], timeout=10)
    assert rc == EXIT_OK, out
    assert "--create-slot" in out, "help does not list --create-slot:\n" + out


@pytest.mark.parametrize("argv", [
    ["--no-such-option"],
    ["-d", "host=127.0.0.1", "--no-such-option"],
    ["-d", "host=127.0.0.1", "-s", "not-a-number"],
    ["-d", "host=127.0.0.1", "extra-positional-argument"],
], ids=["unknown-option", "unknown-option-after-d", "bad-status-interval", "positional"])
def test_usage_errors_exit_2(argv):
    rc, out = run_relay(argv, timeout=10)
    assert rc == EXIT_USAGE, "argv %r: exit %s\n%s" % (argv, rc, out)


def test_conninfo_from_pg_environment(case):
    """Without -d, libpq's PG* variables say where the database is (the
    relay's help promises it); proven by reaching the slot check."""
    args = case.relay_args(create_slot=False)
    del args[0:2]
    env = dict(os.environ, PGHOST=case.pg.host, PGPORT=str(case.pg.port), PGUSER=case.pg.user,
               PGDATABASE=case.dbname)
    rc, out = run_relay(args, timeout=30, env=env)
    assert rc == EXIT_ENV, out
    assert "--create-slot" in out, out


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
    case.query("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (case.slot,))
    rc, out = run_relay(case.relay_args(), timeout=30)
    assert rc == EXIT_ENV, out
    assert case.slot_info()["plugin"] == "pgoutput", "relay replaced the operator's slot"


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
