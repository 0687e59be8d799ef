# SPDX-License-Identifier: Apache-2.0
"""The runbook's procedures (outbox-relay(7), RUNBOOK), done as written: a lost slot, a row
that stops the relay (exit 4), relay failover. ("Kafka is down" is
test_ops_alerts.py's drill.)

A lost slot (dropped, invalidated, or missing on a promoted standby) loses
the WAL of every row not yet published. The relay refuses to create a new
slot by itself (exit 3); the operator creates one with `outbox-relay slot
create` and republishes the rows written since before the incident by
deleting and re-inserting them in one statement, which PostgreSQL logs as
fresh inserts. Every row must then reach Kafka; rows sent twice are allowed
(consumers deduplicate by work ID), rows missing are not.
"""

import re
import time

import ops_helpers as ops
from harness import docs
from harness import (EXIT_ENV, EXIT_OK, EXIT_UNPUBLISHABLE, by_id, format_lsn, free_port, has_ids,
                     insert_rows, parse_lsn, procs, run_relay, simple_rows, wait_confirmed)
from harness.http import scrape, wait_http

REPUBLISH = ("WITH gone AS (DELETE FROM outbox WHERE created_at >= %s RETURNING *) "
             "INSERT INTO outbox SELECT * FROM gone")


def test_lost_slot_recovery(case):
    reader = case.reader()
    relay = case.relay()
    conn = case.connect(autocommit=False)
    before = insert_rows(conn, simple_rows("before", 3))
    assert reader.read_until(has_ids(before.work_ids), 30), case.logs()
    wait_confirmed(case, before.lsn_before)
    assert relay.stop() == EXIT_OK, relay.log

    # the incident: rows committed while no relay runs, then the slot is lost
    incident = case.scalar("SELECT clock_timestamp()")
    during = insert_rows(conn, simple_rows("during", 4))
    case.pg.drop_slot(case.slot)

    # the relay will not paper over it
    rc, out = run_relay(case.relay_args(create_slot=False), timeout=60)
    assert rc == EXIT_ENV, out
    assert case.slot in out and "--create-slot" in out, out

    # the runbook: a new slot, then republish everything since the incident
    rc, out = run_relay(["slot", "create", "-d", case.dsn, "-S", case.slot, "-b", case.kafka.bootstrap],
                        timeout=60)
    assert rc == EXIT_OK, out
    cur = conn.cursor()
    cur.execute(REPUBLISH, (incident,))
    assert cur.rowcount == 4
    conn.commit()
    relay2 = case.relay(create_slot=False)
    after = insert_rows(conn, simple_rows("after", 2))

    want = before.work_ids + during.work_ids + after.work_ids
    assert reader.read_until(has_ids(want), 60), case.logs()
    assert relay2.stop() == EXIT_OK, relay2.log
    assert reader.drain(timeout=10)
    counts = {k: len(v) for k, v in by_id(reader.records).items()}
    # nothing lost; the rows before the incident were not sent again
    assert set(counts) == set(want), counts
    assert all(counts[w] == 1 for w in before.work_ids), counts


def runbook_sql(table):
    """The RUNBOOK's republishing statement for table, as written, with its
    time as a parameter."""
    text = docs.unescape(docs.section("outbox-relay.7", "RUNBOOK"))
    blocks = re.findall(r"```\n(.*?)```", text, re.S)
    sql = [b for b in blocks if "WITH gone AS (DELETE FROM %s\n" % table in b or
           "WITH gone AS (DELETE FROM %s " % table in b]
    assert len(sql) == 1, blocks
    return sql[0].replace("'2026-11-30 06:00+00'", "%s").rstrip().rstrip(";")


