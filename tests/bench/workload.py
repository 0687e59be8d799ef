# SPDX-License-Identifier: Apache-2.0
"""The benchmark's work: the outbox table (sql/outbox.sql) in database "bench",
rows of one fixed size, loaded as one large transaction or as many small ones,
and a pgbench script that inserts one row per transaction at a fixed rate.

Every row has a 10-byte work_id (the Kafka key for both the relay and
Debezium), kind 'bench' and a jsonb payload whose text is exactly
payload_bytes long, so every contestant moves the same bytes.

Knows PostgreSQL and pgbench, nothing of the contestants.
"""

import os
import random
import re
import subprocess

import harness
from harness import procs

DBNAME = "bench"
KIND = "bench"
KEY_LEN = 10

# {"pad": "<P x>", "seq": "<10 digits>"} as jsonb prints it is P + 32 bytes long
_PAYLOAD_OVERHEAD = 32

SETUP_SQL = """
CREATE SEQUENCE IF NOT EXISTS bench_seq;
CREATE OR REPLACE FUNCTION bench_payload(n bigint, pad int) RETURNS jsonb
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT jsonb_build_object('seq', lpad(n::text, 10, '0'), 'pad', repeat('x', pad)) $$;
-- one transaction per element of sizes, each inserting that many rows
CREATE OR REPLACE PROCEDURE bench_load_small(prefix text, sizes int[], pad int)
    LANGUAGE plpgsql AS $$
DECLARE
    done bigint := 0;
    s int;
BEGIN
    FOREACH s IN ARRAY sizes LOOP
        INSERT INTO outbox (work_id, kind, payload)
            SELECT prefix || lpad((done + g)::text, 9, '0'), 'bench', bench_payload(done + g, pad)
            FROM generate_series(1, s) AS g;
        done := done + s;
        COMMIT;
    END LOOP;
END $$;
CREATE PUBLICATION bench_pub FOR TABLE outbox;
-- the relay's kind of publication, for the pgoutput contestants: inserts only
CREATE PUBLICATION bench_pgoutput FOR TABLE outbox WITH (publish = 'insert');
"""
PGOUTPUT_PUBLICATION = "bench_pgoutput"


def pad_for(payload_bytes):
    return max(0, payload_bytes - _PAYLOAD_OVERHEAD)


def setup(pg):
    """Create database "bench" with the outbox table and the loading helpers."""
    pg.create_database(DBNAME)
    pg.psql(file=harness.SCHEMA_SQL, dbname=DBNAME)
    pg.psql(SETUP_SQL, dbname=DBNAME)


def small_sizes(rows, txns, seed=103):
    """txns transaction sizes from 1 to 10 that add up to exactly rows
    (deterministic for a seed). Needs txns <= rows <= 10 * txns."""
    if not txns <= rows <= 10 * txns:
        raise ValueError("%d rows cannot be split into %d transactions of 1 to 10 rows"
                         % (rows, txns))
    rng = random.Random(seed)
    sizes = [rng.randint(1, 10) for _ in range(txns)]
    diff = sum(sizes) - rows
    while diff != 0:
        i = rng.randrange(txns)
        if diff > 0 and sizes[i] > 1:
            sizes[i] -= 1
            diff -= 1
        elif diff < 0 and sizes[i] < 10:
            sizes[i] += 1
            diff += 1
    return sizes


def truncate(pg):
    pg.query("TRUNCATE outbox", dbname=DBNAME)


def wal_insert_lsn(pg):
    return harness.parse_lsn(pg.scalar("SELECT pg_current_wal_insert_lsn()::text"))


def load_large(pg, rows, payload_bytes, prefix="L"):
    """rows outbox rows in one transaction. Returns the WAL insert position
    after it: at or past the end of its commit record."""
    pg.query("INSERT INTO outbox (work_id, kind, payload) "
             "SELECT %s || lpad(g::text, 9, '0'), 'bench', bench_payload(g, %s) "
             "FROM generate_series(1, %s) AS g", (prefix, pad_for(payload_bytes), rows),
             dbname=DBNAME)
    return wal_insert_lsn(pg)


