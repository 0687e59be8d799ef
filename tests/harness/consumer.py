# SPDX-License-Identifier: Apache-2.0
"""Reading back what the relay published: a Kafka consumer with a fresh group
that starts at the earliest offset, and that polls until a predicate over all
records read so far holds, or a timeout passes.

Topics may not exist yet when reading starts (the relay's first produce creates
them), so the consumer refreshes metadata every second and also accepts a
'^regex' subscription such as '^t12\\..*' for every topic of one test.
"""

import time
import uuid
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError


@dataclass
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes
    value: bytes
    headers: list = field(default_factory=list)    # [(name, bytes)] in wire order
    timestamp: int = None                          # ms since the epoch
    timestamp_type: int = None                     # confluent_kafka.TIMESTAMP_*

    def header(self, name):
        """The value of header `name` as text; None when absent.
        Raises ValueError when it occurs more than once."""
        values = [v for k, v in self.headers if k == name]
        if not values:
            return None
        if len(values) > 1:
            raise ValueError("header %r occurs %d times" % (name, len(values)))
        return None if values[0] is None else values[0].decode("utf-8")

    @property
    def header_names(self):
        return [k for k, _ in self.headers]

    @property
    def key_text(self):
        return None if self.key is None else self.key.decode("utf-8")

    @property
    def value_text(self):
        return None if self.value is None else self.value.decode("utf-8")


class TopicReader:
    """A consumer that accumulates records across calls.

    topics: names or '^regex' patterns (librdkafka subscription syntax).
    """

    def __init__(self, bootstrap, topics, group=None, **config):
        conf = {
            "bootstrap.servers": bootstrap,
            "group.id": group or "test-%s" % uuid.uuid4().hex,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 1000,
            "allow.auto.create.topics": False,
            "session.timeout.ms": 10000,
            "heartbeat.interval.ms": 1000,
            "fetch.wait.max.ms": 100,
        }
        conf.update(config)
        self.consumer = Consumer(conf)
        self.consumer.subscribe(list(topics))
        self.records = []
        self.errors = []
        # a rebalance (e.g. after a broker restart) without committed offsets
        # starts again at the earliest offset: keep each record position once,
        # so counts reflect what the relay produced, not what we re-read
        self._positions = set()
        self.reread = 0

    def poll(self, timeout=0.5, max_records=1000):
        """Fetch what is available now; returns the new records."""
        new = []
        for msg in self.consumer.consume(num_messages=max_records, timeout=timeout):
            err = msg.error()
            if err is not None:
                if err.code() not in (KafkaError._PARTITION_EOF,
                                      KafkaError.UNKNOWN_TOPIC_OR_PART):
                    self.errors.append(err)
                continue
            pos = (msg.topic(), msg.partition(), msg.offset())
            if pos in self._positions:
                self.reread += 1
                continue
            self._positions.add(pos)
            ts_type, ts = msg.timestamp()
            new.append(Record(topic=msg.topic(), partition=msg.partition(), offset=msg.offset(),
                              key=msg.key(), value=msg.value(),
                              headers=list(msg.headers() or []),
                              timestamp=ts, timestamp_type=ts_type))
        self.records.extend(new)
        return new

    def read_until(self, until, timeout):
        """Poll until until(all records so far) is true or timeout seconds pass.

        Returns True when the predicate held, False on timeout (the caller
        asserts, with the records in hand for its message).
        """
        deadline = time.monotonic() + timeout
        while True:
            if until(self.records):
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self.poll(timeout=min(0.5, remaining))

    def drain(self, timeout=30):
        """Read until the position of every assigned partition reaches its high
        watermark as queried now, so that everything the broker holds at this
        moment has been read. Returns True when that happened within timeout."""
        deadline = time.monotonic() + timeout
        # wait for an assignment first: the group join takes a moment
        while not self.consumer.assignment():
            if time.monotonic() > deadline:
                return False
            self.poll(timeout=0.2)
        targets = {}
        for tp in self.consumer.assignment():
            low, high = self.consumer.get_watermark_offsets(tp, timeout=10, cached=False)
            targets[(tp.topic, tp.partition)] = high
        while True:
            seen = {}
            for r in self.records:
                k = (r.topic, r.partition)
                seen[k] = max(seen.get(k, -1), r.offset)
            if all(seen.get(k, -1) + 1 >= high for k, high in targets.items() if high > 0):
                return True
            if time.monotonic() > deadline:
                return False
            self.poll(timeout=0.2)

    def close(self):
        try:
            self.consumer.close()
        except RuntimeError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def consume(bootstrap, topics, until=None, timeout=30, count=None):
    """Read records of topics from the earliest offset with a fresh group.

    Stops when until(records) is true, when count records were read, or after
    timeout seconds; returns the list of Record read so far either way.
    """
    if until is None:
        until = (lambda recs: len(recs) >= count) if count is not None else (lambda recs: False)
    with TopicReader(bootstrap, topics) as reader:
        reader.read_until(until, timeout)
        return list(reader.records)


__all__ = ["Record", "TopicReader", "consume"]
