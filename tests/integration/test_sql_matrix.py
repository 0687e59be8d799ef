# SPDX-License-Identifier: Apache-2.0
"""The SQL matrix: every SQL statement the relay and its commands send runs on
each supported PostgreSQL major, 14 to 18, and a server older than 14 is
refused.

wal2json is packaged here only for 15, so test_decoding stands in where a
slot is needed; the relay's stream itself (relay + wal2json + Kafka) is
tested end to end on 15 by the rest of the suite. Per major, one server for
the whole module (a module-scoped fixture, so it starts once): 15 from the
suite's own binaries (the installed minor, or the other side of
output_plugin_libraries that OUTBOX_RELAY_PG_BINDIR names), the others from
Maven Central's plain server bundles (tests/harness/pgmajor.py; fetched once
into /var/cache/outbox-relay, and a bundle that cannot be had makes the
fixture raise, so its tests error: never a skip).

On each major:
  - tests/sqlmatrix/sql_matrix.c calls every function of src/preflight.h
    that sends SQL, plus IDENTIFY_SYSTEM, the slot query over the
    replication connection and START_REPLICATION (pgstream); this file
    fails when preflight.h declares a function that neither has a probe
    there nor is listed below as sending no SQL;
  - `outbox-relay check`: every item as expected, the wal2json item failing
    only as "not installed" (or "not allowed" once the list lacks it, which
    runs check's LOAD), no SQL error anywhere else;
  - `slot status|drop|create` on test_decoding slots, idle and active;
  - the daemon's startup up to the slot's plugin;
  - sql/server.sql, outbox.sql (with outbox_enqueue()), role.sql,
    inbox.sql and each query of monitoring.sql, run with psql 15 as the
    README says (a new file in sql/ fails test_sql_kit until it runs there).

And with a hot standby (a copy of the cleanly stopped primary): on 16+ a
slot on the standby streams the primary's commits and survives the
standby's promotion, stream included; on 17+ a failover slot's synchronized
copy is judged not usable before the promotion and usable after; on 15 a
standby cannot decode, and `check` and the relay say so.
"""

import glob
import json
import os
import re
import select
import subprocess
import threading
import time

import psycopg2
import psycopg2.extras
import pytest
from check_helpers import run_check
from conftest import Case
from harness import (EXIT_ENV, EXIT_OK, EXIT_USAGE, arrive_and_confirm, by_id, format_lsn,
                     insert_rows, parse_lsn, pgmajor, procs, relay, run_relay, simple_rows,
                     wait_confirmed, wait_until)
from harness.faults import Load, collector, mark, sigkill, start_relay, verify
from harness.outbox import SMALL_WORK_MEM, in_transaction, large_transaction
from harness.pg import PostgresServer

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SQL_DIR = os.path.join(TOP, "sql")
PREFLIGHT_H = os.path.join(TOP, "src", "preflight.h")
PUBLICATION_H = os.path.join(TOP, "src", "publication.h")
DB = "shop"

# Functions of preflight.h that send no SQL of their own: they judge or word
# what the others read. A new function goes here or gets a probe in
# sql_matrix.c's probes[] (named after it).
NO_SQL = {
    "preflight_check_version", "preflight_check_wal_level", "preflight_check_encoding",
    "preflight_check_plugin_libraries", "preflight_plugin_listed", "preflight_plugin_fix",
    "preflight_slot_explain", "preflight_check_slot", "preflight_watch_array",
    "preflight_sync_standby_named", "preflight_check_sync_standby", "preflight_result_release",
    "preflight_plugin_allowed", "preflight_relay_plugin", "preflight_choose_plugin",
    "publication_release", "publication_create_sql", "publication_judge",
}

ORDER = '{"order_id": 103, "total": "29.00"}'


def sql_matrix_bin():
    path = os.environ.get("OUTBOX_RELAY_SQL_MATRIX_BIN") or os.path.join(
        TOP, "build", "tests", "sqlmatrix", "sql_matrix")
    assert os.access(path, os.X_OK), "%s not built (meson compile, or set " \
        "OUTBOX_RELAY_SQL_MATRIX_BIN)" % path
    return path


def has_wal2json(bindir):
    lib = os.path.dirname(bindir)
    return bool(glob.glob(os.path.join(lib, "lib", "wal2json.so")) +
                glob.glob(os.path.join(lib, "lib", "postgresql", "wal2json.so")))


def start_server(env, major, **settings):
    """A server of major with wal_level logical and the outbox of sql/outbox.sql
    (one row) in database DB; wal2json added to output_plugin_libraries where
    the server has that setting (the harness's default)."""
    srv = PostgresServer(env.base_dir, name="matrix-pg%s" % major,
                         bindir=pgmajor.bindir_of(major), settings=settings)
    srv.start()
    srv.major = major
    srv.create_database(DB)
    return srv


@pytest.fixture(scope="module", params=pgmajor.SUPPORTED, ids=lambda m: "pg" + m)
def server(request, env):
    srv = start_server(env, request.param, max_prepared_transactions="5")
    try:
        srv.psql(file=os.path.join(SQL_DIR, "outbox.sql"), dbname=DB)
        srv.query("INSERT INTO outbox (work_id, kind, payload) VALUES "
                  "('order-103-ack', 'order_received', %s)", (ORDER,), dbname=DB)
        srv.wal2json = has_wal2json(srv.bindir)
        # the suite runs the relay end to end on 15: there it must have wal2json
        assert srv.wal2json == (request.param == "15"), srv.bindir
        yield srv
    finally:
        srv.stop()
        srv.remove()


