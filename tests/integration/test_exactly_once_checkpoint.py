# SPDX-License-Identifier: Apache-2.0
"""The checkpoint record as the resume point (issue 22): a relay decides
from its newest checkpoint only what it can trust. A read that a Kafka
transaction of another producer holds back, a resume point older than what
is committed, a checkpoint topic that is not what the relay needs, a
checkpoint of another WAL history: each once ended in an exit 3 for
nothing, in duplicates or in a lost row; each now waits, or stops with the
remedy."""

import os
import re
import threading
import time

import harness
import pytest
from check_helpers import assert_fail, check_args, run_check
from harness import (EXIT_ENV, TopicReader, arrive_and_confirm, format_lsn, insert_rows, simple_rows,
                     the_error, wait_until)
from harness.faults import collector, observe, say, start_relay, verify_exactly_once
from rows_helpers import wait_exit

from eos_helpers import EOS, ForeignTransaction, newest_checkpoint_lsn

# tests/run-librdkafka.sh runs these (-m exactly_once) against librdkafka 2.8 too
pytestmark = pytest.mark.exactly_once


def committed_reader(case):
    rd = TopicReader(case.kafka.bootstrap, [case.topic_pattern], **{"isolation.level": "read_committed"})
    case.readers.append(rd)
    return rd


def not_streaming(case, relay):
    def check():
        assert relay.alive, "the relay stopped (exit %s)\n%s" % (relay.returncode, relay.log)
        assert not case.slot_info()["active"], "the relay streams\n" + relay.log
    return check


@pytest.mark.parametrize("eos", [False, True], ids=["at_least_once", "exactly_once"])
def test_checkpoint_behind_another_producers_open_transaction(case, eos):
    """A relay of another slot stopped in a commit leaves its Kafka transaction
    open in the shared checkpoint topic. A read_committed reader stops at its
    first offset (the last stable offset), so a relay restarted cleanly once
    read the checkpoint before it for the newest, found its slot confirmed
    beyond that and stopped with exit 3, "someone else consumed the slot",
    whose remedy republishes rows. Now it does not decide before the stable
    offset reaches the end: it waits, not streaming, until that transaction
    ends, then resumes."""
    topic = case.prefix + "-checkpoints"
    args = ["--checkpoint-topic", topic] + (EOS if eos else [])
    reader = committed_reader(case)
    relay = start_relay(case, *args)
    conn = case.connect(autocommit=False)
    arrive_and_confirm(case, reader, relay, insert_rows(conn, simple_rows("before", 3)).work_ids)
    foreign = ForeignTransaction(case.kafka.bootstrap, topic)
    try:
        # newer checkpoints land after the open transaction's first record
        arrive_and_confirm(case, reader, relay, insert_rows(conn, simple_rows("after", 3)).work_ids)
        assert relay.stop() == 0, relay.log
        relay = case.relay(*args, create_slot=False, ready=False)
        n = observe(4, not_streaming(case, relay), interval=0.2)
        say("the restarted relay waited %d checks without deciding" % n)
        # and says why while it waits, not only when its 30 s are up
        wait_until(lambda: "still reading the newest checkpoint" in relay.log, 10,
                   what="the relay to say why it waits")
        assert "a Kafka transaction of another producer is open there" in relay.log, relay.log
    finally:
        foreign.abort()
    relay.wait_ready(case.pg, case.slot, timeout=60)
    arrive_and_confirm(case, reader, relay, insert_rows(conn, simple_rows("then", 3)).work_ids)
    conn.close()
    assert relay.stop() == 0, relay.log
    assert "someone else consumed the slot" not in relay.log, relay.log


