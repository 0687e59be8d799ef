# SPDX-License-Identifier: Apache-2.0
"""Capture the recorded streams of tests/data/pgoutput-v1.stream and
tests/data/pgoutput-v1-wal2json.jsonl, then of tests/data/pgoutput-v2-streamed.stream
and tests/data/pgoutput-v2-streamed-wal2json.jsonl, from a real PostgreSQL 15 with
wal2json (started by tests/harness on a free loopback port, removed
afterwards): the same transactions decoded by pgoutput (protocol version 1,
text values, messages) and by wal2json (the options the relay sends), from
two slots created before them. The second pair: transactions larger than
logical_decoding_work_mem (64kB here), which pgoutput protocol version 2
streams before they commit, one of them between another's blocks, with a
savepoint rolled back after its changes were streamed and one transaction
aborted whole; wal2json decodes the same transactions without streaming. test_pgoutput.c decodes both and checks that
the relay gets the same columns, values and messages from either; the fuzz
target pgoutput starts from the stream. Run it again (from the top of the
tree, with Debian's python) when either plugin changes:

    PYTHONPATH=tests /usr/bin/python3 tests/unit/capture_pgoutput.py tests/data

The stream file is a sequence of frames, each a big-endian Int32 length, a
big-endian Int64 LSN (what pg_logical_slot_peek_binary_changes() reports for
the message) and the message's bytes: the format of the pgoutput fuzz
target's inputs.
"""

import os
import shutil
import struct
import sys

from harness import SCHEMA_SQL, make_tempdir
from harness.pg import PostgresServer

TABLES = ["public.outbox", "public.types", '"My.Schema"."we""ird"']

W2J_OPTIONS = ["format-version", "2", "include-transaction", "true", "include-lsn", "true",
               "include-xids", "true", "include-timestamp", "true", "include-types", "false",
               "include-type-oids", "true",
               "add-tables", "public.outbox,public.types,My\\.Schema.we\\\"ird",
               "add-msg-prefixes", "outbox"]
PGO_OPTIONS = ["proto_version", "1", "publication_names", "capture", "messages", "true"]
PGO_STREAM_OPTIONS = ["proto_version", "2", "streaming", "on", "publication_names", "capture",
                      "messages", "true"]

# Rows of the table outside the publication: enough to pass 64kB of changes.
FILLER = "INSERT INTO other SELECT g, repeat('x', 200) FROM generate_series(%d, %d) g"

SETUP = """
CREATE SCHEMA "int";
CREATE TYPE "int".doc_type AS ENUM ('invoice', 'note');
CREATE DOMAIN doc_json AS jsonb CHECK (VALUE ? 'kind');
CREATE DOMAIN yes_no AS boolean;
CREATE TABLE types (
    work_id text PRIMARY KEY, kind text, payload jsonb,
    i2 smallint, i4 integer, i8 bigint, o oid, f4 real, f8 double precision, n numeric,
    b boolean, ba bytea, t text, vc varchar(10), ch char(4), j json, jb jsonb,
    ts timestamptz, tsn timestamp, d date, tm time, iv interval, u uuid,
    ai integer[], at text[], ab boolean[], doc "int".doc_type, dj doc_json, yn yes_no,
    ip inet, bits bit(4), vb varbit, pt point, gone text
);
ALTER TABLE types DROP COLUMN gone;
CREATE SCHEMA "My.Schema";
CREATE TABLE "My.Schema"."we""ird" (work_id text PRIMARY KEY, kind text, payload jsonb);
CREATE TABLE other (id int PRIMARY KEY, note text);
CREATE PUBLICATION capture FOR TABLE outbox, types, "My.Schema"."we""ird" WITH (publish = 'insert');
"""

TYPES_COLS = ("work_id, kind, payload, i2, i4, i8, o, f4, f8, n, b, ba, t, vc, ch, j, jb, ts, tsn, d, "
              "tm, iv, u, ai, at, ab, doc, dj, yn, ip, bits, vb, pt")

