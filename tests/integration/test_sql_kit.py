# SPDX-License-Identifier: Apache-2.0
"""The SQL kit in sql/: outbox_enqueue() (idempotent for the same message,
SQLSTATE WK001 for a work ID reused with a different one, also against a
concurrent transaction and against a row that row-level security hides),
the two cleanup choices of sql/outbox.sql (insert and delete in one
transaction is still published; the documented DELETE keeps rows the slot
has not confirmed), the least-privilege role of
sql/role.sql running the relay end to end with a password from a password
file, and each query of sql/monitoring.sql against a slot the relay holds.

The role test rewrites the shared server's pg_hba.conf for the duration of
the test (lines for its own role only) and restores it afterwards.
"""

import os
import re
import secrets
import threading

import harness
import psycopg2
import psycopg2.sql
import pytest
from harness import (EXIT_OK, EXIT_RUNTIME, by_id, has_ids, insert_rows, parse_lsn, procs,
                     run_relay, wait_confirmed, wait_until)

SQL_DIR = os.path.join(harness.TOP, "sql")
OUTBOX_SQL = os.path.join(SQL_DIR, "outbox.sql")
ROLE_SQL = os.path.join(SQL_DIR, "role.sql")
MONITORING_SQL = os.path.join(SQL_DIR, "monitoring.sql")

ORDER = '{"order_id": 103, "total": "29.00"}'


def enqueue(cur, work_id, kind="order_received", payload=ORDER, entity_id=None, headers=None):
    cur.execute("SELECT outbox_enqueue(%s, %s, %s, %s, %s)",
                (work_id, kind, payload, entity_id, headers))
    return cur.fetchone()[0]


def enqueue_error(conn, *args, **kw):
    """Run outbox_enqueue on conn in its own transaction; returns the error it raised."""
    with pytest.raises(psycopg2.Error) as e:
        with conn.cursor() as cur:
            enqueue(cur, *args, **kw)
    conn.rollback()
    return e.value


def test_enqueue_raises_on_a_changed_payload(case):
    conn = case.connect(autocommit=False)
    cur = conn.cursor()
    assert enqueue(cur, "order-103-ack") is True
    conn.commit()
    # the same message again, whatever the key order and spacing: a no-op
    assert enqueue(cur, "order-103-ack", payload='{"total":"29.00",  "order_id":103}') is False
    conn.commit()

    e = enqueue_error(conn, "order-103-ack", payload='{"order_id": 103, "total": "31.00"}')
    assert e.pgcode == "WK001", (e.pgcode, e.pgerror)
    assert e.diag.message_primary == \
        'work ID "order-103-ack" is already in the outbox with a different payload'
    assert e.diag.message_detail == ('payload: stored {"total": "29.00", "order_id": 103}, '
                                     'new {"total": "31.00", "order_id": 103}')
    assert "new work ID" in e.diag.message_hint
    # numerically equal, but not the text the relay would publish
    num = conn.cursor()
    assert enqueue(num, "n-1", payload='{"total": 29.00}') is True
    conn.commit()
    assert enqueue_error(conn, "n-1", payload='{"total": 29.0}').pgcode == "WK001"

    for kw, words in [({"kind": "order_paid"}, "with a different kind"),
                      ({"entity_id": "order-103"}, "with a different entity_id"),
                      ({"headers": '{"traceparent": "00-ab-01"}'}, "with different headers")]:
        e = enqueue_error(conn, "order-103-ack", **kw)
        assert e.pgcode == "WK001" and words in e.diag.message_primary, (kw, e.pgerror)
    # a different message must not be caught as a plain duplicate
    assert not e.pgcode.startswith("23")

    rows = case.query("SELECT kind, payload::text, entity_id, headers FROM outbox "
                      "WHERE work_id = 'order-103-ack'")
    assert rows == [("order_received", '{"total": "29.00", "order_id": 103}', None, None)]
    assert case.scalar("SELECT count(*) FROM outbox") == 2


