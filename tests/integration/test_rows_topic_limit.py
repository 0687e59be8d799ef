# SPDX-License-Identifier: Apache-2.0
"""A topic whose max.message.bytes is below the producer's batch (issue 21).

The broker checks a topic's max.message.bytes against a whole record batch,
and librdkafka fills batches up to its batch.size (1,000,000 bytes): a
backlog of small rows for such a topic goes out in batches the broker
refuses, although every record in them fits on its own. The relay must
judge a row by its own record alone: only a row whose record, alone in a
batch, is larger than the limit is unpublishable; the others reach their
topic, in batches that fit, in order per key.

Two topics, each with a backlog of one-row transactions committed while the
relay was not running (so librdkafka batches them as much as it can), four
keys each, and one oversize row in the middle of each backlog:
  tiny: max.message.bytes 3,000, rows of a few bytes, a 10 kB oversize row;
  mid:  max.message.bytes 65,536, rows of 1 kB, a 100 kB oversize row.
With --on-error=dead-letter only the oversize rows go to the dead-letter
topic; with --on-error=stop the relay stops naming the first oversize row,
and after the documented remedy (--skip-transaction) every other row is
published. Both in the default (at-least-once) mode and --exactly-once.

The relay reads a topic's limit before its first record, so these batches
fit from the start. A limit lowered while the relay runs is found when the
broker refuses a batch: the relay reads it again and streams again from the
slot with batches that fit, dead-lettering nothing (the last test).

At-least-once may deliver a row twice (the relay streams again from the slot
when a batch is refused, as after any producer restart): per-key order is
checked on each row's first delivery. Read_committed under --exactly-once
must see each row once.
"""

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource
from harness import (EXIT_OK, EXIT_UNPUBLISHABLE, TopicReader, by_id, has_ids, insert_rows,
                     log_lines, parse_lsn, run_relay, wait_confirmed, wait_until)
from rows_helpers import REMEDY_SKIP, assert_not_confirmed_past, wait_exit

MODES = {
    "default": [],
    "exactly-once": ["--exactly-once", "--kafka-commit-interval=0.2"],
}
# each mode a parameter, the --exactly-once one marked for tests/run-librdkafka.sh
MODE_PARAMS = [pytest.param(m, marks=pytest.mark.exactly_once) if "--exactly-once" in a else m
               for m, a in MODES.items()]
ROWS = 160           # one-row transactions per topic
KEYS = 4
TOPICS = {
    # kind: (max.message.bytes, payload of a good row, payload of the oversize row)
    "tiny": (3000, lambda i: {"n": i}, {"pad": "y" * 10000}),
    "mid": (65536, lambda i: {"n": i, "pad": "x" * 1000}, {"pad": "z" * 100000}),
}


def create_topics(case, dead_letter=None):
    for kind, (limit, _, _) in TOPICS.items():
        case.kafka.create_topic(case.topic(kind), partitions=2,
                                config={"max.message.bytes": str(limit)})
    if dead_letter:
        case.kafka.create_topic(dead_letter, partitions=1)


def backlog(case, mode, oversize):
    """Create the slot, then commit ROWS one-row transactions per topic,
    interleaved, with an oversize row of each kind in @oversize after half
    of them. Returns (good work IDs by kind in commit order, the oversize
    rows' Commits by kind)."""
    rc, out = run_relay(["slot", "create"] + case.relay_args(*MODES[mode], create_slot=False),
                        timeout=60)
    assert rc == EXIT_OK, out
    conn = case.connect(autocommit=False)
    good = {kind: [] for kind in TOPICS}
    bad = {}
    for i in range(ROWS):
        for kind, (_, payload, big) in TOPICS.items():
            if i == ROWS // 2 and kind in oversize:
                bad[kind] = insert_rows(conn, [{"work_id": "%s-big" % kind, "kind": kind,
                                                "entity_id": "%s-k0" % kind, "payload": big}])
            work_id = "%s-%03d" % (kind, i)
            insert_rows(conn, [{"work_id": work_id, "kind": kind,
                                "entity_id": "%s-k%d" % (kind, i % KEYS), "payload": payload(i)}])
            good[kind].append(work_id)
    conn.close()
    return good, bad


def reader(case, topics):
    rd = TopicReader(case.kafka.bootstrap, topics, **{"isolation.level": "read_committed"})
    case.readers.append(rd)
    return rd


