# SPDX-License-Identifier: Apache-2.0
"""Stream-level input: records the relay does not publish, values whose text
is unusual, and outbox tables whose names need quoting.

Records the relay does not publish (UPDATE, DELETE and TRUNCATE of the
outbox, logical messages from pg_logical_emit_message, writes to other
tables) must never stop it: they are counted in
outbox_relay_ignored_records_total, logged once per kind, and rows inserted
after them arrive. Writes to tables that are not outboxes never reach the
relay (it asks wal2json for its tables only, add-tables), so they are
neither counted nor logged; the test checks that they are not published and
do not disturb the stream.

Every published key, value and ce_id must be byte-exact against
PostgreSQL's own text output of the column (SELECT col::text).
"""

import json

import pytest
from bad_input_helpers import (create_topic, error_lines, log_lines, read_while_alive,
                               wait_metric)
from harness import EXIT_OK, free_port, parse_lsn
from helpers import by_id, has_ids, insert_rows, simple_rows, wait_confirmed


def metrics_relay(case, *extra):
    port = free_port()
    relay = case.relay("--metrics-address", "127.0.0.1:%d" % port, *extra)
    return relay, port


def arrive_and_confirm(case, reader, relay, ids, timeout=30):
    assert read_while_alive(reader, relay, has_ids(ids), timeout), \
        "rows %s did not arrive\n%s" % (
            sorted(set(ids) - {r.header("ce_id") for r in reader.records}), case.logs())
    assert relay.alive, relay.log
    got = by_id(reader.records)
    wait_confirmed(case, max(parse_lsn(r.header("ce_pglsn")) for i in ids for r in got[i]))
    return got


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


UNUSUAL_TEXT = [
    ("ctl", "bell\x07 tab\t nl\n cr\r esc\x1b unit\x1f del\x7f"),
    ("quotes", "double \" single ' back \\ slash / both \\\" end"),
    ("nul6", "\\u0000"),                               # the six characters, not a NUL
    ("nulmix", "a\\u0000b\\\\u0000c \\n \\t \\\\"),
    ("utf8", "\u00e9 \u4e2d\u6587 \u0394 \u20ac \U0001F600 \U0001D11E \U0001F469\u200d\U0001F4BB"),
    ("json-ish", '{"not": "a payload", "x": [1,2]}'),
    ("spaces", "  leading and trailing  "),
]