def test_enqueue_needs_only_insert_and_select(case):
    """An application role that may only INSERT and SELECT the outbox (it must
    not change stored intentions) can enqueue, repeat and be refused."""
    app = "app_" + case.name[-40:]
    case.pg.query('CREATE ROLE "%s"' % app)
    try:
        case.query('GRANT INSERT, SELECT ON outbox TO "%s"' % app)
        conn = case.connect(autocommit=False)
        cur = conn.cursor()
        cur.execute('SET SESSION AUTHORIZATION "%s"' % app)
        assert enqueue(cur, "order-103-ack") is True
        conn.commit()
        assert enqueue(cur, "order-103-ack") is False
        conn.commit()
        e = enqueue_error(conn, "order-103-ack", payload='{"total": "31.00"}')
        assert e.pgcode == "WK001", e.pgerror
        cur.execute("RESET SESSION AUTHORIZATION")
        conn.commit()
        conn.close()
    finally:
        case.query('DROP OWNED BY "%s"' % app)
        case.pg.query('DROP ROLE "%s"' % app)


def test_enqueue_repeat_publishes_nothing(case):
    case.relay()
    reader = case.reader()
    conn = case.connect(autocommit=False)
    cur = conn.cursor()
    assert enqueue(cur, "order-103-ack", headers='{"traceparent": "00-ab-01"}') is True
    conn.commit()
    assert enqueue(cur, "order-103-ack", headers='{"traceparent": "00-ab-01"}') is False
    conn.commit()
    assert enqueue_error(conn, "order-103-ack", payload='{"total": "31.00"}').pgcode == "WK001"
    assert enqueue(cur, "marker", kind="order_received", payload="{}") is True
    conn.commit()
    before = case.pg.current_wal_lsn()
    assert reader.read_until(has_ids(["order-103-ack", "marker"]), 30), case.logs()
    wait_confirmed(case, before)
    reader.drain(timeout=10)
    recs = by_id(reader.records)
    assert len(recs["order-103-ack"]) == 1, recs["order-103-ack"]
    rec = recs["order-103-ack"][0]
    assert rec.value_text == '{"total": "29.00", "order_id": 103}'
    assert rec.header("traceparent") == "00-ab-01"


