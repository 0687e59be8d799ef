# SPDX-License-Identifier: Apache-2.0
"""--plugin=pgoutput on the suite's PostgreSQL 15 (which has wal2json too):
the same rows through a wal2json relay and a pgoutput relay give Kafka
records that are the same byte for byte (key, value, headers, timestamp),
rows of every column type the project tests published as column headers, a
logical message and a dead-lettered row included; the publication is made
by --create-slot; a slot keeps its plugin (another --plugin is exit 2);
pgoutput's own guarantees: a row of a recreated table or a publication
changed while running stops the relay without confirming past it; a
transaction past the walsender's logical_decoding_work_mem comes streamed
(protocol version 2) with a rolled-back savepoint taken back, and one the
decoder cannot follow comes again unstreamed.

The end-to-end core on every major, 14 to 18, is in test_sql_matrix.py.
"""

import pytest
import harness
from harness import (EXIT_ENV, EXIT_OK, EXIT_USAGE, arrive_and_confirm, by_id, has_ids, insert_rows, parse_lsn,
                     read_while_alive, run_relay, simple_rows, wait_confirmed, wait_until)
from harness.outbox import SMALL_WORK_MEM, in_transaction, large_transaction

TYPES_SQL = """
CREATE SCHEMA "int";
CREATE TYPE "int".doc_type AS ENUM ('invoice', 'note');
CREATE DOMAIN yes_no AS boolean;
ALTER TABLE outbox
    ADD COLUMN b boolean, ADD COLUMN ba bytea, ADD COLUMN i8 bigint, ADD COLUMN n numeric,
    ADD COLUMN f8 double precision, ADD COLUMN f4 real, ADD COLUMN yn yes_no,
    ADD COLUMN ab boolean[], ADD COLUMN ts timestamptz, ADD COLUMN iv interval, ADD COLUMN j json,
    ADD COLUMN doc "int".doc_type, ADD COLUMN ch char(4), ADD COLUMN t text, ADD COLUMN u uuid,
    ADD COLUMN bits bit(4);
"""
# every added column published as a column header of its own name (at most 16)
TYPED = ["b", "ba", "i8", "n", "f8", "f4", "yn", "ab", "ts", "iv", "j", "doc", "ch", "t", "u", "bits"]

ROWS = [
    # (work_id, kind, payload, {column: SQL text})
    ("odd", "order_received", '{"big": 123456789012345678901234567890.120, "neg": -0.0, "s": "\\u00e9"}',
     {"b": "true", "ba": "\\x00ff10", "i8": "-9223372036854775808", "n": "-0.000001000",
      "f8": "1.5e300", "f4": "3.25", "yn": "false", "ab": "{t,f,NULL}",
      "ts": "2019-12-31 18:30:00.123456+00", "iv": "1 year 2 mons 04:05:06.789",
      "j": '[1, 2.50, {"a":null}]', "doc": "note", "ch": "ab",
      "t": 'tab\there "q" back\\slash nl\n end \u00e9 \U0001F600', "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
      "bits": "1010"}),
    ("specials", "order_received", '{"n": 1}',
     {"b": "false", "n": "NaN", "f8": "-Infinity", "f4": "NaN", "t": "", "ab": "{}"}),
    ("nulls", "order_paid", '{"n": 2}', {}),
    ("headers", "order_paid", '{"n": 3}', {"i8": "42", "headers": '{"x-tenant": "acme"}'}),
]


def add_types(case):
    case.query(TYPES_SQL)


def relay_with(case, plugin, slot, prefix, *extra):
    args = ["--plugin", plugin, "--topic", prefix + ".${kind}", "--record-timestamp", "commit",
            "--message-prefix", "outbox", "--on-error=dead-letter", "--dead-letter-topic",
            prefix + ".dead"]
    for c in TYPED:
        args += ["--column-header", c]
    r = case.relay(*(args + list(extra)), slot=slot)
    case.extra_slots.append(slot)
    return r


