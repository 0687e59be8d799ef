# SPDX-License-Identifier: Apache-2.0
"""`outbox-relay check`: one PASS/WARN/FAIL/SKIP line per preflight item,
exit 0 when nothing failed (safe to start), 3 when something did, 2 for a
usage error. One passing setup (the harness's) and one failing setup per
item, each checked for its FAIL line and its fix.
"""

import os
import re
import time

import harness
import pytest
from check_helpers import Role, assert_fail, check_args, check_slots_left, run_check
from harness import EXIT_OK, EXIT_USAGE, free_port, run_relay


@pytest.mark.smoke
def test_check_passes_on_harness_setup(case):
    """The harness's setup is safe to start: every item PASS or WARN, exit 0.
    Before the slot exists it is a WARN pointing at `slot create`; after, a PASS."""
    rc, out, items = run_check(check_args(case))
    assert rc == EXIT_OK, out
    assert all(s in ("PASS", "WARN") for s, _ in items.values()), out
    assert items["wal_level"] == ("PASS", "logical"), out
    assert items["server_encoding"] == ("PASS", "UTF8"), out
    assert items["wal2json"][0] == "PASS" and "temporary slot" in items["wal2json"][1], out
    assert items["kafka brokers"][0] == "PASS", out
    for name in ('table "public"."outbox"', 'SELECT on "public"."outbox"',
                 'replica identity of "public"."outbox"', "replication privilege", "connection",
                 "server version", "wal_sender_timeout"):
        assert items[name][0] == "PASS", "%s: %s\n%s" % (name, items.get(name), out)
    slot_item = 'slot "%s"' % case.slot
    assert items[slot_item][0] == "WARN" and "outbox-relay slot create" in items[slot_item][1], out
    # the harness leaves max_slot_wal_keep_size at -1: worth a warning with a value to set
    assert items["max_slot_wal_keep_size"][0] == "WARN", out
    assert "ALTER SYSTEM SET max_slot_wal_keep_size" in items["max_slot_wal_keep_size"][1], out
    assert check_slots_left(case.pg) == [], "the wal2json probe left its temporary slot behind"
    assert case.slot_info() is None, "check created the relay's slot"

    rc, out = run_relay(["slot", "create"] + check_args(case), timeout=60)
    assert rc == EXIT_OK, out
    rc, out, items = run_check(check_args(case))
    assert rc == EXIT_OK, out
    assert items[slot_item][0] == "PASS" and "wal2json" in items[slot_item][1], out


def test_check_missing_table(case):
    rc, out, items = run_check(check_args(case, "-t", "public.no_such_outbox"))
    assert_fail(rc, out, items, 'table "public"."no_such_outbox"', "does not exist", "--table")
    assert items['SELECT on "public"."no_such_outbox"'][0] == "SKIP", out


def test_check_missing_payload_column(case):
    case.query("ALTER TABLE outbox RENAME COLUMN payload TO body")
    rc, out, items = run_check(check_args(case))
    assert_fail(rc, out, items, 'table "public"."outbox"', '"payload"', "--payload-column")
    # the right option makes it pass again
    rc, out, items = run_check(check_args(case, "--payload-column", "body"))
    assert rc == EXIT_OK, out


def test_check_role_without_replication(case):
    role = Role(case, "norepl", replication=False, select=True)
    try:
        args = check_args(case)
        args[1] = role.dsn()
        rc, out, items = run_check(args)
        assert_fail(rc, out, items, "replication privilege", role.name, "ALTER ROLE", "REPLICATION")
        assert items["wal2json"][0] == "SKIP", out
        assert items['SELECT on "public"."outbox"'][0] == "PASS", out
    finally:
        role.drop()


def test_check_role_without_select(case):
    role = Role(case, "nosel", replication=True, select=False)
    try:
        args = check_args(case)
        args[1] = role.dsn()
        rc, out, items = run_check(args)
        assert_fail(rc, out, items, 'SELECT on "public"."outbox"', "GRANT SELECT", role.name)
        assert items["replication privilege"][0] == "PASS", out
        # a role that is not superuser cannot see output_plugin_libraries (on
        # the servers that have it); the probe still runs
        assert items["wal2json"][0] == "PASS", out
        assert check_slots_left(case.pg) == [], out
    finally:
        role.drop()


