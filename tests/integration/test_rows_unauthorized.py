# SPDX-License-Identifier: Apache-2.0
"""A topic the relay may not write to: Kafka's TOPIC_AUTHORIZATION_FAILED is
a row error like any other unpublishable row (outbox-relay(7), "Rows that cannot be
published"), never a reason to retry forever, to confirm past the row or to
lose it.

The suite's shared broker has no authentication, so these tests start a
second broker of their own (harness SaslKafkaBroker, once for this module):
SASL/PLAIN on its client listener, KRaft's StandardAuthorizer with
allow.everyone.if.no.acl.found=false, no automatic topic creation. The
super user "admin" creates each test's topics and grants the relay's user
"relay" WRITE and DESCRIBE on the allowed topic (and on the dead-letter
topic where the case wants one), nothing on the forbidden topic; the relay
logs in as "relay" with -X sasl.* options, the test reads back as "admin".

Without DESCRIBE on the forbidden topic the broker answers the relay's
metadata request for it with TOPIC_AUTHORIZATION_FAILED, and librdkafka
2.0.2 fails the queued message with that error in its delivery report.
"""

import os
import re
import shutil
import time

import pytest
from harness import (CE_HEADERS, EXIT_ENV, EXIT_OK, EXIT_UNPUBLISHABLE, SaslKafkaBroker, TopicReader,
                     by_id, error_lines, format_lsn, free_port, has_ids, insert_rows, log_lines,
                     make_tempdir, parse_lsn, read_while_alive, relay_librdkafka, simple_rows,
                     wait_confirmed, wait_until)
from harness.http import wait_metric
from rows_helpers import (REMEDY_DLQ, REMEDY_SKIP, assert_not_confirmed_past, stops_unpublishable,
                          wait_exit)

USERS = {"admin": "admin-secret", "relay": "relay-secret"}
CHECKPOINTS = "outbox-relay.checkpoints"
OUTBOX = '"public"."outbox"'


@pytest.fixture(scope="module")
def sasl_kafka():
    """The SASL broker with ACLs, for this module only."""
    base = make_tempdir(prefix="outbox-relay-sasl-")
    b = SaslKafkaBroker(base, USERS, heap="256m", quick_start=True)
    try:
        b.start(timeout=240)
        # the relay's checkpoint topic, made by an operator: the relay may not create topics here
        b.create_topic(CHECKPOINTS, partitions=1, config={"cleanup.policy": "compact"})
        b.grant("relay", [CHECKPOINTS], ("WRITE", "READ", "DESCRIBE"))
        yield b
    finally:
        b.stop()
        if not os.environ.get("OUTBOX_RELAY_KEEP_TMP"):
            shutil.rmtree(base, ignore_errors=True)


def setup_topics(case, broker, granted, denied, describe_denied=False):
    """Create the topics of kinds granted + denied as admin (one partition
    each) and allow the relay WRITE and DESCRIBE on the granted ones only
    (and, if describe_denied, DESCRIBE alone on the denied ones). Returns
    {kind: topic}."""
    topics = {k: case.topic(k) for k in list(granted) + list(denied)}
    for t in topics.values():
        broker.create_topic(t, partitions=1)
    broker.grant("relay", [topics[k] for k in granted], ("WRITE", "DESCRIBE"))
    if describe_denied:
        broker.grant("relay", [topics[k] for k in denied], ("DESCRIBE",))
    return topics


def reader_for(case, broker, topics):
    """A reader of topics logged in as admin (closed with the case)."""
    cfg = broker.client_config()
    rd = TopicReader(cfg.pop("bootstrap.servers"), list(topics), **cfg)
    case.readers.append(rd)
    return rd


def committed_reader_for(case, broker, topics):
    """A read_committed reader of topics logged in as admin (closed with the case)."""
    cfg = broker.client_config()
    rd = TopicReader(cfg.pop("bootstrap.servers"), list(topics),
                     **{"isolation.level": "read_committed"}, **cfg)
    case.readers.append(rd)
    return rd