def relay_args(srv, slot, *extra, brokers="127.0.0.1:9"):
    return ["-d", srv.conninfo(DB), "-S", slot, "-b", brokers] + list(extra)


def test_server_is_the_major(server):
    num = int(server.scalar("SHOW server_version_num"))
    assert num // 10000 == int(server.major), num


def preflight_functions():
    """The functions preflight.h and publication.h declare."""
    found = set()
    for header in (PREFLIGHT_H, PUBLICATION_H):
        text = open(header, encoding="utf-8").read()
        found |= set(re.findall(r"^(?:int|void|bool|char|PGresult|enum \w+|const char) \**"
                                r"((?:preflight|publication)_\w+)\(", text, re.M))
    return found


def test_preflight_probes(server):
    """sql_matrix.c's probes, each asserting what its function returned; and
    every function of preflight.h that sends SQL has one."""
    argv = [sql_matrix_bin(), "-d", server.conninfo(DB), "--major", server.major]
    if server.wal2json:
        argv.append("--wal2json")
    cp = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=relay.relay_env(),
                        stdin=subprocess.DEVNULL)
    out = cp.stdout + cp.stderr
    assert cp.returncode == 0, out
    ok = [m.group(1) for m in re.finditer(r"^ok   ([a-z_]+)", cp.stdout, re.M)]
    assert not re.search(r"^FAIL ", cp.stdout, re.M), out
    declared = preflight_functions()
    assert "preflight_read_slot" in declared and "preflight_connect" in declared, declared
    assert NO_SQL <= declared, "listed as sending no SQL but not in preflight.h: %s" \
        % sorted(NO_SQL - declared)
    missing = sorted(declared - NO_SQL - set(ok))
    assert not missing, "functions of preflight.h without a probe in sql_matrix.c: %s\n%s" \
        % (missing, out)
    # both sides of the output plugin line: wal2json loads only where installed
    assert ("created and dropped" in out) == server.wal2json, out


def create_slot(server, slot, plugin="test_decoding"):
    server.query("SELECT pg_create_logical_replication_slot(%s, %s)", (slot, plugin), dbname=DB)


def check_items(server, kafka, slot):
    rc, out, items = run_check(relay_args(server, slot, "--topic", "matrix.${kind}",
                                          brokers=kafka.bootstrap))
    return rc, out, items


def assert_check(server, rc, out, items, slot_status, slot_words, wal2json):
    """Every item as a healthy server of this major gives it; slot and
    wal2json as given ((status, words) each)."""
    t = '"public"."outbox"'
    expected = {
        "connection": ("PASS", 'database "%s" on 127.0.0.1:%d as "postgres"' % (DB, server.port)),
        "server version": ("PASS", server.scalar("SHOW server_version")),
        "wal_level": ("PASS", "logical"),
        "server_encoding": ("PASS", "UTF8"),
        "replication privilege": ("PASS", 'role "postgres" is a superuser'),
        "table %s" % t: ("PASS", 'columns "work_id" (ID), "work_id" (key), "payload" (payload), '
                         '"kind" (type) and the topic template\'s present'),
        "SELECT on %s" % t: ("PASS", 'role "postgres" may read the table'),
        "replica identity of %s" % t: ("PASS", "DEFAULT (primary key);"),
        "replication connection": ("PASS", "IDENTIFY_SYSTEM: system "),
        "output plugins": ("PASS", "wal2json and pgoutput allowed; the relay streams with wal2json"
                           if server.scalar("SELECT count(*) FROM pg_settings WHERE name = "
                                            "'output_plugin_libraries'") else
                           "every installed plugin is allowed; the relay streams with wal2json"),
        "wal2json": wal2json,
        # sql/outbox.sql's outbox_emit() and the relay's prefix (none): named, not a failure
        "message prefix": ("PASS", 'none published (no --message-prefix); outbox_emit() in '
                           'database "%s" writes prefix "outbox"' % DB),
        "slot": (slot_status, slot_words),
        "synchronous_standby_names": ("PASS", "empty: does not name this relay"),
        "max_slot_wal_keep_size": ("WARN", "-1 (unlimited)"),
        "wal_sender_timeout": ("PASS", "60000 ms"),
        "kafka brokers": ("PASS", "reachable"),
        'topics of "matrix.${kind}"': ("PASS", '"matrix.order_received"'),
        # none yet, or the shared broker's from an earlier test, at the default limit
        "topic limits": ("PASS", "max.message.bytes"),
        # the shared broker may have the topic from an earlier test, or not yet
        'checkpoint topic "outbox-relay.checkpoints"': (("PASS", "WARN"), ""),
        "checkpoint of slot": ("PASS", "none yet"),
    }
    if int(server.major) >= 18:
        expected["idle_replication_slot_timeout"] = ("PASS", "0: a slot is never invalidated for "
                                                     "being idle")
    got = {("slot" if name.startswith("slot ") else "checkpoint of slot"
            if name.startswith("checkpoint of slot ") else name): v for name, v in items.items()}
    topic_item = got.get('checkpoint topic "outbox-relay.checkpoints"', ("", ""))
    if slot_status == "FAIL" and "does not exist yet" not in topic_item[1]:
        # a slot that is there but unusable: nothing to judge, its own item says why
        expected["checkpoint of slot"] = ("SKIP", "the slot is not usable")
    assert set(got) == set(expected), out
    for name, (status, words) in expected.items():
        assert got[name][0] in (status if isinstance(status, tuple) else (status,)) and \
            words in got[name][1], \
            "%s: expected %s with %r\n%s" % (name, status, words, out)
    # the template's values were read from the outbox (check.c's SELECT DISTINCT)
    assert "for the first 100 distinct values" in got['topics of "matrix.${kind}"'][1], out
    # no SQL error but where the wal2json item expects the server's refusal
    for name, (status, text) in got.items():
        if name != "wal2json":
            assert "ERROR" not in text and "SQLSTATE" not in text, "%s: %s" % (name, text)
    assert rc == (EXIT_OK if all(s != "FAIL" for s, _ in got.values()) else EXIT_ENV), out
    assert not server.query("SELECT slot_name FROM pg_replication_slots WHERE slot_name "
                            "LIKE 'outbox_relay_check_%'"), "check left its temporary slot"


