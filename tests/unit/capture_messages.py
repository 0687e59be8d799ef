# SPDX-License-Identifier: Apache-2.0
"""Capture the golden lines of tests/data/wal2json-v2-messages.jsonl from a
real PostgreSQL 15 with wal2json (started by tests/harness on a free loopback
port, removed afterwards): what wal2json writes for logical messages,
transactional and not, text and bytea, an outbox_emit() among table rows,
with the options the relay sends. test_wal2json.c and test_envelope.c read
the file; run this again (from the top of the tree, with Debian's python)
when wal2json changes:

    PYTHONPATH=tests /usr/bin/python3 tests/unit/capture_messages.py > tests/data/wal2json-v2-messages.jsonl

The lines are written as the server sent them, raw bytes included (the
bytea messages' 0xff is not UTF-8).
"""

import shutil
import sys

from harness import SCHEMA_SQL, make_tempdir
from harness.pg import PostgresServer

OPTIONS = ["format-version", "2", "include-transaction", "true", "include-lsn", "true",
           "include-xids", "true", "include-timestamp", "true", "include-types", "false",
           "include-type-oids", "true", "add-tables", "public.outbox"]

ORDER = ('{"order_id":103,"customer_id":1,"total":"29.00",'
         '"message":"Order received; payment still pending"}')

STATEMENTS = [
    # 1: outbox_emit() alone in a transaction: B, M, C
    ["SELECT outbox_emit('order-103-ack', 'order_received', %s)" % "'%s'" % ORDER],
    # 2: a row, a message with entity and headers, a row, in one transaction: B, I, M, I, C
    ["INSERT INTO outbox (work_id, kind, payload) VALUES ('row-1', 'k', '{\"n\": 1}')",
     "SELECT outbox_emit('msg-2', 'k', '{\"n\": 2, \"s\": \"tab\\there \\\"q\\\" \u00e9\"}', "
     "'order-103', '{\"traceparent\": \"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"}')",
     "INSERT INTO outbox (work_id, kind, payload) VALUES ('row-3', 'k', '{\"n\": 3}')"],
    # 3: non-transactional, outbox prefix, an envelope: M alone, xid and timestamp null
    ["SELECT pg_logical_emit_message(false, 'outbox', '{\"version\": 1, \"columns\": "
     "{\"work_id\": \"nontx\", \"kind\": \"k\", \"payload\": \"{}\"}}')"],
    # 4: bytea content that is not UTF-8: the 0xff arrives raw
    ["SELECT pg_logical_emit_message(true, 'outbox', '\\x7b2261223a317dff'::bytea)"],
    # 5: bytea content with a NUL: wal2json cuts it there ({} is all that arrives)
    ["SELECT pg_logical_emit_message(true, 'outbox', '\\x7b7d00ff'::bytea)"],
    # 6: control characters are escaped (\u0001, \n)
    ["SELECT pg_logical_emit_message(true, 'outbox', E'ctl\\x01 nl\\n end')"],
    # 7: another application's prefix
    ["SELECT pg_logical_emit_message(true, 'other-app', 'hello')"],
    # 8: rolled back: nothing of it arrives, also not the transactional message
    ["SELECT outbox_emit('rolled-back', 'k', '{}')", "ROLLBACK"],
]


def main():
    base = make_tempdir(prefix="capture-messages-")
    srv = PostgresServer(base, name="pg")
    srv.start()
    try:
        srv.create_database("shop")
        srv.psql(file=SCHEMA_SQL, dbname="shop")
        conn = srv.connect("shop", autocommit=True)
        cur = conn.cursor()
        cur.execute("SELECT pg_create_logical_replication_slot('capture', 'wal2json')")
        tx = srv.connect("shop", autocommit=False)
        for stmts in STATEMENTS:
            with tx.cursor() as c:
                for sql in stmts:
                    if sql == "ROLLBACK":
                        tx.rollback()
                        break
                    c.execute(sql)
                else:
                    tx.commit()
        cur.execute("SELECT data FROM pg_logical_slot_peek_binary_changes('capture', NULL, NULL, %s)"
                    % ", ".join(["%s"] * len(OPTIONS)), OPTIONS)
        out = sys.stdout.buffer
        for (data,) in cur.fetchall():
            out.write(bytes(data) + b"\n")
        cur.execute("SELECT pg_drop_replication_slot('capture')")
    finally:
        srv.stop()
        srv.remove()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
