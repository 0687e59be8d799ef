# SPDX-License-Identifier: Apache-2.0
"""Rows that cannot be published, under the default --on-error=stop.

Each case commits one good transaction (delivered and confirmed), then a
transaction holding a good row and one bad row, then another good
transaction. The relay must exit 4 with one error line that names the work
ID, the table, the transaction's end LSN (within the commit's WAL window),
the reason and both remedies verbatim; the slot must not be confirmed past
the bad transaction; a restart must meet the same row and stop with the same
line, never skipping it on its own; and the bad row must never reach Kafka.

Kafka limits are exercised both ways: the producer's own message.max.bytes
(-X message.max.bytes, refused by librdkafka before producing) and a topic
created with a small max.message.bytes (the broker answers
MSG_SIZE_TOO_LARGE in the delivery report).

Missing topics with auto-creation off are tested twice. On the shared
broker (auto.create.topics.enable=true) the client side turns creation
off: -X allow.auto.create.topics=false, which librdkafka 2.0.2 honours for
producers too (its metadata requests stop asking the broker to create the
topic; the test checks that the topic still does not exist), and
-X topic.metadata.propagation.max.ms=1000, so that librdkafka fails the
queued message after one second (delivery report UNKNOWN_TOPIC_OR_PART)
instead of after the default 30 s. Then a second broker, started through the
harness's KafkaBroker with auto.create.topics.enable=false, refuses to create
the topic on the broker side (same propagation setting for the wait).

An authorization failure on the topic needs a broker with SASL and ACLs:
test_rows_unauthorized.py.
"""

import json
import re

import pytest
from harness import (EXIT_OK, KafkaBroker, by_id, format_lsn, has_ids, insert_rows, parse_lsn,
                     simple_rows, wait_confirmed)
from rows_helpers import assert_not_confirmed_past, check_remedies, stops_unpublishable

OUTBOX = '"public"."outbox"'


def prepare(case):
    """The outbox of sql/outbox.sql plus what the cases need: a nullable
    payload, a text payload column, and a column for topic templates."""
    case.query("ALTER TABLE outbox ALTER COLUMN payload DROP NOT NULL, "
               "ADD COLUMN body text, ADD COLUMN dest text")


def good(prefix, n, **extra):
    rows = simple_rows(prefix, n)
    for r in rows:
        r.update({"entity_id": "entity-" + r["work_id"], "body": '{"ok": true}', "dest": "fine"})
        r.update(extra)
    return rows


def check_error(line, commit, work_id, reason_words, table=True):
    """The error names the work ID, the table, the transaction end LSN (the
    remedies' LSN, inside the commit's WAL window), the reason and both
    remedies verbatim. Returns that LSN text. table=False leaves the table
    to the caller (run_stop_case checks it last, so that a missing table
    name does not hide the outcome of the other checks)."""
    assert 'work ID "%s"' % work_id in line, "work ID %r not named: %s" % (work_id, line)
    if table:
        assert_names_table(line)
    m = re.search(r"--skip-transaction=([0-9A-F]+/[0-9A-F]+)", line)
    assert m, "no --skip-transaction=LSN remedy in: " + line
    end = m.group(1)
    assert commit.lsn_before < parse_lsn(end) <= commit.lsn_after, \
        "remedy LSN %s is not the end of the bad transaction (%s, %s]: %s" % (
            end, format_lsn(commit.lsn_before), format_lsn(commit.lsn_after), line)
    assert "transaction ending at LSN %s" % end in line or "ending at LSN %s" % end in line, line
    check_remedies(line, end)
    for w in reason_words:
        assert w in line, "reason lacks %r: %s" % (w, line)
    return end


def assert_names_table(line):
    assert OUTBOX in line, "table %s not named: %s" % (OUTBOX, line)


