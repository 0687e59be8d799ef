/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A PostgreSQL MVCC snapshot as pg_current_snapshot() returns it (type
 * pg_snapshot, PostgreSQL 13 and later; txid_current_snapshot() before),
 * and whether a committed transaction is visible in it.
 *
 * The text form (PostgreSQL's xid8funcs.c, pg_snapshot_out()) is
 * "xmin:xmax:xip,xip,...": full 64-bit transaction IDs (epoch and xid),
 * xmin the oldest transaction still running, xmax one past the newest
 * assigned, and the in-progress ones between them (top-level only). A
 * transaction is in progress for the snapshot if its ID is at or past
 * xmax or listed; otherwise it has ended, and a committed one is visible.
 *
 * Why the relay needs it: a commit record is flushed, and decoded and sent
 * by the walsender, before the committing backend leaves the process array
 * (PostgreSQL's xact.c: RecordTransactionCommit() flushes, then waits for
 * synchronous standbys, then ProcArrayEndTransaction()). Until then other
 * sessions do not see its changes, a catalog change included.
 *
 * Pure: no I/O.
 */
#ifndef RELAY_PGSNAPSHOT_H
#define RELAY_PGSNAPSHOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pg_snapshot {
        uint64_t xmin, xmax;    /* full transaction IDs */
        uint64_t *xip;          /* in progress, ascending; owned */
        size_t nxip;
};

/*
 * pgsnap_parse() - @text (NUL-terminated, as above) into *@ret, its xip
 * list allocated (free with pgsnap_free()). Returns 0, -EINVAL for text
 * that is not a snapshot (*@ret left empty), or -ENOMEM.
 */
int pgsnap_parse(const char *text, struct pg_snapshot *ret);

/* pgsnap_free() - the xip list; NULL-safe, and the snapshot is empty after. */
void pgsnap_free(struct pg_snapshot *s);

/*
 * pgsnap_ended() - whether the transaction of 32-bit ID @xid (as logical
 * decoding gives it: wal2json's "xid", pgoutput's Begin) has ended for @s:
 * before xmin, or before xmax and not listed. @xid must have been assigned
 * before the snapshot was taken (a decoded commit's is): its epoch is then
 * xmax's or the one before.
 */
bool pgsnap_ended(const struct pg_snapshot *s, uint32_t xid);

/*
 * pgsnap_before_xmin() - whether the transaction of 32-bit ID @xid, any
 * transaction or subtransaction, ended before the snapshot @s was taken,
 * as far as the snapshot alone can tell: its ID precedes xmin. Between
 * xmin and xmax an ID that is not listed may still be a running
 * subtransaction (the list holds top-level IDs only), so it is not
 * counted as ended. For an ID a row holds (a catalog row's xmax): it is
 * within 2^31 of xmin (PostgreSQL freezes older ones before wraparound), so
 * the comparison is modulo 2^32, as TransactionIdPrecedes() in
 * PostgreSQL's transam.c; IDs 1 and 2 (bootstrap, frozen) precede every
 * other.
 */
bool pgsnap_before_xmin(const struct pg_snapshot *s, uint32_t xid);

#endif
