# SPDX-License-Identifier: Apache-2.0
"""An outbox with no table (outbox-relay(7), "An outbox with no table"): with
--message-prefix the relay also publishes transactional logical messages of
that prefix, which outbox_emit() (sql/outbox.sql) writes as a small JSON
envelope.

- A message and a table row with the same values give the same record:
  topic, partition, key, value and every header in order, except the
  per-transaction ones and ce_source, which names the prefix.
- A rolled-back message is never published; a non-transactional one never
  either (it survives a rollback): counted in
  outbox_relay_nontransactional_messages_total and logged with its LSN,
  once however many come at once. Messages of other prefixes are counted as
  ignored records.
- A transactional message of a prefix that looks like an outbox's (it
  contains "outbox", or outbox_emit() of the database writes it) and is not
  --message-prefix stops the relay (exit 4) before the slot passes it, naming
  the prefix, the LSN and the fix; --ignore-message-prefix passes it over.
- A malformed envelope stops the relay (exit 4) naming the message's LSN
  (the one pg_logical_emit_message() returned), or goes to the dead-letter
  topic.
- Messages keep their place among the rows of their transaction.
- The prefix is part of the relay's mapping: a relay with another prefix
  refuses the slot.
- `check` FAILs when outbox_emit() writes a prefix other than the relay's;
  outbox_emit() refuses at the writer what the relay would refuse.
"""

import json

import psycopg2
import pytest
from harness import (EXIT_ENV, EXIT_OK, by_id, format_lsn, free_port, has_ids, log_lines, parse_lsn,
                     procs, read_while_alive, wait_confirmed)
from harness.http import wait_metric
from message_helpers import (MESSAGE_ERROR, PREFIX, comparable, emit_sql, enqueue_sql,
                             in_transaction, raw_message_sql, source_of)
from rows_helpers import assert_not_confirmed_past, check_remedies, stops_unpublishable
from check_helpers import check_args, run_check

ORDER = ('{"order_id": 103, "customer_id": 1, "total": "29.00", '
         '"message": "Order received; payment still pending"}')
TRACE = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def envelope(**columns):
    return json.dumps({"version": 1, "columns": columns})


def message_relay(case, *extra, **kw):
    return case.relay("--message-prefix", PREFIX, *extra, **kw)


def test_message_and_row_with_the_same_values_give_the_same_record(case):
    values = [
        ("order-103-ack", "order_received", ORDER, "order-103",
         json.dumps({"traceparent": TRACE, "tenant": "Mina \u00e9 \u7ea2\u8336"})),
        ("tricky", "order_paid",
         '{"big": 123456789012345678901234567890.123456789, "small": 1e-7, "esc": '
         '"tab\\t \\"q\\" back\\\\slash \\u00e9 \\ud83c\\udf75 \\u0001", "nested": [1, {"a": null}]}',
         None, None),
        ("empty-object", "order_received", "{}", "", "{}"),
    ]
    sysid = case.pg.system_identifier()
    reader = case.reader()
    relay = message_relay(case, "--column-header", "entity_id=x-entity")
    conn = case.connect(autocommit=False)
    commits = {}
    for v in values:
        in_transaction(conn, [enqueue_sql(*v)])
        commits[v[0]], _ = in_transaction(conn, [emit_sql(*v)])
    ids = [v[0] for v in values]
    assert read_while_alive(reader, relay, lambda recs: all(
        len(by_id(recs)[i]) == 2 for i in ids), 60), case.logs()
    table_source = "postgresql://%s/%s/public.outbox" % (sysid, case.dbname)
    message_source = "postgresql://%s/%s/message/%s" % (sysid, case.dbname, PREFIX)
    stored = dict(case.query("SELECT work_id, payload::text FROM outbox"))
    for work_id, recs in by_id(reader.records).items():
        row = [r for r in recs if source_of(r) == table_source]
        msg = [r for r in recs if source_of(r) == message_source]
        assert len(row) == 1 and len(msg) == 1, [source_of(r) for r in recs]
        row, msg = row[0], msg[0]
        assert comparable(msg) == comparable(row), work_id
        # the same headers in the same order, the per-transaction ones included
        assert msg.header_names == row.header_names, work_id
        assert msg.value_text == stored[work_id]
        # the message's transaction
        end = parse_lsn(msg.header("ce_pglsn"))
        assert commits[work_id].lsn_before < end <= commits[work_id].lsn_after
        assert int(msg.header("ce_pgxid")) == commits[work_id].xid32
    got = by_id(reader.records)
    assert got["order-103-ack"][0].header("traceparent") == TRACE
    assert got["order-103-ack"][0].header("x-entity") == "order-103"
    assert "x-entity" not in got["tricky"][0].header_names  # NULL: no header, in both
    wait_confirmed(case, max(c.lsn_before for c in commits.values()))
    assert relay.stop() == EXIT_OK, relay.log


