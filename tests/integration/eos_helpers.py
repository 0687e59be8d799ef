# SPDX-License-Identifier: Apache-2.0
"""Helpers of the exactly-once area (test_exactly_once*.py): the relay's
options for it, a Kafka transaction of another producer left open in a
checkpoint topic, and reading checkpoint records back."""

import json
import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from harness import parse_lsn, wait_until
from harness.faults import NO_TIMEOUT

# a transactional producer's messages may not outlive its transactions: both long, for the outages
EOS = ["--exactly-once", "-X", "transaction.timeout.ms=900000"] + NO_TIMEOUT
DEFAULT_CHECKPOINT_TOPIC = "outbox-relay.checkpoints"


class ForeignTransaction:
    """A Kafka transaction of another producer, left open in partition 0 of
    `topic`, as another --exactly-once relay stopped or frozen in a commit
    leaves one: read_committed consumers of the partition stop before its
    first record (the last stable offset) until it commits, aborts, or its
    coordinator aborts it after timeout_ms."""

    def __init__(self, bootstrap, topic, timeout_ms=120000):
        self.producer = Producer({"bootstrap.servers": bootstrap,
                                  "transactional.id": "foreign-%s" % uuid.uuid4().hex,
                                  "transaction.timeout.ms": timeout_ms})
        self.producer.init_transactions(60)
        self.producer.begin_transaction()
        self.producer.produce(topic, key=b"another-relay", value=b"{}", partition=0)
        self.producer.flush(60)
        self.open = True

    def abort(self):
        if self.open:
            self.producer.abort_transaction(60)
            self.open = False


def read_committed(bootstrap, topic, timeout=30):
    """The committed records of partition 0 of topic, read with
    read_committed from the start up to the high watermark, as (offset, key,
    value bytes), and whether that end was reached within timeout seconds."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "cp-%s" % uuid.uuid4().hex,
                  "isolation.level": "read_committed", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    tp = TopicPartition(topic, 0)
    out, ended = [], False
    try:
        _, hi = c.get_watermark_offsets(tp, timeout=10, cached=False)
        ended = not hi
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout
        while not ended and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                ended = m.error().code() == KafkaError._PARTITION_EOF and m.offset() >= hi
                continue
            out.append((m.offset(), m.key(), m.value()))
    finally:
        c.close()
    return out, ended


def checkpoints(bootstrap, topic, key_suffix=None, timeout=30):
    """Every committed checkpoint record of partition 0 of topic (read with
    read_committed, up to the end), oldest first, as (offset, key, value
    dict); only keys ending in key_suffix if given."""
    out = []
    for offset, key, value in read_committed(bootstrap, topic, timeout)[0]:
        key = key.decode()
        if key_suffix is None or key.endswith(key_suffix):
            out.append((offset, key, json.loads(value)))
    return out


def newest_checkpoint(case, topic=DEFAULT_CHECKPOINT_TOPIC, bootstrap=None):
    """The value (a dict) of the newest committed checkpoint of this test's slot, or None."""
    recs = checkpoints(bootstrap or case.kafka.bootstrap, topic, "/" + case.slot)
    return recs[-1][2] if recs else None


def newest_checkpoint_lsn(case, topic=DEFAULT_CHECKPOINT_TOPIC, bootstrap=None):
    cp = newest_checkpoint(case, topic, bootstrap)
    return parse_lsn(cp["lsn"]) if cp else None


def wait_checkpoint_past(case, lsn, topic=DEFAULT_CHECKPOINT_TOPIC, timeout=60):
    """Wait until the slot's newest committed checkpoint reaches lsn; returns its value."""
    def reached():
        cp = newest_checkpoint(case, topic)
        return cp if cp and parse_lsn(cp["lsn"]) >= lsn else None
    return wait_until(reached, timeout, what="a checkpoint of the slot at or past %X/%X"
                      % (lsn >> 32, lsn & 0xFFFFFFFF))