@pytest.mark.parametrize("first_outcome", ["commit", "rollback"])
def test_enqueue_waits_for_a_concurrent_one(case, first_outcome):
    """Two transactions enqueue one work ID at once with different payloads:
    the second waits for the first; it raises if the first commits and
    inserts its own row if the first rolls back. Never both."""
    a = case.connect(autocommit=False)
    b = case.connect(autocommit=False)
    assert enqueue(a.cursor(), "c-1", payload='{"total": "29.00"}') is True
    result = {}

    def second():
        try:
            result["value"] = enqueue(b.cursor(), "c-1", payload='{"total": "31.00"}')
            b.commit()
        except psycopg2.Error as e:
            result["error"] = e
            b.rollback()

    t = threading.Thread(target=second, daemon=True)
    t.start()
    wait_until(lambda: case.scalar("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                                   (b.get_backend_pid(),)) == "Lock", 30,
               what="second enqueue waiting on the first one's row")
    assert not result
    getattr(a, first_outcome)()
    t.join(30)
    assert not t.is_alive()
    payload = case.scalar("SELECT payload::text FROM outbox WHERE work_id = 'c-1'")
    if first_outcome == "commit":
        assert "error" in result and result["error"].pgcode == "WK001", result
        assert payload == '{"total": "29.00"}'
    else:
        assert result == {"value": True}, result
        assert payload == '{"total": "31.00"}'


def test_enqueue_with_an_invisible_conflicting_row_fails_instead_of_looping(case):
    """Row-level security on a multi-tenant outbox (a policy by entity_id):
    the row outbox_enqueue() conflicts with is there but cannot be seen. The
    INSERT ... ON CONFLICT DO NOTHING conflicts with the other tenant's row,
    the SELECT that should compare with it finds nothing, and retrying cannot
    change that: the call must fail with an error, not loop inside the
    business transaction until a statement_timeout (if any) ends it."""
    app = "app_" + case.name[-40:]
    case.pg.query('CREATE ROLE "%s"' % app)
    try:
        case.query('GRANT INSERT, SELECT ON outbox TO "%s"' % app)
        case.query("ALTER TABLE outbox ENABLE ROW LEVEL SECURITY")
        case.query("CREATE POLICY tenant ON outbox USING "
                   "(entity_id = current_setting('app.tenant', true))")
        conn = case.connect(autocommit=False)
        cur = conn.cursor()
        cur.execute('SET SESSION AUTHORIZATION "%s"' % app)
        cur.execute("SET app.tenant = 'a'")
        cur.execute("SELECT outbox_enqueue('w-1', 'k', %s, 'a')", (ORDER,))
        assert cur.fetchone()[0] is True
        conn.commit()

        cur.execute("SET app.tenant = 'b'")
        cur.execute("SET statement_timeout = '20s'")
        with pytest.raises(psycopg2.Error) as e:
            cur.execute("SELECT outbox_enqueue('w-1', 'k', %s, 'b')", (ORDER,))
        conn.rollback()
        assert e.value.pgcode != "57014", "outbox_enqueue() looped until statement_timeout"
        assert e.value.pgcode == "WK001", (e.value.pgcode, e.value.pgerror)
        assert 'work ID "w-1" is already in the outbox' in e.value.pgerror, e.value.pgerror
        conn.close()
    finally:
        case.query('DROP OWNED BY "%s"' % app)
        case.pg.query('DROP ROLE "%s"' % app)


def test_insert_and_delete_in_one_transaction_is_published(case):
    """Cleanup (a): the row never stays in the table, the relay still publishes
    it, and a later repeat has nothing to be compared with."""
    case.relay()
    reader = case.reader()
    conn = case.connect(autocommit=False)
    cur = conn.cursor()
    assert enqueue(cur, "order-103-ack") is True
    cur.execute("DELETE FROM outbox WHERE work_id = 'order-103-ack'")
    conn.commit()
    assert case.scalar("SELECT count(*) FROM outbox") == 0
    assert reader.read_until(has_ids(["order-103-ack"]), 30), case.logs()
    assert reader.records[0].value_text == '{"total": "29.00", "order_id": 103}'
    # the trade-off: a changed repeat is not detected and is published too
    assert enqueue(cur, "order-103-ack", payload='{"total": "31.00"}') is True
    conn.commit()
    assert reader.read_until(lambda recs: len(recs) == 2, 30), reader.records
    assert reader.records[1].value_text == '{"total": "31.00"}'


def doc_block(path, first_line_re):
    """The SQL statement quoted in a comment of path: from the commented line
    matching first_line_re to the commented line ending in ';'."""
    out = []
    for line in open(path, encoding="utf-8"):
        text = line.rstrip("\n")
        if not text.startswith("--"):
            if out:
                break
            continue
        body = text[2:].strip()
        if out or re.match(first_line_re, body):
            out.append(body)
            if body.endswith(";"):
                return "\n".join(out)
    raise AssertionError("no statement matching %r in %s" % (first_line_re, path))


def monitoring_queries():
    """{name: sql} of sql/monitoring.sql, split at its '-- query: NAME' lines."""
    text = open(MONITORING_SQL, encoding="utf-8").read()
    parts = re.split(r"^-- query: (\w+)\n", text, flags=re.M)
    return {parts[i]: parts[i + 1].strip() for i in range(1, len(parts), 2)}


def run_dict(case, sql):
    conn = case.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            names = [d.name for d in cur.description]
            return [dict(zip(names, row)) for row in cur.fetchall()]
    finally:
        conn.close()


def slot_sample(case):
    """(current WAL LSN, restart_lsn, confirmed_flush_lsn, active_pid) in one statement."""
    row = case.query("SELECT pg_current_wal_lsn()::text, restart_lsn::text, "
                     "confirmed_flush_lsn::text, active_pid FROM pg_replication_slots "
                     "WHERE slot_name = %s", (case.slot,))[0]
    return parse_lsn(row[0]), parse_lsn(row[1]), parse_lsn(row[2]), row[3]


def unconfirmed(case):
    rows = [r for r in run_dict(case, monitoring_queries()["oldest_unconfirmed_row"])
            if r["slot_name"] == case.slot]
    assert len(rows) == 1, rows
    return rows[0]


def nudge_until(case, cond, timeout=90, what="condition"):
    """Poll cond, writing a running-transactions record (CHECKPOINT) between
    tries so that the slot's catalog_xmin can advance as it does every ~15 s
    on a busy server."""
    def step():
        if cond():
            return True
        case.query("CHECKPOINT")
        return False
    return wait_until(step, timeout, interval=0.5, what=what)


def test_cleanup_keeps_unconfirmed_rows_and_monitoring_counts_them(case):
    """Cleanup (b) with the DELETE quoted in sql/outbox.sql, and the
    oldest_unconfirmed_row query: rows the slot has not confirmed are kept and
    counted whatever their age; once the relay confirmed them they are neither."""
    delete_sql = doc_block(OUTBOX_SQL, r"DELETE FROM outbox$").rstrip(";")
    assert "'outbox_relay'" in delete_sql and "interval '7 days'" in delete_sql, delete_sql
    delete_sql = delete_sql.replace("'outbox_relay'", "'%s'" % case.slot)
    delete_now = delete_sql.replace("interval '7 days'", "interval '0 seconds'")
    delete_hour = delete_sql.replace("interval '7 days'", "interval '1 hour'")

    relay = case.relay()
    assert relay.stop() == EXIT_OK, relay.log
    conn = case.connect(autocommit=False)
    commit = insert_rows(conn, [{"work_id": "old-%d" % i, "kind": "k", "payload": {"i": i}}
                                for i in range(3)])
    created = case.scalar("SELECT min(created_at) FROM outbox")
    case.query("CHECKPOINT")
    assert case.query(delete_now + " RETURNING work_id") == []
    u = unconfirmed(case)
    assert u["unconfirmed_rows"] == 3 and u["oldest_unconfirmed_created_at"] == created, u
    assert u["oldest_unconfirmed_seconds"] > 0

    case.relay(create_slot=False)
    reader = case.reader()
    assert reader.read_until(has_ids(commit.work_ids), 30), case.logs()
    wait_confirmed(case, commit.lsn_before + 1)
    nudge_until(case, lambda: unconfirmed(case)["unconfirmed_rows"] == 0,
                what="catalog_xmin past the published rows")
    u = unconfirmed(case)
    assert u["oldest_unconfirmed_created_at"] is None and u["oldest_unconfirmed_seconds"] == 0, u
    assert case.query(delete_hour + " RETURNING work_id") == []
    # with no such slot (dropped, or a wrong name) nothing is deleted
    assert case.query(delete_now.replace("'%s'" % case.slot, "'no_such_slot'")
                      + " RETURNING work_id") == []
    deleted = sorted(r[0] for r in case.query(delete_now + " RETURNING work_id"))
    assert deleted == commit.work_ids


def test_monitoring_queries_match_the_slot(case):
    """Each query of sql/monitoring.sql against the slot the relay holds; the
    figures agree with pg_replication_slots and pg_current_wal_lsn()
    arithmetic within the WAL written between two samples around it."""
    queries = monitoring_queries()
    assert sorted(queries) == ["oldest_unconfirmed_row", "relay_connection", "slot"]
    case.pg.psql(file=MONITORING_SQL, dbname=case.dbname)  # loads as a whole

    case.relay()
    conn = case.connect(autocommit=False)
    commit = insert_rows(conn, [{"work_id": "m-1", "kind": "k", "payload": {}}])
    wait_confirmed(case, commit.lsn_before + 1)
    case.query("ALTER SYSTEM SET max_slot_wal_keep_size = '1GB'")
    case.query("SELECT pg_reload_conf()")
    try:
        wait_until(lambda: case.scalar("SELECT current_setting('max_slot_wal_keep_size')") == "1GB",
                   30, what="max_slot_wal_keep_size reloaded")
        seg = case.scalar("SELECT pg_size_bytes(current_setting('wal_segment_size'))")
        cur_b, restart_b, conf_b, pid_b = slot_sample(case)
        rows = [r for r in run_dict(case, queries["slot"]) if r["slot_name"] == case.slot]
        cur_a, restart_a, conf_a, pid_a = slot_sample(case)
        assert len(rows) == 1, rows
        s = rows[0]
        assert s["active"] is True and s["active_pid"] == pid_b == pid_a, (s, pid_b, pid_a)
        assert s["wal_status"] == "reserved", s
        cur, restart, conf = (parse_lsn(s["current_lsn"]), parse_lsn(s["restart_lsn"]),
                              parse_lsn(s["confirmed_flush_lsn"]))
        assert cur_b <= cur <= cur_a and restart_b <= restart <= restart_a \
            and conf_b <= conf <= conf_a, (s, cur_b, cur_a)
        assert cur_b - restart_a <= s["retained_bytes"] <= cur_a - restart_b, s
        assert cur_b - conf_a <= s["lag_bytes"] <= cur_a - conf_b, s
        assert 0 <= s["lag_bytes"] <= s["retained_bytes"], s
        keep = 1 << 30
        assert s["max_slot_wal_keep_bytes"] == keep, s
        assert abs(float(s["retained_pct_of_keep_size"]) - 100.0 * float(s["retained_bytes"]) / keep) \
            <= 0.05 + 100.0 * (cur_a - cur_b) / keep, s
        assert abs(s["safe_wal_size"] - (keep - s["retained_bytes"])) <= 2 * seg, (s, seg)

        rows = [r for r in run_dict(case, queries["relay_connection"])
                if r["slot_name"] == case.slot]
        assert len(rows) == 1, rows
        c = rows[0]
        assert c["pid"] == pid_a and c["state"] == "streaming", c
        # the relay runs with -s 1: a status update at least every second
        assert 0 <= c["seconds_since_reply"] < 10, c
        assert c["sent_not_confirmed_bytes"] >= 0
        assert parse_lsn(c["flush_lsn"]) <= parse_lsn(c["sent_lsn"]) <= case.pg.current_wal_lsn()

        u = unconfirmed(case)
        assert u["unconfirmed_rows"] in (0, 1), u  # m-1 until catalog_xmin passes it
        nudge_until(case, lambda: unconfirmed(case)["unconfirmed_rows"] == 0,
                    what="catalog_xmin past m-1")
        # max_slot_wal_keep_size = 0 has no percentage, rather than a division by zero
        case.query("ALTER SYSTEM SET max_slot_wal_keep_size = 0")
        case.query("SELECT pg_reload_conf()")
        wait_until(lambda: case.scalar("SELECT current_setting('max_slot_wal_keep_size')") == "0",
                   30, what="max_slot_wal_keep_size 0 reloaded")
        rows = [r for r in run_dict(case, queries["slot"]) if r["slot_name"] == case.slot]
        assert rows[0]["retained_pct_of_keep_size"] is None, rows
    finally:
        case.query("ALTER SYSTEM RESET max_slot_wal_keep_size")
        case.query("SELECT pg_reload_conf()")


def psql_file(pg, dbname, path, **variables):
    argv = [pg._bin("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", pg.conninfo(dbname)]
    for k, v in variables.items():
        argv += ["-v", "%s=%s" % (k, v)]
    return procs.run(argv + ["-f", path], timeout=60).stdout


def test_role_runs_the_relay_with_a_password_file(case, tmp_path):
    """sql/role.sql's role: SELECT on the outbox and REPLICATION, nothing else;
    it runs the relay end to end (creates the slot, publishes, confirms) with
    its password in a PGPASSFILE and pg_hba.conf lines for its database only
    (the 'replication' keyword line rejects it, and is not needed)."""
    pg = case.pg
    role = "relay_" + case.name[-40:]
    password = secrets.token_urlsafe(24)
    psql_file(pg, case.dbname, ROLE_SQL, relay_role=role)
    psql_file(pg, case.dbname, ROLE_SQL, relay_role=role)  # a second run changes nothing
    case.query(psycopg2.sql.SQL("ALTER ROLE {} PASSWORD {}").format(
        psycopg2.sql.Identifier(role), psycopg2.sql.Literal(password)))

    hba = os.path.join(pg.datadir, "pg_hba.conf")
    original = open(hba).read()
    st = os.stat(hba)
    try:
        with open(hba, "w") as f:
            f.write("host replication %s 127.0.0.1/32 reject\n"
                    "host %s %s 127.0.0.1/32 scram-sha-256\n"
                    "host all %s 127.0.0.1/32 reject\n" % (role, case.dbname, role, role)
                    + original)
        os.chown(hba, st.st_uid, st.st_gid)
        case.query("SELECT pg_reload_conf()")

        def needs_password():
            try:
                psycopg2.connect(pg.conninfo(case.dbname, user=role, passfile="/nonexistent"),
                                 connect_timeout=5).close()
            except psycopg2.OperationalError as e:
                return "password" in str(e)
            return False
        wait_until(needs_password, 30, interval=0.1, what="pg_hba.conf reloaded")

        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        args = ["-d", pg.conninfo(case.dbname, user=role), "-S", case.slot,
                "-b", case.kafka.bootstrap, "--topic", case.prefix + ".${kind}", "-s", "1",
                "--create-slot"]
        # without the password file: refused, and no slot was created
        rc, out = run_relay(args, env=dict(env, PGPASSFILE=str(tmp_path / "missing")))
        assert rc == EXIT_RUNTIME and "password" in out, (rc, out)
        assert case.slot_info() is None

        passfile = tmp_path / "pgpass"
        passfile.write_text("%s:%d:%s:%s:%s\n" % (pg.host, pg.port, case.dbname, role, password))
        passfile.chmod(0o600)
        relay = harness.RelayProcess(args, os.path.join(case.env.base_dir, case.name + "-role.log"),
                                     env=dict(env, PGPASSFILE=str(passfile)))
        case.relays.append(relay)
        relay.start()
        relay.wait_ready(pg, case.slot)
        reader = case.reader()
        conn = case.connect(autocommit=False)
        commit = insert_rows(conn, [{"work_id": "order-103-ack", "kind": "order_received",
                                     "payload": ORDER}])
        assert reader.read_until(has_ids(["order-103-ack"]), 30), case.logs()
        wait_confirmed(case, commit.lsn_before + 1)
        assert case.scalar("SELECT usename FROM pg_stat_replication r JOIN pg_replication_slots s "
                           "ON s.active_pid = r.pid WHERE s.slot_name = %s", (case.slot,)) == role
        assert relay.stop() == EXIT_OK, relay.log
        assert "password" not in " ".join(relay.args)

        attrs = case.query("SELECT rolsuper, rolcreatedb, rolcreaterole, rolreplication, "
                           "rolbypassrls, rolcanlogin FROM pg_roles WHERE rolname = %s", (role,))
        assert attrs == [(False, False, False, True, False, True)], attrs
        grants = case.query("SELECT table_schema, table_name, privilege_type "
                            "FROM information_schema.role_table_grants WHERE grantee = %s", (role,))
        assert grants == [("public", "outbox", "SELECT")], grants
        for priv in ("INSERT", "UPDATE", "DELETE", "TRUNCATE"):
            assert case.scalar("SELECT has_table_privilege(%s, 'public.outbox', %s)",
                               (role, priv)) is False, priv
        assert case.scalar("SELECT has_schema_privilege(%s, 'public', 'CREATE')", (role,)) is False
        assert case.scalar("SELECT has_database_privilege(%s, current_database(), 'CREATE')",
                           (role,)) is False
    finally:
        with open(hba, "w") as f:
            f.write(original)
        os.chown(hba, st.st_uid, st.st_gid)
        case.query("SELECT pg_reload_conf()")
        for r in case.relays:
            if r.alive:
                r.kill()
        case.query(psycopg2.sql.SQL("DROP OWNED BY {}").format(psycopg2.sql.Identifier(role)))
        pg.query(psycopg2.sql.SQL("DROP ROLE IF EXISTS {}").format(psycopg2.sql.Identifier(role)))


SERVER_SQL = os.path.join(SQL_DIR, "server.sql")


def test_server_sql_prepares_a_stock_server_on_either_minor(case):
    """sql/server.sql (which docker/postgres.Dockerfile runs at init) on a
    server with stock settings: wal_level is set for the next restart, and
    wal2json is added to output_plugin_libraries where the server has that
    setting (15.19 and later minors), keeping the default names; an older
    server, which has no such setting, is left alone. After the restart a
    wal2json slot can be created, and a second run changes nothing."""
    restricted = harness.restricts_output_plugins()
    stock = {"wal_level": "replica", "output_plugin_libraries": None}
    with harness.Environment(kafka=False, pg_settings=stock) as other:
        assert other.pg.scalar("SELECT count(*) FROM pg_settings "
                               "WHERE name = 'output_plugin_libraries'") == int(restricted)
        out = other.pg.psql(file=SERVER_SQL)
        assert "RESTART THE SERVER" in out, out
        if restricted:
            assert "output_plugin_libraries: set to 'pgoutput', 'test_decoding', 'wal2json'" \
                in out, out
            assert other.pg.scalar("SHOW output_plugin_libraries") == \
                "pgoutput, test_decoding, wal2json"
        else:
            assert "has no such setting" in out, out
        other.pg.restart()
        assert other.pg.scalar("SHOW wal_level") == "logical"
        other.pg.query("SELECT pg_create_logical_replication_slot('kit_probe', 'wal2json')")
        other.pg.query("SELECT pg_create_logical_replication_slot('kit_probe2', 'test_decoding')")
        again = other.pg.psql(file=SERVER_SQL)
        assert "ALTER SYSTEM" not in again and "RESTART" not in again, again
        assert "wal_level: logical" in again, again


def test_server_sql_keeps_names_already_listed(case):
    """Where output_plugin_libraries exists and lists other plugins (quoted
    names too), wal2json is added after them; on an older server the setting
    cannot be given at all, so the test asserts the script leaves it out."""
    if not harness.restricts_output_plugins():
        with harness.Environment(kafka=False, pg_settings={"output_plugin_libraries": None}) as other:
            out = other.pg.psql(file=SERVER_SQL)
            assert "has no such setting" in out, out
            assert other.pg.scalar("SELECT count(*) FROM pg_file_settings "
                                   "WHERE name = 'output_plugin_libraries'") == 0
        return
    settings = {"output_plugin_libraries": "'pgoutput, \"my plugin\"'"}
    with harness.Environment(kafka=False, pg_settings=settings) as other:
        out = other.pg.psql(file=SERVER_SQL)
        assert other.pg.scalar("SHOW output_plugin_libraries") == \
            'pgoutput, "my plugin", wal2json', out