def grant_transactional_id(case, broker):
    """The case's transactional.id, granted (WRITE, DESCRIBE) to the relay's
    principal; "<id>.1" is not, so the relay runs with one producer."""
    tid = "outbox-relay-test." + case.dbname
    broker.grant("relay", ["transactional-id:" + tid], ("WRITE", "DESCRIBE"))
    return tid


def start_relay(case, broker, *extra, **kw):
    return case.relay(*(broker.relay_options("relay") + list(extra)),
                      brokers=broker.bootstrap, **kw)


def rows(prefix, n, kind="allowed", start=0):
    return simple_rows(prefix, n, kind=kind, start=start)


def check_auth_error(line, commit, work_id, topic):
    """The stop line names the work ID, the table, the transaction's end LSN
    (inside the commit's WAL window), the reason, the fix (WRITE on the
    topic) and both remedies verbatim. Returns the end LSN text."""
    problems = []
    if 'work ID "%s"' % work_id not in line:
        problems.append("work ID %r not named" % work_id)
    if OUTBOX not in line:
        problems.append("table %s not named" % OUTBOX)
    skip, dlq = REMEDY_SKIP.findall(line), REMEDY_DLQ.findall(line)
    end = skip[0] if skip else None
    if not skip or skip != dlq:
        problems.append("remedies --skip-transaction=LSN and --dead-letter-transaction=LSN "
                        "not both given with one LSN")
    elif not commit.lsn_before < parse_lsn(end) <= commit.lsn_after:
        problems.append("remedy LSN %s is not the end of the transaction (%s, %s]"
                        % (end, format_lsn(commit.lsn_before), format_lsn(commit.lsn_after)))
    elif "ending at LSN %s" % end not in line:
        problems.append("the transaction's end LSN is not named as such")
    if not re.search(r"[Aa]uthorization failed", line):
        problems.append("the reason (topic authorization failed) is missing")
    if '"%s"' % topic not in line:
        problems.append("the topic %s is not named" % topic)
    if not re.search(r"\bWRITE\b", line):
        problems.append("the fix (grant WRITE on the topic to the relay's principal) is missing")
    assert not problems, "; ".join(problems) + ":\n" + line
    return end


@pytest.mark.parametrize("acl", ["none", "describe"])
def test_unauthorized_topic_stops(case, sasl_kafka, acl):
    """--on-error=stop (default): exit 4 with the row named and the fix
    given; earlier transactions are confirmed, this one never; a restart
    stops on the same row; nothing reaches the forbidden topic. With no
    ACL at all the metadata request is refused; with DESCRIBE alone the
    produce request is."""
    topics = setup_topics(case, sasl_kafka, ["allowed"], ["forbidden"],
                          describe_denied=acl == "describe")
    reader = reader_for(case, sasl_kafka, topics.values())
    relay = start_relay(case, sasl_kafka)
    conn = case.connect(autocommit=False)
    first = insert_rows(conn, rows("first", 2))
    assert reader.read_until(has_ids(first.work_ids), 60), case.logs()
    first_end = max(parse_lsn(r.header("ce_pglsn")) for r in reader.records)
    wait_confirmed(case, first_end)

    bad = insert_rows(conn, rows("same-txn", 1) + [
        {"work_id": "denied-1", "kind": "forbidden", "payload": {"n": 1}}]
        + rows("same-txn", 1, start=1))
    insert_rows(conn, rows("later", 2))
    t0 = time.monotonic()
    line = stops_unpublishable(relay, timeout=120)
    case.metric("auth_stop_seconds", "%.1f" % (time.monotonic() - t0), "s")
    end = check_auth_error(line, bad, "denied-1", topics["forbidden"])
    assert_not_confirmed_past(case, bad)
    assert case.confirmed() >= first_end, "the earlier transaction was not confirmed"

    relay2 = start_relay(case, sasl_kafka, create_slot=False, ready=False)
    line2 = stops_unpublishable(relay2, timeout=120)
    assert line2 == line, "second start reported differently:\n%s\n%s" % (line, line2)
    assert_not_confirmed_past(case, bad)
    assert end in line2

    assert reader.drain(timeout=30), case.logs()
    published = by_id(reader.records)
    assert set(first.work_ids) <= set(published), "earlier transaction lost"
    assert "denied-1" not in published, "the row reached Kafka: %r" % published["denied-1"]
    assert not [r for r in reader.records if r.topic == topics["forbidden"]]


