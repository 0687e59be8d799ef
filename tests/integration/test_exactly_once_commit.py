# SPDX-License-Identifier: Apache-2.0
"""The Kafka commit under --exactly-once (issue 22): what is aborted is never
confirmed past, a Kafka transaction never outlives transaction.timeout.ms
(and a coordinator's timeout is not taken for a newer relay's fence), and
what the relay concludes comes from librdkafka's error codes, not from the
wording of its log lines."""

from confluent_kafka.admin import AdminClient, ConfigResource
from harness import EXIT_UNPUBLISHABLE, TopicReader, insert_rows
from harness.faults import start_relay
from rows_helpers import assert_not_confirmed_past, wait_exit

from eos_helpers import EOS


def committed_reader(case, topics=None):
    rd = TopicReader(case.kafka.bootstrap, topics or [case.topic_pattern],
                     **{"isolation.level": "read_committed"})
    case.readers.append(rd)
    return rd


def set_topic_config(case, topic, **config):
    admin = AdminClient({"bootstrap.servers": case.kafka.bootstrap})
    res = ConfigResource("topic", topic, set_config={k.replace("_", "."): v
                                                     for k, v in config.items()})
    for f in admin.alter_configs([res]).values():
        f.result(timeout=30)


def test_aborted_transaction_is_never_confirmed_past(case):
    """A row refused by Kafka, whose dead-letter copy is refused too, stops
    the relay (exit 4). The Kafka transaction open then also held earlier,
    complete PostgreSQL transactions; it is aborted. The exit drain once
    still committed a checkpoint-only transaction at what Kafka had
    acknowledged, and the slot was confirmed past rows that only the aborted
    transaction held: after a restart they were skipped, lost. Acknowledged
    is not committed: now nothing is checkpointed or confirmed past them, and
    the restart (the dead-letter topic fixed) publishes each row once."""
    big, dead = case.topic("big"), case.prefix + "-dead"
    case.kafka.create_topic(big, partitions=1, config={"max.message.bytes": "2000"})
    case.kafka.create_topic(dead, partitions=1, config={"max.message.bytes": "2000"})
    args = EOS + ["--on-error=dead-letter", "--dead-letter-topic", dead,
                  # one Kafka transaction holds both PostgreSQL transactions below
                  "--kafka-transaction-time=3"]
    reader = committed_reader(case)
    relay = start_relay(case, *args)
    conn = case.connect(autocommit=False)
    earlier = insert_rows(conn, [{"work_id": "earlier-%d" % i, "kind": "fault", "payload": {"n": i}}
                                 for i in range(20)])
    insert_rows(conn, [{"work_id": "too-big", "kind": "big", "payload": {"x": "y" * 5000}},
                       {"work_id": "beside", "kind": "fault", "payload": {}}])
    assert wait_exit(relay, 90) == EXIT_UNPUBLISHABLE, relay.log
    assert 'the dead-letter publish of work ID "too-big"' in relay.log, relay.log
    assert_not_confirmed_past(case, earlier)
    set_topic_config(case, dead, max_message_bytes="100000")
    relay = start_relay(case, *args, create_slot=False)
    ids = set(earlier.work_ids) | {"beside"}
    assert reader.read_until(lambda recs: ids <= {r.header("ce_id") for r in recs}, 90), \
        "rows never arrived: %s\n%s" % (sorted(ids - {r.header("ce_id") for r in reader.records}),
                                        case.logs())
    with TopicReader(case.kafka.bootstrap, [dead], **{"isolation.level": "read_committed"}) as rd:
        assert rd.read_until(lambda recs: any(r.header("ce_id") == "too-big" for r in recs), 60), \
            relay.log
    conn.close()
    assert relay.stop() == 0, relay.log
    reader.drain()
    seen = [r.header("ce_id") for r in reader.records if r.topic != dead]
    assert sorted(seen) == sorted(ids), seen
