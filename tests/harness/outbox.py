# SPDX-License-Identifier: Apache-2.0
"""Writing outbox rows and reading them back, as every integration test does:
rows inserted in one transaction with the LSNs and xid around its commit,
the records read back indexed by work ID, and bounded waits until rows
arrive and the slot confirms them.

A `case` here is the integration suite's per-test Case (conftest.py): it has
confirmed(slot) and logs()."""

import collections
import json
import re
from dataclasses import dataclass

from .pg import format_lsn, parse_lsn
from .procs import wait_until

CE_HEADERS = ("ce_specversion", "ce_id", "ce_type", "ce_source", "ce_time", "content-type",
              "ce_pglsn", "ce_pgxid")
RFC3339_US = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


@dataclass
class Commit:
    xid: int                # txid_current() of the transaction (epoch included)
    lsn_before: int         # pg_current_wal_lsn() inside the transaction, just before COMMIT
    lsn_after: int          # pg_current_wal_lsn() right after COMMIT returned
    work_ids: list
    # pg_current_wal_insert_lsn() just before COMMIT. pg_current_wal_lsn() is
    # the write position, which can trail the transaction's own records still
    # in WAL buffers; the commit record starts at or after this one. A slot
    # confirmed at most here has not passed the transaction, although a
    # relay may confirm past lsn_before: a keepalive for other databases'
    # commits written meanwhile moves an idle slot (seen with a 2 MB row).
    lsn_pre_commit: int = 0

    @property
    def xid32(self):
        """The 32-bit xid that WAL (and wal2json) carry."""
        return self.xid & 0xFFFFFFFF


def in_transaction(conn, statements, commit=True, work_ids=()):
    """Run (sql, params) statements (params None: sql as is) in one
    transaction on conn (autocommit off), then commit or roll back. Returns
    (Commit with work_ids, [first column of each statement's first row, or
    None])."""
    cur = conn.cursor()
    cur.execute("SELECT txid_current()")
    xid = cur.fetchone()[0]
    results = []
    for sql, params in statements:
        cur.execute(sql, params)
        results.append(cur.fetchone()[0] if cur.description else None)
    cur.execute("SELECT pg_current_wal_lsn()::text, pg_current_wal_insert_lsn()::text")
    before, pre_commit = (parse_lsn(v) for v in cur.fetchone())
    if commit:
        conn.commit()
    else:
        conn.rollback()
    cur.execute("SELECT pg_current_wal_lsn()::text")
    after = parse_lsn(cur.fetchone()[0])
    conn.commit()
    return Commit(xid, before, after, list(work_ids), pre_commit), results


def insert_rows(conn, rows, commit=True, extra_sql=()):
    """Insert rows (dicts of outbox columns) in one transaction on conn
    (autocommit off), then extra_sql, and commit or roll back. Returns a Commit."""
    statements = [("INSERT INTO outbox (%s) VALUES (%s)"
                   % (", ".join(r.keys()), ", ".join(["%s"] * len(r))),
                   [json.dumps(v) if isinstance(v, (dict, list)) else v for v in r.values()])
                  for r in rows]
    statements += [(sql, None) for sql in extra_sql]
    return in_transaction(conn, statements, commit, [r["work_id"] for r in rows])[0]


def simple_rows(prefix, n, kind="order_received", start=0):
    return [{"work_id": "%s-%d" % (prefix, i), "kind": kind,
             "payload": {"n": i, "note": "row %d of %s" % (i, prefix)}}
            for i in range(start, start + n)]


def by_id(records):
    """work ID (ce_id header) -> list of records with it."""
    out = collections.defaultdict(list)
    for r in records:
        out[r.header("ce_id")].append(r)
    return out


def has_ids(ids):
    ids = set(ids)
    return lambda records: ids <= {r.header("ce_id") for r in records}


def wait_confirmed(case, lsn, timeout=30, slot=None):
    """Wait until the slot's confirmed_flush_lsn >= lsn; returns it."""
    def reached():
        c = case.confirmed(slot)
        return c if c is not None and c >= lsn else None

    def what():
        c = case.confirmed(slot)
        return "confirmed_flush_lsn >= %s (it is %s)" % (format_lsn(lsn),
                                                         None if c is None else format_lsn(c))
    return wait_until(reached, timeout, interval=0.1, what=what)


def read_while_alive(reader, relay, until, timeout):
    """reader.read_until(until), but give up as soon as the relay has exited
    (a relay that stopped will not publish what is missing). Returns whether
    until held."""
    reader.read_until(lambda recs: until(recs) or not relay.alive, timeout)
    if not until(reader.records) and not relay.alive:
        reader.drain(timeout=10)
    return until(reader.records)