def test_lost_slot_recovery_on_debeziums_table(case):
    """The lost-slot runbook on Debezium's documented table, which has no
    created_at: its statement for such a table, as written, republishes the
    rows committed since the incident (by commit time) and no others."""
    case.query("CREATE TABLE outboxevent (id uuid NOT NULL PRIMARY KEY, aggregatetype "
               "varchar(255) NOT NULL, aggregateid varchar(255) NOT NULL, type varchar(255) NOT "
               "NULL, payload jsonb, tracingspancontext varchar(256))")
    opts = ("--preset", "debezium", "-t", "public.outboxevent",
            "--topic", case.prefix + ".${aggregatetype}")
    insert = ("INSERT INTO outboxevent (id, aggregatetype, aggregateid, type, payload) VALUES "
              "(gen_random_uuid(), 'order', %s, 'order_received', '{}') RETURNING id::text")
    reader = case.reader([case.prefix + ".order"])
    relay = case.relay(*opts)
    conn = case.connect(autocommit=True)
    cur = conn.cursor()
    cur.execute(insert, ("before",))
    before = cur.fetchone()[0]
    assert reader.read_until(lambda recs: before in {r.header("id") for r in recs}, 30), case.logs()
    wait_confirmed(case, parse_lsn(case.scalar("SELECT pg_current_wal_lsn()::text")))
    assert relay.stop() == EXIT_OK, relay.log

    incident = case.scalar("SELECT clock_timestamp()")
    during = []
    for i in range(3):
        cur.execute(insert, ("during-%d" % i,))
        during.append(cur.fetchone()[0])
    case.pg.drop_slot(case.slot)
    rc, out = run_relay(["slot", "create", "-d", case.dsn, "-S", case.slot, "-b",
                         case.kafka.bootstrap] + list(opts), timeout=60)
    assert rc == EXIT_OK, out
    cur.execute(runbook_sql("outboxevent"), (incident,))
    assert cur.rowcount == 3
    relay2 = case.relay(*opts, create_slot=False)
    assert reader.read_until(lambda recs: set(during) <= {r.header("id") for r in recs}, 60), \
        case.logs()
    assert relay2.stop() == EXIT_OK, relay2.log
    assert reader.drain(timeout=10)
    ids = [r.header("id") for r in reader.records]
    assert ids.count(before) == 1 and all(ids.count(d) == 1 for d in during), ids


def stop_summary(log):
    """The numbers of the relay's last "stopped:" line."""
    line = [l for l in log.splitlines() if "info: stopped: " in l][-1]
    m = re.search(r"stopped: (\d+) messages handed to Kafka \((\d+) rows, (\d+) dead-letter copies\) "
                  r"= (\d+) acknowledged \+ (\d+) refused or failed \+ (\d+) without a "
                  r"delivery report", line)
    assert m, line
    handed, rows, dl, acked, failed, unreported = map(int, m.groups())
    assert handed == rows + dl == acked + failed + unreported, line
    return dict(handed=handed, rows=rows, dead_lettered=dl, acked=acked, failed=failed,
                unreported=unreported)


def test_row_stops_relay_drill(case):
    """The runbook's "A row stops the relay (exit 4)", as written. The alerts that
    page are the ones that outlive the exit (the scrape fails, the slot is
    inactive with lag); check predicts the stop; fixing the row in the table
    does not help (the relay re-reads the committed INSERT) and each start
    re-sends the transaction's earlier row; the remedy and a corrected row
    inserted again work; a remedy left in place warns."""
    port = free_port()
    reader = case.reader()
    relay = case.relay("--http", "127.0.0.1:%d" % port)
    wait_http(port, "/readyz", 200, 30, "ready")
    conn = case.connect(autocommit=False)
    ok = insert_rows(conn, simple_rows(case.name + "-ok", 1))
    assert reader.read_until(has_ids(ok.work_ids), 30), case.logs()
    wait_confirmed(case, ok.lsn_before)
    ops.evaluate(ops.Snapshot(case, [port]), fires=set())

    good, bad = case.name + "-good", case.name + "-bad"
    txn = insert_rows(conn, [{"work_id": good, "kind": "fine", "payload": {"n": 1}},
                             {"work_id": bad, "kind": "no such/kind", "payload": {"n": 2}}])
    assert relay.wait(60) == EXIT_UNPUBLISHABLE, relay.log
    error = [l for l in relay.log.splitlines() if "error: cannot publish the row" in l][-1]
    lsn = format_lsn(txn_end_lsn(error))
    assert bad in error and "--dead-letter-transaction=%s" % lsn in error, error
    assert "fix the row" not in error and "changing it in the table changes nothing" in error, error
    # what pages after the exit
    ops.evaluate(ops.Snapshot(case, [port], gap=1),
                fires={"OutboxRelayDown", "OutboxRelaySlotInactive"})
    # check says the same start would stop
    rc, out = run_relay(["check"] + case.relay_args(create_slot=False), timeout=60)
    assert rc == EXIT_ENV and re.search(r"^FAIL  values of .*no valid topic name", out, re.M), out

    # "fix the row and restart" does not work
    case.query("UPDATE outbox SET kind = 'fixed' WHERE work_id = %s", (bad,))
    rc, out = run_relay(case.relay_args(create_slot=False), timeout=60)
    assert rc == EXIT_UNPUBLISHABLE and bad in out, out

    # the remedy the message names, then the corrected row inserted again
    relay2 = case.relay("--dead-letter-transaction=%s" % lsn, "--dead-letter-topic",
                        case.topic("dead"), create_slot=False)
    wait_confirmed(case, txn.lsn_before, timeout=60)
    assert re.search(r"as requested with --dead-letter-transaction by user", relay2.log), relay2.log
    cur = conn.cursor()
    cur.execute("DELETE FROM outbox WHERE work_id = %s", (bad,))
    fixed = insert_rows(conn, [{"work_id": bad, "kind": "fine", "payload": {"n": 2}}])
    assert reader.read_until(lambda rs: [r for r in rs if r.header("ce_id") == bad and
                                         r.topic == case.topic("fine")], 60), case.logs()
    wait_confirmed(case, fixed.lsn_before)
    assert relay2.stop() == EXIT_OK, relay2.log
    summary = stop_summary(relay2.log)
    assert summary == dict(handed=3, rows=2, dead_lettered=1, acked=3, failed=0, unreported=0), \
        relay2.log
    assert reader.read_until(lambda rs: [r for r in rs if r.header("ce_id") == bad and
                                         r.topic == case.topic("dead")], 60), case.logs()
    assert reader.drain(timeout=10)
    records = by_id(reader.records)
    # the good row of the stuck transaction went out once per start: three starts
    assert len(records[good]) == 3, {k: len(v) for k, v in records.items()}
    assert [r.topic for r in records[bad]].count(case.topic("dead")) == 1, records[bad]

    # a remedy left in place: the next start says to remove it
    relay3 = case.relay("--dead-letter-transaction=%s" % lsn, create_slot=False)
    procs.wait_until(lambda: "has no effect" in relay3.log, 30, what="the stale remedy warning")
    assert re.search(r"warning: --dead-letter-transaction=%s has no effect: .*remove the option"
                     % re.escape(lsn), relay3.log), relay3.log
    assert relay3.stop() == EXIT_OK, relay3.log