def test_rolled_back_message_is_never_published(case):
    reader = case.reader()
    relay = message_relay(case)
    conn = case.connect(autocommit=False)
    in_transaction(conn, [emit_sql("rolled-back", "order_received", ORDER),
                          ("INSERT INTO outbox (work_id, kind, payload) VALUES "
                           "('rolled-back-row', 'order_received', '{}')", None)], commit=False)
    after, _ = in_transaction(conn, [emit_sql("after", "order_received", ORDER)])
    assert read_while_alive(reader, relay, has_ids(["after"]), 30), case.logs()
    wait_confirmed(case, after.lsn_before)
    assert relay.stop() == EXIT_OK, relay.log
    assert reader.drain(timeout=30)
    assert set(by_id(reader.records)) == {"after"}


def test_non_transactional_message_is_counted_and_logged_never_published(case):
    port = free_port()
    reader = case.reader()
    relay = message_relay(case, "--http", "127.0.0.1:%d" % port)
    conn = case.connect(autocommit=False)
    ghost = envelope(work_id="ghost", kind="order_received", payload="{}")
    # written in a transaction that rolls back: the message is in the WAL all the same
    _, (first_lsn,) = in_transaction(conn, [raw_message_sql(ghost, transactional=False)],
                                     commit=False)
    # many at once: one log line
    in_transaction(conn, [("SELECT count(pg_logical_emit_message(false, %s, %s)) "
                           "FROM generate_series(1, 49)", (PREFIX, ghost))])
    # another application's prefix, transactional or not: ignored (and counted), never published
    in_transaction(conn, [raw_message_sql(ghost, transactional=False, prefix="other-app"),
                          raw_message_sql(ghost, transactional=True, prefix="other-app")])
    after, _ = in_transaction(conn, [emit_sql("after", "order_received", ORDER)])
    assert read_while_alive(reader, relay, has_ids(["after"]), 30), case.logs()
    samples = wait_metric(port, "outbox_relay_nontransactional_messages_total", lambda v: v >= 50)
    assert samples["outbox_relay_nontransactional_messages_total"] == 50, samples
    assert samples["outbox_relay_ignored_records_total"] == 2, samples
    lines = log_lines(relay.log, "not publishing the non-transactional logical message")
    assert len(lines) == 1, relay.log
    assert 'with prefix "%s" at LSN %s:' % (PREFIX, first_lsn) in lines[0], (first_lsn, lines)
    assert "rolls back" in lines[0] and "outbox_emit()" in lines[0], lines[0]
    wait_confirmed(case, after.lsn_before)
    assert relay.stop() == EXIT_OK, relay.log
    assert reader.drain(timeout=30)
    assert set(by_id(reader.records)) == {"after"}


BAD_ENVELOPES = [
    ("not-json", "order 103 was received", "not valid JSON", "INVALID_ENVELOPE"),
    ("bytea", b'{"version": 1, "columns": {"work_id": "w\xff"}}', "not UTF-8 text (byte 0xFF at offset 40)",
     "INVALID_ENVELOPE"),
    ("version", '{"version": 2, "columns": {"work_id": "w"}}', "reads version 1", "INVALID_ENVELOPE"),
    ("payload", envelope(work_id="w", kind="k", payload="{oops"),
     'payload column "payload" does not hold valid JSON', "INVALID_JSON"),
    ("no-work-id", envelope(kind="k", payload="{}"), 'has no column "work_id"', "MISSING_COLUMN"),
]


@pytest.mark.parametrize("content,words,code", [b[1:] for b in BAD_ENVELOPES],
                         ids=[b[0] for b in BAD_ENVELOPES])
