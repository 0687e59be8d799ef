# SPDX-License-Identifier: Apache-2.0
"""20,000 rows from 4 concurrent writers in transactions of 1, 10 and 1,000
rows, interleaved with rolled-back transactions, rolled-back savepoints and
writes to a table the relay must ignore. Every committed work ID arrives
exactly once, no rolled-back one does, and with --key-column entity_id each
entity's rows arrive in commit order within one partition.

Commit order per entity is made observable without trusting the relay: each
transaction takes the row lock of every entity it writes (in sorted order, so
writers never deadlock) and numbers that entity's rows from a counter in the
same row. The lock is held until commit, so the numbers follow commit order,
and since rolled-back increments vanish, every entity's committed rows are
numbered 1..n without gaps.
"""

import collections
import json
import random
import threading
import time

import psycopg2
import psycopg2.extensions
import psycopg2.extras
from harness import EXIT_OK, parse_lsn, wait_confirmed

WRITERS = 4
ROWS_PER_WRITER = 5000
ENTITIES = ["cust-%02d" % i for i in range(40)]


def kind_of(entity):
    # two topics; one entity always goes to the same one
    return "order_received" if int(entity[-2:]) % 2 == 0 else "order_paid"


def writer_plan(w, rng):
    """Transaction specs for writer w: ('commit'|'rollback'|'side', nrows)."""
    sizes = [1000] * 2 + [10] * 200 + [1] * 1000          # 5,000 committed rows
    assert sum(sizes) == ROWS_PER_WRITER
    rng.shuffle(sizes)
    plan = []
    for i, n in enumerate(sizes):
        plan.append(("commit", n))
        if i % 10 == 3:
            plan.append(("rollback", rng.choice([1, 10, 10, 1000 if i % 300 == 3 else 10])))
        if i % 25 == 7:
            plan.append(("side", 0))
    return plan


class Writer(threading.Thread):
    def __init__(self, case, w):
        super().__init__(name="writer-%d" % w, daemon=True)
        self.case, self.w = case, w
        self.rng = random.Random(1000 + w)
        self.committed = []          # work IDs
        self.rolled_back = []
        self.error = None

    def run(self):
        try:
            conn = self.case.connect(autocommit=False)
            try:
                for t, (what, n) in enumerate(writer_plan(self.w, self.rng)):
                    self.transaction(conn, t, what, n)
            finally:
                conn.close()
        except BaseException as e:  # reported by the test thread
            self.error = e

    def transaction(self, conn, t, what, n):
        cur = conn.cursor()
        ents = [self.rng.choice(ENTITIES) for _ in range(n)]
        for attempt in range(5):
            try:
                rows = []
                counts = collections.Counter(ents)
                for e in sorted(counts):
                    cur.execute("UPDATE entity_seq SET next_seq = next_seq + %s "
                                "WHERE entity_id = %s RETURNING next_seq", (counts[e], e))
                    last = cur.fetchone()[0]
                    for i, seq in enumerate(range(last - counts[e] + 1, last + 1)):
                        wid = "w%d-t%d-%s-%d%s" % (self.w, t, e, i, "-rb" if what == "rollback" else "")
                        payload = {"entity": e, "seq": seq, "writer": self.w, "txn": t}
                        rows.append((wid, kind_of(e), json.dumps(payload), e))
                if rows:
                    psycopg2.extras.execute_values(
                        cur, "INSERT INTO outbox (work_id, kind, payload, entity_id) VALUES %s",
                        rows, page_size=1000)
                cur.execute("INSERT INTO side_table (note) VALUES (%s)", ("w%d t%d" % (self.w, t),))
                if what == "commit" and t % 50 == 0:
                    # a rolled-back savepoint inside a committed transaction
                    cur.execute("SAVEPOINT sp")
                    cur.execute("INSERT INTO outbox (work_id, kind, payload, entity_id) "
                                "VALUES (%s, 'order_received', '{\"seq\": -1}', 'cust-00')",
                                ("w%d-t%d-savepoint-rb" % (self.w, t),))
                    cur.execute("ROLLBACK TO SAVEPOINT sp")
                    self.rolled_back.append("w%d-t%d-savepoint-rb" % (self.w, t))
                if what == "rollback":
                    conn.rollback()
                    self.rolled_back.extend(r[0] for r in rows)
                else:
                    conn.commit()
                    self.committed.extend(r[0] for r in rows)
                return
            except psycopg2.extensions.TransactionRollbackError:
                conn.rollback()     # deadlock or serialization failure: nothing committed
        raise RuntimeError("writer %d: transaction %d kept failing" % (self.w, t))


