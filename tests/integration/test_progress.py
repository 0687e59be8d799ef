# SPDX-License-Identifier: Apache-2.0
"""The slot keeps moving when the outbox is quiet: WAL written by other
tables must not pile up behind an idle relay (the server keeps every WAL
segment from the slot's restart_lsn on)."""

from harness import EXIT_OK, wait_until
from helpers import wait_confirmed


def test_idle_outbox_still_advances_the_slot(case):
    case.query("CREATE TABLE busy (id bigserial PRIMARY KEY, pad text)")
    relay = case.relay()
    start = case.slot_info()
    case.query("INSERT INTO busy (pad) SELECT repeat('b', 500) FROM generate_series(1, 20000)")
    for _ in range(20):
        case.query("INSERT INTO busy (pad) VALUES ('x')")
    target = case.pg.current_wal_lsn()
    assert target - start["confirmed_flush_lsn"] > 10 * 1024 * 1024
    wait_confirmed(case, target, timeout=60)
    # restart_lsn follows once decoding passes a running-xacts record (a
    # checkpoint writes one) and the relay confirms past it again
    def restart_moved():
        case.query("CHECKPOINT")
        case.query("INSERT INTO busy (pad) VALUES ('y')")
        return case.slot_info()["restart_lsn"] > start["restart_lsn"]
    wait_until(restart_moved, 60, interval=1, what="restart_lsn to advance")
    assert relay.alive
    assert relay.stop() == EXIT_OK, relay.log