TRANSACTIONS = [
    # 1: one outbox row
    ["INSERT INTO outbox (work_id, kind, payload) VALUES ('order-103-ack', 'order_received', "
     "'{\"order_id\": 103, \"total\": \"29.00\"}')"],
    # 2: every type, odd values
    ["INSERT INTO types (%s) VALUES ('t1', 'k', '{\"a\": 1}', -32768, 2147483647, "
     "-9223372036854775808, 4294967295, 'NaN', 'Infinity', "
     "'-12345678901234567890123456789012345678901234567890.000', true, '\\x00ff'::bytea, "
     "E'tab\\there \"q\" back\\\\slash nl\\n end \\u00e9 \\U0001F600', 'abc', 'ab', "
     "'[1, 2.50, {\"a\":null}]', '{\"b\": 1.50, \"a\": [true, null]}', "
     "'2019-12-31 18:30:00.123456+00', '2020-01-01 00:00:00', '2020-02-29', '23:59:59.5', "
     "'1 year 2 mons 3 days 04:05:06.789', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', "
     "'{1,2,NULL}', '{\"a b\",\"c,d\",NULL}', '{t,f}', 'note', '{\"kind\": \"x\", \"n\": 1.50}', "
     "false, '192.168.0.1/24', B'1010', B'10101', '(1.5,-2)')" % TYPES_COLS,
     "INSERT INTO types (work_id, f4, f8, n, b) VALUES ('t2', '-Infinity', 1.5e300, 'NaN', false)",
     "INSERT INTO types (work_id, f8, n, t) VALUES ('t3', -0.0, -0.000001, '')",
     "INSERT INTO types (work_id) VALUES ('t4')"],
    # 3: quoted names, a transactional message among rows, a table outside the publication
    ["INSERT INTO \"My.Schema\".\"we\"\"ird\" VALUES ('w1', 'k', '{\"lit\": \"\\\\u0000\"}')",
     "INSERT INTO other VALUES (1, 'not published')",
     "SELECT outbox_emit('msg-2', 'k', '{\"n\": 2}')",
     "INSERT INTO outbox (work_id, kind, payload) VALUES ('row-3', 'k', '{\"n\": 3}')"],
    # 4: a non-transactional message, a bytea message with NUL and 0xff, another prefix
    ["SELECT pg_logical_emit_message(false, 'outbox', 'nontx')"],
    ["SELECT pg_logical_emit_message(true, 'outbox', '\\x7b7d00ff'::bytea)",
     "SELECT pg_logical_emit_message(true, 'other-app', 'hello')"],
    # 5: the table changes: a new column, then a row with it (a second Relation message)
    ["ALTER TABLE outbox ADD COLUMN extra text",
     "INSERT INTO outbox (work_id, kind, payload, extra) VALUES ('after-alter', 'k', '{}', 'x')"],
    # 6: rows that are not inserts, and a transaction of the other table only
    ["UPDATE outbox SET kind = 'k2' WHERE work_id = 'row-3'", "DELETE FROM outbox WHERE work_id = 'row-3'"],
    ["INSERT INTO other VALUES (2, 'alone')"],
    # 7: rolled back: nothing of it arrives
    ["INSERT INTO outbox (work_id, kind, payload) VALUES ('rolled-back', 'k', '{}')", "ROLLBACK"],
    # 8: many rows in one transaction
    ["INSERT INTO outbox (work_id, kind, payload) SELECT 'bulk-' || i, 'k', "
     "jsonb_build_object('i', i) FROM generate_series(1, 50) i"],
]


def peek(cur, slot, options, path, frames):
    """Write what the slot holds to @path: frames (pgoutput) or lines (wal2json)."""
    cur.execute("SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes(%%s, NULL, NULL, %s)"
                % ", ".join(["%s"] * len(options)), [slot] + options)
    with open(path, "wb") as f:
        for lsn, data in cur.fetchall():
            data = bytes(data)
            if frames:
                hi, lo = lsn.split("/")
                f.write(struct.pack(">IQ", len(data), int(hi, 16) << 32 | int(lo, 16)) + data)
            else:
                f.write(data + b"\n")