def test_exactly_once_never_streams_on_a_stale_resume_point(case):
    """The relay reconnects after a crash of PostgreSQL (the slot goes back
    behind the checkpoint) while its checkpoint cannot be read: another
    producer's open transaction holds the read back. It once streamed on
    with the resume point it had read at its start, older than what it (or
    a relay that held the slot meanwhile) committed since, sending those
    rows again, and a later read reset a split transaction's counts
    mid-stream. Now an --exactly-once relay does not stream until it has read
    a fresh resume point; then nothing is sent twice."""
    topic = case.prefix + "-checkpoints"
    coll = collector(case, isolation="read_committed")
    relay = start_relay(case, *EOS, "--checkpoint-topic", topic)
    conn = case.connect(autocommit=False)
    foreign = ForeignTransaction(case.kafka.bootstrap, topic)
    try:
        commits = [insert_rows(conn, [{"work_id": "stale-%d-%d" % (t, i), "kind": "fault",
                                       "payload": {"n": i}} for i in range(5)]) for t in range(20)]
        conn.close()
        ids = [w for c in commits for w in c.work_ids]
        wait_until(lambda: set(ids) <= coll.ids(), 60, what="the rows in Kafka", tick=coll.poll)
        case.pg.stop("immediate")
        case.pg.start()
        # the read gives up after 30 s; then the relay must still not stream
        wait_until(lambda: "cannot read the newest checkpoint" in relay.log, 90,
                   what="the relay to give up reading its checkpoint",
                   tick=lambda: (not_streaming(case, relay)(), coll.poll(0.2)))
        n = observe(3, not_streaming(case, relay), interval=0.2)
        say("the relay waited %d checks more without streaming" % n)
    finally:
        foreign.abort()
    verify_exactly_once(case, coll, ids, "eos_stale_resume", relays=[relay])
    assert relay.stop() == 0, relay.log


@pytest.mark.parametrize("made", ["three_partitions", "compact_delete"])
def test_checkpoint_topic_the_relay_did_not_make_is_verified(case, made):
    """A checkpoint topic made by someone else once passed unverified. With
    three partitions the writer put a slot's checkpoints where the
    partitioner put its key and the reader read partition 0, found none and
    adopted the slot (duplicates under --exactly-once); with
    cleanup.policy=compact,delete retention deletes the newest checkpoint of
    a quiet slot. Now the relay stops before streaming (exit 3) naming the
    fix, and `check` fails the item with the same words."""
    topic = case.prefix + "-checkpoints"
    if made == "three_partitions":
        case.kafka.create_topic(topic, partitions=3, config={"cleanup.policy": "compact"})
        words = "has 3 partitions"
    else:
        case.kafka.create_topic(topic, partitions=1, config={"cleanup.policy": "compact,delete"})
        words = "cleanup.policy=compact,delete"
    rc, out, items = run_check(check_args(case, *EOS, "--checkpoint-topic", topic))
    assert_fail(rc, out, items, 'checkpoint topic "%s"' % topic, words)
    relay = case.relay(*EOS, "--checkpoint-topic", topic, ready=False)
    assert wait_exit(relay) == EXIT_ENV, relay.log
    assert words in the_error(relay.log), relay.log
    assert case.slot_info() is None, "the slot was made beside a topic it cannot use"


def test_checkpoint_topic_deleted_while_the_relay_runs(case):
    """The checkpoint topic deleted under a running relay: its next
    checkpoint write made it again where the brokers create topics, with
    their defaults (here three partitions, cleanup.policy=delete), and it
    went on into that. Now it notices within seconds and stops (exit 3)
    without confirming further.

    The check of the topic while streaming may not come first: the next
    Kafka transaction's checkpoint record can find no topic
    (AddPartitionsToTxn: UNKNOWN_TOPIC_OR_PART) and end the session; the
    next session then stops as test_checkpoint_topic_deleted_then_the_session_ends
    asserts. Both are accepted, and said alike. Since the checkpoint
    partition joins a transaction with its first rows (14569e9), that
    AddPartitionsToTxn is the transaction's first, so the coordinator may
    never have begun it: its abort then meets INVALID_TXN_STATE, and the
    line says so, naming the missing topic as the cause."""
    topic = case.prefix + "-checkpoints"
    reader = committed_reader(case)
    relay = start_relay(case, *EOS, "--checkpoint-topic", topic)
    conn = case.connect(autocommit=False)
    arrive_and_confirm(case, reader, relay, insert_rows(conn, simple_rows("before", 3)).work_ids)
    case.kafka.delete_topic(topic)
    stood = case.confirmed()
    insert_rows(conn, simple_rows("after", 3))
    conn.close()
    assert wait_exit(relay, 60) == EXIT_ENV, relay.log
    errors = harness.error_lines(relay.log)
    assert errors and 'checkpoint topic "%s"' % topic in errors[-1] and \
        "since the relay started streaming" in errors[-1], relay.log
    # the one way to a second error line: the transaction that ended the session first
    for e in errors[:-1]:
        assert (e.startswith("the Kafka transaction failed") and "UNKNOWN_TOPIC_OR_PART" in e) or \
            (e.startswith("cannot abort the Kafka transaction") and "INVALID_TXN_STATE" in e and
             "since the coordinator never began it" in e and "Unknown topic or partition" in e), relay.log
    say("%s; slot confirmed %s before the deletion, %s after the stop"
        % ("the transaction first" if len(errors) > 1 else "the check first", stood, case.confirmed()))