@pytest.mark.parametrize("log_level", [None, "2"], ids=["logged", "log_level_2"])
@pytest.mark.exactly_once
def test_unauthorized_topic_exactly_once(case, sasl_kafka, log_level):
    """--exactly-once, and the relay may DESCRIBE the forbidden topic but not
    WRITE to it: the transaction coordinator refuses the topic's partition to
    the Kafka transaction (AddPartitionsToTxn), which librdkafka reports only
    by failing the transaction and purging its records. The relay aborts,
    streams again with each topic's first record in a Kafka transaction of
    its own, finds the refused row that way and stops with exit 4 naming the
    row and the fix, as without --exactly-once, instead of retrying forever;
    a read_committed reader sees the earlier transaction once and nothing
    from the refused row on; nothing of its transaction is confirmed. The
    relay once recognized the refused topic from librdkafka's log line
    alone: with -X log_level=2 (no such line) it aborted, streamed again
    and stopped with exit 3 on the abort's INVALID_TXN_STATE, never naming
    the row."""
    topics = setup_topics(case, sasl_kafka, ["allowed"], ["forbidden"], describe_denied=True)
    tid = grant_transactional_id(case, sasl_kafka)
    reader = committed_reader_for(case, sasl_kafka, topics.values())
    extra = ["-X", "log_level=" + log_level] if log_level else []
    relay = start_relay(case, sasl_kafka, "--exactly-once", "--transactional-id=" + tid, *extra)
    conn = case.connect(autocommit=False)
    first = insert_rows(conn, rows("first", 2))
    assert reader.read_until(has_ids(first.work_ids), 60), case.logs()
    # The grant is the id alone, not "<id>.1": the relay passes over fencing it, and where
    # --kafka-transactional-producers=auto would take the pair it goes on with one, saying so.
    refused = 'the broker refuses transactional.id "%s.1" to the relay' % tid
    assert (refused in relay.log) == (relay_librdkafka() >= (2, 4, 0)), relay.log
    assert 'Kafka transactions as "%s" (librdkafka' % tid in relay.log, relay.log
    assert 'fenced (the broker refuses "%s.1" to the relay' % tid in relay.log, relay.log
    assert "commit interval 20 ms" in relay.log, relay.log

    bad = insert_rows(conn, rows("same-txn", 1) + [
        {"work_id": "denied-1", "kind": "forbidden", "payload": {"n": 1}}]
        + rows("same-txn", 1, start=1))
    insert_rows(conn, rows("later", 2))
    rc = wait_exit(relay, 120)
    assert rc == EXIT_UNPUBLISHABLE, "exit %s, expected 4\n%s" % (rc, relay.log)
    line = error_lines(relay.log)[-1]
    check_auth_error(line, bad, "denied-1", topics["forbidden"])
    assert_not_confirmed_past(case, bad)

    # The relay has exited: what a read_committed reader can still get is there
    # now. (drain() does not fit: transaction markers hold offsets no reader sees.)
    reader.read_until(lambda recs: len(recs) > len(first.work_ids), 10)
    published = by_id(reader.records)
    # the refused row's transaction may be split before the refused row (a Kafka
    # transaction of its own for each topic's first record): never from it on
    assert set(first.work_ids) <= set(published) <= set(first.work_ids) | {"same-txn-0"}, (
        "a read_committed reader saw more than what came before the refused row: %s"
        % sorted(published))
    assert all(len(v) == 1 for v in published.values()), "duplicates: %r" % published


