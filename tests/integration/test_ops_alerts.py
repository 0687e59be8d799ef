# SPDX-License-Identifier: Apache-2.0
"""The alert rules of outbox-relay(7) against the states they name, evaluated by
Prometheus's promtool (see ops_helpers.py): each alert must fire in its
state and stay quiet in the others, a healthy relay and a warm standby
included. Also the log of a broker outage: one line when the brokers go,
one when they return, librdkafka's own lines at debug only.

The Kafka-down drill waits until rows are over a minute old (the guide's first
alert), so it takes about two minutes.
"""

import os
import re

import harness
import ops_helpers as ops
from harness import EXIT_OK, has_ids, insert_rows, procs, simple_rows, wait_confirmed
from harness.http import scrape, wait_http


def test_readme_alerts_have_drills():
    """Every alert of the guide has a test that brings a relay into its state, and
    each named test exists."""
    names = [a["name"] for a in ops.readme_alerts()]
    assert len(names) == len(set(names)), names
    assert set(names) == set(ops.DRILLS), \
        "alerts of the guide without a drill: %s; drills of no alert: %s" % (
            set(names) - set(ops.DRILLS), set(ops.DRILLS) - set(names))
    here = os.path.dirname(os.path.abspath(__file__))
    for name, where in ops.DRILLS.items():
        path, func = where.split("::")
        assert re.search(r"^def %s\(" % func, open(os.path.join(here, path)).read(), re.M), \
            "%s: no test %s" % (name, where)


def test_alerts_can_fail():
    """The evaluation is not vacuous: a healthy relay's metrics with a wrong
    expectation fail."""
    # a snapshot with no relay and no slot: only the rules themselves
    snap = ops.Snapshot.__new__(ops.Snapshot)
    snap.interval_s, snap.series = 10, {'up{instance="x",job="outbox-relay"}': ("gauge", 0, 0)}
    ops.evaluate(snap, fires={"OutboxRelayDown"})
    try:
        ops.evaluate(snap, fires=set())
    except AssertionError as e:
        assert "OutboxRelayDown" in str(e)
    else:
        raise AssertionError("promtool accepted a wrong expectation")


def kafka_lines(log):
    return [l for l in log.splitlines() if re.search(r"outbox-relay: (warning|error): kafka", l)]


def test_kafka_down_drill(case, own_broker):
    """The runbook's "Kafka is down": nothing to do but watch. The relay keeps its
    stream, confirms nothing new, /readyz says why, and the alerts say it:
    rows a minute old (Unpublished), the active relay not ready (NotReady);
    when the brokers return everything goes out, and the delivery that took
    a minute shows in the latency alert. The log says it once each way."""
    port = procs.free_port()
    relay = case.relay("--http", "127.0.0.1:%d" % port, "-X", "message.timeout.ms=600000",
                       brokers=own_broker.bootstrap)
    conn = case.connect(autocommit=False)
    reader = case.reader(bootstrap=own_broker.bootstrap)
    first = insert_rows(conn, simple_rows("kd-before", 2))
    assert reader.read_until(has_ids(first.work_ids), 60), case.logs()
    wait_confirmed(case, first.lsn_before, timeout=60)
    wait_http(port, "/readyz", 200, 30, "ready")
    ops.evaluate(ops.Snapshot(case, [port]), fires=set())

    own_broker.stop()
    wait_http(port, "/readyz", 503, 60, "no Kafka broker")
    during = insert_rows(conn, simple_rows("kd-during", 3))
    procs.wait_until(lambda: scrape(port)["outbox_relay_oldest_unpublished_seconds"] > 62,
                     120, interval=1, what="the rows to be over a minute old")
    ops.evaluate(ops.Snapshot(case, [port]),
                 fires={"OutboxRelayUnpublished", "OutboxRelayNotReady"})
    assert relay.alive, relay.log
    assert case.confirmed() <= during.lsn_pre_commit

    def brokers_back(first_scrape):
        own_broker.start()
        wait_confirmed(case, during.lsn_before, timeout=120)
        wait_http(port, "/readyz", 200, 60, "ready")
    # every delivery taking a minute, as long as the outage lasts
    ops.evaluate(ops.Snapshot(case, [port], between=brokers_back, sustained=True),
                fires={"OutboxRelaySlowDelivery"})
    assert reader.read_until(has_ids(during.work_ids), 60), case.logs()
    assert relay.stop() == EXIT_OK, relay.log

    down = [l for l in relay.log.splitlines() if "all brokers are down" in l]
    back = [l for l in relay.log.splitlines() if "brokers are reachable again" in l]
    assert len(down) == 1 and "warning" in down[0], relay.log
    assert len(back) == 1 and "info" in back[0], relay.log
    # nothing else from Kafka above debug: librdkafka's own lines repeat what the two say
    assert kafka_lines(relay.log) == down, "\n".join(kafka_lines(relay.log))