def insert_typed(case):
    """ROWS in two transactions, an outbox_emit() message, and a row that
    cannot be published (its kind makes no valid topic name). Returns the
    work IDs."""
    conn = case.connect(autocommit=False)
    statements = []
    for work_id, kind, payload, cols in ROWS:
        names = ["work_id", "kind", "payload"] + list(cols)
        statements.append(("INSERT INTO outbox (%s) VALUES (%s)" % (", ".join(names), ", ".join(
            ["%s"] * len(names))), [work_id, kind, payload] + list(cols.values())))
    in_transaction(conn, statements[:2])
    in_transaction(conn, statements[2:] + [
        ("SELECT outbox_emit('msg-1', 'order_received', '{\"via\": \"message\"}', 'entity-7', "
         "'{\"traceparent\": \"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"}')", None),
        ("INSERT INTO outbox (work_id, kind, payload) VALUES ('no-kind', 'not a topic!', '{}')", None),
        ("UPDATE outbox SET t = 'updated' WHERE work_id = 'headers'", None),
    ])
    conn.close()
    return [r[0] for r in ROWS] + ["msg-1", "no-kind"]


def comparable(rec, prefix):
    """What must be the same: key, value, headers, timestamp; the relay's own
    topic prefix (each relay has its own) neutralized where a header names
    the intended topic. A dead-lettered record carries the time it was
    dead-lettered, whatever --record-timestamp says, so its timestamp is
    the relay's moment, not the row's."""
    own = prefix.encode()
    dead = rec.header("outbox_relay_error_code") is not None
    return (rec.key, rec.value, [(k, v.replace(own, b"PREFIX") if v else v) for k, v in rec.headers],
            None if dead else rec.timestamp)


def test_records_are_the_same_with_either_plugin(case):
    """One wal2json relay and one pgoutput relay on the same outbox, each
    with its own slot and topics: every record (row, message, dead letter)
    the same byte for byte, in the same order per work ID."""
    add_types(case)
    w2j = relay_with(case, "wal2json", case.slot + "_w", case.prefix + "-w")
    pgo = relay_with(case, "pgoutput", case.slot + "_p", case.prefix + "-p")
    # --create-slot made pgoutput's publication, named after its slot, inserts only
    assert case.query("SELECT pubinsert, pubupdate, pubdelete, pubtruncate, puballtables "
                      "FROM pg_publication WHERE pubname = %s", (case.slot + "_p",)) == \
        [(True, False, False, False, False)]
    rw = case.reader(["^%s-w\\..*" % case.prefix])
    rp = case.reader(["^%s-p\\..*" % case.prefix])
    ids = insert_typed(case)
    assert read_while_alive(rw, w2j, has_ids(ids), 60), case.logs()
    assert read_while_alive(rp, pgo, has_ids(ids), 60), case.logs()
    got_w, got_p = by_id(rw.records), by_id(rp.records)
    for work_id in ids:
        assert len(got_w[work_id]) == 1 and len(got_p[work_id]) == 1, (work_id, got_w, got_p)
        w, p = got_w[work_id][0], got_p[work_id][0]
        cw, cp = comparable(w, case.prefix + "-w"), comparable(p, case.prefix + "-p")
        assert cp == cw, "%s differs:\nwal2json %r\npgoutput %r" % (work_id, cw, cp)
        # the same kind of topic on each side: a row's, or the dead-letter topic
        assert w.topic.split(".", 1)[1] == p.topic.split(".", 1)[1], (w.topic, p.topic)
    # and the rows reached the records: the column headers carry PostgreSQL's text
    odd = got_p["odd"][0]
    assert odd.header("b") == "true" and odd.header("ba") == "00ff10" and odd.header("yn") == "f"
    assert odd.header("i8") == "-9223372036854775808" and odd.header("ch") == "ab  "
    assert got_p["specials"][0].header("n") is None  # NaN: wal2json writes null, so no header
    assert got_p["no-kind"][0].header("outbox_relay_error_code") == "INVALID_TOPIC"
    assert got_p["headers"][0].header("x-tenant") == "acme"
    assert got_p["headers"][0].header("t") is None  # set by an UPDATE, which is not published
    # the envelope has none of the column headers' columns: dead-lettered, by both alike
    assert got_p["msg-1"][0].header("outbox_relay_error_code") == "MISSING_COLUMN"
    for reader, slot in ((rw, case.slot + "_w"), (rp, case.slot + "_p")):
        wait_confirmed(case, max(parse_lsn(r.header("ce_pglsn")) for r in reader.records), slot=slot)
    assert w2j.stop() == EXIT_OK, w2j.log
    assert pgo.stop() == EXIT_OK, pgo.log
    assert "output plugin" not in w2j.log or "pgoutput" not in w2j.log


