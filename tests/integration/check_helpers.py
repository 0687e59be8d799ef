# SPDX-License-Identifier: Apache-2.0
"""Helpers of the check area (test_check_*.py, and the SQL matrix's check on
each major): running `outbox-relay check` and reading its item lines apart,
asserting one item's FAIL and its fix, the check's temporary slots, and a
login role for one test.
"""

import re

from harness import EXIT_ENV, EXIT_OK, run_relay


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
