# SPDX-License-Identifier: Apache-2.0
"""What the relay publishes is exactly what PostgreSQL holds: payload text
byte for byte (jsonb as PostgreSQL prints it, json as inserted, big numbers
not rounded, escapes and non-ASCII intact), keys and kinds with unusual
characters, text payloads checked as PostgreSQL's json type would, and
bigint and numeric keys and topic values as PostgreSQL prints them.

Every published key, value and ce_id must be byte-exact against
PostgreSQL's own text output of the column (SELECT col::text).
"""

import json

import pytest
from harness import EXIT_OK, arrive_and_confirm, by_id, has_ids, insert_rows

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


# Text payloads: valid for PostgreSQL's json type or not, as the server itself says
TEXT_PAYLOADS = [
    '{"a": 1}', '"\\u0000"', '"\\ud83d"', '01', '1.', '-0', '1e5', '[1,]', '{"a":1,}', 'true',
    'True', '"a\tb"', ' {"a" : [ ] } ', '"\\x"', '1 2', '', '   ', '[', '"\\u12"', 'NaN', '[1]x',
    '{"a"}', '\n[]\n', '\f[]', '1_', '{"deep": [[[[{"x": -1.5e-3}]]]]}', '"é\u007f"',
]


def test_text_payload_is_checked_as_postgresql_would(case):
    """A payload column of type text is published only when PostgreSQL's json
    type accepts its text; the rest is dead-lettered as INVALID_JSON. The
    verdicts come from the server (text::json) in the same test, so this
    compares the relay's grammar with PostgreSQL's own (cJSON accepted some
    of these that PostgreSQL refuses)."""
    case.query("ALTER TABLE outbox ALTER COLUMN payload TYPE text")
    dead = case.prefix + ".dead"
    reader = case.reader([case.topic("txt"), dead])
    relay = case.relay("--on-error=dead-letter", "--dead-letter-topic", dead)
    conn = case.connect(autocommit=False)
    rows = [{"work_id": "t%d" % i, "kind": "txt", "payload": p} for i, p in enumerate(TEXT_PAYLOADS)]
    insert_rows(conn, rows)
    ids = [r["work_id"] for r in rows]
    assert reader.read_until(has_ids(ids), 60), relay.log
    recs = by_id(reader.records)
    for r in rows:
        try:
            case.query("SELECT %s::json", (r["payload"],))
            valid = True
        except Exception:
            valid = False
        rec = recs[r["work_id"]][0]
        if valid:
            assert rec.topic == case.topic("txt"), (r["payload"], rec.topic, relay.log)
            assert rec.value_text == r["payload"]
        else:
            assert rec.topic == dead, (r["payload"], "published although PostgreSQL refuses it")
            assert rec.header("outbox_relay_error_code") == "INVALID_JSON", r["payload"]
    assert relay.stop() == EXIT_OK, relay.log


def test_column_types_wal2json_prints_unescaped(case):
    """An enum in a schema whose name needs quotes: wal2json prints the type
    name without escaping ("int".doc_type), which made every line of such a
    row invalid JSON and stopped the relay for good on a valid row. The
    relay asks for type OIDs instead of names."""
    case.query('CREATE SCHEMA "int"; CREATE TYPE "int".doc_type AS ENUM (\'invoice\', \'note\'); '
               'ALTER TABLE outbox ADD COLUMN doc "int".doc_type')
    reader = case.reader([case.topic("enum")])
    relay = case.relay()
    conn = case.connect(autocommit=False)
    c = insert_rows(conn, [{"work_id": "e1", "kind": "enum", "payload": '{"x": 1}', "doc": "note"}])
    assert reader.read_until(has_ids(c.work_ids), 30), relay.log
    assert relay.alive, relay.log
    assert relay.stop() == EXIT_OK, relay.log


def test_domain_over_jsonb_payload_is_trusted(case):
    """A payload column of a domain over jsonb was checked by PostgreSQL: the
    relay publishes it as it does jsonb."""
    case.query("CREATE DOMAIN doc_json AS jsonb CHECK (VALUE ? 'kind'); "
               "ALTER TABLE outbox ALTER COLUMN payload TYPE doc_json")
    reader = case.reader([case.topic("dom")])
    relay = case.relay()
    conn = case.connect(autocommit=False)
    c = insert_rows(conn, [{"work_id": "d1", "kind": "dom", "payload": '{"kind": "x", "n": 1.50}'}])
    assert reader.read_until(has_ids(c.work_ids), 30), relay.log
    assert by_id(reader.records)["d1"][0].value_text == '{"n": 1.50, "kind": "x"}'
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
    case.kafka.create_topic(topic, partitions=3, config={"max.message.bytes": "3000000"})
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