class SettledCheckpoint:
    """A condition for wait_until(): the confirmed LSN once it has equalled
    the slot's newest committed checkpoint in topic, with neither moving,
    for steady_s seconds of polling; else None. Any change starts the count
    again."""

    def __init__(self, case, topic, steady_s=2.5):
        self.case, self.topic, self.steady_s = case, topic, steady_s
        self.seen, self.since = None, None

    def __call__(self):
        now = (self.case.confirmed(), newest_checkpoint_lsn(self.case, self.topic))
        if now[0] != now[1] or now != self.seen:
            self.seen, self.since = (now if now[0] == now[1] else None), time.monotonic()
            return None
        return now[0] if time.monotonic() - self.since >= self.steady_s else None


def test_checkpoint_topic_deleted_then_the_session_ends(case):
    """The checkpoint topic deleted under a running relay, and the session
    ends before the check while streaming sees it (in CI: a Kafka
    transaction whose checkpoint record found no topic; here the walsender
    terminated). The next session of the same process found no checkpoint
    and stopped with the advice for a slot of an earlier release ("no
    checkpoint"). It knows better: this process held a checkpoint in that
    topic, so the topic lost it since the relay started streaming. Exit 3,
    nothing confirmed past what was; the client's auto-creation is off so
    that the topic stays gone."""
    topic = case.prefix + "-checkpoints"
    case.kafka.create_topic(case.topic("order_received"))
    reader = committed_reader(case)
    relay = start_relay(case, *EOS, "-X", "allow.auto.create.topics=false", "--checkpoint-topic", topic)
    conn = case.connect(autocommit=False)
    arrive_and_confirm(case, reader, relay, insert_rows(conn, simple_rows("before", 3)).work_ids)
    conn.close()
    # The slot moves on after the rows (a standby snapshot in the WAL), and the
    # relay may commit a checkpoint-only Kafka transaction for it at any time,
    # confirmed at the next status update: that is legitimate while the topic
    # is there. What is confirmed must stop where the topic's newest committed
    # checkpoint stood when it was deleted, so the test waits until the two
    # agree and stay so longer than the relay's spacing of such transactions
    # (1 s) plus its status interval (1 s).
    stood = wait_until(SettledCheckpoint(case, topic), 60, interval=0.2,
                       what="the confirmed LSN and the newest checkpoint to agree and stay")
    case.kafka.delete_topic(topic)
    case.pg.query("SELECT pg_terminate_backend(%s)", (case.slot_info()["active_pid"],))
    assert wait_exit(relay, 60) == EXIT_ENV, relay.log
    errors = harness.error_lines(relay.log)
    ended, err = errors[0], errors[-1]
    assert len(errors) >= 2 and "terminating connection due to administrator command" in ended, relay.log
    # Between them at most the abort of an idle checkpoint's Kafka transaction
    # whose record never reached the coordinator (its topic gone): a new
    # producer settles it, then the next session stops as below (CI, stop 31).
    for e in errors[1:-1]:
        assert e.startswith("cannot abort the Kafka transaction") and "INVALID_TXN_STATE" in e and \
            "a new producer settles it" in e, relay.log
    assert 'checkpoint topic "%s"' % topic in err and "since the relay started streaming" in err, \
        relay.log
    assert case.confirmed() == stood, relay.log