def capture_streamed(srv, cur, out_dir):
    """Streamed transactions, from two slots of their own (see the module's text)."""
    cur.execute("SELECT pg_create_logical_replication_slot('capture_w2j_s', 'wal2json')")
    cur.execute("SELECT pg_create_logical_replication_slot('capture_pgo_s', 'pgoutput')")
    a = srv.connect("shop", autocommit=False)
    b = srv.connect("shop", autocommit=False)
    c = srv.connect("shop", autocommit=False)
    ca, cb, cc = a.cursor(), b.cursor(), c.cursor()
    # A: rows, then a savepoint whose row is streamed and rolled back, then more
    ca.execute("INSERT INTO outbox (work_id, kind, payload) VALUES ('big-1', 'k', '{\"n\": 1}')")
    ca.execute(FILLER % (1000, 1400))
    ca.execute("SAVEPOINT s1")
    ca.execute("INSERT INTO outbox (work_id, kind, payload) VALUES ('rolled-back-in-s1', 'k', '{}')")
    ca.execute(FILLER % (2000, 2400))
    ca.execute("ROLLBACK TO SAVEPOINT s1")
    # B commits between A's blocks
    cb.execute("INSERT INTO outbox (work_id, kind, payload) VALUES ('small-between', 'k', '{}')")
    b.commit()
    ca.execute("SAVEPOINT s2")
    ca.execute("INSERT INTO outbox (work_id, kind, payload) VALUES ('kept-in-s2', 'k', '{}')")
    ca.execute("RELEASE SAVEPOINT s2")
    ca.execute("SELECT outbox_emit('msg-big', 'k', '{\"n\": 2}')")
    ca.execute(FILLER % (3000, 3400))
    ca.execute("INSERT INTO outbox (work_id, kind, payload) SELECT 'big-tail-' || i, 'k', "
               "jsonb_build_object('i', i) FROM generate_series(1, 20) i")
    # C: large, then aborted whole
    cc.execute("INSERT INTO outbox (work_id, kind, payload) VALUES ('aborted-whole', 'k', '{}')")
    cc.execute(FILLER % (5000, 5400))
    c.rollback()
    a.commit()
    for conn in (a, b, c):
        conn.close()
    cur.execute("SET logical_decoding_work_mem = '64kB'")
    peek(cur, "capture_pgo_s", PGO_STREAM_OPTIONS, os.path.join(out_dir, "pgoutput-v2-streamed.stream"), True)
    peek(cur, "capture_w2j_s", W2J_OPTIONS, os.path.join(out_dir, "pgoutput-v2-streamed-wal2json.jsonl"),
         False)
    cur.execute("RESET logical_decoding_work_mem")
    cur.execute("SELECT pg_drop_replication_slot('capture_w2j_s')")
    cur.execute("SELECT pg_drop_replication_slot('capture_pgo_s')")


# Scenarios of one transaction streamed (logical_decoding_work_mem 64kB) in
# tests/data/pgoutput-v2-scenarios/: NAME.stream with streaming, NAME.ref
# without (protocol version 1), from two slots. test_pgoutput.c decodes both:
# the same events, or -ENOTSUP where the stream cannot tell whose a logical
# message is, as SCENARIOS there says.
SC_FILL = "INSERT INTO other SELECT g, repeat('x', 200) FROM generate_series(1, 400) g"
SC_BIG = ("jsonb_build_object('big', (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 3000) g))")


def sc_row(work_id, payload="'{}'"):
    return "INSERT INTO outbox (work_id, kind, payload) VALUES ('%s', 'k', %s)" % (work_id, payload)


def sc_msg(content):
    return "SELECT pg_logical_emit_message(true, 'outbox', '%s')" % content


