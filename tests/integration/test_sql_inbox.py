# SPDX-License-Identifier: Apache-2.0
"""sql/inbox.sql on its own: inbox_receive()'s three outcomes (true for the
first delivery, false for a repeat with the same payload however it is
spelled, SQLSTATE WK002 for a changed one), its bounds, a concurrent
transaction receiving the same work ID, the privileges a consumer needs,
inbox_cleanup() keeping entries younger than the deduplication horizon, the
psql variables the file takes, and sql/README.md's consumer transaction. The whole chain through the relay is in
test_sql_inbox_chain.py."""

import hashlib
import json
import os
import re
import threading

import harness
import psycopg2
import pytest
from harness import wait_until
from sql_helpers import MAILER, load_inbox, receive, receive_error

ORDER_103 = ('{"order_id":103,"customer_id":1,"total":"29.00",'
             '"message":"Order received; payment still pending"}')


@pytest.fixture
def db(case):
    """The test's database with sql/inbox.sql loaded; a connection to it
    (autocommit off)."""
    cp = load_inbox(case.pg, case.dbname)
    assert cp.returncode == 0, cp.stderr
    conn = case.connect(autocommit=False)
    yield conn
    conn.close()


def jsonb_sha256(case, payload):
    """SHA-256 (hex) of PostgreSQL's text of payload as jsonb."""
    text = case.scalar("SELECT %s::jsonb::text", (payload,))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_first_delivery_repeat_and_changed_payload(case, db):
    cur = db.cursor()
    assert receive(cur, "order-103-ack", ORDER_103) is True
    db.commit()
    # the same message as a JSON library may re-encode it: another key order,
    # other spacing, non-ASCII escaped
    again = json.dumps(dict(reversed(list(json.loads(ORDER_103).items()))), indent=2)
    assert again != ORDER_103
    assert receive(cur, "order-103-ack", again) is False
    db.commit()

    changed = ORDER_103.replace("29.00", "31.00")
    e = receive_error(db, "order-103-ack", changed)
    assert e.pgcode == "WK002", (e.pgcode, e.pgerror)
    assert not e.pgcode.startswith("23")        # not to be caught as a plain duplicate
    assert e.diag.message_primary == ('work ID "order-103-ack" was already processed by consumer '
                                      '"order-mailer" with a different payload')
    assert e.diag.message_detail.startswith("payload SHA-256: stored %s, new %s; first processed at "
                                            % (jsonb_sha256(case, ORDER_103),
                                               jsonb_sha256(case, changed))), e.diag.message_detail
    assert "new work ID" in e.diag.message_hint
    # the stored entry is the first one, unchanged
    rows = case.query("SELECT consumer, work_id, encode(payload_sha256, 'hex') "
                      "FROM processed_messages")
    assert rows == [(MAILER, "order-103-ack", jsonb_sha256(case, ORDER_103))]

    # non-ASCII text, escaped or not, is the same jsonb
    assert receive(cur, "order-104-ack", '{"message": "caf\u00e9 order", "total": "4.50"}') is True
    db.commit()
    assert receive(cur, "order-104-ack", '{"total":"4.50","message":"caf\\u00e9 order"}') is False
    db.commit()
    # numerically equal, but not the same text: as outbox_enqueue() has it
    assert receive(cur, "n-1", '{"total": 29.00}') is True
    db.commit()
    assert receive_error(db, "n-1", '{"total": 29.0}').pgcode == "WK002"
    # a tombstone matches only a tombstone
    assert receive(cur, "gone-1", None) is True
    db.commit()
    assert receive(cur, "gone-1", None) is False
    db.commit()
    assert receive_error(db, "gone-1", "{}").pgcode == "WK002"
    assert receive_error(db, "order-103-ack", None).pgcode == "WK002"

    # another consumer applies the same work ID once too
    assert receive(cur, "order-103-ack", ORDER_103, consumer="loyalty-points") is True
    db.commit()
    assert receive(cur, "order-103-ack", ORDER_103, consumer="loyalty-points") is False
    db.commit()

    # a consumer that crashed before COMMIT left no entry: the redelivery is first
    assert receive(cur, "order-105-ack", ORDER_103) is True
    db.rollback()
    assert receive(cur, "order-105-ack", ORDER_103) is True
    db.commit()
    assert case.scalar("SELECT count(*) FROM processed_messages") == 6


