# SPDX-License-Identifier: Apache-2.0
"""What the relay publishes is exactly what PostgreSQL holds: payload text
byte for byte (jsonb as PostgreSQL prints it, json as inserted, big numbers
not rounded, escapes and non-ASCII intact), keys and kinds with unusual
characters, several outbox tables at once, and nothing from other tables.
"""

import json

from harness import EXIT_OK
from helpers import by_id, has_ids, insert_rows

TRICKY = [
    # (work_id, payload text as inserted)
    ("num", '{"big": 123456789012345678901234567890.123456789, "small": 1e-7, "neg": -0.0}'),
    ("esc", '{"quote": "say \\"hi\\"", "backslash": "a\\\\b", "nl": "line1\\nline2", '
            '"tab": "\\t", "ctl": "\\u0001", "slash": "\\/"}'),
    ("uni", '{"name": "Mina \u00e9\u00e8 \u7ea2\u8336 \U0001F375", "escaped": "\\u00e9\\ud83c\\udf75"}'),
    ("deep", '{"a": [1, [2, [3, {"b": null, "c": true, "d": false}]]], "e": {}, "f": []}'),
    ("str", '"just a string"'),
    ("arr", '[1, "two", 3.0]'),
    ("long", json.dumps({"text": "x" * 100000})),
]


def test_payload_text_is_exactly_postgresql_text(case):
    reader = case.reader([case.topic("order_received")])
    relay = case.relay()
    conn = case.connect(autocommit=False)
    insert_rows(conn, [{"work_id": w, "kind": "order_received", "payload": p} for w, p in TRICKY])
    ids = [w for w, _ in TRICKY]
    assert reader.read_until(has_ids(ids), 30), case.logs()
    expected = dict(case.query("SELECT work_id, payload::text FROM outbox"))
    recs = by_id(reader.records)
    for w in ids:
        assert recs[w][0].value_text == expected[w], w
        assert recs[w][0].key_text == w
    assert relay.stop() == EXIT_OK, relay.log


def test_json_column_is_published_as_inserted(case):
    """A json (not jsonb) payload keeps the inserted text: spacing, key order
    and duplicate keys included."""
    case.query("ALTER TABLE outbox ADD COLUMN raw json")
    reader = case.reader([case.topic("raw")])
    relay = case.relay("--payload-column", "raw")
    texts = {"sp": '{ "b" :1,   "a":2 }', "dup": '{"k": 1, "k": 2}', "nl": '{\n  "x": "\u00e9"\n}'}
    conn = case.connect(autocommit=False)
    insert_rows(conn, [{"work_id": w, "kind": "raw", "payload": "{}", "raw": t}
                       for w, t in texts.items()])
    assert reader.read_until(has_ids(texts), 30), case.logs()
    for w, recs in by_id(reader.records).items():
        assert recs[0].value_text == texts[w], w
    assert relay.stop() == EXIT_OK, relay.log


def test_unusual_work_ids_and_kinds(case):
    reader = case.reader()
    relay = case.relay()
    rows = [
        {"work_id": "order 103 / ack \"quoted\" \u00e9", "kind": "order_received", "payload": "{}"},
        {"work_id": "x" * 500, "kind": "order_received", "payload": "{}"},
        {"work_id": "kind-with-dash", "kind": "order-received.v2", "payload": "{}"},
    ]
    conn = case.connect(autocommit=False)
    insert_rows(conn, rows)
    assert reader.read_until(has_ids(r["work_id"] for r in rows), 30), case.logs()
    recs = by_id(reader.records)
    for r in rows:
        rec = recs[r["work_id"]][0]
        assert rec.key_text == r["work_id"]
        assert rec.header("ce_type") == r["kind"]
        assert rec.topic == case.topic(r["kind"])
    assert relay.stop() == EXIT_OK, relay.log


def test_several_tables_and_other_tables_ignored(case):
    case.query('CREATE SCHEMA "Shop"')
    case.query('CREATE TABLE "Shop"."Outbox" (LIKE public.outbox INCLUDING ALL)')
    case.query("CREATE TABLE public.not_outbox (LIKE public.outbox INCLUDING ALL)")
    sysid = case.pg.system_identifier()
    reader = case.reader()
    relay = case.relay("-t", "public.outbox", "-t", '"Shop"."Outbox"')
    conn = case.connect(autocommit=False)
    cur = conn.cursor()
    for table, wid in (("public.outbox", "p-1"), ('"Shop"."Outbox"', "s-1"),
                       ("public.not_outbox", "n-1")):
        cur.execute("INSERT INTO %s (work_id, kind, payload) VALUES (%%s, 'k', '{}')" % table,
                    (wid,))
    conn.commit()
    assert reader.read_until(has_ids(["p-1", "s-1"]), 30), case.logs()
    assert relay.stop() == EXIT_OK, relay.log
    assert reader.drain(timeout=30)
    recs = by_id(reader.records)
    assert set(recs) == {"p-1", "s-1"}, "rows of unlisted tables were published"
    base = "postgresql://%s/%s/" % (sysid, case.dbname)
    assert recs["p-1"][0].header("ce_source") == base + "public.outbox"
    assert recs["s-1"][0].header("ce_source") in (base + "Shop.Outbox", base + '"Shop"."Outbox"')
    # one transaction: one xid and end LSN for both rows
    assert recs["p-1"][0].header("ce_pglsn") == recs["s-1"][0].header("ce_pglsn")
    assert recs["p-1"][0].header("ce_pgxid") == recs["s-1"][0].header("ce_pgxid")
