# SPDX-License-Identifier: Apache-2.0
"""A fast shutdown of PostgreSQL while the relay is far from it.

The walsender of a stopping server asks for a reply again as soon as one
arrives, until the client confirms everything it sent (WalSndDone() in
walsender.c). With a message Kafka has not acknowledged (the broker frozen)
the relay cannot confirm: it has to recognize the shutdown, give acks a grace
period and end the stream, or `pg_ctl stop -m fast` waits forever. Through a
link that holds what the server sends for 250 ms (a relay in another region,
or one short of CPU) those requests arrive 250 ms apart: the relay must still
recognize them, and the shutdown must finish within 15 s.

With `side_connection_stalls`, the side connection's reconnect after the
shutdown terminated it hangs halfway (tests/harness/netdelay.py): its backend
waits for a startup packet, and the server waits for that backend. When the
stream ends the relay must close that attempt rather than leave it hanging
until authentication_timeout (60 s).

Either way the unacknowledged message is sent again after the restart.
"""

import pytest
from harness import EXIT_OK, insert_rows, wait_until
from harness.faults import (KIND, NO_TIMEOUT, collector, heal_broker, metrics_args,
                            pg_ctl_stop_fast, say, spare_broker, start_relay)
from harness.http import scrape
from harness.netdelay import DelayProxy

SHUTDOWN_LIMIT_S = 15
DELAY_S = 0.25


@pytest.mark.parametrize("link", ["250ms_away", "side_connection_stalls"])
def test_fast_shutdown_with_the_relay_far_away(case, env, link):
    broker = spare_broker(env)
    coll = collector(case, broker=broker)
    proxy = DelayProxy(case.pg.host, case.pg.port)
    port, margs = metrics_args()
    far = case.pg.conninfo(case.dbname, port=proxy.port, sslmode="disable", gssencmode="disable")
    relay = start_relay(case, *NO_TIMEOUT, *margs, "-d", far, brokers=broker.bootstrap)
    try:
        conn = case.connect(autocommit=False)
        insert_rows(conn, [{"work_id": "far-1", "kind": KIND, "payload": {"n": 1}}])
        wait_until(lambda: "far-1" in coll.ids(), 60, what="the first row", tick=coll.poll)
        broker.freeze()
        insert_rows(conn, [{"work_id": "far-2", "kind": KIND, "payload": {"n": 2}}])
        conn.close()
        wait_until(lambda: scrape(port)["outbox_relay_outstanding_messages"] > 0, 30,
                   what="the relay to hand the second row to the frozen broker")
        proxy.delay = DELAY_S
        proxy.stall_ordinary = link == "side_connection_stalls"
        rc, took, out = pg_ctl_stop_fast(case.pg, SHUTDOWN_LIMIT_S)
        proxy.stall_ordinary = False
        say("pg_ctl stop -m fast with the relay %d ms away (%s) and a message unacknowledged: "
            "exit %d after %.1f s; %d side connection attempts stalled"
            % (DELAY_S * 1000, link, rc, took, proxy.stalled))
        case.metric("fast_shutdown_%s_seconds" % link, "%.1f" % took)
        heal_broker(broker)     # let a held-up shutdown finish
        case.pg.stop("fast", timeout=120)
        assert rc == 0 and took <= SHUTDOWN_LIMIT_S, (
            "pg_ctl stop -m fast took %.1f s (exit %d, limit %d s) with the relay %d ms "
            "away (%s):\n%s\n%s" % (took, rc, SHUTDOWN_LIMIT_S, DELAY_S * 1000, link, out,
                                    case.logs()))
        assert "the server is shutting down" in relay.log, relay.log
        if link == "side_connection_stalls":
            assert proxy.stalled >= 1, "the side connection never tried to reconnect during the " \
                "shutdown: nothing stalled, the case was not tried\n" + relay.log
        proxy.delay = 0
        case.pg.start()
        wait_until(lambda: "far-2" in coll.ids(), 120, tick=coll.poll,
                   what="the unacknowledged row to be sent again after the restart")
        assert relay.stop() == EXIT_OK, relay.log
    finally:
        heal_broker(broker)
        if not case.pg.running:
            case.pg.start()
        proxy.close()