SCENARIOS = {
    # a savepoint whose released child wrote first, then the savepoint rolled back
    "released-child-first": [sc_row("top-1"), SC_FILL, "SAVEPOINT a", "SAVEPOINT b", sc_row("b-1"), SC_FILL,
                             "RELEASE b", sc_row("a-1"), SC_FILL, "ROLLBACK TO a", sc_row("top-2"), SC_FILL],
    "released-child-after": [sc_row("top-1"), SC_FILL, "SAVEPOINT a", sc_row("a-1"), SC_FILL, "SAVEPOINT b",
                             sc_row("b-1"), SC_FILL, "RELEASE b", sc_row("a-2"), SC_FILL, "ROLLBACK TO a",
                             sc_row("top-2"), SC_FILL],
    "two-released-children": [sc_row("top-1"), SC_FILL, "SAVEPOINT a", "SAVEPOINT b", sc_row("b-1"), SC_FILL,
                              "RELEASE b", "SAVEPOINT c", sc_row("c-1"), SC_FILL, "RELEASE c", "ROLLBACK TO a",
                              sc_row("top-2"), SC_FILL],
    "nested-rollbacks": [sc_row("top-1"), SC_FILL, "SAVEPOINT a", sc_row("a-1"), SC_FILL, "SAVEPOINT b",
                         sc_row("b-1"), SC_FILL, "ROLLBACK TO b", sc_row("a-2"), SC_FILL, "ROLLBACK TO a",
                         sc_row("top-2"), SC_FILL],
    # a PL/pgSQL exception block (a subtransaction) that succeeds, inside a savepoint rolled back
    "plpgsql-block-in-rollback": [
        sc_row("top-1"), SC_FILL, "SAVEPOINT a", sc_row("a-1"),
        "DO $$BEGIN BEGIN INSERT INTO outbox (work_id, kind, payload) VALUES ('blk-1', 'k', '{}'); "
        "INSERT INTO other SELECT g, repeat('x', 200) FROM generate_series(1, 400) g; "
        "EXCEPTION WHEN others THEN NULL; END; END$$",
        sc_row("a-2"), SC_FILL, "ROLLBACK TO a", sc_row("top-2"), SC_FILL],
    "other-table-only-savepoint": [sc_row("top-1"), SC_FILL, "SAVEPOINT a", SC_FILL, "ROLLBACK TO a",
                                   sc_row("top-2"), SC_FILL],
    "truncate-in-rollback": [sc_row("top-1"), SC_FILL, "SAVEPOINT a", "TRUNCATE outbox", sc_row("a-1"), SC_FILL,
                             "ROLLBACK TO a", sc_row("top-2"), SC_FILL],
    "alter-in-rollback": [sc_row("top-1"), SC_FILL, "SAVEPOINT a", "ALTER TABLE outbox ADD COLUMN extra text",
                          "INSERT INTO outbox (work_id, kind, payload, extra) VALUES ('a-1', 'k', '{}', 'x')",
                          SC_FILL, "ROLLBACK TO a", sc_row("top-2"), SC_FILL],
    # a message kept: in a savepoint released, away from any rolled-back one
    "message-kept": [sc_row("top-1"), SC_FILL, "SAVEPOINT a", sc_row("a-1"), sc_msg("keep-a"), SC_FILL,
                     "RELEASE a", sc_row("top-2"), SC_FILL],
    # the stream cannot tell: a message just before a rolled-back savepoint's first change
    "message-then-rollback": [sc_row("top-1"), SC_FILL, sc_msg("keep-top"), "SAVEPOINT a", sc_row("a-1"), SC_FILL,
                              "ROLLBACK TO a", sc_row("top-2"), SC_FILL],
    "message-first-in-rollback": [sc_row("top-1"), SC_FILL, "SAVEPOINT a", sc_msg("gone-a"), sc_row("a-1"),
                                  SC_FILL, "ROLLBACK TO a", sc_row("top-2"), SC_FILL],
    # ... or at the LSN of its first change, after it (the walsender's merge breaks the tie either way)
    "message-tie-with-rollback": [sc_row("top-1"), SC_FILL, "SAVEPOINT a", sc_msg("keep-a"), "SAVEPOINT b",
                                  sc_row("b-1"), SC_FILL, "ROLLBACK TO b", "RELEASE a", sc_row("top-2"), SC_FILL],
    # PostgreSQL 14 to 17 leave message m5 out of the stream (18 sends it): why a relay with
    # --message-prefix streams from 18 on only
    "lost-message": [
        sc_row("r1"), sc_msg("m2"), sc_row("r3"), sc_row("r4"), "SAVEPOINT s0", sc_msg("m5"), "SAVEPOINT s1",
        "INSERT INTO outbox (work_id, kind, payload) VALUES ('t6', 'k', %s) ON CONFLICT DO NOTHING" % SC_BIG,
        sc_row("r7"), "INSERT INTO other SELECT g, repeat('x', 200) FROM generate_series(1, 50) g",
        sc_msg("m8"), sc_row("r9"), sc_row("r10"), "ROLLBACK TO SAVEPOINT s1", "RELEASE SAVEPOINT s1",
        sc_row("r11"), sc_row("r12"), "INSERT INTO other SELECT g, repeat('x', 200) FROM generate_series(1, 200) g",
        "INSERT INTO outbox (work_id, kind, payload) VALUES ('t13', 'k', %s) ON CONFLICT DO NOTHING" % SC_BIG,
        "RELEASE SAVEPOINT s0", "INSERT INTO other SELECT g, repeat('x', 200) FROM generate_series(1, 50) g"],
}