def wal2json_item(server):
    if server.wal2json:
        return ("PASS", "loads: temporary slot ")
    return ("FAIL", 'wal2json is not installed on the server: cannot create replication slot '
            '"outbox_relay_check_')


def test_check(server, kafka):
    """`check` on a missing slot and on a test_decoding slot: each item as
    expected, wal2json failing only for want of the library."""
    rc, out, items = check_items(server, kafka, "matrix_check_missing")
    assert_check(server, rc, out, items, "WARN", "does not exist", wal2json_item(server))
    if not server.wal2json:
        text = items["wal2json"][1]
        assert 'could not access file "wal2json"' in text and \
            "apt-get install postgresql-%s-wal2json" % server.major in text, out

    create_slot(server, "matrix_check_td")
    try:
        rc, out, items = check_items(server, kafka, "matrix_check_td")
        assert_check(server, rc, out, items, "FAIL",
                     'uses output plugin "test_decoding", not wal2json', wal2json_item(server))
    finally:
        server.drop_slot("matrix_check_td")


def reload_until(server, sql, setting, want):
    server.query(sql)
    server.query("SELECT pg_reload_conf()")
    wait_until(lambda: server.scalar("SHOW %s" % setting) == want, 30,
               what="%s = %r after the reload" % (setting, want))


def test_server_sql_and_check_with_wal2json_unlisted(server, kafka):
    """A stock output_plugin_libraries (where the server has it): `check`
    says wal2json is not allowed and, as a superuser, LOADs the library to
    say whether it is installed; sql/server.sql then adds it, keeping the
    default names. A server without the setting is left alone by the script."""
    restricted = server.scalar("SELECT count(*) FROM pg_settings "
                               "WHERE name = 'output_plugin_libraries'") == 1
    server_sql = os.path.join(SQL_DIR, "server.sql")
    if not restricted:
        # only the 15 minors before 15.19 (OUTBOX_RELAY_PG_BINDIR's other side)
        assert server.major == "15", server.scalar("SHOW server_version")
        out = server.psql(file=server_sql)
        assert "wal_level: logical" in out and "has no such setting" in out, out
        return
    try:
        reload_until(server, "ALTER SYSTEM SET output_plugin_libraries = 'pgoutput', 'test_decoding'",
                     "output_plugin_libraries", "pgoutput, test_decoding")
        rc, out, items = check_items(server, kafka, "matrix_check_missing")
        assert rc == EXIT_ENV, out
        status, text = items["output plugins"]
        assert status == "FAIL" and "pgoutput allowed, wal2json not" in text and \
            "start with --plugin=pgoutput (or --plugin=auto)" in text, out
        status, text = items["wal2json"]
        assert status == "FAIL" and "wal2json is not allowed: " in text and \
            "(SQLSTATE 42501)" in text and "ALTER SYSTEM SET output_plugin_libraries = " \
            "'pgoutput', 'test_decoding', 'wal2json'" in text, out
        if server.wal2json:
            assert "the library is installed (LOAD 'wal2json' works)" in text, out
        else:
            assert "it is not installed either: install it where PostgreSQL runs (Debian and " \
                "Ubuntu: apt-get install postgresql-%s-wal2json)" % server.major in text, out

        out = server.psql(file=server_sql)
        assert "wal_level: logical" in out, out
        assert "output_plugin_libraries: set to 'pgoutput', 'test_decoding', 'wal2json' with " \
            "ALTER SYSTEM and reloaded" in out, out
        wait_until(lambda: server.scalar("SHOW output_plugin_libraries") ==
                   "pgoutput, test_decoding, wal2json", 30, what="server.sql's list in effect")
        again = server.psql(file=server_sql)
        assert "output_plugin_libraries: lists wal2json" in again, again
        assert "ALTER SYSTEM" not in again, again
    finally:
        # the harness's list (ALTER SYSTEM rewrote postgresql.auto.conf, where the
        # harness had put it), for the tests after this one
        reload_until(server, "ALTER SYSTEM SET output_plugin_libraries = 'pgoutput', "
                     "'test_decoding', 'wal2json'",
                     "output_plugin_libraries", "pgoutput, test_decoding, wal2json")


def slot_cmd(server, action, slot, *extra, **kw):
    return run_relay(["slot", action] + relay_args(server, slot, *extra, **kw))