def test_bounds(case, db):
    """Consumer names of 1 to 255 bytes and work IDs of 1 to 1024 bytes
    (counted in bytes, not characters); outside them nothing is stored. A
    value that is not JSON is refused before anything is stored."""
    cur = db.cursor()
    assert receive(cur, "w" * 1024, "{}") is True
    assert receive(cur, "w" * 1024, "{}") is False
    assert receive(cur, "x", "{}", consumer="c" * 255) is True
    db.commit()
    for args, code, words in [
            (("", "{}"), "22023", "work ID must not be empty"),
            ((None, "{}"), "22023", "work ID must not be empty"),
            (("w" * 1025, "{}"), "22001", "work ID of 1025 bytes"),
            (("\u00e9" * 513, "{}"), "22001", "work ID of 1026 bytes"),
            (("x", "{}", ""), "22023", "consumer name must not be empty"),
            (("x", "{}", None), "22023", "consumer name must not be empty"),
            (("x", "{}", "c" * 256), "22001", "consumer name of 256 bytes"),
            (("not-json", "order 103 received"), "22P02", "invalid input syntax for type json")]:
        e = receive_error(db, *args)
        assert e.pgcode == code and words in e.diag.message_primary, (args[:1], e.pgerror)
    assert case.scalar("SELECT count(*) FROM processed_messages") == 2
    # the table refuses what the function refuses, for writers that bypass it
    with pytest.raises(psycopg2.errors.CheckViolation):
        cur.execute("INSERT INTO processed_messages (consumer, work_id) VALUES ('c', %s)",
                    ("w" * 1025,))
    db.rollback()