def test_unauthorized_topic_dead_letter(case, sasl_kafka):
    """--on-error=dead-letter: the row goes to the dead-letter topic with its
    original key, value and headers plus the reason, the error code and the
    intended topic (as in test_rows_dead_letter.py); the rows around it
    and later transactions still arrive, and the slot moves past it."""
    sysid = case.pg.system_identifier()
    topics = setup_topics(case, sasl_kafka, ["allowed", "dlq"], ["forbidden"])
    dlq, forbidden = topics["dlq"], topics["forbidden"]
    reader = reader_for(case, sasl_kafka, topics.values())
    port = free_port()
    relay = start_relay(case, sasl_kafka, "--on-error=dead-letter", "--dead-letter-topic=" + dlq,
                        "--metrics-address", "127.0.0.1:%d" % port)
    conn = case.connect(autocommit=False)
    bad = insert_rows(conn, rows("same-txn", 1) + [
        {"work_id": "denied-1", "kind": "forbidden", "payload": {"n": 1, "why": "no ACL"}}]
        + rows("same-txn", 1, start=1))
    later = insert_rows(conn, rows("later", 2))
    good_ids = [w for w in bad.work_ids + later.work_ids if w != "denied-1"]

    def done(recs):
        got = by_id(recs)
        return set(good_ids) <= set(got) and any(r.topic == dlq for r in got.get("denied-1", []))
    t0 = time.monotonic()
    arrived = read_while_alive(reader, relay, done, 120)
    case.metric("auth_dead_letter_seconds", "%.1f" % (time.monotonic() - t0), "s")
    assert relay.alive, "the relay stopped under --on-error=dead-letter\n" + relay.log
    assert arrived, "missing rows or dead letter: %s\n%s" % (
        sorted(by_id(reader.records)), case.logs())
    got = by_id(reader.records)
    wait_confirmed(case, max(parse_lsn(r.header("ce_pglsn")) for r in got["later-1"]))

    problems = []
    for work_id in good_ids:
        if [r.topic for r in got[work_id]] != [topics["allowed"]]:
            problems.append("%s went to %s" % (work_id, [r.topic for r in got[work_id]]))
    dead = got["denied-1"]
    if [r.topic for r in dead] != [dlq]:
        problems.append("denied-1 went to %s, expected once to %s" % ([r.topic for r in dead], dlq))
    d = dead[0]
    value = case.scalar("SELECT payload::text FROM outbox WHERE work_id = 'denied-1'")
    if d.value != value.encode():
        problems.append("value %r, expected %r" % (d.value, value))
    if d.key != b"denied-1":
        problems.append("key %r, expected the work ID" % d.key)
    if d.header("outbox_relay_error_code") != "TOPIC_AUTHORIZATION_FAILED":
        problems.append("outbox_relay_error_code %r" % d.header("outbox_relay_error_code"))
    reason = d.header("outbox_relay_error") or ""
    if "uthorization failed" not in reason or forbidden not in reason:
        problems.append("outbox_relay_error %r does not give the reason and topic" % reason)
    if d.header("outbox_relay_topic") != forbidden:
        problems.append("outbox_relay_topic %r, expected %r" % (d.header("outbox_relay_topic"),
                                                                forbidden))
    missing = [h for h in CE_HEADERS if d.header(h) is None]
    if missing:
        problems.append("original headers missing on the dead letter: %s (has %s)"
                        % (missing, d.header_names))
    pglsn = d.header("ce_pglsn")
    if pglsn is None or not bad.lsn_before < parse_lsn(pglsn) <= bad.lsn_after:
        problems.append("ce_pglsn %r is not its transaction's end" % pglsn)
    if d.header("ce_pgxid") != str(bad.xid32):
        problems.append("ce_pgxid %r, expected %d" % (d.header("ce_pgxid"), bad.xid32))
    if d.header("ce_source") != "postgresql://%s/%s/public.outbox" % (sysid, case.dbname):
        problems.append("ce_source %r" % d.header("ce_source"))
    if len(log_lines(relay.log, 'dead-lettering work ID "denied-1"')) != 1:
        problems.append("not exactly one log line about dead-lettering it")
    samples = wait_metric(port, "outbox_relay_dead_lettered_total", lambda v: v >= 1)
    if samples["outbox_relay_dead_lettered_total"] != 1:
        problems.append("outbox_relay_dead_lettered_total is %s, expected 1"
                        % samples["outbox_relay_dead_lettered_total"])
    if samples.get("outbox_relay_row_errors_total") != 1:
        problems.append("outbox_relay_row_errors_total is %s, expected 1"
                        % samples.get("outbox_relay_row_errors_total"))

    # The topic's metadata now in error, librdkafka refuses its next record
    # at once: that row is judged as its delivery report would have been.
    insert_rows(conn, [{"work_id": "denied-3", "kind": "forbidden", "payload": {"n": 3}}])

    def dead_again(recs):
        return any(r.topic == dlq for r in by_id(recs).get("denied-3", []))
    if not read_while_alive(reader, relay, dead_again, 60):
        problems.append("denied-3 was not dead-lettered:\n" + relay.log)
    else:
        again = [r for r in by_id(reader.records)["denied-3"] if r.topic == dlq][0]
        for name in ("outbox_relay_error", "outbox_relay_error_code", "outbox_relay_topic"):
            if again.header(name) != d.header(name):
                problems.append("%s of a record refused at once: %r, in its report: %r"
                                % (name, again.header(name), d.header(name)))
    assert relay.stop() == EXIT_OK, relay.log
    assert not problems, "\n".join(problems) + "\n" + relay.log