def test_slot_commands(server, kafka):
    """`slot status` (text and JSON), `slot drop` (dry run, refused while
    active, --yes), `slot create` on test_decoding slots."""
    create_slot(server, "matrix_cmd")
    try:
        rc, out = slot_cmd(server, "status", "matrix_cmd")
        assert rc == EXIT_OK, out
        for line in ("plugin:              test_decoding", "database:            %s" % DB,
                     "active:              no", "wal_status:          reserved",
                     "safe_wal_size:       unlimited"):
            assert line in out, (line, out)
        rc, out = slot_cmd(server, "status", "matrix_cmd", "--format=json")
        assert rc == EXIT_OK, out
        st = json.loads(out)
        assert st["plugin"] == "test_decoding" and st["wal_status"] == "reserved" and \
            st["safe_wal_size"] is None and st["retained_bytes"] >= 0 and st["lag_bytes"] >= 0, st

        # held by another session: status names the holder, drop refuses
        holder = server.connect(DB)
        try:
            with holder.cursor() as cur:
                cur.execute("SELECT pg_create_logical_replication_slot('matrix_held', "
                            "'test_decoding', true)")
                cur.execute("SELECT pg_backend_pid()")
                pid = cur.fetchone()[0]
            rc, out = slot_cmd(server, "status", "matrix_held")
            assert rc == EXIT_OK and "active:              yes" in out and \
                "active_pid:          %d (PID %d, application " % (pid, pid) in out, out
            rc, out = slot_cmd(server, "drop", "matrix_held", "--yes")
            assert rc == EXIT_ENV and "is active, used by PID %d" % pid in out, out
        finally:
            holder.close()

        rc, out = slot_cmd(server, "drop", "matrix_cmd")
        assert rc == EXIT_USAGE and "would drop replication slot \"matrix_cmd\" (plugin " \
            "test_decoding" in out, out
        rc, out = slot_cmd(server, "drop", "matrix_cmd", "--yes")
        assert rc == EXIT_OK, out
        assert server.slot("matrix_cmd") is None
        rc, out = slot_cmd(server, "drop", "matrix_cmd", "--yes")
        assert rc == EXIT_ENV and "does not exist: nothing to drop" in out, out
        rc, out = slot_cmd(server, "status", "matrix_cmd")
        assert rc == EXIT_ENV and "does not exist" in out, out

        # create: reads the slot, sets statement_timeout, creates, counts the outbox's rows
        # (and writes the new slot's first checkpoint to Kafka)
        rc, out = slot_cmd(server, "create", "matrix_new", brokers=kafka.bootstrap)
        if server.wal2json:
            assert rc == EXIT_OK and server.slot("matrix_new")["plugin"] == "wal2json", out
            assert "the outbox already holds " in out, out
        else:
            assert rc == EXIT_ENV and 'could not access file "wal2json"' in out, out
            assert server.slot("matrix_new") is None
    finally:
        for s in ("matrix_cmd", "matrix_new"):
            server.drop_slot(s)


def test_relay_startup(server, kafka):
    """The daemon's startup runs every check up to the slot, and stops at
    the test_decoding slot's plugin (exit 3), before any stream."""
    create_slot(server, "matrix_relay")
    try:
        rc, out = run_relay(relay_args(server, "matrix_relay", brokers=kafka.bootstrap), timeout=60)
        assert rc == EXIT_ENV and 'uses output plugin "test_decoding", not wal2json' in out, out
        assert "ERROR" not in out, out
    finally:
        server.drop_slot("matrix_relay")


def monitoring_queries():
    text = open(os.path.join(SQL_DIR, "monitoring.sql"), encoding="utf-8").read()
    parts = re.split(r"^-- query: (\w+)\n", text, flags=re.M)
    return {parts[i]: parts[i + 1].strip() for i in range(1, len(parts), 2)}


