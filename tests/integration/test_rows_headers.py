# SPDX-License-Identifier: Apache-2.0
"""The headers column (--headers-column, default headers): a row's JSON object
of strings reaches Kafka as extra record headers, byte for byte, after the
relay's own CloudEvents headers; NULL and tables without the column add
none; a value the relay refuses is a row error under --on-error (exit 4
naming the row with stop, the dead-letter topic with dead-letter).
Columns as headers (--column-header): before the headers column's pairs,
NULL adds none, reserved names are refused at start, a missing column stops
the start (exit 3) and `check` names the fix.

The default column of sql/outbox.sql has a CHECK that refuses bad values at
the writer, so the refused values go through a second column without one
("meta", type json), selected with --headers-column=meta.
"""

import json

import pytest
from harness import (CE_HEADERS, EXIT_ENV, EXIT_USAGE, by_id, has_ids, insert_rows, run_relay,
                     wait_confirmed)
from rows_helpers import assert_not_confirmed_past, check_row_error, stops_unpublishable

OUTBOX = '"public"."outbox"'


def user_headers(rec):
    """The headers after the relay's own ones, as [(name, bytes)]."""
    names = rec.header_names
    assert names[:len(CE_HEADERS)] == list(CE_HEADERS), names
    return rec.headers[len(CE_HEADERS):]


def stored_pairs(case, work_id, column="headers"):
    """The column's pairs in the order PostgreSQL stores them, as (name, UTF-8 bytes)."""
    rows = case.query("SELECT e.key, e.value #>> '{}' FROM outbox, jsonb_each(%s::jsonb) e "
                      "WHERE work_id = %%s" % column, (work_id,))
    return [(k, v.encode("utf-8")) for k, v in rows]


def test_headers_arrive_byte_exact(case):
    case.query("CREATE TABLE plain (LIKE outbox INCLUDING DEFAULTS)")
    case.query("ALTER TABLE plain DROP COLUMN headers")
    relay = case.relay("-t", "public.outbox", "-t", "public.plain")
    reader = case.reader()
    note = 'é 😀 "quoted" back\\slash\nnew line\ttab \u0001 \u2028'
    many = {"h%02d" % i: "v%d" % i for i in range(64)}
    conn = case.connect(autocommit=False)
    commit = insert_rows(conn, [
        {"work_id": "hdr-1", "kind": "k", "payload": {"n": 1},
         "headers": {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                     "x-Note": note, "empty": "", "Ce-like": "not reserved: ce- is not ce_"}},
        {"work_id": "hdr-null", "kind": "k", "payload": {"n": 2}},
        {"work_id": "hdr-empty", "kind": "k", "payload": {"n": 3}, "headers": {}},
        {"work_id": "hdr-64", "kind": "k", "payload": {"n": 4}, "headers": many},
    ])
    cur = conn.cursor()
    cur.execute("INSERT INTO plain (work_id, kind, payload) VALUES ('plain-1', 'k', '{}')")
    conn.commit()
    ids = ["hdr-1", "hdr-null", "hdr-empty", "hdr-64", "plain-1"]
    assert reader.read_until(has_ids(ids), 30), case.logs()
    recs = by_id(reader.records)

    got = user_headers(recs["hdr-1"][0])
    want = stored_pairs(case, "hdr-1")
    assert got == want, (got, want)
    assert dict(got)["x-Note"] == note.encode("utf-8")
    assert len(got) == 4
    for wid in ("hdr-null", "hdr-empty", "plain-1"):
        assert user_headers(recs[wid][0]) == [], (wid, recs[wid][0].headers)
    got = user_headers(recs["hdr-64"][0])
    assert got == stored_pairs(case, "hdr-64") and len(got) == 64
    assert sorted(got) == sorted((k, v.encode()) for k, v in many.items())
    # the value is untouched by the headers
    assert recs["hdr-1"][0].value_text == case.scalar(
        "SELECT payload::text FROM outbox WHERE work_id = 'hdr-1'")
    wait_confirmed(case, commit.lsn_before + 1)
    assert relay.stop() == 0, relay.log