def test_exactly_once_without_its_checkpoint_stops(case):
    """The checkpoint topic deleted while the relay was stopped, the slot
    kept: the relay adopted the slot's position, and under --exactly-once
    published again whatever was committed to Kafka past it. Now it stops
    (exit 3) naming --accept-slot-position, and starts with it."""
    topic = case.prefix + "-checkpoints"
    reader = committed_reader(case)
    args = EOS + ["--checkpoint-topic", topic]
    relay = start_relay(case, *args)
    conn = case.connect(autocommit=False)
    arrive_and_confirm(case, reader, relay, insert_rows(conn, simple_rows("before", 3)).work_ids)
    assert relay.stop() == 0, relay.log
    case.kafka.delete_topic(topic)
    relay = case.relay(*args, create_slot=False, ready=False)
    assert wait_exit(relay) == EXIT_ENV, relay.log
    err = the_error(relay.log)
    m = re.search(r"--accept-slot-position=([0-9A-F]+/[0-9A-F]+)", err)
    assert m and "no checkpoint" in err, relay.log
    relay = start_relay(case, *args, "--accept-slot-position=" + m.group(1), create_slot=False)
    arrive_and_confirm(case, reader, relay, insert_rows(conn, simple_rows("then", 3)).work_ids)
    conn.close()
    assert relay.stop() == 0, relay.log
    assert len(reader.records) == 6, [r.header("ce_id") for r in reader.records]


def test_failover_to_a_standby_without_the_checkpointed_wal_stops(case):
    """A standby that had not received the primary's last WAL is promoted:
    its timeline 2 branches off at the end of what it had, and its commits
    reuse the LSNs past that point, which the checkpoint (written on
    timeline 1) already covers. The relay once took the checkpoint's LSN for
    a position on the new timeline and skipped those commits: rows lost. It
    now records the timeline in the checkpoint and stops (exit 3) when the
    checkpoint reaches past where the server's history left its timeline;
    with --accept-slot-position it counts the checkpoint up to the switch
    only, and the new timeline's rows arrive once, nothing earlier again.
    The servers are this test's own (a copy of the data directory, taken
    stopped, is the standby that lacks the WAL)."""
    with case.own_server("primary") as primary:
        standby = None
        try:
            case.setup_db()
            coll = collector(case, isolation="read_committed")
            relay = start_relay(case, *EOS)
            conn = case.connect(autocommit=False)
            a = insert_rows(conn, [{"work_id": "tl-a", "kind": "fault", "payload": {}}])
            wait_until(lambda: "tl-a" in coll.ids(), 60, what="the first row", tick=coll.poll)
            wait_until(lambda: case.confirmed() >= a.lsn_after, 60, what="the slot confirmed")
            conn.close()
            assert relay.stop() == 0, relay.log
            # the standby: the data directory as it is now, never streaming from the primary
            standby = primary.make_standby(case.name + "-standby", {"primary_conninfo": None})
            conn = case.connect(autocommit=False)
            b = insert_rows(conn, [{"work_id": "tl-b-%d" % i, "kind": "fault", "payload": {"pad": os.urandom(1000).hex()}}
                                   for i in range(100)])
            conn.close()
            relay = start_relay(case, *EOS, create_slot=False)
            wait_until(lambda: set(b.work_ids) <= coll.ids(), 60, what="the primary's rows", tick=coll.poll)
            wait_until(lambda: case.confirmed() >= b.lsn_after, 60, what="the slot confirmed")
            assert relay.stop() == 0, relay.log
            covered = case.confirmed()
            primary.stop()
            # the failover: timeline 2 branches off where the standby's WAL ends, before the rows b
            standby.query("SELECT pg_promote()")
            case.pg = standby
            conn = case.connect(autocommit=False)
            n = insert_rows(conn, [{"work_id": "tl-n-%d" % i, "kind": "fault", "payload": {}} for i in range(3)])
            conn.close()
            assert n.lsn_after < covered, "the new timeline's rows are not at LSNs the checkpoint covers"
            slot_lsn = format_lsn(case.confirmed())

            relay = case.relay(*EOS, create_slot=False, ready=False)
            assert wait_exit(relay, 60) == EXIT_ENV, relay.log
            error = the_error(relay.log)
            assert "timeline 1" in error and "timeline 2" in error, error
            assert "--accept-slot-position=" + slot_lsn in error, error

            relay = start_relay(case, *EOS, "--accept-slot-position=" + slot_lsn, create_slot=False)
            verify_exactly_once(case, coll, ["tl-a"] + b.work_ids + n.work_ids, "eos_timeline_switch",
                                relays=[relay])
            assert "accepting the switch to timeline 2" in relay.log, relay.log
            assert relay.stop() == 0, relay.log
        finally:
            if standby is not None:
                for r in case.relays:
                    if r.alive:
                        r.kill()
                if standby.running:
                    standby.stop("immediate")
                standby.remove()