def run_stop_case(case, bad_row, reason_words, extra_args=(), good_extra=None):
    """Good transaction, bad transaction, good transaction; the relay stops on
    the bad row, twice, and confirms nothing of it."""
    good_extra = good_extra or {}
    reader = case.reader()
    relay = case.relay(*extra_args)
    conn = case.connect(autocommit=False)
    first = insert_rows(conn, good("first", 2, **good_extra))
    assert reader.read_until(has_ids(first.work_ids), 30), case.logs()
    first_end = max(parse_lsn(r.header("ce_pglsn")) for r in reader.records)
    wait_confirmed(case, first_end)

    bad = insert_rows(conn, good("same-txn", 1, **good_extra) + [bad_row])
    insert_rows(conn, good("later", 2, **good_extra))
    line = stops_unpublishable(relay)
    end = check_error(line, bad, bad_row["work_id"], reason_words, table=False)
    assert_not_confirmed_past(case, bad)
    assert case.confirmed() >= first_end

    # a restart meets the same row and stops with the same words
    relay2 = case.relay(*extra_args, create_slot=False, ready=False)
    line2 = stops_unpublishable(relay2)
    assert line2 == line, "second start reported differently:\n%s\n%s" % (line, line2)
    assert_not_confirmed_past(case, bad)

    assert reader.drain(timeout=30), case.logs()
    published = by_id(reader.records)
    assert set(first.work_ids) <= set(published), "earlier transaction lost"
    assert bad_row["work_id"] not in published, \
        "the bad row reached Kafka: %r" % published[bad_row["work_id"]]
    assert_names_table(line)
    return line, end


def test_null_payload_is_a_row_error(case):
    prepare(case)
    line, _ = run_stop_case(case, {"work_id": "nul-1", "kind": "order_received", "payload": None},
                            ['payload column "payload" is NULL', "--null-payload=tombstone"])


def test_null_payload_as_tombstone_when_asked(case):
    """--null-payload=tombstone: the row becomes a record with a null value,
    its key and headers intact, and the slot moves past it."""
    prepare(case)
    reader = case.reader()
    relay = case.relay("--null-payload=tombstone")
    conn = case.connect(autocommit=False)
    c = insert_rows(conn, [{"work_id": "tomb-1", "kind": "order_received", "payload": None}]
                    + good("after-tomb", 1))
    assert reader.read_until(has_ids(c.work_ids), 30), case.logs()
    rec = by_id(reader.records)["tomb-1"][0]
    assert rec.value is None, "tombstone expected, value is %r" % rec.value
    assert rec.key == b"tomb-1"
    assert rec.header("ce_id") == "tomb-1"
    # no data, so nothing for a content-type to describe; a record with a value has one
    assert "content-type" not in rec.header_names, rec.headers
    assert by_id(reader.records)["after-tomb-0"][0].header("content-type") == "application/json"
    wait_confirmed(case, parse_lsn(rec.header("ce_pglsn")))
    assert relay.stop() == EXIT_OK, relay.log


def test_text_payload_that_is_not_json(case):
    """PostgreSQL checks json and jsonb itself; a text payload column is
    checked by the relay (records are application/json)."""
    prepare(case)
    run_stop_case(case, {"work_id": "txt-1", "kind": "order_received", "payload": "{}",
                         "body": '{"unterminated": '},
                  ['payload column "body"', "type text", "valid JSON"],
                  extra_args=("--payload-column", "body"))


def test_text_payload_json_with_trailing_garbage(case):
    prepare(case)
    run_stop_case(case, {"work_id": "txt-2", "kind": "order_received", "payload": "{}",
                         "body": '{"a": 1} trailing'},
                  ['payload column "body"', "valid JSON"],
                  extra_args=("--payload-column", "body"))


def test_null_key(case):
    prepare(case)
    run_stop_case(case, {"work_id": "nk-1", "kind": "order_received", "payload": "{}",
                         "entity_id": None},
                  ['key column "entity_id" is NULL'], extra_args=("--key-column", "entity_id"))


def test_empty_key(case):
    prepare(case)
    run_stop_case(case, {"work_id": "ek-1", "kind": "order_received", "payload": "{}",
                         "entity_id": ""},
                  ['key column "entity_id" is empty'], extra_args=("--key-column", "entity_id"))


def test_empty_work_id(case):
    prepare(case)
    run_stop_case(case, {"work_id": "", "kind": "order_received", "payload": "{}"},
                  ['work ID column "work_id" is empty'])


def test_null_topic_template_column(case):
    prepare(case)
    run_stop_case(case, {"work_id": "nt-1", "kind": "order_received", "payload": "{}",
                         "dest": None},
                  ['topic template column "dest" is NULL'],
                  extra_args=("--topic", case.prefix + ".${dest}"))