def test_malformed_envelope_stops_naming_the_message_lsn(case, content, words, code):
    reader = case.reader()
    relay = message_relay(case)
    conn = case.connect(autocommit=False)
    first, _ = in_transaction(conn, [emit_sql("first", "order_received", ORDER)])
    assert read_while_alive(reader, relay, has_ids(["first"]), 30), case.logs()
    wait_confirmed(case, first.lsn_before)
    bad, (msg_lsn,) = in_transaction(conn, [raw_message_sql(content)])
    line = stops_unpublishable(relay)
    m = MESSAGE_ERROR.search(line)
    assert m, "error line does not have the documented shape:\n" + line
    assert m.group("prefix") == PREFIX
    assert m.group("work_id") == ("w" if code == "INVALID_JSON" else "(none)"), line
    assert m.group("msg_lsn") == msg_lsn, (msg_lsn, line)
    assert bad.lsn_before < parse_lsn(m.group("end_lsn")) <= bad.lsn_after, line
    assert int(m.group("xid")) == bad.xid32, line
    assert words in m.group("reason"), line
    check_remedies(line, m.group("end_lsn"))
    assert_not_confirmed_past(case, bad)


def test_skip_transaction_remedy_skips_a_malformed_message(case):
    """The remedy the error names works for a message: the relay started
    again with --skip-transaction=LSN skips exactly that transaction (its
    rows and messages), logs it, and publishes what follows."""
    reader = case.reader()
    relay = message_relay(case)
    conn = case.connect(autocommit=False)
    in_transaction(conn, [raw_message_sql("not an envelope"),
                          emit_sql("skipped-too", "order_received", ORDER)])
    after, _ = in_transaction(conn, [emit_sql("after", "order_received", ORDER)])
    m = MESSAGE_ERROR.search(stops_unpublishable(relay))
    assert m, relay.log
    again = message_relay(case, "--skip-transaction=" + m.group("end_lsn"), create_slot=False)
    assert read_while_alive(reader, again, has_ids(["after"]), 30), case.logs()
    assert len(log_lines(again.log, "skipped logical message with prefix")) == 2, again.log
    wait_confirmed(case, after.lsn_before)
    assert again.stop() == EXIT_OK, again.log
    assert reader.drain(timeout=30)
    assert set(by_id(reader.records)) == {"after"}


def test_malformed_envelope_is_dead_lettered(case):
    dead = case.prefix + ".dead"
    case.kafka.create_topic(dead, partitions=1)
    sysid = case.pg.system_identifier()
    reader = case.reader([case.topic_pattern, dead])
    relay = message_relay(case, "--on-error=dead-letter", "--dead-letter-topic", dead)
    conn = case.connect(autocommit=False)
    content = b'{"version": 1, "columns": {"work_id": "\xff"}}'
    bad, (msg_lsn, _) = in_transaction(conn, [raw_message_sql(content),
                                              emit_sql("same-transaction", "order_received", ORDER)])
    after, _ = in_transaction(conn, [emit_sql("after", "order_received", ORDER)])
    assert read_while_alive(reader, relay, lambda recs: has_ids(["same-transaction", "after"])(recs)
                            and any(r.topic == dead for r in recs), 30), case.logs()
    assert relay.alive, relay.log
    dl = [r for r in reader.records if r.topic == dead]
    assert len(dl) == 1, dl
    dl = dl[0]
    assert dl.value == content and dl.key is None
    assert dl.header("outbox_relay_error_code") == "INVALID_ENVELOPE"
    assert "not UTF-8" in dl.header("outbox_relay_error")
    assert dl.header("outbox_relay_topic") == ""
    assert dl.header("ce_source") == "postgresql://%s/%s/message/%s" % (sysid, case.dbname, PREFIX)
    assert bad.lsn_before < parse_lsn(dl.header("ce_pglsn")) <= bad.lsn_after
    assert "ce_id" not in dl.header_names
    warning = log_lines(relay.log, 'dead-lettering work ID "(none)" of the logical message '
                        'with prefix "%s"' % PREFIX)
    assert len(warning) == 1 and "at LSN %s " % msg_lsn in warning[0], relay.log
    wait_confirmed(case, after.lsn_before)
    assert relay.stop() == EXIT_OK, relay.log


