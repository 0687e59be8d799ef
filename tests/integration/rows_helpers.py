# SPDX-License-Identifier: Apache-2.0
"""Helpers of the rows area (test_rows_*.py), for rows that cannot be
published: reading the relay's row-error line apart, waiting for it to stop
by itself, checking that the slot was not confirmed past a transaction."""

import re
import subprocess

from harness import EXIT_UNPUBLISHABLE, format_lsn, parse_lsn, the_error

# The stop-policy line for a row found unpublishable before producing it
# (outbox-relay(7), "Rows that cannot be published").
ROW_ERROR = re.compile(
    r'cannot publish the row with work ID "(?P<work_id>.*?)" of table (?P<table>"[^"]*(?:""[^"]*)*"'
    r'\."[^"]*(?:""[^"]*)*") at LSN (?P<row_lsn>[0-9A-F]+/[0-9A-F]+) \(transaction (?P<xid>\d+) '
    r'ending at LSN (?P<end_lsn>[0-9A-F]+/[0-9A-F]+)\): (?P<reason>.*)\. Nothing from this '
    r'transaction on is confirmed')
REMEDY_SKIP = re.compile(r"--skip-transaction=([0-9A-F]+/[0-9A-F]+)")
REMEDY_DLQ = re.compile(r"--dead-letter-transaction=([0-9A-F]+/[0-9A-F]+)")
LSN_TEXT = re.compile(r"\b([0-9A-F]+/[0-9A-F]+)\b")


def wait_exit(relay, timeout=60):
    """Wait for the relay to exit by itself; returns its exit code. A relay that
    keeps running past timeout is killed and the test fails with its log."""
    try:
        return relay.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        relay.kill()
        raise AssertionError("relay still running after %s s (expected it to stop by itself)\n%s"
                             % (timeout, relay.log))


def stops_unpublishable(relay, timeout=60):
    """Wait for exit 4 and return the relay's single error line."""
    rc = wait_exit(relay, timeout)
    assert rc == EXIT_UNPUBLISHABLE, "exit %s, expected 4\n%s" % (rc, relay.log)
    return the_error(relay.log)


def check_row_error(line, commit, work_id, table, reason_words):
    """Assert that a stop-policy error line names the work ID, the table, the
    row's LSN, the transaction end LSN (within the commit's LSN window), the
    reason (every word of reason_words) and both remedies verbatim.
    Returns the transaction end LSN text as printed."""
    m = ROW_ERROR.search(line)
    assert m, "error line does not have the documented shape:\n" + line
    assert m.group("work_id") == work_id, (m.group("work_id"), work_id, line)
    assert m.group("table") == table, (m.group("table"), table, line)
    end = m.group("end_lsn")
    assert commit.lsn_before < parse_lsn(end) <= commit.lsn_after, \
        "transaction end LSN %s not in (%s, %s]: %s" % (end, format_lsn(commit.lsn_before),
                                                        format_lsn(commit.lsn_after), line)
    assert parse_lsn(m.group("row_lsn")) < parse_lsn(end), line
    assert int(m.group("xid")) == commit.xid32, (m.group("xid"), commit.xid32, line)
    for w in reason_words:
        assert w in m.group("reason"), "reason lacks %r: %s" % (w, line)
    check_remedies(line, end)
    return end


def check_remedies(line, end_lsn):
    """Both remedies are suggested verbatim with the transaction's end LSN."""
    assert REMEDY_SKIP.findall(line) == [end_lsn], "no --skip-transaction=%s in: %s" % (end_lsn, line)
    assert REMEDY_DLQ.findall(line) == [end_lsn], \
        "no --dead-letter-transaction=%s in: %s" % (end_lsn, line)


def assert_not_confirmed_past(case, commit, slot=None):
    """The slot's confirmed_flush_lsn is still before the end of commit's
    transaction (at most the WAL insert position just before its COMMIT)."""
    c = case.confirmed(slot)
    assert c is not None and c <= commit.lsn_pre_commit, \
        "slot confirmed %s, past the unpublished transaction (its rows end before %s)" % (
            None if c is None else format_lsn(c), format_lsn(commit.lsn_pre_commit))
