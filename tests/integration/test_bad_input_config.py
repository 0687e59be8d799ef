# SPDX-License-Identifier: Apache-2.0
"""Configuration problems: each ends the relay by itself with the documented
exit status (1 retryable, 2 usage, 3 environment) and exactly one error
line that names what is wrong. test_cli.py already covers unknown options,
a bad --status-interval, a positional argument, missing tables and the
--id/--key/--payload-column options naming a missing column, and the exit
status of a non-UTF8 database; the cases here are the ones it leaves out.
"""

import time

import pytest
from bad_input_helpers import error_lines, the_error
from harness import EXIT_ENV, EXIT_RUNTIME, EXIT_USAGE, free_port, run_relay

NOWHERE = ["-d", "host=127.0.0.1 port=1 connect_timeout=2"]


USAGE_CASES = [
    (["-X", "linger.ms"], ['"linger.ms"', "NAME=VALUE"]),
    (["-X", "=5"], ['"=5"', "NAME=VALUE"]),
    (["-X", "enable.idempotence=false"], ["enable.idempotence=false", "refused"]),
    (["-X", "enable.idempotence=0"], ["enable.idempotence=0", "refused"]),
    (["-X", "acks=1"], ["acks=1", "refused", "acks=all"]),
    (["-X", "acks=0"], ["acks=0", "refused"]),
    (["-X", "request.required.acks=1"], ["request.required.acks=1", "refused"]),
    (["-X", "delivery.report.only.error=true"], ["delivery.report.only.error", "refused"]),
    (["-S", "Outbox"], ['"Outbox"', "slot"]),
    (["-S", "out-box"], ['"out-box"', "slot"]),
    (["-S", "s" * 64], ["s" * 64, "slot", "63"]),
    (["--on-error=ignore"], ["--on-error", '"ignore"', "stop", "dead-letter"]),
    (["--null-payload=drop"], ["--null-payload", '"drop"', "tombstone"]),
    (["--skip-transaction=last"], ["--skip-transaction", '"last"', "LSN"]),
    (["--dead-letter-transaction=1/2/3"], ["--dead-letter-transaction", "LSN"]),
    (["--skip-transaction=0/1A", "--dead-letter-transaction=0/1A"], ["choose one remedy"]),
    (["--dead-letter-topic=dead letters"], ["--dead-letter-topic", '"dead letters"']),
    (["--topic", "outbox.${kind"], ["--topic", "outbox.${kind"]),
    (["-t", "public.a.b"], ['"public.a.b"', "table"]),
    (["--max-inflight-messages=0"], ["--max-inflight-messages", '"0"']),
    (["--create-slot=yes"], ["--create-slot"]),
]


@pytest.mark.parametrize("argv,words", USAGE_CASES,
                         ids=[" ".join(a)[:40] for a, _ in USAGE_CASES])
def test_usage_error_is_one_line_and_exit_2(argv, words):
    """Refused before connecting anywhere (the database here does not exist)."""
    started = time.monotonic()
    rc, out = run_relay(NOWHERE + argv, timeout=15)
    assert rc == EXIT_USAGE, "argv %r: exit %s\n%s" % (argv, rc, out)
    line = the_error(out)
    assert out.strip().count("\n") == 0, "more than one line of output:\n" + out
    for w in words:
        assert w in line, "%r not in: %s" % (w, line)
    assert time.monotonic() - started < 5, "a usage error should not wait for anything"


@pytest.mark.parametrize("prop,words", [
    ("no.such.property=1", ["no.such.property"]),
    ("max.in.flight.requests.per.connection=10", ["max.in.flight"]),
    ("compression.codec=zip", ["compression.codec", "zip"]),
], ids=["unknown-property", "idempotence-conflict", "bad-value"])
def test_kafka_property_librdkafka_refuses_exit_2(case, prop, words):
    """librdkafka itself refuses the -X (unknown name, bad value, or a
    setting the idempotent producer cannot have): a usage error, not a
    failure worth retrying."""
    rc, out = run_relay(case.relay_args("-X", prop), timeout=30)
    assert rc == EXIT_USAGE, "exit %s\n%s" % (rc, out)
    line = the_error(out)
    for w in words:
        assert w in line, "%r not in: %s" % (w, line)