def test_sql_kit(server, tmp_path):
    """sql/outbox.sql (and outbox_enqueue()), role.sql (twice), inbox.sql
    (inbox_receive(), inbox_cleanup()) and monitoring.sql with psql 15, as
    the README runs them; monitoring's queries on a test_decoding slot so
    that each returns its row."""
    db = "kit"
    server.create_database(db)
    try:
        psql = [server._bin("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", server.conninfo(db)]
        procs.run(psql + ["-f", os.path.join(SQL_DIR, "outbox.sql")], timeout=60)
        assert server.scalar("SELECT outbox_enqueue('k-1', 'order_received', %s)", (ORDER,),
                             dbname=db) is True
        assert server.scalar("SELECT outbox_enqueue('k-1', 'order_received', %s)", (ORDER,),
                             dbname=db) is False
        with pytest.raises(psycopg2.Error) as e:
            server.query("SELECT outbox_enqueue('k-1', 'order_paid', %s)", (ORDER,), dbname=db)
        assert e.value.pgcode == "WK001", e.value.pgerror
        # outbox_emit(): the message's LSN, with the prefix fixed at load time
        lsn = server.scalar("SELECT outbox_emit('k-2', 'order_received', %s)::text", (ORDER,),
                            dbname=db)
        assert re.match(r"^[0-9A-F]+/[0-9A-F]+$", lsn), lsn
        assert server.scalar("SELECT outbox_message_prefix()", dbname=db) == "outbox"

        kit = {"server.sql", "outbox.sql", "role.sql", "inbox.sql", "monitoring.sql"}
        assert set(n for n in os.listdir(SQL_DIR) if n.endswith(".sql")) == kit, \
            "sql/ has a file the matrix does not run (or lost one)"
        role = "matrix_relay_role"
        for _ in range(2):
            procs.run(psql + ["-v", "relay_role=" + role, "-f", os.path.join(SQL_DIR, "role.sql")],
                      timeout=60)
        assert server.query("SELECT rolreplication, rolsuper FROM pg_roles WHERE rolname = %s",
                            (role,)) == [(True, False)]
        assert server.scalar("SELECT has_table_privilege(%s, 'public.outbox', 'SELECT')", (role,),
                             dbname=db) is True

        # the receiver's half (in the consumer's database, here the same one)
        procs.run(psql + ["-f", os.path.join(SQL_DIR, "inbox.sql")], timeout=60)
        conn = server.connect(db, autocommit=False)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT inbox_receive('mailer', 'k-1', %s)", (ORDER,))
                assert cur.fetchone()[0] is True
                cur.execute("SELECT inbox_receive('mailer', 'k-1', %s)", (ORDER,))
                assert cur.fetchone()[0] is False
            conn.commit()
            with conn.cursor() as cur:
                cur.execute("SELECT inbox_cleanup(interval '1 microsecond')")
                assert cur.fetchone()[0] == 1
            conn.commit()
        finally:
            conn.close()

        # all of monitoring.sql through psql -f, then each query for its rows
        procs.run(psql + ["-f", os.path.join(SQL_DIR, "monitoring.sql")], timeout=60)
        server.query("SELECT pg_create_logical_replication_slot('matrix_kit', 'test_decoding')",
                     dbname=db)
        queries = monitoring_queries()
        assert set(queries) == {"slot", "relay_connection", "oldest_unconfirmed_row"}, queries
        rows = {}
        conn = server.connect(db)
        try:
            for name, sql in queries.items():
                assert "s.plugin = 'wal2json'" in sql, name
                with conn.cursor() as cur:
                    cur.execute(sql.replace("s.plugin = 'wal2json'", "s.plugin = 'test_decoding'"))
                    names = [d.name for d in cur.description]
                    rows[name] = [dict(zip(names, r)) for r in cur.fetchall()]
        finally:
            conn.close()
        slot = [r for r in rows["slot"] if r["slot_name"] == "matrix_kit"]
        assert len(slot) == 1 and slot[0]["wal_status"] == "reserved" and \
            slot[0]["retained_bytes"] >= 0 and slot[0]["retained_pct_of_keep_size"] is None, rows
        # nobody streams from the slot: no walsender row
        assert rows["relay_connection"] == [], rows
        unconfirmed = [r for r in rows["oldest_unconfirmed_row"] if r["slot_name"] == "matrix_kit"]
        assert len(unconfirmed) == 1 and unconfirmed[0]["unconfirmed_rows"] == 0, rows
    finally:
        server.drop_slot("matrix_kit")
        server.drop_database(db)
        server.query("DROP ROLE IF EXISTS matrix_relay_role")


def test_older_than_14_is_refused(env, kafka):
    """PostgreSQL 13 (Maven Central's bundle): the relay and `check` refuse
    it with the supported range and the fix, before touching any slot."""
    srv = start_server(env, pgmajor.UNSUPPORTED)
    try:
        version = srv.scalar("SHOW server_version")
        num = srv.scalar("SHOW server_version_num")
        assert num.startswith("13"), num
        words = ("server version %s (server_version_num %s) is too old: outbox-relay supports "
                 "PostgreSQL 14 to 18, the major versions the PostgreSQL project supports; upgrade "
                 "the server to 14 or later (pg_upgrade, or dump and restore)" % (version, num))
        rc, out = run_relay(relay_args(srv, "matrix_old", "--create-slot", brokers=kafka.bootstrap),
                            timeout=60)
        assert rc == EXIT_ENV and words in out, out
        assert srv.query("SELECT slot_name FROM pg_replication_slots") == []
        rc, out, items = run_check(relay_args(srv, "matrix_old", brokers=kafka.bootstrap), timeout=60)
        assert rc == EXIT_ENV and items["server version"] == ("FAIL", words), out
    finally:
        srv.stop()
        srv.remove()


def stream_until(cur, words, timeout=30):
    """Read a psycopg2 logical replication cursor until a message contains
    words (bounded); returns the messages read."""
    got = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = cur.read_message()
        if msg is None:
            select.select([cur], [], [], max(0.0, min(1.0, deadline - time.monotonic())))
            continue
        got.append(msg.payload)
        msg.cursor.send_feedback(flush_lsn=msg.data_start)
        if words in msg.payload:
            return got
    raise AssertionError("%r not streamed within %s s; got %r" % (words, timeout, got))


def nudge_until(primary, cond, what, timeout=60):
    """Poll cond while the primary logs running transactions, which a
    standby's slot creation and slot synchronization wait for."""
    def step():
        primary.query("SELECT pg_log_standby_snapshot()")
        return cond()
    wait_until(step, timeout, interval=0.2, what=what)


@pytest.mark.parametrize("major", [m for m in pgmajor.SUPPORTED if int(m) >= 16])
def test_standby_decodes_and_keeps_its_slot_at_promotion(env, kafka, major):
    """A 16+ hot standby decodes: the relay's startup and `slot status` work
    on a test_decoding slot there, a stream from it carries the primary's
    inserts, and at the standby's promotion the same stream goes on with the
    promoted server's inserts (the slot and its walsender survive). On 17+
    a failover slot of the primary is synchronized to the standby: the relay
    reads it as a synchronized copy (not usable) while the standby is in
    recovery, and as usable once it is promoted."""
    failover = int(major) >= 17
    primary = PostgresServer(env.base_dir, name="matrix-pg%s-primary" % major,
                             bindir=pgmajor.bindir_of(major), settings={"hot_standby_feedback": "on"})
    standby = conn = None
    try:
        primary.start()
        primary.query("SELECT pg_create_physical_replication_slot('matrix_phys')")
        # slot synchronization by pg_sync_replication_slots() calls, not the
        # worker, whose naps grow to 30 s when nothing changes
        standby = primary.make_standby("matrix-pg%s-standby" % major,
                                       settings={"primary_slot_name": "'matrix_phys'"})
        primary.query("CREATE TABLE t (id int PRIMARY KEY, note text)")
        primary.psql(file=os.path.join(SQL_DIR, "outbox.sql"))
        if failover:
            primary.query("SELECT pg_create_logical_replication_slot('matrix_fo', 'test_decoding', "
                          "false, false, true)")
        lsn = primary.scalar("SELECT pg_current_wal_lsn()::text")
        wait_until(lambda: standby.scalar("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,)),
                   30, interval=0.1, what="the standby replays the table")

        # a slot on the standby: its creation waits for the primary's running transactions
        errors = []

        def create():
            try:
                standby.query("SELECT pg_create_logical_replication_slot('matrix_sb', "
                              "'test_decoding')")
            except Exception as e:  # reported by the main thread
                errors.append(e)
        creating = threading.Thread(target=create, daemon=True)
        creating.start()
        nudge_until(primary, lambda: not creating.is_alive(), "the slot's creation on the standby")
        assert not errors, errors
        assert standby.slot("matrix_sb")["plugin"] == "test_decoding"
        args = ["-d", standby.conninfo(), "-S", "matrix_sb", "-b", kafka.bootstrap]
        rc, out = run_relay(["slot", "status"] + args)
        assert rc == EXIT_OK and "plugin:              test_decoding" in out, out
        rc, out = run_relay(args, timeout=60)
        assert rc == EXIT_ENV and 'uses output plugin "test_decoding", not wal2json' in out, out

        if failover:
            # the copy stays temporary, and is dropped at a promotion, until
            # the primary's slot has moved past what the standby has replayed
            primary.query("SELECT pg_replication_slot_advance('matrix_fo', pg_current_wal_lsn())")

            def synced():
                standby.query("SELECT pg_sync_replication_slots()")
                return standby.query("SELECT synced, temporary FROM pg_replication_slots "
                                     "WHERE slot_name = 'matrix_fo'") == [(True, False)]
            nudge_until(primary, synced, "the failover slot synchronized to the standby")
            out = sql_matrix_synced(standby, major)
            assert "in_recovery 1, temporary 0" in out and "synchronized copy" in out, out

        conn = psycopg2.connect(standby.conninfo(),
                                connection_factory=psycopg2.extras.LogicalReplicationConnection)
        cur = conn.cursor()
        cur.start_replication(slot_name="matrix_sb", decode=True)
        primary.query("INSERT INTO t VALUES (1, 'written on the primary')")
        stream_until(cur, "'written on the primary'")

        assert standby.scalar("SELECT pg_promote()") is True
        assert standby.scalar("SELECT pg_is_in_recovery()") is False
        standby.query("INSERT INTO t VALUES (2, 'written after the promotion')")
        stream_until(cur, "'written after the promotion'")
        assert standby.slot("matrix_sb")["active"], standby.slot("matrix_sb")
        if failover:
            out = sql_matrix_synced(standby, major)
            assert "in_recovery 0" in out, out
    finally:
        if conn is not None:
            conn.close()
        for s in (standby, primary):
            if s is not None:
                s.stop()
                s.remove()


def sql_matrix_synced(srv, major):
    cp = subprocess.run([sql_matrix_bin(), "-d", srv.conninfo(), "--major", major,
                         "--synced-slot", "matrix_fo"], capture_output=True, text=True, timeout=60,
                        env=relay.relay_env(), stdin=subprocess.DEVNULL)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    return cp.stdout


def test_standby_of_15_cannot_decode(env, kafka):
    """Before 16 a standby cannot decode: on a 15 standby (with wal2json)
    `check` fails the wal2json item with the server's reason and the relay
    stops (exit 3) when it would create its slot."""
    primary = PostgresServer(env.base_dir, name="matrix-pg15-primary", bindir=pgmajor.bindir_of("15"))
    standby = None
    try:
        primary.start()
        primary.psql(file=os.path.join(SQL_DIR, "outbox.sql"))
        standby = primary.make_standby("matrix-pg15-standby")
        assert standby.scalar("SELECT pg_is_in_recovery()") is True
        args = ["-d", standby.conninfo(), "-S", "matrix_sb15", "-b", kafka.bootstrap]
        rc, out, items = run_check(args)
        assert rc == EXIT_ENV, out
        assert items["wal2json"][0] == "FAIL" and "logical decoding cannot be used while in " \
            "recovery (SQLSTATE 0A000)" in items["wal2json"][1], out
        assert [n for n, (st, _) in items.items() if st == "FAIL"] == ["wal2json"], out
        rc, out = run_relay(args + ["--create-slot"], timeout=60)
        assert rc == EXIT_ENV and "logical decoding cannot be used while in recovery" in out, out
        assert standby.query("SELECT slot_name FROM pg_replication_slots") == []
    finally:
        for s in (standby, primary):
            if s is not None:
                s.stop()
                s.remove()


# --- the end-to-end core with pgoutput, on every major ---------------------
#
# The servers of other majors have no wal2json, but every one has pgoutput:
# there the relay runs end to end, on a database of its own per test (sql/
# outbox.sql loaded), against the suite's broker. The core of the suite:
# the record, a logical message, the table changed while running, a streamed
# transaction with a rolled-back savepoint, the slot moved by someone else, a
# small crash loop.

@pytest.fixture
def mcase(request, env, server, kafka):
    """The suite's Case, on the major's server."""
    c = Case(env, server, kafka, "m%s_%s" % (server.major, request.node.originalname))
    c.setup_db()
    yield c
    c.teardown()


def pgo_relay(c, *extra, **kw):
    return start_relay(c, "--plugin", "pgoutput", *extra, **kw)


def test_e2e_pgoutput_record_message_and_table_changes(mcase):
    """The record (key, value, CloudEvents headers, ce_pglsn the commit's end,
    confirmed after Kafka has it), a logical message published as its row,
    `check` passing with pgoutput's items; a column added while running (a
    new Relation message) published; the table swapped under its name: the
    relay stops (exit 3) without confirming past the swap."""
    c = mcase
    reader = c.reader()
    r = pgo_relay(c, "--message-prefix", "outbox")
    conn = c.connect(autocommit=False)
    commit = insert_rows(conn, [{"work_id": "order-103-ack", "kind": "order_received",
                                 "payload": json.loads(ORDER)}])
    in_transaction(conn, [("SELECT outbox_emit('msg-1', 'order_received', %s)", (ORDER,))])
    got = arrive_and_confirm(c, reader, r, ["order-103-ack", "msg-1"])
    rec = got["order-103-ack"][0]
    assert rec.key == b"order-103-ack" and rec.topic == c.topic("order_received"), rec
    assert rec.value_text == c.scalar("SELECT payload::text FROM outbox WHERE work_id = 'order-103-ack'")
    assert rec.header("ce_source") == "postgresql://%s/%s/public.outbox" % (
        c.pg.system_identifier(), c.dbname), rec.headers
    assert rec.header("ce_pgxid") == str(commit.xid32)
    assert commit.lsn_before < parse_lsn(rec.header("ce_pglsn")) <= commit.lsn_after
    msg = got["msg-1"][0]
    assert json.loads(msg.value_text) == json.loads(ORDER), msg
    assert msg.header("ce_source").endswith("/message/outbox"), msg

    rc, out, items = run_check(c.relay_args("--plugin", "pgoutput", "--message-prefix", "outbox",
                                            create_slot=False))
    assert rc == EXIT_OK, out
    assert items["message prefix"] == ("PASS", '"outbox": outbox_emit() writes it; transactional '
                                       'messages of it are published, non-transactional ones '
                                       'counted and never published'), out
    assert items["output plugins"][0] == "PASS" and "streams with pgoutput" in items["output plugins"][1]
    assert items["pgoutput"][0] == "PASS", out
    assert items['publication "%s"' % c.slot] == ("PASS", "lists exactly the 1 outbox table and "
                                                   "publishes inserts only"), out

    c.query("ALTER TABLE outbox ADD COLUMN note text")
    added = insert_rows(conn, [{"work_id": "with-note", "kind": "order_received", "payload": {},
                                "note": "new column"}])
    arrive_and_confirm(c, reader, r, added.work_ids)

    c.query("DROP EVENT TRIGGER IF EXISTS outbox_guard")
    # at most the swap's commit record: other databases' commits meanwhile may be confirmed
    swap = ("ALTER TABLE outbox RENAME TO outbox_old; "
            "CREATE TABLE outbox (LIKE outbox_old INCLUDING ALL)")
    before = in_transaction(conn, [(swap, None)])[0].lsn_pre_commit
    lost = insert_rows(conn, simple_rows("after-swap", 2))
    assert r.wait(60) == EXIT_ENV, r.log
    assert "nothing after LSN" in r.log, r.log
    assert c.confirmed() <= before, "confirmed past the swap"
    reader.drain(timeout=5)
    assert not set(lost.work_ids) & set(by_id(reader.records)), "rows of the swapped-in table published"
    conn.close()


def test_e2e_pgoutput_slot_moved_by_someone_else(mcase):
    """--plugin=auto picks wal2json where it is installed, else pgoutput (the
    harness lists wal2json, but only 15 has it) and says so; the slot then
    advanced by someone else while the relay is stopped: the next start
    stops (exit 3) naming the gap, and publishes nothing of it."""
    c = mcase
    reader = c.reader()
    r = start_relay(c, "--plugin", "auto")
    plugin = "wal2json" if c.pg.major == "15" else "pgoutput"
    assert "output plugin %s (" % plugin in r.log, r.log
    assert c.slot_info()["plugin"] == plugin
    conn = c.connect(autocommit=False)
    first = insert_rows(conn, simple_rows("first", 2))
    arrive_and_confirm(c, reader, r, first.work_ids)
    assert r.stop() == EXIT_OK, r.log
    gone = insert_rows(conn, simple_rows("skipped", 3))
    conn.close()
    c.query("SELECT pg_replication_slot_advance(%s, pg_current_wal_lsn())", (c.slot,))
    rc, out = run_relay(c.relay_args("--plugin", "auto", create_slot=False), timeout=60)
    assert rc == EXIT_ENV, out
    assert "someone else consumed the slot" in out, out
    assert "streaming from slot" not in out, out
    reader.drain(timeout=5)
    assert not set(gone.work_ids) & set(by_id(reader.records))


def test_e2e_pgoutput_streamed_transaction(mcase, monkeypatch):
    """A transaction past the walsender's logical_decoding_work_mem, streamed
    before it commits (protocol version 2; PostgreSQL 16 and later take
    streaming as a mode, not a boolean), another committed between its
    blocks, a savepoint rolled back after its row was streamed: every
    committed row once, the rolled-back one nowhere, nothing spilled."""
    monkeypatch.setenv("PGOPTIONS", SMALL_WORK_MEM)
    reader = mcase.reader()
    r = pgo_relay(mcase)
    large_transaction(mcase, reader, r)
    assert r.stop() == EXIT_OK, r.log


def test_e2e_pgoutput_crash_loop(mcase):
    """A small crash loop: writers commit while the relay is killed (SIGKILL)
    and restarted; every committed work ID arrives, every duplicate is one a
    kill explains, nothing rolled back is published."""
    c = mcase
    coll = collector(c)
    args = ("--plugin", "pgoutput", "-X", "linger.ms=100")
    r = start_relay(c, *args)
    load = Load(c, "crash", 1200, writers=2, rate=600).start()
    marks = []
    try:
        for at in (300, 700):
            load.wait_rows(at, 300, tick=coll.poll, relays=[r])
            sigkill(r)
            wait_until(lambda: not c.slot_info()["active"], 60, what="the slot to be released",
                       tick=coll.poll)
            marks.append(mark(c, coll, "kill at %d rows" % load.committed, exact=True))
            r = start_relay(c, *args, create_slot=False)
        expected = load.finish(tick=coll.poll, relays=[r])
    finally:
        load.stop()
    verify(c, coll, expected, marks, "pgoutput_crash_loop_pg%s" % c.pg.major, relays=[r])
    assert not set(load.rolled_back) & set(coll.ids()), "rolled-back rows were published"
    assert r.stop() == EXIT_OK, r.log


def test_failover_slot_through_a_promotion(env, kafka):
    """PostgreSQL 17, a primary and a physical standby set up for slot
    synchronization (synchronized_standby_slots on the primary,
    primary_slot_name and hot_standby_feedback on the standby): the relay
    creates its slot with --failover (pgoutput) and streams through a
    multi-host conninfo (target_session_attrs=read-write); `check` passes the
    failover item; the slot is synchronized to the standby (`slot status`
    there: failover, synced). Then the primary stops, the standby is
    promoted, and the relay reconnects to it and goes on: every row
    committed before and after the failover arrives, none lost."""
    major = "17"
    primary = PostgresServer(env.base_dir, name="failover-pg%s-primary" % major,
                             bindir=pgmajor.bindir_of(major), settings={"hot_standby_feedback": "on"})
    standby = None
    c = None
    try:
        primary.start()
        primary.query("SELECT pg_create_physical_replication_slot('failover_phys')")
        standby = primary.make_standby("failover-pg%s-standby" % major,
                                       settings={"primary_slot_name": "'failover_phys'"})
        reload_until(primary, "ALTER SYSTEM SET synchronized_standby_slots = 'failover_phys'",
                     "synchronized_standby_slots", "failover_phys")
        c = Case(env, primary, kafka, "failover_pg%s" % major)
        c.setup_db()
        wait_until(lambda: standby.scalar("SELECT count(*) FROM pg_database WHERE datname = %s",
                                          (c.dbname,)) == 1, 60, what="the database on the standby")
        both = ("host=%s,%s port=%d,%d user=postgres dbname=%s target_session_attrs=read-write"
                % (primary.host, standby.host, primary.port, standby.port, c.dbname))
        args = ["-d", both, "-S", c.slot, "-b", kafka.bootstrap, "--topic", c.prefix + ".${kind}",
                "-s", "1", "--plugin", "pgoutput"]
        reader = c.reader()
        r = env.relay(args + ["--create-slot", "--failover"], name="%s-relay" % c.name)
        c.relays.append(r)
        r.wait_ready(primary, c.slot, timeout=120)
        assert "created replication slot \"%s\" with plugin pgoutput as a failover slot" % c.slot \
            in r.log, r.log
        rc, out, items = run_check(args)
        assert items["failover slot"][0] == "PASS" and "'failover_phys': \"failover_phys\" streaming" \
            in items["failover slot"][1], out

        conn = c.connect(autocommit=False)
        before = insert_rows(conn, simple_rows("before", 5))
        conn.close()
        arrive_and_confirm(c, reader, r, before.work_ids)

        def synced():
            primary.query("SELECT pg_log_standby_snapshot()")
            standby.query("SELECT pg_sync_replication_slots()")
            return standby.query("SELECT synced, temporary, failover FROM pg_replication_slots "
                                 "WHERE slot_name = %s", (c.slot,)) == [(True, False, True)]
        wait_until(synced, 60, interval=0.2, what="the failover slot synchronized to the standby")
        rc, out = run_relay(["slot", "status", "-d", standby.conninfo(c.dbname), "-S", c.slot])
        assert rc == EXIT_OK and "failover:            yes" in out and "synced:              yes" in out \
            and "invalidation_reason: - (valid)" in out, out

        conn = c.connect(autocommit=False)
        during = insert_rows(conn, simple_rows("during", 5))
        conn.close()
        assert reader.read_until(lambda recs: set(during.work_ids) <= {x.header("ce_id") for x in recs},
                                 30), r.log
        primary.stop()
        assert standby.scalar("SELECT pg_promote()") is True
        conn = standby.connect(c.dbname, autocommit=False)
        after = insert_rows(conn, simple_rows("after", 5))
        conn.close()
        ids = before.work_ids + during.work_ids + after.work_ids
        assert reader.read_until(lambda recs: set(ids) <= {x.header("ce_id") for x in recs}, 120), \
            "rows lost at the failover\n" + r.log
        assert r.alive, r.log
        assert "reconnecting" in r.log and r.log.count("streaming from slot") >= 2, r.log
        assert r.stop() == EXIT_OK, r.log
    finally:
        if c is not None:
            for x in c.relays:
                if x.alive:
                    x.kill()
            for rd in c.readers:
                rd.close()
        for s in (standby, primary):
            if s is not None:
                s.stop()
                s.remove()