@pytest.mark.parametrize("same_payload", [True, False], ids=["same", "changed"])
@pytest.mark.parametrize("first_outcome", ["commit", "rollback"])
def test_concurrent_delivery_waits_for_the_first(case, db, first_outcome, same_payload):
    """Two consumer transactions receive one work ID at once: the second
    waits for the first. If the first commits, the second gets false (same
    payload) or WK002 (changed); if the first rolls back, the second is the
    first delivery. Never both true."""
    a = db
    b = case.connect(autocommit=False)
    assert receive(a.cursor(), "order-103-ack", ORDER_103) is True
    second = ORDER_103 if same_payload else ORDER_103.replace("29.00", "31.00")
    result = {}

    def run_second():
        try:
            result["value"] = receive(b.cursor(), "order-103-ack", second)
            b.commit()
        except psycopg2.Error as e:
            result["error"] = e
            b.rollback()

    t = threading.Thread(target=run_second, daemon=True)
    t.start()
    wait_until(lambda: case.scalar("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                                   (b.get_backend_pid(),)) == "Lock", 30,
               what="the second receive waiting on the first one's entry")
    assert not result
    getattr(a, first_outcome)()
    t.join(30)
    assert not t.is_alive()
    b.close()
    stored = case.query("SELECT encode(payload_sha256, 'hex') FROM processed_messages "
                        "WHERE work_id = 'order-103-ack'")
    if first_outcome == "rollback":
        assert result == {"value": True}, result
        assert stored == [(jsonb_sha256(case, second),)]
    elif same_payload:
        assert result == {"value": False}, result
        assert stored == [(jsonb_sha256(case, ORDER_103),)]
    else:
        assert "error" in result and result["error"].pgcode == "WK002", result
        assert stored == [(jsonb_sha256(case, ORDER_103),)]


def test_concurrent_delivery_under_repeatable_read(case, db):
    """Under REPEATABLE READ the entry a concurrent transaction committed after
    this one's snapshot is a serialization failure (retry), not a silent
    false that this snapshot could not explain."""
    b = case.connect(autocommit=False)
    b.set_session(isolation_level="REPEATABLE READ")
    b.cursor().execute("SELECT 1")         # b's snapshot: before a's entry
    assert receive(db.cursor(), "order-103-ack", ORDER_103) is True
    db.commit()
    e = receive_error(b, "order-103-ack", ORDER_103)
    assert e.pgcode == "40001", e.pgerror
    assert receive(b.cursor(), "order-103-ack", ORDER_103) is False   # the retry
    b.commit()
    b.close()


def test_consumer_needs_only_insert_and_select(case, db):
    """A consumer role with INSERT and SELECT on processed_messages receives,
    repeats and is refused a changed payload; it cannot clean up."""
    role = "rx_" + case.name[-40:]
    case.pg.query('CREATE ROLE "%s"' % role)
    try:
        case.query('GRANT INSERT, SELECT ON processed_messages TO "%s"' % role)
        cur = db.cursor()
        cur.execute('SET SESSION AUTHORIZATION "%s"' % role)
        assert receive(cur, "order-103-ack", ORDER_103) is True
        db.commit()
        assert receive(cur, "order-103-ack", ORDER_103) is False
        db.commit()
        assert receive_error(db, "order-103-ack", "{}").pgcode == "WK002"
        with pytest.raises(psycopg2.errors.InsufficientPrivilege):
            cur.execute("SELECT inbox_cleanup('1 second')")
        db.rollback()
        cur.execute("RESET SESSION AUTHORIZATION")
        db.commit()
    finally:
        case.query('DROP OWNED BY "%s"' % role)
        case.pg.query('DROP ROLE "%s"' % role)


def backdate(case, work_id, age, consumer=MAILER):
    case.query("UPDATE processed_messages SET first_processed_at = clock_timestamp() - %s::interval "
               "WHERE consumer = %s AND work_id = %s", (age, consumer, work_id))


def remembered(case):
    return sorted(case.query("SELECT consumer, work_id FROM processed_messages"))


def test_cleanup_keeps_entries_younger_than_the_horizon(case, db):
    """inbox_cleanup() with its default horizon (7 days) deletes an entry
    first processed 7 days and a minute ago and keeps one of 7 days less a
    minute; per consumer, in batches; afterwards the deleted work ID is a
    first delivery again (the protection ended), the kept one a repeat."""
    cur = db.cursor()
    for consumer, work_id in [(MAILER, "old"), (MAILER, "young"), (MAILER, "new"),
                              ("loyalty-points", "old")]:
        assert receive(cur, work_id, ORDER_103, consumer=consumer) is True
    db.commit()
    backdate(case, "old", "7 days 1 minute")
    backdate(case, "young", "7 days -1 minute")
    backdate(case, "old", "30 days", consumer="loyalty-points")

    assert case.scalar("SELECT inbox_cleanup(p_consumer => %s)", (MAILER,)) == 1
    assert remembered(case) == [("loyalty-points", "old"), (MAILER, "new"), (MAILER, "young")]
    assert case.scalar("SELECT inbox_cleanup()") == 1
    assert remembered(case) == [(MAILER, "new"), (MAILER, "young")]
    assert case.scalar("SELECT inbox_cleanup()") == 0

    assert receive(cur, "young", ORDER_103) is False
    assert receive(cur, "old", ORDER_103) is True
    db.commit()
    # a shorter horizon, given explicitly
    assert case.scalar("SELECT inbox_cleanup('1 day')") == 1
    assert remembered(case) == [(MAILER, "new"), (MAILER, "old")]

    for i in range(5):
        assert receive(cur, "batch-%d" % i, "{}") is True
    db.commit()
    case.query("UPDATE processed_messages SET first_processed_at = clock_timestamp() "
               "- interval '10 days' WHERE work_id LIKE 'batch-%'")
    assert [case.scalar("SELECT inbox_cleanup(p_batch => 2)") for _ in range(4)] == [2, 2, 1, 0]
    assert remembered(case) == [(MAILER, "new"), (MAILER, "old")]

    for args in ["'0 seconds'", "'-7 days'", "NULL", "'7 days', NULL, 0"]:
        with pytest.raises(psycopg2.errors.InvalidParameterValue):
            case.query("SELECT inbox_cleanup(%s)" % args)
    assert remembered(case) == [(MAILER, "new"), (MAILER, "old")]


def test_loads_into_a_schema_with_its_own_horizon(case):
    """-v inbox_schema and -v dedup_horizon: the objects go to that schema,
    work from a session whose search_path does not name it, and the cleanup's
    default horizon is the one given. A horizon that is not positive stops
    the load before anything is created."""
    case.query("CREATE SCHEMA mailer")
    cp = load_inbox(case.pg, case.dbname, inbox_schema="mailer", dedup_horizon="-1 day")
    assert cp.returncode == 3 and "dedup_horizon must be a positive interval" in cp.stderr, cp
    assert case.scalar("SELECT count(*) FROM pg_class WHERE relname = 'processed_messages'") == 0

    cp = load_inbox(case.pg, case.dbname, inbox_schema="mailer", dedup_horizon="30 days")
    assert cp.returncode == 0, cp.stderr
    assert case.scalar("SELECT to_regclass('mailer.processed_messages') IS NOT NULL") is True
    assert case.scalar("SELECT to_regclass('public.processed_messages')") is None
    conn = case.connect(autocommit=False)
    cur = conn.cursor()
    cur.execute("SELECT mailer.inbox_receive(%s, 'order-103-ack', %s)", (MAILER, ORDER_103))
    assert cur.fetchone()[0] is True
    conn.commit()
    case.query("UPDATE mailer.processed_messages SET first_processed_at = clock_timestamp() "
               "- interval '8 days'")
    assert case.scalar("SELECT mailer.inbox_cleanup()") == 0
    assert case.scalar("SELECT mailer.inbox_cleanup('7 days')") == 1
    conn.close()


def readme_example():
    """The consumer transaction of sql/README.md's "The receiver's inbox"."""
    text = open(os.path.join(harness.TOP, "sql", "README.md"), encoding="utf-8").read()
    section = text[text.index("## The receiver's inbox"):]
    return re.search(r"```sql\n(.*?)```", section, re.S).group(1)


def test_readme_example_applies_once(case, db):
    """sql/README.md's consumer transaction, run as written twice: one effect."""
    sql = readme_example()
    assert "inbox_receive('order-mailer', 'order-103-ack'" in sql, sql
    case.query("CREATE TABLE outgoing_mail (customer_id integer, template text, order_id integer)")
    db.autocommit = True                # BEGIN and COMMIT as written
    cur = db.cursor()
    for expected in (True, False):
        cur.execute("BEGIN")
        cur.execute(re.search(r"SELECT inbox_receive\(.*?\);", sql, re.S).group(0))
        first = cur.fetchone()[0]
        assert first is expected
        if first:
            cur.execute(re.search(r"INSERT INTO outgoing_mail .*?;", sql, re.S).group(0))
        cur.execute("COMMIT")
    assert case.query("SELECT customer_id, template, order_id FROM outgoing_mail") == \
        [(1, "order_received", 103)]
