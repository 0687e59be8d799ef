# SPDX-License-Identifier: Apache-2.0
"""The seeds' whole chain, with the failures that make delivery repeat, and
the effect still happening once per work ID.

The shop's purchase transactions (order 103 first: one blue mug and two
green teas, 29.00) each commit an orders row and its acknowledgement
intention through outbox_enqueue(). The relay publishes them and is killed
(SIGKILL) mid-stream while Kafka holds records whose commits the slot has not
confirmed, so its restart sends those again: the topic really holds
duplicates. The receiver, an order mailer with its own database, applies each
record through sql/inbox.sql in one transaction with its effect (a row in
acknowledgements). It crashes after a COMMIT whose offset it had not
committed to Kafka, so the next consumer of its group is handed records it
already applied; finally a consumer of a new group replays the topic from
the beginning. Each committed work ID still has exactly one acknowledgement.

Sizes: 300 orders; OUTBOX_RELAY_SOAK=1 makes it 3000.
"""

import hashlib
import json
import signal
import threading
import time

import pytest
from harness import EXIT_OK, by_id, has_ids, parse_lsn, wait_until
from harness.faults import sized
from sql_helpers import ACKNOWLEDGEMENTS, MAILER, Receiver, load_inbox

ORDERS = sized(300, 3000)
RATE = 250                  # purchases per second: the relay is mid-stream for over a second
KILL_ATTEMPTS = 4
COMMIT_EVERY = 25           # the receiver commits its Kafka offsets every 25 records

ORDER_103 = ('{"order_id":103,"customer_id":1,"total":"29.00",'
             '"message":"Order received; payment still pending"}')

SHOP_SQL = """
CREATE TABLE orders (
    order_id    integer PRIMARY KEY,
    customer_id integer NOT NULL,
    total       numeric(10, 2) NOT NULL,
    status      text NOT NULL DEFAULT 'pending'
)"""


def order(order_id):
    """(customer_id, total, payload text) of an order; 103 is the seeds' one."""
    if order_id == 103:
        return 1, "29.00", ORDER_103
    customer, total = 1 + order_id % 7, "%d.%02d" % (5 + order_id % 40, order_id % 100)
    return customer, total, json.dumps({"order_id": order_id, "customer_id": customer,
                                        "total": total,
                                        "message": "Order received; payment still pending"})


def purchase(conn, order_id):
    """The shop's purchase: the order and its acknowledgement intention commit
    together, or neither does."""
    customer, total, payload = order(order_id)
    with conn.cursor() as cur:
        cur.execute("INSERT INTO orders (order_id, customer_id, total) VALUES (%s, %s, %s)",
                    (order_id, customer, total))
        cur.execute("SELECT outbox_enqueue(%s, 'order_received', %s)",
                    ("order-%d-ack" % order_id, payload))
        assert cur.fetchone()[0] is True
    conn.commit()


class Shop(threading.Thread):
    """Purchases of order_ids, one transaction each, at about RATE per second."""

    def __init__(self, case, order_ids):
        super().__init__(daemon=True)
        self.case, self.order_ids = case, list(order_ids)
        self.stop_event = threading.Event()
        self.committed = []
        self.error = None

    def run(self):
        try:
            conn = self.case.connect(autocommit=False)
            t0 = time.monotonic()
            for i, order_id in enumerate(self.order_ids):
                if self.stop_event.wait(max(0.0, t0 + i / RATE - time.monotonic())):  # pace
                    break
                purchase(conn, order_id)
                self.committed.append("order-%d-ack" % order_id)
            conn.close()
        except BaseException as e:      # reported by the test thread
            self.error = e

    def finish(self, timeout=60):
        self.join(timeout)
        assert not self.is_alive(), "the shop did not finish its purchases"
        assert self.error is None, self.error


@pytest.fixture
def mailer_db(case):
    """The receiver's own database on the same server: sql/inbox.sql and its
    acknowledgements table."""
    name = case.dbname + "_mailer"
    case.pg.create_database(name)
    cp = load_inbox(case.pg, name)
    assert cp.returncode == 0, cp.stderr
    case.pg.query(ACKNOWLEDGEMENTS, dbname=name)
    yield name
    case.pg.drop_database(name)


