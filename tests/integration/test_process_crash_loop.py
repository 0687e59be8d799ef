# SPDX-License-Identifier: Apache-2.0
"""Crash loop: several clients commit outbox rows while the relay is killed
with SIGKILL at random moments and restarted each time. Every committed work
ID must arrive at least once; every duplicate must be a transaction that was
unconfirmed when the kill that preceded its second copy hit (the slot's
confirmed_flush_lsn and the topic's high watermarks are read after each kill);
the number of duplicates is printed. Then a clean SIGTERM stop and restart
must send nothing twice.

Sizes: 30,000 rows and 8 kills by default; OUTBOX_RELAY_SOAK=1 runs the full
100,000 rows and 20 kills. OUTBOX_RELAY_FAULT_SEED fixes the kill moments.
"""

import random

from harness import EXIT_OK, wait_until
from harness.faults import (NO_TIMEOUT, Load, collector, mark, say, seed, sigkill, sized,
                            start_relay, verify)

ROWS = sized(30000, 100000)
KILLS = sized(8, 20)
RATE = sized(900, 1500)          # rows/s from all writers together
# batches wait up to 100 ms for more messages, so a kill usually finds some
# handed to the producer and not yet acknowledged
RELAY_ARGS = NO_TIMEOUT + ["-X", "linger.ms=100"]


def test_crash_loop(case):
    s = seed()
    rng = random.Random(s)
    say("crash loop: %d rows, %d kills, seed %d (OUTBOX_RELAY_FAULT_SEED)" % (ROWS, KILLS, s))
    coll = collector(case)
    relay = start_relay(case, *RELAY_ARGS)
    load = Load(case, "crash", ROWS, writers=4, rate=RATE, rng=rng).start()
    marks = []
    try:
        # random moments, as points in the load's progress
        moments = sorted(rng.randint(ROWS // 40, ROWS - ROWS // 20) for _ in range(KILLS))
        for k, at in enumerate(moments):
            load.wait_rows(at, 600, tick=coll.poll, relays=[relay])
            sigkill(relay)
            wait_until(lambda: not case.slot_info()["active"], 60, what="the slot to be released",
                       tick=coll.poll)
            marks.append(mark(case, coll, "kill %d at %d rows" % (k + 1, load.committed),
                              exact=True))
            relay = start_relay(case, *RELAY_ARGS, create_slot=False)
        expected = load.finish(tick=coll.poll, relays=[relay])
    finally:
        load.stop()
    say("writers: %d rows committed in %.1f s, %d rolled back" % (
        len(expected), load.finished_at - load.started_at, len(load.rolled_back)))
    dups = verify(case, coll, expected, marks, "crash_loop", relays=[relay])
    assert not set(load.rolled_back) & set(coll.ids()), "rolled-back rows were published"

    # a clean stop confirms everything acknowledged: the next run repeats nothing
    assert relay.stop() == EXIT_OK, relay.log
    clean = mark(case, coll, "SIGTERM", exact=True)
    relay = start_relay(case, create_slot=False)
    more = Load(case, "clean", 600, writers=2, rate=600).start()
    try:
        expected2 = more.finish(tick=coll.poll, relays=[relay])
    finally:
        more.stop()
    dups2 = verify(case, coll, expected | expected2, marks + [clean], "crash_loop_clean_restart",
                   relays=[relay])
    case.metric("crash_loop_clean_restart_new_duplicates", dups2 - dups)
    assert dups2 == dups, "the run after a clean stop sent %d records twice" % (dups2 - dups)
    assert relay.stop() == EXIT_OK, relay.log