@pytest.mark.exactly_once
def test_check_broker_unreachable(case):
    brokers = "127.0.0.1:%d" % free_port()   # nothing listens there
    started = time.monotonic()
    rc, out, items = run_check(check_args(case, brokers=brokers))
    took = time.monotonic() - started
    assert_fail(rc, out, items, "kafka brokers", brokers, "--brokers")
    # every Kafka item is there, a SKIP that says why (README: one line per item)
    for name in ("topics", "topic limits", 'checkpoint topic "outbox-relay.checkpoints"',
                 'checkpoint of slot "%s"' % case.slot):
        assert items[name] == ("SKIP", "no Kafka broker reachable"), (name, out)
    assert "kafka transactions" not in items, out
    rc, out, items = run_check(check_args(case, "--exactly-once", brokers=brokers))
    assert items["kafka transactions"] == ("SKIP", "no Kafka broker reachable"), out
    assert took < 30, "the broker probe took %.1f s, more than its timeout" % took
    # the database items still ran
    assert items["wal_level"][0] == "PASS", out


def test_check_wal2json_allowed_only_where_listed(case):
    """A second server whose configuration allows only pgoutput where it can.

    On a server with output_plugin_libraries (PostgreSQL 15.19 and later
    minors) wal2json is refused to every role: the probe fails, names the
    setting, and the printed fix, applied as printed, makes the check pass. On
    an older server the setting does not exist (it would not even start with
    it in its configuration) and wal2json loads."""
    restricted = harness.restricts_output_plugins()
    settings = {"output_plugin_libraries": "'pgoutput'" if restricted else None}
    with harness.Environment(kafka=False, pg_settings=settings) as other:
        other.pg.psql(file=harness.SCHEMA_SQL)
        has_setting = other.pg.scalar(
            "SELECT count(*) FROM pg_settings WHERE name = 'output_plugin_libraries'") == 1
        assert has_setting == restricted, "the server and its binary disagree"
        args = check_args(case)
        args[1] = other.pg.dsn
        rc, out, items = run_check(args)
        if not restricted:
            assert items["wal2json"][0] == "PASS", out
            assert "output_plugin_libraries" not in items["wal2json"][1], out
            return
        text = assert_fail(rc, out, items, "wal2json", "is not allowed", "output_plugin_libraries",
                           "15.19", "the library is installed",
                           "ALTER SYSTEM SET output_plugin_libraries = 'pgoutput', 'wal2json'")
        assert "not installed" not in text, text
        assert check_slots_left(other.pg) == [], out
        # the fix works as printed: ALTER SYSTEM needs one quoted name per
        # entry ('pgoutput, wal2json' as one literal would refuse both)
        fix = re.search(r"(ALTER SYSTEM SET output_plugin_libraries = [^;]*);", text).group(1)
        other.pg.query(fix)
        other.pg.query("SELECT pg_reload_conf()")
        def passes():
            rc2, out2, items2 = run_check(args)
            return (rc2, out2, items2) if items2["wal2json"][0] == "PASS" else None
        harness.wait_until(passes, 30, interval=0.5, what="check to pass after the printed fix")


def test_check_wal2json_not_installed(case):
    """A server that cannot find the library (dynamic_library_path pointing
    at an empty directory stands in for a server without the package): the
    check says it is not installed and names the package, on either side of
    output_plugin_libraries."""
    with harness.Environment(kafka=False) as other:
        empty = os.path.join(other.base_dir, "no-libraries")
        os.mkdir(empty)
        os.chmod(empty, 0o755)
        other.pg.query("ALTER SYSTEM SET dynamic_library_path = %s", (empty,))
        other.pg.query("SELECT pg_reload_conf()")
        args = check_args(case)
        args[1] = other.pg.dsn
        rc, out, items = run_check(args)
        text = assert_fail(rc, out, items, "wal2json", "not installed", "postgresql-15-wal2json")
        assert "not allowed" not in text, text
        assert check_slots_left(other.pg) == [], out


