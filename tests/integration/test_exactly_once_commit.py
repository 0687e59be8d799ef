# SPDX-License-Identifier: Apache-2.0
"""The Kafka commit under --exactly-once (issue 22): what is aborted is never
confirmed past, a Kafka transaction never outlives transaction.timeout.ms
(and a coordinator's timeout is not taken for a newer relay's fence), and
what the relay concludes comes from librdkafka's error codes, not from the
wording of its log lines."""

import os
import re
import signal
import threading
import time

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource
from harness import (EXIT_UNPUBLISHABLE, KafkaBroker, TopicReader, format_lsn, insert_rows, parse_lsn,
                     relay_librdkafka, wait_confirmed, wait_until)
from harness.faults import BROKER_START_S, collector, observe, say, start_relay, verify_exactly_once
from rows_helpers import assert_not_confirmed_past, wait_exit

from eos_helpers import DEFAULT_CHECKPOINT_TOPIC, EOS, checkpoints, read_committed, wait_checkpoint_past

# tests/run-librdkafka.sh runs these (-m exactly_once) against librdkafka 2.8 too
pytestmark = pytest.mark.exactly_once


def committed_reader(case, topics=None):
    rd = TopicReader(case.kafka.bootstrap, topics or [case.topic_pattern],
                     **{"isolation.level": "read_committed"})
    case.readers.append(rd)
    return rd


def set_topic_config(case, topic, **config):
    admin = AdminClient({"bootstrap.servers": case.kafka.bootstrap})
    res = ConfigResource("topic", topic, set_config={k.replace("_", "."): v
                                                     for k, v in config.items()})
    for f in admin.alter_configs([res]).values():
        f.result(timeout=30)


def test_aborted_transaction_is_never_confirmed_past(case):
    """A row refused by Kafka, whose dead-letter copy is refused too, stops
    the relay (exit 4). The Kafka transaction open then also held earlier,
    complete PostgreSQL transactions; it is aborted. The exit drain once
    still committed a checkpoint-only transaction at what Kafka had
    acknowledged, and the slot was confirmed past rows that only the aborted
    transaction held: after a restart they were skipped, lost. Acknowledged
    is not committed: now nothing is checkpointed or confirmed past them, and
    the restart (the dead-letter topic fixed) publishes each row once."""
    big, dead = case.topic("big"), case.prefix + "-dead"
    case.kafka.create_topic(big, partitions=1, config={"max.message.bytes": "2000"})
    case.kafka.create_topic(dead, partitions=1, config={"max.message.bytes": "2000"})
    args = EOS + ["--on-error=dead-letter", "--dead-letter-topic", dead,
                  # one Kafka transaction holds both PostgreSQL transactions below
                  "--kafka-commit-interval=3", "--kafka-commit-fixed-interval"]
    reader = committed_reader(case)
    relay = start_relay(case, *args)
    conn = case.connect(autocommit=False)
    earlier = insert_rows(conn, [{"work_id": "earlier-%d" % i, "kind": "fault", "payload": {"n": i}}
                                 for i in range(20)])
    insert_rows(conn, [{"work_id": "too-big", "kind": "big", "payload": {"x": "y" * 5000}},
                       {"work_id": "beside", "kind": "fault", "payload": {}}])
    assert wait_exit(relay, 90) == EXIT_UNPUBLISHABLE, relay.log
    assert 'the dead-letter publish of work ID "too-big"' in relay.log, relay.log
    assert_not_confirmed_past(case, earlier)
    set_topic_config(case, dead, max_message_bytes="100000")
    relay = start_relay(case, *args, create_slot=False)
    ids = set(earlier.work_ids) | {"beside"}
    assert reader.read_until(lambda recs: ids <= {r.header("ce_id") for r in recs}, 90), \
        "rows never arrived: %s\n%s" % (sorted(ids - {r.header("ce_id") for r in reader.records}),
                                        case.logs())
    with TopicReader(case.kafka.bootstrap, [dead], **{"isolation.level": "read_committed"}) as rd:
        assert rd.read_until(lambda recs: any(r.header("ce_id") == "too-big" for r in recs), 60), \
            relay.log
    conn.close()
    assert relay.stop() == 0, relay.log
    reader.drain()
    seen = [r.header("ce_id") for r in reader.records if r.topic != dead]
    assert sorted(seen) == sorted(ids), seen


# The coordinator's timeout, short: librdkafka's smallest transaction.timeout.ms is 1 s, and a
# producer's messages may not outlive its transactions.
TXN_TIMEOUT = ["-X", "transaction.timeout.ms=2000", "-X", "message.timeout.ms=2000"]