def test_a_slot_keeps_its_plugin(case):
    """A pgoutput slot started with --plugin=wal2json is a usage error (exit 2)
    that says what to do; --plugin=auto takes the slot's and says so."""
    relay = case.relay("--plugin", "pgoutput")
    assert relay.stop() == EXIT_OK, relay.log
    rc, out = run_relay(case.relay_args("--plugin", "wal2json"), timeout=60)
    assert rc == EXIT_USAGE, out
    assert 'uses output plugin "pgoutput", but the relay was started with --plugin=wal2json' in out, out
    assert "Start with --plugin=pgoutput (or --plugin=auto" in out, out
    reader = case.reader()
    relay = case.relay("--plugin", "auto")
    assert "output plugin pgoutput (the slot's own plugin)" in relay.log, relay.log
    conn = case.connect(autocommit=False)
    in_transaction(conn, [("INSERT INTO outbox (work_id, kind, payload) VALUES ('a1', 'k', '{}')", None)])
    arrive_and_confirm(case, reader, relay, ["a1"])
    assert relay.stop() == EXIT_OK, relay.log


def test_recreated_table_stops_at_its_first_row(case):
    """The Relation message's OID: the outbox dropped and created again (and
    added to the publication again) while the relay runs: its first row
    stops the relay (exit 3), nothing of it published or confirmed."""
    reader = case.reader()
    relay = case.relay("--plugin", "pgoutput")
    conn = case.connect(autocommit=False)
    in_transaction(conn, [("INSERT INTO outbox (work_id, kind, payload) VALUES ('before', 'k', '{}')",
                           None)])
    arrive_and_confirm(case, reader, relay, ["before"])
    confirmed = case.confirmed()
    case.query("CREATE TABLE outbox2 (LIKE outbox INCLUDING ALL); DROP TABLE outbox; "
               "ALTER TABLE outbox2 RENAME TO outbox; "
               "ALTER PUBLICATION %s ADD TABLE outbox" % case.slot)
    # The change itself holds no outbox row, and the slot may move past it,
    # up to the row's commit record (keepalives for other databases' commits).
    before_row = in_transaction(conn, [("INSERT INTO outbox (work_id, kind, payload) VALUES "
                                        "('after', 'k', '{}')", None)])[0].lsn_pre_commit
    relay.wait(timeout=60)
    assert relay.returncode == EXIT_ENV, relay.log
    assert "is another relation now" in relay.log or "no longer" in relay.log, relay.log
    reader.drain(timeout=5)
    assert "after" not in by_id(reader.records), reader.records
    assert confirmed <= case.confirmed() <= before_row


def test_publication_changed_while_running_stops(case):
    """A table taken out of the publication while the relay runs: its rows
    would never be sent, so the next round stops the relay (exit 3) saying
    so, without confirming past the change."""
    reader = case.reader()
    relay = case.relay("--plugin", "pgoutput")
    conn = case.connect(autocommit=False)
    in_transaction(conn, [("INSERT INTO outbox (work_id, kind, payload) VALUES ('in', 'k', '{}')", None)])
    arrive_and_confirm(case, reader, relay, ["in"])
    confirmed = case.confirmed()
    case.query("ALTER PUBLICATION %s DROP TABLE outbox" % case.slot)
    # The change itself holds no outbox row, and the slot may move past it,
    # up to the row's commit record (keepalives for other databases' commits).
    before_row = in_transaction(conn, [("INSERT INTO outbox (work_id, kind, payload) VALUES "
                                        "('out', 'k', '{}')", None)])[0].lsn_pre_commit
    relay.wait(timeout=60)
    assert relay.returncode == EXIT_ENV, relay.log
    assert 'publication "%s" no longer lists "public"."outbox" while the relay ran' % case.slot \
        in relay.log, relay.log
    assert "redrive" in relay.log, relay.log
    assert confirmed <= case.confirmed() <= before_row
    # the table back in the publication is still not the publication the
    # checkpoint was written through: a restart stops too, until accepted
    case.query("ALTER PUBLICATION %s ADD TABLE outbox" % case.slot)
    args = case.relay_args("--plugin", "pgoutput", create_slot=False)
    rc, out = run_relay(args, timeout=60)
    assert rc == EXIT_ENV, out
    assert 'publication "%s" changed since the newest checkpoint' % case.slot in out, out
    relay = case.relay("--plugin", "pgoutput", "--accept-config-change", create_slot=False)
    assert "accepting publication" in relay.log, relay.log
    assert relay.stop() == EXIT_OK, relay.log