def test_metrics_address_malformed_exit_2(case):
    rc, out = run_relay(case.relay_args("--metrics-address", "localhost-9187"), timeout=30)
    assert rc == EXIT_USAGE, "exit %s\n%s" % (rc, out)
    assert "localhost-9187" in the_error(out), out


def test_unreachable_brokers_exit_1(case):
    port = free_port()
    brokers = "127.0.0.1:%d" % port
    started = time.monotonic()
    rc, out = run_relay(case.relay_args(brokers=brokers), timeout=40)
    took = time.monotonic() - started
    assert rc == EXIT_RUNTIME, "exit %s\n%s" % (rc, out)
    assert took < 15, "took %.1f s to give up on the brokers" % took
    lines = error_lines(out)
    assert lines and brokers in lines[-1] and "--brokers" in lines[-1], out
    # one clear line, not librdkafka's connection attempts as errors too
    assert the_error(out) == lines[-1]


def test_unreachable_database_exit_1():
    port = free_port()
    started = time.monotonic()
    rc, out = run_relay(["-d", "host=127.0.0.1 port=%d dbname=shop" % port], timeout=40)
    assert rc == EXIT_RUNTIME, "exit %s\n%s" % (rc, out)
    assert time.monotonic() - started < 15
    line = the_error(out)
    assert str(port) in line, line


def test_non_utf8_database_names_utf8(case, pg):
    db = case.dbname + "_ascii"
    pg.query("CREATE DATABASE %s ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' "
             "TEMPLATE template0" % db)
    try:
        pg.psql("CREATE TABLE outbox (work_id text PRIMARY KEY, kind text NOT NULL, "
                "payload jsonb NOT NULL)", dbname=db)
        args = case.relay_args()
        args[1] = pg.conninfo(db)
        rc, out = run_relay(args, timeout=30)
        assert rc == EXIT_ENV, "exit %s\n%s" % (rc, out)
        line = the_error(out)
        assert "UTF8" in line and "SQL_ASCII" in line and db in line, line
        assert pg.slot(case.slot) is None, "a slot was created for a database the relay refuses"
    finally:
        pg.drop_slot(case.slot)
        pg.drop_database(db)


@pytest.mark.parametrize("ddl,args,words", [
    ("CREATE TABLE public.no_payload (work_id text PRIMARY KEY, kind text NOT NULL)",
     ["-t", "public.no_payload"], ['"payload"', "no_payload", "--payload-column"]),
    ("CREATE TABLE public.no_id (id text PRIMARY KEY, kind text, payload jsonb)",
     ["-t", "public.no_id"], ['"work_id"', "no_id"]),
    ("CREATE TABLE public.no_entity (LIKE public.outbox INCLUDING ALL); "
     "ALTER TABLE public.no_entity DROP COLUMN entity_id",
     ["-t", "public.outbox", "-t", "public.no_entity", "--key-column", "entity_id"],
     ['"entity_id"', "no_entity", "--key-column"]),
    (None, ["--topic", "outbox.${region}"], ['"region"', "--topic"]),
], ids=["no-payload-column", "no-work-id-column", "second-table-lacks-key", "topic-column"])
def test_table_lacks_a_column_exit_3(case, ddl, args, words):
    if ddl:
        case.query(ddl)
    rc, out = run_relay(case.relay_args(*args), timeout=30)
    assert rc == EXIT_ENV, "exit %s\n%s" % (rc, out)
    line = the_error(out)
    for w in words:
        assert w in line, "%r not in: %s" % (w, line)
    assert case.slot_info() is None, "the slot was created although the relay refused to start"
    assert len(error_lines(out)) == 1