@pytest.fixture(scope="module")
def timeout_broker(env):
    """A broker whose transaction coordinator looks for transactions past
    their timeout every 0.5 s (Kafka's default is 10 s), so that one open
    for 2 s is aborted within the test's few seconds."""
    b = KafkaBroker(env.base_dir, name="eos-timeout-kafka", quick_start=True, extra_properties={
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"})
    b.start(timeout=BROKER_START_S)
    yield b
    b.kill()


def published(relay, work_id):
    return lambda: ('published work ID "%s"' % work_id) in relay.log


def test_long_postgresql_transaction_is_split_before_the_transaction_timeout(case, timeout_broker):
    """A PostgreSQL transaction writes an outbox row, then many changes of
    another table; the walsender works through them (filtered out) while
    the Kafka transaction holding the row stays open, as nothing commits on
    time inside a PostgreSQL transaction. Past transaction.timeout.ms the
    coordinator aborted it, the relay stopped with exit 3 as if a newer
    relay had fenced it, and did the same after every restart: the row
    never arrived. The walsender is frozen here while it is inside that
    transaction, for twice the timeout. Now the relay splits the Kafka
    transaction at half the timeout, and the row arrives once."""
    case.query("CREATE TABLE other (n int)")
    coll = collector(case, broker=timeout_broker, isolation="read_committed")
    relay = start_relay(case, "--exactly-once", *TXN_TIMEOUT, "--log-level=debug",
                        brokers=timeout_broker.bootstrap)
    walsender = case.slot_info()["active_pid"]
    conn = case.connect(autocommit=False)
    writer = threading.Thread(target=insert_rows, args=(conn, [
        {"work_id": "slow-1", "kind": "fault", "payload": {}}],), kwargs={
        "extra_sql": ["INSERT INTO other SELECT g FROM generate_series(1, 1500000) g"]})
    writer.start()
    try:
        wait_until(published(relay, "slow-1"), 120, interval=0.01, what="the row to be published")
        os.kill(walsender, signal.SIGSTOP)
        try:
            # How far the frozen walsender had sent: short of the commit while it replays
            # the transaction's changes (it advances past a commit once it is sent).
            sent_at_freeze = parse_lsn(case.pg.scalar(
                "SELECT sent_lsn::text FROM pg_stat_replication WHERE pid = %s", (walsender,)))
            assert not coll.poll(0.1) and "slow-1" not in coll.ids(), \
                "the PostgreSQL transaction was read whole before the freeze: the scenario did not happen"
            observe(4, lambda: None, interval=0.5)    # twice the timeout, inside the transaction
        finally:
            os.kill(walsender, signal.SIGCONT)
    finally:
        writer.join()
    # The Kafka transaction's record can wait on librdkafka (2.8 holds a new topic's first
    # record about a second), so the check above alone cannot tell that the walsender was
    # frozen inside the transaction: its sent LSN can (1,500,000 other changes give it
    # seconds; 500,000 were once replayed before the freeze under load).
    m = re.search(r'published work ID "slow-1" .*\(transaction ending at LSN ([0-9A-F]+/[0-9A-F]+)\)',
                  relay.log)
    assert m, relay.log[-3000:]
    assert sent_at_freeze < parse_lsn(m.group(1)), \
        "the walsender had sent up to %s, the transaction's end %s, before the freeze: the " \
        "scenario did not happen" % (format_lsn(sent_at_freeze), m.group(1))
    verify_exactly_once(case, coll, ["slow-1"], "eos_timeout_split", relays=[relay])
    conn.close()
    assert "(a split transaction)" in relay.log, relay.log[-3000:]
    assert relay.stop() == 0, relay.log


def test_coordinator_timeout_is_not_taken_for_a_fence(case, timeout_broker):
    """The relay is frozen (SIGSTOP) with a Kafka transaction open, past
    transaction.timeout.ms: the coordinator aborts it and bumps the
    producer's epoch, and librdkafka reports that as a fence. The relay took
    it for a newer relay's and stopped with exit 3 ("do not restart it while
    the other one runs"), though none ran. Now it tells the two apart by how
    long the transaction was open, streams again with a new producer, and
    the row arrives once."""
    coll = collector(case, broker=timeout_broker, isolation="read_committed")
    raw = collector(case, broker=timeout_broker, create=False)
    relay = start_relay(case, "--exactly-once", *TXN_TIMEOUT, "--kafka-commit-interval=1",
                        "--kafka-commit-fixed-interval",
                        brokers=timeout_broker.bootstrap)
    conn = case.connect(autocommit=False)
    # A first row, committed in Kafka, so that the producer knows the topic before the row
    # under test: librdkafka 2.8 holds the first record of a topic it has no metadata for
    # about a second, and the record then lands in the topic at the end of its
    # --kafka-commit-interval, too late to freeze the relay while its transaction is open.
    insert_rows(conn, [{"work_id": "warm-1", "kind": "fault", "payload": {}}])
    wait_until(lambda: "warm-1" in coll.ids(), 60, what="the first row committed in Kafka",
               tick=coll.poll)
    # The record written, its transaction open for at most a second more: on a loaded machine the
    # relay can commit it before the freeze. A row committed while the relay is stopped says so,
    # and the scenario is tried again with another row.
    rows, frozen_open = ["warm-1"], False
    for attempt in range(3):
        wid = "frozen-%d" % attempt
        rows.append(wid)
        insert_rows(conn, [{"work_id": wid, "kind": "fault", "payload": {}}])
        wait_until(lambda: wid in raw.ids(), 60, what="the record in the topic", tick=raw.poll)
        os.kill(relay.pid, signal.SIGSTOP)
        try:
            observe(4, coll.poll, interval=0.5)
            frozen_open = wid not in coll.ids()
        finally:
            os.kill(relay.pid, signal.SIGCONT)
        if frozen_open:
            break
        say("%s was committed before the freeze: again with another row" % wid)
    assert frozen_open, "the relay committed each row before it was frozen: the scenario did not happen"
    verify_exactly_once(case, coll, rows, "eos_timeout_not_fence", relays=[relay])
    conn.close()
    assert "past the producer's transaction.timeout.ms" in relay.log or \
        "past its transaction.timeout.ms" in relay.log, relay.log[-3000:]
    assert relay.stop() == 0, relay.log


def test_idle_stream_writes_a_checkpoint_at_most_once_a_second(case):
    """With no outbox row to publish, the slot still moves on (other tables'
    commits, keepalives): under --exactly-once the relay confirms it through
    Kafka transactions that hold only the checkpoint. Each is a round of
    requests to the transaction coordinator; on a busy server they came up to
    ten times a second, one per status gap (100 ms). Now at most one a second,
    and the slot still moves."""
    case.query("CREATE TABLE busy_elsewhere (id serial PRIMARY KEY, note text)")
    relay = start_relay(case, *EOS, status_interval=1)
    key = "/" + case.slot
    conn = case.connect(autocommit=True)
    with conn.cursor() as cur:
        cur.execute("INSERT INTO busy_elsewhere (note) VALUES ('first')")
        first = parse_lsn(case.pg.scalar("SELECT pg_current_wal_lsn()::text"))
        wait_checkpoint_past(case, first)
        before = len(checkpoints(case.kafka.bootstrap, DEFAULT_CHECKPOINT_TOPIC, key))
        # the condition under test is a rate: commits of another table for 4 s of the clock
        t0 = time.monotonic()
        while time.monotonic() - t0 < 4.0:
            cur.execute("INSERT INTO busy_elsewhere (note) VALUES ('x')")
            time.sleep(0.01)   # pacing the load (about 100 commits a second), not a wait
        elapsed = time.monotonic() - t0
        last = parse_lsn(case.pg.scalar("SELECT pg_current_wal_lsn()::text"))
    wait_checkpoint_past(case, last)
    wait_confirmed(case, last, timeout=30)
    written = len(checkpoints(case.kafka.bootstrap, DEFAULT_CHECKPOINT_TOPIC, key)) - before
    conn.close()
    say("checkpoint-only transactions in %.1f s of other tables' commits: %d" % (elapsed, written))
    # one a second: one at each end of the window, the one that catches up after the load,
    # and one for WAL the server writes by itself meanwhile (10 a second before the fix)
    assert 1 <= written <= int(elapsed) + 4, (written, relay.log[-3000:])
    assert relay.stop() == 0, relay.log


def commit_ids(log):
    """The transactional.id of each committed Kafka transaction, in order (the debug line)."""
    return re.findall(r'ms to commit \(transactional\.id "([^"]+)"\)', log)


def test_kafka_transactions_alternate_between_two_producers(case):
    """With --kafka-transactional-producers=2 the relay has two transactional
    producers, its transactional.id and the same with ".1", and Kafka
    transactions alternate between them: the next one begins while the
    coordinator still writes the last one's markers, where one producer's
    next AddPartitionsToTxn is answered CONCURRENT_TRANSACTIONS until then
    and retried by librdkafka only 20 ms later. Each row is its own Kafka
    transaction here. Records keep their commit order in every partition,
    each is read once with read_committed, and a restart with one producer
    continues from the newest checkpoint, whichever producer wrote it, every
    transaction then the one id's."""
    tid = "alternate-" + case.prefix
    coll = collector(case, isolation="read_committed")
    reader = committed_reader(case)
    relay = start_relay(case, *EOS, "--log-level=debug", "--transactional-id", tid,
                        "--kafka-transactional-producers=2")
    conn = case.connect(autocommit=False)
    rows = []
    for i in range(8):
        rows += insert_rows(conn, [{"work_id": "alt-%d" % i, "kind": "fault", "payload": {"n": i}}]).work_ids
        # the condition under test: one row per Kafka transaction
        wait_until(lambda: set(rows) <= coll.ids(), 60, what="row alt-%d" % i, tick=coll.poll)
    first = commit_ids(relay.log)
    assert relay.stop() == 0, relay.log
    assert len(first) >= 8, relay.log[-3000:]
    assert set(first) == {tid, tid + ".1"}, first
    assert all(a != b for a, b in zip(first, first[1:])), first
    relay = start_relay(case, *EOS, "--log-level=debug", "--transactional-id", tid,
                        "--kafka-transactional-producers=1", create_slot=False)
    for i in range(8, 11):
        rows += insert_rows(conn, [{"work_id": "alt-%d" % i, "kind": "fault", "payload": {"n": i}}]).work_ids
        wait_until(lambda: set(rows) <= coll.ids(), 60, what="row alt-%d" % i, tick=coll.poll)
    verify_exactly_once(case, coll, rows, "eos_alternate", relays=[relay])
    single = commit_ids(relay.log)
    conn.close()
    assert relay.stop() == 0, relay.log
    assert len(single) >= 3 and set(single) == {tid}, single
    assert reader.read_until(lambda recs: len(recs) >= len(rows), 60), reader.records
    for p in {r.partition for r in reader.records}:
        ns = [int(r.header("ce_id").split("-")[1]) for r in sorted(reader.records, key=lambda r: r.offset)
              if r.partition == p]
        assert ns == sorted(ns), (p, ns)


def backlog_stretches(log):
    """The transactional.id of each Kafka commit made while draining a
    backlog, one list per stretch between "draining a backlog" and "done
    with a backlog" (debug lines)."""
    stretches, ids = [], None
    for line in log.splitlines():
        if "debug: draining a backlog" in line:
            ids = []
            stretches.append(ids)
        elif "debug: done with a backlog" in line:
            ids = None
        elif ids is not None:
            ids += commit_ids(line)
    return stretches


def test_backlog_stays_on_one_of_two_producers(case):
    """Two producers take turns so that a live stream's next Kafka
    transaction does not wait for the coordinator to finish the last one.
    Draining a backlog, in transactions of up to a second, the turns only
    slowed it (librdkafka 2.8, small transactions: 1.1 to 1.5 times as long
    as one producer): there the next transaction stays on the producer of
    the last, and the turns resume once the stream is live again."""
    tid = "stay-" + case.prefix
    coll = collector(case, isolation="read_committed")
    args = EOS + ["--transactional-id", tid, "--kafka-transactional-producers=2", "--log-level=debug"]
    relay = start_relay(case, *args)
    assert relay.stop() == 0, relay.log
    conn = case.connect(autocommit=False)
    rows = []
    for t in range(300):
        rows += insert_rows(conn, [{"work_id": "stay-%d-%d" % (t, i), "kind": "fault", "payload": {"n": i}}
                                   for i in range(5)]).work_ids
    case.pg.wait_clock(0.4)     # a backlog: older than 250 ms
    # 1,500 rows in Kafka transactions of at most 200 records: several commits while draining
    relay = start_relay(case, *args, "--kafka-transaction-messages=200", create_slot=False)
    verify_exactly_once(case, coll, rows, "eos_stay", relays=[relay])
    assert "draining a backlog" in relay.log, relay.log[-3000:]
    # Each stretch of draining (the relay may leave it and come back on a loaded machine)
    # commits on one id: the first commit of a stretch on either, the rest on the same.
    stretches = backlog_stretches(relay.log)
    say("commits while draining, by stretch: %s" % [len(ids) for ids in stretches])
    assert sum(len(ids) for ids in stretches) >= 4, stretches
    assert all(set(ids) <= {ids[0]} for ids in stretches if ids), stretches
    live = []
    for i in range(60):
        live += insert_rows(conn, [{"work_id": "live-%d" % i, "kind": "fault", "payload": {}}]).work_ids
        wait_until(lambda: set(live) <= coll.ids(), 30, what="the live row", tick=coll.poll)
        done = "done with a backlog" in relay.log
        after = commit_ids(relay.log.split("done with a backlog")[-1]) if done else []
        if len(after) >= 4:
            break
    conn.close()
    assert len(after) >= 4 and all(a != b for a, b in zip(after, after[1:])), after
    assert relay.stop() == 0, relay.log


def test_one_producer_fences_the_second_id_too(case):
    """A relay with one transactional producer fences "<id>.1" too when it
    starts. An older relay of the slot may have run with two (the default
    with librdkafka 2.4 and later), and, frozen between its Kafka
    transactions, it would commit its next one with "<id>.1" after the new
    relay sent the same rows again: duplicates for a read_committed reader.
    Here a producer of "<id>.1" holds a Kafka transaction open with a record
    in it while the relay starts: afterwards its commit is refused, and a
    read_committed reader never sees the record."""
    tid = "fence-second-" + case.prefix
    topic = case.prefix + "-zombie"  # not one of the relay's: its records have no work ID
    case.kafka.create_topic(topic, partitions=1)
    coll = collector(case, isolation="read_committed")
    zombie = Producer({"bootstrap.servers": case.kafka.bootstrap, "transactional.id": tid + ".1",
                       "transaction.timeout.ms": 600000})
    zombie.init_transactions(60)
    zombie.begin_transaction()
    zombie.produce(topic, key=b"zombie-1", value=b"{}")
    assert zombie.flush(60) == 0
    relay = start_relay(case, *EOS, "--transactional-id", tid, "--kafka-transactional-producers=1")
    assert 'older producers of that id are fenced, and of "%s.1"' % tid in relay.log, relay.log
    with pytest.raises(KafkaException) as e:
        zombie.commit_transaction(60)
    assert e.value.args[0].fatal() or e.value.args[0].txn_requires_abort(), e.value
    conn = case.connect(autocommit=False)
    rows = insert_rows(conn, [{"work_id": "after-fence", "kind": "fault", "payload": {}}]).work_ids
    conn.close()
    verify_exactly_once(case, coll, rows, "eos_fence_second", relays=[relay])
    # read to the end of the partition, not for a while: the aborted record is never there
    records, ended = read_committed(case.kafka.bootstrap, topic)
    assert ended and records == [], (ended, records)
    assert relay.stop() == 0, relay.log


def test_producers_auto(case):
    """The default, --kafka-transactional-producers=auto, takes two
    producers with librdkafka 2.4 and later (an idle producer of older ones
    spins its main thread: see outbox-relay(7), SIZING) and one before, and
    the commit interval, unless given, is 5 ms with two and 20 ms with one;
    the start says which, with the version, and the transactions go to
    both ids or to the one."""
    pair = relay_librdkafka() >= (2, 4, 0)
    tid = "auto-" + case.prefix
    coll = collector(case, isolation="read_committed")
    relay = start_relay(case, *EOS, "--transactional-id", tid, "--log-level=debug")
    if pair:
        line = r'Kafka transactions as "%s" and "%s\.1" in turn \(librdkafka [^)]+\), commit interval 5 ms'
        assert re.search(line % (re.escape(tid), re.escape(tid)), relay.log), relay.log
    else:
        line = r'Kafka transactions as "%s" \(librdkafka [^)]+\), commit interval 20 ms'
        assert re.search(line % re.escape(tid), relay.log), relay.log
    conn = case.connect(autocommit=False)
    rows = []
    for i in range(4):  # a Kafka transaction each, so both producers of a pair take one
        rows += insert_rows(conn, [{"work_id": "auto-%d" % i, "kind": "fault", "payload": {}}]).work_ids
        wait_until(lambda: set(rows) <= coll.ids(), 60, what="row auto-%d" % i, tick=coll.poll)
    conn.close()
    verify_exactly_once(case, coll, rows, "eos_auto", relays=[relay])
    assert set(commit_ids(relay.log)) == ({tid, tid + ".1"} if pair else {tid}), commit_ids(relay.log)
    assert relay.stop() == 0, relay.log
    # an interval given is kept with either
    relay = start_relay(case, *EOS, "--transactional-id", tid, "--kafka-commit-interval=0.012",
                        create_slot=False)
    assert "), commit interval 12 ms; older producers" in relay.log, relay.log
    assert relay.stop() == 0, relay.log
