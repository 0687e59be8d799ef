# SPDX-License-Identifier: Apache-2.0
"""Records the relay reads from the stream and does not publish.

Records the relay does not publish (UPDATE, DELETE and TRUNCATE of the
outbox, logical messages from pg_logical_emit_message, writes to other
tables) must never stop it: they are counted in
outbox_relay_ignored_records_total, logged once per kind, and rows inserted
after them arrive. Writes to tables that are not outboxes never reach the
relay (it asks wal2json for its tables only, add-tables), so they are
neither counted nor logged; the test checks that they are not published and
do not disturb the stream.
"""

import pytest
from harness import (EXIT_OK, arrive_and_confirm, by_id, error_lines, free_port, has_ids,
                     insert_rows, log_lines, read_while_alive, simple_rows)
from harness.http import wait_metric


def metrics_relay(case, *extra):
    port = free_port()
    relay = case.relay("--metrics-address", "127.0.0.1:%d" % port, *extra)
    return relay, port


def test_update_delete_truncate_and_other_tables_are_ignored(case):
    case.query("CREATE TABLE not_outbox (id int PRIMARY KEY, note text)")
    reader = case.reader()
    relay, port = metrics_relay(case)
    conn = case.connect(autocommit=False)
    cur = conn.cursor()
    t1 = insert_rows(conn, simple_rows("a", 3))
    # a TOASTed payload, then an UPDATE that leaves it unchanged (wal2json
    # leaves such a column out of the update record)
    insert_rows(conn, [{"work_id": "toast", "kind": "order_received",
                        "payload": {"blob": "q" * 300000}}])
    arrive_and_confirm(case, reader, relay, t1.work_ids + ["toast"])
    cur.execute("UPDATE outbox SET kind = 'changed' WHERE work_id IN ('a-0', 'a-1')")
    conn.commit()
    cur.execute("UPDATE outbox SET entity_id = 'e' WHERE work_id = 'toast'")
    conn.commit()
    cur.execute("DELETE FROM outbox WHERE work_id = 'a-2'")
    conn.commit()
    cur.execute("INSERT INTO not_outbox VALUES (1, 'x'), (2, 'y')")
    cur.execute("UPDATE not_outbox SET note = 'z'")
    conn.commit()
    cur.execute("TRUNCATE outbox")
    conn.commit()
    # insert and delete in one transaction (keeps the outbox empty): the
    # insert committed, so it is published; the delete is ignored
    t_mix = insert_rows(conn, simple_rows("mixed", 1), extra_sql=["DELETE FROM outbox"])
    last = insert_rows(conn, simple_rows("z", 2))
    got = arrive_and_confirm(case, reader, relay, t_mix.work_ids + last.work_ids)

    # updates 2 + 1, deletes 1 + 1, truncate 1; not_outbox never reaches the relay
    samples = wait_metric(port, "outbox_relay_ignored_records_total", lambda v: v >= 6)
    assert samples["outbox_relay_ignored_records_total"] == 6, samples
    for kind in ("update", "delete", "truncate"):
        lines = log_lines(relay.log, "not publishing %s records" % kind)
        assert len(lines) == 1, "expected one log line for %s records:\n%s" % (kind, relay.log)
    assert not log_lines(relay.log, "not_outbox"), relay.log
    assert relay.stop() == EXIT_OK, relay.log
    assert reader.drain(timeout=30)
    got = by_id(reader.records)
    assert {k: len(v) for k, v in got.items()} == \
        {w: 1 for w in t1.work_ids + ["toast"] + t_mix.work_ids + last.work_ids}, \
        "updated, deleted or other-table rows were published, or rows published twice"
    assert error_lines(relay.log) == []


@pytest.mark.parametrize("transactional", [True, False], ids=["transactional", "non-transactional"])
def test_logical_messages_are_ignored(case, transactional):
    reader = case.reader()
    relay, port = metrics_relay(case)
    conn = case.connect(autocommit=False)
    cur = conn.cursor()
    first = insert_rows(conn, simple_rows("a", 1))
    arrive_and_confirm(case, reader, relay, first.work_ids)
    for content in ("hello", '{"json": "content"}', "\u00e9\U0001F600"):
        cur.execute("SELECT pg_logical_emit_message(%s, 'some-app', %s)", (transactional, content))
        conn.commit()
    after = insert_rows(conn, simple_rows("z", 2))
    arrive_and_confirm(case, reader, relay, after.work_ids)
    samples = wait_metric(port, "outbox_relay_ignored_records_total", lambda v: v >= 3)
    assert samples["outbox_relay_ignored_records_total"] == 3, samples
    assert len(log_lines(relay.log, "not publishing message records")) == 1, relay.log
    assert relay.stop() == EXIT_OK, relay.log


def test_binary_logical_message_is_ignored(case):
    """Another application's pg_logical_emit_message with bytea content: wal2json
    copies the bytes into its line unescaped (0xff, not UTF-8). The relay does
    not publish messages, so such a line must not stop the outbox."""
    reader = case.reader()
    relay, port = metrics_relay(case)
    conn = case.connect(autocommit=False)
    cur = conn.cursor()
    first = insert_rows(conn, simple_rows("a", 1))
    arrive_and_confirm(case, reader, relay, first.work_ids)
    cur.execute("SELECT pg_logical_emit_message(true, 'bin', '\\xff00fe41'::bytea)")
    conn.commit()
    after = insert_rows(conn, simple_rows("z", 1))
    assert read_while_alive(reader, relay, has_ids(after.work_ids), 30), \
        "the row after a binary logical message did not arrive (relay %s)\n%s" % (
            "running" if relay.alive else "exited %s" % relay.returncode, case.logs())
    samples = wait_metric(port, "outbox_relay_ignored_records_total", lambda v: v >= 1)
    assert samples["outbox_relay_ignored_records_total"] == 1, samples
    assert relay.stop() == EXIT_OK, relay.log