@pytest.mark.parametrize("change,undo", [
    ("ALTER PUBLICATION {p} DROP TABLE outbox", "ALTER PUBLICATION {p} ADD TABLE outbox"),
    ("ALTER PUBLICATION {p} SET (publish = 'update')", "ALTER PUBLICATION {p} SET (publish = 'insert')"),
    ("ALTER PUBLICATION {p} SET TABLE outbox WHERE (kind <> 'k')", "ALTER PUBLICATION {p} SET TABLE outbox"),
], ids=["table_out_and_in", "inserts_off_and_on", "row_filter_on_and_off"])
def test_publication_changed_and_back_while_down_stops_at_start(case, change, undo):
    """The publication changed and changed back while no relay ran: pgoutput
    never sends the row inserted in between. The checkpoint names the
    publication the relay streamed through (its oid, its row's xmin, each
    table's pg_publication_rel oid), so the next start stops (exit 3)
    naming both and the remedy, instead of streaming on without the row
    (a helper found the silent loss). With --accept-config-change, once
    the row is published again, it streams."""
    reader = case.reader()
    relay = case.relay("--plugin", "pgoutput")
    conn = case.connect(autocommit=False)
    arrive_and_confirm(case, reader, relay, insert_rows(conn, simple_rows("first", 2)).work_ids)
    assert relay.stop() == EXIT_OK, relay.log
    case.query(change.format(p=case.slot))
    gap = insert_rows(conn, simple_rows("gap", 1))
    case.query(undo.format(p=case.slot))
    args = case.relay_args("--plugin", "pgoutput", create_slot=False)
    rc, out = run_relay(args, timeout=60)
    assert rc == EXIT_ENV, out
    error = [l for l in out.splitlines() if "error:" in l][-1]
    assert 'publication "%s" changed since the newest checkpoint' % case.slot in error, error
    assert "redrive --since" in error and "--accept-config-change" in error, error
    assert case.confirmed() < gap.lsn_after, "confirmed past the row pgoutput never sent"
    relay = case.relay("--plugin", "pgoutput", "--accept-config-change", create_slot=False)
    after = insert_rows(conn, simple_rows("after", 2))
    arrive_and_confirm(case, reader, relay, after.work_ids)
    assert "accepting publication" in relay.log, relay.log
    assert relay.stop() == EXIT_OK, relay.log
    # accepted: the next start has nothing to say about it
    relay = case.relay("--plugin", "pgoutput", create_slot=False)
    assert "publication" not in "".join(l for l in relay.log.splitlines() if "warning" in l or "error" in l)
    assert relay.stop() == EXIT_OK, relay.log


def test_missing_publication_without_create_slot(case):
    """A pgoutput slot whose publication was dropped: the relay refuses to
    start (exit 3) with the SQL that makes it."""
    relay = case.relay("--plugin", "pgoutput")
    assert relay.stop() == EXIT_OK, relay.log
    case.query("DROP PUBLICATION %s" % case.slot)
    rc, out = run_relay(case.relay_args("--plugin", "pgoutput", create_slot=False), timeout=60)
    assert rc == EXIT_ENV, out
    assert 'publication "%s" does not exist' % case.slot in out, out
    assert 'CREATE PUBLICATION "%s" FOR TABLE "public"."outbox" WITH (publish = \'insert\');' \
        % case.slot in out, out