BAD = [
    ('{"ce_id": "spoofed"}', ['header name "ce_id"', "reserved for the relay's own headers"]),
    ('{"attempt": 3}', ['header "attempt"', 'is a JSON number, not a string']),
    ('["traceparent", "00-ab-01"]', ['headers column "meta" holds a JSON array, not an object']),
]


def prepare_meta(case):
    case.query("ALTER TABLE outbox ADD COLUMN meta json")


@pytest.mark.parametrize("value,reason", BAD, ids=["reserved", "number", "array"])
def test_bad_headers_stop_naming_the_row(case, value, reason):
    prepare_meta(case)
    relay = case.relay("--headers-column", "meta")
    reader = case.reader()
    conn = case.connect(autocommit=False)
    first = insert_rows(conn, [{"work_id": "good-1", "kind": "k", "payload": {"n": 1},
                                "meta": '{"traceparent": "00-ab-01"}'}])
    wait_confirmed(case, first.lsn_before + 1)
    bad = insert_rows(conn, [{"work_id": "good-2", "kind": "k", "payload": {"n": 2}},
                             {"work_id": "bad-1", "kind": "k", "payload": {"n": 3}, "meta": value}])
    line = stops_unpublishable(relay)
    check_row_error(line, bad, "bad-1", OUTBOX, reason + ['column "meta"'])
    assert "store NULL or a JSON object of string values" in line or "rename it" in line, line
    assert_not_confirmed_past(case, bad)
    reader.drain(timeout=10)
    recs = by_id(reader.records)
    assert "bad-1" not in recs, reader.records
    assert user_headers(recs["good-1"][0]) == [("traceparent", b"00-ab-01")]
    # a restart meets the same row again
    again = case.relay("--headers-column", "meta", ready=False)
    assert stops_unpublishable(again) == line


def test_no_headers_column_ignores_the_column(case):
    """A table whose "headers" column means something else: --no-headers-column
    publishes its rows without extra headers instead of stopping on them."""
    case.query("ALTER TABLE outbox DROP CONSTRAINT outbox_headers_check")  # not sql/outbox.sql's
    relay = case.relay("--no-headers-column")
    reader = case.reader()
    conn = case.connect(autocommit=False)
    commit = insert_rows(conn, [{"work_id": "plain-1", "kind": "k", "payload": {"n": 1},
                                 "headers": '{"ce_id": "not ours", "attempt": "2"}'}])
    assert reader.read_until(has_ids(commit.work_ids), 30), case.logs()
    assert user_headers(by_id(reader.records)["plain-1"][0]) == []
    assert relay.alive, relay.log


def test_bad_headers_dead_lettered(case):
    prepare_meta(case)
    dlq = case.topic("dead-letter")
    relay = case.relay("--headers-column", "meta", "--on-error", "dead-letter",
                       "--dead-letter-topic", dlq)
    reader = case.reader()
    conn = case.connect(autocommit=False)
    commit = insert_rows(conn, [
        {"work_id": "bad-1", "kind": "k", "payload": {"n": 1}, "meta": '{"a": {"b": "c"}}'},
        {"work_id": "good-1", "kind": "k", "payload": {"n": 2}, "meta": '{"a": "b"}'},
    ])
    assert reader.read_until(has_ids(["bad-1", "good-1"]), 30), case.logs()
    recs = by_id(reader.records)
    dead = recs["bad-1"][0]
    assert dead.topic == dlq
    assert dead.header("outbox_relay_error_code") == "INVALID_HEADERS", dead.headers
    assert 'header "a"' in dead.header("outbox_relay_error"), dead.headers
    assert dead.header("outbox_relay_topic") == case.topic("k")
    assert json.loads(dead.value_text) == {"n": 1}
    assert user_headers(recs["good-1"][0]) == [("a", b"b")]
    wait_confirmed(case, commit.lsn_before + 1)
    assert relay.alive
    assert relay.stop() == 0, relay.log


# --- --column-header: a column's text as a header ------------------------------------------

