# SPDX-License-Identifier: Apache-2.0
"""Helpers for the table-less outbox tests (test_rows_logical_messages.py): writing
messages with outbox_emit() or pg_logical_emit_message() in one transaction
while remembering the LSNs around its commit, the relay's error line for a
message it cannot publish, and comparing the records of a message and a
row."""

import re

from harness.outbox import in_transaction  # noqa: F401 (used by the tests through here)

PREFIX = "outbox"   # sql/outbox.sql's default -v message_prefix

# Headers that differ between two transactions, and ce_source, which names
# the table or the message prefix (outbox-relay(7), "An outbox with no table").
PER_TRANSACTION = {"ce_time", "ce_pglsn", "ce_pgxid", "ce_source"}

# The stop-policy line for a logical message found unpublishable.
MESSAGE_ERROR = re.compile(
    r'cannot publish work ID "(?P<work_id>.*?)" of the logical message with prefix '
    r'"(?P<prefix>[^"]*)" at LSN (?P<msg_lsn>[0-9A-F]+/[0-9A-F]+) \(transaction (?P<xid>\d+) '
    r'ending at LSN (?P<end_lsn>[0-9A-F]+/[0-9A-F]+)\): (?P<reason>.*)\. Nothing from this '
    r'transaction on is confirmed')


def emit_sql(work_id, kind, payload, entity_id=None, headers=None):
    """The outbox_emit() call for these values, as (sql, params)."""
    return ("SELECT outbox_emit(%s, %s, %s, %s, %s)::text",
            (work_id, kind, payload, entity_id, headers))


def enqueue_sql(work_id, kind, payload, entity_id=None, headers=None):
    """The outbox_enqueue() call (a table row) for these values, as (sql, params)."""
    return ("SELECT outbox_enqueue(%s, %s, %s, %s, %s)",
            (work_id, kind, payload, entity_id, headers))


def raw_message_sql(content, transactional=True, prefix=PREFIX):
    """pg_logical_emit_message() with text (str) or bytea (bytes) content;
    returns its LSN as text."""
    if isinstance(content, bytes):
        return ("SELECT pg_logical_emit_message(%s, %s, %s::bytea)::text",
                (transactional, prefix, content))
    return ("SELECT pg_logical_emit_message(%s, %s, %s::text)::text", (transactional, prefix, content))


def source_of(record):
    return record.header("ce_source")


def comparable(record):
    """What a message's record and a row's record with the same values must
    share: topic, partition, key, value, and every header in order but the
    per-transaction ones and ce_source."""
    return {
        "topic": record.topic,
        "partition": record.partition,
        "key": record.key,
        "value": record.value,
        "headers": [(k, v) for k, v in record.headers if k not in PER_TRANSACTION],
    }
