# SPDX-License-Identifier: Apache-2.0
"""The Kafka record timestamp (--record-timestamp): by default the time the
relay produces the record, which is what Kafka's retention and its
message.timestamp.before.max.ms / after.max.ms limits assume; the commit
time stays in ce_time. With --record-timestamp=commit a backlog older than a
topic's message.timestamp.before.max.ms is refused by the broker
(INVALID_TIMESTAMP): that is the row's error under --on-error, never a
producer restart that sends every other unconfirmed row again.

The backlog is made by committing rows while the relay is stopped and
starting it 4 s later, against a topic that accepts timestamps at most 2 s
old.
"""

import time

from harness import EXIT_UNPUBLISHABLE, TopicReader, has_ids, insert_rows, simple_rows

WINDOW_MS = 2000


def backlog(case, tag, n):
    """n rows committed before any relay runs, at least 2 x WINDOW_MS old when it starts."""
    topic = case.topic(tag)
    case.kafka.create_topic(topic, partitions=1,
                            config={"message.timestamp.before.max.ms": str(WINDOW_MS)})
    # the slot first, so the rows are decoded; no relay yet
    case.query("SELECT pg_create_logical_replication_slot(%s, 'wal2json')", (case.slot,))
    conn = case.connect(autocommit=False)
    commit = insert_rows(conn, simple_rows(tag, n, kind=tag))
    conn.close()
    committed_at = time.time()
    case.pg.wait_clock(2 * WINDOW_MS / 1000)  # the backlog ages past the topic's limit (the condition under test)
    return topic, commit, committed_at


def test_produce_time_publishes_an_old_backlog(case):
    topic, commit, committed_at = backlog(case, "old", 5)
    relay = case.relay(create_slot=False)
    with TopicReader(case.kafka.bootstrap, [topic]) as rd:
        assert rd.read_until(has_ids(commit.work_ids), 60), relay.log
        for rec in rd.records:
            # the record's timestamp is when it was produced; the commit time is in ce_time
            assert rec.timestamp / 1000.0 > committed_at + WINDOW_MS / 1000, \
                (rec.timestamp, committed_at)
            assert rec.header("ce_time").startswith(time.strftime("%Y-%m-%dT", time.gmtime(committed_at)))
    assert "INVALID_TIMESTAMP" not in relay.log, relay.log


def test_commit_time_backlog_is_a_row_error_not_a_restart_loop(case):
    """Before, INVALID_TIMESTAMP discarded the producer and restarted from the
    slot forever, writing the other rows again and again."""
    topic, commit, _ = backlog(case, "old", 3)
    relay = case.relay("--record-timestamp=commit", create_slot=False, ready=False)
    rc = relay.wait(60)
    assert rc == EXIT_UNPUBLISHABLE, relay.log
    for w in ("INVALID_TIMESTAMP", "message.timestamp.before.max.ms", "--record-timestamp=produce",
              "--dead-letter-transaction=", "--skip-transaction="):
        assert w in relay.log, "%r not in the log:\n%s" % (w, relay.log)
    assert "discarding the producer" not in relay.log, relay.log
    assert case.confirmed() < commit.lsn_after, "confirmed past a row that was not published"


def test_commit_time_backlog_dead_lettered(case):
    topic, commit, _ = backlog(case, "old", 3)
    dead = case.prefix + ".dead"
    relay = case.relay("--record-timestamp=commit", "--on-error=dead-letter", "--dead-letter-topic",
                       dead, create_slot=False)
    with TopicReader(case.kafka.bootstrap, [dead]) as rd:
        assert rd.read_until(has_ids(commit.work_ids), 60), relay.log
        assert {r.header("outbox_relay_error_code") for r in rd.records} == {"INVALID_TIMESTAMP"}
        assert {r.header("outbox_relay_topic") for r in rd.records} == {topic}
    assert "discarding the producer" not in relay.log, relay.log