def order_problems(records, good):
    """Rows of one key must arrive in commit order: each row's first delivery,
    by partition and offset, after the first delivery of the rows before it."""
    problems = []
    rank = {w: n for ids in good.values() for n, w in enumerate(ids)}
    first = {}
    for r in sorted(records, key=lambda r: (r.topic, r.partition, r.offset)):
        first.setdefault(r.header("ce_id"), r)
    by_key = {}
    for w, r in first.items():
        if w in rank:
            by_key.setdefault((r.topic, r.key), []).append((r.partition, r.offset, rank[w], w))
    for (topic, key), seen in by_key.items():
        if len({p for p, _, _, _ in seen}) != 1:
            problems.append("key %r of %s on several partitions" % (key, topic))
        ranks = [n for _, _, n, _ in sorted(seen)]
        if ranks != sorted(ranks):
            problems.append("key %r of %s out of order: %s" % (
                key, topic, [w for _, _, _, w in sorted(seen)][:20]))
    return problems


def arrived_in_place(records, good, case):
    """Problems: a good row missing from its topic, or published elsewhere."""
    got = by_id(records)
    problems = []
    for kind, ids in good.items():
        for w in ids:
            topics = {r.topic for r in got.get(w, [])}
            if topics != {case.topic(kind)}:
                problems.append("%s arrived in %s, expected only %s" % (
                    w, sorted(topics), case.topic(kind)))
    return problems


@pytest.mark.parametrize("mode", MODE_PARAMS)
def test_only_the_oversize_rows_are_dead_lettered(case, mode):
    dead = case.topic("dead")
    create_topics(case, dead)
    good, bad = backlog(case, mode, oversize=set(TOPICS))
    rd = reader(case, [case.topic_pattern])
    relay = case.relay(*MODES[mode], "--on-error=dead-letter", "--dead-letter-topic", dead,
                       "--key-column", "entity_id", create_slot=False)
    want = {w for ids in good.values() for w in ids}

    oversize = {"%s-big" % kind for kind in bad}

    def done(recs):
        return want <= {r.header("ce_id") for r in recs if r.topic != dead} and \
            oversize <= {r.header("ce_id") for r in recs if r.topic == dead}
    rd.read_until(lambda recs: done(recs) or not relay.alive, 90)
    assert relay.alive, "the relay stopped under --on-error=dead-letter\n" + relay.log
    problems = arrived_in_place(rd.records, good, case)
    letters = [r for r in rd.records if r.topic == dead]
    for r in letters:
        kind = r.header("ce_id").split("-")[0]
        if r.header("ce_id") != "%s-big" % kind:
            problems.append("good row %s was dead-lettered: %s" % (
                r.header("ce_id"), r.header("outbox_relay_error")))
            continue
        limit = str(TOPICS[kind][0])
        if r.header("outbox_relay_error_code") != "MSG_SIZE_TOO_LARGE" or \
                limit not in r.header("outbox_relay_error"):
            problems.append("%s dead-lettered with %s: %s (should name the limit %s)" % (
                r.header("ce_id"), r.header("outbox_relay_error_code"),
                r.header("outbox_relay_error"), limit))
    letter_ids = sorted(r.header("ce_id") for r in letters)
    if set(letter_ids) != oversize or (mode == "exactly-once" and len(letter_ids) != len(oversize)):
        problems.append("dead letters %s, expected %s" % (letter_ids, sorted(oversize)))
    if any(r.header("ce_id").endswith("-big") for r in rd.records if r.topic != dead):
        problems.append("an oversize row reached its topic")
    problems += order_problems([r for r in rd.records if r.topic != dead], good)
    if mode == "exactly-once":
        dups = [w for w, rs in by_id(rd.records).items() if len(rs) > 1]
        if dups:
            problems.append("read_committed saw rows twice: %s" % sorted(dups)[:10])
    assert not problems, "\n".join(problems[:30]) + "\n" + relay.log[-6000:]
    wait_confirmed(case, max(parse_lsn(r.header("ce_pglsn")) for r in rd.records))
    assert relay.stop() == EXIT_OK, relay.log


