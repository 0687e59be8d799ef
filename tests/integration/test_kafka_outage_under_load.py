# SPDX-License-Identifier: Apache-2.0
"""The Kafka broker fails under load.

- killed (SIGKILL) and restarted while clients commit outbox rows: the relay
  keeps running, and once the broker is back every committed work ID arrives;
- frozen (SIGSTOP) for 12 s, longer than a wal_sender_timeout of 5 s, while
  the relay is at its in-flight bound: the relay, started with the default
  status interval of 10 s, must lower it under half the timeout and keep the
  walsender fed, so the walsender's PID never changes; nothing is lost.

Both use a second broker of their own (harness.faults.spare_broker), so the
shared one keeps serving the other tests. Duplicates are printed; each must be
a transaction unconfirmed when the broker failed.
"""

import re

import harness
import pytest
from harness import EXIT_OK, format_lsn, insert_rows, procs, simple_rows
from harness.faults import (BROKER_START_S, NO_TIMEOUT, Load, collector, heal_broker, mark,
                            metrics_args, observe, say, sized, spare_broker, start_relay, verify,
                            wal_sender_timeout)
from harness.http import scrape

ROWS = sized(8000, 30000)
RATE = 600
FREEZE_S = 12


@pytest.fixture
def broker(env):
    b = spare_broker(env)
    yield b
    heal_broker(b)


def test_broker_killed_and_restarted_during_load(case, broker):
    coll = collector(case, broker=broker)
    port, margs = metrics_args()
    relay = start_relay(case, *NO_TIMEOUT, *margs, brokers=broker.bootstrap)
    load = Load(case, "bkill", ROWS, rate=RATE).start()
    try:
        load.wait_rows(ROWS // 4, 300, tick=coll.poll, relays=[relay])
        marks = [mark(case, coll, "broker SIGKILL")]
        broker.kill()
        # the broker stays dead while a quarter of the load is committed
        load.wait_rows(ROWS // 2, 300, relays=[relay])
        say("broker down for %d rows; relay outstanding messages: %s" % (
            load.committed - ROWS // 4, scrape(port).get("outbox_relay_outstanding_messages")))
        broker.start(timeout=BROKER_START_S)
        expected = load.finish(tick=coll.poll, relays=[relay])
    finally:
        load.stop()
        heal_broker(broker)
    verify(case, coll, expected, marks, "broker_kill", relays=[relay])
    m = scrape(port)
    say("relay metrics after the broker kill: %s" % {n: m[n] for n in m.names() if n.endswith(
        ("reconnects_total", "producer_restarts_total", "stream_starts_total"))})
    assert relay.stop() == EXIT_OK, relay.log


def test_broker_frozen_longer_than_wal_sender_timeout(case, broker):
    coll = collector(case, broker=broker)
    with wal_sender_timeout(case.pg, "5s"):
        # default status interval (10 s): the relay must lower it below 2.5 s itself
        port, margs = metrics_args()
        relay = start_relay(case, *NO_TIMEOUT, *margs, "--max-inflight-messages", "300",
                            brokers=broker.bootstrap, status_interval=10)
        load = Load(case, "bfreeze", ROWS, rate=RATE).start()
        try:
            load.wait_rows(ROWS // 4, 300, tick=coll.poll, relays=[relay])
            walsender = case.slot_info()["active_pid"]
            marks = [mark(case, coll, "broker SIGSTOP")]
            broker.freeze()
            frozen_at = load.committed
            samples = []

            def still_streaming():
                s = case.slot_info()
                assert relay.alive, "relay exited with %s while the broker was frozen\n%s" % (
                    relay.returncode, relay.log)
                assert s["active"] and s["active_pid"] == walsender, \
                    "walsender %s replaced by %r while the broker was frozen (wal_sender_timeout " \
                    "5 s)\n%s" % (walsender, s, case.logs())
                samples.append(s["confirmed_flush_lsn"])
            observe(FREEZE_S, still_streaming)
            assert len(samples) > 20
            outstanding = scrape(port)["outbox_relay_outstanding_messages"]
            say("broker frozen %d s while %d rows were committed; %d messages outstanding; slot "
                "confirmed %s -> %s" % (FREEZE_S, load.committed - frozen_at, outstanding,
                                        format_lsn(samples[0]), format_lsn(samples[-1])))
            assert outstanding > 0, "nothing was waiting for the frozen broker"
            broker.thaw()
            expected = load.finish(tick=coll.poll, relays=[relay])
        finally:
            load.stop()
            heal_broker(broker)
        verify(case, coll, expected, marks, "broker_freeze", relays=[relay])
        assert case.slot_info()["active_pid"] == walsender, "the walsender changed after the freeze"
        # what the walsender's PID proved, the log should say too
        assert "status interval lowered" in relay.log, \
            "the relay did not log lowering its status interval under half of " \
            "wal_sender_timeout\n" + relay.log
        assert relay.stop() == EXIT_OK, relay.log


def test_dead_letter_on_a_full_queue_keeps_the_walsender(case, broker):
    """The one wait (issue 11): librdkafka's queue full (-X
    queue.buffering.max.messages=10, the broker frozen) just when a row must
    go to the dead-letter topic. The dead-letter publish waits like every
    other wait, sending standby status updates, so a walsender with
    wal_sender_timeout=5s keeps its connection (the old wait there polled
    nothing for up to 30 s). Once the broker thaws, every row arrives and the
    bad one is on the dead-letter topic."""
    dead = case.prefix + ".dead"
    with wal_sender_timeout(case.pg, "5s"):
        relay = start_relay(case, "-X", "queue.buffering.max.messages=10", "--on-error=dead-letter",
                            "--dead-letter-topic", dead, brokers=broker.bootstrap)
        walsender = case.slot_info()["active_pid"]
        try:
            broker.freeze()
            conn = case.connect(autocommit=False)
            insert_rows(conn, simple_rows("full", 10))            # fills the queue
            insert_rows(conn, [{"work_id": "bad-1", "kind": "bad kind!", "payload": {}}])
            insert_rows(conn, simple_rows("after", 5))
            conn.close()

            def same_walsender():
                s = case.slot_info()
                assert relay.alive, "relay exited with %s\n%s" % (relay.returncode, relay.log)
                assert s["active"] and s["active_pid"] == walsender, \
                    "walsender %s replaced by %r while the queue was full\n%s" % (
                        walsender, s, relay.log)
            observe(12, same_walsender)
        finally:
            broker.thaw()
        ids = ["full-%d" % i for i in range(10)] + ["after-%d" % i for i in range(5)]
        with harness.TopicReader(broker.bootstrap, [case.topic_pattern, re.escape(dead)]) as rd:
            # CI once saw this reader get nothing for 120 s after the thaw, with every row
            # acknowledged: say what the consumer saw, and what the broker did meanwhile.
            assert rd.read_until(lambda recs: {r.header("ce_id") for r in recs} >=
                                 set(ids) | {"bad-1"}, 120), \
                "read %s; consumer errors %s; assignment %s\n--- broker log:\n%s\n--- relay log:\n%s" % (
                    sorted(r.header("ce_id") for r in rd.records), rd.errors,
                    rd.consumer.assignment(), procs.tail(broker.logfile, 6000), relay.log)
            bad = [r for r in rd.records if r.header("ce_id") == "bad-1"]
        assert bad and bad[0].topic == dead, [r.topic for r in bad]
        assert case.slot_info()["active_pid"] == walsender, "the walsender changed"
        assert relay.stop() == EXIT_OK, relay.log
