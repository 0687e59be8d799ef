# SPDX-License-Identifier: Apache-2.0
"""Resource bounds: one transaction far larger than the relay's in-flight
limits streams through with bounded memory, and a relay blocked on a full
in-flight window while Kafka is down still sends standby status, so the
walsender does not drop it."""

import time

from confluent_kafka import Consumer, TopicPartition
from harness import EXIT_OK, KafkaBroker, TopicReader, format_lsn, parse_lsn
from helpers import has_ids, insert_rows, simple_rows, wait_confirmed

ROWS = 50000
PAYLOAD_BYTES = 2000        # 100 MB in one transaction
RSS_LIMIT_KB = 128 * 1024   # default in-flight bytes are 16 MiB; allow generous overhead


def topic_count(bootstrap, topic, partitions=3):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "count-%s" % topic})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                   for p in range(partitions))
    finally:
        c.close()


def test_huge_transaction_streams_with_bounded_memory(case):
    relay = case.relay()
    conn = case.connect(autocommit=False)
    cur = conn.cursor()
    cur.execute("INSERT INTO outbox (work_id, kind, payload) "
                "SELECT 'huge-' || i, 'bulk', jsonb_build_object('i', i, 'pad', repeat('p', %s)) "
                "FROM generate_series(1, %s) AS i", (PAYLOAD_BYTES, ROWS))
    cur.execute("SELECT pg_current_wal_lsn()::text")
    before = parse_lsn(cur.fetchone()[0])
    conn.commit()
    topic = case.topic("bulk")
    deadline = time.monotonic() + 300
    n = 0
    while time.monotonic() < deadline:
        assert relay.alive, "relay exited with %s\n%s" % (relay.returncode, relay.log)
        if case.confirmed() > before:
            break
        time.sleep(0.2)
    assert case.confirmed() > before, "the %d-row transaction was not confirmed within 300 s\n%s" % (
        ROWS, relay.log)
    n = topic_count(case.kafka.bootstrap, topic)
    assert n == ROWS, "%d records on %s, expected %d" % (n, topic, ROWS)
    peak = relay.peak_rss_kb()
    case.metric("huge_txn_peak_rss_kb", peak)
    print("peak RSS streaming %d x %d-byte rows in one transaction: %s KiB" % (
        ROWS, PAYLOAD_BYTES, peak))
    assert peak < RSS_LIMIT_KB, "relay peak RSS %d KiB for one big transaction" % peak
    assert relay.stop() == EXIT_OK, relay.log


def test_full_inflight_window_still_sends_status(case, env):
    broker = KafkaBroker(env.base_dir, name=case.name + "-kafka")
    broker.start()
    try:
        case.pg.query("ALTER SYSTEM SET wal_sender_timeout = '3s'")
        case.pg.query("SELECT pg_reload_conf()")
        relay = case.relay("-X", "message.timeout.ms=300000", "--max-inflight-messages=5",
                           brokers=broker.bootstrap)
        conn = case.connect(autocommit=False)
        first = insert_rows(conn, simple_rows("first", 1))
        reader = TopicReader(broker.bootstrap, [case.topic_pattern])
        case.readers.append(reader)
        assert reader.read_until(has_ids(first.work_ids), 30), case.logs()
        broker.stop()
        pid = case.slot_info()["active_pid"]
        stuck = [insert_rows(conn, simple_rows("stuck-%d" % i, 10)) for i in range(10)]
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            s = case.slot_info()
            assert relay.alive, relay.log
            assert s["active"] and s["active_pid"] == pid, \
                "walsender dropped the relay while its in-flight window was full\n" + relay.log
            assert s["confirmed_flush_lsn"] <= stuck[0].lsn_before, format_lsn(
                s["confirmed_flush_lsn"])
            time.sleep(0.1)
        broker.start()
        ids = [w for c in stuck for w in c.work_ids]
        assert reader.read_until(has_ids(ids), 120), case.logs()
        wait_confirmed(case, max(parse_lsn(r.header("ce_pglsn")) for r in reader.records), 60)
        assert relay.stop() == EXIT_OK, relay.log
    finally:
        case.pg.query("ALTER SYSTEM RESET wal_sender_timeout")
        case.pg.query("SELECT pg_reload_conf()")
        broker.kill()