@pytest.mark.exactly_once
def test_unauthorized_topic_dead_letter_exactly_once(case, sasl_kafka):
    """--exactly-once --on-error=dead-letter, and a topic the relay may not
    even DESCRIBE. A row's record for it fails in its delivery report: the
    Kafka transaction is aborted, streamed again, and the row dead-lettered
    with the reason, the error code and the intended topic. Two such rows,
    in transactions apart, each in a session of its own: same headers; the
    row after each arrives once for a read_committed reader."""
    topics = setup_topics(case, sasl_kafka, ["allowed", "dlq"], ["forbidden"])
    dlq = topics["dlq"]
    tid = grant_transactional_id(case, sasl_kafka)
    reader = committed_reader_for(case, sasl_kafka, topics.values())
    relay = start_relay(case, sasl_kafka, "--exactly-once", "--transactional-id=" + tid,
                        "--on-error=dead-letter", "--dead-letter-topic=" + dlq)
    conn = case.connect(autocommit=False)
    dead = {}
    for n in (1, 3):
        work_id = "denied-%d" % n
        insert_rows(conn, [{"work_id": work_id, "kind": "forbidden", "payload": {"n": n}}]
                    + rows("after-%d" % n, 1))

        def arrived(recs, work_id=work_id, n=n):
            got = by_id(recs)
            return ("after-%d-0" % n) in got and any(r.topic == dlq for r in got.get(work_id, []))
        assert read_while_alive(reader, relay, arrived, 90), \
            "%s was not dead-lettered: %s\n%s" % (work_id, sorted(by_id(reader.records)), relay.log)
        dead[work_id] = [r for r in by_id(reader.records)[work_id] if r.topic == dlq]
    got = by_id(reader.records)
    assert all(len(v) == 1 for v in got.values()), "duplicates: %r" % got
    first, again = dead["denied-1"][0], dead["denied-3"][0]
    assert first.header("outbox_relay_error_code") == "TOPIC_AUTHORIZATION_FAILED", first.header_names
    for name in ("outbox_relay_error", "outbox_relay_error_code", "outbox_relay_topic"):
        assert again.header(name) == first.header(name), \
            "%s of the later row: %r, of the first: %r\n%s" % (name, again.header(name),
                                                                 first.header(name), relay.log)
    assert relay.stop() == EXIT_OK, relay.log