@pytest.mark.parametrize("mode", MODE_PARAMS)
def test_stop_names_the_oversize_row_and_its_limit(case, mode):
    """--on-error=stop: the relay stops at the 100 kB row of "mid" (the only
    oversize one), naming it and the topic's limit, never a good row; with
    the remedy it names, every good row is published."""
    create_topics(case)
    good, bad = backlog(case, mode, oversize={"mid"})
    rd = reader(case, [case.topic_pattern])
    args = list(MODES[mode]) + ["--key-column", "entity_id"]
    relay = case.relay(*args, create_slot=False)
    assert wait_exit(relay, 90) == EXIT_UNPUBLISHABLE, relay.log
    # under --exactly-once the aborted Kafka transaction of a refused batch has its own error line
    lines = log_lines(relay.log, "error: cannot publish")
    assert len(lines) == 1, relay.log
    line = lines[0]
    assert 'work ID "mid-big"' in line, "the error names another row:\n" + line
    assert "65536" in line, "the error should name the topic's max.message.bytes:\n" + line
    assert_not_confirmed_past(case, bad["mid"])
    skip = REMEDY_SKIP.findall(line)
    assert len(skip) == 1, line
    relay = case.relay(*args, "--skip-transaction=" + skip[0], create_slot=False)
    want = {w for ids in good.values() for w in ids}
    rd.read_until(lambda recs: want <= {r.header("ce_id") for r in recs} or not relay.alive, 90)
    problems = arrived_in_place(rd.records, good, case)
    if any(r.header("ce_id") == "mid-big" for r in rd.records):
        problems.append("the oversize row was published")
    problems += order_problems(rd.records, good)
    assert not problems, "\n".join(problems[:30]) + "\n" + case.logs()[-8000:]
    assert relay.stop() == EXIT_OK, relay.log


def set_topic_limit(case, topic, limit):
    """Set @topic's max.message.bytes and wait until the broker reports it."""
    admin = AdminClient({"bootstrap.servers": case.kafka.bootstrap})
    res = ConfigResource("topic", topic, set_config={"max.message.bytes": str(limit)})
    admin.alter_configs([res])[res].result(timeout=30)

    def applied():
        got = admin.describe_configs([ConfigResource("topic", topic)])
        entries = list(got.values())[0].result(timeout=10)
        return entries["max.message.bytes"].value == str(limit)
    wait_until(applied, 30, what="max.message.bytes=%d on %s" % (limit, topic))


@pytest.mark.parametrize("mode", MODE_PARAMS)
def test_limit_lowered_while_running(case, mode):
    """The relay read the topic's limit with its first row; then an operator
    lowers it to 3,000 bytes. The broker refuses the next batch as too large:
    the rows' records fit alone, so nothing is dead-lettered; the relay reads
    the limit again and streams again with batches that fit."""
    topic, dead = case.topic("tiny"), case.topic("dead")
    case.kafka.create_topic(topic, partitions=1)
    case.kafka.create_topic(dead, partitions=1)
    rd = reader(case, [case.topic_pattern])
    relay = case.relay(*MODES[mode], "--on-error=dead-letter", "--dead-letter-topic", dead)
    conn = case.connect(autocommit=False)
    insert_rows(conn, [{"work_id": "first", "kind": "tiny", "payload": {}}])
    assert rd.read_until(has_ids(["first"]), 30), relay.log
    set_topic_limit(case, topic, 3000)
    # one transaction: librdkafka batches its rows far beyond the new limit
    burst = insert_rows(conn, [{"work_id": "burst-%03d" % i, "kind": "tiny", "payload": {"n": i}}
                               for i in range(200)])
    conn.close()
    want = set(burst.work_ids)
    rd.read_until(lambda recs: want <= {r.header("ce_id") for r in recs if r.topic == topic} or
                  not relay.alive, 60)
    assert relay.alive, relay.log
    got = {r.header("ce_id") for r in rd.records if r.topic == topic}
    assert want <= got, "missing %s\n%s" % (sorted(want - got)[:10], relay.log[-5000:])
    letters = [r.header("ce_id") for r in rd.records if r.topic == dead]
    assert not letters, "good rows dead-lettered: %s\n%s" % (letters[:10], relay.log[-5000:])
    assert "refused a record batch for topic \"%s\"" % topic in relay.log, relay.log
    if mode == "exactly-once":
        dups = [w for w, rs in by_id(rd.records).items() if len(rs) > 1]
        assert not dups, "read_committed saw rows twice: %s" % sorted(dups)[:10]
    assert relay.stop() == EXIT_OK, relay.log