def test_check_wal2json_neither_listed_nor_installed(case):
    """On a server with output_plugin_libraries the refusal comes before the
    library is looked for: a superuser's check still tells that the library
    is missing too. On an older server only "not installed" applies."""
    restricted = harness.restricts_output_plugins()
    settings = {"output_plugin_libraries": "'pgoutput'" if restricted else None}
    with harness.Environment(kafka=False, pg_settings=settings) as other:
        empty = os.path.join(other.base_dir, "no-libraries")
        os.mkdir(empty)
        os.chmod(empty, 0o755)
        other.pg.query("ALTER SYSTEM SET dynamic_library_path = %s", (empty,))
        other.pg.query("SELECT pg_reload_conf()")
        args = check_args(case)
        args[1] = other.pg.dsn
        rc, out, items = run_check(args)
        if restricted:
            assert_fail(rc, out, items, "wal2json", "is not allowed", "not installed either",
                        "postgresql-15-wal2json", "ALTER SYSTEM SET output_plugin_libraries")
        else:
            assert_fail(rc, out, items, "wal2json", "not installed", "postgresql-15-wal2json")


def test_check_slot_of_another_plugin(case):
    # test_decoding: allowed on every server (PostgreSQL's default output_plugin_libraries lists it)
    case.query("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (case.slot,))
    rc, out, items = run_check(check_args(case))
    assert_fail(rc, out, items, 'slot "%s"' % case.slot, '"test_decoding"', "not wal2json", "--slot")
    assert case.slot_info()["plugin"] == "test_decoding", "check changed the operator's slot"


def test_check_checkpoint_item_of_an_unusable_slot(case):
    """A slot that exists but is not usable (here of another plugin) has no
    checkpoint to judge: the checkpoint item is skipped and points at the slot's
    item (it once passed as "none yet (no slot)", a slot that is there)."""
    case.query("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (case.slot,))
    topic = "outbox-relay.checkpoints"
    if topic not in case.kafka.topics():
        case.kafka.create_topic(topic, partitions=1, config={"cleanup.policy": "compact"})
    rc, out, items = run_check(check_args(case))
    status, text = items['checkpoint of slot "%s"' % case.slot]
    assert status == "SKIP" and "not usable" in text, out


def test_check_slot_in_use_is_a_warning(case):
    case.relay()
    rc, out, items = run_check(check_args(case))
    assert rc == EXIT_OK, out
    status, text = items['slot "%s"' % case.slot]
    assert status == "WARN" and str(case.slot_info()["active_pid"]) in text, out


def test_check_topics_missing_without_auto_creation(case):
    """With auto-creation off (-X allow.auto.create.topics=false), the topics
    of the template's values now in the outbox must exist."""
    case.kafka.create_topic(case.topic("present"), partitions=1)
    case.query("INSERT INTO outbox (work_id, kind, payload) VALUES "
               "('a', 'present', '{}'), ('b', 'absent', '{}'), ('c', 'absent', '{}')")
    rc, out, items = run_check(check_args(case, "-X", "allow.auto.create.topics=false"))
    name = 'topics of "%s.${kind}"' % case.prefix
    text = assert_fail(rc, out, items, name, '"%s"' % case.topic("absent"), "allow.auto.create.topics")
    assert case.topic("present") not in text, text
    # with auto-creation (the harness broker allows it) the same outbox is fine
    rc, out, items = run_check(check_args(case))
    assert rc == EXIT_OK and items[name][0] == "PASS", out
    assert "auto.create.topics.enable=true" in items[name][1], out


@pytest.mark.exactly_once
def test_check_names_topic_limits_below_the_batch(case):
    """A topic whose max.message.bytes is below the producer's batch (issue
    21): a WARN that names the topic's limit, the producer's batch and the
    fix, and what the relay does about it in each mode."""
    case.kafka.create_topic(case.topic("small"), partitions=1, config={"max.message.bytes": "3000"})
    case.kafka.create_topic(case.topic("wide"), partitions=1)
    case.query("INSERT INTO outbox (work_id, kind, payload) VALUES ('a', 'small', '{}'), "
               "('b', 'wide', '{}')")
    rc, out, items = run_check(check_args(case))
    assert rc == EXIT_OK, out
    status, text = items["topic limits"]
    assert status == "WARN", out
    for words in ('"%s" 3000 bytes' % case.topic("small"), "producer's batch of 1000000 bytes",
                  "max.message.bytes=1000000", "-X batch.size=3000", "a producer of their own"):
        assert words in text, "%r not in: %s" % (words, text)
    assert case.topic("wide") not in text, text
    rc, out, items = run_check(check_args(case, "--exactly-once"))
    assert items["topic limits"][0] == "WARN", out
    assert "every topic, shrinks to 3000 bytes" in items["topic limits"][1], out
    # the producer's own batch at or below the limit: nothing to say
    rc, out, items = run_check(check_args(case, "-X", "batch.size=3000"))
    assert items["topic limits"][0] == "PASS" and "3000 bytes" in items["topic limits"][1], out


def test_check_names_the_transaction_blocking_the_probe(case):
    """Creating a slot waits for running transactions: the probe gives up
    after its 10 s timeout, says so and names the transaction's PID."""
    conn = case.connect(autocommit=False)
    try:
        cur = conn.cursor()
        cur.execute("SELECT txid_current(), pg_backend_pid()")
        pid = cur.fetchone()[1]
        started = time.monotonic()
        rc, out, items = run_check(check_args(case))
        took = time.monotonic() - started
        text = assert_fail(rc, out, items, "wal2json", "within 10 s", "PID %d" % pid)
        assert took < 30, "took %.1f s" % took
    finally:
        conn.rollback()
        conn.close()
    assert check_slots_left(case.pg) == [], "the cancelled probe left a slot behind\n" + text


@pytest.mark.parametrize("argv", [
    ["check", "--yes"],
    ["check", "--format=json"],
    ["slot"],
    ["slot", "list"],
    ["slot", "status", "--format=yaml"],
], ids=["check-yes", "check-format", "slot-alone", "slot-unknown", "bad-format"])
def test_command_usage_errors_exit_2(argv):
    rc, out = run_relay(argv + ["-d", "host=127.0.0.1 port=1"], timeout=15)
    assert rc == EXIT_USAGE, "argv %r: exit %s\n%s" % (argv, rc, out)
    assert out.startswith("outbox-relay: error: "), out


def test_check_fails_on_a_value_that_gives_no_topic(case):
    """A row the relay will meet whose kind makes no valid topic name stops
    the relay (exit 4): check says FAIL even though another value's topic
    exists. Rows a new slot will never publish are only a warning, and with
    --on-error=dead-letter such rows are a warning too."""
    name = 'values of "%s.${kind}"' % case.prefix
    case.query("INSERT INTO outbox (work_id, kind, payload) VALUES ('old-bad', 'no such/kind', '{}')")
    rc, out, items = run_check(check_args(case))
    assert rc == EXIT_OK and items[name][0] == "WARN", out
    assert "written before the slot exists" in items[name][1], out

    rc, out = run_relay(["slot", "create"] + check_args(case), timeout=60)
    assert rc == EXIT_OK, out
    case.query("DELETE FROM outbox")
    case.query("INSERT INTO outbox (work_id, kind, payload) VALUES ('ok', 'fine', '{}'), "
               "('bad', 'no such/kind', '{}')")
    case.kafka.create_topic(case.topic("fine"))
    rc, out, items = run_check(check_args(case))
    assert_fail(rc, out, items, name, "1 value in rows the slot has not confirmed", "no such/kind",
                "exit 4", "--on-error=dead-letter")
    # what check predicted: the relay stops on that row
    rc2, log = run_relay(check_args(case), timeout=60)
    assert rc2 == harness.EXIT_UNPUBLISHABLE and "no such/kind" in log, log

    rc, out, items = run_check(check_args(case, "--on-error", "dead-letter"))
    assert items[name][0] == "WARN" and "dead-letter topic" in items[name][1], out


def test_check_shows_configuration_warnings(case):
    """What the daemon warns about at start appears in check too."""
    env = dict(os.environ, OUTBOX_RELAY_SLOTT="typo")
    rc, out, items = run_check(check_args(case), env=env)
    assert rc == EXIT_OK, out
    assert items["configuration"][0] == "WARN" and "OUTBOX_RELAY_SLOTT" in items["configuration"][1], out
