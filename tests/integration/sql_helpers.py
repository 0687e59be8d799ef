# SPDX-License-Identifier: Apache-2.0
"""Helpers of the sql area (test_sql_*.py), for the inbox tests
(test_sql_inbox*.py): loading sql/inbox.sql into a
database, calling inbox_receive(), and the receiver of the seeds' chain: a
Kafka consumer that applies each record's effect through the inbox, in one
transaction of its own database, and commits its Kafka offsets only after
that COMMIT."""

import json
import os

import harness
import psycopg2
import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from harness import procs, wait_until

INBOX_SQL = os.path.join(harness.TOP, "sql", "inbox.sql")
MAILER = "order-mailer"


def load_inbox(pg, dbname, **variables):
    """Run sql/inbox.sql in dbname with psql, as its header says (-v NAME=VALUE
    for each keyword argument). Returns the completed process (check=False)."""
    argv = [pg._bin("psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", pg.conninfo(dbname)]
    for k, v in variables.items():
        argv += ["-v", "%s=%s" % (k, v)]
    return procs.run(argv + ["-f", INBOX_SQL], timeout=60, check=False)


def receive(cur, work_id, payload, consumer=MAILER):
    """inbox_receive(consumer, work_id, payload) on cur; returns its boolean."""
    cur.execute("SELECT inbox_receive(%s, %s, %s)", (consumer, work_id, payload))
    return cur.fetchone()[0]


def receive_error(conn, work_id, payload, consumer=MAILER):
    """Run inbox_receive on conn in its own transaction; returns the error it
    raised (and rolls back)."""
    with pytest.raises(psycopg2.Error) as e:
        with conn.cursor() as cur:
            receive(cur, work_id, payload, consumer)
    conn.rollback()
    return e.value


# The receiver's own table: the effect. No unique key on purpose: the inbox,
# not a constraint of the effect, must keep it to one row per work ID.
ACKNOWLEDGEMENTS = """
CREATE TABLE acknowledgements (
    id          bigserial PRIMARY KEY,
    work_id     text NOT NULL,
    order_id    integer NOT NULL,
    customer_id integer NOT NULL,
    total       text NOT NULL,
    message     text NOT NULL
)"""


class Receiver:
    """The order mailer: consumer group `group` on `topic`, offsets committed by
    hand. For each record, one transaction in its database (dsn):
    inbox_receive(MAILER, ce_id, value) and, when that says first, the effect
    (a row in acknowledgements); COMMIT; then it stores the record's offset,
    and every `commit_every` records commits the stored offsets to Kafka. A
    crash in between leaves records applied in the database whose offsets
    Kafka does not have: the next consumer of the group is handed them again.

    deliveries: (partition, offset, work ID, first?) of every record this
    object handled, in order.
    """

    def __init__(self, bootstrap, topic, dsn, group, commit_every=25):
        self.topic = topic
        self.commit_every = commit_every
        self.consumer = Consumer({
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            # consume() would store each offset as it returns the record, and
            # commit() would then commit records not yet applied: store them
            # only after the COMMIT that applied them
            "enable.auto.offset.store": False,
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 1000,
            "fetch.wait.max.ms": 100,
            "topic.metadata.refresh.interval.ms": 1000,
        })
        self.consumer.subscribe([topic])
        self.db = psycopg2.connect(dsn, connect_timeout=10)
        self.db.autocommit = False
        self.deliveries = []
        self.errors = []
        self.uncommitted = 0        # records applied since the last offset commit

    def handle(self, msg):
        work_id = dict(msg.headers() or []).get("ce_id")
        work_id = work_id.decode("utf-8") if work_id is not None else None
        value = msg.value().decode("utf-8")
        with self.db.cursor() as cur:
            first = receive(cur, work_id, value)
            if first:
                p = json.loads(value)
                cur.execute("INSERT INTO acknowledgements (work_id, order_id, customer_id, total, "
                            "message) VALUES (%s, %s, %s, %s, %s)",
                            (work_id, p["order_id"], p["customer_id"], p["total"], p["message"]))
        self.db.commit()
        self.consumer.store_offsets(message=msg)
        self.deliveries.append((msg.partition(), msg.offset(), work_id, first))
        self.uncommitted += 1
        if self.uncommitted >= self.commit_every:
            self.commit_offsets()

    def commit_offsets(self):
        if self.uncommitted:
            self.consumer.commit(asynchronous=False)
            self.uncommitted = 0

    def run(self, until, timeout, crash_after=None):
        """Consume and apply until until(self) is true (checked between polls).
        crash_after=N: stop right after the COMMIT of the N-th record of this
        run, before committing its offset, and close the consumer and the
        database connection: what a process killed there leaves behind.
        Raises WaitTimeout after timeout seconds."""
        handled = 0

        def step():
            nonlocal handled
            if crash_after is None and until(self):
                return True
            for msg in self.consumer.consume(num_messages=100, timeout=0.2):
                err = msg.error()
                if err is not None:
                    if err.code() not in (KafkaError._PARTITION_EOF,
                                          KafkaError.UNKNOWN_TOPIC_OR_PART):
                        self.errors.append(err)
                    continue
                self.handle(msg)
                handled += 1
                if crash_after is not None and handled >= crash_after:
                    self.crash()
                    return True
            return False
        wait_until(step, timeout, interval=0, what="the receiver to finish")

    def caught_up(self):
        """Partitions assigned (all of them: each Receiver is its group's only
        member), and each read up to its high watermark as the broker reports
        it now."""
        assignment = self.consumer.assignment()
        if not assignment:
            return False
        # a partition this consumer has read nothing from has no position
        # (OFFSET_INVALID): it starts at the group's committed offset
        committed = {(tp.topic, tp.partition): tp.offset
                     for tp in self.consumer.committed(assignment, timeout=10)}
        for tp in self.consumer.position(assignment):
            pos = tp.offset if tp.offset >= 0 else committed[(tp.topic, tp.partition)]
            _, high = self.consumer.get_watermark_offsets(TopicPartition(tp.topic, tp.partition),
                                                          timeout=10, cached=False)
            if high > 0 and pos < high:
                return False
        return True

    def crash(self):
        """Leave without committing offsets (close() does not commit when
        enable.auto.commit is off); the database work is committed."""
        self.consumer.close()
        self.db.close()

    def close(self):
        self.commit_offsets()
        self.consumer.close()
        self.db.close()
