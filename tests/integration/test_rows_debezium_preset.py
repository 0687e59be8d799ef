# SPDX-License-Identifier: Apache-2.0
"""--preset=debezium against the real thing: the same rows of a Debezium outbox
table (id uuid, aggregatetype, aggregateid, type, payload jsonb,
tracingspancontext) published once by the relay with the preset and once by
Debezium's PostgreSQL connector with the Outbox Event Router at its defaults,
on a Kafka Connect standalone worker (tests/bench/debezium.py, the
benchmark's machinery; StringConverter for key and value, as there). Per row
the two records must agree on topic, key, value, the "id" header and the
partition; Debezium's record must carry no other header but its connector's
context headers (__debezium.context.*).

Debezium needs a JVM and its jars (~/.cache/outbox-relay/debezium-*, fetched
with mvn once). If it cannot be had or does not deliver in time the test
fails with its log; it never skips.

Also what `check` and the relay's startup say about a table that lacks the
preset's columns, or whose payload column is bytea (Debezium's choice for
Avro or Protobuf bytes), which the relay cannot publish.
"""

import json
import os
import re
import shlex
import sys
import threading
import time
import uuid

from harness import EXIT_ENV, docs, procs, run_relay

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "bench"))
import debezium  # noqa: E402  (tests/bench/debezium.py)

# Debezium's documented outbox table ("Basic outbox table"), plus the optional
# tracing column its router reads when OpenTelemetry is on its classpath.
DEBEZIUM_TABLE = """
CREATE TABLE outboxevent (
    id uuid NOT NULL PRIMARY KEY,
    aggregatetype varchar(255) NOT NULL,
    aggregateid varchar(255) NOT NULL,
    type varchar(255) NOT NULL,
    payload jsonb,
    tracingspancontext varchar(256)
)"""

# What Debezium 3.2+ connectors add to every record by default
# (extended.headers.enabled): where it came from, not what the event says.
CONTEXT = "__debezium.context."
CONTEXT_HEADERS = {CONTEXT + n for n in ("connectorLogicalName", "connectorName", "taskId",
                                         "runId")}

# From the JVM's start to the last row's record; Connect and the connector
# take 10 to 30 s to start on two busy cores.
DEBEZIUM_DEADLINE_S = 90


class DebeziumWorker:
    """Kafka Connect standalone with Debezium's connector, as a child of the
    test: registered with the harness, so it is killed with the test run."""

    def __init__(self, argv, log_path):
        self.argv, self.log_path = argv, log_path
        self.proc = procs.spawn(argv, log_path=log_path)
        procs.register(self)

    @property
    def alive(self):
        return self.proc.poll() is None

    def log_tail(self):
        return procs.tail(self.log_path, 6000)

    def stop(self):
        procs.terminate(self.proc, 15, 20)
        procs.unregister(self)

    def _emergency_stop(self):
        if self.alive:
            self.proc.kill()


def start_relay(case, *extra, ready=True):
    """The relay with the preset and nothing else that shapes records: no
    --topic, no column options (Case.relay() would add its --topic)."""
    args = ["-d", case.dsn, "-S", case.slot, "-b", case.kafka.bootstrap, "-s", "1",
            "--create-slot", "--preset", "debezium", "-t", "public.outboxevent"] + list(extra)
    r = case.env.relay(args, name="%s-relay-%d" % (case.name, len(case.relays) + 1))
    case.relays.append(r)
    if ready:
        r.wait_ready(case.pg, case.slot)
    return r