def add_header_columns(case):
    case.query("ALTER TABLE outbox ADD COLUMN traceparent text, ADD COLUMN tenant_id integer")


def test_column_headers_arrive_before_the_headers_columns(case):
    """Each --column-header is the column's text as printed by PostgreSQL, named
    as given, after the relay's own headers and before the headers column's
    pairs; NULL adds none, an empty string an empty header."""
    add_header_columns(case)
    relay = case.relay("--column-header", "traceparent", "--column-header", "tenant_id=x-tenant")
    reader = case.reader()
    conn = case.connect(autocommit=False)
    tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    commit = insert_rows(conn, [
        {"work_id": "ch-1", "kind": "k", "payload": {"n": 1}, "traceparent": tp, "tenant_id": 42,
         "headers": {"a": "b"}},
        {"work_id": "ch-null", "kind": "k", "payload": {"n": 2}, "tenant_id": -7},
        {"work_id": "ch-none", "kind": "k", "payload": {"n": 3}},
        {"work_id": "ch-empty", "kind": "k", "payload": {"n": 4}, "traceparent": ""},
    ])
    assert reader.read_until(has_ids(commit.work_ids), 30), case.logs()
    recs = by_id(reader.records)
    assert user_headers(recs["ch-1"][0]) == [("traceparent", tp.encode()), ("x-tenant", b"42"),
                                             ("a", b"b")]
    assert user_headers(recs["ch-null"][0]) == [("x-tenant", b"-7")]
    assert user_headers(recs["ch-none"][0]) == []
    assert user_headers(recs["ch-empty"][0]) == [("traceparent", b"")]
    wait_confirmed(case, commit.lsn_before + 1)
    assert relay.stop() == 0, relay.log


@pytest.mark.parametrize("arg", ["x=ce_id", "CE_Source", "x=Content-Type", "x=outbox_relay_topic"])
def test_reserved_column_header_refused_at_start(case, arg):
    code, out = run_relay(case.relay_args("--column-header", arg))
    assert code == EXIT_USAGE, out
    assert 'invalid --column-header "%s"' % arg in out, out
    assert "is reserved for the relay's own headers" in out, out
    assert case.pg.slot(case.slot) is None


def test_missing_header_column(case):
    """A table without the column: check fails naming the fix, the relay does
    not start (exit 3). A column dropped while the relay runs makes its rows
    unpublishable (exit 4, naming the column)."""
    add_header_columns(case)
    case.query("CREATE TABLE plain (LIKE outbox INCLUDING DEFAULTS)")
    case.query("ALTER TABLE plain DROP COLUMN traceparent")
    both = ("-t", "public.outbox", "-t", "public.plain", "--column-header", "traceparent")
    code, out = run_relay(["check"] + case.relay_args(*both, create_slot=False))
    assert code == 3, out
    assert ('PASS  header columns of "public"."outbox": "traceparent" (header "traceparent") '
            'present') in out, out
    assert ('FAIL  header columns of "public"."plain": table "public"."plain" has no column '
            '"traceparent" (header "traceparent"), needed by --column-header') in out, out
    assert 'ALTER TABLE "public"."plain" ADD COLUMN "traceparent" text' in out, out
    code, out = run_relay(case.relay_args(*both))
    assert code == EXIT_ENV, out
    assert 'table "public"."plain" has no column "traceparent"' in out, out
    assert case.pg.slot(case.slot) is None

    relay = case.relay("--column-header", "traceparent")
    conn = case.connect(autocommit=False)
    first = insert_rows(conn, [{"work_id": "ok-1", "kind": "k", "payload": {}, "traceparent": "t"}])
    wait_confirmed(case, first.lsn_before + 1)
    case.query("ALTER TABLE outbox DROP COLUMN traceparent")
    bad = insert_rows(conn, [{"work_id": "gone-1", "kind": "k", "payload": {}}])
    line = stops_unpublishable(relay)
    check_row_error(line, bad, "gone-1", OUTBOX,
                    ['no column "traceparent" (published as header "traceparent" by '
                     '--column-header)'])
    assert_not_confirmed_past(case, bad)