def test_stream_keeps_breaking(case):
    """A walsender terminated while the relay streams: it reconnects (and
    the reconnects alert fires when that keeps happening)."""
    port = procs.free_port()
    case.relay("--http", "127.0.0.1:%d" % port)
    wait_http(port, "/readyz", 200, 30, "ready")

    def break_stream(first_scrape):
        pid = case.slot_info()["active_pid"]
        case.pg.query("SELECT pg_terminate_backend(%s)", (pid,))
        procs.wait_until(lambda: (case.slot_info() or {}).get("active_pid") not in (None, pid), 30,
                         what="the relay streaming again")
        wait_http(port, "/readyz", 200, 30, "ready")
    snap = ops.Snapshot(case, [port], between=break_stream, sustained=True)
    assert snap.second[port]["outbox_relay_reconnects_total"] == \
        snap.first[port]["outbox_relay_reconnects_total"] + 1
    ops.evaluate(snap, fires={"OutboxRelayReconnecting"})


def test_dead_letter_alert(case):
    """--on-error=dead-letter: a row whose kind gives no topic goes to the
    dead-letter topic, the relay goes on, and the ticket alert fires."""
    port = procs.free_port()
    dl = case.topic("dead")
    case.relay("--http", "127.0.0.1:%d" % port, "--on-error", "dead-letter", "--dead-letter-topic", dl)
    wait_http(port, "/readyz", 200, 30, "ready")
    reader = case.reader()
    conn = case.connect(autocommit=False)

    def bad_row(first_scrape):
        c = insert_rows(conn, [{"work_id": case.name + "-bad", "kind": "no such/kind",
                                "payload": {"n": 1}}])
        assert reader.read_until(has_ids(c.work_ids), 60), case.logs()
        wait_confirmed(case, c.lsn_before)
    snap = ops.Snapshot(case, [port], between=bad_row)
    assert snap.second[port]["outbox_relay_dead_lettered_total"] == 1
    ops.evaluate(snap, fires={"OutboxRelayDeadLettered"})


def test_slot_retention(case):
    """No relay runs and WAL piles up: the slot passes half of
    max_slot_wal_keep_size (retention alert), then all of it (unreserved),
    as sql/monitoring.sql's slot query reports it."""
    rc, out = harness.run_relay(["slot", "create"] + case.relay_args(create_slot=False), timeout=60)
    assert rc == EXIT_OK, out
    case.pg.query("ALTER SYSTEM SET max_slot_wal_keep_size = '64MB'")
    case.pg.query("SELECT pg_reload_conf()")
    try:
        procs.wait_until(lambda: case.pg.scalar("SHOW max_slot_wal_keep_size") == "64MB", 10,
                         what="max_slot_wal_keep_size reloaded")
        conn = case.connect(autocommit=False)

        n = [0]

        def switch_until(pct):
            def more():
                n[0] += 1
                insert_rows(conn, simple_rows("wal", 1, start=n[0]))
                case.pg.query("SELECT pg_switch_wal()")
                row = [r for r in ops.slot_query_rows(case) if r["slot_name"] == case.slot][0]
                return row["retained_pct_of_keep_size"] is not None and \
                    float(row["retained_pct_of_keep_size"]) > pct
            procs.wait_until(more, 60, interval=0, what="the slot past %d %% of its keep size" % pct)
        switch_until(55)
        ops.evaluate(ops.Snapshot(case, [], gap=0),
                    fires={"OutboxRelaySlotRetention", "OutboxRelaySlotInactive"})
        switch_until(101)
        row = [r for r in ops.slot_query_rows(case) if r["slot_name"] == case.slot][0]
        assert row["wal_status"] == "unreserved", row
        ops.evaluate(ops.Snapshot(case, [], gap=0),
                    fires={"OutboxRelaySlotRetention", "OutboxRelaySlotUnreserved",
                           "OutboxRelaySlotInactive"})
    finally:
        case.pg.query("ALTER SYSTEM RESET max_slot_wal_keep_size")
        case.pg.query("SELECT pg_reload_conf()")