@pytest.mark.parametrize("kind,words", [
    ("order received/v2", ["not a valid Kafka topic name"]),
    ("caf\u00e9", ["not a valid Kafka topic name"]),
    ("k" * 250, ["longer than", "249"]),
], ids=["space-slash", "non-ascii", "too-long"])
def test_topic_kafka_refuses(case, kind, words):
    prepare(case)
    run_stop_case(case, {"work_id": "topic-1", "kind": kind, "payload": "{}"}, words)


def test_payload_over_producer_message_max_bytes(case):
    """librdkafka refuses a message over -X message.max.bytes before sending it."""
    prepare(case)
    run_stop_case(case, {"work_id": "big-1", "kind": "order_received",
                         "payload": json.dumps({"blob": "x" * 20000})},
                  ["message.max.bytes"], extra_args=("-X", "message.max.bytes=10000"))


def test_payload_over_topic_max_message_bytes(case):
    """A topic created with max.message.bytes=2000: the producer allows the
    5 kB record, the broker answers MSG_SIZE_TOO_LARGE."""
    prepare(case)
    case.kafka.create_topic(case.topic("small"), partitions=1,
                            config={"max.message.bytes": "2000"})
    run_stop_case(case, {"work_id": "big-2", "kind": "small",
                         "payload": json.dumps({"blob": "y" * 5000})},
                  ["MSG_SIZE_TOO_LARGE"])


def test_missing_topic_client_auto_create_off(case):
    prepare(case)
    case.kafka.create_topic(case.topic("order_received"), partitions=3)
    run_stop_case(case, {"work_id": "miss-1", "kind": "missing", "payload": "{}"},
                  [case.topic("missing"), "nknown topic"],
                  extra_args=("-X", "allow.auto.create.topics=false",
                              "-X", "topic.metadata.propagation.max.ms=1000"))
    assert case.topic("missing") not in case.kafka.topics(), \
        "allow.auto.create.topics=false did not keep the topic from being created"


@pytest.fixture(scope="module")
def strict_broker(env):
    """A second broker whose brokers never create topics on their own."""
    b = KafkaBroker(env.base_dir, name="kafka-no-autocreate", heap="256m", quick_start=True,
                    extra_properties={"auto.create.topics.enable": "false"})
    b.start()
    yield b
    b.kill()
    b.remove()


def test_missing_topic_broker_auto_create_off(case, strict_broker):
    prepare(case)
    strict_broker.create_topic(case.topic("order_received"), partitions=3)
    reader = case.reader(bootstrap=strict_broker.bootstrap)
    relay = case.relay("-X", "topic.metadata.propagation.max.ms=1000",
                       brokers=strict_broker.bootstrap)
    conn = case.connect(autocommit=False)
    first = insert_rows(conn, good("first", 2))
    assert reader.read_until(has_ids(first.work_ids), 30), case.logs()
    wait_confirmed(case, max(parse_lsn(r.header("ce_pglsn")) for r in reader.records))
    bad = insert_rows(conn, [{"work_id": "miss-2", "kind": "missing", "payload": "{}"}])
    insert_rows(conn, good("later", 1))
    line = stops_unpublishable(relay)
    check_error(line, bad, "miss-2", [case.topic("missing"), "nknown topic"], table=False)
    assert_not_confirmed_past(case, bad)
    assert case.topic("missing") not in strict_broker.topics(), "the topic was created after all"
    assert_names_table(line)


def test_row_error_still_confirms_earlier_transactions_acked_late(case):
    """A row error stops the relay, but the acknowledgements of earlier
    transactions that arrive during its short drain must still be confirmed,
    so that a restart does not send them again. linger.ms holds the earlier
    transaction's messages in the producer well past the moment the bad row
    (refused by librdkafka before sending) stops the relay."""
    prepare(case)
    reader = case.reader()
    relay = case.relay("-X", "message.max.bytes=10000", "-X", "linger.ms=1500")
    conn = case.connect(autocommit=False)
    early = insert_rows(conn, good("early", 20))
    bad_row = {"work_id": "big-late", "kind": "order_received",
               "payload": json.dumps({"blob": "x" * 20000})}
    bad = insert_rows(conn, [bad_row])
    line = stops_unpublishable(relay)
    assert 'work ID "big-late"' in line, line
    assert_not_confirmed_past(case, bad)
    # the drain confirmed the earlier transaction: its commit is behind the slot
    assert case.confirmed() > early.lsn_before, \
        "the earlier transaction, acknowledged during the drain, was not confirmed:\n" + relay.log
    assert reader.read_until(has_ids(early.work_ids), 30), case.logs()
