# SPDX-License-Identifier: Apache-2.0
"""Small helpers shared by the integration tests (writing outbox rows in one
transaction and remembering the LSNs and xid around its commit, indexing the
records read back)."""

import collections
import json
import os
import re
from dataclasses import dataclass

from harness import parse_lsn, wait_until

CE_HEADERS = ("ce_specversion", "ce_id", "ce_type", "ce_source", "ce_time", "content-type",
              "ce_pglsn", "ce_pgxid")
RFC3339_US = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


@dataclass
class Commit:
    xid: int                # txid_current() of the transaction (epoch included)
    lsn_before: int         # pg_current_wal_lsn() inside the transaction, just before COMMIT
    lsn_after: int          # pg_current_wal_lsn() right after COMMIT returned
    work_ids: list

    @property
    def xid32(self):
        """The 32-bit xid that WAL (and wal2json) carry."""
        return self.xid & 0xFFFFFFFF


def insert_rows(conn, rows, commit=True, extra_sql=()):
    """Insert rows (dicts of outbox columns) in one transaction on conn
    (autocommit off) and commit or roll back. Returns a Commit."""
    cur = conn.cursor()
    cur.execute("SELECT txid_current()")
    xid = cur.fetchone()[0]
    for r in rows:
        cols = list(r.keys())
        cur.execute("INSERT INTO outbox (%s) VALUES (%s)"
                    % (", ".join(cols), ", ".join(["%s"] * len(cols))),
                    [json.dumps(v) if isinstance(v, (dict, list)) else v for v in r.values()])
    for sql in extra_sql:
        cur.execute(sql)
    cur.execute("SELECT pg_current_wal_lsn()::text")
    before = parse_lsn(cur.fetchone()[0])
    if commit:
        conn.commit()
    else:
        conn.rollback()
    cur.execute("SELECT pg_current_wal_lsn()::text")
    after = parse_lsn(cur.fetchone()[0])
    conn.commit()
    return Commit(xid, before, after, [r["work_id"] for r in rows])


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
    try:
        return wait_until(reached, timeout, interval=0.1,
                          what="confirmed_flush_lsn >= %X/%X" % (lsn >> 32, lsn & 0xFFFFFFFF))
    except TimeoutError as e:
        c = case.confirmed(slot)
        raise AssertionError("%s (it is %s)" % (e, None if c is None else
                                                 "%X/%X" % (c >> 32, c & 0xFFFFFFFF)))


def write_file(path, text, mode=0o600):
    """Write text to path with mode (settings files hold secrets); returns str(path)."""
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    return str(path)


def read_file(path):
    """The text of path, or "" if it does not exist (yet)."""
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""