def test_unauthorized_dead_letter_topic_stops(case, sasl_kafka):
    """--on-error=dead-letter, but the relay may not write to the dead-letter
    topic either: exit 4 naming the row, the dead-letter topic and the fix;
    nothing of the transaction is confirmed; a restart stops again."""
    topics = setup_topics(case, sasl_kafka, ["allowed"], ["forbidden", "dlq"])
    dlq = topics["dlq"]
    reader = reader_for(case, sasl_kafka, topics.values())
    extra = ("--on-error=dead-letter", "--dead-letter-topic=" + dlq)
    relay = start_relay(case, sasl_kafka, *extra)
    conn = case.connect(autocommit=False)
    first = insert_rows(conn, rows("first", 1))
    assert reader.read_until(has_ids(first.work_ids), 60), case.logs()
    first_end = parse_lsn(reader.records[0].header("ce_pglsn"))
    wait_confirmed(case, first_end)

    bad = insert_rows(conn, [{"work_id": "denied-2", "kind": "forbidden", "payload": {"n": 2}}])
    insert_rows(conn, rows("later", 1))
    line = stops_unpublishable(relay, timeout=120)
    assert 'work ID "denied-2"' in line and '"%s"' % dlq in line and "dead-letter" in line, line
    assert re.search(r"[Aa]uthorization failed", line), line
    assert re.search(r"\bWRITE\b", line), "the fix (WRITE on the dead-letter topic) is missing:\n" \
        + line
    end = REMEDY_SKIP.findall(line)
    assert len(end) == 1 and bad.lsn_before < parse_lsn(end[0]) <= bad.lsn_after, \
        "the error should offer --skip-transaction with the transaction's end LSN:\n" + line
    assert_not_confirmed_past(case, bad)
    assert case.confirmed() >= first_end

    relay2 = start_relay(case, sasl_kafka, *extra, create_slot=False, ready=False)
    line2 = stops_unpublishable(relay2, timeout=120)
    assert line2 == line, "second start reported differently:\n%s\n%s" % (line, line2)
    assert_not_confirmed_past(case, bad)
    assert reader.drain(timeout=30), case.logs()
    assert "denied-2" not in by_id(reader.records), "the row went somewhere after all"


@pytest.mark.exactly_once
def test_checkpoint_topic_refused_while_running_exactly_once(case, sasl_kafka):
    """--exactly-once, and the relay loses WRITE on its checkpoint topic while
    it runs (the start-up check passed). Every Kafka transaction then fails:
    the coordinator refuses the checkpoint partition (AddPartitionsToTxn,
    TOPIC_AUTHORIZATION_FAILED), which librdkafka reports only by failing the
    transaction. The relay once took that for the refusal of the row's topic
    in the probe transaction that followed (the row alone, then the
    checkpoint record at commit) and stopped with exit 4 blaming a row that
    Kafka would have taken, whose remedy skips it or sends it to the
    dead-letter topic. It must stop with exit 3 naming the checkpoint topic
    and the fix, confirm nothing past the last committed checkpoint, and
    blame no row."""
    topics = setup_topics(case, sasl_kafka, ["allowed"], [])
    checkpoints = case.topic("checkpoints")
    sasl_kafka.create_topic(checkpoints, partitions=1, config={"cleanup.policy": "compact"})
    sasl_kafka.grant("relay", [checkpoints], ("WRITE", "READ", "DESCRIBE"))
    tid = grant_transactional_id(case, sasl_kafka)
    reader = committed_reader_for(case, sasl_kafka, topics.values())
    relay = start_relay(case, sasl_kafka, "--exactly-once", "--transactional-id=" + tid,
                        "--checkpoint-topic=" + checkpoints)
    conn = case.connect(autocommit=False)
    first = insert_rows(conn, rows("first", 2))
    assert reader.read_until(has_ids(first.work_ids), 60), case.logs()

    sasl_kafka.deny("relay", [checkpoints], ("WRITE",))
    wait_write_refused(sasl_kafka, checkpoints)
    later = insert_rows(conn, rows("later", 2))
    rc = wait_exit(relay, 120)
    assert rc == EXIT_ENV, "exit %s, expected 3\n%s" % (rc, relay.log)
    line = error_lines(relay.log)[-1]
    assert '"%s"' % checkpoints in line and "checkpoint topic" in line, line
    assert re.search(r"[Aa]uthorization failed", line) and re.search(r"\bWRITE\b", line), line
    blamed = [ln for ln in error_lines(relay.log) if "work ID" in ln or "--skip-transaction" in ln]
    assert not blamed, "a row was blamed for the checkpoint topic's refusal:\n" + "\n".join(blamed)
    assert_not_confirmed_past(case, later)
    # The relay has exited: whatever a read_committed reader could get is there now.
    reader.read_until(lambda recs: len(recs) > len(first.work_ids), 3)
    published = by_id(reader.records)
    assert set(published) == set(first.work_ids), "a read_committed reader saw %s" % sorted(published)