def txn_end_lsn(line):
    return parse_lsn(re.search(r"ending at LSN ([0-9A-F]+/[0-9A-F]+)", line).group(1))


def test_relay_failover_drill(case):
    """The runbook's "Relay failover", as written: a second relay with the same
    options waits as a warm standby and takes over when the first stops.
    Neither fires an alert while both run (the standby is not ready by
    design, and its looks are not reconnects); a standby alone (the slot held
    by a process nobody scrapes) fires NoActiveRelay. The standby says so in
    its log once, not every look."""
    p1, p2 = free_port(), free_port()
    active = case.relay("--http", "127.0.0.1:%d" % p1)
    wait_http(p1, "/readyz", 200, 30, "ready")
    # the start says what runs and from where: version, settings, slot, brokers, HTTP; slot position
    version = run_relay(["--version"])[1].splitlines()[0].split()[-1]
    assert re.search(r"info: outbox-relay %s starting \(pid \d+\): settings from the command line, "
                      r"\d+ OUTBOX_RELAY_\* environment variables?; slot \"%s\", brokers \"%s\", "
                      r"HTTP on 127.0.0.1:%d" % (re.escape(version), case.slot,
                                                 re.escape(case.kafka.bootstrap), p1),
                      active.log), active.log
    assert 'slot "%s" of database "%s": created now' % (case.slot, case.dbname) in active.log
    standby = case.relay("--http", "127.0.0.1:%d" % p2, create_slot=False, ready=False)
    wait_http(p2, "/readyz", 503, 60, "standby")
    assert re.search(r'slot "%s" of database "%s": resuming at confirmed_flush_lsn [0-9A-F]+/[0-9A-F]+'
                     % (case.slot, case.dbname), standby.log), standby.log

    def looks(first):
        n = first[p2]["outbox_relay_standby_checks_total"]
        procs.wait_until(lambda: scrape(p2)["outbox_relay_standby_checks_total"] >= n + 3,
                         30, interval=0.2, what="three more looks of the standby")
    both = ops.Snapshot(case, [p1, p2], between=looks, sustained=True)
    assert both.second[p2].value("outbox_relay_role", role="standby") == 1
    assert both.second[p2]["outbox_relay_reconnects_total"] == 0
    assert both.second[p1].value("outbox_relay_role", role="active") == 1
    ops.evaluate(both, fires=set())
    ops.evaluate(ops.Snapshot(case, [p2], gap=1), fires={"OutboxRelayNoActiveRelay"})
    waiting = [l for l in standby.log.splitlines() if "warm standby" in l]
    assert len(waiting) == 1, "\n".join(waiting)
    assert "in use by PID %d" % case.slot_info()["active_pid"] in waiting[0], waiting[0]

    t0 = time.monotonic()
    assert active.stop() == EXIT_OK, active.log
    wait_http(p2, "/readyz", 200, 60, "ready")
    case.metric("failover_s", "%.1f" % (time.monotonic() - t0), "s")
    assert len([l for l in standby.log.splitlines() if "taking over after" in l]) == 1, standby.log
    reader = case.reader()
    conn = case.connect(autocommit=False)
    after = insert_rows(conn, simple_rows(case.name + "-after", 2))
    assert reader.read_until(has_ids(after.work_ids), 60), case.logs()
    ops.evaluate(ops.Snapshot(case, [p2]), fires=set())
    assert standby.stop() == EXIT_OK, standby.log
