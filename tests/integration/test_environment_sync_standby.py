# SPDX-License-Identifier: Apache-2.0
"""Synchronous replication that names the relay (issue 10 §4): with
synchronous_standby_names naming the relay's application_name (or '*'), its
walsender becomes a synchronous standby at the next reload, and every commit
in the cluster then waits for the relay's flush position, that is for Kafka.
`check` fails on it naming the fix; the relay logs an error at start, and the
running relay logs one when pg_stat_replication shows its walsender as sync,
quorum or potential, and says when it no longer is.

Each test gives its relay an application_name of its own and names only that
one, so no other connection of the shared server becomes a synchronous
standby; the setting is reset however the test ends.
"""

import contextlib
import os
import threading

from check_helpers import run_check
from harness import EXIT_ENV, EXIT_OK, has_ids, procs, insert_rows, simple_rows, wait_confirmed


@contextlib.contextmanager
def sync_names(pg, value):
    """synchronous_standby_names = value, cluster-wide, for the block."""
    pg.query("ALTER SYSTEM SET synchronous_standby_names = %s", (value,))
    pg.query("SELECT pg_reload_conf()")
    try:
        yield
    finally:
        pg.query("ALTER SYSTEM RESET synchronous_standby_names")
        pg.query("SELECT pg_reload_conf()")


def with_app(case, app, args):
    """The relay's arguments with -d naming application_name=app."""
    args = list(args)
    args[args.index("-d") + 1] = case.pg.conninfo(case.dbname, application_name=app)
    return args


def wait_log(relay, text, timeout):
    return procs.wait_until(lambda: text in relay.log, timeout, what="%r in the relay's log" % text)


def sync_state(case, app):
    rows = case.pg.query("SELECT sync_state FROM pg_stat_replication WHERE application_name = %s",
                         (app,))
    return rows[0][0] if rows else None


def test_check_fails_when_the_setting_names_the_relay(case):
    app = "relay_sync_check"
    args = with_app(case, app, case.relay_args(create_slot=False))
    with sync_names(case.pg, 'FIRST 1 (standby1, "%s")' % app.upper()):
        rc, out, items = run_check(args)
        assert rc == EXIT_ENV, out
        status, text = items["synchronous_standby_names"]
        assert status == "FAIL", out
        assert "names this relay" in text and app in text, text
        assert "ALTER SYSTEM SET synchronous_standby_names" in text, text
        # a relay of another name is not named: the item passes
        rc, out, items = run_check(with_app(case, "relay_sync_other", args))
        assert items["synchronous_standby_names"][0] == "PASS", out
    with sync_names(case.pg, "*"):
        rc, out, items = run_check(args)
        assert items["synchronous_standby_names"][0] == "FAIL", out
        assert "'*' names every standby" in items["synchronous_standby_names"][1], out


def test_running_relay_says_when_it_becomes_a_synchronous_standby(case):
    app = "relay_sync_run"
    reader = case.reader()
    relay = case.relay(start=False)
    relay.args[:] = with_app(case, app, relay.args)
    relay.start()
    relay.wait_ready(case.pg, case.slot)
    assert "names this relay" not in relay.log, relay.log
    conn = case.connect(autocommit=False)
    with sync_names(case.pg, '"%s"' % app):
        assert wait_log(relay, "is a synchronous standby", 30), relay.log
        assert sync_state(case, app) in ("sync", "potential", "quorum")
        # a commit now waits for the relay, which publishes and confirms it: it returns
        c = insert_rows(conn, simple_rows("sync", 3))
        assert reader.read_until(has_ids(c.work_ids), 30), relay.log
        wait_confirmed(case, c.lsn_before)
        line = [l for l in relay.log.splitlines() if "is a synchronous standby" in l][0]
        assert "error" in line and "synchronous_standby_names" in line, line
    assert wait_log(relay, "no longer a synchronous standby", 30), relay.log
    assert relay.alive
    conn.close()


def test_relay_started_under_the_setting_logs_an_error(case):
    app = "relay_sync_start"
    with sync_names(case.pg, "ANY 1 (%s)" % app):
        relay = case.relay(start=False)
        relay.args[:] = with_app(case, app, relay.args)
        relay.start()
        relay.wait_ready(case.pg, case.slot)
        assert wait_log(relay, "names this relay", 10), relay.log
        assert relay.alive
    relay.stop()
    assert relay.returncode == EXIT_OK, relay.log


from test_postgres_table_changes import release_held  # noqa: E402

ROLE_SQL = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                        "sql", "role.sql")


def test_least_privilege_relay_named_a_synchronous_standby_holds_no_commit_for_good(case):
    """sql/role.sql's login cannot see its own walsender's sync_state
    (PostgreSQL shows it to superusers and pg_read_all_stats only). Named by
    synchronous_standby_names while it ran, such a relay took no way out of
    the wait (found by a breaker helper): a commit waited for the relay's
    confirmation, the relay for the commit to be visible to its catalog
    check, and every commit of the cluster with them. The round now reads
    the setting and the walsender's application_name where sync_state is
    hidden, logs the error, and confirms as for a visible sync_state."""
    app = "relay_sync_role"
    with case.own_server() as own:
        committer = None
        try:
            case.setup_db()
            role = "relay_" + case.name
            case.pg.psql(file=ROLE_SQL, dbname=case.dbname, variables={"relay_role": role})
            reader = case.reader()
            relay = case.relay(start=False)
            relay.args[:] = with_app(case, app, relay.args)
            d = relay.args.index("-d") + 1
            relay.args[d] = relay.args[d].replace("user=%s" % case.pg.user, "user=%s" % role)
            assert "user=%s" % role in relay.args[d]
            relay.start()
            relay.wait_ready(case.pg, case.slot)
            own.query("ALTER SYSTEM SET synchronous_standby_names = '\"%s\"'" % app)
            own.query("SELECT pg_reload_conf()")
            procs.wait_until(lambda: sync_state(case, app) == "sync", 30, what="the relay's walsender sync")
            conn = case.connect(autocommit=False)
            box = {}
            committer = threading.Thread(target=lambda: box.update(c=insert_rows(conn, simple_rows("sync", 1))))
            committer.start()
            committer.join(60)
            assert not committer.is_alive(), "the commit waits for good for the relay: " + relay.log
            assert reader.read_until(has_ids(box["c"].work_ids), 30), relay.log
            line = [l for l in relay.log.splitlines() if "is named by synchronous_standby_names" in l]
            assert line and "error" in line[0] and app in line[0] and "pg_read_all_stats" in line[0], relay.log
            assert relay.alive, relay.log
            conn.close()
        finally:
            release_held(case, own, committer)