def test_publish_via_partition_root_is_refused(case):
    """A publication WITH (publish_via_partition_root = true) is refused at
    start (exit 3) and by check, with the fix. Accepted, it lost rows
    silently: the outbox attached later as a partition of a table added to
    the publication changes neither the publication's row nor the outbox's
    membership, and pgoutput sends the outbox's rows under the parent's
    name, which the relay does not publish, and confirmed past them."""
    case.query("CREATE PUBLICATION %s FOR TABLE outbox WITH (publish = 'insert', "
               "publish_via_partition_root = true)" % case.slot)
    fix = 'ALTER PUBLICATION "%s" SET (publish = \'insert\', publish_via_partition_root = false);' % case.slot
    rc, out = run_relay(case.relay_args("--plugin", "pgoutput"), timeout=60)
    assert rc == EXIT_ENV, out
    assert 'publication "%s" is not the relay\'s' % case.slot in out and "publish_via_partition_root" in out, out
    assert fix in out, out
    rc, out = run_relay(["check"] + case.relay_args("--plugin", "pgoutput", create_slot=False), timeout=60)
    assert rc == EXIT_ENV and "publish_via_partition_root" in out and fix in out, out
    case.query(fix)
    relay = case.relay("--plugin", "pgoutput")
    reader = case.reader()
    conn = case.connect(autocommit=False)
    c = insert_rows(conn, simple_rows("fixed", 2))
    assert reader.read_until(has_ids(c.work_ids), 30), relay.log
    conn.close()


def test_debezium_preset_records_are_the_same_with_either_plugin(case):
    """--preset=debezium on a Debezium outbox table (uuid id, varchar
    columns, tracing context), with a wal2json relay and a pgoutput relay:
    the same records byte for byte."""
    case.query("CREATE TABLE outboxevent (id uuid NOT NULL PRIMARY KEY, aggregatetype varchar(255) "
               "NOT NULL, aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb, "
               "tracingspancontext varchar(256))")
    relays = {}
    for plugin, tag in (("wal2json", "w"), ("pgoutput", "p")):
        relays[tag] = case.relay("--plugin", plugin, "--preset", "debezium", "-t", "public.outboxevent",
                                 "--topic", "%s-%s.${aggregatetype}" % (case.prefix, tag),
                                 "--record-timestamp", "commit", slot=case.slot + "_" + tag)
        case.extra_slots.append(case.slot + "_" + tag)
    readers = {tag: case.reader(["^%s-%s\\..*" % (case.prefix, tag)]) for tag in relays}
    conn = case.connect(autocommit=False)
    in_transaction(conn, [
        ("INSERT INTO outboxevent VALUES ('6e8d8a2c-7a3e-4cf2-9a45-b1a1c1d2e3f4', 'order', '103', "
         "'OrderCreated', '{\"total\": 29.00}', 'traceparent=00-0af7651916cd43dd8448eb211c80319c-"
         "b7ad6b7169203331-01')", None),
        ("INSERT INTO outboxevent VALUES ('0b7e4f7d-2c3a-4d8e-9f10-112233445566', 'customer', 'c-1', "
         "'CustomerUpdated', NULL, NULL)", None)])
    for tag, reader in readers.items():
        assert read_while_alive(reader, relays[tag], lambda recs: len(recs) >= 2, 60), case.logs()
    got = {tag: sorted(((r.topic.split(".", 1)[1], r.key, r.value, r.headers, r.timestamp)
                        for r in reader.records), key=lambda x: x[1])
           for tag, reader in readers.items()}
    assert got["p"] == got["w"], got
    assert len(got["p"]) == 2 and got["p"][0][1] in (b"103", b"c-1"), got
    for relay in relays.values():
        assert relay.stop() == EXIT_OK, relay.log