def test_messages_keep_their_place_among_the_rows_of_their_transaction(case):
    reader = case.reader()
    relay = message_relay(case, "--key-column", "entity_id")
    conn = case.connect(autocommit=False)
    steps = [enqueue_sql("a-row", "order_received", '{"n": 1}', "order-103"),
             emit_sql("b-msg", "order_received", '{"n": 2}', "order-103"),
             enqueue_sql("c-row", "order_received", '{"n": 3}', "order-103"),
             emit_sql("d-msg", "order_received", '{"n": 4}', "order-103"),
             emit_sql("e-msg", "order_received", '{"n": 5}', "order-103")]
    commit, _ = in_transaction(conn, steps)
    ids = ["a-row", "b-msg", "c-row", "d-msg", "e-msg"]
    assert read_while_alive(reader, relay, has_ids(ids), 30), case.logs()
    recs = sorted(reader.records, key=lambda r: (r.partition, r.offset))
    assert len({r.partition for r in recs}) == 1  # one key, one partition
    assert [r.header("ce_id") for r in recs] == ids
    assert [json.loads(r.value)["n"] for r in recs] == [1, 2, 3, 4, 5]
    assert len({(r.header("ce_pglsn"), r.header("ce_pgxid")) for r in recs}) == 1
    wait_confirmed(case, commit.lsn_before)
    assert relay.stop() == EXIT_OK, relay.log


def test_a_relay_with_another_prefix_refuses_the_slot(case):
    """The message prefix is part of the mapping two relays of one slot must
    share: one publishing prefix p1 and one publishing p2 would each confirm
    messages only the other publishes."""
    relay = case.relay("--message-prefix", "p1")
    # once the slot is confirmed past a commit, a checkpoint of this mapping was acknowledged
    conn = case.connect(autocommit=False)
    commit, _ = in_transaction(conn, [("SELECT pg_logical_emit_message(true, 'p1', %s)",
                                       (envelope(work_id="w", kind="k", payload="{}"),))])
    wait_confirmed(case, commit.lsn_before)
    # refused as a warm standby, or at the latest when it takes the slot over
    other = case.relay("--message-prefix", "p2", create_slot=False, ready=False)
    procs.wait_until(lambda: "warm standby" in other.log or not other.alive, 30,
                     what="the relay with another prefix to wait or stop")
    assert relay.stop() == EXIT_OK, relay.log
    assert other.wait(60) == EXIT_ENV, other.log
    assert "another table set or row mapping" in other.log, other.log
    assert "message-prefix=p1\"" in other.log and "message-prefix=p2\"" in other.log, other.log
    # a relay without --message-prefix is another mapping too
    without = case.relay(create_slot=False, ready=False)
    assert without.wait(60) == EXIT_ENV, without.log
    assert "message-prefix=p1\"" in without.log, without.log
    # the same prefix takes the slot over
    same = case.relay("--message-prefix", "p1", create_slot=False)
    assert same.stop() == EXIT_OK, same.log


def test_check_compares_the_prefix_with_the_kits(case):
    rc, out, items = run_check(check_args(case, "--message-prefix", PREFIX))
    status, text = items["message prefix"]
    assert status == "PASS", out
    assert "outbox_emit() writes it" in text, out
    # outbox_emit() of this database writes another prefix: nothing would be published
    rc, out, items = run_check(check_args(case, "--message-prefix", "billing"))
    status, text = items["message prefix"]
    assert status == "FAIL" and rc != 0, out
    assert 'writes prefix "%s"' % PREFIX in text and 'publishes "billing"' in text, out
    assert "--message-prefix=%s" % PREFIX in text and "-v message_prefix=billing" in text, out
    # ... unless this relay was told to pass it over: then said plainly
    rc, out, items = run_check(check_args(case, "--message-prefix", "billing",
                                          "--ignore-message-prefix", PREFIX))
    assert items["message prefix"][0] == "WARN", out
    assert "passes over unpublished" in items["message prefix"][1], out
    # no --message-prefix: the kit's prefix is named, with what the relay does with it
    rc, out, items = run_check(check_args(case))
    assert items["message prefix"][0] == "PASS", out
    assert 'writes prefix "%s"' % PREFIX in items["message prefix"][1], out
    assert "stops (exit 4)" in items["message prefix"][1], out
    # no outbox_emit() at all
    case.query("DROP FUNCTION outbox_emit(text, text, jsonb, text, jsonb); "
               "DROP FUNCTION outbox_message_prefix()")
    rc, out, items = run_check(check_args(case, "--message-prefix", PREFIX))
    assert items["message prefix"][0] == "WARN", out
    assert "outbox_emit() of sql/outbox.sql is not in database" in items["message prefix"][1], out
    # without the option and without the kit, no such item
    rc, out, items = run_check(check_args(case))
    assert "message prefix" not in items, out


