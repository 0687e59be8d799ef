# SPDX-License-Identifier: Apache-2.0
"""Helpers for the redrive tests (test_redrive*.py): running `outbox-relay
redrive` with a test's database, brokers and topic template, telling a
redriven record from the relay's own, and what its redrive headers must say."""

import os
import pwd
import socket
import time

from harness import run_relay

# The headers every redriven record carries (outbox-relay(7), "Redrive").
REDRIVE_HEADERS = ("outbox_relay_redrive_reason", "outbox_relay_redrive_by",
                   "outbox_relay_redrive_at", "outbox_relay_redrive_from")
# What the table does not keep: a redrive from it leaves them out.
TXN_HEADERS = ("ce_pglsn", "ce_pgxid")


def redrive(case, *extra, brokers=None, timeout=90):
    """Run `outbox-relay redrive` with this test's database, brokers and topic
    template plus extra. Returns (exit code, output)."""
    args = ["redrive", "-d", case.dsn, "-S", case.slot, "-b", brokers or case.kafka.bootstrap,
            "--topic", case.prefix + ".${kind}"]
    return run_relay(args + list(extra), timeout=timeout)


def is_redrive(rec):
    return rec.header("outbox_relay_redrive_from") is not None


def redriven(records):
    return [r for r in records if is_redrive(r)]


def originals(records):
    return [r for r in records if not is_redrive(r)]


def operator():
    """user@host as the redrive names the one who ran it (USER, else the login name)."""
    user = os.environ.get("USER") or pwd.getpwuid(os.geteuid()).pw_name
    return "%s@%s" % (user, socket.gethostname())


def rfc3339_us(text):
    """'2026-11-30T04:07:34.336545Z' -> µs since the epoch."""
    import calendar
    head, frac = text.rstrip("Z").split(".")
    return calendar.timegm(time.strptime(head, "%Y-%m-%dT%H:%M:%S")) * 1000000 + int(frac)


def check_redrive_headers(rec, reason, source, before_us, after_us):
    """Problems with rec's redrive headers: each once, saying reason, who, when
    (within [before_us, after_us]) and where from."""
    problems = []
    for name in REDRIVE_HEADERS:
        n = [k for k, _ in rec.headers].count(name)
        if n != 1:
            problems.append("%s occurs %d times" % (name, n))
    if problems:
        return problems
    if rec.header("outbox_relay_redrive_reason") != reason:
        problems.append("reason %r, expected %r" % (rec.header("outbox_relay_redrive_reason"), reason))
    if rec.header("outbox_relay_redrive_by") != operator():
        problems.append("by %r, expected %r" % (rec.header("outbox_relay_redrive_by"), operator()))
    at = rfc3339_us(rec.header("outbox_relay_redrive_at"))
    if not before_us <= at <= after_us:
        problems.append("at %s is not within the run" % rec.header("outbox_relay_redrive_at"))
    if rec.header("outbox_relay_redrive_from") != source:
        problems.append("from %r, expected %r" % (rec.header("outbox_relay_redrive_from"), source))
    # the redrive headers come last, after everything the record had
    names = rec.header_names
    if names[-len(REDRIVE_HEADERS):] != list(REDRIVE_HEADERS):
        problems.append("redrive headers are not the last ones: %s" % names)
    return problems


def now_us():
    return int(time.time() * 1000000)
