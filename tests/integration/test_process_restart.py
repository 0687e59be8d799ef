# SPDX-License-Identifier: Apache-2.0
"""Stopping and restarting the relay.

A clean stop (SIGTERM or SIGINT) after delivery exits 0, and the next run
neither loses a row committed while no relay ran nor sends an acknowledged
transaction again. A crash (SIGKILL) may repeat unconfirmed transactions but
loses nothing and never repeats a confirmed one. A stop that waits for
acknowledgements from a frozen broker waits in poll(), not in a busy loop.
"""

import signal
import time

import pytest
from harness import (EXIT_OK, by_id, delivered_and_confirmed, has_ids, insert_rows, parse_lsn,
                     procs, simple_rows, wait_until)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_clean_stop_and_restart_sends_nothing_twice(case, sig):
    conn = case.connect(autocommit=False)
    reader = case.reader()

    relay = case.relay()
    first = [insert_rows(conn, simple_rows("run1-t%d" % t, n)) for t, n in enumerate([1, 10, 100])]
    ids1 = [w for c in first for w in c.work_ids]
    delivered_and_confirmed(case, reader, ids1)
    assert relay.stop(sig, timeout=30) == EXIT_OK, relay.log
    assert not case.slot_info()["active"]

    # committed while no relay runs
    gap = [insert_rows(conn, simple_rows("gap-t%d" % t, 5)) for t in range(3)]
    relay2 = case.relay(create_slot=False)
    after = [insert_rows(conn, simple_rows("run2-t%d" % t, 5)) for t in range(3)]
    ids2 = [w for c in gap + after for w in c.work_ids]
    delivered_and_confirmed(case, reader, ids2)
    assert relay2.stop(sig, timeout=30) == EXIT_OK, relay2.log

    assert reader.drain(timeout=30)
    counts = {k: len(v) for k, v in by_id(reader.records).items()}
    assert counts == {wid: 1 for wid in ids1 + ids2}, \
        "per work ID counts differ: %r" % {k: v for k, v in counts.items() if v != 1}


def test_stop_while_idle_exits_promptly(case):
    relay = case.relay()
    assert relay.stop(signal.SIGTERM, timeout=15) == EXIT_OK, relay.log


@pytest.mark.smoke
def test_sigkill_loses_nothing_and_repeats_no_confirmed_transaction(case):
    conn = case.connect(autocommit=False)
    reader = case.reader()
    relay = case.relay()
    commits = [insert_rows(conn, simple_rows("k-t%d" % t, 10)) for t in range(100)]
    # kill it somewhere in the middle of the stream
    assert reader.read_until(lambda recs: len(recs) >= 200, 60), case.logs()
    relay.kill()
    wait_until(lambda: not case.slot_info()["active"], 30, what="slot released")
    confirmed_at_kill = case.confirmed()

    more = [insert_rows(conn, simple_rows("k2-t%d" % t, 10)) for t in range(10)]
    relay2 = case.relay(create_slot=False)
    ids = [w for c in commits + more for w in c.work_ids]
    delivered_and_confirmed(case, reader, ids)
    assert relay2.stop() == EXIT_OK, relay2.log
    assert reader.drain(timeout=30)

    recs = by_id(reader.records)
    assert set(recs) == set(ids)
    for wid, rs in recs.items():
        lsn = parse_lsn(rs[0].header("ce_pglsn"))
        if lsn <= confirmed_at_kill:
            assert len(rs) == 1, "%s was confirmed (%X) before the kill but sent %d times" % (
                wid, lsn, len(rs))


@pytest.fixture
def broker(own_broker):
    return own_broker


def test_shutdown_drain_does_not_spin(case, broker):
    """SIGTERM with messages waiting on a frozen broker: the relay waits up
    to --shutdown-timeout for their acknowledgements, in poll(), not in a
    busy loop (the stop byte left in the signal pipe must not keep waking it)."""
    relay = case.relay("-v", "--shutdown-timeout", "10", "-X", "message.timeout.ms=300000",
                       brokers=broker.bootstrap)
    conn = case.connect(autocommit=False)
    reader = case.reader([case.topic("sd")], bootstrap=broker.bootstrap)
    warm = insert_rows(conn, simple_rows("sd-warm", 1, kind="sd"))
    assert reader.read_until(has_ids(warm.work_ids), 60), case.logs()
    broker.freeze()
    try:
        insert_rows(conn, simple_rows("sd", 3, kind="sd"))
        procs.wait_until(lambda: 'published work ID "sd-2"' in relay.log, 30,
                         what="rows handed over")
        relay.proc.send_signal(signal.SIGTERM)
        procs.wait_until(lambda: "stopping: waiting up to" in relay.log, 30, what="the drain")
        cpu0, wall0 = procs.cpu_seconds(relay.pid), time.monotonic()
        # poll until 5 s of the 10 s drain went by, the relay still waiting
        procs.wait_until(lambda: time.monotonic() - wall0 >= 5, 10, interval=0.5, what="5 s")
        assert relay.alive, relay.log
        cpu, wall = procs.cpu_seconds(relay.pid) - cpu0, time.monotonic() - wall0
        assert cpu < 0.3 * wall, "relay used %.1f s of CPU in %.1f s of drain" % (cpu, wall)
    finally:
        broker.thaw()
    assert relay.wait(60) == EXIT_OK, relay.log