@pytest.mark.exactly_once
def test_exactly_once_split_transaction_with_pgoutput(case):
    """--exactly-once with pgoutput: one transaction of interleaved rows and
    logical messages, split over Kafka transactions and killed in the
    middle of handing it out; the restarted relay (whose decoder holds the
    transaction again until its commit) resumes inside it, every record once
    for a read_committed consumer."""
    from harness.faults import collector, say, sigkill, start_relay, verify_exactly_once
    coll = collector(case, isolation="read_committed")
    # Slowed down (at most 100 records in flight, each batch lingering 50 ms: about 3 s for
    # the 6,000 records), so that the kill lands in the middle on a loaded machine too: the
    # collector can see half of them some time after the relay has handed them out.
    args = ["--plugin", "pgoutput", "--exactly-once", "-X", "transaction.timeout.ms=900000",
            "--message-prefix", "outbox", "--kafka-transaction-messages=500",
            "--max-inflight-messages=100", "-X", "linger.ms=50"]
    relay = start_relay(case, *args)
    n = 3000
    case.query("INSERT INTO outbox (work_id, kind, payload) SELECT 'row-' || g, 'fault', "
               "jsonb_build_object('n', g) FROM generate_series(1, %s) g "
               "WHERE outbox_emit('msg-' || g, 'fault', jsonb_build_object('n', g)) IS NOT NULL", (n,))
    wait_until(lambda: len(coll.ids()) >= n // 2, 120, what="a quarter of the records", tick=coll.poll)
    sigkill(relay)
    wait_until(lambda: not case.slot_info()["active"], 60, what="the slot to be released", tick=coll.poll)
    got = len(coll.ids())
    say("records in before the kill: %d of %d" % (got, 2 * n))
    assert got < 2 * n, "the whole transaction was in before the kill: the scenario did not happen"
    relay = start_relay(case, *args, create_slot=False)
    expected = ["%s-%d" % (k, i) for k in ("row", "msg") for i in range(1, n + 1)]
    verify_exactly_once(case, coll, expected, "pgoutput_eos_split", relays=[relay])
    assert relay.stop() == EXIT_OK, relay.log


def test_large_transaction_is_streamed_and_its_rollback_taken_back(case, monkeypatch):
    """A transaction past the walsender's logical_decoding_work_mem comes
    in blocks before it commits (pg_stat_replication_slots counts it
    streamed, not spilled to the server's disk), another transaction
    committed between them; the row of its savepoint rolled back after it
    was streamed is published nowhere, every other row once, and the slot
    is confirmed past it."""
    monkeypatch.setenv("PGOPTIONS", SMALL_WORK_MEM)
    relay = case.relay("--plugin", "pgoutput")
    reader = case.reader()
    large_transaction(case, reader, relay)
    assert relay.stop() == EXIT_OK, relay.log
    assert not harness.error_lines(relay.log) and "streaming off" not in relay.log, relay.log


def test_streamed_rollback_the_decoder_cannot_place_comes_again_whole(case, monkeypatch):
    """The rolled-back savepoint began with a logical message: pgoutput tags
    it with the top-level transaction's xid, so the stream does not tell
    whether the rollback took it back. The relay does not guess: it says
    so (a warning, no error), streams again from the slot with streaming
    off, and the server sends the transaction whole at its commit: the same
    records as with streaming, none lost, none twice."""
    monkeypatch.setenv("PGOPTIONS", SMALL_WORK_MEM)
    relay = case.relay("--plugin", "pgoutput")
    reader = case.reader()
    large_transaction(case, reader, relay, message_first=True, streamed=False)
    assert "the stream does not tell whether the rollback took it back" in relay.log, relay.log
    assert "streaming off for the rest of this process" in relay.log, relay.log
    assert relay.stop() == EXIT_OK, relay.log
    assert not harness.error_lines(relay.log), relay.log


def test_no_streaming_for_logical_messages_before_18(case, monkeypatch):
    """PostgreSQL 14 to 17 can leave a committed logical message out of a
    streamed transaction (tests/data/pgoutput-v2-scenarios/lost-message.*
    shows one): a relay that publishes them (--message-prefix) on 15 asks
    for no streaming and says why; the large transaction, spilled by the
    server, comes whole at its commit, its outbox_emit() message with it."""
    monkeypatch.setenv("PGOPTIONS", SMALL_WORK_MEM)
    relay = case.relay("--plugin", "pgoutput", "--message-prefix", "outbox")
    reader = case.reader()
    large_transaction(case, reader, relay, outbox_message=True, streamed=False)
    assert "pgoutput: streaming off: PostgreSQL 15 can leave a logical message out" in relay.log, \
        relay.log
    assert relay.stop() == EXIT_OK, relay.log