# (the relay's extra options, the kit's prefix or None to keep sql/outbox.sql's, the prefix written)
FOREIGN_PREFIXES = [
    (["--message-prefix", "billing"], None, PREFIX),   # the kit's default, another relay prefix
    ([], None, PREFIX),                                # the kit's, and no --message-prefix at all
    ([], None, "Orders-Outbox.v2"),                    # contains "outbox", whatever the case
    ([], "billing", "billing"),                        # the kit's own prefix, however named
    (["--plugin", "pgoutput"], None, PREFIX),          # pgoutput's messages, the same way
]


@pytest.mark.parametrize("extra,kit,prefix", FOREIGN_PREFIXES,
                         ids=["relay-billing", "no-prefix", "contains-outbox", "kit-billing",
                              "pgoutput"])
def test_message_of_an_outbox_prefix_not_the_relays_stops_the_relay(case, extra, kit, prefix):
    """A transactional message that looks like an outbox's and is not the
    relay's prefix is never passed over silently: the slot would move past
    it and no table row would be left to redrive. The relay stops (exit 4)
    naming the prefix, the message's LSN and both fixes, and confirms
    nothing from that transaction on; --ignore-message-prefix passes it over."""
    if kit:
        case.query("CREATE OR REPLACE FUNCTION outbox_message_prefix() RETURNS text "
                   "LANGUAGE sql IMMUTABLE RETURN '%s'" % kit)
    reader = case.reader()
    relay = case.relay(*extra)
    conn = case.connect(autocommit=False)
    ghost = envelope(work_id="lost", kind="order_received", payload="{}")
    bad, (msg_lsn,) = in_transaction(conn, [raw_message_sql(ghost, prefix=prefix)])
    line = stops_unpublishable(relay)
    assert 'logical message with prefix "%s"' % prefix in line, line
    assert "at LSN %s " % msg_lsn in line, (msg_lsn, line)
    assert "--message-prefix=%s --accept-config-change" % prefix in line, line
    assert "--ignore-message-prefix=%s" % prefix in line, line
    if kit:
        assert "outbox_emit() in database" in line, line
    assert_not_confirmed_past(case, bad)
    # the operator's other answer: another application writes it
    again = case.relay(*extra, "--ignore-message-prefix", prefix, create_slot=False)
    after, _ = in_transaction(conn, [enqueue_sql("after", "order_received", ORDER)])
    assert read_while_alive(reader, again, has_ids(["after"]), 30), case.logs()
    wait_confirmed(case, after.lsn_before)
    assert again.stop() == EXIT_OK, again.log
    assert set(by_id(reader.records)) == {"after"}


@pytest.mark.parametrize("args,sqlstate", [
    ((None, "k", "{}"), "22004"),
    (("", "k", "{}"), "22023"),
    (("w", None, "{}"), "22004"),
    (("w", "k", None), "22004"),
    (("w", "k", "{}", None, '{"ce_type": "x"}'), "23514"),
    (("w", "k", "{}", None, '{"n": 1}'), "23514"),
    (("w", "k", json.dumps({"blob": "x" * (16 * 1024 * 1024)})), "54000"),
], ids=["null-id", "empty-id", "null-kind", "null-payload", "reserved-header", "number-header",
        "too-large"])
def test_outbox_emit_refuses_at_the_writer(case, args, sqlstate):
    """What the relay would find unpublishable never reaches the WAL: there
    is no row to fix afterwards."""
    conn = case.connect(autocommit=False)
    cur = conn.cursor()
    cur.execute("SELECT pg_current_wal_lsn()::text")
    with pytest.raises(psycopg2.Error) as e:
        cur.execute(*emit_sql(*args))
    assert e.value.pgcode == sqlstate, e.value.pgerror
    conn.rollback()
    # the valid call returns the message's LSN
    cur.execute(*emit_sql("w", "k", "{}"))
    lsn = cur.fetchone()[0]
    conn.commit()
    assert parse_lsn(lsn) > 0 and format_lsn(parse_lsn(lsn)) == lsn
    assert case.scalar("SELECT outbox_message_prefix()") == PREFIX