def test_no_checkpoint_passes_a_change_no_round_has_seen(case):
    """--exactly-once's checkpoint is the resume point: a restart skips every
    transaction up to it. Found by a breaker helper: the outbox renamed and a
    row inserted under the new name, held invisible by a synchronous standby
    (the round holds confirmation before it), then a row of a second outbox
    table; its Kafka commit carried the checkpoint past the rename, the round
    then stopped the relay, and restarted with the new name as the stop says,
    the relay skipped the renamed table's row for good. No EndTxn now goes
    past what the round verified: the commit waits, the stop aborts it, and
    the restart publishes both rows, each once for a read_committed reader."""
    from test_postgres_table_changes import commits_held, release_held, without_guard
    from harness import by_id, has_ids, parse_lsn, wait_confirmed

    with case.own_server() as own:
        threads = []
        try:
            case.setup_db()
            without_guard(case)
            case.query("CREATE TABLE public.outbox_b (LIKE public.outbox INCLUDING ALL)")
            reader = case.reader()
            relay = case.relay(*EOS, "-t", "public.outbox", "-t", "public.outbox_b")
            conn = case.connect(autocommit=False)
            c = insert_rows(conn, simple_rows("before", 2))
            assert reader.read_until(has_ids(c.work_ids), 30), relay.log
            wait_confirmed(case, c.lsn_before)
            own.query("ALTER SYSTEM SET synchronous_standby_names = 'no_such_standby'")
            own.query("SELECT pg_reload_conf()")
            commits_held(own)
            conn.commit()
            cur = conn.cursor()
            cur.execute("SHOW synchronous_standby_names")
            assert cur.fetchone()[0] == "no_such_standby"
            cur.execute("ALTER TABLE public.outbox RENAME TO outbox_new")
            cur.execute("INSERT INTO public.outbox_new (work_id, kind, payload) "
                        "VALUES ('renamed-row', 'order_received', '{}')")
            cur.execute("SELECT pg_current_wal_insert_lsn()::text")
            t1_pre_commit = parse_lsn(cur.fetchone()[0])
            threads.append(threading.Thread(target=conn.commit))
            threads[-1].start()
            conn2 = case.connect(autocommit=False)
            conn2.cursor().execute("INSERT INTO public.outbox_b (work_id, kind, payload) "
                                   "VALUES ('b-after', 'order_received', '{}')")
            threads.append(threading.Thread(target=conn2.commit))
            threads[-1].start()
            wait_until(lambda: own.query("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep' "
                                         "AND datname = %s", (case.dbname,))[0][0] == 2, 30,
                       what="both commits waiting for the standby")
            end = own.query("SELECT pg_current_wal_insert_lsn()::text")[0][0]
            # three standby status updates after the walsender sent both commits: the relay has
            # read them, produced T2's row and begun its commit, and rounds have had their say
            replies = set()

            def replied():
                replies.update(t for (t,) in own.query(
                    "SELECT r.reply_time FROM pg_stat_replication r JOIN pg_replication_slots s "
                    "ON s.active_pid = r.pid WHERE s.slot_name = %s AND r.sent_lsn >= %s::pg_lsn",
                    (case.slot, end)))
                return len(replies) >= 4
            wait_until(replied, 30, what="status updates after both commits were sent")
            newest = newest_checkpoint_lsn(case) or 0
            assert newest <= t1_pre_commit, "a Kafka checkpoint at %s passed the unseen rename (before %s)" % (
                format_lsn(newest), format_lsn(t1_pre_commit))
            own.query("ALTER SYSTEM RESET synchronous_standby_names")
            own.query("SELECT pg_reload_conf()")
            for t in threads:
                t.join(30)
            assert relay.wait(60) == EXIT_ENV, relay.log
            assert "no longer exists" in relay.log, relay.log
            assert case.confirmed() <= t1_pre_commit, "confirmed past the rename"
            relay2 = case.relay(*EOS, "-t", "public.outbox_new", "-t", "public.outbox_b",
                                "--accept-config-change", create_slot=False)
            assert reader.read_until(has_ids(["renamed-row", "b-after"]), 60), relay2.log
            got = by_id(reader.records)
            assert len(got["b-after"]) == 1 and len(got["renamed-row"]) == 1, {
                k: len(v) for k, v in got.items()}
        finally:
            release_held(case, own, *threads)
