# SPDX-License-Identifier: Apache-2.0
"""A relay blocked on a full in-flight window while Kafka is down still
sends standby status, so the walsender does not drop it (STYLE.md
anti-pattern 3). Memory for one huge transaction: test_faults_volume.py."""

import time

from harness import EXIT_OK, KafkaBroker, TopicReader, format_lsn, parse_lsn
from helpers import has_ids, insert_rows, simple_rows, wait_confirmed


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
            time.sleep(0.1)  # poll interval: the invariant must hold for the whole window
        broker.start()
        ids = [w for c in stuck for w in c.work_ids]
        assert reader.read_until(has_ids(ids), 120), case.logs()
        wait_confirmed(case, max(parse_lsn(r.header("ce_pglsn")) for r in reader.records), 60)
        assert relay.stop() == EXIT_OK, relay.log
    finally:
        case.pg.query("ALTER SYSTEM RESET wal_sender_timeout")
        case.pg.query("SELECT pg_reload_conf()")
        broker.kill()