def load_small(pg, rows, txns, payload_bytes, prefix="S"):
    """rows outbox rows in txns transactions of 1 to 10 rows. Returns the WAL
    insert position after the last commit (see load_large)."""
    conn = pg.connect(DBNAME)
    try:
        with conn.cursor() as cur:
            # commits need not wait for the WAL flush: loading is not measured
            cur.execute("SET synchronous_commit = off")
            cur.execute("CALL bench_load_small(%s, %s, %s)",
                        (prefix, small_sizes(rows, txns), pad_for(payload_bytes)))
    finally:
        conn.close()
    return wal_insert_lsn(pg)


def sample_row(pg):
    """(work_id, payload text) of one row, to size the bare producer's records."""
    rows = pg.query("SELECT work_id, payload::text FROM outbox LIMIT 1", dbname=DBNAME)
    return rows[0] if rows else None


def payload_text(payload_bytes):
    """The payload text of a row, as PostgreSQL prints the jsonb (for the bare producer)."""
    return '{"pad": "%s", "seq": "0000000001"}' % ("x" * pad_for(payload_bytes))


def create_slot(pg, slot, plugin):
    """A fresh logical slot at the current WAL position (dropped first if it exists)."""
    drop_slot(pg, slot)
    return pg.query("SELECT lsn::text FROM pg_create_logical_replication_slot(%s, %s)",
                    (slot, plugin), dbname=DBNAME)[0][0]


def drop_slot(pg, slot):
    pg.query("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
             "WHERE slot_name = %s", (slot,), dbname=DBNAME)


def confirmed_lsn(pg, slot):
    return pg.confirmed_flush_lsn(slot)


def walsender_pid(pg, slot):
    return pg.scalar("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (slot,))


def commit_times(pg, keys):
    """{work_id: commit time (s since the epoch)} from track_commit_timestamp,
    the same clock for every contestant."""
    out = {}
    keys = list(keys)
    for i in range(0, len(keys), 50000):
        rows = pg.query("SELECT work_id, extract(epoch FROM pg_xact_commit_timestamp(xmin))::float8 "
                        "FROM outbox WHERE work_id = ANY(%s)", (keys[i:i + 50000],), dbname=DBNAME)
        out.update(rows)
    return out


PGBENCH_SCRIPT = """\
INSERT INTO outbox (work_id, kind, payload) VALUES ('R' || lpad(nextval('bench_seq')::text, 9, '0'), 'bench', bench_payload(currval('bench_seq'), {pad}));
"""


def seq_value(pg):
    return pg.scalar("SELECT last_value + CASE WHEN is_called THEN 0 ELSE -1 END FROM bench_seq",
                     dbname=DBNAME)


class Pgbench:
    """pgbench inserting one outbox row per transaction at `rate` per second for
    `duration` seconds (-R schedules the transactions; -M prepared)."""

    def __init__(self, pg, workdir, rate, duration, payload_bytes, clients=8, threads=2):
        self.script = os.path.join(workdir, "insert.sql")
        with open(self.script, "w") as f:
            f.write(PGBENCH_SCRIPT.format(pad=pad_for(payload_bytes)))
        self.argv = [os.path.join(harness.pg.PG_BINDIR, "pgbench"), "-n", "-M", "prepared",
                     "-c", str(clients), "-j", str(threads), "-R", str(rate),
                     "-T", str(duration), "-f", self.script,
                     "-h", pg.host, "-p", str(pg.port), "-U", pg.user, DBNAME]
        self.proc = None
        self.output = ""

    def start(self):
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True,
                                     preexec_fn=procs._child_setup)
        return self

    def wait(self, timeout):
        self.output, _ = self.proc.communicate(timeout=timeout)
        if self.proc.returncode != 0:
            raise RuntimeError("pgbench failed (exit %d):\n%s" % (self.proc.returncode, self.output))
        return self.output

    @property
    def tps(self):
        m = re.search(r"tps = ([0-9.]+)", self.output)
        return float(m.group(1)) if m else None

    @property
    def late(self):
        """Transactions that started more than 1 ms behind schedule (pgbench's own count), if told."""
        m = re.search(r"number of transactions above the [0-9.]+ ms latency limit: (\d+)", self.output)
        return int(m.group(1)) if m else None