def capture_scenarios(srv, out_dir):
    """Each of SCENARIOS in a database of its own (see above)."""
    out = os.path.join(out_dir, "pgoutput-v2-scenarios")
    os.makedirs(out, exist_ok=True)
    for name, stmts in SCENARIOS.items():
        db = "sc_" + name.replace("-", "_")
        srv.create_database(db)
        srv.psql(file=SCHEMA_SQL, dbname=db)
        srv.psql("CREATE TABLE other (id int, note text); "
                 "CREATE PUBLICATION capture FOR TABLE outbox WITH (publish = 'insert');", dbname=db)
        conn = srv.connect(db, autocommit=True)
        cur = conn.cursor()
        cur.execute("SELECT pg_create_logical_replication_slot('streamed', 'pgoutput')")
        cur.execute("SELECT pg_create_logical_replication_slot('whole', 'pgoutput')")
        tx = srv.connect(db, autocommit=False)
        with tx.cursor() as c:
            for sql in stmts:
                c.execute(sql)
        tx.commit()
        tx.close()
        cur.execute("SET logical_decoding_work_mem = '64kB'")
        peek(cur, "streamed", PGO_STREAM_OPTIONS, os.path.join(out, name + ".stream"), True)
        cur.execute("RESET logical_decoding_work_mem")
        peek(cur, "whole", PGO_OPTIONS, os.path.join(out, name + ".ref"), True)
        cur.execute("SELECT pg_drop_replication_slot('streamed'), pg_drop_replication_slot('whole')")
        conn.close()


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "tests/data"
    base = make_tempdir(prefix="capture-pgoutput-")
    srv = PostgresServer(base, name="pg")
    srv.start()
    try:
        srv.create_database("shop")
        srv.psql(file=SCHEMA_SQL, dbname="shop")
        srv.psql(SETUP, dbname="shop")
        conn = srv.connect("shop", autocommit=True)
        cur = conn.cursor()
        cur.execute("SELECT pg_create_logical_replication_slot('capture_w2j', 'wal2json')")
        cur.execute("SELECT pg_create_logical_replication_slot('capture_pgo', 'pgoutput')")
        tx = srv.connect("shop", autocommit=False)
        for stmts in TRANSACTIONS:
            with tx.cursor() as c:
                for sql in stmts:
                    if sql == "ROLLBACK":
                        tx.rollback()
                        break
                    c.execute(sql)
                else:
                    tx.commit()
        peek(cur, "capture_pgo", PGO_OPTIONS, os.path.join(out_dir, "pgoutput-v1.stream"), True)
        peek(cur, "capture_w2j", W2J_OPTIONS, os.path.join(out_dir, "pgoutput-v1-wal2json.jsonl"), False)
        cur.execute("SELECT pg_drop_replication_slot('capture_w2j')")
        cur.execute("SELECT pg_drop_replication_slot('capture_pgo')")
        capture_streamed(srv, cur, out_dir)
        capture_scenarios(srv, out_dir)
    finally:
        srv.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