def test_order_103_is_acknowledged_once_through_relay_kill_and_redelivery(case, mailer_db):
    case.query(SHOP_SQL)
    topic = case.topic("order_received")
    case.kafka.create_topic(topic, partitions=3)
    kafka = case.reader([topic])            # what the topic holds, each offset once
    assert kafka.drain(timeout=30)          # subscribed before the first record

    # --- the shop and the relay; the relay is killed mid-stream ---------------
    relay = case.relay()
    shops = [Shop(case, [103])]             # Mina's order first, on its own
    shops[0].start()
    shops[0].finish()
    assert kafka.read_until(has_ids(["order-103-ack"]), 30), case.logs()
    batch = (ORDERS - 1) // 2
    next_order = 104
    for attempt in range(1, KILL_ATTEMPTS + 1):
        shop = Shop(case, range(next_order, next_order + batch))
        next_order += batch
        shops.append(shop)
        shop.start()
        # while the shop is half way through: the relay is publishing, and
        # confirms to the slot at most every 100 ms
        wait_until(lambda: len(shop.committed) >= batch // 2 or shop.error, 60,
                   what="half of the purchases")
        assert relay.kill() == -signal.SIGKILL, relay.log
        wait_until(lambda: not case.slot_info()["active"], 30, what="the slot released")
        confirmed_at_kill = case.confirmed()
        shop.finish()
        assert kafka.drain(timeout=30)
        # records in Kafka whose commit the slot had not confirmed: the restart
        # decodes those transactions again and sends them again
        resent = {r.header("ce_id") for r in kafka.records
                  if parse_lsn(r.header("ce_pglsn")) > confirmed_at_kill}
        relay = case.relay(create_slot=False)
        if resent:
            break
        print("attempt %d: the slot had confirmed every record in Kafka when the relay died"
              % attempt)
    else:
        raise AssertionError("in %d attempts the relay never died with a record in Kafka that "
                             "the slot had not confirmed" % KILL_ATTEMPTS)
    # the shop goes on selling while the restarted relay sends the rest again
    shops.append(Shop(case, range(next_order, max(next_order, 103 + ORDERS))))
    shops[-1].start()
    shops[-1].finish()
    committed = [w for s in shops for w in s.committed]
    assert sorted(committed) == sorted(r[0] for r in case.query("SELECT work_id FROM outbox"))
    assert kafka.read_until(has_ids(committed), 60), case.logs()
    newest = max(parse_lsn(r.header("ce_pglsn")) for r in kafka.records)
    wait_until(lambda: case.confirmed() >= newest, 30, what="the slot to confirm every record")
    assert relay.stop() == EXIT_OK, relay.log
    assert kafka.drain(timeout=30)
    copies = {w: len(rs) for w, rs in by_id(kafka.records).items()}
    assert set(copies) == set(committed)
    duplicated = {w for w, n in copies.items() if n > 1}
    assert resent <= duplicated, "sent again after the kill but not in Kafka twice: %s" % sorted(
        resent - duplicated)[:5]

    # --- the receiver: crashes once, then carries on, then a replay -----------
    dsn = case.pg.conninfo(mailer_db)
    group = case.prefix + "-" + MAILER
    crash_after = len(kafka.records) // 2 // COMMIT_EVERY * COMMIT_EVERY + COMMIT_EVERY // 2
    first = Receiver(case.kafka.bootstrap, topic, dsn, group, commit_every=COMMIT_EVERY)
    first.run(None, 60, crash_after=crash_after)
    second = Receiver(case.kafka.bootstrap, topic, dsn, group, commit_every=COMMIT_EVERY)
    second.run(Receiver.caught_up, 60)
    second.close()
    assert not first.errors and not second.errors, first.errors + second.errors
    handed_again = ({(p, o) for p, o, _, _ in first.deliveries}
                    & {(p, o) for p, o, _, _ in second.deliveries})
    assert len(handed_again) == COMMIT_EVERY // 2, \
        "records applied before the crash but not committed to Kafka: %d" % len(handed_again)

    deliveries = first.deliveries + second.deliveries
    per_id = {}
    for _, _, work_id, is_first in deliveries:
        per_id.setdefault(work_id, []).append(is_first)
    assert set(per_id) == set(committed)
    assert all(flags.count(True) == 1 for flags in per_id.values()), \
        {w: f for w, f in per_id.items() if f.count(True) != 1}
    repeated = {w for w, flags in per_id.items() if len(flags) > 1}
    assert duplicated <= repeated       # the relay's duplicates reached the receiver
    print("%d orders; %d work IDs twice or more in Kafka; %d records handed to the receiver "
          "again after its crash; %d deliveries for %d work IDs" % (
              len(committed), len(duplicated), len(handed_again), len(deliveries),
              len(per_id)))

    replay = Receiver(case.kafka.bootstrap, topic, dsn, case.prefix + "-replay")
    replay.run(Receiver.caught_up, 60)
    replay.close()
    assert len(replay.deliveries) == len(kafka.records)
    assert not any(is_first for _, _, _, is_first in replay.deliveries)

    # --- the effect: exactly once per work ID ---------------------------------
    acks = case.pg.query("SELECT work_id, count(*) FROM acknowledgements GROUP BY work_id",
                         dbname=mailer_db)
    assert dict(acks) == {w: 1 for w in committed}, \
        {w: n for w, n in acks if n != 1} or sorted(set(committed) - {w for w, _ in acks})[:5]
    assert case.pg.query("SELECT order_id, customer_id, total, message FROM acknowledgements "
                         "WHERE work_id = 'order-103-ack'", dbname=mailer_db) == \
        [(103, 1, "29.00", "Order received; payment still pending")]
    # the inbox digested the text the relay published: the outbox's jsonb text
    published = case.scalar("SELECT payload::text FROM outbox WHERE work_id = 'order-103-ack'")
    assert case.pg.scalar("SELECT encode(payload_sha256, 'hex') FROM processed_messages "
                          "WHERE consumer = %s AND work_id = 'order-103-ack'", (MAILER,),
                          dbname=mailer_db) == hashlib.sha256(published.encode()).hexdigest()
    assert case.pg.scalar("SELECT count(*) FROM processed_messages", dbname=mailer_db) == \
        len(committed)
