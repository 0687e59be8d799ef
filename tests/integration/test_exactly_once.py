# SPDX-License-Identifier: Apache-2.0
"""--exactly-once (issue 12): for consumers that read with
isolation.level=read_committed, every committed outbox row appears in Kafka
exactly once, across relay crashes, a broker killed and restarted, a relay
killed between its Kafka commit and its slot confirm, a PostgreSQL crash that
moves the slot back, a standby relay taking over (which fences the first),
and a PostgreSQL transaction split over several Kafka transactions.

Each scenario counts work IDs with a read_committed collector
(harness.faults.verify_exactly_once: all there, none twice). A
read_uncommitted collector beside it in the crash loop shows what such a
consumer sees (aborted records too), as outbox-relay(7) says.

Sizes: 20,000 rows and 6 kills by default; OUTBOX_RELAY_SOAK=1 runs 100,000
rows and 20 kills.
"""

import os
import re
import random
import signal
import time

import pytest
from harness import (EXIT_ENV, EXIT_OK, TopicReader, by_id, format_lsn, has_ids, insert_rows,
                     parse_lsn, procs, simple_rows, wait_confirmed, wait_until)
from harness.faults import (KIND, NO_TIMEOUT, Load, collector, heal_broker, say, seed, sigkill, sized,
                            spare_broker, start_relay, verify_exactly_once, wal_sender_timeout)
from check_helpers import check_args, run_check

# tests/run-librdkafka.sh runs these (-m exactly_once) against librdkafka 2.8 too
pytestmark = pytest.mark.exactly_once

# a transactional producer's messages may not outlive its transactions: both long, for the outages
EOS = ["--exactly-once", "-X", "transaction.timeout.ms=900000"] + NO_TIMEOUT
ROWS = sized(20000, 100000)
KILLS = sized(6, 20)
RATE = sized(900, 1500)


def kill_and_wait(case, relay, coll):
    sigkill(relay)
    wait_until(lambda: not case.slot_info()["active"], 60, what="the slot to be released",
               tick=coll.poll)