def test_unusual_text_is_byte_exact(case):
    """Keys (--key-column on a text column), work IDs (ce_id) and json
    payloads with control characters, quotes, backslashes, the literal six
    characters \\u0000, multi-byte and 4-byte UTF-8, a 64 KB and a 900 KB
    payload. -X message.max.bytes and the topic's max.message.bytes are
    raised so that 900 KB fits."""
    case.query("ALTER TABLE outbox ADD COLUMN doc json")
    topic = case.topic("order_received")
    create_topic(case.kafka, topic, partitions=3, config={"max.message.bytes": "3000000"})
    reader = case.reader([topic])
    relay = case.relay("--key-column", "entity_id", "--payload-column", "doc",
                       "-X", "message.max.bytes=3000000")
    conn = case.connect(autocommit=False)
    rows = []
    for name, text in UNUSUAL_TEXT:
        doc = '{"text": %s, "raw": "%s", "kept":  [1.50, 1e400, -0]}' % (
            json.dumps(text), "\u00e9\U0001F600 \\\\ \\u0000 \\ud83d\\ude00")
        rows.append({"work_id": "id " + text, "kind": "order_received", "payload": {},
                     "entity_id": text, "doc": doc})
    unit = '{"s": "\\u0000 \\" \\\\ \U0001F600 \u00e9 \\n", "n": 12345678901234567890.5}, '
    for name, size in (("64k", 64 * 1024), ("900k", 900 * 1024)):
        body = "[" + unit * (size // len(unit.encode()) - 1) + "{}]"
        rows.append({"work_id": "big-" + name, "kind": "order_received", "payload": {},
                     "entity_id": "big-" + name, "doc": body})
    c = insert_rows(conn, rows)
    ids = c.work_ids
    got = arrive_and_confirm(case, reader, relay, ids, timeout=60)
    expected = {w: (k, d) for w, k, d in case.query(
        "SELECT work_id::text, entity_id::text, doc::text FROM outbox")}
    for w in ids:
        rec = got[w][0]
        key, doc = expected[w]
        assert rec.header("ce_id") == w, (w, rec.header("ce_id"))
        assert rec.key == key.encode("utf-8"), (w, rec.key)
        assert rec.value == doc.encode("utf-8"), \
            "%s: value differs (%d bytes published, %d expected)" % (w, len(rec.value or b""),
                                                                     len(doc.encode()))
    assert len(expected["big-900k"][1].encode()) > 900 * 1000
    assert relay.stop() == EXIT_OK, relay.log


NUM80 = "1234567890" * 8                                   # 80 digits


@pytest.mark.parametrize("key_column,topic_column", [("num", "big"), ("big", "num")])
def test_numbers_as_key_and_in_topic(case, key_column, topic_column):
    """bigint and numeric (80 digits, scale kept) as the Kafka key and in the
    topic template: the text PostgreSQL prints, never rounded through a double."""
    case.query("ALTER TABLE outbox ADD COLUMN big bigint, ADD COLUMN num numeric")
    reader = case.reader()
    relay = case.relay("--key-column", key_column,
                       "--topic", "%s.n.${%s}" % (case.prefix, topic_column))
    conn = case.connect(autocommit=False)
    values = [
        ("max", 9223372036854775807, NUM80),
        ("min", -9223372036854775808, "-" + NUM80 + ".000"),
        ("frac", 9007199254740993, "0." + NUM80),
        ("small", 0, "-0.00000000000000000000000000000000000001"),
        ("exp", 1, "1e-7"),
    ]
    c = insert_rows(conn, [{"work_id": w, "kind": "k", "payload": {}, "big": b, "num": n}
                           for w, b, n in values])
    got = arrive_and_confirm(case, reader, relay, c.work_ids)
    expected = {w: (b, n) for w, b, n in case.query(
        "SELECT work_id, big::text, num::text FROM outbox")}
    for w in c.work_ids:
        rec = got[w][0]
        text = dict(zip(("big", "num"), expected[w]))
        assert rec.key == text[key_column].encode(), (w, rec.key, text[key_column])
        assert rec.topic == "%s.n.%s" % (case.prefix, text[topic_column]), (w, rec.topic)
    assert relay.stop() == EXIT_OK, relay.log


def test_table_names_that_need_quoting(case):
    tables = [
        ('public."Foo bar"', "space"),
        ('public."UPPER"', "upper"),
        ('public."it\'s"', "quote"),
        ('"My.Schema"."Out""box"', "dot-schema-double-quote"),
        ('"my schema"."a,b"', "comma"),
    ]
    case.query('CREATE SCHEMA "My.Schema"')
    case.query('CREATE SCHEMA "my schema"')
    for t, _ in tables:
        case.query("CREATE TABLE %s (LIKE public.outbox INCLUDING ALL)" % t)
    # a table whose name differs only in case must not be captured
    case.query('CREATE TABLE public.upper (LIKE public.outbox INCLUDING ALL)')
    args = []
    for t, _ in tables:
        args += ["-t", t]
    reader = case.reader()
    relay = case.relay(*args)
    conn = case.connect(autocommit=False)
    cur = conn.cursor()
    for t, tag in tables:
        cur.execute("INSERT INTO %s (work_id, kind, payload) VALUES (%%s, 'k', '{}')" % t, (tag,))
    cur.execute("INSERT INTO public.upper (work_id, kind, payload) VALUES ('lower', 'k', '{}')")
    cur.execute("INSERT INTO public.outbox (work_id, kind, payload) VALUES ('default', 'k', '{}')")
    conn.commit()
    ids = [tag for _, tag in tables]
    arrive_and_confirm(case, reader, relay, ids)
    assert relay.stop() == EXIT_OK, relay.log
    assert reader.drain(timeout=30)
    got = by_id(reader.records)
    assert set(got) == set(ids), "captured %s, expected %s" % (sorted(got), sorted(ids))
    sources = {got[tag][0].header("ce_source") for tag in ids}
    assert len(sources) == len(ids), "ce_source does not tell the tables apart: %s" % sources