def start_debezium(case, slot):
    """Debezium streaming the outbox table from @slot (pgoutput, created
    beforehand, so rows committed before the JVM is up are not missed)."""
    case.query("CREATE PUBLICATION dbz_pub FOR TABLE outboxevent")
    case.query("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    case.extra_slots.append(slot)
    workdir = os.path.join(case.env.base_dir, case.name + "-debezium")
    # ensure_jars() raises when the jars cannot be fetched: the test errors, loudly
    argv = debezium.prepare(workdir, bootstrap=case.kafka.bootstrap, pg=case.pg,
                            dbname=case.dbname, slot=slot, publication="dbz_pub",
                            name=case.prefix + "-dbz", table="public.outboxevent",
                            router={})  # {}: every setting of the router at its default
    return DebeziumWorker(argv, os.path.join(case.env.base_dir, case.name + "-debezium.log"))


def insert_events(conn, events):
    """One transaction of (id, aggregatetype, aggregateid, type, payload, tracingspancontext);
    a payload given as a string is JSON text as written."""
    cur = conn.cursor()
    for e in events:
        payload = e[4] if e[4] is None or isinstance(e[4], str) else json.dumps(e[4])
        cur.execute("INSERT INTO outboxevent VALUES (%s, %s, %s, %s, %s, %s)",
                    (e[0], e[1], e[2], e[3], payload, e[5]))
    conn.commit()


def drop_slot_when_idle(case, slot, timeout=30):
    """Drop Debezium's slot once its walsender is gone: a logical slot left in
    the database would keep the case's DROP DATABASE from working."""
    procs.wait_until(lambda: not case.pg.slot_active(slot), timeout, interval=0.1,
                     what="slot %s released" % slot)
    case.pg.drop_slot(slot)


def test_preset_publishes_what_debeziums_router_publishes(case):
    case.query(DEBEZIUM_TABLE)
    orders, customers = case.prefix + "-Order", case.prefix + "-customer"
    ids = [str(uuid.uuid4()) for _ in range(6)]
    tracing = "traceparent=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\n"
    batches = [
        [(ids[0], orders, "1", "OrderCreated",
          {"id": 1, "lineItems": [{"item": "Debezium in Action", "quantity": 2,
                                   "totalPrice": 39.98}], "customerId": 123}, None),
         (ids[1], customers, "123", "CustomerCreated",
          '{"name": "Zoë 😀", "credit": 12345678901234567890.125, "tags": [], "x": null}', tracing),
         (ids[2], orders, "1", "OrderShipped", {"id": 1, "status": "SHIPPED"}, None)],
        [(ids[3], orders, "2", "OrderCreated", {"id": 2, "note": "line\nbreak \"quoted\""}, None),
         # a NULL payload: the router sends a record with a null value
         (ids[4], orders, "1", "OrderDeleted", None, None),
         (ids[5], customers, "k\u00e9y \u2028", "CustomerRenamed", [1, "two", {"3": 3.0}], None)],
    ]
    dbz_slot = "dbz_" + case.slot
    worker = start_debezium(case, dbz_slot)
    relay = None
    try:
        relay = start_relay(case)
        conn = case.connect(autocommit=False)
        for b in batches:
            insert_events(conn, b)
        reader = case.reader(topics=["^outbox\\.event\\.%s-.*" % case.prefix.replace("-", "\\-")])

        def split(recs):
            # the relay's records carry CloudEvents headers, Debezium's do not
            ours = {r.header("ce_id"): r for r in recs if "ce_id" in r.header_names}
            theirs = {r.header("id"): r for r in recs if "ce_id" not in r.header_names}
            return ours, theirs

        def complete(recs):
            if not worker.alive:
                raise AssertionError("Debezium exited with %s:\n%s"
                                     % (worker.proc.returncode, worker.log_tail()))
            ours, theirs = split(recs)
            return set(ids) <= set(ours) and set(ids) <= set(theirs)

        t0 = time.monotonic()
        assert reader.read_until(complete, DEBEZIUM_DEADLINE_S), (
            "not every row arrived from both within %d s: relay %s, Debezium %s\n"
            "--- Debezium log\n%s\n%s" % (DEBEZIUM_DEADLINE_S, sorted(split(reader.records)[0]),
                                         sorted(split(reader.records)[1]), worker.log_tail(),
                                         case.logs()))
        case.metric("debezium_first_delivery_s", "%.1f" % (time.monotonic() - t0), "s")
        ours, theirs = split(reader.records)
        assert len(reader.records) == 2 * len(ids), [(r.topic, r.headers) for r in reader.records]
        events = {e[0]: e for b in batches for e in b}
        for i in ids:
            mine, ref = ours[i], theirs[i]
            want = (ref.topic, ref.key, ref.value, ref.header("id"), ref.partition)
            got = (mine.topic, mine.key, mine.value, mine.header("id"), mine.partition)
            assert got == want, (i, got, want)
            e = events[i]
            assert ref.topic == "outbox.event." + e[1]
            assert ref.key_text == e[2]
            # the payload's text as PostgreSQL prints the jsonb: numbers keep every digit
            assert ref.value_text == case.scalar("SELECT payload::text FROM outboxevent "
                                                 "WHERE id = %s", (i,))
            # Debezium's record: the router's "id" header and nothing else (no "type", no
            # tracing headers without OpenTelemetry on its classpath), besides the
            # connector's own context headers (extended.headers.enabled, default true)
            assert [n for n in ref.header_names if not n.startswith(CONTEXT)] == ["id"], ref.headers
            assert {n for n in ref.header_names if n.startswith(CONTEXT)} <= CONTEXT_HEADERS, \
                ref.headers
            # the relay's: its CloudEvents headers, then the router's "id"
            assert mine.header_names[-1] == "id" and mine.header("ce_id") == i, mine.headers
            assert mine.header("ce_type") == e[3]
        # the same order per partition: commit order per aggregate
        for topic, part in {(r.topic, r.partition) for r in reader.records}:
            seq = sorted((r for r in reader.records if (r.topic, r.partition) == (topic, part)),
                         key=lambda r: r.offset)
            assert ([r.header("ce_id") for r in seq if "ce_id" in r.header_names] ==
                    [r.header("id") for r in seq if "ce_id" not in r.header_names]), (topic, part)
        assert relay.alive, relay.log
        assert relay.stop() == 0, relay.log
    finally:
        worker.stop()
        drop_slot_when_idle(case, dbz_slot)


def test_check_and_start_name_the_presets_missing_columns(case):
    """A table without the preset's columns: `check` fails naming them and
    the options to change, the relay refuses to start (exit 3)."""
    case.query("CREATE TABLE outboxevent (id uuid PRIMARY KEY, aggregateid text NOT NULL, "
               "payload jsonb)")
    args = ["-d", case.dsn, "-S", case.slot, "-b", case.kafka.bootstrap, "--preset", "debezium",
            "-t", "public.outboxevent"]
    code, out = run_relay(["check"] + args + ["--column-header", "tenant"])
    assert code == 3, out
    lines = {ln.split(":", 1)[0]: ln for ln in out.splitlines()}
    table = lines.get('FAIL  table "public"."outboxevent"', "")
    assert 'no column "aggregatetype" (needed by --topic)' in table, out
    hdrs = lines.get('FAIL  header columns of "public"."outboxevent"', "")
    assert 'no column "tenant" (header "tenant")' in hdrs, out
    assert 'ADD COLUMN "tenant" text' in hdrs, out
    assert '"id" (header "id")' not in hdrs, out   # the preset's "id" column is there

    code, out = run_relay(args + ["--create-slot"])
    assert code == EXIT_ENV, out
    assert 'no column "aggregatetype" (needed by --topic)' in out, out
    assert case.pg.slot(case.slot) is None

    case.query("ALTER TABLE outboxevent ADD COLUMN aggregatetype text, ADD COLUMN type text")
    code, out = run_relay(["check"] + args + ["--column-header", "tenant"])
    assert code == 3, out
    assert ('PASS  table "public"."outboxevent": columns "id" (ID), "aggregateid" (key), '
            '"payload" (payload), "type" (type) and the topic template\'s present') in out, out
    code, out = run_relay(args + ["--create-slot", "--column-header", "tenant"])
    assert code == EXIT_ENV, out
    assert 'no column "tenant" (header "tenant"), needed by --column-header' in out, out
    assert case.pg.slot(case.slot) is None
    code, out = run_relay(["check"] + args)
    assert 'PASS  header columns of "public"."outboxevent": "id" (header "id") present' in out, out
    # the guide's way to switch from Debezium starts with creating the slot with the same options
    code, out = run_relay(["slot", "create"] + args)
    assert code == 0, out
    assert case.pg.slot(case.slot)["plugin"] == "wal2json"


def test_bytea_payload_fails_check_and_start(case):
    """Debezium's table with a bytea payload (its way to carry Avro or
    Protobuf bytes): wal2json sends bytea as \\x hex text, never JSON, so the
    first row would stop the relay (exit 4). `check` FAILs naming the type
    and the fix, the relay refuses to start (exit 3) and creates no slot; a
    domain over bytea is the same; a text payload passes."""
    case.query(DEBEZIUM_TABLE.replace("payload jsonb", "payload bytea"))
    args = ["-d", case.dsn, "-S", case.slot, "-b", case.kafka.bootstrap, "--preset", "debezium",
            "-t", "public.outboxevent"]
    code, out = run_relay(["check"] + args)
    assert code == 3, out
    lines = {ln.split(":", 1)[0]: ln for ln in out.splitlines()}
    table = lines.get('FAIL  table "public"."outboxevent"', "")
    assert 'the payload column "payload" of "public"."outboxevent" is of type bytea' in table, out
    assert ('ALTER TABLE "public"."outboxevent" ALTER COLUMN "payload" TYPE jsonb '
            'USING convert_from("payload", \'UTF8\')::jsonb') in table, out
    assert "Avro or Protobuf" in table and "DEBEZIUM OUTBOX LAYOUT" in table, out

    code, out = run_relay(args + ["--create-slot"])
    assert code == EXIT_ENV, out
    assert "is of type bytea" in out, out
    assert case.pg.slot(case.slot) is None

    case.query("CREATE DOMAIN avro_bytes AS bytea; "
               "ALTER TABLE outboxevent ALTER COLUMN payload TYPE avro_bytes")
    code, out = run_relay(["check"] + args)
    assert code == 3 and "is of type avro_bytes" in out and "Avro or Protobuf" in out, out
    case.query("ALTER TABLE outboxevent ALTER COLUMN payload TYPE uuid USING NULL")
    code, out = run_relay(["check"] + args)
    assert code == 3 and "is of type uuid, whose text is not a JSON document" in out, out
    assert 'TYPE jsonb USING to_jsonb("payload")' in out, out

    case.query("ALTER TABLE outboxevent ALTER COLUMN payload TYPE text")
    code, out = run_relay(["check"] + args)
    assert 'PASS  table "public"."outboxevent"' in out, out


def guide_cut_over_command():
    """Step 1 of outbox-relay(7)'s "Switching from Debezium", as written: its
    arguments after `outbox-relay`."""
    text = docs.unescape(docs.section("outbox-relay.7", "DEBEZIUM OUTBOX LAYOUT"))
    blocks = [b for b in re.findall(r"```\n(.*?)```", text, re.S) if "--after-slot" in b]
    assert len(blocks) == 1, blocks
    return shlex.split(blocks[0].replace("\\\n", " "))[1:]


def test_cut_over_steps_as_written(case):
    """The guide's migration steps, with a held-back logical slot standing in
    for Debezium's (its connector confirms late, like this one) and an
    outbox emptied by insert-then-delete: step 1 waits while the old slot is
    behind, says when it may stop once it has caught up, and the relay
    started as step 3 says publishes what is committed after."""
    case.query(DEBEZIUM_TABLE)
    old = case.slot + "_dbz"
    case.query("SELECT pg_create_logical_replication_slot(%s, 'test_decoding')", (old,))
    try:
        # Debezium's habit: the row is deleted as soon as it is written
        case.query("INSERT INTO outboxevent (id, aggregatetype, aggregateid, type, payload) VALUES "
                   "(gen_random_uuid(), 'order', 'o-1', 'order_received', '{}'); "
                   "DELETE FROM outboxevent")
        argv = guide_cut_over_command()
        assert argv[:2] == ["slot", "create"] and "--after-slot=debezium" in argv, argv
        ours = {"-d": case.dsn, "-b": case.kafka.bootstrap}
        args = [ours.get(prev, a) if prev in ours else a for prev, a in zip([""] + argv, argv)]
        args = [a.replace("--after-slot=debezium", "--after-slot=" + old) for a in args]
        args += ["-S", case.slot, "--topic", case.prefix + ".${aggregatetype}"]
        result = {}
        step1 = threading.Thread(target=lambda: result.update(
            zip(("rc", "out"), run_relay(args, timeout=120))))
        step1.start()
        procs.wait_until(lambda: case.pg.slot(case.slot), 30, what="the relay's slot")
        assert step1.is_alive(), result   # waiting for "Debezium"
        # "Debezium" catches up
        case.query("SELECT pg_replication_slot_advance(%s, pg_current_wal_lsn())", (old,))
        step1.join(120)
        assert result["rc"] == 0 and "Stop the old consumer now" in result["out"], result
        # step 2 stops Debezium (nothing to do here); step 3: the relay, same options
        reader = case.reader([case.prefix + ".order"])
        start = [a for prev, a in zip([""] + argv[2:], argv[2:])
                 if a not in ours and prev not in ours and not a.startswith("--after-slot")]
        assert start == ["--preset=debezium", "-t", "public.outboxevent"], start
        relay = case.relay(*start, "--topic", case.prefix + ".${aggregatetype}", create_slot=False)
        case.query("INSERT INTO outboxevent (id, aggregatetype, aggregateid, type, payload) VALUES "
                   "(gen_random_uuid(), 'order', 'o-2', 'order_received', '{}'); "
                   "DELETE FROM outboxevent")
        assert reader.read_until(lambda recs: any(r.key_text == "o-2" for r in recs), 30), \
            case.logs()
        assert relay.stop() == 0, relay.log
        assert [r.key_text for r in reader.records] == ["o-2"]
    finally:
        case.pg.drop_slot(old)   # step 4


def test_cut_over_from_a_running_debezium_loses_no_row(case):
    """The cut-over with the real thing, the application writing the whole
    time (and deleting each row as it writes it, Debezium's habit): slot
    create --after-slot waits until Debezium's slot has confirmed past the
    relay's consistent point, Debezium is stopped only then, the relay
    started after it. Every row written reaches Kafka from one or the
    other (some from both: consumers deduplicate on id)."""
    case.query(DEBEZIUM_TABLE)
    kind = case.prefix + "-Order"
    dbz_slot = "dbz_" + case.slot
    worker = start_debezium(case, dbz_slot)
    reader = case.reader(topics=["^outbox\\.event\\.%s" % kind.replace("-", "\\-")])
    written, stop = [], threading.Event()

    def write():
        conn = case.connect(autocommit=True)
        cur = conn.cursor()
        while not stop.is_set():
            i = str(uuid.uuid4())
            cur.execute("BEGIN; INSERT INTO outboxevent (id, aggregatetype, aggregateid, type, "
                        "payload) VALUES (%s, %s, 'order-1', 'OrderCreated', '{}'); DELETE FROM "
                        "outboxevent WHERE id = %s; COMMIT", (i, kind, i))
            written.append(i)
            stop.wait(0.02)

    writer = threading.Thread(target=write)
    writer.start()
    relay = None
    try:
        # Debezium streams
        assert reader.read_until(lambda recs: bool(recs) or not worker.alive, DEBEZIUM_DEADLINE_S), \
            worker.log_tail()
        assert worker.alive, worker.log_tail()
        t0 = time.monotonic()
        rc, out = run_relay(["slot", "create", "-d", case.dsn, "-S", case.slot, "-b",
                             case.kafka.bootstrap, "--preset", "debezium", "-t",
                             "public.outboxevent", "--after-slot=" + dbz_slot,
                             "--after-slot-timeout=60"], timeout=90)
        waited = time.monotonic() - t0
        assert rc == 0 and "Stop the old consumer now" in out, (out, worker.log_tail())
        worker.stop()
        relay = start_relay(case)
        n = len(written)
        procs.wait_until(lambda: len(written) >= n + 20, 30, what="rows after the relay's start")
        stop.set()
        writer.join(10)
        assert reader.read_until(lambda recs: set(written) <= {
            r.header("id") for r in recs}, 60), (
            "rows published by neither: %s\n%s" % (
                sorted(set(written) - {r.header("id") for r in reader.records})[:10], case.logs()))
        case.metric("debezium_cut_over_wait_s", "%.1f" % waited, "s")
        assert relay.stop() == 0, relay.log
    finally:
        stop.set()
        writer.join(10)
        if worker.alive:
            worker.stop()
        drop_slot_when_idle(case, dbz_slot)
