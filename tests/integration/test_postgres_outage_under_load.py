# SPDX-License-Identifier: Apache-2.0
"""PostgreSQL fails under the relay while clients commit outbox rows.

- Fast shutdown (`pg_ctl stop -m fast`) during a load must finish within
  15 s, both while every message is acknowledged and while the relay has
  messages Kafka has not acknowledged (its broker frozen): the walsender waits
  for the client to report its position before it exits, and the relay must
  not hold the shutdown up. After the restart the same relay process
  reconnects (with backoff) and delivers everything; in the second case the
  broker stays frozen until 8 s after the reconnect, so the relay has to give
  up on the stuck messages and send them again.
- pg_terminate_backend of the walsender, three times during a load: the same
  relay process reconnects each time, nothing is lost.

Duplicates are printed; each must be a transaction unconfirmed at the fault.
"""

import pytest
from harness import EXIT_OK, wait_until
from harness.faults import (NO_TIMEOUT, Load, collector, heal_broker, mark, metrics_args, observe,
                            pg_ctl_stop_fast, say, sized, spare_broker, start_relay, verify)
from harness.http import scrape

ROWS = sized(6000, 30000)
RATE = 500
SHUTDOWN_LIMIT_S = 15


@pytest.mark.parametrize("broker_state", ["broker_up", "broker_frozen"])
def test_fast_shutdown_during_load(case, env, broker_state):
    broker = spare_broker(env) if broker_state == "broker_frozen" else case.kafka
    coll = collector(case, broker=broker)
    port, margs = metrics_args()
    relay = start_relay(case, *NO_TIMEOUT, *margs, brokers=broker.bootstrap)
    load = Load(case, "fast", ROWS, rate=RATE).start()
    problems = []
    try:
        load.wait_rows(ROWS // 3, 300, tick=coll.poll, relays=[relay])
        walsender = case.slot_info()["active_pid"]
        marks = [mark(case, coll, "fast shutdown")]
        if broker_state == "broker_frozen":
            broker.freeze()
            wait_until(lambda: scrape(port)["outbox_relay_outstanding_messages"] > 0, 30,
                       what="the relay to have unacknowledged messages")
        outstanding = scrape(port)["outbox_relay_outstanding_messages"]
        rc, took, out = pg_ctl_stop_fast(case.pg, SHUTDOWN_LIMIT_S)
        say("pg_ctl stop -m fast: exit %d after %.1f s with %d messages unacknowledged (%s)"
            % (rc, took, outstanding, broker_state))
        case.metric("fast_shutdown_%s_seconds" % broker_state, "%.1f" % took)
        if rc != 0 or took > SHUTDOWN_LIMIT_S:
            problems.append("pg_ctl stop -m fast took %.1f s (exit %d, limit %d s) while the relay "
                            "was connected with %d messages unacknowledged:\n%s"
                            % (took, rc, SHUTDOWN_LIMIT_S, outstanding, out))
        if rc != 0:
            heal_broker(broker)     # let a held-up shutdown finish
        case.pg.stop("fast", timeout=120)       # reaps the postmaster (or finishes the stop)
        assert relay.alive, "relay exited with %s when PostgreSQL stopped\n%s" % (
            relay.returncode, relay.log)
        case.pg.start()
        wait_until(lambda: case.slot_info()["active"], 90, tick=coll.poll,
                   what="the same relay process to reconnect to the restarted server")
        assert case.slot_info()["active_pid"] != walsender
        if broker._frozen:
            # past the relay's wait for late acks after a reconnect: it has to give
            # the stuck messages up and send them again once the broker answers
            def alive():
                assert relay.alive, "relay exited with %s while the broker was frozen\n%s" % (
                    relay.returncode, relay.log)
            observe(8, alive)
            broker.thaw()
        expected = load.finish(tick=coll.poll, relays=[relay])
    finally:
        load.stop()
        heal_broker(broker)
        if not case.pg.running:
            case.pg.start()
    say("writers: %d reconnects, %d rows in doubt" % (load.reconnects, load.in_doubt))
    verify(case, coll, expected, marks, "fast_shutdown_%s" % broker_state,
           relays=[relay])
    m = scrape(port)
    say("relay: %d reconnects, %d producer restarts" % (
        m["outbox_relay_reconnects_total"], m["outbox_relay_producer_restarts_total"]))
    assert m["outbox_relay_reconnects_total"] >= 1, "the relay never reconnected?"
    assert relay.stop() == EXIT_OK, relay.log
    assert not problems, "\n".join(problems)


def test_walsender_terminated_during_load(case):
    coll = collector(case)
    port, margs = metrics_args()
    relay = start_relay(case, *NO_TIMEOUT, *margs)
    load = Load(case, "term", ROWS, rate=RATE).start()
    marks = []
    try:
        for k in (1, 2, 3):
            load.wait_rows(ROWS * k // 4, 300, tick=coll.poll, relays=[relay])
            walsender = wait_until(lambda: case.slot_info()["active_pid"], 60,
                                   what="the relay to stream again", tick=coll.poll)
            marks.append(mark(case, coll, "pg_terminate_backend %d" % k))
            assert case.pg.scalar("SELECT pg_terminate_backend(%s)", (walsender,))
            wait_until(lambda: case.slot_info()["active_pid"] not in (None, walsender), 60,
                       what="the relay to reconnect after pg_terminate_backend", tick=coll.poll)
        expected = load.finish(tick=coll.poll, relays=[relay])
    finally:
        load.stop()
    verify(case, coll, expected, marks, "walsender_terminated", relays=[relay])
    reconnects = scrape(port)["outbox_relay_reconnects_total"]
    say("relay reconnects: %d" % reconnects)
    assert reconnects >= 3
    assert relay.stop() == EXIT_OK, relay.log