def test_crash_loop_exactly_once(case):
    s = seed()
    rng = random.Random(s)
    say("exactly-once crash loop: %d rows, %d kills, seed %d" % (ROWS, KILLS, s))
    coll = collector(case, isolation="read_committed")
    raw = collector(case, create=False)
    relay = start_relay(case, *EOS)
    load = Load(case, "eos", ROWS, writers=4, rate=RATE, rng=rng).start()
    try:
        for at in sorted(rng.randint(ROWS // 40, ROWS - ROWS // 20) for _ in range(KILLS)):
            load.wait_rows(at, 600, tick=coll.poll, relays=[relay])
            kill_and_wait(case, relay, coll)
            relay = start_relay(case, *EOS, create_slot=False)
        expected = load.finish(tick=coll.poll, relays=[relay])
    finally:
        load.stop()
    verify_exactly_once(case, coll, expected, "eos_crash_loop", relays=[relay])
    # read_uncommitted sees every copy an aborted transaction wrote too
    raw.drain()
    say("read_uncommitted saw %d records for %d rows" % (raw.count, len(expected)))
    case.metric("eos_crash_loop_read_uncommitted_records", raw.count)
    assert raw.count >= len(expected)
    assert relay.stop() == EXIT_OK, relay.log


def test_broker_killed_and_restarted_exactly_once(case, env):
    broker = spare_broker(env)
    try:
        coll = collector(case, broker=broker, isolation="read_committed")
        relay = start_relay(case, *EOS, brokers=broker.bootstrap)
        n = sized(6000, 30000)
        load = Load(case, "eosb", n, rate=600).start()
        try:
            load.wait_rows(n // 3, 300, tick=coll.poll, relays=[relay])
            broker.kill()
            load.wait_rows(2 * n // 3, 300, relays=[relay])
            broker.start(timeout=240)
            expected = load.finish(tick=coll.poll, relays=[relay])
        finally:
            load.stop()
        verify_exactly_once(case, coll, expected, "eos_broker_kill", relays=[relay])
        assert relay.stop() == EXIT_OK, relay.log
    finally:
        heal_broker(broker)


def newest_checkpoint_lsn(case, bootstrap):
    """The LSN of the newest committed checkpoint of this test's slot."""
    from confluent_kafka import Consumer, TopicPartition, OFFSET_BEGINNING
    import json
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "cp-%s" % case.name,
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    c.assign([TopicPartition("outbox-relay.checkpoints", 0, OFFSET_BEGINNING)])
    lsn = None
    deadline = time.monotonic() + 30
    lo, hi = c.get_watermark_offsets(TopicPartition("outbox-relay.checkpoints", 0), timeout=10)
    while time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error() and m.key().decode().endswith("/" + case.slot):
            lsn = parse_lsn(json.loads(m.value())["lsn"])
        pos = c.position([TopicPartition("outbox-relay.checkpoints", 0)])[0].offset
        if pos >= hi:
            break
    c.close()
    return lsn


def test_killed_between_kafka_commit_and_slot_confirm(case):
    """The walsender is frozen (SIGSTOP), so the relay's standby status updates
    reach nobody while it goes on committing Kafka transactions of what it
    had read; then the relay is killed. The restarted relay finds its
    checkpoint ahead of the slot and sends none of it again.

    So that the relay has something read and not yet confirmed when the
    walsender freezes, whatever the machine's speed, the relay is paused
    (SIGSTOP) while the rows are committed and the walsender sends them into
    the connection's buffers; the walsender is frozen, then the relay goes on
    with what it finds there. (Freezing the walsender once the consumer had
    some rows left no gap when the relay had read and confirmed them all by
    then, as on a loaded machine.)"""
    coll = collector(case, isolation="read_committed")
    relay = start_relay(case, *EOS, "--kafka-transaction-messages=50")
    conn = case.connect(autocommit=False)
    warm = insert_rows(conn, [{"work_id": "gap-warm", "kind": "fault", "payload": {}}])
    wait_until(lambda: "gap-warm" in coll.ids(), 60, what="the first row", tick=coll.poll)
    wait_confirmed(case, warm.lsn_before)
    walsender = case.slot_info()["active_pid"]
    assert walsender is not None and relay.proc.poll() is None, \
        "the relay stopped streaming (its log is below)"
    rows = [{"work_id": "gap-%d" % i, "kind": "fault", "payload": {"n": i}} for i in range(500)]
    os.kill(relay.proc.pid, signal.SIGSTOP)
    try:
        commits = [insert_rows(conn, rows[i:i + 100]) for i in range(0, len(rows), 100)]
        wait_until(lambda: parse_lsn(case.pg.scalar(
            "SELECT sent_lsn::text FROM pg_stat_replication WHERE pid = %s", (walsender,))) >=
            commits[-1].lsn_after, 30, what="the walsender to send the rows to the paused relay")
        os.kill(walsender, signal.SIGSTOP)
    finally:
        os.kill(relay.proc.pid, signal.SIGCONT)
    try:
        stood = case.confirmed()
        # the relay commits what it had been sent, the slot stands still.
        # Two and a half transactions: a Kafka transaction split inside a
        # PostgreSQL one (every 50 messages) checkpoints the last complete
        # one, so 101 rows could still leave the checkpoint at the slot's
        # position; all 500 may not come, the frozen walsender can hold some
        # in its own buffer.
        wait_until(lambda: len(coll.ids()) >= 1 + 250, 60, what="rows after the freeze",
                   tick=coll.poll)
        sigkill(relay)
        ahead = newest_checkpoint_lsn(case, case.kafka.bootstrap)
        say("slot confirmed %s, newest checkpoint %s" % (format_lsn(stood), format_lsn(ahead)))
        assert ahead > stood, "the checkpoint is not ahead of the slot: the scenario did not happen"
    finally:
        os.kill(walsender, signal.SIGCONT)
    wait_until(lambda: not case.slot_info()["active"], 60, what="the frozen walsender to go",
               tick=coll.poll)
    relay = start_relay(case, *EOS, create_slot=False)
    verify_exactly_once(case, coll, ["gap-warm"] + [w for c in commits for w in c.work_ids],
                        "eos_commit_gap", relays=[relay])
    conn.close()
    assert relay.stop() == EXIT_OK, relay.log


def test_postgres_crash_moves_the_slot_back(case):
    """An immediate stop loses what the server had not yet written of the
    slot's position; the relay, still running, reconnects to a slot behind
    its checkpoint and repeats nothing."""
    coll = collector(case, isolation="read_committed")
    relay = start_relay(case, *EOS)
    n = sized(4000, 20000)
    load = Load(case, "eosc", n, rate=600).start()
    try:
        load.wait_rows(n // 2, 300, tick=coll.poll, relays=[relay])
        case.pg.stop("immediate")
        case.pg.start()
        expected = load.finish(tick=coll.poll, relays=[relay])
    finally:
        load.stop()
    verify_exactly_once(case, coll, expected, "eos_pg_crash", relays=[relay])
    assert relay.stop() == EXIT_OK, relay.log


def test_stream_lost_with_acknowledged_rows_in_an_open_transaction(case):
    """Rows Kafka acknowledged inside a Kafka transaction that is still open
    when the stream is lost are not in Kafka: the transaction is aborted, and
    the next session sends them again (they once counted as confirmed and
    were skipped, lost for a read_committed consumer)."""
    from harness.http import wait_metric
    coll = collector(case, isolation="read_committed")
    port = procs.free_port()
    # a time bound long enough that the transaction is still open when the
    # walsender goes (asserted below; 300 rows take a second or two), and no
    # longer: the rows sent again in the next session wait for it too
    # (fixed: not committed once acknowledged)
    relay = start_relay(case, *EOS, "--kafka-commit-interval=20", "--kafka-commit-fixed-interval",
                        "--http", "127.0.0.1:%d" % port)
    conn = case.connect(autocommit=False)
    c = insert_rows(conn, [{"work_id": "open-%d" % i, "kind": "fault", "payload": {"n": i}}
                           for i in range(300)])
    wait_metric(port, "outbox_relay_acknowledged_total", lambda v: v >= 300, timeout=60)
    assert not coll.poll() and not coll.ids(), "committed before the stream was lost"
    walsender = case.slot_info()["active_pid"]
    case.pg.query("SELECT pg_terminate_backend(%s)", (walsender,))
    verify_exactly_once(case, coll, c.work_ids, "eos_open_transaction", relays=[relay])
    conn.close()
    assert relay.stop() == EXIT_OK, relay.log


def receipt_times(case, coll, prefix, n):
    """Commit n one-row transactions, one at a time, each once the last was
    received by the read_committed collector coll; returns the seconds from
    each commit to its receipt."""
    conn = case.connect(autocommit=False)
    took = []
    for i in range(n):
        work_id = "%s-%d" % (prefix, i)
        t0 = time.monotonic()
        insert_rows(conn, [{"work_id": work_id, "kind": KIND, "payload": {"n": i}}])
        wait_until(lambda: work_id in coll.ids(), 30, what="row " + work_id,
                   tick=lambda: coll.poll(0.01))
        took.append(time.monotonic() - t0)
    conn.close()
    return took


def test_idle_relay_commits_at_the_transaction_time_bound(case):
    """A row on an otherwise idle stream opens a Kafka transaction; the relay
    commits it --kafka-commit-interval after it began, not when something
    else next wakes it. It once slept on with the transaction open until its
    next standby status update or its one-second wait bound, so a row of a
    quiet outbox could wait a second to become visible to read_committed
    consumers. The bound here is 0.3 s, with --kafka-commit-fixed-interval
    so that the delivery report and the side connection's check, which wake
    the relay soon after the row, cannot commit the transaction (the group
    commit: test_quiet_row_commits_once_acknowledged)."""
    coll = collector(case, isolation="read_committed")
    # -s 10: no standby status update wakes the relay within the test's bound
    relay = start_relay(case, *EOS, "--kafka-commit-interval=0.3", "--kafka-commit-fixed-interval",
                        status_interval=10)
    times = receipt_times(case, coll, "idle", 5)
    say("commit to read_committed receipt on an idle stream: %s s"
        % ", ".join("%.3f" % t for t in times))
    assert sorted(times)[2] < 0.75, (times, relay.log)
    assert relay.stop() == EXIT_OK, relay.log


@pytest.mark.parametrize("fixed", [False, True], ids=["group_commit", "fixed_time"])
def test_quiet_row_commits_once_acknowledged(case, fixed):
    """A row of a quiet outbox: the relay commits its Kafka transaction as
    soon as Kafka has acknowledged every record in it and nothing more is
    read (a group commit), not at --kafka-commit-interval, here a long 4 s.
    It once waited for the bound: 20 ms by default, half of a quiet row's
    latency. With --kafka-commit-fixed-interval it waits for the bound."""
    coll = collector(case, isolation="read_committed")
    args = ["--kafka-commit-interval=4"] + (["--kafka-commit-fixed-interval"] if fixed else [])
    relay = start_relay(case, *EOS, *args)
    took = receipt_times(case, coll, "quiet", 3)
    say("commit to read_committed receipt, %s: %s s"
        % ("fixed time" if fixed else "group commit", ", ".join("%.3f" % t for t in took)))
    if fixed:
        assert min(took) > 3.5, (took, relay.log)
    else:
        assert max(took) < 2.0, (took, relay.log)
    assert relay.stop() == EXIT_OK, relay.log


def test_long_linger_does_not_hold_the_commit(case):
    """With a long linger.ms (here 3 s: a user's choice for larger batches)
    a commit has librdkafka send its last batches at once instead of after
    linger.ms: every record of the Kafka transaction is produced once the
    checkpoint record is, and the delivery reports the commit waits for
    would otherwise come only after the checkpoint record's batch had
    lingered. Before, each quiet row took over 3 s to reach a read_committed
    consumer (outbox-relay(7): A commit does not wait out a longer
    linger.ms). The rows' own batch goes at once too: the transaction
    reaches its time bound before their reports and commits."""
    coll = collector(case, isolation="read_committed")
    relay = start_relay(case, *EOS, "-X", "linger.ms=3000")
    took = receipt_times(case, coll, "linger", 3)
    say("commit to read_committed receipt with linger.ms=3000: %s s" % ", ".join("%.3f" % t for t in took))
    assert max(took) < 1.5, (took, relay.log)
    verify_exactly_once(case, coll, {"linger-%d" % i for i in range(3)}, "eos_long_linger",
                        relays=[relay])
    assert relay.stop() == EXIT_OK, relay.log


def test_backlog_drains_in_longer_transactions(case):
    """A relay that starts behind (rows committed while it was down) commits
    Kafka transactions as long as the backlog's lag (at most 1 s) while it
    drains it, so that fewer commits hold the stream; once no commit has
    been read for --kafka-commit-interval, what is open is committed rather
    than held for that longer bound; and it returns to the short bound once
    a live row comes. The backlog is told by the server's clock alone: a
    commit's timestamp against its XLogData's send time."""
    coll = collector(case, isolation="read_committed")
    relay = start_relay(case, *EOS)
    assert relay.stop() == EXIT_OK, relay.log
    conn = case.connect(autocommit=False)
    commits = [insert_rows(conn, [{"work_id": "late-%d-%d" % (t, i), "kind": KIND,
                                   "payload": {"n": i}} for i in range(5)]) for t in range(400)]
    case.pg.wait_clock(0.4)     # the condition under test: the backlog older than 250 ms
    relay = start_relay(case, *EOS, "--kafka-commit-interval=0.05", "--log-level=debug",
                        create_slot=False)
    verify_exactly_once(case, coll, [w for c in commits for w in c.work_ids], "eos_backlog",
                        relays=[relay])
    drain = re.search(r"draining a backlog \(a commit sent (\d+) ms after it happened\): Kafka "
                      r"transactions of up to (\d+) ms", relay.log)
    assert drain, relay.log[-3000:]
    lag_ms, bound_ms = int(drain.group(1)), int(drain.group(2))
    assert lag_ms >= 400 and bound_ms == min(lag_ms, 1000), drain.group(0)
    # the backlog's last rows were committed once the stream went quiet, not at the longer bound
    assert "the stream went quiet while draining a backlog" in relay.log, relay.log[-3000:]
    live = []
    for i in range(60):
        live += insert_rows(conn, [{"work_id": "live-%d" % i, "kind": KIND, "payload": {}}]).work_ids
        if "done with a backlog" in relay.log:
            break
        wait_until(lambda: set(live) <= coll.ids(), 30, what="the live row", tick=coll.poll)
    assert "done with a backlog" in relay.log, relay.log[-3000:]
    assert "Kafka transactions of up to 50 ms" in relay.log.split("done with a backlog")[-1][:200]
    conn.close()
    assert relay.stop() == EXIT_OK, relay.log


def test_standby_takes_over_and_fences_the_first(case):
    """Relay A is frozen (SIGSTOP) past wal_sender_timeout; standby B gets the
    slot, and its init_transactions fences A's producer. When A is thawed
    its late writes are refused and it stops (exit 3) saying so, instead of
    retrying; every row is in Kafka once."""
    coll = collector(case, isolation="read_committed")
    with wal_sender_timeout(case.pg, "5s"):
        a = start_relay(case, *EOS)
        b = case.relay(*EOS, create_slot=False, ready=False)
        wait_until(lambda: "warm standby" in b.log, 60, what="B to wait as a standby")
        n = sized(3000, 20000)
        load = Load(case, "eosf", n, rate=300).start()
        try:
            load.wait_rows(n // 3, 300, tick=coll.poll, relays=[a])
            os.kill(a.pid, signal.SIGSTOP)
            try:
                wait_until(lambda: "older producers of that id are fenced" in b.log and
                           case.slot_info()["active_pid"] is not None, 120,
                           what="B to take the slot over", tick=coll.poll)
                load.wait_rows(2 * n // 3, 300, tick=coll.poll, relays=[b])
            finally:
                os.kill(a.pid, signal.SIGCONT)
            assert a.wait(60) == EXIT_ENV, a.log
            assert "fenced" in a.log, a.log
            expected = load.finish(tick=coll.poll, relays=[b])
        finally:
            load.stop()
        verify_exactly_once(case, coll, expected, "eos_takeover", relays=[b])
        assert b.stop() == EXIT_OK, b.log


def test_split_transaction_interrupted_in_the_middle(case):
    """One PostgreSQL transaction of 20,000 rows, Kafka transactions of 1,000:
    killed after a few of them committed, the relay resumes inside it (the
    checkpoint counts its committed rows) without repeating or losing a row."""
    coll = collector(case, isolation="read_committed")
    relay = start_relay(case, *EOS, "--kafka-transaction-messages=1000")
    n = sized(20000, 100000)
    case.query("INSERT INTO outbox (work_id, kind, payload) SELECT 'big-' || g, 'fault', "
               "jsonb_build_object('n', g) FROM generate_series(1, %s) g", (n,))
    wait_until(lambda: len(coll.ids()) >= n // 4, 120, what="a quarter of the rows", tick=coll.poll)
    kill_and_wait(case, relay, coll)
    got = len(coll.ids())
    say("killed with %d of %d rows of the transaction committed" % (got, n))
    assert got < n, "the whole transaction was in before the kill: the scenario did not happen"
    relay = start_relay(case, *EOS, "--kafka-transaction-messages=1000", create_slot=False)
    verify_exactly_once(case, coll, ["big-%d" % i for i in range(1, n + 1)], "eos_split",
                        relays=[relay])
    assert relay.stop() == EXIT_OK, relay.log


def test_split_transaction_of_rows_and_messages_resumes_exactly_once(case):
    """The table-less outbox (--message-prefix) under --exactly-once: one
    transaction of interleaved table rows and logical messages, split over
    Kafka transactions and killed in the middle. The restarted relay skips
    the messages the checkpoint covers exactly as it skips rows (it once
    published every message again, and its count of the split transaction's
    committed rows then skipped the wrong ones)."""
    coll = collector(case, isolation="read_committed")
    # Kafka transactions of 100 records: the kill comes while most of them are still to commit (with
    # 500 and no wait for the first metadata, librdkafka 2.8 committed all 10,000 before the kill).
    args = EOS + ["--message-prefix", "outbox", "--kafka-transaction-messages=100"]
    relay = start_relay(case, *args)
    n = sized(5000, 50000)
    # WHERE emits the message, then the row is inserted: message, row, message, row...
    case.query("INSERT INTO outbox (work_id, kind, payload) SELECT 'row-' || g, 'fault', "
               "jsonb_build_object('n', g) FROM generate_series(1, %s) g "
               "WHERE outbox_emit('msg-' || g, 'fault', jsonb_build_object('n', g)) IS NOT NULL",
               (n,))
    wait_until(lambda: len(coll.ids()) >= n // 5, 120, what="a tenth of the records",
               tick=coll.poll)
    kill_and_wait(case, relay, coll)
    got = len(coll.ids())
    say("killed with %d of %d records of the transaction committed" % (got, 2 * n))
    assert got < 2 * n, "the whole transaction was in before the kill: the scenario did not happen"
    relay = start_relay(case, *args, create_slot=False)
    expected = ["%s-%d" % (k, i) for k in ("row", "msg") for i in range(1, n + 1)]
    verify_exactly_once(case, coll, expected, "eos_split_messages", relays=[relay])
    assert relay.stop() == EXIT_OK, relay.log


def test_refused_record_is_dead_lettered_in_the_next_transaction(case):
    """A record Kafka refuses makes its Kafka transaction abortable: the relay
    aborts it, streams again, dead-letters that row in a new transaction,
    and every other row is in Kafka once."""
    from harness import TopicReader
    big = case.topic("big")
    dead = case.prefix + ".dead"
    case.kafka.create_topic(big, partitions=1, config={"max.message.bytes": "2000"})
    coll = collector(case, isolation="read_committed")
    relay = start_relay(case, *EOS, "--on-error=dead-letter", "--dead-letter-topic", dead)
    conn = case.connect(autocommit=False)
    c = insert_rows(conn, [{"work_id": "ok-%d" % i, "kind": "fault", "payload": {"n": i}}
                           for i in range(50)] +
                    [{"work_id": "too-big", "kind": "big", "payload": {"x": "y" * 5000}}] +
                    [{"work_id": "ok-%d" % i, "kind": "fault", "payload": {"n": i}}
                     for i in range(50, 100)])
    with TopicReader(case.kafka.bootstrap, [dead], **{"isolation.level": "read_committed"}) as rd:
        assert rd.read_until(lambda recs: any(r.header("ce_id") == "too-big" for r in recs), 60), \
            relay.log
        assert [r.header("outbox_relay_error_code") for r in rd.records] == ["MSG_SIZE_TOO_LARGE"]
    verify_exactly_once(case, coll, [w for w in c.work_ids if w != "too-big"], "eos_dead_letter",
                        relays=[relay])
    conn.close()
    assert relay.stop() == EXIT_OK, relay.log


def test_switching_a_slot_between_modes(case):
    """One slot, at-least-once, then --exactly-once, then at-least-once again,
    each stopped cleanly (outbox-relay(7), EXACTLY-ONCE INTO KAFKA: "Switching
    a slot between modes"). The mode is not part of the mapping, so each
    takes the slot over; --exactly-once resumes after the at-least-once
    checkpoint (nothing published twice), and the way back starts from the
    slot. A read_committed consumer sees every row once."""
    reader = TopicReader(case.kafka.bootstrap, [case.topic_pattern],
                                 **{"isolation.level": "read_committed"})
    case.readers.append(reader)
    conn = case.connect(autocommit=False)
    ids = []

    def run(label, *args, create_slot=False):
        relay = case.relay(*args, create_slot=create_slot)
        c = insert_rows(conn, simple_rows(label, 5))
        ids.extend(c.work_ids)
        assert reader.read_until(has_ids(ids), 60), case.logs()
        wait_confirmed(case, c.lsn_before)
        assert relay.stop() == EXIT_OK, relay.log
        return relay

    run("alo-1", create_slot=True)
    ids.extend(insert_rows(conn, simple_rows("stopped-1", 3)).work_ids)   # while no relay runs
    eos = run("eos", *EOS)
    assert "another table set or row mapping" not in eos.log, eos.log
    rc, out, items = run_check(check_args(case, "--exactly-once"))
    assert "(exactly-once)" in items['checkpoint of slot "%s"' % case.slot][1], out
    ids.extend(insert_rows(conn, simple_rows("stopped-2", 3)).work_ids)
    run("alo-2")
    assert reader.drain(timeout=30)
    counts = {k: len(v) for k, v in by_id(reader.records).items()}
    assert set(counts) == set(ids) and all(n == 1 for n in counts.values()), counts


@pytest.mark.parametrize("mode", ["at_least_once", "exactly_once", "exactly_once_pgoutput"])
def test_full_librdkafka_queue_holds_rows_back(case, mode):
    """librdkafka's queue holds 5 messages (-X queue.buffering.max.messages=5),
    far below the relay's in-flight bound, so most rows find it full. No turn
    of the loop waits: the relay holds such a row back, serves delivery
    reports in its one wait, and offers the same row again (a wal2json line
    from the head of its staging queue, a pgoutput event given back to the
    decoder), inside Kafka transactions with --exactly-once and across a
    SIGKILL there. A consumer sees every row once (read_committed for
    --exactly-once); the default mode is not killed, so it has no reason to
    send anything twice."""
    eos = mode.startswith("exactly_once")
    coll = collector(case, isolation="read_committed" if eos else "read_uncommitted")
    args = [*(EOS if eos else NO_TIMEOUT), "-X", "queue.buffering.max.messages=5"]
    if mode.endswith("pgoutput"):
        args += ["--plugin", "pgoutput"]
    relay = start_relay(case, *args)
    n = sized(3000, 20000)
    load = Load(case, "full" + mode[-3:], n, writers=2, rate=600).start()
    try:
        if eos:
            load.wait_rows(n // 2, 300, tick=coll.poll, relays=[relay])
            kill_and_wait(case, relay, coll)
            relay = start_relay(case, *args, create_slot=False)
        expected = load.finish(tick=coll.poll, relays=[relay])
    finally:
        load.stop()
    verify_exactly_once(case, coll, expected, "full_queue_" + mode, relays=[relay])
    assert relay.stop() == EXIT_OK, relay.log