def arrive_and_confirm(case, reader, relay, ids, timeout=30):
    """Read until the rows of work IDs ids arrived (failing at once if the relay
    exited) and wait until the slot confirmed the newest of their
    transactions; returns the records by work ID."""
    assert read_while_alive(reader, relay, has_ids(ids), timeout), \
        "rows %s did not arrive\n%s" % (
            sorted(set(ids) - {r.header("ce_id") for r in reader.records}), case.logs())
    assert relay.alive, relay.log
    got = by_id(reader.records)
    wait_confirmed(case, max(parse_lsn(r.header("ce_pglsn")) for i in ids for r in got[i]))
    return got


def delivered_and_confirmed(case, reader, ids, timeout=60):
    """Read until the rows of work IDs ids arrived and wait until the slot
    confirmed the newest transaction of everything read so far; returns that
    LSN."""
    assert reader.read_until(has_ids(ids), timeout), "rows did not arrive\n" + case.logs()
    last = max(parse_lsn(r.header("ce_pglsn")) for r in reader.records)
    wait_confirmed(case, last, timeout=timeout)
    return last


# The walsender streams a transaction once its changes pass this (PostgreSQL's least).
SMALL_WORK_MEM = "-c logical_decoding_work_mem=64kB"
# Changes of a table outside the publication: about 90kB, past SMALL_WORK_MEM.
FILLER = "INSERT INTO filler SELECT g, repeat('x', 200) FROM generate_series(1, 400) g"


def stream_stats(case):
    """(stream_txns, spill_txns) of the case's slot in pg_stat_replication_slots."""
    rows = case.query("SELECT stream_txns, spill_txns FROM pg_stat_replication_slots WHERE slot_name = %s",
                      (case.slot,))
    return rows[0] if rows else (0, 0)


def large_transaction(case, reader, relay, message_first=False, outbox_message=False, streamed=True):
    """One transaction larger than SMALL_WORK_MEM, open while another
    commits: a row, a savepoint (a logical message of another application
    first when @message_first) whose row is streamed and then rolled back,
    a row (and an outbox_emit() message with @outbox_message, for a relay
    with --message-prefix=outbox) after it. Then: every committed row
    arrives once and is confirmed, the rolled-back one nowhere, and the
    large transaction's records carry its end LSN, after the other's. With
    @streamed, pg_stat_replication_slots counts it streamed and nothing
    spilled. For a relay started with PGOPTIONS set to SMALL_WORK_MEM and
    --plugin=pgoutput."""
    case.query("CREATE TABLE IF NOT EXISTS filler (id int, note text)")
    big = case.connect(autocommit=False)
    cur = big.cursor()
    cur.execute("INSERT INTO outbox (work_id, kind, payload) VALUES ('big-1', 'order_received', '{}')")
    cur.execute(FILLER)
    cur.execute("SAVEPOINT s1")
    if message_first:
        cur.execute("SELECT pg_logical_emit_message(true, 'other-app', 'taken back')")
    cur.execute("INSERT INTO outbox (work_id, kind, payload) VALUES ('rolled-back', 'order_received', '{}')")
    cur.execute(FILLER)
    cur.execute("ROLLBACK TO SAVEPOINT s1")
    case.query("INSERT INTO outbox (work_id, kind, payload) VALUES ('between', 'order_received', '{}')")
    cur.execute("INSERT INTO outbox (work_id, kind, payload) VALUES ('big-2', 'order_received', '{}')")
    if outbox_message:
        cur.execute("SELECT outbox_emit('big-msg', 'order_received', '{}')")
    cur.execute(FILLER)
    big.commit()
    big.close()
    ids = ["between", "big-1", "big-2"] + (["big-msg"] if outbox_message else [])
    assert read_while_alive(reader, relay, has_ids(ids), 60), relay.log
    wait_confirmed(case, max(parse_lsn(r.header("ce_pglsn")) for r in reader.records))
    reader.drain(timeout=2)
    got = sorted(r.header("ce_id") for r in reader.records)
    assert got == sorted(ids), got
    lsn = {k: parse_lsn(v[0].header("ce_pglsn")) for k, v in by_id(reader.records).items()}
    assert lsn["big-1"] == lsn["big-2"] == lsn.get("big-msg", lsn["big-1"]) > lsn["between"], lsn
    if streamed:
        streamed, spilled = wait_until(lambda: stream_stats(case)[0] and stream_stats(case), 30,
                                       what="the walsender to count a streamed transaction")
        assert streamed >= 1 and spilled == 0, (streamed, spilled)
