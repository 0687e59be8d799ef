# SPDX-License-Identifier: Apache-2.0
"""`outbox-relay check`: one PASS/WARN/FAIL/SKIP line per preflight item,
exit 0 when nothing failed (safe to start), 3 when something did, 2 for a
usage error. One passing setup (the harness's) and one failing setup per
item, each checked for its FAIL line and its fix.
"""

import re
import time

import harness
import pytest
from harness import EXIT_ENV, EXIT_OK, EXIT_USAGE, free_port, run_relay

LINE = re.compile(r"^(PASS|WARN|FAIL|SKIP)  (.+?): (.*)$")
SUMMARY = re.compile(r"^(\d+) passed, (\d+) warnings?, (\d+) failed, (\d+) skipped: "
                     r"(safe to start|not safe to start)$")


def run_check(args, timeout=60, **kw):
    """Run `outbox-relay check ARGS`; returns (exit code, output, items) where
    items maps each item's name to (status, text)."""
    rc, out = run_relay(["check"] + list(args), timeout=timeout, **kw)
    items = {}
    lines = out.splitlines()
    for line in lines[:-1]:
        m = LINE.match(line)
        assert m, "not an item line: %r\n%s" % (line, out)
        assert m.group(2) not in items, "item %r twice\n%s" % (m.group(2), out)
        items[m.group(2)] = (m.group(1), m.group(3))
    m = SUMMARY.match(lines[-1]) if lines else None
    assert m, "no summary line\n" + out
    counts = [int(m.group(i)) for i in range(1, 5)]
    for n, word in zip(counts, ("PASS", "WARN", "FAIL", "SKIP")):
        assert n == sum(1 for s, _ in items.values() if s == word), out
    assert (m.group(5) == "safe to start") == (rc == EXIT_OK), out
    return rc, out, items


def check_args(case, *extra, **kw):
    return case.relay_args(*extra, create_slot=False, **kw)


def assert_fail(rc, out, items, name, *words):
    assert rc == EXIT_ENV, "exit %s\n%s" % (rc, out)
    assert name in items, "no item %r\n%s" % (name, out)
    status, text = items[name]
    assert status == "FAIL", "%s is %s, expected FAIL\n%s" % (name, status, out)
    for w in words:
        assert w in text, "%r not in the FAIL line of %s: %s" % (w, name, text)
    return text


def check_slots_left(pg):
    """The check's temporary slots must be gone when it has exited."""
    return [r[0] for r in pg.query("SELECT slot_name FROM pg_replication_slots "
                                   "WHERE slot_name LIKE 'outbox_relay_check_%'")]


class Role:
    """A login role for one test (roles are cluster-wide), dropped afterwards."""

    def __init__(self, case, suffix, replication, select):
        self.case = case
        self.name = "%s_%s" % (case.name, suffix)
        case.pg.query('CREATE ROLE "%s" LOGIN%s' % (self.name, " REPLICATION" if replication else ""))
        if select:
            case.query('GRANT SELECT ON public.outbox TO "%s"' % self.name)

    def dsn(self):
        return self.case.pg.conninfo(self.case.dbname, user=self.name)

    def drop(self):
        self.case.query('DROP OWNED BY "%s"' % self.name)
        self.case.pg.query('DROP ROLE "%s"' % self.name)


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
        # a role that is not superuser cannot see output_plugin_libraries; the probe still runs
        assert items["wal2json"][0] == "PASS", out
        assert check_slots_left(case.pg) == [], out
    finally:
        role.drop()


def test_relay_starts_with_replication_role_without_superuser(case):
    """Regression: Debian hides output_plugin_libraries from roles without
    superuser or pg_read_all_settings, and the relay used to stop at startup
    with "cannot read server settings" for exactly the role the README
    recommends (LOGIN REPLICATION, SELECT on the outbox)."""
    role = Role(case, "relay", replication=True, select=True)
    try:
        args = case.relay_args()
        args[1] = role.dsn()
        r = case.env.relay(args, name="%s-relay-role" % case.name)
        case.relays.append(r)
        r.wait_ready(case.pg, case.slot)
        r.stop()
    finally:
        role.drop()


def test_check_broker_unreachable(case):
    brokers = "127.0.0.1:%d" % free_port()   # nothing listens there
    started = time.monotonic()
    rc, out, items = run_check(check_args(case, brokers=brokers))
    took = time.monotonic() - started
    assert_fail(rc, out, items, "kafka brokers", brokers, "--brokers")
    assert items["topics"][0] == "SKIP", out
    assert took < 30, "the broker probe took %.1f s, more than its timeout" % took
    # the database items still ran
    assert items["wal_level"][0] == "PASS", out


def test_check_wal2json_refused(case):
    """A second server whose output_plugin_libraries lacks wal2json (Debian's
    hardening patch): the temporary-slot probe fails and the fix names the
    setting."""
    with harness.Environment(kafka=False,
                             pg_settings={"output_plugin_libraries": "'pgoutput'"}) as other:
        other.pg.psql(file=harness.SCHEMA_SQL)
        args = check_args(case)
        args[1] = other.pg.dsn
        rc, out, items = run_check(args)
        text = assert_fail(rc, out, items, "wal2json", "output_plugin_libraries",
                           "ALTER SYSTEM SET output_plugin_libraries = 'pgoutput', 'wal2json'")
        assert "temporary slot" in text, text
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


def test_check_slot_of_another_plugin(case):
    # pgoutput: the harness's output_plugin_libraries allows only it and wal2json
    case.query("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (case.slot,))
    rc, out, items = run_check(check_args(case))
    assert_fail(rc, out, items, 'slot "%s"' % case.slot, '"pgoutput"', "not wal2json", "--slot")
    assert case.slot_info()["plugin"] == "pgoutput", "check changed the operator's slot"


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