def wait_write_refused(broker, topic, timeout=60):
    """Until the brokers enforce a DENY on WRITE to topic: a record produced
    as the relay's user fails with TOPIC_AUTHORIZATION_FAILED (a tombstone
    under a key no relay uses, should it still be written)."""
    from confluent_kafka import KafkaError, Producer
    p = Producer(dict(broker.client_config("relay"), **{"message.timeout.ms": 5000}))

    def refused():
        got = []
        p.produce(topic, key=b"deny-check", value=None, on_delivery=lambda err, msg: got.append(err))
        p.flush(10)
        return bool(got) and got[0] is not None and got[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    wait_until(refused, timeout, interval=0.5, what="the brokers to refuse WRITE on %s" % topic)


@pytest.mark.exactly_once
def test_checkpoint_topic_unreadable_at_reconnect_exactly_once(case, sasl_kafka):
    """--exactly-once, and the relay loses READ on its checkpoint topic while
    it runs. Nothing reads the topic while streaming, so nothing changes
    until the replication connection drops; the session after it must read
    the newest checkpoint before it streams (a resume point from before the
    drop is stale) and cannot. It retried that read for ever, every few
    seconds, never saying what to fix. It must stop with exit 3 naming the
    checkpoint topic and the fix (READ), not stream on the old resume
    point."""
    unreadable_at_reconnect(case, sasl_kafka, exactly_once=True)


def test_checkpoint_topic_unreadable_at_reconnect(case, sasl_kafka):
    """The same at least once: the relay streamed on after the reconnect,
    confirming nothing until the checkpoint could be read, so the slot held
    WAL for ever with a warning at each start. It must stop with exit 3
    naming the checkpoint topic and the fix (READ)."""
    unreadable_at_reconnect(case, sasl_kafka, exactly_once=False)


def unreadable_at_reconnect(case, sasl_kafka, exactly_once):
    topics = setup_topics(case, sasl_kafka, ["allowed"], [])
    checkpoints = case.topic("checkpoints")
    sasl_kafka.create_topic(checkpoints, partitions=1, config={"cleanup.policy": "compact"})
    sasl_kafka.grant("relay", [checkpoints], ("WRITE", "READ", "DESCRIBE"))
    extra = ["--checkpoint-topic=" + checkpoints]
    if exactly_once:
        tid = grant_transactional_id(case, sasl_kafka)
        extra += ["--exactly-once", "--transactional-id=" + tid]
    reader = committed_reader_for(case, sasl_kafka, topics.values())
    relay = start_relay(case, sasl_kafka, *extra)
    conn = case.connect(autocommit=False)
    first = insert_rows(conn, rows("first", 2))
    assert reader.read_until(has_ids(first.work_ids), 60), case.logs()

    sasl_kafka.deny("relay", [checkpoints], ("READ",))
    wait_read_refused(sasl_kafka, checkpoints)
    case.pg.query("SELECT pg_terminate_backend(%s)", (case.slot_info()["active_pid"],))
    rc = wait_exit(relay, 120)
    assert rc == EXIT_ENV, "exit %s, expected 3\n%s" % (rc, relay.log)
    line = error_lines(relay.log)[-1]
    assert '"%s"' % checkpoints in line and "checkpoint" in line, line
    assert re.search(r"\bREAD\b", line), "the fix (grant READ on the topic) is missing:\n" + line
    streams = relay.log.count("streaming from slot")
    assert streams == 1, "the relay streamed again without reading its checkpoint:\n%s" % relay.log


def wait_read_refused(broker, topic, timeout=60):
    """Until the brokers enforce a DENY on READ of topic: a consumer logged
    in as the relay's user, fetching partition 0 from the start, gets
    TOPIC_AUTHORIZATION_FAILED (records fetched before that are passed
    over)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
    c = Consumer(dict(broker.client_config("relay"), **{"group.id": "deny-check",
                                                       "enable.auto.commit": False}))
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])

    def refused():
        m = c.poll(1)
        return m is not None and m.error() is not None and \
            m.error().code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    try:
        wait_until(refused, timeout, interval=0.2, what="the brokers to refuse READ of %s" % topic)
    finally:
        c.close()
