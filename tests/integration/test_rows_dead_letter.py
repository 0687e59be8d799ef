# SPDX-License-Identifier: Apache-2.0
"""--on-error=dead-letter: every unpublishable row goes to the dead-letter
topic with its original key, value and headers plus outbox_relay_error,
outbox_relay_error_code and outbox_relay_topic; the rows around it (same
transaction and later ones) still arrive where they belong, the slot moves
on, and the count shows in /metrics. When the dead-letter publish itself
fails the relay stops with exit 4 and confirms nothing of that transaction.

Topics are created up front and the relay runs with
-X allow.auto.create.topics=false and a 1 s topic.metadata.propagation.max.ms,
so that a row for a missing topic is refused quickly (see
test_rows_unpublishable.py) and a typo cannot create the dead-letter topic.
"""

import json

import pytest
from harness import (CE_HEADERS, EXIT_OK, by_id, free_port, has_ids, insert_rows, log_lines,
                     parse_lsn, read_while_alive, wait_confirmed)
from harness.http import wait_metric
from rows_helpers import LSN_TEXT, assert_not_confirmed_past, stops_unpublishable

NO_AUTO_CREATE = ("-X", "allow.auto.create.topics=false",
                  "-X", "topic.metadata.propagation.max.ms=1000")


def row(work_id, kind="order_received", body='{"ok": true}', key="auto", payload="{}"):
    return {"work_id": work_id, "kind": kind, "payload": payload, "body": body,
            "entity_id": ("entity-" + work_id) if key == "auto" else key}


def test_dead_letter_policy(case):
    case.query("ALTER TABLE outbox ADD COLUMN body text")
    sysid = case.pg.system_identifier()
    ok_topic, small, dlq = case.topic("order_received"), case.topic("small"), case.topic("dlq")
    case.kafka.create_topic(ok_topic, partitions=3)
    case.kafka.create_topic(dlq, partitions=1)
    # one partition: the big row and the good rows after it share a batch
    case.kafka.create_topic(small, partitions=1, config={"max.message.bytes": "2000"})
    port = free_port()
    reader = case.reader()
    relay = case.relay("--on-error=dead-letter", "--dead-letter-topic=" + dlq,
                       "--payload-column", "body", "--key-column", "entity_id",
                       "--metrics-address", "127.0.0.1:%d" % port, *NO_AUTO_CREATE)
    conn = case.connect(autocommit=False)
    # work ID -> (error codes accepted, intended topic, the row)
    bad = {}

    def bad_row(r, codes, topic):
        bad[r["work_id"]] = (codes, topic, r)
        return r

    txns = [
        [row("a-0"), bad_row(row("null-payload", body=None), {"NULL_VALUE"}, ok_topic),
         row("a-1")],
        [bad_row(row("not-json", body="{'single': 'quotes'}"), {"INVALID_JSON"}, ok_topic),
         bad_row(row("null-key", key=None), {"NULL_VALUE"}, ok_topic),
         bad_row(row("empty-key", key=""), {"NULL_VALUE", "EMPTY_VALUE"}, ok_topic),
         row("b-0")],
        [bad_row(row("bad-topic", kind="no spaces"), {"INVALID_TOPIC"},
                 case.topic("no spaces")),
         row("c-0")],
        [bad_row(row("too-big", kind="small", body=json.dumps({"x": "y" * 5000})),
                 {"MSG_SIZE_TOO_LARGE"}, small),
         row("small-ok-0", kind="small"), row("small-ok-1", kind="small")],
        [bad_row(row("no-topic", kind="missing"),
                 {"UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_TOPIC", "UNKNOWN_TOPIC"},
                 case.topic("missing"))],
        [row("z-0"), row("z-1")],
    ]
    commits = [insert_rows(conn, t) for t in txns]
    good_ids = [r["work_id"] for t in txns for r in t if r["work_id"] not in bad]

    def done(recs):
        got = by_id(recs)
        return set(good_ids) <= set(got) and \
            set(bad) <= {r.header("ce_id") for r in recs if r.topic == dlq}
    arrived = read_while_alive(reader, relay, done, 60)
    assert relay.alive, "the relay stopped under --on-error=dead-letter\n" + relay.log
    got = by_id(reader.records)
    assert arrived, "missing good rows %s, missing dead letters %s\n%s" % (
        sorted(set(good_ids) - set(got)),
        sorted(set(bad) - {r.header("ce_id") for r in reader.records if r.topic == dlq}),
        case.logs())
    wait_confirmed(case, max(parse_lsn(r.header("ce_pglsn")) for r in got["z-0"]))

    problems = []
    for work_id in good_ids:
        for rec in got[work_id]:
            if rec.topic == dlq:
                problems.append("good row %s was dead-lettered (%s: %s)" % (
                    work_id, rec.header("outbox_relay_error_code"),
                    rec.header("outbox_relay_error")))
    expected_values = dict(case.query("SELECT work_id, body FROM outbox"))
    expected_keys = dict(case.query("SELECT work_id, entity_id FROM outbox"))
    commit_of = {w: c for c in commits for w in c.work_ids}
    for work_id, (codes, topic, r) in bad.items():
        dead = [rec for rec in got.get(work_id, []) if rec.topic == dlq]
        elsewhere = [rec.topic for rec in got.get(work_id, []) if rec.topic != dlq]
        if elsewhere:
            problems.append("%s was published to %s" % (work_id, elsewhere))
        if len(dead) != 1:
            problems.append("%s: %d dead letters" % (work_id, len(dead)))
            continue
        d = dead[0]
        value = expected_values[work_id]
        key = expected_keys[work_id]
        if d.value != (None if value is None else value.encode()):
            problems.append("%s: value %r, expected %r" % (work_id, d.value, value))
        if (d.key or None) != (key.encode() if key else None):
            problems.append("%s: key %r, expected %r" % (work_id, d.key, key))
        if d.header("outbox_relay_error_code") not in codes:
            problems.append("%s: outbox_relay_error_code %r, expected one of %s" % (
                work_id, d.header("outbox_relay_error_code"), sorted(codes)))
        if not d.header("outbox_relay_error"):
            problems.append("%s: no outbox_relay_error reason" % work_id)
        if d.header("outbox_relay_topic") != topic:
            problems.append("%s: outbox_relay_topic %r, expected the intended topic %r" % (
                work_id, d.header("outbox_relay_topic"), topic))
        # a row without a value (NULL payload) has no data for content-type to describe
        wanted = [h for h in CE_HEADERS if h != "content-type" or value is not None]
        missing = [h for h in wanted if d.header(h) is None]
        if value is None and d.header("content-type") is not None:
            problems.append("%s: a dead letter without a value has content-type %r" % (
                work_id, d.header("content-type")))
        if missing:
            problems.append("%s: original headers missing on the dead letter: %s (has %s)" % (
                work_id, missing, d.header_names))
        c = commit_of[work_id]
        pglsn = d.header("ce_pglsn")
        if pglsn is None or not (c.lsn_before < parse_lsn(pglsn) <= c.lsn_after):
            problems.append("%s: ce_pglsn %r is not its transaction's end" % (work_id, pglsn))
        if d.header("ce_pgxid") != str(c.xid32):
            problems.append("%s: ce_pgxid %r, expected %d" % (work_id, d.header("ce_pgxid"),
                                                             c.xid32))
        if d.header("ce_source") not in (None, "postgresql://%s/%s/public.outbox"
                                         % (sysid, case.dbname)):
            problems.append("%s: ce_source %r" % (work_id, d.header("ce_source")))
        warned = log_lines(relay.log, 'dead-lettering work ID "%s"' % work_id)
        if len(warned) != 1:
            problems.append("%s: %d log lines about dead-lettering it" % (work_id, len(warned)))

    samples = wait_metric(port, "outbox_relay_dead_lettered_total", lambda v: v >= len(bad))
    if samples["outbox_relay_dead_lettered_total"] != len(bad):
        problems.append("outbox_relay_dead_lettered_total is %s, expected %d" % (
            samples["outbox_relay_dead_lettered_total"], len(bad)))
    if "outbox_relay_row_errors_total" not in samples:
        problems.append("no outbox_relay_row_errors_total in /metrics")
    assert relay.stop() == EXIT_OK, relay.log
    assert not problems, "\n".join(problems) + "\n" + relay.log