def test_20000_rows_from_4_writers(case):
    case.query("CREATE TABLE entity_seq (entity_id text PRIMARY KEY, next_seq bigint NOT NULL)")
    case.query("CREATE TABLE side_table (id bigserial PRIMARY KEY, note text)")
    case.query("INSERT INTO entity_seq SELECT unnest(%s::text[]), 0", (ENTITIES,))

    reader = case.reader()
    relay = case.relay("--key-column", "entity_id")
    t0 = relay.started_at

    writers = [Writer(case, w) for w in range(WRITERS)]
    for w in writers:
        w.start()
    # read while the writers write; the writers finish long before the timeout
    deadline = time.monotonic() + 600
    while any(w.is_alive() for w in writers) and time.monotonic() < deadline:
        reader.poll(timeout=0.2)
        assert relay.alive, "relay exited with %s while writers ran" % relay.returncode
    for w in writers:
        w.join(timeout=1)
        assert not w.is_alive(), "writer %s still running after 600 s" % w.name
        assert w.error is None, "writer %s failed: %r" % (w.name, w.error)
    committed = [wid for w in writers for wid in w.committed]
    rolled_back = {wid for w in writers for wid in w.rolled_back}
    assert len(committed) == WRITERS * ROWS_PER_WRITER

    want = set(committed)
    seen = set()
    done = [0]

    def all_arrived(records):
        for r in records[done[0]:]:
            seen.add(r.header("ce_id"))
        done[0] = len(records)
        return want <= seen
    t_last = None
    if reader.read_until(all_arrived, 300):
        t_last = time.monotonic()
    missing = want - seen
    assert not missing, "%d committed rows never arrived, e.g. %s" % (
        len(missing), sorted(missing)[:5])

    # everything acknowledged must be confirmed, and nothing more may come
    last_commit = max(parse_lsn(r.header("ce_pglsn")) for r in reader.records)
    wait_confirmed(case, last_commit, timeout=60)
    assert reader.drain(timeout=60)

    ids = collections.Counter(r.header("ce_id") for r in reader.records)
    dups = {k: v for k, v in ids.items() if v > 1}
    assert not dups, "%d work IDs arrived more than once, e.g. %s" % (
        len(dups), sorted(dups.items())[:5])
    leaked = rolled_back & set(ids)
    assert not leaked, "rolled-back rows were published: %s" % sorted(leaked)[:5]
    extra = set(ids) - want
    assert not extra, "unexpected work IDs: %s" % sorted(extra)[:5]

    # per-entity commit order within one partition
    expected_n = dict(case.query("SELECT entity_id, next_seq FROM entity_seq"))
    per_entity = collections.defaultdict(list)
    for r in sorted(reader.records, key=lambda r: (r.topic, r.partition, r.offset)):
        assert r.key_text == json.loads(r.value)["entity"], "key is not entity_id: %r" % r
        per_entity[r.key_text].append(r)
    for entity, recs in per_entity.items():
        places = {(r.topic, r.partition) for r in recs}
        assert len(places) == 1, "entity %s spread over %s" % (entity, places)
        assert places.pop()[0] == case.topic(kind_of(entity))
        seqs = [json.loads(r.value)["seq"] for r in recs]
        assert seqs == list(range(1, expected_n[entity] + 1)), \
            "entity %s out of commit order: first bad index %d" % (
                entity, next(i for i, s in enumerate(seqs) if s != i + 1))
        lsns = [parse_lsn(r.header("ce_pglsn")) for r in recs]
        assert lsns == sorted(lsns), "entity %s: ce_pglsn goes backwards" % entity

    # a transaction's rows share its xid and end LSN
    per_txn = collections.defaultdict(set)
    for r in reader.records:
        w, t = r.header("ce_id").split("-")[:2]
        per_txn[(w, t)].add((r.header("ce_pgxid"), r.header("ce_pglsn")))
    split = {k: v for k, v in per_txn.items() if len(v) != 1}
    assert not split, "transactions with several xids/LSNs: %s" % list(split.items())[:3]

    rows_per_s = len(committed) / (t_last - t0)
    peak = relay.peak_rss_kb()
    print("throughput: %.0f rows/s (%d rows, %.1f s from relay start to last record); "
          "relay peak RSS %s KiB" % (rows_per_s, len(committed), t_last - t0, peak))
    case.metric("rows_per_s", "%.0f" % rows_per_s)
    case.metric("peak_rss_kb", peak)

    assert relay.stop() == EXIT_OK, relay.log