@pytest.mark.parametrize("limit", ["producer", "topic"])
def test_failed_dead_letter_publish_stops(case, limit):
    """The dead-letter topic refuses the row too: the producer's
    message.max.bytes (checked by librdkafka before sending), or a
    dead-letter topic with the same small max.message.bytes as the
    intended one (refused by the broker). Exit 4; the transaction is not
    confirmed; a restart stops again."""
    case.query("ALTER TABLE outbox ADD COLUMN body text")
    ok_topic, small, dlq = case.topic("order_received"), case.topic("small"), case.topic("dlq")
    case.kafka.create_topic(ok_topic, partitions=3)
    extra = ["--on-error=dead-letter", "--dead-letter-topic=" + dlq] + list(NO_AUTO_CREATE)
    if limit == "producer":
        case.kafka.create_topic(dlq, partitions=1)
        extra += ["-X", "message.max.bytes=10000"]
        kind = "order_received"
    else:
        case.kafka.create_topic(dlq, partitions=1, config={"max.message.bytes": "2000"})
        case.kafka.create_topic(small, partitions=1, config={"max.message.bytes": "2000"})
        kind = "small"
    reader = case.reader()
    relay = case.relay(*extra)
    conn = case.connect(autocommit=False)
    first = insert_rows(conn, [row("first-0")])
    assert reader.read_until(has_ids(first.work_ids), 30), case.logs()
    wait_confirmed(case, parse_lsn(reader.records[0].header("ce_pglsn")))
    bad = insert_rows(conn, [row("huge", kind=kind, payload=json.dumps({"x": "y" * 20000}))])
    insert_rows(conn, [row("later-0")])
    line = stops_unpublishable(relay)
    assert "dead-letter" in line and dlq in line, line
    assert '"huge"' in line, "the error should name the work ID:\n" + line
    lsns = [parse_lsn(t) for t in LSN_TEXT.findall(line)]
    assert any(bad.lsn_before < v <= bad.lsn_after for v in lsns), \
        "the error should name the end LSN of the transaction (for --skip-transaction):\n" + line
    assert_not_confirmed_past(case, bad)
    relay2 = case.relay(*extra, create_slot=False, ready=False)
    stops_unpublishable(relay2)
    assert_not_confirmed_past(case, bad)
    assert reader.drain(timeout=30)
    assert not [r for r in reader.records if r.header("ce_id") == "huge"], \
        "the row went somewhere after all"
